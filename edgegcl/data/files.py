"""User graph files: ``.pt`` (a PyG ``Data``, loaded without executing pickled code) and
``.npz`` (plain arrays)."""

from __future__ import annotations

import pickle
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
from torch_geometric.data.storage import GlobalStorage

from edgegcl.data.validation import (LINK_PAIRS, SPLIT_MASKS, checked_labels, split_masks,
                                     validate_graph)
from edgegcl.errors import UsageError, first_line
from edgegcl.progress import say
from edgegcl_embed.columns import STRUCTURAL
from edgegcl_embed.errors import InputError, shown
from edgegcl.memory import memory_limit
from edgegcl_embed.files import open_regular
from edgegcl_embed.folder import check_arrays
from edgegcl_embed.graph import (benchmark_edges, both_ways, check_file, open_npz,
                                 reads_both_ways, signed_indices)
from edgegcl_embed.tables import STRUCTURAL_FEATURES, TABLE_SUFFIXES, UNLABELLED, read_tables


# The classes a pickled homogeneous ``Data`` references; nothing else may be unpickled.
_SAFE_PT_GLOBALS: list[Any] = [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage]


# ---------------------------------------------------------------------------------------
# User files
# ---------------------------------------------------------------------------------------


def is_graph_file(name: str) -> bool:
    """Whether ``name`` names a graph file by its suffix (one of ``READERS``, or an edge
    list's TABLE_SUFFIXES)."""
    return Path(name).suffix.lower() in (*READERS, *TABLE_SUFFIXES)


def load_file(path: Path, node_table: Path | None = None, edges: str = "auto") -> Data:
    """Load a user graph with the reader of its suffix (``READERS``: ``.pt``, a pickled
    ``Data`` read weights-only; ``.npz``, plain arrays; ``.csv`` / ``.tsv``, an edge list with
    an optional ``node_table``, its node ids kept as ``data.ids``), its edges read as
    ``edges`` says (edgegcl_embed.graph.EDGE_READINGS; ``data.edge_reading`` records how:
    ``EDGES_BOTH_WAYS`` or ``EDGES_AS_STORED``). Nothing depends on the file's name beyond its
    suffix."""
    suffix = path.suffix.lower()
    if node_table is not None and suffix not in TABLE_SUFFIXES:
        raise UsageError("--node-table goes with a CSV / TSV / Parquet edge list, but "
                         f"{shown(path.name)} is a graph file of its own; drop --node-table")
    try:  # the runtime's checks of paths and .npz files, raised as edgegcl's error type
        check_file(path, "graph file", "check the path")
        data = (_load_tables(path, node_table, edges) if suffix in TABLE_SUFFIXES
                else READERS[suffix](path, edges))
    except InputError as exc:
        raise UsageError(str(exc)) from None
    data.name = path.name
    ids, reading = getattr(data, "ids", None), data.edge_reading
    del data.edge_reading
    checked = validate_graph(data)
    if ids is not None:
        checked.ids = ids
    checked.edge_reading = reading
    return checked


EDGES_BOTH_WAYS = "each edge both ways"
EDGES_AS_STORED = "edges as stored"
"""How a graph's edges were read (``data.edge_reading``, said in a run's start line and kept
in its graph record): each undirected edge in both directions, once, or each stored edge as
it is, one way (edgegcl's own arrays, a ``.pt``, a graph folder, a named dataset: PyG lists
an undirected edge both ways)."""
EDGE_READS = (EDGES_BOTH_WAYS, EDGES_AS_STORED)


def edge_reading(data: Data) -> str:
    """How ``data``'s edges were read: what its reader recorded, ``EDGES_AS_STORED`` for a
    graph that was not read from a file (a dataset, a folder, a graph given in Python)."""
    reading = getattr(data, "edge_reading", EDGES_AS_STORED)
    return reading if reading in EDGE_READS else EDGES_AS_STORED


def read_as(data: Data, both: bool) -> Data:
    """``data`` with its edges both ways (``both``: each once, sorted) or as stored, and the
    record of which (``data.edge_reading``)."""
    if both:
        data.edge_index = torch.from_numpy(both_ways(data.edge_index.numpy()))
    data.edge_reading = EDGES_BOTH_WAYS if both else EDGES_AS_STORED
    return data


def _load_tables(path: Path, node_table: Path | None, edges: str) -> Data:
    """An edge list and its node table (edgegcl_embed.tables, the runtime's own reading)."""
    g = read_tables(path, node_table, edges)
    if g.feature_columns.kind == STRUCTURAL:
        say(f"{path.name}: no feature columns, so each node's features are its structural ones "
            f"({', '.join(STRUCTURAL_FEATURES)})")
    data = Data(x=torch.from_numpy(g.x), edge_index=torch.from_numpy(g.edge_index),
                **({} if g.y is None else {"y": torch.from_numpy(g.y)}))
    data.ids = g.ids
    data.edge_reading = EDGES_BOTH_WAYS if reads_both_ways(edges, True) else EDGES_AS_STORED
    data.feature_columns = g.feature_columns
    if g.y is not None and (g.y == UNLABELLED).any():  # empty label cells: in no split
        data.partly_labelled = True
    return data


def _load_pt(path: Path, edges: str) -> Data:
    """Unpickle ``path`` with torch's weights-only loader, allowing only PyG's ``Data`` classes.

    Anything else in the pickle (a function call, an arbitrary class) is refused by the
    loader before it runs, so a hostile file cannot execute code here.
    """
    try:
        with (torch.serialization.safe_globals(_SAFE_PT_GLOBALS),
              open_regular(path, "graph file", "check the path", memory_limit(), UsageError) as fh,
              warnings.catch_warnings()):
            # torch's own deprecation notes (TypedStorage, for a quantised tensor) are not the
            # user's to act on: the file is judged below, in one line
            warnings.simplefilter("ignore", UserWarning)
            obj = torch.load(fh, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        refused = _disallowed_globals(path)
        if refused is None:  # no class to name: the pickle itself is broken or not torch's
            raise UsageError(f"{path} cannot be read as a torch file (a corrupt pickle, or not "
                             "written by torch.save); re-save it with torch.save") from exc
        raise UsageError(
            f"{path} is not a plain torch_geometric Data file (it references {refused}, "
            "refused unexecuted); save it with torch.save(Data(x=..., edge_index=..., y=...), path) or use .npz"
        ) from exc
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as exc:
        raise UsageError(
            f"{path} cannot be read as a torch file ({first_line(exc)}); re-save it with torch.save"
        ) from exc
    if not isinstance(obj, Data):
        raise UsageError(
            f"{path} holds a {type(obj).__name__}, not a torch_geometric Data; "
            "save it with torch.save(Data(x=..., edge_index=..., y=...), path)"
        )
    try:
        masks = {key: getattr(obj, key, None) for key in SPLIT_MASKS}
        data = Data(x=obj.x, edge_index=obj.edge_index, y=obj.y, **masks)
    except Exception as exc:  # a Data whose inner store was forged or damaged
        raise UsageError(f"{path} holds a damaged torch_geometric Data ({type(exc).__name__}: "
                         f"{first_line(exc)[:120]}); save it with torch.save(Data(x=..., "
                         "edge_index=..., y=...), path)") from None
    edge_index = data.edge_index
    both = reads_both_ways(edges, False) and isinstance(edge_index, torch.Tensor) and (
        edge_index.dim() == 2 and edge_index.size(0) == 2 and edge_index.layout == torch.strided
        and not edge_index.is_floating_point() and not edge_index.is_complex())  # others: refused later
    if both:
        data.edge_index = edge_index.long()
    return read_as(data, both)


def _disallowed_globals(path: Path) -> str | None:
    """Name the classes/functions in a rejected pickle, read statically (nothing is executed);
    None when it names none that are refused (a corrupt pickle, or not a torch checkpoint)."""
    allowed = {f"{obj.__module__}.{obj.__qualname__}" for obj in _SAFE_PT_GLOBALS}
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except (RuntimeError, ValueError, pickle.UnpicklingError):
        return None
    return ", ".join(shown(name) for name in names if name not in allowed) or None


NPZ_LAYOUTS: dict[str, dict[str, str]] = {
    "edgegcl": {"x": "x", "edge_index": "edge_index", "y": "y", "train_mask": "train_mask",
                "val_mask": "val_mask", "test_mask": "test_mask",
                **{key: key for key in LINK_PAIRS}},
    "heterophilous-graphs": {"x": "node_features", "edges": "edges", "y": "node_labels",
                             "train_mask": "train_masks", "val_mask": "val_masks",
                             "test_mask": "test_masks"},
}
"""The ``.npz`` layouts read, by the array names they use: edgegcl's own (``x``, ``edge_index``
[2, E], optional ``y``, split masks and the link task's held-out pairs, ``LINK_PAIRS``) and
the heterophilous-graph benchmark's (yandex-research/heterophilous-graphs: ``node_features``,
``edges`` [E, 2], ``node_labels``, ``train_masks`` / ``val_masks`` / ``test_masks``
[splits, N])."""


def _load_npz(path: Path, edges: str) -> Data:
    """Read a graph from an ``.npz`` file in one of ``NPZ_LAYOUTS`` without pickle, each
    member's declared size checked before it is allocated (``edgegcl_embed.graph``, whose
    InputError the caller turns into a UsageError).

    The benchmark layout lists each undirected edge once: both directions are used, as the
    benchmark's own loader reads its undirected graphs, unless ``edges`` is ``directed``
    (its directed variants); edgegcl's ``edge_index`` is used as stored unless ``edges`` is
    ``undirected``.
    """
    fix = "save it with np.savez(path, x=..., edge_index=..., y=...)"
    with open_npz(path, fix) as npz:
        layout = "heterophilous-graphs" if "node_features" in npz else "edgegcl"
        names = NPZ_LAYOUTS[layout]
        arrays = {key: npz[member] for key, member in names.items() if member in npz}
    needed = [names[key] for key in names if key in ("x", "edge_index", "edges")
              and key not in arrays]
    if needed:
        raise UsageError(f"{path} lacks array(s) {', '.join(needed)}; {fix}")
    listed_once = "edges" in arrays
    if listed_once:
        arrays["edge_index"] = benchmark_edges(arrays.pop("edges"), path, edges)
    for key in ("edge_index", *LINK_PAIRS):
        if key in arrays:
            arrays[key] = signed_indices(arrays[key], path, key)
    stored = arrays["edge_index"]
    both = reads_both_ways(edges, listed_once)
    if both and not listed_once and stored.ndim == 2 and stored.shape[0] == 2 and (
            stored.dtype.kind in "iu"):  # others: refused below, or by the graph's checks
        arrays["edge_index"] = both_ways(stored)
    tensors: dict[str, torch.Tensor] = {}
    for key, array in arrays.items():
        if array.dtype.kind not in "biuf":
            raise UsageError(f"{path}: {names[key]} has non-numeric dtype {array.dtype}; store it "
                             "as numbers")
        # torch holds native byte order only: a big-endian file's arrays are swapped on loading
        tensors[key] = torch.from_numpy(np.ascontiguousarray(array, array.dtype.newbyteorder("=")))
    data = Data(**tensors)
    data.edge_reading = EDGES_BOTH_WAYS if both else EDGES_AS_STORED
    return data


def mapped_npz(path: Path) -> Data | None:
    """An ``.npz`` in edgegcl's layout whose ``x`` and ``edge_index`` numpy stored uncompressed
    (``np.savez``), as a graph whose ``x`` and ``edge_index`` are the file's pages
    (``NpzArchive.mapped``), checked a chunk at a time as a graph folder's arrays are, its
    labels and split masks read and checked as every graph's; None for any other ``.npz``
    (compressed, the benchmark's layout, a sparse x), which is read whole (``load_file``).
    What ``edgegcl convert`` reads, so that converting a graph larger than memory stays
    within memory."""
    fix = "save it with np.savez(path, x=..., edge_index=..., y=...)"
    try:
        check_file(path, "graph file", "check the path")
        with open_npz(path, fix) as npz:
            if "x" not in npz or "edge_index" not in npz:
                return None
            x, edges = npz.mapped("x"), npz.mapped("edge_index")
            if x is None or edges is None:
                return None
            small = {key: npz[key] for key in ("y", *SPLIT_MASKS) if key in npz}
        if x.ndim != 2 or x.dtype.kind not in "fiu" or x.shape[0] < 2 or x.shape[1] < 1:
            return None  # read whole, and refused there in its one line
        if edges.ndim != 2 or edges.shape[0] != 2 or edges.dtype.kind not in "iu":
            return None
        check_arrays(path, x, edges, say)
    except InputError as exc:
        raise UsageError(str(exc)) from None
    name = path.name
    holder = Data(**{key: torch.from_numpy(np.ascontiguousarray(value, value.dtype.newbyteorder("=")))
                     for key, value in small.items()})
    y = checked_labels(holder, name, x.shape[0])
    data = Data(x=torch.from_numpy(x), edge_index=torch.from_numpy(edges), y=y, name=name,
                **split_masks(holder, x.shape[0], y, name))
    data.num_nodes = x.shape[0]
    return data


READERS: dict[str, Callable[[Path, str], Data]] = {".pt": _load_pt, ".npz": _load_npz}
"""Graph file readers by suffix (a new format: its reader here, its suffix in
edgegcl.data.config.GRAPH_FILES, which ``--help`` lists)."""
