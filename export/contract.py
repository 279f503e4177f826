"""What an edgegcl ONNX encoder looks like from outside: tensor names and metadata keys.

The exporter (``edgegcl.onnx.export``) writes models to this contract and the runtime
(``export.runtime``) reads them by it, so the two cannot drift apart.

Inputs: ``x`` float32 [num_nodes, in_dim]; ``edge_index`` int64 [2, num_edges] (row 0 source,
row 1 target, messages flow source -> target); ``deg`` float32 [num_nodes], each node's GCN
degree: 1 (its self-loop) + the number of edges into it that are not self-loops, counted on the
*whole* graph. The model computes the normalisation D^-1/2 (A + I) D^-1/2 from ``deg`` inside
the graph. Passing the degree in, instead of counting it from ``edge_index``, is what makes
embedding a k-hop subgraph exact: nodes at the subgraph's edge keep their full-graph degree.
Output: ``embeddings`` float32 [num_nodes, out_dim].
"""

from __future__ import annotations

from dataclasses import dataclass, fields

INPUT_X = "x"
INPUT_EDGE_INDEX = "edge_index"
INPUT_DEG = "deg"
OUTPUT = "embeddings"

# Metadata keys (ONNX ``metadata_props``), all prefixed so they never clash with other tools'.
PREFIX = "edgegcl."


@dataclass(frozen=True)
class ModelMetadata:
    """The ``edgegcl.*`` metadata of an exported encoder (values are strings in the file).

    ``num_layers`` is k, the hops a node's embedding depends on (k-hop batching needs it);
    ``feature_preprocessing`` says what training did to ``x`` before the encoder saw it, so
    a device can feed features the same way; ``config_sha256`` identifies the training
    configuration (SHA-256 of its canonical JSON); ``precision`` is fp32 or int8.
    """

    version: str
    in_dim: int
    out_dim: int
    num_layers: int
    activation: str
    feature_preprocessing: str
    config_sha256: str
    dataset: str
    precision: str

    def to_props(self) -> dict[str, str]:
        """The metadata as ONNX ``metadata_props`` entries."""
        return {PREFIX + f.name: str(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_props(cls, props: dict[str, str]) -> ModelMetadata:
        """Parse ``metadata_props``; KeyError/ValueError name a missing or malformed key."""
        values: dict[str, object] = {}
        for f in fields(cls):
            key = PREFIX + f.name
            if key not in props:
                raise KeyError(key)
            try:
                values[f.name] = int(props[key]) if f.type == "int" else props[key]
            except ValueError:
                raise ValueError(f"{key}={props[key]!r} is not an integer") from None
        return cls(**values)  # type: ignore[arg-type]
