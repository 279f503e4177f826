"""The GCN-normalised adjacency A_hat = D^-1/2 (A + I) D^-1/2 as one CSR matrix.

This is the sparse half of the encoder (the model file holds the dense half, see
``edgegcl_embed.contract``). One CSR product touches every nonzero once and writes each output row
once, so memory stays O(N d + E): no [E, d] message tensor as a gather + scatter formulation
builds. The build and the product run in ``edgegcl_embed.kernels`` (numba's compiled loops when
installed, else numpy and scipy's CSR product), which release the GIL, so row blocks run
concurrently on a thread pool; each block is summed in a fixed order, so the result does not
depend on the number of threads. docs/export.md compares this with the alternatives.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np
from scipy.sparse import csr_matrix

from .kernels import csr_block, csr_rows_product, fill_adjacency


def index_dtype(*sizes: int) -> type[np.signedinteger]:
    """int32 indices when every size fits (half the bytes to stream), int64 otherwise."""
    return np.int32 if max(sizes) < 2**31 - 1 else np.int64


class NormalisedAdjacency:
    """A_hat of a graph (or k-hop subgraph) as CSR arrays: rows are targets, columns sources.

    Input self-loops are dropped and exactly one loop per node is added, as PyG's ``gcn_norm``
    does; an edge listed twice counts twice. ``deg`` gives the degrees to normalise with (the
    full graph's, for a subgraph); by default they are counted from ``edge_index``.
    ``kernel`` ("numba" or "scipy", ``edgegcl_embed.kernels.resolve_kernel``) builds it: numba in one
    pass over the edges (rows in edge order), numpy with an argsort of the targets; the two
    orders sum the same terms, so products agree to float32 rounding.
    """

    def __init__(self, edge_index: np.ndarray, num_nodes: int,
                 deg: np.ndarray | None = None, kernel: str = "scipy") -> None:
        idx = index_dtype(num_nodes, edge_index.shape[1] + num_nodes)
        src, dst = edge_index.astype(idx)  # narrow first: every temporary below is half the size
        loops = src == dst
        counts = np.bincount(dst, minlength=num_nodes) + 1  # + the self-loop
        if loops.any():
            counts -= np.bincount(dst[loops], minlength=num_nodes)
            if kernel != "numba":  # numba's pass skips them itself
                src, dst = src[~loops], dst[~loops]
        del loops
        if deg is None:  # the counts are the GCN degrees (edgegcl_embed.graph.gcn_degree)
            deg = counts
        dinv = np.asarray(deg, dtype=np.float32) ** np.float32(-0.5)
        self.indptr = np.zeros(num_nodes + 1, dtype=idx)
        np.cumsum(counts, out=self.indptr[1:])
        nnz = int(self.indptr[-1])
        self.indices = np.empty(nnz, dtype=idx)
        self.num_nodes = num_nodes
        if kernel == "numba":
            self.data = np.empty(nnz, dtype=np.float32)
            fill_adjacency(src, dst, dinv, self.indptr, self.indices, self.data)
            return
        order = np.argsort(dst)  # any order within a row: the sum is taken in this fixed order
        del dst
        first = self.indptr[:-1]
        self.indices[first] = np.arange(num_nodes, dtype=idx)  # each row starts with its loop
        edge_slots = np.ones(nnz, dtype=bool)
        edge_slots[first] = False
        self.indices[edge_slots] = src[order]
        del order, edge_slots, src
        self.data = np.repeat(dinv, counts)
        self.data *= dinv[self.indices]

    @property
    def nnz(self) -> int:
        """Stored entries: the edges that are not self-loops, plus one loop per node."""
        return int(self.data.size)

    def rows(self, lo: int, hi: int) -> csr_matrix:
        """Rows lo..hi-1 of A_hat as a scipy matrix sharing this object's arrays."""
        return csr_block(self.data, self.indices, self.indptr, lo, hi, self.num_nodes)

    def product(self, lo: int, hi: int, h: np.ndarray, kernel: str = "scipy",
                out: np.ndarray | None = None) -> np.ndarray:
        """(A_hat h)[lo:hi] for a C-contiguous float32 h [num_nodes, d]: float32 [hi - lo, d],
        with ``kernel`` (edgegcl_embed.kernels), into ``out`` when given."""
        return csr_rows_product(kernel, self.data, self.indices, self.indptr, lo, hi, h, out)


class IndexedAdjacency:
    """A_hat of a graph on disk, its rows built a block at a time from a graph folder's index
    (``edgegcl_embed.folder.FolderIndex``: ``in_ptr`` [N+1], ``in_src`` the sources of the edges
    into each node, self-loops not listed): only the degrees, N floats, are held, so memory
    follows the block and not the graph. Same weights as ``NormalisedAdjacency`` (one loop per
    node, an edge listed twice counts twice).

    A product reads only the rows of h its block needs: they are gathered (half floats
    widened to float32), after they are asked for at once where h is
    registered (a mapped array larger than memory allows: ``register``).
    """

    def __init__(self, in_ptr: np.ndarray, in_src: np.ndarray) -> None:
        self.in_ptr, self.in_src = in_ptr, in_src
        self.num_nodes = in_ptr.shape[0] - 1
        deg = np.diff(in_ptr).astype(np.float32) + np.float32(1)  # + the self-loop
        self.dinv = deg ** np.float32(-0.5)
        self._read_ahead: dict[int, Callable[[np.ndarray], None]] = {}

    def register(self, h: np.ndarray, prefetch: Callable[[np.ndarray], None]) -> None:
        """Call ``prefetch(rows)`` before a block reads those rows of ``h`` (forgotten when
        ``h`` is freed)."""
        key = id(h)
        self._read_ahead[key] = prefetch
        weakref.finalize(h, self._read_ahead.pop, key, None)

    def product(self, lo: int, hi: int, h: np.ndarray, kernel: str = "scipy",
                out: np.ndarray | None = None) -> np.ndarray:
        """(A_hat h)[lo:hi] for h [num_nodes, d] (float32 or a half float): float32
        [hi - lo, d], with ``kernel`` (edgegcl_embed.kernels), into ``out`` when given."""
        e0, e1 = int(self.in_ptr[lo]), int(self.in_ptr[hi])
        t = hi - lo
        counts = np.diff(self.in_ptr[lo:hi + 1]).astype(np.int64) + 1
        indptr = np.zeros(t + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        loop = indptr[1:] - 1  # each row's loop last
        cols = np.empty(e1 - e0 + t, dtype=np.int64)
        edge_slots = np.ones(cols.size, dtype=bool)
        edge_slots[loop] = False
        cols[edge_slots] = self.in_src[e0:e1]
        cols[loop] = np.arange(lo, hi)
        targets = np.repeat(np.arange(lo, hi), counts)
        data = self.dinv[cols] * self.dinv[targets]
        needed, local = np.unique(cols, return_inverse=True)
        prefetch = self._read_ahead.get(id(h))
        if prefetch is not None:
            prefetch(needed)
        rows = np.ascontiguousarray(h[needed], dtype=np.float32)
        idx = index_dtype(needed.size, cols.size)
        return csr_rows_product(kernel, data, local.astype(idx), indptr.astype(idx), 0, t,
                                rows, out)
