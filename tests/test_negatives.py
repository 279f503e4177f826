"""Stratification and selection of negatives against brute-force references."""

from __future__ import annotations

import pytest
import torch

from edgegcl.negatives import CATEGORIES, num_candidates, pool_sizes, select_active, stratify

RATIOS = {"hard": 0.3, "inter": 0.5, "easy": 0.2}


def _sorted_pools(sims: torch.Tensor, i: int) -> dict[str, set[int]]:
    """Anchor i's pools by a brute-force sort of its candidates, cut by the ratios."""
    b = sims.size(0)
    cands = [j for j in range(2 * b) if j not in (i, b + i)]
    ranking = sorted(cands, key=lambda j: -float(sims[i, j]))
    sizes = pool_sizes(len(cands), RATIOS)
    h, n = sizes["hard"], sizes["inter"]
    return {"hard": set(ranking[:h]), "inter": set(ranking[h:h + n]), "easy": set(ranking[h + n:])}


@pytest.mark.parametrize("b", [23, 40])
def test_stratify_matches_a_brute_force_sort(b):
    sims = torch.randn(b, 2 * b, generator=torch.Generator().manual_seed(b))
    strata = stratify(sims, RATIOS)
    assert strata.num_cand == num_candidates(b)
    for cat, pool in zip(CATEGORIES, strata.pools):
        assert pool.shape == (b, pool_sizes(num_candidates(b), RATIOS)[cat])
    for i in range(b):
        expected = _sorted_pools(sims, i)
        for cat, pool in zip(CATEGORIES, strata.pools):
            assert set(pool[i].tolist()) == expected[cat]


def test_pools_stay_disjoint_and_cover_the_candidates_under_ties():
    b = 10
    sims = torch.zeros(b, 2 * b)  # every candidate equally similar: an untrained encoder
    strata = stratify(sims, RATIOS)
    for i in range(b):
        members = [j for pool in strata.pools for j in pool[i].tolist()]
        assert sorted(members) == [j for j in range(2 * b) if j not in (i, b + i)]


def test_pools_partition_the_ranking_by_the_ratios():
    assert pool_sizes(100, RATIOS) == {"hard": 30, "inter": 50, "easy": 20}
    assert pool_sizes(7, RATIOS) == {"hard": 2, "inter": 4, "easy": 1}


def test_selection_takes_counts_from_the_right_pools_without_duplicates():
    b = 40
    sims = torch.randn(b, 2 * b, generator=torch.Generator().manual_seed(1))
    counts = {"hard": 5, "inter": 11, "easy": 3}
    active = select_active(stratify(sims, RATIOS), counts, draw=7)
    assert active.sizes == (5, 11, 3) and active.cols.shape == (b, 19)
    for i in range(b):
        expected = _sorted_pools(sims, i)  # never the positive or the anchor itself
        for c, seg in active.segments().items():
            picked = seg[i].tolist()
            assert set(picked) <= expected[c] and len(set(picked)) == len(picked)


def test_a_larger_count_with_the_same_draw_extends_the_subset():
    strata = stratify(torch.randn(30, 60), RATIOS)
    small = select_active(strata, {"hard": 2, "inter": 3, "easy": 1}, draw=3).segments()
    large = select_active(strata, {"hard": 6, "inter": 9, "easy": 4}, draw=3).segments()
    for c in CATEGORIES:
        for i in range(30):
            assert set(small[c][i].tolist()) <= set(large[c][i].tolist())


def test_each_pool_member_is_drawn_about_equally_often():
    b = 8
    strata = stratify(torch.randn(b, 2 * b), RATIOS)
    hits = torch.zeros(b, 2 * b)
    draws = 3000
    for d in range(draws):
        cols = select_active(strata, {"hard": 1, "inter": 2, "easy": 1}, draw=d).cols
        hits.scatter_add_(1, cols, torch.ones_like(cols, dtype=torch.float))
    freq = hits.gather(1, strata.pools[0]) / draws  # 4 hard members, 1 drawn: 0.25 each
    assert torch.allclose(freq, torch.full_like(freq, 0.25), atol=0.04)


def test_complete_selection_covers_every_candidate():
    b = 12
    strata = stratify(torch.randn(b, 2 * b), RATIOS)
    active = select_active(strata, pool_sizes(num_candidates(b), RATIOS), draw=0)
    assert active.complete
    for i in range(b):
        assert sorted(active.cols[i].tolist()) == [j for j in range(2 * b) if j not in (i, b + i)]


@pytest.mark.parametrize("block_elements", [1, 7 * 2 * 37, 1 << 18])  # 1 row, 7 rows, all
def test_blocked_scheduling_equals_stratify_then_select(monkeypatch, block_elements):
    """Anchors stratified and drawn a block at a time give the whole-batch result exactly."""
    import edgegcl.negatives as negatives

    monkeypatch.setitem(negatives.STRATIFY_BLOCK_ELEMENTS, "cpu", block_elements)
    b = 37
    g = torch.Generator().manual_seed(3)
    inter, intra = torch.randn(b, b, generator=g), torch.randn(b, b, generator=g)
    counts = {"hard": 5, "inter": 9, "easy": 2}
    for draw in (0, 4):
        whole = select_active(stratify(torch.cat([inter, intra], 1), RATIOS), counts, draw)
        rows = lambda start, stop: torch.cat([inter[start:stop], intra[start:stop]], 1)  # noqa: E731
        blocked = negatives.schedule_negatives(rows, b, torch.device("cpu"), RATIOS, counts, draw,
                                               keep_values=True)
        assert blocked.sizes == whole.sizes == (5, 9, 2)
        assert torch.equal(blocked.cols, whole.cols)
        assert torch.equal(blocked.values, torch.cat([inter, intra], 1).gather(1, whole.cols))
