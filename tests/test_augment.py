"""Tests for edgegcl.nn.augment: edge removal (Eq. 1) and the two feature-masking schemes (Eqs. 2-3)."""

from __future__ import annotations

import math

import pytest
import torch

from edgegcl.nn.augment import mask_columns, mask_half_rows_columns, remove_edges


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _within(observed: float, p: float, n: int, sigmas: float = 5.0) -> bool:
    """Whether a Bernoulli(p) frequency over n trials is within ``sigmas`` standard errors of p."""
    sd = math.sqrt(p * (1.0 - p) / n)
    return abs(observed - p) <= sigmas * sd + 1e-12


def _edges(num: int) -> torch.Tensor:
    """A [2, num] edge index whose columns are all distinct (row 0 is the column number)."""
    src = torch.arange(num)
    return torch.stack([src, (src * 7 + 3) % 1000])


# --------------------------------------------------------------------------- remove_edges

@pytest.mark.parametrize("p", [0.1, 0.4, 0.75])
def test_remove_edges_drop_rate_matches_p(p: float) -> None:
    num = 200_000
    kept = remove_edges(_edges(num), p, _gen(1))
    drop_rate = 1.0 - kept.size(1) / num
    assert _within(drop_rate, p, num), (drop_rate, p)


def test_remove_edges_keeps_an_ordered_subset_of_the_input() -> None:
    edge_index = _edges(5000)
    kept = remove_edges(edge_index, 0.5, _gen(2))
    assert kept.shape[0] == 2 and 0 < kept.size(1) < 5000
    assert kept.dtype == edge_index.dtype
    positions = kept[0]  # row 0 holds each column's original position
    assert bool((positions[1:] > positions[:-1]).all()), "kept edges must stay in input order"
    assert torch.equal(kept, edge_index[:, positions]), "kept columns must be unchanged input columns"


def test_remove_edges_extremes() -> None:
    edge_index = _edges(1000)
    assert torch.equal(remove_edges(edge_index, 0.0, _gen(3)), edge_index)
    dropped = remove_edges(edge_index, 1.0, _gen(3))
    assert dropped.shape == (2, 0)


def test_remove_edges_does_not_modify_input() -> None:
    edge_index = _edges(1000)
    before = edge_index.clone()
    remove_edges(edge_index, 0.5, _gen(4))
    assert torch.equal(edge_index, before)


def test_remove_edges_is_reproducible_per_seed() -> None:
    edge_index = _edges(2000)
    a = remove_edges(edge_index, 0.3, _gen(5))
    b = remove_edges(edge_index, 0.3, _gen(5))
    c = remove_edges(edge_index, 0.3, _gen(6))
    assert torch.equal(a, b)
    assert a.shape != c.shape or not torch.equal(a, c), "a different seed must drop other edges"


# --------------------------------------------------------------------------- mask_columns

@pytest.mark.parametrize("p", [0.2, 0.5, 0.9])
def test_mask_columns_zeroes_whole_columns_at_rate_p(p: float) -> None:
    d = 20_000
    x = torch.rand(6, d, generator=_gen(7)) + 0.5  # strictly positive: zeros come only from the mask
    out = mask_columns(x, p, _gen(8))
    assert out.shape == x.shape and out.dtype == x.dtype
    zero_col = (out == 0).all(dim=0)
    same_col = (out == x).all(dim=0)
    assert bool((zero_col | same_col).all()), "every column must be untouched or entirely zero"
    rate = zero_col.float().mean().item()
    assert _within(rate, p, d), (rate, p)


def test_mask_columns_does_not_modify_input_and_is_reproducible() -> None:
    x = torch.rand(5, 300, generator=_gen(9)) + 0.5
    before = x.clone()
    a = mask_columns(x, 0.5, _gen(10))
    b = mask_columns(x, 0.5, _gen(10))
    c = mask_columns(x, 0.5, _gen(11))
    assert torch.equal(x, before)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert a.data_ptr() != x.data_ptr()


def test_mask_columns_extremes() -> None:
    x = torch.rand(4, 50, generator=_gen(12)) + 0.5
    assert torch.equal(mask_columns(x, 0.0, _gen(13)), x)
    assert bool((mask_columns(x, 1.0, _gen(13)) == 0).all())


# --------------------------------------------------------------------------- mask_half_rows_columns

@pytest.mark.parametrize("p", [0.25, 0.6])
def test_mask_half_rows_columns_fixed_half_and_entry_rate(p: float) -> None:
    n, d = 400, 501  # odd d: floor(d/2) = 250 columns fixed, 251 unfixed
    x = torch.ones(n, d)
    out = mask_half_rows_columns(x, p, _gen(14))
    assert out.shape == x.shape
    untouched = (out == 1).all(dim=0)
    assert int(untouched.sum()) >= d // 2
    # With 400 rows, an unfixed column escapes masking with probability (1-p)^400 ~ 0.
    assert int(untouched.sum()) == d // 2
    unfixed = ~untouched
    zeros = (out[:, unfixed] == 0)
    rate = zeros.float().mean().item()
    assert _within(rate, p, zeros.numel()), (rate, p)
    # Entry-wise (rows x columns) mask: no unfixed column is zeroed as a whole.
    assert bool(zeros.any(dim=0).all())
    assert not bool(zeros.all(dim=0).any()), "view-2 masking must not zero whole columns"
    # Only zeros and the original ones appear.
    assert bool(((out == 0) | (out == 1)).all())


def test_mask_half_rows_columns_keeps_column_positions() -> None:
    n, d = 50, 40
    x = (torch.arange(d, dtype=torch.float32) + 1.0).repeat(n, 1)  # column j holds j + 1
    x = x + 1000.0 * torch.arange(n, dtype=torch.float32).unsqueeze(1)  # and every row differs
    out = mask_half_rows_columns(x, 0.5, _gen(15))
    nonzero = out != 0
    assert bool(nonzero.any()) and not bool(nonzero.all())
    assert torch.equal(out[nonzero], x[nonzero]), "surviving entries must stay where they were"


def test_mask_half_rows_columns_does_not_modify_input() -> None:
    x = torch.rand(30, 20, generator=_gen(16)) + 0.5
    before = x.clone()
    out = mask_half_rows_columns(x, 0.7, _gen(17))
    assert torch.equal(x, before)
    assert not torch.equal(out, x)


def test_mask_half_rows_columns_reproducible_and_redrawn_each_call() -> None:
    x = torch.ones(200, 100)
    a = mask_half_rows_columns(x, 0.5, _gen(18))
    b = mask_half_rows_columns(x, 0.5, _gen(18))
    assert torch.equal(a, b)
    gen = _gen(19)
    fixed_1 = (mask_half_rows_columns(x, 0.5, gen) == 1).all(dim=0)
    fixed_2 = (mask_half_rows_columns(x, 0.5, gen) == 1).all(dim=0)
    assert int(fixed_1.sum()) == int(fixed_2.sum()) == 50
    assert not torch.equal(fixed_1, fixed_2), "the fixed half must be redrawn at every call"


def test_mask_half_rows_columns_extremes() -> None:
    x = torch.ones(20, 11)
    assert torch.equal(mask_half_rows_columns(x, 0.0, _gen(20)), x)
    out = mask_half_rows_columns(x, 1.0, _gen(20))
    assert int((out == 1).all(dim=0).sum()) == 11 // 2
    assert int((out == 0).all(dim=0).sum()) == 11 - 11 // 2


# ---- sparse (CSR) features -----------------------------------------------------------
from edgegcl.nn.augment import as_features  # noqa: E402


def _sparse_binary(n: int = 400, d: int = 300, density: float = 0.03, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, d, generator=g) < density).float()


def test_as_features_keeps_dense_features_dense_and_makes_sparse_ones_csr():
    dense = torch.randn(50, 20)
    assert as_features(dense) is dense
    x = _sparse_binary()
    csr = as_features(x)
    assert csr.layout == torch.sparse_csr and torch.equal(csr.to_dense(), x)


def test_column_masking_of_csr_features_equals_the_dense_masking():
    x = _sparse_binary()
    a = mask_columns(as_features(x), 0.4, torch.Generator().manual_seed(5)).to_dense()
    b = mask_columns(x, 0.4, torch.Generator().manual_seed(5))
    assert torch.equal(a, b) and 0 < int((a.sum(0) == 0).sum()) - int((x.sum(0) == 0).sum())


def test_view_2_masking_of_csr_features_keeps_half_the_columns_and_masks_entries():
    x = _sparse_binary(n=2000, d=200, density=0.05)
    out = mask_half_rows_columns(as_features(x), 0.5, torch.Generator().manual_seed(3)).to_dense()
    assert out.layout == torch.strided and torch.all((out == 0) | (out == x))
    intact = (out == x).all(0)
    assert int(intact.sum()) >= 100  # the floor(d/2) fixed columns, at least
    unfixed = ~intact
    rate = 1 - out[:, unfixed].sum() / x[:, unfixed].sum()
    assert abs(float(rate) - 0.5) < 0.05  # entries of the unfixed half dropped at p_feature


def test_mask_half_rows_columns_with_a_given_unfixed_half() -> None:
    from edgegcl.nn.augment import unfixed_half

    unfixed = unfixed_half(30, _gen(20))
    assert unfixed.numel() == 15 and unfixed.unique().numel() == 15
    masked = set()
    for seed in range(3):  # every call masks inside the given half only
        out = mask_half_rows_columns(torch.ones(200, 30), 0.5, _gen(seed), unfixed)
        masked |= set((out == 0).any(dim=0).nonzero().flatten().tolist())
    assert masked == set(unfixed.tolist())


def test_trainer_draws_view_2s_half_once_per_run_and_seed() -> None:
    from edgegcl.training.config import TrainConfig
    from edgegcl.training.engine import Trainer

    small = dict(encoder="gcn", hidden_dim=8, out_dim=4, proj_dim=4)
    run_a = Trainer(TrainConfig(**small, fixed_half="run"), 20, seed=3)
    run_b = Trainer(TrainConfig(**small, fixed_half="run"), 20, seed=3)
    other = Trainer(TrainConfig(**small, fixed_half="run"), 20, seed=4)
    assert torch.equal(run_a.views.unfixed, run_b.views.unfixed)  # a resumed run finds it again
    assert not torch.equal(run_a.views.unfixed, other.views.unfixed)
    assert Trainer(TrainConfig(**small), 20, seed=3).views.unfixed is None  # default: every step
