"""Sampled strata (``--stratify sampled``): each block of anchors ranks one random sample of
its candidates instead of all of them (edgegcl.contrast.negatives.CandidateSample), cuts it into hard / intermediate /
easy pools by the category ratios as ``stratify`` cuts all of N_i, and draws the scheduled
counts from those pools (``schedule_sampled``). The sample is little more than the active set
(``sample_size``), so ranking costs O(B M) instead of O(B |N_i|) and follows theta_max; the
purity this costs near the cuts is measured in docs/hans.md (bench/purity.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from edgegcl.contrast.config import SAMPLE_MIN
from edgegcl.contrast.negatives import (CATEGORIES, ActiveNegatives, CandidateSample,
                                        HardnessKey, Strata, candidate_views, cut_pools,
                                        draw_positions, drawn_sizes, own_columns, pool_sizes,
                                        take_drawn)

CandidateValues = Callable[[int, int, "CandidateSample"], Tensor]
"""``values(start, stop, sample)``: the [stop - start, sample.size + own] similarities of anchors
``start .. stop - 1`` (whole blocks of ``sample``) with their blocks' sampled candidate
columns (column layout as ``CandidateRows``), without gradient."""

SAMPLE_BLOCK_ANCHORS = 256
"""Anchors that share one candidate sample in sampled strata. A block's similarities are one
[256, M] product, as fast per element as one [B, M] product (docs/performance.md), while
blocks of a batch still draw independent samples."""


def sample_size(num_cand: int, ratios: Mapping[str, float], counts: Mapping[str, int],
                minimum: int = SAMPLE_MIN) -> int:
    """M: the fewest sampled candidates whose pools (``pool_sizes(M)``) hold ``counts``.

    At least ``minimum``, at most ``num_cand`` (which means: rank every candidate, the exact
    strata). With eta^cat = 1 in the category of largest eta, M is about eta theta_max |N_i|:
    the sample is little more than the active set, so the cost follows theta_max.
    """
    total = sum(ratios[c] for c in CATEGORIES)
    need = max([math.ceil(counts[c] * total / ratios[c]) for c in CATEGORIES
                if counts[c] > 0 and ratios[c] > 0] + [1])
    # The intermediate pool takes the rounding (pool_sizes), so a few below ``need`` may hold.
    m = min(num_cand, max(minimum, need - 3))
    while m < num_cand and any(pool_sizes(m, ratios)[c] < counts[c] for c in CATEGORIES):
        m += 1
    return m


def draw_sample(num_anchors: int, size: int, generator: torch.Generator, device: torch.device,
                block: int = SAMPLE_BLOCK_ANCHORS, candidates: str = "both") -> CandidateSample:
    """A ``CandidateSample`` of ``size`` candidates per anchor (``size`` <= |N_i|, 2B - 2 or
    B - 1 by ``candidates``), drawn with ``generator`` (CPU): one ``randperm`` prefix per
    block of anchors."""
    views = candidate_views(candidates)
    blocks = math.ceil(num_anchors / block)
    cols = torch.stack([torch.randperm(views * num_anchors, generator=generator)[:size + views]
                        for _ in range(blocks)])
    return CandidateSample(cols.to(device), block, size)


def _sample_exclusions(sample: CandidateSample, start: int, stop: int, num_anchors: int
                       ) -> Tensor:
    """[stop - start, k] positions of each anchor's block sample left out of its sample (k =
    ``sample.own``): its own columns (positive i, and itself B + i with both views) where the
    sample holds them, then the last other positions. O(rows), by the inverse of each block's
    sample."""
    cols = sample.blocks(start, stop)
    blocks, width = cols.shape
    k, device = sample.own, cols.device
    where = torch.full((blocks, k * num_anchors), -1, dtype=torch.long, device=device)
    where.scatter_(1, cols, torch.arange(width, device=device).expand(blocks, width))
    anchors = torch.arange(start, stop, device=device)
    block = torch.div(anchors, sample.block, rounding_mode="floor") - start // sample.block
    own = where[block.unsqueeze(1), own_columns(anchors, num_anchors, k)]
    spare = (width - 1 - torch.arange(2 * k, device=device)).expand(own.size(0), 2 * k)
    # own ones may be among the last
    spare_ok = (spare.unsqueeze(2) != own.unsqueeze(1)).all(2)
    options = torch.cat([own, spare], dim=1)
    ok = torch.cat([own >= 0, spare_ok], dim=1)
    return options[ok & (ok.cumsum(1) <= k)].view(-1, k)


def _left_out_columns(sample: CandidateSample, start: int, stop: int, positions: Tensor
                      ) -> Tensor:
    """[stop - start, own] candidate columns at ``positions`` of the anchors' block samples."""
    cols = sample.blocks(start, stop)
    block = torch.arange(stop - start, device=cols.device) // sample.block
    return cols[block.unsqueeze(1), positions]


def _all_but_excluded(num_cols: int, excluded: Tensor) -> Tensor:
    """[b, num_cols - k] positions 0..num_cols-1 of each row without its k ``excluded``
    ([b, k], distinct in a row)."""
    j = torch.arange(num_cols - excluded.size(1), device=excluded.device).unsqueeze(0)
    for skip in excluded.sort(1).values.unbind(1):  # ascending: one pass per excluded column
        j = j + (j >= skip.unsqueeze(1)).long()
    return j


@torch.no_grad()
def schedule_sampled(values: CandidateValues, num_anchors: int, device: torch.device,
                     ratios: Mapping[str, float], counts: Mapping[str, int], draw: int,
                     sample: CandidateSample, *, keep_values: bool = False,
                     grouped: bool = True, key: HardnessKey | None = None,
                     compact: bool = False) -> ActiveNegatives:
    """Sampled strata: each anchor's pools cut from its block's sample, then drawn from.

    Anchor i ranks the M = ``sample.size`` candidates of its sample (a uniform random subset
    of N_i), cuts them by the ratios into hard / intermediate / easy as ``stratify`` cuts all
    of N_i, and draws ``counts`` from those pools as ``schedule_negatives`` does. Each sampled pool
    is a uniform random subset of the anchor's whole pool except near the two cuts, where the
    sample's estimate of the cut can misplace a candidate: the purity (bench/purity.py)
    measured in docs/hans.md. The work is O(B M d) instead of O(B^2 d) for the similarities
    and O(B M) instead of O(B^2) for the ranking. ``keep_values`` (the pairs path) also keeps
    the drawn columns' similarities and their positions in the sample (``ActiveNegatives``).

    When the counts are the whole sampled pools (HANS saturated with a sample of exactly the
    active set) nothing is drawn: the pools are concatenated, and with ``grouped=False`` (a
    caller that does not read the categories: the loss's second direction) not even ranked,
    since their union is the sample (``ActiveNegatives.grouped``). With ``compact`` too that
    union is handed out as the sample and each anchor's left-out columns
    (``ActiveNegatives.left_out``), with every sampled column's value when ``keep_values``.
    """
    c = sample.own * (num_anchors - 1)  # |N_i| of the sample's layout (num_candidates)
    sizes = pool_sizes(sample.size, ratios)
    whole = all(counts[cat] == sizes[cat] for cat in CATEGORIES)
    plan = [] if whole else [(positions.to(device), offsets.to(device)) for positions, offsets
                             in draw_positions(tuple(sizes.values()), counts, draw, num_anchors)]
    active_sizes = tuple(sizes.values()) if whole else drawn_sizes(plan)
    if whole and not grouped and compact:
        left_at, left_out, every = [], [], []
        for start, stop in sample.chunks(num_anchors):
            left_at.append(_sample_exclusions(sample, start, stop, num_anchors))
            left_out.append(_left_out_columns(sample, start, stop, left_at[-1]))
            if keep_values:
                every.append(values(start, stop, sample))
        return ActiveNegatives(torch.empty(num_anchors, 0, dtype=torch.long, device=device),
                               active_sizes, c,  # type: ignore[arg-type]
                               _join(every) if keep_values else None, sample, grouped=False,
                               left_out=_join(left_out), left_out_at=_join(left_at))
    positions, cols, kept = [], [], []
    for start, stop in sample.chunks(num_anchors):
        excluded = _sample_exclusions(sample, start, stop, num_anchors)
        v = values(start, stop, sample) if keep_values or grouped or not whole else None
        if whole and not grouped:
            picked = _all_but_excluded(sample.cols.size(1), excluded)
        else:
            pools = cut_pools(v, excluded, sizes, None if key is None else key(v))
            picked = torch.cat(pools, dim=1) if whole else take_drawn(
                Strata(pools, sample.size), [(pos, offsets[start:stop]) for pos, offsets in plan])
        cols.append(sample.row_cols(start, stop).gather(1, picked))
        if keep_values:
            positions.append(picked)
            kept.append(v.gather(1, picked))
    grouped = grouped or not whole
    if not keep_values:  # the dense path gathers by column; positions serve the pairs path
        return ActiveNegatives(_join(cols), active_sizes, c, grouped=grouped)  # type: ignore[arg-type]
    return ActiveNegatives(_join(cols), active_sizes, c, _join(kept),  # type: ignore[arg-type]
                           sample, _join(positions), grouped)


def _join(parts: list[Tensor]) -> Tensor:
    """``torch.cat(parts)`` without the copy when there is one part (one chunk)."""
    return parts[0] if len(parts) == 1 else torch.cat(parts)
