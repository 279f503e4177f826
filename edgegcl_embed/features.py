"""The sparse first layer: stage 0's x W1 as a CSR product over x's nonzeros.

Bag-of-words features are mostly zeros, so the dense MatMul of stage 0 spends almost all its
multiply-adds on them; a CSR product costs one row of W1 per nonzero instead. A model that
exposes W1 (``edgegcl_embed.contract``) lets the runtime take that product with its CSR
kernel (``edgegcl_embed.kernels``), block by block on its worker threads like the other stages: x
handed over as a scipy sparse matrix is used as it is, and a dense x that is mostly zeros is
converted one block at a time inside the workers; which way is cheaper depends on x's density
and the model's precision (``use_sparse_product``). The blocks are the runtime's, so the
result does not depend on the thread count; each row is summed in its stored column order.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix, issparse

from .adjacency import index_dtype
from .kernels import csr_block, csr_rows_product

# Stage 0 runs as a CSR product when x's density (nonzeros / entries) is below these limits,
# by the model's precision; else as the model's MatMul, a CSR x densified one block at a time.
# Break-even densities measured on Cora's shape (1433 features into 512, docs/export.md
# "Sparse first layer"): the CSR product costs the same per nonzero at either precision, while
# onnxruntime's INT8 MatMul is two to three times faster than its fp32 one; converting a dense
# block to CSR costs about a fifth of the fp32 MatMul, as much as the whole INT8 one, so a
# dense x is never converted for INT8. Measured with scipy's kernel; numba's is no slower, so
# the limits stay on the safe side with it.
SPARSE_DENSITY = {"fp32": 0.05, "int8": 0.015}  # x given as a scipy sparse matrix
CONVERT_DENSITY = {"fp32": 0.03, "int8": 0.0}  # x given dense, converted block by block

# Rows of a dense x whose nonzeros are counted to estimate its density (spread over all rows).
DENSITY_SAMPLE_ROWS = 256


def density(x: np.ndarray | csr_matrix) -> float:
    """Fraction of nonzero entries: exact for CSR, from evenly spaced rows for a dense x."""
    if issparse(x):
        return x.nnz / max(1, x.shape[0] * x.shape[1])
    sample = x[::max(1, x.shape[0] // DENSITY_SAMPLE_ROWS)]
    return np.count_nonzero(sample) / max(1, sample.size)


def use_sparse_product(x: np.ndarray | csr_matrix, precision: str) -> bool:
    """Whether stage 0 on ``x`` is cheaper as a CSR product than as the model's MatMul."""
    limits = SPARSE_DENSITY if issparse(x) else CONVERT_DENSITY
    return density(x) < limits.get(precision, 0.0)


def dense_rows(x: np.ndarray | csr_matrix, lo: int, hi: int) -> np.ndarray:
    """Rows lo..hi-1 of x as a dense float32 array (a CSR x densified one block at a time)."""
    if issparse(x):
        return csr_block(x.data, x.indices, x.indptr, lo, hi, x.shape[1]).toarray()
    return x[lo:hi]


def dense_rows_to_csr(rows: np.ndarray) -> csr_matrix:
    """A C-contiguous dense block as CSR, without scipy's generic (much slower) conversion."""
    num_rows, num_cols = rows.shape
    flat = np.flatnonzero(rows != 0)  # row-major positions: each row's nonzeros in order
    idx = index_dtype(num_cols, rows.size)
    indptr = np.searchsorted(flat, np.arange(0, (num_rows + 1) * num_cols, num_cols,
                                             dtype=np.int64)).astype(idx)
    return csr_matrix((rows.reshape(-1)[flat], (flat % num_cols).astype(idx), indptr),
                      shape=rows.shape, copy=False)


def sparse_product(x: np.ndarray | csr_matrix, lo: int, hi: int, w1: np.ndarray,
                   kernel: str = "scipy", out: np.ndarray | None = None) -> np.ndarray:
    """(x W1)[lo:hi] over the nonzeros of rows lo..hi-1 of x (CSR, or dense and converted),
    with ``kernel`` (edgegcl_embed.kernels), into ``out`` when given."""
    if issparse(x):
        return csr_rows_product(kernel, x.data, x.indices, x.indptr, lo, hi, w1, out)
    block = dense_rows_to_csr(x[lo:hi])
    return csr_rows_product(kernel, block.data, block.indices, block.indptr, 0, hi - lo, w1, out)
