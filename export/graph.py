"""Graphs as numpy arrays: loading, validation, GCN degrees, k-hop in-neighbourhoods."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from .errors import InputError


def load_npz(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """``x`` and ``edge_index`` from an ``.npz`` file (read without unpickling anything)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"graph file {p} does not exist; pass an .npz holding x and edge_index")
    fix = "write it with numpy.savez(path, x=..., edge_index=...)"
    try:
        npz = np.load(p, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise InputError(f"graph file {p} holds a single array, not x and edge_index; {fix}")
        with npz:
            missing = [k for k in ("x", "edge_index") if k not in npz.files]
            if missing:
                raise InputError(f"graph file {p} has no {' or '.join(missing)} (it holds "
                                 f"{', '.join(npz.files) or 'nothing'}); store arrays named x "
                                 "[num_nodes, in_dim] and edge_index [2, num_edges]")
            return npz["x"], npz["edge_index"]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"graph file {p} cannot be read as .npz ({exc}); {fix}") from None


def check_graph(x: np.ndarray, edge_index: np.ndarray,
                in_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate a graph for a model with ``in_dim`` input features; return float32 x, int64 edges.

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
    x = np.ascontiguousarray(x, dtype=np.float32)
    if not np.isfinite(x.sum()) and not np.isfinite(x).all():
        row = int(np.nonzero(~np.isfinite(x).all(axis=1))[0][0])
        raise InputError(f"x holds NaN or inf (first in row {row}); replace non-finite features")
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
