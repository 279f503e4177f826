"""Graphs as numpy arrays: loading, validation, GCN degrees, k-hop in-neighbourhoods."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix, issparse, spmatrix

from .errors import InputError

# A sparse x in a graph file: scipy.sparse.save_npz's arrays for a CSR matrix, prefixed "x_".
SPARSE_X_KEYS = ("x_data", "x_indices", "x_indptr", "x_shape")

# A dense x, or a scipy sparse matrix (sparse arrays, such as csr_array, are accepted too).
Features = np.ndarray | spmatrix


def save_npz(path: str | Path, x: Features, edge_index: np.ndarray) -> None:
    """Write a graph file ``load_npz`` reads: arrays ``x`` and ``edge_index``, or, for a sparse
    x, its CSR arrays ``x_data``, ``x_indices``, ``x_indptr``, ``x_shape`` (no pickles)."""
    if issparse(x):
        x = csr_matrix(x)
        np.savez(path, x_data=x.data, x_indices=x.indices, x_indptr=x.indptr,
                 x_shape=np.array(x.shape, dtype=np.int64), edge_index=edge_index)
    else:
        np.savez(path, x=x, edge_index=edge_index)


def _sparse_x(npz: np.lib.npyio.NpzFile, p: Path) -> csr_matrix:
    """The CSR x stored as SPARSE_X_KEYS (validated later by check_graph)."""
    data, indices, indptr, shape = (npz[k] for k in SPARSE_X_KEYS)
    if shape.shape != (2,) or shape.dtype.kind not in "iu":
        raise InputError(f"graph file {p} has x_shape {shape.tolist()}, not [num_nodes, in_dim]; "
                         "write x with edgegcl_embed.graph.save_npz")
    try:
        return csr_matrix((data, indices, indptr), shape=(int(shape[0]), int(shape[1])))
    except (ValueError, TypeError) as exc:
        raise InputError(f"graph file {p} holds a malformed CSR x ({exc}); write x with "
                         "edgegcl_embed.graph.save_npz") from None


def load_npz(path: str | Path) -> tuple[Features, np.ndarray]:
    """``x`` and ``edge_index`` from an ``.npz`` file (read without unpickling anything).

    x is a dense array ``x`` or a CSR matrix stored as SPARSE_X_KEYS (see ``save_npz``).
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"graph file {p} does not exist; pass an .npz holding x and edge_index")
    fix = "write it with numpy.savez(path, x=..., edge_index=...)"
    try:
        npz = np.load(p, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise InputError(f"graph file {p} holds a single array, not x and edge_index; {fix}")
        with npz:
            sparse = "x" not in npz.files and all(k in npz.files for k in SPARSE_X_KEYS)
            missing = [k for k in ("x", "edge_index") if k not in npz.files
                       and not (k == "x" and sparse)]
            if missing:
                raise InputError(f"graph file {p} has no {' or '.join(missing)} (it holds "
                                 f"{', '.join(npz.files) or 'nothing'}); store arrays named x "
                                 "[num_nodes, in_dim] (or a CSR x as "
                                 f"{', '.join(SPARSE_X_KEYS)}) and edge_index [2, num_edges]")
            return (_sparse_x(npz, p) if sparse else npz["x"]), npz["edge_index"]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"graph file {p} cannot be read as .npz ({exc}); {fix}") from None


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


def gcn_degree(edge_index: np.ndarray, num_nodes: int) -> np.ndarray:
    """Each node's degree in A + I as GCN normalises it: 1 + its in-edges that are not self-loops.

    Existing self-loops are not counted because GCN (PyG's ``add_remaining_self_loops``)
    replaces them by exactly one loop per node, which is the 1.
    """
    src, dst = edge_index
    counts = np.bincount(dst[src != dst], minlength=num_nodes)
    return (counts + 1).astype(np.float32)


class InNeighbourhoods:
    """Edges grouped by target node (CSR), to cut k-hop in-neighbourhoods out of a graph."""

    def __init__(self, edge_index: np.ndarray, num_nodes: int) -> None:
        self.src = edge_index[0]
        self.order = np.argsort(edge_index[1], kind="stable")
        self.indptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(edge_index[1], minlength=num_nodes), out=self.indptr[1:])
        self._seen = np.zeros(num_nodes, dtype=bool)

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
            into = self._edges_into(frontier)
            edges.append(into)
            sources = self.src[into]
            frontier = np.unique(sources[~self._seen[sources]])
            self._seen[frontier] = True
            rings.append(frontier)
        nodes = np.concatenate(rings)
        self._seen[nodes] = False
        return nodes, np.concatenate(edges)
