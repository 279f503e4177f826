"""A graph folder, read without torch: plain ``.npy`` files beside a small ``metadata.json``,
memory-mapped, so that what reads it holds a batch of it and not the graph (edgegcl train reads
it through edgegcl.data.folder, edgegcl-embed directly; docs/graph-folder.md).

The layout follows DGL GraphBolt's on-disk datasets (a folder of plain NumPy arrays and one
metadata file), with fixed file names, so that nothing inside a folder chooses a path:

=================  ======================================================  ==========
file               what                                                    needed
=================  ======================================================  ==========
``metadata.json``  ``{"format": FORMAT, "version": 1, "num_nodes": N,       yes
                   "num_edges": E}``, and ``"features"``: what x's columns
                   are (edgegcl_embed.columns; optional, absent: a matrix
                   without column names); ``"unlabelled": true`` where
                   y.npy marks nodes without a label with -1
``x.npy``          features [N, F], float32 or float16                     yes
``edge_index.npy`` message-passing edges [2, E] (source, target), int64;   yes
                   an undirected edge is listed both ways, as in PyG
``y.npy``          labels: [N] class ids, or [N, C] 0 / 1 multi-label       no
``train_mask.npy`` published splits: bool [N] or [S, N] (all three or none) no
``val_mask.npy``
``test_mask.npy``
``in_ptr.npy``     the index (``INDEX_FILES``): the edges but self-loops    no (built
``in_src.npy``     grouped by target (pointers [N+1] int64, sources, edge   when
``in_eid.npy``     ids) and by source (``out_ptr``, ``out_dst``);           missing)
``out_ptr.npy``    ``edgegcl convert`` writes it
``out_dst.npy``
=================  ======================================================  ==========

Every array is checked before it is mapped: a regular file (no symlink, FIFO or device), the
``.npy`` header's shape and dtype against the file's size, C order, native byte order; then
the values, a chunk at a time (finite features, node indices in range, an index that agrees
with the edges). A folder without the index gets one built out of core (a counting sort over
chunks of edges) into a private temporary file, mapped and unlinked at once.
"""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .columns import MATRIX, MAX_RECORD_FILE_BYTES, FeatureColumns
from .errors import InputError, shown
from .graph import overflow_bound
from .memory import memory_total

FORMAT = "edgegcl graph folder"
"""``metadata.json``'s ``format``: what marks a folder as a graph folder."""
VERSION = 1
"""The layout version this edgegcl reads and writes."""
METADATA = "metadata.json"
SPLIT_MASKS = ("train_mask", "val_mask", "test_mask")
"""A graph's published splits: one boolean mask per set, ``[N]`` for one split, ``[N, S]``
(PyG's layout) or ``[S, N]`` for S of them (edgegcl.data.validation reads these names)."""
GRAPH_FILES = ("x", "edge_index", "y", *SPLIT_MASKS)
"""The graph's arrays, by name (``NAME.npy``)."""
MAX_LABELS = 10_000
"""The most labels a multi-label ``y`` may have (its probe holds [N, labels] floats)."""
INDEX_FILES = ("in_ptr", "in_src", "in_eid", "out_ptr", "out_dst")
"""The sampler's and the chunked embedding's index (``FolderIndex``), by name."""
FEATURE_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))
INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
CHUNK_BYTES = 16 << 20
"""Bytes of an array read (or written) at a time by the checks and the conversion."""
EDGE_CHUNK_BYTES = 16 << 20
"""Bytes of edges (int64 pairs: 1M edges) a pass over the edges or the index takes at a time:
each chunk's sorting and gathering makes several int64 arrays of its length."""
MAX_METADATA_BYTES = 1 << 16
"""The longest ``.npy`` header read."""
MAX_FOLDER_METADATA_BYTES = MAX_METADATA_BYTES + MAX_RECORD_FILE_BYTES
"""The most bytes a ``metadata.json`` is read for: its counts and its feature record."""
MAX_SPLITS = 1000
"""The most published splits a folder's masks may hold."""


@dataclass(frozen=True)
class FolderIndex:
    """The edges without self-loops, grouped by target (``in_ptr`` [N+1], ``in_src`` the
    sources, ``in_eid`` their positions in ``edge_index``; in ``edge_index`` order within a
    target) and by source (``out_ptr``, ``out_dst``): a CSC and a CSR without values, mapped.
    The built-in sampler draws in-neighbours from the first, a chunked all-node embedding
    pulls rows through the first and pushes columns through the second."""

    in_ptr: np.ndarray
    in_src: np.ndarray
    in_eid: np.ndarray
    out_ptr: np.ndarray
    out_dst: np.ndarray

    @property
    def num_nodes(self) -> int:
        return self.in_ptr.shape[0] - 1


@dataclass(frozen=True)
class MappedRows:
    """A mapped [N, F] array's rows, read ahead in parallel on demand: ``prefetch(ids)`` asks
    the kernel for the pages of those rows at once (``MADV_WILLNEED``), so that the disk reads
    them in parallel and the gather that follows finds them read, instead of faulting them in
    one at a time."""

    mapping: mmap.mmap
    offset: int
    row_bytes: int

    def prefetch(self, ids: Any) -> None:
        rows = np.unique(np.asarray(ids))
        if rows.size == 0 or not hasattr(mmap, "MADV_WILLNEED"):
            return
        start = (self.offset + rows * self.row_bytes) // mmap.PAGESIZE * mmap.PAGESIZE
        end = self.offset + (rows + 1) * self.row_bytes
        first = np.ones(rows.size, dtype=bool)  # a run of rows whose pages touch: one request
        first[1:] = start[1:] > end[:-1]
        heads = np.flatnonzero(first)
        ends = np.maximum.reduceat(end, heads)
        # one system call per run submits its read; the kernel reads the runs in parallel
        for lo, hi in zip(start[heads].tolist(), ends.tolist()):
            self.mapping.madvise(mmap.MADV_WILLNEED, lo, hi - lo)


    @contextlib.contextmanager
    def scanned(self) -> Iterator[None]:
        """A block that reads the rows in order: read ahead meanwhile, one page at a time
        again after."""
        _advise(self.mapping, "MADV_SEQUENTIAL")
        try:
            yield
        finally:
            _advise(self.mapping, "MADV_RANDOM")



@dataclass(frozen=True)
class Folder:
    """An opened graph folder: its arrays (``x`` and ``edge_index`` mapped), its index, the
    labels and split masks it holds (in memory, shapes checked; ``labels``), its features'
    mapping (None for an empty x) and whether their rows are read ahead (``read_ahead``:
    when they are larger than half the memory this process may use, so that the page cache
    cannot be expected to hold them)."""

    path: Path
    x: np.ndarray
    edge_index: np.ndarray
    index: FolderIndex
    labels: dict[str, np.ndarray] = field(default_factory=dict)
    features: MappedRows | None = None
    read_ahead: bool = False
    feature_columns: FeatureColumns = FeatureColumns(MATRIX)
    """What x's columns are (metadata.json's ``features``; a matrix without names if absent)."""
    unlabelled: bool = False
    """Whether y.npy marks nodes without a label with -1 (metadata.json's ``unlabelled``)."""

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    @property
    def prefetch(self) -> Callable[[Any], None] | None:
        """What a batch or a chunk calls with the node ids whose rows it is about to read, or
        None when nothing is read ahead."""
        return self.features.prefetch if self.read_ahead and self.features else None


def is_graph_folder(name: str) -> bool:
    """Whether ``name`` is a directory holding a ``metadata.json`` (a graph folder, or a
    folder that claims to be one and is checked as one)."""
    try:
        return Path(name).expanduser().is_dir() and (Path(name).expanduser() / METADATA).exists()
    except (OSError, ValueError):
        return False

# ---------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------


class _Reader:
    """The checks of one folder, each problem one InputError line naming the file."""

    def __init__(self, path: Path, what: str = "graph folder", suffix: str = ".npy") -> None:
        self.path, self.what, self.suffix = path, what, suffix
        self.mappings: dict[str, mmap.mmap] = {}
        self.offsets: dict[str, int] = {}

    def fail(self, name: str, problem: str, fix: str) -> InputError:
        return InputError(f"{self.what} {self.path}: {name} {problem}; {fix}")

    @contextlib.contextmanager
    def _opened(self, name: str) -> Iterator[Any]:
        """``name`` opened for reading without following a link or blocking on a FIFO."""
        target = self.path / name
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(target, flags)
        except FileNotFoundError:
            raise self.fail(name, "is missing", "write it (docs/graph-folder.md) or convert the "
                            "graph again with edgegcl convert") from None
        except OSError as exc:
            problem = ("is a symbolic link" if target.is_symlink()
                       else f"cannot be opened ({exc.strerror or exc})")
            raise self.fail(name, problem, "put the file itself in the folder") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise self.fail(name, "is not a regular file", "put the file itself in the folder")
            with os.fdopen(fd, "rb", closefd=True) as fh:
                fd = -1
                yield fh
        finally:
            if fd >= 0:
                os.close(fd)

    def metadata(self) -> dict[str, Any]:
        fix = (f'write {{"format": "{FORMAT}", "version": {VERSION}, "num_nodes": N, '
               '"num_edges": E}')
        with self._opened(METADATA) as fh:
            raw = fh.read(MAX_FOLDER_METADATA_BYTES + 1)
        if len(raw) > MAX_FOLDER_METADATA_BYTES:
            raise self.fail(METADATA, f"is larger than {MAX_FOLDER_METADATA_BYTES} bytes", fix)
        try:
            meta = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise self.fail(METADATA, "is not JSON", fix) from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise self.fail(METADATA, f'does not say "format": "{FORMAT}"', fix)
        if meta.get("version") != VERSION:
            raise self.fail(METADATA, f"has version {meta.get('version')!r}; this edgegcl reads "
                            f"version {VERSION}", "convert the graph again with edgegcl convert")
        out: dict[str, Any] = {}
        for key in ("num_nodes", "num_edges"):
            value = meta.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise self.fail(METADATA, f"has {key} {shown(repr(value), 40)}, not a count", fix)
            out[key] = value
        unlabelled = meta.get("unlabelled", False)
        if not isinstance(unlabelled, bool):
            raise self.fail(METADATA, f"has unlabelled {shown(repr(unlabelled), 40)}, not true "
                            "or false", fix)
        out["unlabelled"] = unlabelled
        try:
            out["features"] = (FeatureColumns(MATRIX) if "features" not in meta
                               else FeatureColumns.from_value(meta["features"]))
        except ValueError as exc:
            raise self.fail(METADATA, f"cannot be used ({exc})",
                            "convert the graph again with edgegcl convert") from None
        return out

    def array(self, name: str, dtypes: tuple[np.dtype, ...] | None = None,
              shape: Callable[[tuple[int, ...]], bool] | None = None, expected: str = "",
              fix: str = "") -> np.ndarray:
        """``NAME.npy`` mapped (copy-on-write: the file is never written), its header checked
        against the file's size, dtype and ``shape`` before anything is mapped."""
        file = f"{name}.npy"
        fix = fix or "save it with np.save(path, array) as docs/graph-folder.md describes"
        with self._opened(file) as fh:
            size = os.fstat(fh.fileno()).st_size
            try:
                version = np.lib.format.read_magic(fh)
                reader = {(1, 0): np.lib.format.read_array_header_1_0,
                          (2, 0): np.lib.format.read_array_header_2_0,
                          (3, 0): np.lib.format.read_array_header_2_0}.get(version)
                if reader is None:
                    raise ValueError(f".npy format {version}")
                dims, fortran, dtype = reader(fh, max_header_size=MAX_METADATA_BYTES)
            except (ValueError, OSError, EOFError, SyntaxError, TypeError) as exc:
                raise self.fail(file, f"is not a readable .npy file ({str(exc)[:80]})", fix
                                ) from None
            offset = fh.tell()
            if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
                raise self.fail(file, f"holds {dtype} values, not plain numbers", fix)
            if dtypes is not None and dtype not in dtypes:
                names = " or ".join(str(d) for d in dtypes)
                raise self.fail(file, f"holds {dtype}, not {names}", f"store it as {names}")
            if not dtype.isnative:
                raise self.fail(file, f"is in {'big' if dtype.byteorder == '>' else 'little'}-"
                                "endian byte order", "save it in this machine's byte order "
                                "(array.astype(array.dtype.newbyteorder('=')))")
            if fortran and len(dims) > 1:
                raise self.fail(file, "is in Fortran order", "save np.ascontiguousarray(array)")
            if shape is not None and not shape(dims):
                raise self.fail(file, f"has shape {dims}, not {expected}", fix)
            declared = math.prod(dims) * dtype.itemsize
            if size - offset != declared:
                raise self.fail(file, f"declares {dims} {dtype} ({declared} bytes) but holds "
                                f"{size - offset} bytes (truncated or damaged)", fix)
            if declared == 0:
                return np.zeros(dims, dtype=dtype)
            # copy-on-write: the file is never written; read ahead while the checks scan it
            mapping = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
            _advise(mapping, "MADV_SEQUENTIAL")
            self.mappings[name], self.offsets[name] = mapping, offset
            return np.frombuffer(mapping, dtype=dtype, count=math.prod(dims),
                                 offset=offset).reshape(dims)

    def random_access(self, *names: str) -> None:
        """The named arrays' pages read one at a time from now on (no read-ahead): a batch's
        feature rows and neighbour lists are scattered, and reading ahead of each would bring
        in tens of pages it does not use, which under a memory cap evict the ones it does."""
        for name in names:
            if name in self.mappings:
                _advise(self.mappings[name], "MADV_RANDOM")

    def present(self, name: str) -> bool:
        return os.path.lexists(self.path / f"{name}.npy")


def _advise(mapping: mmap.mmap, advice: str) -> None:
    """``madvise`` where the platform has it (Linux, macOS); elsewhere the kernel's default."""
    if hasattr(mmap, advice) and hasattr(mapping, "madvise"):
        mapping.madvise(getattr(mmap, advice))


def chunk_ranges(rows: int, row_bytes: int) -> Iterator[tuple[int, int]]:
    """(lo, hi) ranges of about CHUNK_BYTES each over ``rows`` rows."""
    step = max(1, CHUNK_BYTES // max(1, row_bytes))
    for lo in range(0, rows, step):
        yield lo, min(rows, lo + step)


def edge_chunks(count: int) -> Iterator[tuple[int, int]]:
    """(lo, hi) ranges over ``count`` edges, EDGE_CHUNK_BYTES of int64 pairs each."""
    step = max(1, EDGE_CHUNK_BYTES // 16)
    for lo in range(0, count, step):
        yield lo, min(count, lo + step)


def read_folder(path: str | Path, labels: bool = True,
                say: Callable[[str], None] = lambda text: print(text, file=sys.stderr)
                ) -> Folder:
    """The graph folder at ``path``, checked (module docstring): ``x`` and ``edge_index``
    mapped, the index read or built, with ``labels`` the labels and split masks in memory
    (O(N), their values checked by whoever reads them); one InputError line for anything that
    does not hold. ``say`` tells that a missing index is being built."""
    where = Path(path).expanduser()
    r = _Reader(where)
    meta = r.metadata()
    n, e = meta["num_nodes"], meta["num_edges"]
    if n < 2:
        raise r.fail(METADATA, f"says the graph has {n} node(s)", "a graph needs two nodes")
    x = r.array("x", FEATURE_DTYPES, lambda s: len(s) == 2 and s[1] >= 1,
                "[num_nodes, num_features]")
    if x.shape[0] != n:
        raise r.fail(METADATA, f"says num_nodes {n} but x.npy has {x.shape[0]} rows",
                     "write the node count x has")
    edges = r.array("edge_index", (np.dtype(np.int64),), lambda s: len(s) == 2 and s[0] == 2,
                    "[2, num_edges]")
    if edges.shape[1] != e:
        raise r.fail(METADATA, f"says num_edges {e} but edge_index.npy has {edges.shape[1]}",
                     "write the edge count edge_index has")
    _check_features(r, x, say)
    _check_edges(r, edges, n)
    held = _small_arrays(r, n) if labels else {}
    index = _folder_index(r, edges, n, say)
    r.random_access("x")
    features = (MappedRows(r.mappings["x"], r.offsets["x"], x.shape[1] * x.itemsize)
                if "x" in r.mappings else None)
    columns = meta["features"]
    if columns.width not in (None, x.shape[1]):
        raise r.fail(METADATA, f"names feature columns {columns.width} values wide in all, "
                     f"but x.npy has {x.shape[1]} columns",
                     "convert the graph again with edgegcl convert")
    return Folder(where, x, edges, index, held, features, x.nbytes > memory_total() // 2,
                  columns, meta["unlabelled"])


def check_arrays(path: Path, x: np.ndarray, edges: np.ndarray,
                 say: Callable[[str], None]) -> None:
    """The checks a folder's ``x`` and ``edge_index`` get, for the same arrays mapped from a
    graph file's members (``NpzArchive.mapped``): finite features (a warning where float32
    products would overflow), every node index in range, a chunk at a time; one InputError
    line naming the file and the member otherwise."""
    r = _Reader(path, "graph file", "")
    _check_features(r, x, say)
    _check_edges(r, edges, x.shape[0])


def _small_arrays(r: _Reader, n: int) -> dict[str, np.ndarray]:
    """The labels and split masks the folder has, read into memory (O(N) each: [N] or
    [N, C] labels with C up to MAX_LABELS; masks [N], [S, N] or [N, S] with S up to
    MAX_SPLITS), their shapes checked before they are read."""
    def labels(s: tuple[int, ...]) -> bool:
        return s == (n,) or (len(s) == 2 and s[0] == n and 1 <= s[1] <= MAX_LABELS)

    def masks(s: tuple[int, ...]) -> bool:
        return s == (n,) or (len(s) == 2 and n in s and min(s) <= MAX_SPLITS)

    found = {}
    for key in ("y", *SPLIT_MASKS):
        if r.present(key):
            array = r.array(key, None, labels if key == "y" else masks,
                            f"[{n}] or [{n}, labels]" if key == "y"
                            else f"[{n}], [splits, {n}] or [{n}, splits]")
            need = array.size * 8  # read, then held as int64 / bool by whoever checks it
            if need > memory_total() // 2:
                raise r.fail(f"{key}.npy", f"holds {array.size} values ({need / 2**30:.3g} GiB "
                             "as int64), more than half the memory this process may use",
                             "store fewer label columns or splits")
            found[key] = np.array(array)
    return found


def _check_features(r: _Reader, x: np.ndarray, say: Callable[[str], None]) -> None:
    """Every feature finite, a chunk at a time; a warning when one is large enough for
    float32 products of features to overflow."""
    largest = 0.0
    for lo, hi in chunk_ranges(x.shape[0], x.shape[1] * x.itemsize):
        block = np.asarray(x[lo:hi], dtype=np.float32)
        if not np.isfinite(block).all():
            row = lo + int(np.nonzero(~np.isfinite(block).all(axis=1))[0][0])
            raise r.fail(f"x{r.suffix}", f"holds NaN or inf (first in row {row})",
                         "replace non-finite features")
        largest = max(largest, float(np.abs(block).max(initial=0.0)))
    bound = overflow_bound(x.shape[1])
    if largest > bound:
        say(f"warning: {r.what} {r.path}: x holds |values| up to {largest:.3g}, above "
            f"{bound:.3g} = sqrt(float32 max / {x.shape[1]} features), where float32 products "
            "of features overflow to inf; scale or standardise x")


def _check_edges(r: _Reader, edges: np.ndarray, n: int) -> None:
    """Every node index of ``edges`` in 0..n-1, a chunk at a time."""
    for lo, hi in chunk_ranges(edges.shape[1], 2 * edges.itemsize):
        block = edges[:, lo:hi]
        low, high = int(block.min()), int(block.max())
        if low < 0 or high >= n:
            bad = low if low < 0 else high
            raise r.fail(f"edge_index{r.suffix}", f"holds node {bad} but the graph has {n} nodes",
                         f"node indices must be 0..{n - 1}")

# ---------------------------------------------------------------------------------------
# The index
# ---------------------------------------------------------------------------------------


def _folder_index(r: _Reader, edges: np.ndarray, n: int,
                  say: Callable[[str], None]) -> FolderIndex:
    """The folder's index, checked against its edges; built into a private temporary file
    when the folder has none."""
    present = [name for name in INDEX_FILES if r.present(name)]
    if not present:
        say(f"graph folder {r.path} has no sampler index; building it in "
            f"{tempfile.gettempdir()} for this run (edgegcl convert writes a folder with one)")
        with tempfile.TemporaryDirectory(prefix="edgegcl-index-") as tmp:
            build_index(edges, n, Path(tmp))
            return _read_index(_Reader(Path(tmp)), edges, n)  # mapped: the files may go
    if len(present) < len(INDEX_FILES):
        missing = ", ".join(f"{k}.npy" for k in INDEX_FILES if k not in present)
        raise r.fail("the index", f"lacks {missing}", "remove every index file (it is then "
                     "built for each run) or convert the graph again with edgegcl convert")
    return _read_index(r, edges, n)


def _read_index(r: _Reader, edges: np.ndarray, n: int) -> FolderIndex:
    """The five index arrays mapped, each checked: the pointers' counts are the edges'
    (self-loops left out) per target and per source, every slot's source and edge id agree
    with ``edges``, and each grouping keeps ``edges``' order within a node."""
    e = edges.shape[1]
    fix = "remove the index files (they are then built for each run) or convert the graph again"
    ptrs = {}
    for name in ("in_ptr", "out_ptr"):
        ptr = r.array(name, (np.dtype(np.int64),), lambda s: s == (n + 1,), f"[{n + 1}]", fix)
        ptrs[name] = ptr
    kept = int(ptrs["in_ptr"][-1])
    arrays = {name: r.array(name, INDEX_DTYPES, lambda s: s == (kept,), f"[{kept}]", fix)
              for name in ("in_src", "in_eid", "out_dst")}
    in_counts, out_counts = _degrees(edges, n)
    for name, counts in (("in_ptr", in_counts), ("out_ptr", out_counts)):
        ptr = np.asarray(ptrs[name])
        if ptr[0] != 0 or not np.array_equal(np.diff(ptr), counts):
            raise r.fail(f"{name}.npy", "does not count the edges of edge_index.npy", fix)
    in_ptr = np.asarray(ptrs["in_ptr"])
    for lo, hi in edge_chunks(kept):
        eid = np.asarray(arrays["in_eid"][lo:hi], dtype=np.int64)
        if eid.size and (eid.min() < 0 or eid.max() >= e):
            raise r.fail("in_eid.npy", f"holds an edge id outside 0..{e - 1}", fix)
        target = np.searchsorted(in_ptr, np.arange(lo, hi), side="right") - 1
        src = np.asarray(arrays["in_src"][lo:hi])
        if (not np.array_equal(edges[0, eid], src) or not np.array_equal(edges[1, eid], target)):
            raise r.fail("in_src.npy", "does not list the edges of edge_index.npy", fix)
        grouped = np.diff(eid) > 0  # edge_index order within a target
        if not (grouped | (np.diff(target) != 0)).all():
            raise r.fail("in_eid.npy", "is not in edge_index.npy's order within a node", fix)
    out_ptr = np.asarray(ptrs["out_ptr"])
    for lo, hi in edge_chunks(kept):
        dst = np.asarray(arrays["out_dst"][lo:hi], dtype=np.int64)
        if dst.size and (dst.min() < 0 or dst.max() >= n):
            raise r.fail("out_dst.npy", f"holds node {int(dst.max())} outside 0..{n - 1}", fix)
    # out_dst as a multiset per source: the same in-degree counts from its side
    targets_seen = np.zeros(n, np.int64)
    for lo, hi in edge_chunks(kept):
        targets_seen += np.bincount(np.asarray(arrays["out_dst"][lo:hi], dtype=np.int64),
                                    minlength=n)
    if not np.array_equal(targets_seen, in_counts):
        raise r.fail("out_dst.npy", "does not list the edges of edge_index.npy", fix)
    del out_ptr
    r.random_access("in_src", "in_eid", "out_dst")
    return FolderIndex(ptrs["in_ptr"], arrays["in_src"], arrays["in_eid"], ptrs["out_ptr"],
                       arrays["out_dst"])


def _degrees(edges: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each node's in- and out-degree in ``edges`` [2, E], self-loops left out, a chunk of
    edges at a time."""
    in_counts, out_counts = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for lo, hi in edge_chunks(edges.shape[1]):
        src, dst = np.asarray(edges[0, lo:hi]), np.asarray(edges[1, lo:hi])
        keep = src != dst
        in_counts += np.bincount(dst[keep], minlength=n)
        out_counts += np.bincount(src[keep], minlength=n)
    return in_counts, out_counts


def index_dtype(count: int) -> np.dtype:
    return np.dtype(np.int32) if count <= np.iinfo(np.int32).max else np.dtype(np.int64)


def counting_slots(key: np.ndarray, cursor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One chunk's step of a counting sort by ``key`` (node ids): the chunk's order by key
    (stable) and, for each in that order, its slot in the sorted whole; ``cursor`` (each
    key's next free slot) is advanced past the chunk."""
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    first = np.searchsorted(sorted_key, sorted_key, side="left")
    slot = cursor[sorted_key] + (np.arange(sorted_key.size) - first)
    cursor += np.bincount(key, minlength=cursor.size)
    return order, slot


def finish_folder(folder: Path, num_nodes: int, columns: FeatureColumns,
                  unlabelled: bool = False) -> None:
    """A folder whose graph arrays are written finished: its index built from its
    ``edge_index.npy`` (``build_index``), then ``metadata.json``, written last, with what x's
    ``columns`` are and whether y.npy marks nodes without a label (``unlabelled``)."""
    edges = np.load(folder / "edge_index.npy", mmap_mode="r")
    build_index(edges, num_nodes, folder)
    meta = {"format": FORMAT, "version": VERSION, "num_nodes": num_nodes,
            "num_edges": int(edges.shape[1]), "features": json.loads(columns.to_text()),
            **({"unlabelled": True} if unlabelled else {})}
    del edges
    (folder / METADATA).write_text(json.dumps(meta, indent=1) + "\n")


def build_index(edges: np.ndarray, num_nodes: int, out: Path) -> None:
    """Write ``INDEX_FILES`` for ``edges`` [2, E] into the folder ``out``, out of core: a
    counting sort over chunks of edges (two passes: the counts, then each edge written at
    its node's cursor), so memory is O(N) plus a chunk, whatever E. Self-loops are left out
    (the GCN adds one per node, Eq. 4); within a node the edges keep their order."""
    n, e = num_nodes, edges.shape[1]
    in_counts, out_counts = _degrees(edges, n)
    node_t, edge_t = index_dtype(n), index_dtype(e)
    sides = {}
    for name, counts in (("in", in_counts), ("out", out_counts)):
        ptr = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=ptr[1:])
        np.save(out / f"{name}_ptr.npy", ptr)
        sides[name] = ptr
    kept = int(sides["in"][-1])
    in_src = np.lib.format.open_memmap(out / "in_src.npy", "w+", node_t, (kept,))
    in_eid = np.lib.format.open_memmap(out / "in_eid.npy", "w+", edge_t, (kept,))
    out_dst = np.lib.format.open_memmap(out / "out_dst.npy", "w+", node_t, (kept,))
    cursor_in, cursor_out = sides["in"][:-1].copy(), sides["out"][:-1].copy()
    for lo, hi in edge_chunks(e):
        src = np.asarray(edges[0, lo:hi], dtype=np.int64)
        dst = np.asarray(edges[1, lo:hi], dtype=np.int64)
        keep = np.nonzero(src != dst)[0]
        src, dst, eid = src[keep], dst[keep], keep + lo
        for key, cursor, columns in ((dst, cursor_in, ((in_src, src), (in_eid, eid))),
                                     (src, cursor_out, ((out_dst, dst),))):
            order, slot = counting_slots(key, cursor)
            for target, values in columns:
                target[slot] = values[order]
    for array in (in_src, in_eid, out_dst):
        array.flush()
    del in_src, in_eid, out_dst
