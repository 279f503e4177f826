"""Sparse x dense products (edgegcl.nn.sparse) against dense products, values and gradients."""

from __future__ import annotations

import pytest
import torch

from edgegcl.nn.adjacency import gcn_adjacency
from edgegcl.nn.augment import as_features, keep_columns, mask_half_rows_columns
from edgegcl.nn.model import GCNEncoder, ModelConfig
from edgegcl.nn.sparse import TransposeCache, row_sums, transpose_pattern


def _random_csr(rows: int, cols: int, density: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    dense = (torch.rand(rows, cols, generator=g) < density) * torch.randn(rows, cols, generator=g)
    dense[rows // 2] = 0.0  # an empty row
    return dense.double().to_sparse_csr()


@pytest.mark.parametrize("rows,cols", [(7, 5), (5, 9), (1, 4), (30, 30)])
def test_row_sums_equal_the_dense_product(rows: int, cols: int) -> None:
    m = _random_csr(rows, cols, 0.4, rows + cols)
    h = torch.randn(cols, 3, dtype=torch.float64, requires_grad=True)
    g = torch.randn(rows, 3, dtype=torch.float64)
    out = row_sums(m, h)
    out.backward(g)
    ours = h.grad.clone()
    h.grad = None
    (m.to_dense() @ h).backward(g)
    # float64 sums of a handful of terms: far inside 1e-12
    assert torch.allclose(out, m.to_dense() @ h, rtol=0, atol=1e-12)
    assert torch.allclose(ours, h.grad, rtol=0, atol=1e-12)


def test_gradcheck() -> None:
    m = _random_csr(6, 4, 0.5, 3)
    h = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda h: row_sums(m, h), (h,))


def test_transpose_pattern_is_the_transpose() -> None:
    m = _random_csr(9, 6, 0.3, 1)
    t = transpose_pattern(m.crow_indices(), m.col_indices(), 6)
    mt = torch.sparse_csr_tensor(t.crow, t.col, m.values()[t.order], (6, 9),
                                 check_invariants=True)
    assert torch.equal(mt.to_dense(), m.to_dense().t())


def test_no_rows_or_no_entries() -> None:
    empty = torch.zeros(3, 4, dtype=torch.float64).to_sparse_csr()
    h = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    assert torch.equal(row_sums(empty, h), torch.zeros(3, 2, dtype=torch.float64))


def test_the_cache_reuses_a_pattern_for_new_values_only() -> None:
    x = _random_csr(8, 6, 0.5, 2)
    cache = TransposeCache()
    t = cache.get(x)
    masked = keep_columns(x, torch.tensor([1.0, 0, 1, 1, 0, 1], dtype=torch.float64))
    assert cache.get(masked) is t  # same index tensors: same transpose
    other = _random_csr(8, 6, 0.5, 5)
    assert cache.get(other) is not t


def test_sparse_features_train_as_dense_ones() -> None:
    """The first layer on CSR features (row sums, with view 2's masked values) gives the
    dense layer's output and weight gradients, in float64."""
    torch.manual_seed(0)
    n, d = 40, 30
    x = ((torch.rand(n, d) < 0.1) * torch.rand(n, d)).double()
    edges = torch.randint(0, n, (2, 120))
    enc = GCNEncoder(d, ModelConfig(16, 8, 8, "prelu")).double()
    keep = (torch.rand(d) > 0.3).double()
    x2 = mask_half_rows_columns(as_features(x), 0.4, torch.Generator().manual_seed(1))
    grads = []
    for features in (as_features(x), x):
        for mask, inputs in ((keep, features), (None, x2 if features.is_sparse_csr else
                                                 x2.to_dense())):
            enc.zero_grad()
            out = enc(inputs, edges, feature_keep=mask)
            out.square().sum().backward()
            grads.append((out.detach(), enc.conv1.lin.weight.grad.clone()))
    for (sparse_out, sparse_grad), (dense_out, dense_grad) in zip(grads[:2], grads[2:]):
        assert torch.allclose(sparse_out, dense_out, rtol=1e-10, atol=1e-12)
        assert torch.allclose(sparse_grad, dense_grad, rtol=1e-10, atol=1e-12)


def test_full_graph_layers_share_one_adjacency() -> None:
    edges = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    a1, a2 = gcn_adjacency(edges, 4, [4, 4])
    assert a1 is a2
    b1, b2 = gcn_adjacency(edges, 4, [4, 2])
    assert b1 is not b2 and b2.matrix.shape == (2, 4)
