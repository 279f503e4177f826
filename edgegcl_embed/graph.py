"""Graphs as numpy arrays: loading, validation, GCN degrees, k-hop in-neighbourhoods."""

from __future__ import annotations

import errno
import math
import mmap
import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np
from scipy.sparse import csr_matrix, issparse, spmatrix

from .errors import InputError, first_line, shown
from .files import replacing

# A sparse x in a graph file: scipy.sparse.save_npz's arrays for a CSR matrix, prefixed "x_".
SPARSE_X_KEYS = ("x_data", "x_indices", "x_indptr", "x_shape")

# A dense x, or a scipy sparse matrix (sparse arrays, such as csr_array, are accepted too).
Features = np.ndarray | spmatrix


def write_npz(fh: BinaryIO, x: Features, edge_index: np.ndarray) -> None:
    """Write a graph file ``load_npz`` reads into the open binary file ``fh``: arrays ``x`` and
    ``edge_index``, or, for a sparse x, its CSR arrays ``x_data``, ``x_indices``, ``x_indptr``,
    ``x_shape`` (no pickles)."""
    if issparse(x):
        x = csr_matrix(x)
        np.savez(fh, x_data=x.data, x_indices=x.indices, x_indptr=x.indptr,
                 x_shape=np.array(x.shape, dtype=np.int64), edge_index=edge_index)
    else:
        np.savez(fh, x=x, edge_index=edge_index)


def save_npz(path: str | Path, x: Features, edge_index: np.ndarray) -> None:
    """``write_npz`` to exactly ``path`` (no ".npz" appended), atomically
    (``files.replacing``: a refused write is one InputError line, the old file stays)."""
    with replacing([Path(path)]) as (tmp,), tmp.open("wb") as fh:
        write_npz(fh, x, edge_index)


# The .npy format versions numpy writes for plain arrays, and their header readers.
_NPY_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}
_NPY_MAGIC = b"\x93NUMPY"

# deflate's largest expansion, bytes out per byte in (zlib's technical notes): a deflated
# member that declares more than this many bytes per stored byte is forged.
DEFLATE_MAX_RATIO = 1032

# What can go wrong reading a zip member: bad CRC or local header, a broken deflate stream,
# a short read, a malformed .npy header or dtype, an encrypted or exotically compressed member.
_MEMBER_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, ValueError, TypeError,
                  OverflowError, OSError, RuntimeError, NotImplementedError)


def check_file(path: Path, what: str, fix: str) -> None:
    """Raise a one-line InputError unless ``path`` is a regular file, saying what it is instead:
    missing, a directory, a symlink loop or a dangling symlink, or a FIFO or device (which a
    reader would block on or read forever)."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            problem = "is a symlink loop"
        elif exc.errno == errno.ENOENT and path.is_symlink():
            problem = "is a symlink to a file that does not exist"
        elif exc.errno in (errno.ENOENT, errno.ENOTDIR):
            problem = "does not exist"
        else:
            problem = f"cannot be accessed ({exc.strerror or exc})"
    else:
        if stat.S_ISDIR(mode):
            problem = "is a directory, not a file"
        elif not stat.S_ISREG(mode):
            problem = "is not a regular file (a FIFO, socket or device)"
        else:
            return
    raise InputError(f"{what} {path} {problem}; {fix}")


class NpzArchive:
    """An open .npz whose members are read only after their .npy header has been checked
    against the member's size, so a forged header fails in one line instead of allocating
    what it declares; Python objects (pickles) are never loaded. Use ``open_npz``."""

    def __init__(self, path: Path, archive: zipfile.ZipFile, size: int, fix: str,
                 file: BinaryIO | None = None) -> None:
        self.path, self._zip, self._size, self._fix = path, archive, size, fix
        self._file = file
        self._members = {info.filename.removesuffix(".npy"): info for info in archive.infolist()}

    @property
    def names(self) -> list[str]:
        """The arrays the archive holds (member names without ".npy", as numpy lists them)."""
        return list(self._members)

    def __contains__(self, name: str) -> bool:
        return name in self._members

    def _fail(self, info: zipfile.ZipInfo, problem: str) -> InputError:
        return InputError(f"graph file {self.path}: member {shown(info.filename)} {problem}; "
                          f"{self._fix}")

    def _check_member(self, info: zipfile.ZipInfo) -> None:
        """The member's .npy header against the bytes the member really holds."""
        if info.compress_type == zipfile.ZIP_STORED:
            stored_max = info.compress_size
        elif info.compress_type == zipfile.ZIP_DEFLATED:
            stored_max = info.compress_size * DEFLATE_MAX_RATIO
        else:
            raise self._fail(info, f"uses zip compression method {info.compress_type}, which "
                                   "numpy never writes")
        if info.header_offset + info.compress_size > self._size:
            raise self._fail(info, f"claims {info.compress_size} bytes beyond the end of the "
                                   f"{self._size}-byte file (truncated)")
        if info.file_size > stored_max:
            raise self._fail(info, f"claims {info.file_size} bytes but stores "
                                   f"{info.compress_size} (a forged zip entry)")
        with self._zip.open(info) as fh:
            version = np.lib.format.read_magic(fh)
            if version not in _NPY_HEADER_READERS:
                raise self._fail(info, f"is .npy format {version[0]}.{version[1]}, which holds "
                                       "no plain array")
            shape, _, dtype = _NPY_HEADER_READERS[version](fh)
            data_bytes = info.file_size - fh.tell()
        if dtype.hasobject:
            raise self._fail(info, "holds Python objects (pickled data, never unpickled here)")
        if any(d < 0 for d in shape):
            raise self._fail(info, f"declares the negative shape {shape}")
        declared = math.prod(shape) * dtype.itemsize
        if declared != data_bytes:
            raise self._fail(info, f"declares shape {shape} of {dtype} ({declared} bytes) but "
                                   f"holds {data_bytes} bytes (truncated or forged)")

    def mapped(self, name: str) -> np.ndarray | None:
        """The array ``name`` memory-mapped from the archive (copy-on-write: the file is never
        written), for a member numpy stored uncompressed (``np.savez``) in C order and this
        machine's byte order, its header checked first; None for any other (deflated by
        ``np.savez_compressed``, Fortran order, byte-swapped, empty), which is read whole."""
        info = self._members[name]
        if info.compress_type != zipfile.ZIP_STORED or self._file is None:
            return None
        try:
            self._check_member(info)
            with self._zip.open(info) as fh:
                version = np.lib.format.read_magic(fh)
                shape, fortran, dtype = _NPY_HEADER_READERS[version](fh)
                header = fh.tell()
            self._file.seek(info.header_offset)  # the local header: 30 bytes, name, extra
            local = self._file.read(30)
            if len(local) < 30 or local[:4] != b"PK\x03\x04":
                raise zipfile.BadZipFile("a damaged local file header")
            name_len, extra_len = struct.unpack("<HH", local[26:30])
        except _MEMBER_ERRORS as exc:
            raise self._fail(info, f"cannot be read ({first_line(exc)})") from None
        start = info.header_offset + 30 + name_len + extra_len + header
        count = math.prod(shape)
        if (fortran and len(shape) > 1) or not dtype.isnative or count == 0:
            return None
        if start + count * dtype.itemsize > self._size:
            raise self._fail(info, "ends beyond the end of the file (truncated)")
        mapping = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_COPY)
        return np.frombuffer(mapping, dtype=dtype, count=count, offset=start).reshape(shape)

    def __getitem__(self, name: str) -> np.ndarray:
        """The array ``name``, read after ``_check_member``; any failure is one InputError."""
        info = self._members[name]
        try:
            self._check_member(info)
            with self._zip.open(info) as fh:
                return np.lib.format.read_array(fh, allow_pickle=False)
        except _MEMBER_ERRORS as exc:
            raise self._fail(info, f"cannot be read ({first_line(exc)})") from None


@contextmanager
def open_npz(path: str | Path, fix: str) -> Iterator[NpzArchive]:
    """``path`` opened as an .npz archive of plain arrays; anything else (a missing file, a
    directory, a bare .npy, bytes that are no zip) is a one-line InputError ending in ``fix``."""
    p = Path(path)
    check_file(p, "graph file", fix)
    try:
        fh = p.open("rb")
    except OSError as exc:
        raise InputError(f"graph file {p} cannot be read ({exc.strerror or exc}); {fix}"
                         ) from None
    with fh:
        if fh.read(len(_NPY_MAGIC)) == _NPY_MAGIC:
            raise InputError(f"graph file {p} holds a single array (.npy), not an .npz archive "
                             f"of named arrays; {fix}")
        try:
            archive = zipfile.ZipFile(fh)
        except (zipfile.BadZipFile, ValueError, EOFError, OSError):
            raise InputError(f"graph file {p} is not a valid .npz (zip) file; {fix}") from None
        with archive:
            yield NpzArchive(p, archive, os.fstat(fh.fileno()).st_size, fix, fh)


def _sparse_x(npz: NpzArchive, p: Path) -> csr_matrix:
    """The CSR x stored as SPARSE_X_KEYS (validated later by check_graph)."""
    data, indices, indptr, shape = (npz[k] for k in SPARSE_X_KEYS)
    if shape.shape != (2,) or shape.dtype.kind not in "iu":
        raise InputError(f"graph file {p} has an x_shape of shape {shape.shape} "
                         f"({shape.dtype}), not [num_nodes, in_dim] as two integers; write x with "
                         "edgegcl_embed.graph.save_npz")
    try:
        return csr_matrix((data, indices, indptr), shape=(int(shape[0]), int(shape[1])))
    except (ValueError, TypeError, OverflowError) as exc:
        raise InputError(f"graph file {p} holds a malformed CSR x ({first_line(exc)}); write x "
                         "with edgegcl_embed.graph.save_npz") from None


def signed_indices(indices: np.ndarray, path: Path, name: str) -> np.ndarray:
    """Node indices of an unsigned integer type as int64 (what every reader computes with),
    one InputError line when one exceeds int64; any other array as it is."""
    if indices.dtype.kind != "u":
        return indices
    if indices.size and int(indices.max()) > np.iinfo(np.int64).max:
        raise InputError(f"graph file {path}: {name} holds a node index beyond 2^63 - 1; "
                         "number the nodes 0, 1, 2, ...")
    return indices.astype(np.int64)


EDGE_READINGS: tuple[str, ...] = ("auto", "undirected", "directed")
"""How a graph file's edges are read (``--edges``): ``auto`` as its format says (an edge table
and the heterophilous-graph benchmark's ``edges`` list each undirected edge once, so each is
used both ways; edgegcl's ``edge_index`` and a graph folder hold message-passing edges, used as
stored), ``undirected`` each edge both ways, once, whatever the format, ``directed`` each
edge as stored, one way. A file's name never changes it."""


def check_reading(reading: str) -> str:
    """``reading`` if it is one of EDGE_READINGS, else one InputError line."""
    if reading not in EDGE_READINGS:
        raise InputError(f"--edges {shown(str(reading), 40)} is not a way to read edges; use "
                         f"one of {', '.join(EDGE_READINGS)}")
    return reading


def reads_both_ways(reading: str, listed_once: bool) -> bool:
    """Whether edges stored by a format that lists each undirected edge once
    (``listed_once``: edge tables, the benchmark's ``edges``) or as message-passing edges are
    used both ways under ``reading`` (EDGE_READINGS)."""
    return check_reading(reading) == "undirected" or (reading == "auto" and listed_once)


def both_ways(edge_index: np.ndarray) -> np.ndarray:
    """Each edge of ``edge_index`` [2, E] in both directions, once (an edge listed both ways,
    or twice, counts once), sorted by (source, target)."""
    both = np.concatenate([edge_index, edge_index[::-1]], axis=1)
    return np.unique(both, axis=1) if both.size else both.reshape(2, 0)


def benchmark_edges(edges: np.ndarray, path: Path, reading: str = "auto") -> np.ndarray:
    """The heterophilous-graph benchmark's ``edges`` [E, 2] as an ``edge_index`` [2, E']: each
    undirected edge both ways (once, however the file lists it), as the benchmark's own loader
    reads its undirected graphs, unless ``reading`` is ``directed`` (its directed variants:
    each row one way). edgegcl train and edgegcl-embed read a benchmark file through this
    one function."""
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise InputError(f"graph file {path}: edges has shape {edges.shape}, not "
                         "[num_edges, 2]; store one (source, target) row per edge")
    edge_index = np.ascontiguousarray(signed_indices(edges, path, "edges").T)
    if reads_both_ways(reading, True) and edges.dtype.kind in "iu":  # others: refused later
        edge_index = both_ways(edge_index)
    return edge_index


def load_npz(path: str | Path, reading: str = "auto") -> tuple[Features, np.ndarray]:
    """``x`` and ``edge_index`` from an ``.npz`` file (read without unpickling anything, every
    member's declared size checked before it is allocated; see ``open_npz``), its edges read
    as ``reading`` says (EDGE_READINGS).

    x is a dense array ``x`` or a CSR matrix stored as SPARSE_X_KEYS (see ``save_npz``). A file
    in the heterophilous-graph benchmark's layout (``node_features``, ``edges`` [E, 2]) is read
    as edgegcl train reads it (``benchmark_edges``).
    """
    p = Path(path)
    fix = "write it with numpy.savez(path, x=..., edge_index=...)"
    check_reading(reading)
    with open_npz(p, fix) as npz:
        if "x" not in npz and "node_features" in npz and "edges" in npz:
            return npz["node_features"], benchmark_edges(npz["edges"], p, reading)
        sparse = "x" not in npz and all(k in npz for k in SPARSE_X_KEYS)
        missing = [k for k in ("x", "edge_index") if k not in npz and not (k == "x" and sparse)]
        if missing:
            raise InputError(f"graph file {p} has no {' or '.join(missing)} (it holds "
                             f"{', '.join(map(shown, npz.names[:10])) or 'nothing'}); store "
                             "arrays named x [num_nodes, in_dim] (or a CSR x as "
                             f"{', '.join(SPARSE_X_KEYS)}) and edge_index [2, num_edges]")
        edge_index = signed_indices(npz["edge_index"], p, "edge_index")
        if (reads_both_ways(reading, False) and edge_index.ndim == 2
                and edge_index.shape[0] == 2 and edge_index.dtype.kind in "iu"):  # others: refused later
            edge_index = both_ways(edge_index)
        return (_sparse_x(npz, p) if sparse else npz["x"]), edge_index


def _check_sparse_x(x: spmatrix) -> csr_matrix:
    """A scipy sparse x as float32 CSR with valid indices and finite values."""
    x = csr_matrix(x, dtype=np.float32)
    try:
        x.check_format(full_check=True)  # indices in range: scipy's kernels do not check them
    except ValueError as exc:
        raise InputError(f"x is a malformed CSR matrix ({exc}); build it with scipy.sparse"
                         ) from None
    if not np.isfinite(x.data).all():
        first = int(np.flatnonzero(~np.isfinite(x.data))[0])
        row = int(np.searchsorted(x.indptr, first, side="right")) - 1
        raise InputError(f"x holds NaN or inf (first in row {row}); replace non-finite features")
    return x


def check_graph(x: Features, edge_index: np.ndarray,
                in_dim: int) -> tuple[np.ndarray | csr_matrix, np.ndarray]:
    """Validate a graph for a model with ``in_dim`` input features; return float32 x (dense, or
    CSR for any scipy sparse x) and int64 edges.

    Checks the feature dimension, dtypes (real numbers; integer indices), finiteness and that
    every edge index names a node. The first problem found is raised as a one-line InputError.
    """
    if x.ndim != 2:
        raise InputError(f"x must be 2-D [num_nodes, {in_dim}] but has shape {x.shape}; reshape x")
    if x.shape[1] != in_dim:
        raise InputError(f"x has {x.shape[1]} features per node but the model expects {in_dim}; "
                         "pass the features the model was trained on")
    if x.dtype.kind not in "fiu":
        raise InputError(f"x must hold real numbers but has dtype {x.dtype}; store x as float32")
    if x.shape[0] < 1:
        raise InputError("x has no rows; a graph needs at least one node")
    if issparse(x):
        x = _check_sparse_x(x)
    else:
        x = np.ascontiguousarray(x, dtype=np.float32)
        if not np.isfinite(x.sum()) and not np.isfinite(x).all():
            row = int(np.nonzero(~np.isfinite(x).all(axis=1))[0][0])
            raise InputError(f"x holds NaN or inf (first in row {row}); replace non-finite "
                             "features")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise InputError(f"edge_index must have shape [2, num_edges] but has {edge_index.shape}; "
                         "transpose or reshape it")
    if edge_index.dtype.kind not in "iu":
        raise InputError(f"edge_index must hold integers but has dtype {edge_index.dtype}; "
                         "store it as int64")
    n = x.shape[0]
    if edge_index.size:
        lo, hi = int(edge_index.min()), int(edge_index.max())
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            raise InputError(f"edge_index holds node {bad} but the graph has {n} nodes (x has {n} "
                             f"rows); node indices must be 0..{n - 1}")
    return x, np.ascontiguousarray(edge_index, dtype=np.int64)


FLOAT32_MAX = float(np.finfo(np.float32).max)


def overflow_bound(num_features: int) -> float:
    """The largest |x| whose float32 products cannot overflow: a row's squared norm, or the dot
    product of two rows, sums ``num_features`` products of two features, each at most |x|^2,
    so it stays below float32's maximum while |x| <= sqrt(max / num_features)."""
    return math.sqrt(FLOAT32_MAX / num_features)


def gcn_degree(edge_index: np.ndarray, num_nodes: int) -> np.ndarray:
    """Each node's degree in A + I as GCN normalises it: 1 + its in-edges that are not self-loops.

    Existing self-loops are not counted because GCN (PyG's ``add_remaining_self_loops``)
    replaces them by exactly one loop per node, which is the 1.
    """
    src, dst = edge_index
    counts = np.bincount(dst[src != dst], minlength=num_nodes)
    return (counts + 1).astype(np.float32)


class InNeighbourhoods:
    """Edges grouped by target node (CSR), to cut k-hop in-neighbourhoods out of a graph:
    ``src`` each edge's source, ``order`` the edge ids grouped by target, ``indptr`` [N+1]
    where each target's group starts. ``of(edge_index, n)`` sorts a graph's edges; a graph
    folder's index is one already (edgegcl_embed.folder)."""

    def __init__(self, src: np.ndarray, order: np.ndarray, indptr: np.ndarray) -> None:
        self.src, self.order, self.indptr = src, order, indptr
        self._seen = np.zeros(indptr.shape[0] - 1, dtype=bool)

    @classmethod
    def of(cls, edge_index: np.ndarray, num_nodes: int) -> InNeighbourhoods:
        """The in-neighbourhoods of ``edge_index`` [2, E] over ``num_nodes`` nodes."""
        indptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(edge_index[1], minlength=num_nodes), out=indptr[1:])
        return cls(edge_index[0], np.argsort(edge_index[1], kind="stable"), indptr)

    def _edges_into(self, nodes: np.ndarray) -> np.ndarray:
        """Ids of all edges whose target is in ``nodes``."""
        starts = self.indptr[nodes]
        counts = self.indptr[nodes + 1] - starts
        offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
        return self.order[offsets + np.arange(int(counts.sum()))]

    def khop(self, targets: np.ndarray, hops: int) -> tuple[np.ndarray, np.ndarray]:
        """Nodes within ``hops`` in-hops of ``targets`` (targets first) and the edges they need.

        A k-layer GCN's output at a target depends on the nodes within k hops, through the
        edges into nodes within k - 1 hops; edges into the outermost ring only feed outputs
        that are not needed, so they are left out. Returns (node ids, edge ids).
        """
        rings, edges = [targets], []
        self._seen[targets] = True
        frontier = targets
        for _ in range(hops):
            if frontier.size == 0:  # nothing further away: more hops add nothing
                break
            into = self._edges_into(frontier)
            edges.append(into)
            sources = self.src[into]
            frontier = np.unique(sources[~self._seen[sources]])
            self._seen[frontier] = True
            rings.append(frontier)
        nodes = np.concatenate(rings)
        self._seen[nodes] = False
        return nodes, np.concatenate(edges)
