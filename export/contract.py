"""What an edgegcl ONNX encoder looks like from outside: tensor names and metadata keys.

The exporter (``edgegcl.onnx.export``) writes models to this contract and the runtime
(``export.runtime``) reads them by it, so the two cannot drift apart.

Interface 2 (``edgegcl.interface = 2``, written since issue 15, the base of interface 3):
the file holds the encoder's *dense stages*, every one row-wise (a node's output row depends on
its input row only); the sparse aggregation A_hat = D^-1/2 (A + I) D^-1/2 between them is left
to the runtime, which multiplies by A_hat as a CSR matrix without [E, d] message buffers, on
every core. With k layers:

- ``z0 = stage0(x)`` when the model has an input ``x`` (layer 1 transforms first), else
  ``z0 = x`` (layer 1 aggregates first, at the input width);
- for j = 1..k: ``a{j} = A_hat z{j-1}`` and ``z{j} = stage_j(a{j})``: inputs ``a1`` .. ``ak``,
  outputs ``z0`` (when ``x`` is an input), ``z1`` .. ``z{k-1}`` and ``embeddings`` (= z_k).

Every input is float32 [rows, width] with a dynamic number of rows; a run may feed zero rows
to the stages it does not need. A node's degree (1 + its in-edges that are not self-loops,
input self-loops replaced by one loop per node, as PyG's ``gcn_norm`` does) is counted on the
*whole* graph, which is what makes embedding a k-hop subgraph exact.

Interface 3 (``edgegcl.interface = 3``, the current one) is interface 2 plus the matrix W1
that stage 0 multiplies x by, as outputs, when the model has stage 0: a runtime given sparse
features computes ``z0 = x W1`` itself as a sparse product over x's nonzeros instead of a
dense MatMul. An fp32 file has the output ``w1`` float32 [in_dim, width]; an INT8 file has its
int8 weight as ``w1_quantized`` int8 [in_dim, width], ``w1_scale`` float32 and
``w1_zero_point`` int8, with W1 = (w1_quantized - w1_zero_point) * w1_scale in float32 (what
ONNX's DequantizeLinear computes), so the runtime dequantises once instead of every run
computing it. They depend on no input (Identity nodes of initializers, free to run): the
runtime fetches them once when it opens the file. Interface-2 files work unchanged; they only
lack this sparse fast path.

Interface 1 (files written before issue 15, no ``edgegcl.interface`` key): one graph with
inputs ``x`` float32 [num_nodes, in_dim], ``edge_index`` int64 [2, num_edges] (row 0 source,
row 1 target) and ``deg`` float32 [num_nodes], output ``embeddings``; it aggregates with
ScatterND, which onnxruntime's CPU kernel runs correctly on one thread only. The runtime still
loads such files and runs them that way.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields

INTERFACE = 3

INPUT_X = "x"
OUTPUT = "embeddings"

# Interface 3 and later, models with stage 0 only: the matrix stage 0 multiplies x by, as
# float32 (fp32 files), or as int8 weight, scale and zero point (INT8 files).
STAGE0_WEIGHT = "w1"
STAGE0_WEIGHT_INT8 = ("w1_quantized", "w1_scale", "w1_zero_point")

# Interface 1 only.
INPUT_EDGE_INDEX = "edge_index"
INPUT_DEG = "deg"

# Metadata keys (ONNX ``metadata_props``), all prefixed so they never clash with other tools'.
PREFIX = "edgegcl."


def aggregate_input(j: int) -> str:
    """Name of stage j's input, A_hat times stage j-1's output (j = 1..k)."""
    return f"a{j}"


def stage_output(j: int, num_layers: int) -> str:
    """Name of stage j's output (j = 0..k); the last one is the embeddings."""
    return OUTPUT if j == num_layers else f"z{j}"


@dataclass(frozen=True)
class ModelMetadata:
    """The ``edgegcl.*`` metadata of an exported encoder (values are strings in the file).

    ``num_layers`` is k, the hops a node's embedding depends on (k-hop batching needs it);
    ``feature_preprocessing`` says what training did to ``x`` before the encoder saw it, so
    a device can feed features the same way; ``config_sha256`` identifies the training
    configuration (SHA-256 of its canonical JSON); ``precision`` is fp32 or int8;
    ``interface`` is the contract version above (1 when the key is absent: older files).
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
    interface: int = 1

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
                if f.default is not MISSING:
                    continue
                raise KeyError(key)
            try:
                values[f.name] = int(props[key]) if f.type == "int" else props[key]
            except ValueError:
                raise ValueError(f"{key}={props[key]!r} is not an integer") from None
        return cls(**values)  # type: ignore[arg-type]
