"""What an edgegcl ONNX encoder looks like from outside: tensor names and metadata keys.

The exporter (``edgegcl.onnx.export``) writes models to this contract and the runtime
(``edgegcl_embed.runtime``) reads them by it, so the two cannot drift apart.

Interface 2 (``edgegcl.interface = 2``, an older one, the base of interface 3):
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

Interface 3 (``edgegcl.interface = 3``, an older one) is interface 2 plus the matrix W1
that stage 0 multiplies x by, as outputs, when the model has stage 0: a runtime given sparse
features computes ``z0 = x W1`` itself as a sparse product over x's nonzeros instead of a
dense MatMul. An fp32 file has the output ``w1`` float32 [in_dim, width]; an INT8 file has its
int8 weight as ``w1_quantized`` int8 [in_dim, width], ``w1_scale`` float32 and
``w1_zero_point`` int8, with W1 = (w1_quantized - w1_zero_point) * w1_scale in float32 (what
ONNX's DequantizeLinear computes), so the runtime dequantises once instead of every run
computing it. They depend on no input (Identity nodes of initializers, free to run): the
runtime fetches them once when it opens the file. Interface-2 files work unchanged; they only
lack this sparse fast path.

Interface 4 (``edgegcl.interface = 4``, the GCN's): the
*portable* model, one graph of standard ONNX ops with inputs ``x`` float32 [num_nodes, in_dim]
and ``edge_index`` int64 [2, num_edges] (row 0 source, row 1 target) and the output
``embeddings``, which any ONNX runtime runs alone. It aggregates with a Loop over each node's
entries (``edgegcl.onnx.portable``; no scatter with a reduction, so every thread count gives
the same numbers). Inside, the tensors keep interface 3's names (``z0`` .. ``z(k-1)``,
``a1`` .. ``ak``, each declared in the graph's value_info) and stage 0's weight is the
initializer ``STAGE0_INITIALIZER`` (INT8: its ``STAGE0_INITIALIZERS`` triple), so this runtime
cuts the file back into an interface-3 model of its dense stages (``edgegcl_embed.stages``) and
aggregates with its own CSR kernels.

Interface 5 (``edgegcl.interface = 5``, the current one for encoders with an ego path or a
polynomial filter; the GCN's files stay interface 4, which older runtimes read) is interface 4
plus *carried* tensors: row-wise tensors a stage hands to the next without aggregation (a
node's own representation, a running sum over hops). Stage j may output ``r{j}``
(``carry_output``) besides ``z{j}``; the portable graph passes it on unchanged as ``s{j+1}``
(``carry_input``, an Identity), which stage j + 1 takes besides ``a{j+1}``. Cut into its stages,
stage j's inputs are ``a{j}`` (``x`` for stage 0) and ``s{j}`` when stage j - 1 carries, and the
runtime feeds rows of the carried tensor to stage j with the same rows of ``a{j}``. Such a
file exposes no W1 (its stage 0 is more than x W1): its first layer runs dense.

Interface 1 (the first files, no ``edgegcl.interface`` key): one graph with
inputs ``x`` float32 [num_nodes, in_dim], ``edge_index`` int64 [2, num_edges] (row 0 source,
row 1 target) and ``deg`` float32 [num_nodes], output ``embeddings``; it aggregates with
ScatterND, which onnxruntime's CPU kernel runs correctly on one thread only. The runtime
refuses such files (their shapes cannot be bounded: edgegcl_embed.bounds); re-export them.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields

from .errors import shown

INTERFACE = 5
PORTABLE = 4  # the first interface whose file runs alone (x, edge_index -> embeddings)
CARRIES = 5  # the first interface whose stages may carry tensors to the next

INPUT_X = "x"
OUTPUT = "embeddings"

# Interface 3 and later, models with stage 0 only: the matrix stage 0 multiplies x by, as
# float32 (fp32 files), or as int8 weight, scale and zero point (INT8 files).
STAGE0_WEIGHT = "w1"
STAGE0_WEIGHT_INT8 = ("w1_quantized", "w1_scale", "w1_zero_point")

# Interface 4: the initializers holding stage 0's weight, by the interface-3 output that
# exposes each once the runtime cut the file into its stages.
STAGE0_INITIALIZER = "stage0_weight"
STAGE0_INITIALIZERS = {STAGE0_WEIGHT: STAGE0_INITIALIZER, **{
    out: STAGE0_INITIALIZER + out.removeprefix(STAGE0_WEIGHT) for out in STAGE0_WEIGHT_INT8}}

# Interfaces 1 and 4 (interface 1 also takes deg).
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


def carry_output(j: int) -> str:
    """Name of the tensor stage j carries to stage j + 1 unaggregated (interface 5)."""
    return f"r{j}"


def carry_input(j: int) -> str:
    """Name of stage j's carried input: stage j - 1's ``carry_output`` (interface 5)."""
    return f"s{j}"


def is_portable(interface: int) -> bool:
    """Whether files of ``interface`` are one graph that runs alone (interfaces 4 and 5)."""
    return interface >= PORTABLE


@dataclass(frozen=True)
class ModelMetadata:
    """The ``edgegcl.*`` metadata of an exported encoder (values are strings in the file).

    ``num_layers`` is k, the hops a node's embedding depends on (k-hop batching needs it);
    ``feature_preprocessing`` says what training did to ``x`` before the encoder saw it, so
    a device can feed features the same way; ``config_sha256`` identifies the training
    configuration (SHA-256 of its canonical JSON); ``precision`` is fp32 or int8;
    ``interface`` is the contract version above (1 when the key is absent: older files);
    ``quantization`` says how an INT8 file was quantised ("none" for fp32 and older files);
    ``encoder`` names the built-in encoder (edgegcl.nn.family; "gcn" for older files).
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
    quantization: str = "none"
    encoder: str = "gcn"

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
                raise ValueError(f"{key}={props[key][:40]!r} is not an integer") from None
        return cls(**values)  # type: ignore[arg-type]

    def graph_problem(self, inputs: dict[str, list], outputs: dict[str, list],
                      file_bytes: int, cut: bool = False) -> str | None:
        """What in a model's graph contradicts this metadata, or None when nothing does.

        ``inputs`` and ``outputs`` map the model's tensor names to their shapes as onnxruntime
        reports them (inferred from the weights, so they cannot be forged apart from them);
        ``file_bytes`` is the model file's size; ``cut``: the graph is a portable file's
        stages (the runtime's cut), checked as interface 3's. Every number is checked before
        the runtime sizes anything by it: the interface is one this runtime reads, the layers
        are the stages the graph has, in_dim and out_dim are the widths of its first input and
        of the embeddings, consecutive stages agree on their widths (carried tensors too, in
        interface 5), and no width exceeds the file's bytes (every width is the length of a
        weight or bias stored in the file).
        """
        if not 1 <= self.interface <= INTERFACE:
            return f"{PREFIX}interface={self.interface} is not 1..{INTERFACE}"

        def width(name: str, table: dict[str, list]) -> int | str:
            shape = table.get(name)
            if shape is None:
                return f"it has no tensor {name}"
            if (len(shape) != 2 or not isinstance(shape[1], int)
                    or not 1 <= shape[1] <= file_bytes):
                return (f"{name} has shape {shown(str(shape))}, not [rows, width] with a width "
                        f"of at most the file's {file_bytes} bytes")
            return shape[1]

        k, has_x = self.num_layers, INPUT_X in inputs
        whole = self.interface == 1 or (is_portable(self.interface) and not cut)
        stages = 0  # aggregated inputs a1..ak (the stages' layout)
        while aggregate_input(stages + 1) in inputs:
            stages += 1
        carried = ([j for j in range(1, stages + 1) if carry_input(j) in inputs]
                   if self.interface >= CARRIES else [])
        names = ({INPUT_X, INPUT_EDGE_INDEX, INPUT_DEG} if self.interface == 1 else
                 {INPUT_X, INPUT_EDGE_INDEX} if whole else
                 {aggregate_input(j) for j in range(1, max(stages, 1) + 1)}
                 | ({INPUT_X} & inputs.keys()) | {carry_input(j) for j in carried})
        if set(inputs) != names:
            found = ", ".join(shown(name) for name in sorted(inputs)[:10]) or "none"
            return (f"its inputs are {found}, not {', '.join(sorted(names))} (edgegcl "
                    f"interface {self.interface})")
        if whole:  # layers inside one graph: each stores >= 4 bytes
            if not 1 <= k <= file_bytes // 4:
                return (f"{PREFIX}num_layers={k} but a {file_bytes}-byte file holds 1.."
                        f"{file_bytes // 4} layers")
            first = INPUT_X
            chain: list[tuple[str, str]] = []
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
        for into, source in chain:
            a, z = width(into, inputs), width(source, outputs)
            for found in (a, z):
                if isinstance(found, str):
                    return found
            if a != z:
                verb = "carries" if into.startswith("s") else "aggregates"
                return f"{into} is {a} wide but {source}, which it {verb}, is {z}"
        return None
