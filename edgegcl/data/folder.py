"""Graph folders as edgegcl's graphs: a folder read by the runtime's reader
(edgegcl_embed.folder: plain ``.npy`` files, memory-mapped, checked a chunk at a time) as a PyG
``Data`` whose ``x`` and ``edge_index`` are the files' pages, its labels checked as every
graph's are (edgegcl.data.validation), and any graph written as a folder (``write_folder``,
what ``edgegcl convert`` does). docs/graph-folder.md describes the format.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from edgegcl.data.columns import feature_columns
from edgegcl.data.validation import SPLIT_MASKS, checked_labels, partly_labelled, split_masks
from edgegcl.errors import UsageError
from edgegcl.progress import say
from edgegcl_embed.columns import STRUCTURAL
from edgegcl_embed.progress import Progress
from edgegcl_embed.errors import InputError
from edgegcl_embed.folder import (MappedRows, chunk_ranges, finish_folder, is_graph_folder,
                                  read_folder)
from edgegcl_embed.graph import reads_both_ways
from edgegcl_embed.table_folder import write_edge_table
from edgegcl_embed.tables import STRUCTURAL_FEATURES

__all__ = ["FolderIndex", "GraphFolder", "is_graph_folder", "open_folder", "write_folder",
           "write_table_folder"]


@dataclass(frozen=True)
class FolderIndex:
    """A graph folder's index as tensors sharing the mapped files (edgegcl_embed.folder): the
    edges without self-loops grouped by target (``in_ptr`` [N+1], ``in_src`` the sources,
    ``in_eid`` their positions in ``edge_index``; in ``edge_index`` order within a target) and
    by source (``out_ptr``, ``out_dst``). The built-in sampler draws in-neighbours from the
    first, a chunked all-node embedding pulls rows through the first and pushes columns
    through the second."""

    in_ptr: Tensor
    in_src: Tensor
    in_eid: Tensor
    out_ptr: Tensor
    out_dst: Tensor

    @property
    def num_nodes(self) -> int:
        return self.in_ptr.numel() - 1


@dataclass(frozen=True)
class GraphFolder:
    """What a graph read from a folder carries as ``data.folder``: where it was read, its
    mapped index, its features' mapping (None for an empty x) and whether their rows are read
    ahead (``read_ahead``: they are larger than half the memory this process may use, so the
    page cache cannot be expected to hold them)."""

    path: Path
    index: FolderIndex
    features: MappedRows | None = None
    read_ahead: bool = False

    @property
    def prefetch(self) -> Callable[[Tensor], None] | None:
        """What a batch or a chunk calls with the node ids whose rows it is about to read, or
        None when nothing is read ahead."""
        return self.features.prefetch if self.read_ahead and self.features else None

    def __repr__(self) -> str:
        return f"GraphFolder({str(self.path)!r}, {self.index.num_nodes} nodes)"


def open_folder(path: str | Path) -> Data:
    """The graph of the folder at ``path``, checked (edgegcl_embed.folder.read_folder, its
    labels and split masks as every graph's): ``x`` and ``edge_index`` mapped, the labels and
    masks in memory (O(N)), the index kept as ``data.folder`` (``GraphFolder``); one
    UsageError line for anything that does not hold."""
    try:
        found = read_folder(path, say=say)
    except InputError as exc:
        raise UsageError(str(exc)) from None
    n, name = found.num_nodes, found.path.name or str(found.path)
    holder = Data(**{key: torch.from_numpy(value) for key, value in found.labels.items()})
    try:
        y = checked_labels(holder, name, n, found.unlabelled)
        masks = split_masks(holder, n, y, name)
    except UsageError as exc:
        raise UsageError(f"graph folder {found.path}: "
                         f"{str(exc).removeprefix(name + ': ')}") from None
    data = Data(x=torch.from_numpy(found.x), edge_index=torch.from_numpy(found.edge_index), y=y,
                name=name, **masks)
    data.num_nodes = n
    data.feature_columns = found.feature_columns
    if partly_labelled(y, found.unlabelled):
        data.partly_labelled = True
    index = FolderIndex(*(torch.from_numpy(a) for a in (
        found.index.in_ptr, found.index.in_src, found.index.in_eid, found.index.out_ptr,
        found.index.out_dst)))
    data.folder = GraphFolder(found.path, index, found.features, found.read_ahead)
    return data


def write_folder(data: Data, out: str | Path, *, half: bool = False,
                 progress: Callable[[str], None] | None = None) -> Path:
    """Write ``data`` (a validated graph: float32 ``x``, int64 ``edge_index``, optional ``y``
    and split masks; its tensors may be file-backed) as a graph folder at ``out``, with its
    index: a chunk of rows at a time into a new temporary folder beside ``out`` (made
    exclusively), renamed into place when complete. ``out`` must not exist. ``half``: x as
    float16 (half the storage; the steps compute in float32)."""
    return _new_folder(out, lambda tmp: _write_arrays(data, tmp, half,
                                                      progress or (lambda text: None)))


def write_table_folder(edges: str | Path, out: str | Path, *,
                       node_table: str | Path | None = None, half: bool = False,
                       reading: str = "auto") -> Path:
    """Write the CSV / TSV edge list ``edges`` (with its ``node_table``) as a graph folder at
    ``out``, out of core (edgegcl_embed.table_folder: memory O(N) plus a chunk, whatever the
    number of edges), as ``write_folder`` does otherwise, with a progress line and its ETA;
    the graph is the one training on the table reads with ``reading`` (``[data] edges``). A
    table that does not hold is one UsageError line."""
    line = Progress(100, "convert")

    def progress(done: float, text: str) -> None:
        line.update(100 * done, text)

    def write(tmp: Path) -> None:
        try:
            columns = write_edge_table(edges, tmp, node_table, half=half, progress=progress,
                                       both=reads_both_ways(reading, True))
        except InputError as exc:
            raise UsageError(str(exc)) from None
        finally:
            line.close()
        if columns.kind == STRUCTURAL:
            say(f"{Path(edges).name}: no feature columns, so each node's features are its "
                f"structural ones ({', '.join(STRUCTURAL_FEATURES)})")
    return _new_folder(out, write)


def _new_folder(out: str | Path, write: Callable[[Path], None]) -> Path:
    """``write`` into a new temporary folder beside ``out`` (made exclusively), renamed to
    ``out`` when it returns, removed when it raises; ``out`` must not exist."""
    target = Path(out).expanduser()
    if os.path.lexists(target):
        raise UsageError(f"{target} already exists; name a new folder with --out")
    parent = target.parent if str(target.parent) else Path(".")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=parent))
    except OSError as exc:
        raise UsageError(f"cannot create a folder beside {target} ({exc.strerror or exc}); "
                         "name a writable place with --out") from None
    try:
        write(tmp)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _write_arrays(data: Data, tmp: Path, half: bool, progress: Callable[[str], None]) -> None:
    """The folder's files in ``tmp``: x and the edges a chunk at a time, the labels and masks,
    the index (built out of core from the written edges), then metadata.json."""
    x, edges = data.x, data.edge_index
    n, e = int(x.size(0)), int(edges.size(1))
    dtype = np.float16 if half else np.float32
    mapped = np.lib.format.open_memmap(tmp / "x.npy", "w+", dtype, (n, int(x.size(1))))
    source = getattr(data, "folder", None)
    with (source.features.scanned() if source is not None and source.features is not None
          else contextlib.nullcontext()):  # another folder's rows, read in order
        for lo, hi in chunk_ranges(n, int(x.size(1)) * 4):
            mapped[lo:hi] = x[lo:hi].numpy()
            progress(f"features: {hi} of {n} rows")
    mapped.flush()
    del mapped
    mapped = np.lib.format.open_memmap(tmp / "edge_index.npy", "w+", np.int64, (2, e))
    for lo, hi in chunk_ranges(e, 16):
        mapped[:, lo:hi] = edges[:, lo:hi].numpy()
    mapped.flush()
    del mapped
    for key in ("y", *SPLIT_MASKS):
        value = getattr(data, key, None)
        if value is not None:
            np.save(tmp / f"{key}.npy", value.numpy())
    progress("the sampler's index")
    finish_folder(tmp, n, feature_columns(data), getattr(data, "partly_labelled", False) is True)
