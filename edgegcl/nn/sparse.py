"""Sparse x dense products for training: the features' first layer and the aggregation.

torch differentiates a CSR x dense product by transposing the sparse matrix at every call (a
sort of its nonzeros) and runs its CSR products below ``embedding_bag``'s speed on CPUs
(docs/performance.md, "Sparse products"). Here both directions are row sums
(``embedding_bag`` with per-entry weights): the forward over the rows of M, the backward,
dL/dH = M^T G, over the rows of M^T, whose pattern (``Transpose``) is built once per sparsity
pattern and reused for any values on it: view 2's masked features keep X's pattern, and on
the full graph both layers share one adjacency. Only H gets a gradient; M is data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import FunctionCtx

__all__ = ["Transpose", "TransposeCache", "row_sums", "transpose_pattern"]


@dataclass(frozen=True)
class Transpose:
    """The pattern of M^T for a T x S CSR matrix M: its row pointers (S + 1), its column
    indices (rows of M) and ``order``, the position in M's values of each entry of M^T."""

    crow: Tensor
    col: Tensor
    order: Tensor


def transpose_pattern(crow: Tensor, col: Tensor, num_cols: int) -> Transpose:
    """``Transpose`` of the CSR pattern (``crow``, ``col``) with ``num_cols`` columns: one
    stable sort of the column indices (int32 keys where they fit: they sort faster)."""
    rows = crow.numel() - 1
    counts = torch.bincount(col, minlength=num_cols)
    crow_t = torch.zeros(num_cols + 1, dtype=torch.long, device=col.device)
    torch.cumsum(counts, 0, out=crow_t[1:])
    keys = col.to(torch.int32) if num_cols < 2**31 else col
    order = keys.argsort(stable=True)
    row_of = torch.repeat_interleave(torch.arange(rows, device=col.device), crow.diff(),
                                     output_size=col.numel())
    return Transpose(crow_t, row_of.index_select(0, order), order)


def _sums(crow: Tensor, col: Tensor, val: Tensor, h: Tensor) -> Tensor:
    """M @ h for the CSR parts of M: one weighted sum of h's rows per row of M."""
    return F.embedding_bag(col, h, crow[:-1], per_sample_weights=val.to(h.dtype), mode="sum")


class _RowSums(torch.autograd.Function):
    """M @ H with dL/dH = M^T G from a prebuilt ``Transpose`` (no gradient to M)."""

    @staticmethod
    def forward(ctx: FunctionCtx, h: Tensor, crow: Tensor, col: Tensor, val: Tensor,
                t: Transpose) -> Tensor:
        ctx.parts = (val, t)
        return _sums(crow, col, val, h.detach())  # detached: embedding_bag's forward-only kernel

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        val, t = ctx.parts
        return (_sums(t.crow, t.col, val.index_select(0, t.order), grad.contiguous()),
                None, None, None, None)


def row_sums(m: Tensor, h: Tensor, t: Transpose | None = None) -> Tensor:
    """``m @ h`` for a T x S CSR ``m`` and a dense [S, d] ``h``, differentiable in ``h``.

    ``t``: m's ``Transpose`` (built here when h needs a gradient and none is given). Without
    rows or nonzeros it is torch's own product.

    Example:
        >>> m = torch.tensor([[0.0, 2.0], [1.0, 0.0]]).to_sparse_csr()
        >>> h = torch.tensor([[1.0, 1.0], [3.0, 4.0]], requires_grad=True)
        >>> row_sums(m, h).tolist()
        [[6.0, 8.0], [1.0, 1.0]]
    """
    crow, col, val = m.crow_indices(), m.col_indices(), m.values()
    if col.numel() == 0 or m.size(0) == 0:
        return m @ h
    h = h.contiguous()
    if not h.requires_grad:
        return _sums(crow, col, val, h)
    if t is None:
        t = transpose_pattern(crow, col, m.size(1))
    return _RowSums.apply(h, crow, col, val, t)


class TransposeCache:
    """The ``Transpose`` of the last pattern seen, reused while the same index tensors come
    back (the full graph's features at every step, both views). The cache holds those
    tensors, so their memory cannot be reused by another pattern while it is kept."""

    def __init__(self) -> None:
        self._key: tuple[Tensor, Tensor, tuple[int, ...]] | None = None
        self._t: Transpose | None = None

    def get(self, m: Tensor) -> Transpose:
        crow, col = m.crow_indices(), m.col_indices()
        key = self._key
        if (key is None or self._t is None or key[2] != tuple(m.shape)
                or key[0].data_ptr() != crow.data_ptr() or key[1].data_ptr() != col.data_ptr()
                or key[1].numel() != col.numel()):
            self._key, self._t = (crow, col, tuple(m.shape)), transpose_pattern(
                crow, col, m.size(1))
        assert self._t is not None
        return self._t
