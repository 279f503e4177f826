"""Whether a stage graph is bounded: what the runtime hands onnxruntime must finish, and in
memory that follows the graph it embeds.

A model file is code for onnxruntime: a ``Loop`` may never end, a ``ConstantOfShape`` or
``Expand`` may allocate whatever its constant input says, and a broadcast of two small
initializers may be large. The stages edgegcl exports need none of that: row-wise products,
element-wise activations, concatenations and (INT8) dynamic quantisation. ``stage_problem``
checks, from the bytes and before onnxruntime loads them (its constant folding would already
allocate), that every node is one of those ops (``STAGE_OPS``, standard domain) and that every
tensor is either a row tensor ``[rows, w]`` no wider than the file stores (``stage_problem``),
or a constant no larger than the largest constant in the file.
What the runtime runs (a model file as cut by ``edgegcl_embed.stages``) passes this check, so a
run is bounded by the graph it embeds.
"""

from __future__ import annotations

from math import prod

from .stages import (ATTR_GRAPH, ATTR_GRAPHS, FUNCTION_NODE, GRAPH_INITIALIZER, GRAPH_INPUT,
                     GRAPH_NODE, GRAPH_OUTPUT, LENGTH, MODEL_FUNCTIONS, MODEL_GRAPH,
                     NODE_ATTRIBUTE, NODE_INPUT, NODE_OP_TYPE, NODE_OUTPUT, TENSOR_NAME,
                     ModelFormatError, _fields, _name, _strings, _tensor_dims, _varint)

__all__ = ["MAX_NODES", "STAGE_OPS", "node_count", "stage_problem"]

MAX_NODES = 10_000
"""The most nodes a model file may hold, subgraphs and functions included: edgegcl's encoders
hold under 100 per 2 layers, and onnxruntime takes seconds to load 100 000 (a file of
millions would hold the runtime for minutes before any check)."""

ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu", "Clip"})
"""Ops whose output is their inputs broadcast together (numpy's rule)."""
SAME_SHAPE = frozenset({"Relu", "LeakyRelu", "Elu", "Exp", "Identity", "Cast", "Sigmoid",
                        "Tanh", "Neg", "Abs", "QuantizeLinear", "DequantizeLinear"})
"""Ops whose (first) output has their first input's shape."""
PRODUCTS = frozenset({"MatMul", "MatMulInteger"})
STAGE_OPS = ELEMENTWISE | SAME_SHAPE | PRODUCTS | {"Concat", "DynamicQuantizeLinear",
                                                    "Constant"}
"""Every op a stage may hold: what edgegcl's exports use, each with a shape fixed by its
inputs'."""

NODE_DOMAIN = 7
ATTR_NAME, ATTR_I, ATTR_T, ATTR_FLOATS, ATTR_INTS = 1, 3, 5, 7, 8
SHAPE_DIM, DIM_VALUE, DIM_PARAM = 1, 1, 2
TYPE_TENSOR, TENSOR_SHAPE, VALUE_INFO_TYPE = 1, 2, 2

Dim = int | str  # a length, or the symbol of a stage's rows
Shape = tuple[Dim, ...]


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _info_shape(info: bytes) -> Shape | None:
    """A ValueInfoProto's tensor shape (None when it declares none)."""
    def sub(buf: bytes, number: int) -> bytes | None:
        found = [f.value for f in _fields(buf) if f.number == number and f.wire == LENGTH]
        return found[0] if found else None

    tensor = sub(info, VALUE_INFO_TYPE)
    tensor = sub(tensor, TYPE_TENSOR) if tensor is not None else None
    shape = sub(tensor, TENSOR_SHAPE) if tensor is not None else None
    if shape is None:
        return None
    dims: list[Dim] = []
    for d in _fields(shape):
        if d.number != SHAPE_DIM or d.wire != LENGTH:
            continue
        parts = {f.number: f.value for f in _fields(d.value)}
        if DIM_VALUE in parts:
            dims.append(int(parts[DIM_VALUE]))
        else:
            dims.append(parts[DIM_PARAM].decode(errors="replace") if DIM_PARAM in parts else "?")
    return tuple(dims)


def _attributes(node: bytes) -> dict[str, dict[int, list[int | bytes]]]:
    """A node's attributes: name -> field number -> values."""
    found: dict[str, dict[int, list[int | bytes]]] = {}
    for f in _fields(node):
        if f.number == NODE_ATTRIBUTE and f.wire == LENGTH:
            values: dict[int, list[int | bytes]] = {}
            for a in _fields(f.value):
                if a.number == ATTR_INTS and a.wire == LENGTH:  # packed
                    pos = 0
                    while pos < len(a.value):
                        v, pos = _varint(a.value, pos)
                        values.setdefault(ATTR_INTS, []).append(v)
                else:
                    values.setdefault(a.number, []).append(a.value)
            found[_name(f.value, ATTR_NAME)] = values
    return found


def _broadcast(shapes: list[Shape]) -> Shape | None:
    """numpy's broadcast of ``shapes`` (None when they do not broadcast, or a row symbol
    would meet a length other than 1)."""
    rank = max(len(s) for s in shapes)
    out: list[Dim] = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        if len(dims) > 1:
            return None
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _constant_shape(node: bytes) -> Shape | None:
    attrs = _attributes(node)
    if len(attrs) != 1:
        return None
    name, values = next(iter(attrs.items()))
    if name == "value" and ATTR_T in values:
        return _tensor_dims(values[ATTR_T][0])  # type: ignore[arg-type]
    if name in ("value_float", "value_int"):
        return ()
    if name == "value_floats":
        return (sum(len(v) // 4 for v in values.get(ATTR_FLOATS, [])),)  # type: ignore[arg-type]
    if name == "value_ints":
        return (len(values.get(ATTR_INTS, [])),)
    return None


def _outputs(op: str, node: bytes, ins: list[Shape]) -> list[Shape] | None:
    """The output shapes of one node from its inputs' (None: not a shape this op makes)."""
    if op == "Constant":
        shape = _constant_shape(node)
        return None if shape is None else [shape]
    if not ins:
        return None
    if op in ELEMENTWISE:
        shape = _broadcast(ins)
        return None if shape is None else [shape]
    if op in SAME_SHAPE:
        return [ins[0]]
    if op == "DynamicQuantizeLinear":
        return [ins[0], (), ()]
    if op in PRODUCTS:
        a, b = ins[0], ins[1] if len(ins) > 1 else ()
        if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
            return None
        return [(a[0], b[1])]
    if op == "Concat":
        axis = _attributes(node).get("axis", {}).get(ATTR_I, [None])[0]
        rank = len(ins[0])
        if not isinstance(axis, int) or any(len(s) != rank for s in ins):
            return None
        axis = _signed(axis) % rank if rank else 0
        lengths = [s[axis] for s in ins]
        if rank == 0 or any(not isinstance(n, int) for n in lengths):
            return None
        rest = {s[:axis] + s[axis + 1:] for s in ins}
        if len(rest) != 1:
            return None
        return [ins[0][:axis] + (sum(lengths),) + ins[0][axis + 1:]]  # type: ignore[arg-type]
    return None


def stage_problem(model: bytes) -> str | None:
    """Why the stage graph ``model`` (a model file's bytes) is not bounded, or None.

    Bounded: every node a standard ``STAGE_OPS`` op; every tensor either a row tensor
    ``[rows, w]`` (rows a symbol of the graph's inputs) with ``w`` at most the widest input or
    output the graph declares or the element count of its largest constant (a hidden width is
    the length of a weight stored in the file), or a constant with at most as many elements as
    that largest constant. A stage's memory is then at most its rows times what the file
    stores, per node.
    """
    graphs = [f.value for f in _fields(model) if f.number == MODEL_GRAPH and f.wire == LENGTH]
    if len(graphs) != 1:
        return "the file holds no model graph"
    shapes: dict[str, Shape] = {}
    widest, largest = 0, 1
    nodes: list[bytes] = []
    for f in _fields(graphs[0]):
        if f.wire != LENGTH:
            continue
        if f.number == GRAPH_NODE:
            nodes.append(f.value)
        elif f.number == GRAPH_INITIALIZER:
            dims = _tensor_dims(f.value)
            shapes[_name(f.value, TENSOR_NAME)] = dims
            largest = max(largest, prod(dims))  # type: ignore[arg-type]
        elif f.number in (GRAPH_INPUT, GRAPH_OUTPUT):
            shape = _info_shape(f.value)
            declared = shape is not None and len(shape) == 2 and isinstance(shape[1], int)
            if f.number == GRAPH_INPUT:
                if not declared:
                    return f"input {_name(f.value)!r} is not declared as [rows, width]"
                shapes.setdefault(_name(f.value), shape)  # type: ignore[arg-type]
            if declared:  # outputs also expose weights (W1, its INT8 scales): any shape
                widest = max(widest, shape[1])  # type: ignore[index]
    for node in nodes:
        if _name(node, NODE_DOMAIN) not in ("", "ai.onnx"):
            return f"a node of domain {_name(node, NODE_DOMAIN)!r}, not a standard op"
        if _name(node, NODE_OP_TYPE) == "Constant":
            shape = _constant_shape(node)
            if shape is not None:
                largest = max(largest, prod(shape))  # type: ignore[arg-type]
    widest = max(widest, largest)  # a hidden width is a weight's: no wider than it is long
    for node in nodes:
        op = _name(node, NODE_OP_TYPE)
        if op not in STAGE_OPS:
            return f"a {op or 'nameless'} node, which no stage holds"
    return _propagate(_sorted(nodes, set(shapes)), shapes, widest, largest)


def _sorted(nodes: list[bytes], known: set[str]) -> list[bytes]:
    """``nodes`` in an order where each node's inputs are computed before it (Kahn's
    algorithm; onnxruntime sorts them too); nodes whose inputs nothing computes come last,
    where ``_propagate`` names what they miss."""
    waiting: dict[str, list[int]] = {}
    unmet = []
    for i, node in enumerate(nodes):
        needs = {n for n in _strings(node, NODE_INPUT) if n and n not in known}
        unmet.append(len(needs))
        for name in needs:
            waiting.setdefault(name, []).append(i)
    ready = [i for i, count in enumerate(unmet) if count == 0]
    order: list[int] = []
    while ready:
        i = ready.pop()
        order.append(i)
        for name in set(_strings(nodes[i], NODE_OUTPUT)):
            for j in waiting.pop(name, []):
                unmet[j] -= 1
                if unmet[j] == 0:
                    ready.append(j)
    placed = set(order)
    return [nodes[i] for i in order] + [n for i, n in enumerate(nodes) if i not in placed]


def _propagate(nodes: list[bytes], shapes: dict[str, Shape], widest: int,
               largest: int) -> str | None:
    """Add the output shapes of ``nodes`` (their inputs known) to ``shapes``; why one is not
    bounded, or None."""
    for node in nodes:
        op = _name(node, NODE_OP_TYPE)
        names = _strings(node, NODE_INPUT)
        missing = [n for n in names if n and n not in shapes]
        if missing:
            return f"{op} reads {missing[0]!r}, which nothing computes"
        outs = _outputs(op, node, [shapes[n] for n in names if n])
        if outs is None:
            return f"a {op} node on shapes {[shapes[n] for n in names if n]} makes no bounded shape"
        for name, shape in zip(_strings(node, NODE_OUTPUT), outs):
            rows = [d for d in shape if isinstance(d, str)]
            if rows and (len(shape) != 2 or not isinstance(shape[0], str)
                         or not isinstance(shape[1], int) or shape[1] > widest):
                return (f"{op} makes {name!r} of shape {list(shape)}, not [rows, w <= "
                        f"{widest}]")
            if not rows and prod(shape) > largest:  # type: ignore[arg-type]
                return (f"{op} makes the constant {name!r} of {prod(shape)} elements, more "  # type: ignore[arg-type]
                        f"than the file's largest ({largest})")
            shapes[name] = shape
    return None


def node_count(model: bytes, limit: int = MAX_NODES) -> int:
    """How many nodes the model file holds (its graph, the subgraphs of its nodes' attributes
    and its functions), counted from the bytes; the count stops once it passes ``limit``."""
    count = 0
    pending = [(f.value, f.number == MODEL_GRAPH) for f in _fields(model)
               if f.wire == LENGTH and f.number in (MODEL_GRAPH, MODEL_FUNCTIONS)]
    while pending and count <= limit:
        buf, is_graph = pending.pop()
        for f in _fields(buf):
            if f.wire != LENGTH or f.number != (GRAPH_NODE if is_graph else FUNCTION_NODE):
                continue
            count += 1
            for a in _fields(f.value):
                if a.number == NODE_ATTRIBUTE and a.wire == LENGTH:
                    pending.extend((g.value, True) for g in _fields(a.value)
                                   if g.wire == LENGTH and g.number in (ATTR_GRAPH, ATTR_GRAPHS))
    return count


def check_bounded(model: bytes) -> None:
    """``stage_problem`` as a ModelFormatError."""
    problem = stage_problem(model)
    if problem is not None:
        raise ModelFormatError(f"not bounded: {problem}")
