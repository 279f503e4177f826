"""Cutting an exported model file into its dense stages, without the onnx package.

The file is one graph from ``x`` and ``edge_index`` to ``embeddings`` whose aggregated tensors
``a1`` .. ``ak`` and stage outputs ``z0`` .. ``z(k-1)`` are named by ``edgegcl_embed.contract``.
``stage_model`` keeps the nodes between those names (every ancestor of the stage outputs,
stopping at ``x`` and the ``aj``) and returns the model of the dense stages: the runtime then
aggregates with its CSR kernels instead of the file's Loop, and runs the stages on row blocks.
The file's stage-0 weight, an initializer named by ``STAGE0_INITIALIZERS``, is exposed through
Identity nodes as the outputs ``w1`` (or the INT8 triple).

ONNX files are protocol buffers; this module reads and writes the few fields it needs (field
numbers of onnx.proto) directly from the bytes, so the runtime keeps its dependencies (numpy,
scipy, onnxruntime). Every other field is copied through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .contract import (INPUT_X, STAGE0_INITIALIZERS, aggregate_input, carry_input, carry_output,
                       stage_output)

# onnx.proto field numbers: ModelProto, GraphProto, NodeProto, TensorProto, ValueInfoProto ...
MODEL_GRAPH = 7
GRAPH_NODE, GRAPH_NAME, GRAPH_INITIALIZER = 1, 2, 5
GRAPH_INPUT, GRAPH_OUTPUT, GRAPH_VALUE_INFO = 11, 12, 13
NODE_INPUT, NODE_OUTPUT, NODE_NAME, NODE_OP_TYPE = 1, 2, 3, 4
TENSOR_DIMS, TENSOR_DATA_TYPE, TENSOR_NAME = 1, 2, 8
NAME = 1  # ValueInfoProto.name
TYPE_TENSOR, TENSOR_ELEM_TYPE, TENSOR_SHAPE, SHAPE_DIM, DIM_VALUE = 1, 1, 2, 1, 1
VALUE_INFO_TYPE = 2

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5
CONTROL_FLOW = {"Loop", "If", "Scan"}  # never part of a stage (their bodies read outer names)


class ModelFormatError(ValueError):
    """The bytes are not the protocol buffer this module expects (the caller says which file)."""


@dataclass
class _Field:
    number: int
    wire: int
    value: int | bytes  # an integer (varint, fixed) or a length-delimited payload
    raw: bytes  # the whole field (key included), to copy it through unchanged


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ModelFormatError("a varint runs past the end of its message")
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            return value, pos


def _fields(buf: bytes) -> Iterator[_Field]:
    """The fields of one message, in file order."""
    pos = 0
    while pos < len(buf):
        start = pos
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value, pos = _varint(buf, pos)
        elif wire in (FIXED64, FIXED32):
            size = 8 if wire == FIXED64 else 4
            value, pos = int.from_bytes(buf[pos:pos + size], "little"), pos + size
        elif wire == LENGTH:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + size], pos + size
        else:
            raise ModelFormatError(f"unsupported protobuf wire type {wire}")
        if pos > len(buf) or number == 0:
            raise ModelFormatError("a field runs past the end of its message")
        yield _Field(number, wire, value, buf[start:pos])


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _message(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | LENGTH) + _encode_varint(len(payload)) + payload


def _string(number: int, text: str) -> bytes:
    return _message(number, text.encode())


def _strings(buf: bytes, number: int) -> list[str]:
    return [f.value.decode(errors="replace") for f in _fields(buf)
            if f.number == number and f.wire == LENGTH]


def _name(buf: bytes, number: int = NAME) -> str:
    names = _strings(buf, number)
    return names[0] if names else ""


# where tensors can sit: TensorProto's external data, and every message that holds tensors
TENSOR_EXTERNAL_DATA, TENSOR_DATA_LOCATION, EXTERNAL = 13, 14, 1
MODEL_FUNCTIONS, FUNCTION_NODE = 25, 7
GRAPH_SPARSE_INITIALIZER, NODE_ATTRIBUTE = 15, 5
ATTR_TENSOR, ATTR_GRAPH, ATTR_TENSORS, ATTR_GRAPHS = 5, 6, 10, 11
ATTR_SPARSE_TENSOR, ATTR_SPARSE_TENSORS, SPARSE_VALUES, SPARSE_INDICES = 22, 23, 1, 2
MAX_NESTING = 32


def external_tensors(model: bytes) -> list[str]:
    """The names of the tensors in a model file whose data is stored outside it (ONNX external
    data: initializers, node attributes, sparse initializers, in subgraphs and functions too).

    edgegcl never writes such a file; a runtime that reads one opens whatever path the file
    names (an absolute path, ``../``, or a name resolved against the current directory when
    the model is loaded from bytes), so the runtime refuses them all before onnxruntime sees
    the model."""
    found: list[str] = []

    def tensor(buf: bytes) -> None:
        for f in _fields(buf):
            if (f.number == TENSOR_EXTERNAL_DATA and f.wire == LENGTH) or (
                    f.number == TENSOR_DATA_LOCATION and f.wire == VARINT and f.value == EXTERNAL):
                found.append(_name(buf, TENSOR_NAME) or "(unnamed)")
                return

    def sparse(buf: bytes) -> None:
        for f in _fields(buf):
            if f.number in (SPARSE_VALUES, SPARSE_INDICES) and f.wire == LENGTH:
                tensor(f.value)

    def nodes(buf: bytes, depth: int) -> None:  # a NodeProto: its attributes
        for f in _fields(buf):
            if f.number != NODE_ATTRIBUTE or f.wire != LENGTH:
                continue
            for a in _fields(f.value):
                if a.wire != LENGTH:
                    continue
                if a.number in (ATTR_TENSOR, ATTR_TENSORS):
                    tensor(a.value)
                elif a.number in (ATTR_SPARSE_TENSOR, ATTR_SPARSE_TENSORS):
                    sparse(a.value)
                elif a.number in (ATTR_GRAPH, ATTR_GRAPHS):
                    graph(a.value, depth + 1)

    def graph(buf: bytes, depth: int) -> None:
        if depth > MAX_NESTING:
            raise ModelFormatError(f"subgraphs nested more than {MAX_NESTING} deep")
        for f in _fields(buf):
            if f.wire != LENGTH:
                continue
            if f.number == GRAPH_INITIALIZER:
                tensor(f.value)
            elif f.number == GRAPH_SPARSE_INITIALIZER:
                sparse(f.value)
            elif f.number == GRAPH_NODE:
                nodes(f.value, depth)

    for f in _fields(model):
        if f.wire != LENGTH:
            continue
        if f.number == MODEL_GRAPH:
            graph(f.value, 0)
        elif f.number == MODEL_FUNCTIONS:
            for g in _fields(f.value):
                if g.number == FUNCTION_NODE and g.wire == LENGTH:
                    nodes(g.value, 0)
    return found


@dataclass
class _Node:
    inputs: list[str]
    outputs: list[str]
    op_type: str
    raw: bytes


@dataclass
class _Graph:
    nodes: list[_Node] = field(default_factory=list)
    initializers: dict[str, bytes] = field(default_factory=dict)
    infos: dict[str, bytes] = field(default_factory=dict)  # inputs, outputs, value_info
    name: str = "graph"


def _parse_graph(buf: bytes) -> _Graph:
    graph = _Graph()
    for f in _fields(buf):
        if f.wire != LENGTH:
            continue
        if f.number == GRAPH_NODE:
            graph.nodes.append(_Node(_strings(f.value, NODE_INPUT), _strings(f.value, NODE_OUTPUT),
                                     _name(f.value, NODE_OP_TYPE), f.value))
        elif f.number == GRAPH_INITIALIZER:
            graph.initializers[_name(f.value, TENSOR_NAME)] = f.value
        elif f.number in (GRAPH_INPUT, GRAPH_OUTPUT, GRAPH_VALUE_INFO):
            graph.infos.setdefault(_name(f.value), f.value)
        elif f.number == GRAPH_NAME:
            graph.name = f.value.decode(errors="replace")
    return graph


def _tensor_dims(tensor: bytes) -> tuple[int, ...]:
    """A TensorProto's dims (plain or packed)."""
    dims: list[int] = []
    for f in _fields(tensor):
        if f.number == TENSOR_DIMS and f.wire == VARINT:
            dims.append(int(f.value))
        elif f.number == TENSOR_DIMS and f.wire == LENGTH:  # packed
            pos = 0
            while pos < len(f.value):
                dim, pos = _varint(f.value, pos)
                dims.append(dim)
    return tuple(dims)


def _tensor_info(name: str, tensor: bytes) -> bytes:
    """A ValueInfoProto for an output that carries the initializer ``tensor`` (type, dims)."""
    dims = _tensor_dims(tensor)
    elem_type = next((int(f.value) for f in _fields(tensor)
                      if f.number == TENSOR_DATA_TYPE and f.wire == VARINT), 0)
    shape = b"".join(_message(SHAPE_DIM, _encode_varint(DIM_VALUE << 3 | VARINT)
                              + _encode_varint(d)) for d in dims)
    tensor_type = (_encode_varint(TENSOR_ELEM_TYPE << 3 | VARINT) + _encode_varint(elem_type)
                   + _message(TENSOR_SHAPE, shape))
    return _string(NAME, name) + _message(VALUE_INFO_TYPE, _message(TYPE_TENSOR, tensor_type))


DIM_PARAM = 2  # TensorShapeProto.Dimension.dim_param


def _rows_named(info: bytes, symbol: str) -> bytes:
    """The ValueInfoProto ``info`` of a [rows, width] tensor with its rows named ``symbol``."""
    def shape(buf: bytes) -> bytes:
        dims = [f for f in _fields(buf) if f.number == SHAPE_DIM]
        if not dims:
            raise ModelFormatError("a stage tensor has no shape")
        return _message(SHAPE_DIM, _string(DIM_PARAM, symbol)) + b"".join(d.raw for d in dims[1:])

    def rewrite(buf: bytes, number: int, inner: Callable[[bytes], bytes]) -> bytes:
        return b"".join(_message(number, inner(f.value)) if f.number == number
                        and f.wire == LENGTH and isinstance(f.value, bytes) else f.raw
                        for f in _fields(buf))

    def tensor(buf: bytes) -> bytes:
        return rewrite(buf, TENSOR_SHAPE, shape)

    return rewrite(info, VALUE_INFO_TYPE, lambda t: rewrite(t, TYPE_TENSOR, tensor))


def _stage_nodes(graph: _Graph, producer: dict[str, int], inputs: list[str],
                 outputs: list[str]) -> set[int]:
    """The nodes between the stage inputs and outputs: every ancestor of an output, stopping
    at the inputs and the initializers; ModelFormatError when an output cannot be reached
    from them or a control-flow node lies between."""
    keep: set[int] = set()
    pending = list(outputs)
    while pending:
        tensor = pending.pop()
        if tensor in inputs or tensor in graph.initializers or not tensor:
            continue
        if tensor not in producer:
            raise ModelFormatError(f"no node computes {tensor!r} from the stage inputs "
                                   f"{', '.join(inputs)}")
        i = producer[tensor]
        if i not in keep:
            if graph.nodes[i].op_type in CONTROL_FLOW:
                raise ModelFormatError(f"{tensor!r} is computed by a {graph.nodes[i].op_type} "
                                       "node, which no dense stage has")
            keep.add(i)
            pending.extend(graph.nodes[i].inputs)
    return keep


def stage_model(data: bytes) -> bytes:
    """The model of the dense stages (and W1 as outputs) cut out of the exported model
    ``data``; ModelFormatError says why it cannot be cut.

    The layers are the aggregated tensors a1, a2, ... the file declares (the caller checks
    them against its metadata); stage 0 exists when a node computes ``z0``; stage j reads the
    carried ``s{j}`` (stage j - 1 writes ``r{j-1}``) when the file declares it.
    """
    parts = list(_fields(data))
    graphs = [f for f in parts if f.number == MODEL_GRAPH and f.wire == LENGTH]
    if len(graphs) != 1:
        raise ModelFormatError("the file holds no model graph")
    graph = _parse_graph(graphs[0].value)
    producer = {out: i for i, node in enumerate(graph.nodes) for out in node.outputs}
    k = 0
    while aggregate_input(k + 1) in graph.infos:
        k += 1
    if k == 0:
        raise ModelFormatError(f"it declares no aggregated tensor {aggregate_input(1)}")
    first = 0 if stage_output(0, k) in producer else 1
    carried = [j for j in range(1, k + 1) if carry_input(j) in graph.infos]
    inputs = ([INPUT_X] * (1 - first) + [aggregate_input(j) for j in range(1, k + 1)]
              + [carry_input(j) for j in carried])
    outputs = ([stage_output(j, k) for j in range(first, k + 1)]
               + [carry_output(j - 1) for j in carried])
    keep = _stage_nodes(graph, producer, inputs, outputs)
    nodes = [graph.nodes[i] for i in sorted(keep)]
    used = {t for node in nodes for t in node.inputs}
    exposed = {out: init for out, init in STAGE0_INITIALIZERS.items()
               if init in graph.initializers and init in used}
    missing = [t for t in [*inputs, *outputs] if t not in graph.infos]
    if missing:
        raise ModelFormatError(f"the file declares no type for {', '.join(missing)}")
    # each stage's rows its own symbol: the runtime runs one stage at a time and feeds the
    # others no rows, so one shared symbol would let onnxruntime share their buffers
    stage_of = {INPUT_X: 0, **{aggregate_input(j): j for j in range(1, k + 1)},
                **{stage_output(j, k): j for j in range(first, k + 1)},
                **{carry_input(j): j for j in carried},
                **{carry_output(j - 1): j - 1 for j in carried}}
    infos = {t: _rows_named(graph.infos[t], f"rows{stage_of[t]}") for t in [*inputs, *outputs]}
    body = b"".join([
        *(_message(GRAPH_NODE, node.raw) for node in nodes),
        *(_message(GRAPH_NODE, _string(NODE_INPUT, init) + _string(NODE_OUTPUT, out)
                   + _string(NODE_NAME, f"expose_{out}") + _string(NODE_OP_TYPE, "Identity"))
          for out, init in exposed.items()),
        _string(GRAPH_NAME, f"{graph.name}_stages"),
        *(_message(GRAPH_INITIALIZER, graph.initializers[t])
          for t in graph.initializers if t in used),
        *(_message(GRAPH_INPUT, infos[t]) for t in inputs),
        *(_message(GRAPH_OUTPUT, infos[t]) for t in outputs),
        *(_message(GRAPH_OUTPUT, _tensor_info(out, graph.initializers[init]))
          for out, init in exposed.items())])
    return b"".join(_message(MODEL_GRAPH, body) if f.number == MODEL_GRAPH else f.raw
                    for f in parts)
