"""The scheduled InfoNCE against naive references."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import select_active, views

from edgegcl.contrast.dense import similarities
from edgegcl.contrast.loss import scheduled_info_nce
from edgegcl.contrast.negatives import CATEGORIES, pool_sizes, stratify

RATIOS = {"hard": 0.3, "inter": 0.5, "easy": 0.2}
TAU = 0.5


def grace_dense_loss(h1: torch.Tensor, h2: torch.Tensor, tau: float) -> torch.Tensor:
    """GRACE's loss, written the plain dense way with N x N masks (a test-only reference)."""
    def one_side(a, b):
        a, b = F.normalize(a, dim=1), F.normalize(b, dim=1)
        refl, between = torch.exp(a @ a.t() / tau), torch.exp(a @ b.t() / tau)
        return -torch.log(between.diag() / (refl.sum(1) + between.sum(1) - refl.diag()))
    return 0.5 * (one_side(h1, h2).mean() + one_side(h2, h1).mean())


def one_direction_loop(a, other, tau, cols_per_anchor):
    """Mean over anchors of InfoNCE with an explicit list of negatives, in a Python loop."""
    a, o = F.normalize(a, dim=1), F.normalize(other, dim=1)
    cands = torch.cat([o, a])
    per = []
    for i in range(a.size(0)):
        pos = a[i] @ o[i] / tau
        negs = [a[i] @ cands[j] / tau for j in cols_per_anchor[i]]
        per.append(-pos + torch.logsumexp(torch.stack([pos, *negs]), 0))
    return torch.stack(per).mean()


def loop_loss(h1, h2, tau, cols_by_dir):
    """The symmetric loss: both directions of ``one_direction_loop``."""
    return 0.5 * (one_direction_loop(h1, h2, tau, cols_by_dir[0])
                  + one_direction_loop(h2, h1, tau, cols_by_dir[1]))


def select(h1, h2, counts, draw=0):
    sims = similarities(h1, h2, TAU)
    return sims, tuple(select_active(stratify(sims.candidates(d), RATIOS), counts, draw)
                       for d in (0, 1))


def test_every_negative_active_equals_the_dense_grace_loss_and_its_gradient():
    h1, h2 = views()
    c = 2 * h1.size(0) - 2
    sims, active = select(h1, h2, pool_sizes(c, RATIOS))
    assert active[0].complete
    out = scheduled_info_nce(sims, active)
    ref = grace_dense_loss(h1, h2, TAU)
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-10)
    g_out = torch.autograd.grad(out.loss, (h1, h2))
    g_ref = torch.autograd.grad(ref, (h1, h2))
    for a, b in zip(g_out, g_ref):
        assert torch.allclose(a, b, atol=1e-10)


def test_partial_selection_equals_a_per_anchor_loop():
    h1, h2 = views(seed=1)
    sims, active = select(h1, h2, {"hard": 3, "inter": 2, "easy": 1}, draw=5)
    out = scheduled_info_nce(sims, active)
    ref = loop_loss(h1, h2, TAU, [a.cols.tolist() for a in active])
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-10)
    g_out = torch.autograd.grad(out.loss, (h1, h2))
    g_ref = torch.autograd.grad(ref, (h1, h2))
    for a, b in zip(g_out, g_ref):
        assert torch.allclose(a, b, atol=1e-10)


@pytest.mark.parametrize("complete", [False, True])
def test_category_losses_are_infonce_over_each_categorys_active_negatives(complete):
    """l_cat: view-1 anchors, the positive and the category's active negatives only."""
    h1, h2 = views(seed=2)
    c = 2 * h1.size(0) - 2
    counts = pool_sizes(c, RATIOS) if complete else {"hard": 4, "inter": 0, "easy": 2}
    sims, active = select(h1, h2, counts)
    out = scheduled_info_nce(sims, active)
    for cat in CATEGORIES:
        seg = active[0].segments()[cat].tolist()
        expected = one_direction_loop(h1, h2, TAU, seg).item() if counts[cat] else 0.0
        assert out.category[cat] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    if not complete:
        assert out.category["inter"] == 0.0
        assert out.category["hard"] > out.category["easy"] > 0.0


def test_gather_without_concatenation_matches_the_candidate_matrix():
    h1, h2 = views(seed=3)
    sims = similarities(h1, h2, TAU)
    cols = torch.randint(0, 2 * h1.size(0), (h1.size(0), 9))
    for d in (0, 1):
        assert torch.equal(sims.gather(d, cols), sims.candidates(d).gather(1, cols))


def test_more_negatives_never_lower_the_loss():
    h1, h2 = views(seed=4)
    few = scheduled_info_nce(*select(h1, h2, {"hard": 1, "inter": 1, "easy": 1})).loss
    many = scheduled_info_nce(*select(h1, h2, {"hard": 4, "inter": 6, "easy": 2})).loss
    assert many.item() > few.item() > math.log(2) - 1  # strictly more terms in the denominator


def test_mean_category_losses_are_infonce_against_the_average_negative() -> None:
    """``category_loss="mean"``: per category, -log(e^p / (e^p + mean_j e^{s_j})) over the
    view-1 anchors; the loss itself (and its gradient) is the same as with ``"sum"``."""
    h1, h2 = views(b=30, d=6, seed=3)
    sims = similarities(h1, h2, TAU)
    strata = stratify(sims.candidates(0).detach(), RATIOS)
    counts = {"hard": 5, "inter": 7, "easy": 3}
    active = (select_active(strata, counts, 0), select_active(strata, counts, 1))
    summed = scheduled_info_nce(sims, active, "sum")
    mean = scheduled_info_nce(sims, active, "mean")
    assert mean.loss.item() == summed.loss.item()
    cand = sims.candidates(0).detach()
    pos = sims.positives().detach()
    for cat, seg in active[0].segments().items():
        avg = torch.exp(cand.gather(1, seg)).mean(1)
        expected = (torch.log(torch.exp(pos) + avg) - pos).mean()
        assert mean.category[cat] == pytest.approx(expected.item(), rel=1e-5)
    # twice the negatives of the same similarity: the sum's loss grows, the mean's does not
    doubled = torch.cat([active[0].cols, active[0].cols], dim=1)
    from edgegcl.contrast.negatives import ActiveNegatives

    twice = ActiveNegatives(doubled[:, [*range(5), *range(15, 20), *range(5, 12),
                                       *range(20, 27), *range(12, 15), *range(27, 30)]],
                            (10, 14, 6), active[0].num_cand)
    again = scheduled_info_nce(sims, (twice, active[1]), "mean")
    grown = scheduled_info_nce(sims, (twice, active[1]), "sum")
    for cat in CATEGORIES:
        assert again.category[cat] == pytest.approx(mean.category[cat], rel=1e-5)
        assert grown.category[cat] > summed.category[cat]
