"""An edge list (CSV / TSV, with an optional node table) written as a graph folder out of
core, so that converting a graph larger than memory stays bounded too (docs/graph-folder.md).

The graph is the one ``edgegcl_embed.tables.read_tables`` reads into memory, array for array:
nodes numbered in the node table's order, or in the sorted order of the ids the edges name;
self-loops dropped; each edge both ways (one way with ``--edges directed``), once, sorted by
source then target; structural
features where the node table has no feature columns. Memory is O(N) (the ids, the degrees)
plus a chunk of rows or edges, whatever E:

1. the node ids: the node table's, or the edge table read TABLE_CHUNK_ROWS rows at a time,
   each chunk's ids merged into the sorted set so far;
2. the edge table read again, each chunk's ids numbered, written (both ways) to a temporary;
3. a counting sort by source over chunks of those edges (``counting_slots``), then each run of
   sources (about a chunk of edges) sorted by target and its repeats dropped, into
   ``edge_index.npy``;
4. the features, labels, the sampler's index and ``metadata.json`` (``finish_folder``).
The node table, when given, is read whole (its N rows of features are what the folder holds).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from .columns import STRUCTURAL, FeatureColumns
from .folder import EDGE_CHUNK_BYTES, counting_slots, edge_chunks, finish_folder
from .tables import (Numbering, check_ids, edge_id_chunks, read_node_table,
                     structural_features)

__all__ = ["TABLE_CHUNK_ROWS", "write_edge_table"]

TABLE_CHUNK_ROWS = 1 << 18
"""Rows of an edge table parsed at a time (its strings are the chunk's largest part)."""

Progress = Callable[[float, str], None]
"""Told the share of the work done (0..1) and what is being done."""


def write_edge_table(edges: str | Path, folder: Path, nodes: str | Path | None = None, *,
                     half: bool = False, progress: Progress | None = None,
                     both: bool = True) -> FeatureColumns:
    """The graph of the edge table ``edges`` (and node table ``nodes``) written into the
    empty folder ``folder`` (the caller's, made exclusively), a chunk at a time (the module's
    docstring); float16 features with ``half``; each edge one way only, from the first
    column's node to the second's, without ``both`` (``--edges directed``). What its features
    are (the node table's feature columns, or the structural ones), which the folder's
    metadata records. Every problem of the tables is one InputError line."""
    edges = Path(edges)
    say: Progress = progress or (lambda done, text: None)
    table = None if nodes is None else read_node_table(nodes)
    numbering = Numbering.of(table.ids) if table is not None else _edge_ids(edges, say)
    n = int(numbering.sorted_ids.size)
    count = _numbered(edges, numbering, None if nodes is None else Path(nodes), folder, say,
                      both)
    _unique_by_source(folder, n, count, say)
    say(0.9, "the features and the sampler's index")
    x = table.x if table is not None else None
    columns = table.feature_columns if table is not None else None
    if x is None or columns is None:
        x = structural_features(np.load(folder / "edge_index.npy", mmap_mode="r"), n)
        columns = FeatureColumns(STRUCTURAL)
    np.save(folder / "x.npy", x.astype(np.float16 if half else np.float32))
    del x
    unlabelled = table is not None and table.y is not None and bool((table.y < 0).any())
    if table is not None and table.y is not None:
        np.save(folder / "y.npy", table.y)
    finish_folder(folder, n, columns, unlabelled)
    say(1.0, "done")
    return columns


def _edge_ids(edges: Path, say: Progress) -> Numbering:
    """Pass 1: the ids the edges name, sorted, numbered in that order."""
    ids: np.ndarray | None = None
    for ends, read in edge_id_chunks(edges, TABLE_CHUNK_ROWS):
        chunk = np.unique(ends)
        ids = chunk if ids is None else np.union1d(ids, chunk)
        say(0.3 * read, "the node ids")
    assert ids is not None  # edge_id_chunks yields at least one edge
    check_ids(ids, edges)
    return Numbering(ids, np.arange(ids.size, dtype=np.int64))


def _numbered(edges: Path, numbering: Numbering, nodes: Path | None, folder: Path,
              say: Progress, both: bool) -> int:
    """Pass 2: every edge as node numbers, both ways (one way without ``both``), self-loops
    dropped, appended to the temporaries ``.src`` / ``.dst`` in ``folder``; how many."""
    count = 0
    with open(folder / ".src", "xb") as src, open(folder / ".dst", "xb") as dst:
        for ends, read in edge_id_chunks(edges, TABLE_CHUNK_ROWS):
            pairs = numbering.edges(ends, edges, nodes)
            if both:
                pairs = np.concatenate([pairs, pairs[::-1]], axis=1)
            src.write(np.ascontiguousarray(pairs[0]).tobytes())
            dst.write(np.ascontiguousarray(pairs[1]).tobytes())
            count += pairs.shape[1]
            say(0.3 + 0.3 * read, "numbering the edges")
    return count


def _unique_by_source(folder: Path, n: int, count: int, say: Progress) -> None:
    """Pass 3: the temporaries' edges sorted by source then target, each once, as
    ``edge_index.npy``; the temporaries removed."""
    src = _mapped(folder / ".src", count)
    dst = _mapped(folder / ".dst", count)
    per_source = np.zeros(n, np.int64)
    for lo, hi in edge_chunks(count):
        per_source += np.bincount(src[lo:hi], minlength=n)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(per_source, out=ptr[1:])
    grouped = np.lib.format.open_memmap(folder / ".grouped.npy", "w+", np.int64, (count,))
    cursor = ptr[:-1].copy()
    for lo, hi in edge_chunks(count):
        order, slot = counting_slots(np.asarray(src[lo:hi]), cursor)
        grouped[slot] = np.asarray(dst[lo:hi])[order]
    del src, dst
    (folder / ".src").unlink()
    (folder / ".dst").unlink()
    kept_src = np.lib.format.open_memmap(folder / ".kept_src.npy", "w+", np.int64, (count,))
    kept_dst = np.lib.format.open_memmap(folder / ".kept_dst.npy", "w+", np.int64, (count,))
    kept, step, a = 0, EDGE_CHUNK_BYTES // 16, 0
    while a < n:  # a run of sources with about a chunk of edges (at least one source)
        b = min(n, max(a + 1, int(np.searchsorted(ptr, ptr[a] + step, side="right")) - 1))
        if ptr[b] > ptr[a]:
            sources = np.repeat(np.arange(a, b, dtype=np.int64), per_source[a:b])
            targets = np.asarray(grouped[ptr[a]:ptr[b]])
            order = np.lexsort((targets, sources))
            sources, targets = sources[order], targets[order]
            new = np.ones(sources.size, bool)
            new[1:] = (sources[1:] != sources[:-1]) | (targets[1:] != targets[:-1])
            sources, targets = sources[new], targets[new]
            kept_src[kept: kept + sources.size] = sources
            kept_dst[kept: kept + sources.size] = targets
            kept += sources.size
        say(0.6 + 0.3 * int(ptr[b]) / max(1, count), "sorting the edges")
        a = b
    del grouped
    out = np.lib.format.open_memmap(folder / "edge_index.npy", "w+", np.int64, (2, kept))
    for lo, hi in edge_chunks(kept):
        out[0, lo:hi], out[1, lo:hi] = kept_src[lo:hi], kept_dst[lo:hi]
    out.flush()
    del out, kept_src, kept_dst
    for name in (".grouped.npy", ".kept_src.npy", ".kept_dst.npy"):
        (folder / name).unlink()


def _mapped(path: Path, count: int) -> np.ndarray:
    """A temporary of ``count`` int64 mapped for reading (empty: an empty array)."""
    return np.memmap(path, np.int64, "r", shape=(count,)) if count else np.zeros(0, np.int64)
