"""Stratification and selection of negatives against brute-force references."""

from __future__ import annotations

import torch

from edgegcl.negatives import CATEGORIES, num_candidates, pool_sizes, select_active, stratify

RATIOS = {"hard": 0.3, "inter": 0.5, "easy": 0.2}


def test_stratify_matches_a_brute_force_sort():
    b = 23
    sims = torch.randn(b, 2 * b, generator=torch.Generator().manual_seed(0))
    order = stratify(sims)
    assert order.shape == (b, num_candidates(b))
    for i in range(b):
        cands = [j for j in range(2 * b) if j not in (i, b + i)]
        expected = sorted(cands, key=lambda j: -float(sims[i, j]))
        assert order[i].tolist() == expected


def test_pools_partition_the_ranking_by_the_ratios():
    assert pool_sizes(100, RATIOS) == {"hard": 30, "inter": 50, "easy": 20}
    assert pool_sizes(7, RATIOS) == {"hard": 2, "inter": 4, "easy": 1}


def test_selection_takes_counts_from_the_right_pools_without_duplicates():
    b = 40
    sims = torch.randn(b, 2 * b, generator=torch.Generator().manual_seed(1))
    order = stratify(sims)
    pools = pool_sizes(order.size(1), RATIOS)
    counts = {"hard": 5, "inter": 11, "easy": 3}
    active = select_active(order, RATIOS, counts, draw=7)
    assert active.sizes == (5, 11, 3) and active.cols.shape == (b, 19)
    bounds, start = {}, 0
    for c in CATEGORIES:
        bounds[c] = (start, start + pools[c])
        start += pools[c]
    for c, seg in active.segments().items():
        for i in range(b):
            rank = {int(j): r for r, j in enumerate(order[i])}
            ranks = [rank[int(j)] for j in seg[i]]  # KeyError would mean positive/self chosen
            lo, hi = bounds[c]
            assert all(lo <= r < hi for r in ranks)
            assert len(set(ranks)) == len(ranks)


def test_a_larger_count_with_the_same_draw_extends_the_subset():
    order = stratify(torch.randn(30, 60))
    small = select_active(order, RATIOS, {"hard": 2, "inter": 3, "easy": 1}, draw=3).segments()
    large = select_active(order, RATIOS, {"hard": 6, "inter": 9, "easy": 4}, draw=3).segments()
    for c in CATEGORIES:
        for i in range(30):
            assert set(small[c][i].tolist()) <= set(large[c][i].tolist())


def test_each_pool_member_is_drawn_about_equally_often():
    b = 8
    order = stratify(torch.randn(b, 2 * b))
    hits = torch.zeros(b, 2 * b)
    draws = 3000
    for d in range(draws):
        cols = select_active(order, RATIOS, {"hard": 1, "inter": 2, "easy": 1}, draw=d).cols
        hits.scatter_add_(1, cols, torch.ones_like(cols, dtype=torch.float))
    pools = pool_sizes(num_candidates(b), RATIOS)  # 4 / 7 / 3
    hard_cols = order[:, : pools["hard"]]
    freq = hits.gather(1, hard_cols) / draws  # each hard member: 1 of 4 -> 0.25
    assert torch.allclose(freq, torch.full_like(freq, 0.25), atol=0.04)


def test_complete_selection_covers_every_candidate():
    b = 12
    order = stratify(torch.randn(b, 2 * b))
    active = select_active(order, RATIOS, pool_sizes(order.size(1), RATIOS), draw=0)
    assert active.complete
    for i in range(b):
        assert sorted(active.cols[i].tolist()) == [j for j in range(2 * b) if j not in (i, b + i)]
