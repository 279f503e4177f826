"""The portable encoder (edgegcl_embed.contract): one standard-op ONNX graph, ``x`` and
``edge_index`` in, ``embeddings`` out, which any ONNX runtime runs with no edgegcl code.

The dense stages are the ones ``edgegcl.onnx.module.STAGES`` export; between
them this module adds the aggregation by A_hat = D^-1/2 (A + I) D^-1/2 as standard ops, built
so that every output element is computed by one fixed sequence of float operations, whatever
the number of threads (no ScatterND or ScatterElements with a reduction, whose CPU kernels
race on rows that several edges add into, microsoft/onnxruntime#18048):

- once per graph (``_normalisation``): input self-loops dropped (Equal, Not, Compress), one
  loop per node appended (Range, Concat), the entries sorted by target with TopK (stable by
  the ONNX spec: ties keep edge order), each target's segment found where the sorted targets
  change (NonZero), the degrees as segment lengths, nodes ordered by degree (TopK), and
  ``cnt[k]``, the number of nodes with more than k entries (a TopK merge of degrees and k);
- per layer (``_aggregate``): g = D^-1/2 h, then a Loop over entry slots k = max degree - 1
  .. 0 whose body gathers slot k of every node that has one (the first ``cnt[k]`` nodes in
  degree order), pads the running sums to that many rows and adds: each node's entries are
  summed one after another in a fixed order, and memory stays O(N d + E) (no [E, d] message
  tensor); the sums are put back in node order (Gather with the inverse permutation) and
  scaled by D^-1/2.

The aggregated tensors keep the contract's names (``a1`` .. ``ak``; the stages' outputs
``z0`` .. ``z(k-1)``), so the edgegcl runtime cuts the same file back into its stages
(``edgegcl_embed.stages``) and aggregates with its own CSR kernels.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgegcl_embed.contract import (INPUT_EDGE_INDEX, INPUT_X, OUTPUT, STAGE0_INITIALIZER,
                                    aggregate_input, carry_input, carry_output, stage_output)

NODES = "num_nodes"  # the symbolic dimension of every per-node tensor
_INT_MAX = np.iinfo(np.int64).max


class _Builder:
    """Nodes and constants of one (sub)graph, every name under ``prefix``."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.nodes: list[onnx.NodeProto] = []
        self.constants: list[onnx.TensorProto] = []
        self._count = 0

    def const(self, name: str, value: object, dtype: type = np.int64) -> str:
        full = f"{self.prefix}/{name}"
        self.constants.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), full))
        return full

    def op(self, op_type: str, inputs: list[str], outputs: int | list[str] = 1,
           **attrs: object) -> str | list[str]:
        """Append one node; returns its output name (its names, for several outputs)."""
        self._count += 1
        tag = f"{self.prefix}/{op_type}_{self._count}"
        names = ([f"{tag}_out{i}" for i in range(outputs)] if isinstance(outputs, int)
                 else outputs)
        self.nodes.append(helper.make_node(op_type, inputs, names, name=tag, **attrs))
        return names[0] if len(names) == 1 else names


def _normalisation(b: _Builder) -> dict[str, str]:
    """Nodes computing, from ``x`` and ``edge_index``, what every layer's aggregation reads:
    sorted sources, degree order, segment starts, ``cnt`` and D^-1/2 (tensor names)."""
    zero, one = b.const("zero", [0]), b.const("one", [1])
    n = b.op("Slice", [b.op("Shape", [INPUT_X]), zero, one])  # [1]
    n_scalar = b.op("Squeeze", [n, zero])
    scalar0, scalar1 = b.const("scalar0", 0), b.const("scalar1", 1)
    src = b.op("Gather", [INPUT_EDGE_INDEX, scalar0], axis=0)
    dst = b.op("Gather", [INPUT_EDGE_INDEX, scalar1], axis=0)
    keep = b.op("Not", [b.op("Equal", [src, dst])])  # GCN replaces input loops by one per node
    loops = b.op("Range", [scalar0, n_scalar, scalar1])
    sources = b.op("Concat", [b.op("Compress", [src, keep], axis=0), loops], axis=0)
    targets = b.op("Concat", [b.op("Compress", [dst, keep], axis=0), loops], axis=0)
    m = b.op("Shape", [targets])
    sorted_targets, order = b.op("TopK", [targets, m], 2, axis=0, largest=0, sorted=1)
    sorted_sources = b.op("Gather", [sources, order], axis=0)
    # every node has its loop, so the sorted targets change exactly N - 1 times, in node order
    head = b.op("Slice", [sorted_targets, zero, b.const("minus_one", [-1])])
    tail = b.op("Slice", [sorted_targets, one, b.const("int_max", [_INT_MAX])])
    changes = b.op("NonZero", [b.op("Not", [b.op("Equal", [tail, head])])])
    after = b.op("Add", [b.op("Reshape", [changes, b.const("flat", [-1])]), one])
    starts = b.op("Concat", [zero, after], axis=0)
    deg = b.op("Sub", [b.op("Concat", [after, m], axis=0), starts])
    dinv = b.op("Pow", [b.op("Cast", [deg], to=TensorProto.FLOAT),
                        b.const("minus_half", -0.5, np.float32)])
    sorted_deg, perm = b.op("TopK", [deg, n], 2, axis=0, largest=1, sorted=1)
    max_deg = b.op("Slice", [sorted_deg, zero, one])
    # cnt[k] = #{deg > k}: sorting keys 2 deg + 1 with 2 k + 2 puts query k after every degree
    # <= k, so its position is k + #{deg <= k}
    slots = b.op("Range", [scalar0, b.op("Squeeze", [max_deg, zero]), scalar1])
    two = b.const("two", 2)
    keys = b.op("Concat", [b.op("Add", [b.op("Mul", [deg, two]), scalar1]),
                           b.op("Add", [b.op("Mul", [slots, two]), two])], axis=0)
    _, key_order = b.op("TopK", [keys, b.op("Add", [n, max_deg])], 2, axis=0, largest=0,
                        sorted=1)
    query_pos = b.op("Reshape", [b.op("NonZero", [b.op("GreaterOrEqual", [key_order, n])]),
                                 b.const("flat2", [-1])])
    cnt = b.op("Add", [b.op("Sub", [n, query_pos]), slots])
    _, inverse = b.op("TopK", [perm, n], 2, axis=0, largest=0, sorted=1)
    return {"sources": sorted_sources, "starts": b.op("Gather", [starts, perm], axis=0),
            "cnt": cnt, "max_deg": b.op("Squeeze", [max_deg, zero]), "inverse": inverse,
            "dinv": b.op("Unsqueeze", [dinv, one])}


def _loop_body(prefix: str, norm: dict[str, str], g: str, width: int) -> onnx.GraphProto:
    """Iteration i adds slot k = max_deg - 1 - i of the first cnt[k] nodes (degree order)."""
    b = _Builder(prefix)
    zero, one = b.const("zero", [0]), b.const("one", [1])
    k = b.op("Sub", [b.op("Sub", [norm["max_deg"], b.const("scalar1", 1)]), "i"])
    count = b.op("Gather", [norm["cnt"], b.op("Unsqueeze", [k, zero])], axis=0)  # [1]
    positions = b.op("Add", [b.op("Slice", [norm["starts"], zero, count]), k])
    rows = b.op("Gather", [g, b.op("Gather", [norm["sources"], positions], axis=0)], axis=0)
    grow = b.op("Sub", [count, b.op("Slice", [b.op("Shape", ["acc"]), zero, one])])
    pads = b.op("Concat", [zero, zero, grow, zero], axis=0)
    b.op("Add", [b.op("Pad", ["acc", pads]), rows], ["acc_out"])
    b.op("Identity", ["cond"], ["cond_out"])
    acc = helper.make_tensor_value_info("acc", TensorProto.FLOAT, [None, width])
    return helper.make_graph(
        b.nodes, f"{prefix}_body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []), acc],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [None, width])],
        initializer=b.constants)


def _aggregate(b: _Builder, norm: dict[str, str], h: str, out: str, width: int) -> None:
    """Nodes writing ``out`` = A_hat ``h`` (``width`` columns)."""
    g = b.op("Mul", [h, norm["dinv"]])
    empty = b.op("Slice", [g, b.const(f"{out}_zero", [0]), b.const(f"{out}_zero2", [0])])
    loop = b.op("Loop", [norm["max_deg"], b.const(f"{out}_true", True, np.bool_), empty],
                body=_loop_body(f"{b.prefix}/{out}_loop", norm, g, width))
    summed = b.op("Gather", [loop, norm["inverse"]], axis=0)
    b.op("Mul", [summed, norm["dinv"]], [out])


def _reads(node: onnx.NodeProto) -> set[str]:
    """The tensors ``node`` reads: its inputs, and those its subgraphs (a Loop's body) read
    from the enclosing graph."""
    names = set(node.input)
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            inner = {o for n in attr.g.node for o in n.output}
            names |= {t for n in attr.g.node for t in _reads(n)} - inner
    return names


def topological(nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """``nodes`` ordered so that each comes after the producers of what it reads, its
    subgraphs' reads included (Kahn); onnx.checker requires it, and quantize_dynamic, which
    appends the nodes it writes, does not keep it for a Loop's outer-scope reads."""
    producer = {o: i for i, node in enumerate(nodes) for o in node.output}
    waiting = [{producer[t] for t in _reads(node) if t in producer} for node in nodes]
    users: dict[int, set[int]] = {}
    for i, needs in enumerate(waiting):
        for p in needs:
            users.setdefault(p, set()).add(i)
    ready = deque(i for i, needs in enumerate(waiting) if not needs)
    ordered = []
    while ready:
        i = ready.popleft()
        ordered.append(nodes[i])
        for user in sorted(users.get(i, ())):
            waiting[user].discard(i)
            if not waiting[user]:
                ready.append(user)
    if len(ordered) != len(nodes):
        raise RuntimeError("the portable graph has a cycle: a bug in edgegcl.onnx.portable")
    return ordered


def _per_node(name: str, width: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [NODES, width])


def portable_model(stages: onnx.ModelProto, expose_stage0: bool = True) -> onnx.ModelProto:
    """The portable model around ``stages``, an exported stage module
    (edgegcl.onnx.module.Stages; inputs [x], a1 .. ak and the carried s{j}, outputs [z0],
    z1 .. z(k-1), embeddings and the carried r{j}).

    Inputs ``x`` float32 [num_nodes, in_dim] and ``edge_index`` int64 [2, num_edges], output
    ``embeddings``; ``a{j}`` = A_hat z{j-1} (aggregated here), ``s{j}`` = r{j-1} (an Identity:
    carried unchanged), and the stage outputs stay as named tensors. With ``expose_stage0``
    (a stage 0 that is x W1 alone: the GCN's) stage 0's weight is the initializer
    ``STAGE0_INITIALIZER``: what the runtime cuts the file at, and its W1 (edgegcl_embed.contract).
    Metadata is the caller's.
    """
    graph = stages.graph
    widths = {v.name: v.type.tensor_type.shape.dim[1].dim_value
              for v in [*graph.input, *graph.output]}
    has_stage0 = INPUT_X in widths
    k = 0
    while aggregate_input(k + 1) in widths:
        k += 1
    carried = [j for j in range(1, k + 1) if carry_input(j) in widths]
    b = _Builder("gcn_norm")
    norm = _normalisation(b)
    for j in range(1, k + 1):
        source = stage_output(j - 1, k) if j > 1 or has_stage0 else INPUT_X
        _aggregate(b, norm, source, aggregate_input(j), widths[aggregate_input(j)])
    for j in carried:
        b.op("Identity", [carry_output(j - 1)], [carry_input(j)])
    nodes = [*b.nodes, *graph.node]
    initializers = [*graph.initializer, *b.constants]
    if has_stage0 and expose_stage0:
        _rename_stage0_weight(nodes, initializers)
    in_dim = (widths[INPUT_X] if has_stage0 else widths[aggregate_input(1)])
    named = ([aggregate_input(j) for j in range(1, k + 1)]
             + [stage_output(j, k) for j in range(0 if has_stage0 else 1, k)]
             + [name for j in carried for name in (carry_output(j - 1), carry_input(j))])
    portable = helper.make_graph(
        topological(nodes), "edgegcl_encoder",
        [_per_node(INPUT_X, in_dim),
         helper.make_tensor_value_info(INPUT_EDGE_INDEX, TensorProto.INT64, [2, "num_edges"])],
        [_per_node(OUTPUT, widths[OUTPUT])], initializer=initializers,
        value_info=[_per_node(name, widths[name]) for name in named])
    model = helper.make_model(portable, opset_imports=list(stages.opset_import),
                              producer_name="edgegcl")
    model.ir_version = stages.ir_version
    return model


def _rename_stage0_weight(nodes: list[onnx.NodeProto],
                          initializers: list[onnx.TensorProto]) -> None:
    """Rename the initializer stage 0's MatMul multiplies x by to STAGE0_INITIALIZER."""
    matmul = next((n for n in nodes if n.op_type == "MatMul" and n.input[0] == INPUT_X), None)
    if matmul is None:
        raise RuntimeError("the exported stage model has no MatMul of x: cannot name W1")
    old = matmul.input[1]
    if sum(old in n.input for n in nodes) != 1:
        raise RuntimeError(f"stage 0's weight {old} is read by other nodes: cannot name it W1")
    matmul.input[1] = STAGE0_INITIALIZER
    for init in initializers:
        if init.name == old:
            init.name = STAGE0_INITIALIZER
