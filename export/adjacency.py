"""The GCN-normalised adjacency A_hat = D^-1/2 (A + I) D^-1/2 as one CSR matrix.

This is the sparse half of the encoder (the model file holds the dense half, see
``export.contract``). One CSR product touches every nonzero once and writes each output row
once, so memory stays O(N d + E): no [E, d] message tensor as a gather + scatter formulation
builds. The product runs in scipy's compiled CSR kernel, which releases the GIL, so row blocks
run concurrently on a thread pool; each block is summed in a fixed order, so the result does
not depend on the number of threads. docs/export.md compares this with the alternatives.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix


def index_dtype(*sizes: int) -> type[np.signedinteger]:
    """int32 indices when every size fits (half the bytes to stream), int64 otherwise."""
    return np.int32 if max(sizes) < 2**31 - 1 else np.int64


def csr_row_block(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, lo: int, hi: int,
                  num_cols: int) -> csr_matrix:
    """Rows lo..hi-1 of the CSR matrix (data, indices, indptr), sharing its data and indices:
    a block costs O(hi - lo), where scipy's own row slicing copies the block's nonzeros."""
    start, stop = int(indptr[lo]), int(indptr[hi])
    return csr_matrix((data[start:stop], indices[start:stop], indptr[lo:hi + 1] - indptr[lo]),
                      shape=(hi - lo, num_cols), copy=False)


class NormalisedAdjacency:
    """A_hat of a graph (or k-hop subgraph) as CSR arrays: rows are targets, columns sources.

    Input self-loops are dropped and exactly one loop per node is added, as PyG's ``gcn_norm``
    does; an edge listed twice counts twice. ``deg`` gives the degrees to normalise with (the
    full graph's, for a subgraph); by default they are counted from ``edge_index``.
    """

    def __init__(self, edge_index: np.ndarray, num_nodes: int,
                 deg: np.ndarray | None = None) -> None:
        idx = index_dtype(num_nodes, edge_index.shape[1] + num_nodes)
        src, dst = edge_index.astype(idx)  # narrow first: every temporary below is half the size
        loops = src == dst
        if loops.any():
            src, dst = src[~loops], dst[~loops]
        del loops
        order = np.argsort(dst)  # any order within a row: the sum is taken in this fixed order
        counts = np.bincount(dst, minlength=num_nodes) + 1  # + the self-loop
        del dst
        if deg is None:  # the counts are the GCN degrees (export.graph.gcn_degree)
            deg = counts
        self.indptr = np.zeros(num_nodes + 1, dtype=idx)
        np.cumsum(counts, out=self.indptr[1:])
        nnz = int(self.indptr[-1])
        self.indices = np.empty(nnz, dtype=idx)
        first = self.indptr[:-1]
        self.indices[first] = np.arange(num_nodes, dtype=idx)  # each row starts with its loop
        edge_slots = np.ones(nnz, dtype=bool)
        edge_slots[first] = False
        self.indices[edge_slots] = src[order]
        del order, edge_slots, src
        dinv = np.asarray(deg, dtype=np.float32) ** np.float32(-0.5)
        self.data = np.repeat(dinv, counts)
        self.data *= dinv[self.indices]
        self.num_nodes = num_nodes

    @property
    def nnz(self) -> int:
        """Stored entries: the edges that are not self-loops, plus one loop per node."""
        return int(self.data.size)

    def rows(self, lo: int, hi: int) -> csr_matrix:
        """Rows lo..hi-1 of A_hat as a scipy matrix sharing this object's arrays."""
        return csr_row_block(self.data, self.indices, self.indptr, lo, hi, self.num_nodes)

    def product(self, lo: int, hi: int, h: np.ndarray) -> np.ndarray:
        """(A_hat h)[lo:hi] for a C-contiguous float32 h [num_nodes, d]: float32 [hi - lo, d]."""
        return self.rows(lo, hi) @ h
