"""Negative candidates of each anchor, their hardness strata, and the active subsets.

For B anchors (all nodes in full-graph mode, the seed nodes of a mini-batch) the candidate
negatives of anchor i are the other anchors in both views: column j < B is node j of the other
view (inter-view), column B + j is node j of the anchor's own view (intra-view). Columns i
(the positive) and B + i (the anchor itself) are excluded, so |N_i| = 2B - 2.

Stratification ranks each anchor's candidates by similarity, descending, and cuts the ranking
into hard (top), intermediate (middle) and easy (bottom) pools whose sizes follow the category
ratios (by partial selection: only the cut matters, not the order inside a pool). Everything downstream is an index list ``cols`` of shape [B, K]: no N x N 0/1 masks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

CATEGORIES = ("hard", "inter", "easy")


def num_candidates(num_anchors: int) -> int:
    """|N_i| = 2B - 2: the other B - 1 anchors in each of the two views."""
    return 2 * num_anchors - 2


def pool_sizes(num_cand: int, ratios: Mapping[str, float]) -> dict[str, int]:
    """Sizes of the hard / inter / easy pools of one anchor.

    The ratios partition the ranking: hard = floor(r_hard C), easy = floor(r_easy C) (ratios
    normalised to sum 1), intermediate = the rest, so the pools always cover all C candidates
    and the intermediate pool is never smaller than its share.
    """
    total = sum(ratios[c] for c in CATEGORIES)
    hard = math.floor(ratios["hard"] / total * num_cand)
    easy = math.floor(ratios["easy"] / total * num_cand)
    return {"hard": hard, "inter": num_cand - hard - easy, "easy": easy}


@dataclass(frozen=True)
class Strata:
    """Every anchor's candidates cut into the hard, intermediate and easy pools.

    ``pools`` holds one [B, size] tensor of candidate columns per category (CATEGORIES order),
    the sizes from ``pool_sizes``; the order of columns inside a pool carries no meaning.
    """

    pools: tuple[Tensor, Tensor, Tensor]
    num_cand: int


CandidateRows = Callable[[int, int], Tensor]
"""``rows(start, stop)``: the [stop - start, 2B] candidate similarities of anchors
``start .. stop - 1`` (inter-view block, then intra-view block), without gradient."""

STRATIFY_BLOCK_ELEMENTS = {"cpu": 1 << 18, "cuda": 1 << 22}
"""Candidate similarities per block of anchors in ``schedule_negatives``, by device type:
rows per block = this / 2B. On a CPU 2^18 (1 MiB of floats) keeps a step's stratification
temporaries near a few MiB at no cost in time (docs/performance.md). On a GPU every block
waits for the device once (``nonzero`` sizes its output on the host), so blocks are 16x
larger there: with 2^18, B = 4096 took 128 blocks per direction and an H200 epoch of the
100k-node graph at theta_max = 0.1 went from 2.5 s to 6.7 s."""


def anchors_per_block(num_anchors: int, device: torch.device) -> int:
    """Anchors whose 2B candidates make one block of STRATIFY_BLOCK_ELEMENTS (at least 1)."""
    elements = STRATIFY_BLOCK_ELEMENTS.get(device.type, STRATIFY_BLOCK_ELEMENTS["cuda"])
    return max(1, elements // (2 * num_anchors))


@torch.no_grad()
def stratify(cand_sims: Tensor, ratios: Mapping[str, float], first_anchor: int = 0) -> Strata:
    """S_i of the paper, cut into its pools: hard = the top of each anchor's ranking, easy =
    the bottom, intermediate = the rest, in the sizes the ratios give.

    ``cand_sims`` is [b, 2B] (inter-view block, then intra-view block) for anchors
    ``first_anchor`` .. ``first_anchor + b - 1`` of B (all of them by default); anchor i's
    positive (column i) and the anchor itself (column B + i) belong to no pool. Only pool
    membership matters downstream (negatives are drawn uniformly inside a pool), so no full
    sort is needed: the hard and easy pools are partial selections (``topk``), the
    intermediate pool is what is left. That is 2.5x faster than sorting the rows (58 -> 23 ms
    at B = 1024, 1.1 s -> 0.43 s at B = 4096 on this project's CPU) and equal to cutting the
    sorted ranking, up to ties.
    """
    b, num_anchors = cand_sims.size(0), cand_sims.size(1) // 2
    c = num_candidates(num_anchors)
    sizes = pool_sizes(c, ratios)
    s = cand_sims.detach().clone()
    rows = torch.arange(b, device=s.device)
    anchors = rows + first_anchor
    s[rows, anchors] = -math.inf
    s[rows, anchors + num_anchors] = -math.inf
    hard = s.topk(sizes["hard"], dim=1, sorted=False).indices
    # The easy pool is taken from what is left, so the pools stay disjoint even under ties.
    s[rows, anchors] = math.inf
    s[rows, anchors + num_anchors] = math.inf
    s.scatter_(1, hard, math.inf)
    easy = s.topk(sizes["easy"], dim=1, largest=False, sorted=False).indices
    rest = s != math.inf
    rest.scatter_(1, easy, False)
    inter = rest.nonzero()[:, 1].view(b, sizes["inter"])  # row-major: grouped by anchor
    return Strata((hard, inter, easy), c)


@dataclass(frozen=True)
class ActiveNegatives:
    """The scheduled negatives of every anchor: candidate columns, grouped by category.

    ``cols[:, :sizes[0]]`` are hard, the next ``sizes[1]`` intermediate, the last ``sizes[2]``
    easy (no column twice in a row). Every anchor has the same number of each (the paper's
    floor(eta theta_cat |N_i|)).
    """

    cols: Tensor
    sizes: tuple[int, int, int]
    num_cand: int
    values: Tensor | None = None
    """The candidates' similarities at ``cols`` when they were drawn (no gradient), if kept:
    the scheduled-pairs path (edgegcl.pairs) takes them as that step's forward values."""

    @property
    def complete(self) -> bool:
        """True when every candidate is active, so the loss may use the dense fast path."""
        return sum(self.sizes) == self.num_cand

    def segments(self) -> dict[str, Tensor]:
        """The column block of each category."""
        out, start = {}, 0
        for cat, size in zip(CATEGORIES, self.sizes):
            out[cat] = self.cols[:, start:start + size]
            start += size
        return out


def _generator(draw: int, category: int) -> torch.Generator:
    return torch.Generator().manual_seed((draw * 1_000_003 + category) % (2**63 - 1))


def _draw_positions(pool_size: tuple[int, ...], counts: Mapping[str, int], draw: int,
                    num_anchors: int) -> list[tuple[Tensor, Tensor]]:
    """Per category: the pool positions every anchor takes (a ``randperm`` prefix of
    ``counts[cat]``) and each anchor's rotation of them ([B, 1])."""
    plan = []
    for k, (cat, size) in enumerate(zip(CATEGORIES, pool_size)):
        g = _generator(draw, k)
        positions = torch.randperm(size, generator=g)[:min(counts[cat], size)]
        plan.append((positions, torch.randint(max(size, 1), (num_anchors, 1), generator=g)))
    return plan


def _pick(strata: Strata, plan: list[tuple[Tensor, Tensor]]) -> Tensor:
    """Each anchor's drawn columns of ``strata`` (whose rows ``plan``'s rotations match)."""
    picks = []
    for pool, (positions, offsets) in zip(strata.pools, plan):
        idx = (positions.unsqueeze(0) + offsets) % max(pool.size(1), 1)
        picks.append(pool.gather(1, idx.to(pool.device)))
    return torch.cat(picks, dim=1)


def _active_sizes(plan: list[tuple[Tensor, Tensor]]) -> tuple[int, int, int]:
    """How many negatives per anchor each category of ``plan`` draws."""
    return tuple(positions.numel() for positions, _ in plan)  # type: ignore[return-value]


@torch.no_grad()
def select_active(strata: Strata, counts: Mapping[str, int], draw: int) -> ActiveNegatives:
    """Pick ``counts[cat]`` negatives per anchor at random from each of its pools.

    A draw is a random set of positions in each pool (``randperm`` prefix) rotated by a random
    offset per anchor, so every anchor's subset is a uniform random subset of its pool, all
    anchors are drawn in O(B K) without sorting random keys, and a larger count with the same
    ``draw`` extends the previous subset instead of replacing it. Swapping (the paper's
    RandomSample after saturation) is a new ``draw``.
    """
    plan = _draw_positions(tuple(p.size(1) for p in strata.pools), counts, draw,
                           strata.pools[0].size(0))
    return ActiveNegatives(_pick(strata, plan), _active_sizes(plan), strata.num_cand)


@torch.no_grad()
def schedule_negatives(rows: CandidateRows, num_anchors: int, device: torch.device,
                       ratios: Mapping[str, float], counts: Mapping[str, int], draw: int, *,
                       keep_values: bool = False) -> ActiveNegatives:
    """``select_active(stratify(candidates), counts, draw)``, anchors a block at a time.

    ``rows(start, stop)`` gives the candidate similarities of anchors ``start .. stop - 1``
    (edgegcl.loss: slices of the dense blocks, or a product computed on demand). Blocks of
    STRATIFY_BLOCK_ELEMENTS candidates (by device type) are stratified and drawn from one
    after another, so neither the B x 2B candidates nor the B x (2B - 2) pools need exist at
    once: the memory a step spends here is a block's plus the B x K active columns, which is
    what lets a smaller theta_max need less (bench/results/budgets.md). ``keep_values`` also
    keeps each active column's similarity (``ActiveNegatives.values``). The result equals the
    unblocked composition, draw for draw (tests/test_negatives.py).
    """
    c = num_candidates(num_anchors)
    plan = [(positions.to(device), offsets.to(device)) for positions, offsets
            in _draw_positions(tuple(pool_sizes(c, ratios).values()), counts, draw, num_anchors)]
    step = anchors_per_block(num_anchors, device)
    cols, values = [], []
    for start in range(0, num_anchors, step):
        block = rows(start, min(start + step, num_anchors))
        picked = _pick(stratify(block, ratios, start),
                       [(positions, offsets[start:start + step]) for positions, offsets in plan])
        cols.append(picked)
        if keep_values:
            values.append(block.gather(1, picked))
    return ActiveNegatives(torch.cat(cols, dim=0), _active_sizes(plan), c,
                           torch.cat(values, dim=0) if keep_values else None)
