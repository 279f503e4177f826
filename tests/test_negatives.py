"""Stratification and selection of negatives against brute-force references."""

from __future__ import annotations

import pytest
import torch

from edgegcl.contrast.negatives import CATEGORIES, num_candidates, pool_sizes, stratify
from helpers import select_active

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
    import edgegcl.contrast.negatives as negatives

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


# ---- sampled strata ---------------------------------------------------------------------

from edgegcl.contrast.negatives import schedule_negatives  # noqa: E402
from edgegcl.contrast.sampled import ( # noqa: E402
    _sample_exclusions,
    draw_sample,
    sample_size,
    schedule_sampled,
)
from bench.purity import stratum_purity

CPU = torch.device("cpu")


def gathered(sims: torch.Tensor):
    """CandidateValues reading [B, 2B] similarities."""
    return lambda start, stop, sample: sims[start:stop].gather(1, sample.row_cols(start, stop))


def _sampled(sims: torch.Tensor, counts, size: int, seed: int = 0, block: int = 64, draw: int = 0):
    b = sims.size(0)
    sample = draw_sample(b, size, torch.Generator().manual_seed(seed), CPU, block=block)
    return schedule_sampled(gathered(sims), b, CPU, RATIOS, counts, draw, sample,
                            keep_values=True)


def test_sample_size_holds_the_counts_and_respects_the_bounds():
    c = 2046
    for counts in ({"hard": 61, "inter": 102, "easy": 40}, {"hard": 200, "inter": 5, "easy": 1},
                   {"hard": 0, "inter": 0, "easy": 9}):
        m = sample_size(c, RATIOS, counts, minimum=16)
        sizes = pool_sizes(m, RATIOS)
        assert all(sizes[k] >= counts[k] for k in counts)
        assert m == 16 or any(pool_sizes(m - 1, RATIOS)[k] < counts[k] for k in counts)
    assert sample_size(c, RATIOS, {"hard": 1, "inter": 1, "easy": 1}, minimum=256) == 256
    assert sample_size(c, RATIOS, pool_sizes(c, RATIOS), minimum=16) == c  # all: exact strata


def test_sample_exclusions_leave_out_the_anchors_own_columns_first():
    from edgegcl.contrast.negatives import CandidateSample

    b = 10
    sample = CandidateSample(torch.tensor([[3, 13, 7, 0, 5, 19], [2, 9, 12, 0, 4, 1]]), 5, 4)
    out = _sample_exclusions(sample, 0, b, b).sort(1).values
    assert out.shape == (b, 2)
    assert out[3].tolist() == [0, 1]  # 3 and 13 are anchor 3's own columns
    assert out[0].tolist() == [3, 5]  # its positive (0) is in the sample, itself (10) is not
    assert out[1].tolist() == [4, 5]  # neither: the last two positions
    assert out[9].tolist() == [1, 5]  # the second block's sample: positive 9 at position 1
    assert out[7].tolist() == [4, 5]  # 7 is in the first block's sample, not in its own


def test_sampled_strata_draw_exact_counts_from_the_block_sample_never_the_anchor():
    b = 150
    g = torch.Generator().manual_seed(4)
    sims = torch.randn(b, 2 * b, generator=g)
    counts = {"hard": 7, "inter": 11, "easy": 3}
    active = _sampled(sims, counts, size=80)
    assert active.sizes == (7, 11, 3) and active.cols.shape == (b, 21)
    assert torch.equal(active.values, sims.gather(1, active.cols))
    rows = torch.arange(b).unsqueeze(1)
    assert not ((active.cols == rows) | (active.cols == rows + b)).any()
    assert (active.cols.sort(1).values.diff(dim=1) > 0).all()  # no column twice
    rows = active.sample.row_cols(0, b)  # inside the block's sample
    assert torch.equal(rows.gather(1, active.positions), active.cols)


def test_sampled_strata_are_pure_and_unbiased_inside_each_pool():
    """Distribution-free: the pools depend on the ranks only, so random similarities show
    what any encoder gets. Purity >= 0.9 per category, and the drawn hard members sit in the
    middle of the hard pool on average (no drift toward either cut)."""
    b = 1024
    g = torch.Generator().manual_seed(0)
    sims = torch.randn(b, 2 * b, generator=g)
    c = num_candidates(b)
    counts = {"hard": 61, "inter": 102, "easy": 40}  # theta_max = 0.1 at saturation
    active = _sampled(sims, counts, size=sample_size(c, RATIOS, counts), block=256)
    purity = stratum_purity(active, sims, RATIOS)
    assert min(purity.values()) >= 0.9, purity
    masked = sims.clone()
    rows = torch.arange(b)
    masked[rows, rows], masked[rows, rows + b] = torch.inf, torch.inf
    rank = masked.argsort(1, descending=True).argsort(1) - 2  # 0 = hardest candidate
    quantile = (rank.gather(1, active.segments()["hard"]).float() / c).mean()
    assert abs(float(quantile) - 0.15) < 0.01  # hard pool: ranks 0 .. 0.3 C
    exact = select_active(stratify(sims, RATIOS), counts, draw=0)
    assert stratum_purity(exact, sims, RATIOS) == dict.fromkeys(CATEGORIES, 1.0)


def test_a_small_sample_is_measurably_less_pure():
    """The purity test above can fail: 16-candidate samples misplace many members."""
    b = 512
    sims = torch.randn(b, 2 * b, generator=torch.Generator().manual_seed(1))
    active = _sampled(sims, {"hard": 4, "inter": 6, "easy": 2}, size=16)
    assert min(stratum_purity(active, sims, RATIOS).values()) < 0.9


def test_sampling_every_candidate_is_the_exact_stratification():
    b = 40
    sims = torch.randn(b, 2 * b, generator=torch.Generator().manual_seed(2))
    counts = {"hard": 5, "inter": 9, "easy": 2}
    active = _sampled(sims, counts, size=num_candidates(b))
    assert stratum_purity(active, sims, RATIOS) == dict.fromkeys(CATEGORIES, 1.0)
    rows = lambda start, stop: sims[start:stop]  # noqa: E731
    exact = schedule_negatives(rows, b, CPU, RATIOS, counts, 0)
    for seg_s, seg_e in zip(active.segments().values(), exact.segments().values()):
        assert seg_s.shape == seg_e.shape


def test_whole_pools_skip_the_draw_and_ungrouped_ones_skip_the_ranking():
    """Counts equal to the sampled pools: every sampled candidate but the anchor's own is
    active; without categories (grouped=False) the same set comes out unranked."""
    b, size = 200, 60
    sims = torch.randn(b, 2 * b, generator=torch.Generator().manual_seed(5))
    counts = pool_sizes(size, RATIOS)
    sample = draw_sample(b, size, torch.Generator().manual_seed(1), CPU, block=64)
    grouped = schedule_sampled(gathered(sims), b, CPU, RATIOS, counts, 0, sample,
                               keep_values=True)
    flat = schedule_sampled(gathered(sims), b, CPU, RATIOS, counts, 0, sample, keep_values=True,
                            grouped=False)
    assert grouped.grouped and not flat.grouped and flat.cols.shape == (b, size)
    assert torch.equal(grouped.cols.sort(1).values, flat.cols.sort(1).values)
    assert torch.equal(flat.values, sims.gather(1, flat.cols))
    rows = torch.arange(b).unsqueeze(1)
    assert not ((flat.cols == rows) | (flat.cols == rows + b)).any()
    with pytest.raises(ValueError, match="grouped=True"):
        flat.segments()


def test_a_full_budget_takes_whole_pools_despite_rounding():
    from edgegcl.contrast.negatives import negative_counts

    c = 2046  # B = 1024: floor(0.5 C) = 1023 but the intermediate pool holds 1024
    full = negative_counts({"hard": 0.3, "inter": 0.5, "easy": 0.2}, c, RATIOS)
    assert full == pool_sizes(c, RATIOS) and sum(full.values()) == c
    part = negative_counts({"hard": 0.03, "inter": 0.05, "easy": 0.02}, c, RATIOS)
    assert part == {"hard": 61, "inter": 102, "easy": 40}  # floor(eta theta_cat |N_i|)


def test_a_budget_whose_floors_are_all_zero_keeps_one_negative():
    """B = 50 at theta_max 0.1 in the bootstrap (eta_0 0.05): floor(eta theta_cat |N_i|) is 0
    for every category; the loss would be 0 with no gradient, so the largest takes one."""
    from edgegcl.contrast.negatives import negative_counts

    c = 98
    fractions = {cat: 0.05 * 0.1 * share for cat, share in
                 (("hard", 0.3), ("inter", 0.5), ("easy", 0.2))}
    assert negative_counts(fractions, c, RATIOS) == {"hard": 0, "inter": 1, "easy": 0}
    assert sum(negative_counts(dict.fromkeys(CATEGORIES, 0.0), c, RATIOS).values()) == 0


def _ranking(sims: torch.Tensor, i: int, views: int = 2) -> list[int]:
    """Anchor i's candidates by a brute-force sort, most similar first."""
    b = sims.size(0)
    own = {i, b + i} if views == 2 else {i}
    return sorted((j for j in range(views * b) if j not in own), key=lambda j: -float(sims[i, j]))


@pytest.mark.parametrize("b,counts", [(30, {"hard": 4, "inter": 3, "easy": 2}),
                                      (23, {"hard": 13, "inter": 22, "easy": 9}),  # every one
                                      (17, {"hard": 1, "inter": 0, "easy": 0})])
def test_hardest_pick_is_the_top_and_bottom_of_the_exact_ranking(b, counts) -> None:
    """``pick = "hardest"``: hard the most similar, inter the next, easy the least, per
    anchor, equal to a brute-force sort of its candidates; blocks of anchors change nothing."""
    from edgegcl.contrast.negatives import schedule_negatives

    sims = torch.randn(b, 2 * b, generator=torch.Generator().manual_seed(b))
    rows = lambda s, e: sims[s:e]  # noqa: E731
    out = schedule_negatives(rows, b, torch.device("cpu"), RATIOS, counts, 0, pick="hardest",
                             keep_values=True)
    assert out.sizes == tuple(counts.values())
    seg = out.segments()
    kh, ki, ke = counts["hard"], counts["inter"], counts["easy"]
    for i in range(b):
        ranking = _ranking(sims, i)
        assert seg["hard"][i].tolist() == ranking[:kh]  # in order, hardest first
        assert set(seg["inter"][i].tolist()) == set(ranking[kh:kh + ki])
        assert set(seg["easy"][i].tolist()) == set(ranking[len(ranking) - ke:])
    assert torch.equal(out.values, sims.gather(1, out.cols))
    import edgegcl.contrast.negatives as negatives

    small = dict(negatives.STRATIFY_BLOCK_ELEMENTS, cpu=4 * b)  # two anchors per block
    try:
        negatives.STRATIFY_BLOCK_ELEMENTS, old = small, negatives.STRATIFY_BLOCK_ELEMENTS
        blocked = schedule_negatives(rows, b, torch.device("cpu"), RATIOS, counts, 5,
                                     pick="hardest")
    finally:
        negatives.STRATIFY_BLOCK_ELEMENTS = old
    assert torch.equal(blocked.cols, out.cols)  # deterministic: no draw, no block effect


def test_hardest_pick_needs_exact_strata() -> None:
    from edgegcl.contrast.selection import NegativeSelector

    with pytest.raises(ValueError, match="use --stratify exact"):
        NegativeSelector(RATIOS, 20, "sampled", pick="hardest")
    assert NegativeSelector(RATIOS, 20, "exact", pick="hardest").pick == "hardest"
    with pytest.raises(ValueError, match="pick must be one of"):
        NegativeSelector(RATIOS, 20, "exact", pick="top")
