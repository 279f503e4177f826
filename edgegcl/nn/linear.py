"""A node-wise linear layer whose input may be the sparse feature matrix, and row slices of
dense or sparse CSR node tensors.

The encoders' first layer reads the features, which are a sparse CSR tensor when mostly zeros
(``edgegcl.nn.augment.as_features``); ``FeatureLinear`` takes either, and folds view 1's column
mask (Eq. 2's nu_1) into its weight, as ``edgegcl.nn.model.GCNLayer`` does:
(X o nu) W^T = X (W o nu)^T, gradients included.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from edgegcl.nn.sparse import TransposeCache, row_sums

__all__ = ["FeatureLinear", "row_block"]


class FeatureLinear(nn.Module):
    """``x W^T (+ b)`` for a dense or sparse CSR ``x``, initialised as ``torch.nn.Linear``.

    ``columns_first`` stores W column by column (W^T contiguous; same shape and values), so
    the sparse product's row sums read W^T without a transposed copy at every step.

    Example:
        >>> lin = FeatureLinear(4, 3)
        >>> x = torch.eye(4)
        >>> torch.allclose(lin(x.to_sparse_csr()), lin(x))
        True
    """

    def __init__(self, in_dim: int, out_dim: int, bias: bool = True,
                 columns_first: bool = False) -> None:
        super().__init__()
        reference = nn.Linear(in_dim, out_dim, bias=bias)  # torch's initialisation, drawn
        weight = reference.weight.detach()
        if columns_first:
            weight = weight.t().contiguous().t()
        self.weight = nn.Parameter(weight)
        self.bias = None if reference.bias is None else nn.Parameter(reference.bias.detach())
        self._sparse_input = TransposeCache()

    @property
    def in_features(self) -> int:
        return int(self.weight.size(1))

    @property
    def out_features(self) -> int:
        return int(self.weight.size(0))

    def forward(self, h: Tensor, in_keep: Tensor | None = None) -> Tensor:
        """``(h o in_keep) W^T + b``; ``in_keep`` (0 / 1 per input column) masks W's columns."""
        weight = self.weight if in_keep is None else self.weight * in_keep
        if h.layout == torch.sparse_csr:
            t = self._sparse_input.get(h) if weight.requires_grad else None
            out = row_sums(h, weight.t(), t)
            return out if self.bias is None else out.add_(self.bias)
        return F.linear(h, weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


HALF_FLOATS = (torch.float16, torch.bfloat16)
"""Feature types stored at half width (a graph folder's ``--half``) and widened to float32
where they are computed with."""


def row_block(h: Tensor, lo: int, hi: int) -> Tensor:
    """Rows lo..hi-1 of a dense or sparse CSR node tensor (a CSR slice shares h's arrays
    except its shifted row pointers); dense rows of another float type (a graph folder's
    float16 features) widened to float32."""
    if h.layout != torch.sparse_csr:
        rows = h[lo:hi]
        return rows.float() if rows.dtype in HALF_FLOATS else rows
    crow = h.crow_indices()
    start, end = int(crow[lo]), int(crow[hi])
    return torch.sparse_csr_tensor(crow[lo:hi + 1] - start, h.col_indices()[start:end],
                                   h.values()[start:end], (hi - lo, h.size(1)),
                                   check_invariants=False)

