"""What an edgegcl ONNX encoder looks like from outside: tensor names and metadata keys.

The exporter (``edgegcl.onnx.export``) writes models to this contract and the runtime
(``edgegcl_embed.runtime``) reads them by it, so the two cannot drift apart.

Interface 6 (``edgegcl.interface = 6``), the layout of every file ``edgegcl export`` writes:
one graph of standard ONNX ops with inputs ``x`` float32 [num_nodes, in_dim] and
``edge_index`` int64 [2, num_edges] (row 0 source, row 1 target) and the output
``embeddings``, which any ONNX runtime runs alone. It aggregates with a Loop over each node's
entries (``edgegcl.onnx.portable``; no scatter with a reduction, so every thread count gives
the same numbers).

Inside, the graph is the encoder's *dense stages*, every one row-wise (a node's output row
depends on its input row only), between multiplications by A_hat = D^-1/2 (A + I) D^-1/2. With
k layers:

- ``z0 = stage0(x)`` when layer 1 transforms first, else ``z0 = x`` (layer 1 aggregates
  first, at the input width);
- for j = 1..k: ``a{j} = A_hat z{j-1}`` and ``z{j} = stage_j(a{j})`` (``z{k}`` is
  ``embeddings``).

Each of these tensors is declared in the graph's value_info, so this runtime cuts the file into
a model of its dense stages (``edgegcl_embed.stages``: inputs ``x`` when stage 0 exists and
``a1`` .. ``ak``, outputs ``z0`` .. ``z(k-1)`` and ``embeddings``, every one float32 [rows,
width] with a dynamic number of rows; a run may feed zero rows to the stages it does not need)
and aggregates with its own CSR kernels, without [E, d] message buffers. A node's degree (1 +
its in-edges that are not self-loops, input self-loops replaced by one loop per node, as PyG's
``gcn_norm`` does) is counted on the *whole* graph, which is what makes embedding a k-hop
subgraph exact.

Carried tensors: a stage may hand the next a row-wise tensor without aggregation (a node's own
representation in the ego encoder, a running sum over hops in the polynomial filter). Stage j
then outputs ``r{j}`` (``carry_output``) besides ``z{j}``; the graph passes it on unchanged as
``s{j+1}`` (``carry_input``, an Identity), which stage j + 1 takes besides ``a{j+1}``.

Stage 0's weight: when stage 0 is x W1 (+ bias and activation), W1 is the initializer
``STAGE0_INITIALIZER`` (INT8: its ``STAGE0_INITIALIZERS`` triple), and the cut model exposes it
as the outputs ``w1`` (fp32) or ``w1_quantized``, ``w1_scale``, ``w1_zero_point`` (INT8, W1 =
(w1_quantized - w1_zero_point) * w1_scale in float32, what ONNX's DequantizeLinear computes),
so that a runtime given sparse features computes ``z0 = x W1`` as a sparse product over x's
nonzeros. They depend on no input (Identity nodes of initializers): the runtime fetches them
once when it opens the file. A stage 0 that is more than x W1 (the ego and polynomial encoders)
exposes nothing and runs dense.

A file of another interface (or without the key) was written by an earlier edgegcl and is
refused in one line that says to re-export it (``OutdatedModel``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial

from .columns import FeatureColumns
from .errors import shown
from .graph import EDGE_READINGS

INTERFACE = 6

INPUT_X = "x"
OUTPUT = "embeddings"

# The cut model's outputs of the matrix stage 0 multiplies x by, as float32 (fp32 files), or as
# int8 weight, scale and zero point (INT8 files).
STAGE0_WEIGHT = "w1"
STAGE0_WEIGHT_INT8 = ("w1_quantized", "w1_scale", "w1_zero_point")

# The initializers holding stage 0's weight in the file, by the cut model's output that
# exposes each.
STAGE0_INITIALIZER = "stage0_weight"
STAGE0_INITIALIZERS = {STAGE0_WEIGHT: STAGE0_INITIALIZER, **{
    out: STAGE0_INITIALIZER + out.removeprefix(STAGE0_WEIGHT) for out in STAGE0_WEIGHT_INT8}}

INPUT_EDGE_INDEX = "edge_index"

# The link scorer an edge-objective link run exports beside its encoder (``edgegcl export
# --scorer``): inputs the two embeddings of each pair, float32 [pairs, out_dim], output one
# logit per pair, float32 [pairs] (higher: more likely linked).
SCORER_INPUTS = ("z_u", "z_v")
SCORER_OUTPUT = "logits"

# Metadata keys (ONNX ``metadata_props``), all prefixed so they never clash with other tools'.
PREFIX = "edgegcl."


def aggregate_input(j: int) -> str:
    """Name of stage j's input, A_hat times stage j-1's output (j = 1..k)."""
    return f"a{j}"


def stage_output(j: int, num_layers: int) -> str:
    """Name of stage j's output (j = 0..k); the last one is the embeddings."""
    return OUTPUT if j == num_layers else f"z{j}"


def carry_output(j: int) -> str:
    """Name of the tensor stage j carries to stage j + 1 unaggregated."""
    return f"r{j}"


def carry_input(j: int) -> str:
    """Name of stage j's carried input: stage j - 1's ``carry_output``."""
    return f"s{j}"


class OutdatedModel(ValueError):
    """A model file of an interface other than ``INTERFACE`` (written by an earlier edgegcl)."""

    def __init__(self, interface: str | None) -> None:
        found = "no interface key" if interface is None else f"interface {shown(interface[:20])}"
        super().__init__(f"it has {found}; this edgegcl reads interface {INTERFACE}")


@dataclass(frozen=True)
class ModelMetadata:
    """The ``edgegcl.*`` metadata of an exported encoder (values are strings in the file).

    ``num_layers`` is k, the hops a node's embedding depends on (k-hop batching needs it);
    ``feature_preprocessing`` says what training did to ``x`` before the encoder saw it, so
    a device can feed features the same way; ``config_sha256`` identifies the training
    configuration (SHA-256 of its canonical JSON); ``precision`` is fp32 or int8;
    ``quantization`` says how an INT8 file was quantised ("none" for fp32); ``encoder`` names
    the built-in encoder (edgegcl.nn.family); ``features`` what x's columns are (the
    JSON of edgegcl_embed.columns.FeatureColumns: a node table's columns by name and width,
    structural features, or a matrix), so that a table is fed to the model by column name;
    ``edges`` how the training run read a graph's edges (its ``--edges``: auto, undirected or
    directed), so that edgegcl-embed reads them so unless told otherwise; ``interface`` is the
    contract version above.
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
    quantization: str
    encoder: str
    features: str
    edges: str
    interface: int = INTERFACE

    @property
    def feature_columns(self) -> FeatureColumns:
        """What x's columns are (``features``, checked when the metadata was read)."""
        return FeatureColumns.from_text(self.features)

    def to_props(self) -> dict[str, str]:
        """The metadata as ONNX ``metadata_props`` entries."""
        return {PREFIX + f.name: str(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_props(cls, props: dict[str, str]) -> ModelMetadata:
        """Parse ``metadata_props``: OutdatedModel for an edgegcl file of another interface,
        then KeyError / ValueError naming a missing or malformed key."""
        edgegcl = any(key.startswith(PREFIX) for key in props)
        if edgegcl and props.get(PREFIX + "interface") != str(INTERFACE):
            raise OutdatedModel(props.get(PREFIX + "interface"))
        values: dict[str, object] = {}
        for f in fields(cls):
            key = PREFIX + f.name
            if key not in props:
                raise KeyError(key)
            try:
                values[f.name] = int(props[key]) if f.type == "int" else props[key]
            except ValueError:
                raise ValueError(f"{key}={props[key][:40]!r} is not an integer") from None
        meta = cls(**values)  # type: ignore[arg-type]
        if meta.edges not in EDGE_READINGS:
            raise ValueError(f"{PREFIX}edges={meta.edges[:40]!r} is not one of "
                             f"{', '.join(EDGE_READINGS)}")
        width = meta.feature_columns.width  # ValueError naming what does not hold
        if width not in (None, meta.in_dim):
            raise ValueError(f"{PREFIX}features names feature columns {width} values wide, "
                             f"but {PREFIX}in_dim is {meta.in_dim}")
        return meta

    def graph_problem(self, inputs: dict[str, list], outputs: dict[str, list],
                      file_bytes: int, cut: bool = False) -> str | None:
        """What in a model's graph contradicts this metadata, or None when nothing does.

        ``inputs`` and ``outputs`` map the model's tensor names to their shapes as onnxruntime
        reports them (inferred from the weights, so they cannot be forged apart from them);
        ``file_bytes`` is the model file's size; ``cut``: the graph is the file's dense
        stages (the runtime's cut), else the whole file. Every number is checked before the
        runtime sizes anything by it: the layers are the stages the graph has, in_dim and
        out_dim are the widths of its first input and of the embeddings, consecutive stages
        agree on their widths (carried tensors too), and no width exceeds the file's bytes
        (every width is the length of a weight or bias stored in the file).
        """

        width = partial(_width, file_bytes=file_bytes)
        k, has_x = self.num_layers, INPUT_X in inputs
        stages = 0  # aggregated inputs a1..ak (the stages' layout)
        while aggregate_input(stages + 1) in inputs:
            stages += 1
        carried = [j for j in range(1, stages + 1) if carry_input(j) in inputs]
        names = ({aggregate_input(j) for j in range(1, max(stages, 1) + 1)}
                 | ({INPUT_X} & inputs.keys()) | {carry_input(j) for j in carried}
                 if cut else {INPUT_X, INPUT_EDGE_INDEX})
        if set(inputs) != names:
            found = ", ".join(shown(name) for name in sorted(inputs)[:10]) or "none"
            return (f"its inputs are {found}, not {', '.join(sorted(names))} (edgegcl "
                    f"interface {INTERFACE}{', cut into its stages' if cut else ''})")
        if not cut:  # layers inside one graph: each stores >= 4 bytes
            if not 1 <= k <= file_bytes // 4:
                return (f"{PREFIX}num_layers={k} but a {file_bytes}-byte file holds 1.."
                        f"{file_bytes // 4} layers")
            first, chain = INPUT_X, []
        else:
            if k != stages:
                return f"{PREFIX}num_layers={k} but the graph has {stages} aggregated inputs"
            first = INPUT_X if has_x else aggregate_input(1)
            # stage j >= 1 takes A_hat z_{j-1}: its input is as wide as stage j-1's output;
            # a carried input is stage j-1's carried output, as it is
            chain = [(aggregate_input(j), stage_output(j - 1, k))
                     for j in range(1 if has_x else 2, k + 1)]
            chain += [(carry_input(j), carry_output(j - 1)) for j in carried]
        for name, declared in ((first, self.in_dim), (OUTPUT, self.out_dim)):
            found = width(name, inputs if name == first else outputs)
            if found != declared:
                return found if isinstance(found, str) else (
                    f"{name} is {found} wide but the metadata says {declared}")
        return _chain_problem(chain, inputs, outputs, width)


def _width(name: str, table: dict[str, list], file_bytes: int) -> int | str:
    """Tensor ``name``'s width in ``table`` (name -> shape), or why it has none that the file
    can hold: [rows, width] with 1 <= width <= the file's bytes."""
    shape = table.get(name)
    if shape is None:
        return f"it has no tensor {name}"
    if len(shape) != 2 or not isinstance(shape[1], int) or not 1 <= shape[1] <= file_bytes:
        return (f"{name} has shape {shown(str(shape))}, not [rows, width] with a width "
                f"of at most the file's {file_bytes} bytes")
    return shape[1]


def _chain_problem(chain: list[tuple[str, str]], inputs: dict[str, list],
                   outputs: dict[str, list], width: Callable[..., int | str]) -> str | None:
    """The first stage input (aggregated or carried) whose width is not its source
    output's, or None."""
    for into, source in chain:
        a, z = width(into, inputs), width(source, outputs)
        for found in (a, z):
            if isinstance(found, str):
                return found
        if a != z:
            verb = "carries" if into.startswith("s") else "aggregates"
            return f"{into} is {a} wide but {source}, which it {verb}, is {z}"
    return None
