"""Negative candidates of each anchor, their hardness strata, and the active subsets.

For B anchors (all nodes in full-graph mode, the seed nodes of a mini-batch) the candidate
negatives of anchor i are, by default (``candidates = "both"``, GRACE's), the other anchors in
both views: column j < B is node j of the other view (inter-view), column B + j is node j of
the anchor's own view (intra-view). Columns i (the positive) and B + i (the anchor itself) are
excluded, so |N_i| = 2B - 2. With ``candidates = "inter"`` (Eq. 6 as the paper prints it) they
are the other view's anchors only: columns 0 .. B - 1 and no intra-view block, column i (the
positive) excluded, so |N_i| = B - 1. A column j < B means the same in both layouts.

Stratification ranks each anchor's candidates by similarity, descending, and cuts the ranking
into hard (top), intermediate (middle) and easy (bottom) pools whose sizes follow the category
ratios (by partial selection: only the cut matters, not the order inside a pool), here over
all of N_i (``--stratify exact``; edgegcl.contrast.sampled ranks a sample of it instead).
Everything downstream is an index list ``cols`` of shape [B, K]: no N x N 0/1 masks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from edgegcl.contrast.config import CANDIDATES, PICKS

CATEGORIES = ("hard", "inter", "easy")
STRATIFY = ("sampled", "exact")
"""``--stratify``: rank a random sample of each anchor's candidates, or all of them."""

def candidate_views(candidates: str) -> int:
    """Views the candidates come from: 2 (``"both"``) or 1 (``"inter"``). It is also the
    number of an anchor's own columns left out (the positive i, and itself B + i with both)."""
    if candidates not in CANDIDATES:
        raise ValueError(f"candidates must be one of {', '.join(CANDIDATES)}, got "
                         f"{candidates!r}")
    return 2 if candidates == "both" else 1


def num_candidates(num_anchors: int, candidates: str = "both") -> int:
    """|N_i|: the other B - 1 anchors in each of the two views (2B - 2), or in the other view
    only (B - 1) with ``candidates = "inter"``."""
    return candidate_views(candidates) * (num_anchors - 1)


def own_columns(anchors: Tensor, num_anchors: int, views: int) -> Tensor:
    """[b, views] candidate columns of ``anchors`` that are not negatives: the positive (i), and
    with both views the anchor itself (B + i)."""
    return torch.stack([anchors + v * num_anchors for v in range(views)], dim=1)


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


def negative_counts(fractions: Mapping[str, float], num_cand: int,
                    ratios: Mapping[str, float]) -> dict[str, int]:
    """Active negatives per anchor and category: floor(eta theta_cat |N_i|) (Algorithm 1,
    line 4), ``fractions`` holding eta theta_cat (``HANS.fractions``).

    A category whose budget reaches its whole share of the ranking takes its whole pool: the
    pools are floors of ratio x |N_i| with the rounding in the intermediate pool, so the bare
    formula would leave a candidate or two out of a full budget, and theta_max = 1 at
    saturation would pay a stratification for them every batch instead of contrasting with
    every candidate. Where every floor is 0 (a small batch at a small budget), the category with
    the largest fraction takes one negative, so the loss keeps a gradient.
    """
    total = sum(ratios[c] for c in CATEGORIES)
    pools = pool_sizes(num_cand, ratios)
    counts = {c: pools[c] if fractions[c] >= ratios[c] / total - 1e-9
              else min(pools[c], math.floor(fractions[c] * num_cand + 1e-9)) for c in CATEGORIES}
    if not any(counts.values()):
        # At least one negative: with none, Eq. 6 is log(e^p / e^p) = 0 and the step has no
        # gradient (a small batch at a small budget in the bootstrap); the category closest
        # to a whole negative takes it.
        open_ = [c for c in CATEGORIES if pools[c] > 0 and fractions[c] > 0]
        if open_:
            counts[max(open_, key=lambda c: fractions[c])] = 1
    return counts


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
``start .. stop - 1`` (inter-view block, then intra-view block; [stop - start, B], the
inter-view block alone, with ``candidates = "inter"``), without gradient."""

STRATIFY_BLOCK_ELEMENTS = {"cpu": 1 << 18, "cuda": 1 << 22}
"""Candidate similarities per block of anchors in ``schedule_negatives``, by device type:
rows per block = this / 2B. On a CPU 2^18 (1 MiB of floats) keeps a step's stratification
temporaries near a few MiB at no cost in time (docs/performance.md). On a GPU every block
waits for the device once (``nonzero`` sizes its output on the host), so blocks are 16x
larger there: with the CPU's size, a large batch takes a hundred blocks per direction and
the waits dominate the epoch (measured in docs/performance.md, "Numbers behind constants")."""


def anchors_per_block(num_anchors: int, device: torch.device, width: int | None = None) -> int:
    """Anchors whose ``width`` candidate columns (default 2B) make one block of
    STRATIFY_BLOCK_ELEMENTS (at least 1)."""
    elements = STRATIFY_BLOCK_ELEMENTS.get(device.type, STRATIFY_BLOCK_ELEMENTS["cuda"])
    return max(1, elements // (2 * num_anchors if width is None else width))


def cut_pools(sims: Tensor, excluded: Tensor, sizes: Mapping[str, int],
               top: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Each row of ``sims`` cut into hard (top ``sizes["hard"]``), easy (bottom) and
    intermediate (the rest) positions, leaving out the ``excluded`` positions of each row
    ([b, k]: the anchor's own columns). ``top``: what the hard pool is the top of, when not
    the similarity itself (a ``HardnessKey``'s values); easy stays the least similar.

    Only membership matters downstream (negatives are drawn uniformly inside a pool), so no
    full sort: two partial selections (``topk``, unsorted) and the remainder, equal to cutting
    the sorted row up to ties (docs/performance.md has the timings).
    """
    b = sims.size(0)
    s = (sims if top is None else top).detach().clone()
    rows = torch.arange(b, device=s.device).unsqueeze(1)
    s[rows, excluded] = -math.inf
    hard = s.topk(sizes["hard"], dim=1, sorted=False).indices
    # The easy pool is taken from what is left, so the pools stay disjoint even under ties.
    if top is not None:
        s = sims.detach().clone()
    s[rows, excluded] = math.inf
    s.scatter_(1, hard, math.inf)
    easy = s.topk(sizes["easy"], dim=1, largest=False, sorted=False).indices
    rest = s != math.inf
    rest.scatter_(1, easy, False)
    inter = rest.nonzero()[:, 1].view(b, sizes["inter"])  # row-major: grouped by anchor
    return hard, inter, easy


def _cut_hardest(sims: Tensor, excluded: Tensor, counts: Mapping[str, int],
                 ranked: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """"Pool = count" (``pick = "hardest"``): each row's ``counts["hard"]`` most similar
    positions, the ``counts["inter"]`` next most similar, and the ``counts["easy"]`` least
    similar, leaving out the ``excluded`` positions ([b, k]). ``ranked``: what hard and inter
    are the top of, when not the similarity (a ``HardnessKey``'s values); easy stays the least
    similar. One sorted partial selection for the top and one for the bottom; deterministic
    (ties broken by the selection).
    """
    b = sims.size(0)
    s = (sims if ranked is None else ranked).detach().clone()
    rows = torch.arange(b, device=s.device).unsqueeze(1)
    s[rows, excluded] = -math.inf
    top = s.topk(counts["hard"] + counts["inter"], dim=1, sorted=True).indices
    hard, inter = top[:, :counts["hard"]], top[:, counts["hard"]:]
    if counts["easy"] == 0:
        return hard, inter, top[:, :0]
    if ranked is not None:
        s = sims.detach().clone()
    s[rows, excluded] = math.inf
    s.scatter_(1, top, math.inf)  # the bottom is taken from what the top left
    easy = s.topk(counts["easy"], dim=1, largest=False, sorted=False).indices
    return hard, inter, easy


@torch.no_grad()
def stratify(cand_sims: Tensor, ratios: Mapping[str, float], first_anchor: int = 0,
             candidates: str = "both", top: Tensor | None = None) -> Strata:
    """S_i of the paper, cut into its pools: hard = the top of each anchor's ranking, easy =
    the bottom, intermediate = the rest, in the sizes the ratios give.

    ``cand_sims`` is [b, 2B] (inter-view block, then intra-view block; [b, B], the inter-view
    block, with ``candidates = "inter"``) for anchors ``first_anchor`` .. ``first_anchor + b -
    1`` of B (all of them by default); anchor i's positive (column i) and the anchor itself
    (column B + i) belong to no pool. ``top``: what the hard pool is the top of, when not the
    similarity (``cut_pools``).
    """
    views = candidate_views(candidates)
    b, num_anchors = cand_sims.size(0), cand_sims.size(1) // views
    c = num_candidates(num_anchors, candidates)
    anchors = torch.arange(first_anchor, first_anchor + b, device=cand_sims.device)
    excluded = own_columns(anchors, num_anchors, views)
    return Strata(cut_pools(cand_sims, excluded, pool_sizes(c, ratios), top), c)


SAMPLE_CHUNK_ELEMENTS = {"cpu": 1 << 22, "cuda": 1 << 24}
"""Sampled similarities ranked at once by sampled strata (whole blocks of anchors): 16 MiB of
floats on a CPU, a batch of 4096 anchors with samples of 1024 in one go."""

@dataclass(frozen=True)
class CandidateSample:
    """Sampled strata: one random sample of candidate columns per block of anchors.

    ``cols`` is [num_blocks, size + own]: a uniform random subset of the 2B candidate columns
    (own = 2; of the B inter-view ones, own = 1, with ``candidates = "inter"``), in random
    order, shared by the ``block`` anchors of a block (anchors ``k * block`` .. ``(k + 1) *
    block - 1`` use row k). Each anchor ranks ``size`` of them: its own columns (positive, and
    itself with both views) when the sample holds them, otherwise the last columns of the
    sample, are left out, so every anchor's sample is a uniform random ``size``-subset of its
    candidates N_i. Sharing a sample within a block is what makes its similarities one dense
    product (edgegcl.contrast.pairs); anchors in different blocks draw independently.
    """

    cols: Tensor
    block: int
    size: int

    @property
    def own(self) -> int:
        """Own columns each anchor leaves out of its block's sample: 2 with both views'
        candidates (positive i and itself B + i), 1 with the other view's (the positive)."""
        return self.cols.size(1) - self.size

    def chunks(self, num_anchors: int) -> list[tuple[int, int]]:
        """Anchor ranges [start, stop) of whole blocks, each at most SAMPLE_CHUNK_ELEMENTS
        sampled similarities (by device type; at least one block): what is processed at once."""
        limit = SAMPLE_CHUNK_ELEMENTS.get(self.cols.device.type, SAMPLE_CHUNK_ELEMENTS["cuda"])
        step = self.block * max(1, limit // (self.block * self.cols.size(1)))
        return [(start, min(start + step, num_anchors)) for start in range(0, num_anchors, step)]

    def blocks(self, start: int, stop: int) -> Tensor:
        """The sampled columns of the blocks that anchors start..stop-1 belong to."""
        return self.cols[start // self.block: -(-stop // self.block)]

    def row_cols(self, start: int, stop: int) -> Tensor:
        """[stop - start, size + own]: each anchor's block sample (a copy, one row per anchor)."""
        return self.blocks(start, stop).repeat_interleave(self.block, dim=0)[: stop - start]

    def split(self, rows: Tensor) -> tuple[Tensor, Tensor | None]:
        """Rows of a chunk (whole blocks, the last maybe partial) as [whole blocks, block, ...]
        (a view, no copy) and the rows of a last, partial block (None when there is none)."""
        whole = rows.size(0) - rows.size(0) % self.block
        head = rows[:whole].view(whole // self.block, self.block, *rows.shape[1:])
        return head, (rows[whole:] if whole < rows.size(0) else None)


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
    the scheduled-pairs path (edgegcl.contrast.pairs) takes them as that step's forward values."""
    sample: CandidateSample | None = None
    """Sampled strata only: the candidate sample of each block of anchors the columns were
    drawn from (``cols[i]`` lies in anchor i's block's sample)."""
    positions: Tensor | None = None
    """Sampled strata only: [B, K] positions of ``cols`` in the anchor's block sample, so the
    pairs path computes a block's logits as one product with the sampled rows."""
    grouped: bool = True
    """False when the columns are not ordered by category (``schedule_sampled`` with
    ``grouped=False``: whole pools, never ranked; or every candidate, with ``cols`` empty
    since the dense path needs none); ``sizes`` then only sum to K."""
    left_out: Tensor | None = None
    """Uncategorised sampled draws kept compactly (``schedule_sampled(..., compact=True)``):
    [B, own] candidate columns each anchor leaves out of its block's ``sample``, whose other
    columns are its active set; ``cols`` is then [B, 0], and no B x K index tensor exists. The
    dense path weighs its blocks by the samples (edgegcl.contrast.masks.BlockMasks); the pairs
    path keeps ``values`` for every sampled column, [B, M + own], and sets the left-out ones to
    -inf."""
    left_out_at: Tensor | None = None
    """[B, own] positions of ``left_out`` in the anchor's block sample."""

    @property
    def complete(self) -> bool:
        """True when every candidate is active, so the loss may use the dense fast path."""
        return sum(self.sizes) == self.num_cand

    def columns(self) -> Tensor:
        """[B, K] active columns: ``cols``, or (``left_out``) each anchor's block sample
        without its left-out columns, in the sample's order."""
        if self.left_out is None or self.sample is None:
            return self.cols
        b = self.left_out.size(0)
        cols = self.sample.row_cols(0, b)
        keep = (cols.unsqueeze(2) != self.left_out.unsqueeze(1)).all(2)
        return cols[keep].view(b, -1)

    def segments(self) -> dict[str, Tensor]:
        """The column block of each category."""
        if not self.grouped:
            raise ValueError("these active negatives were drawn without their categories "
                             "(grouped=False); schedule them with grouped=True")
        out, start = {}, 0
        for cat, size in zip(CATEGORIES, self.sizes):
            out[cat] = self.cols[:, start:start + size]
            start += size
        return out


def _generator(draw: int, category: int) -> torch.Generator:
    return torch.Generator().manual_seed((draw * 1_000_003 + category) % (2**63 - 1))



def draw_positions(pool_size: tuple[int, ...], counts: Mapping[str, int], draw: int,
                    num_anchors: int) -> list[tuple[Tensor, Tensor]]:
    """Per category: the pool positions every anchor takes (a ``randperm`` prefix of
    ``counts[cat]``) and each anchor's rotation of them ([B, 1]). The rotation makes every
    anchor's subset a uniform random subset of its pool, all anchors drawn in O(B K) without
    sorting random keys; a larger count with the same ``draw`` extends the previous subset
    instead of replacing it. Swapping (the paper's RandomSample after saturation) is a new
    ``draw``."""
    plan = []
    for k, (cat, size) in enumerate(zip(CATEGORIES, pool_size)):
        g = _generator(draw, k)
        positions = torch.randperm(size, generator=g)[:min(counts[cat], size)]
        plan.append((positions, torch.randint(max(size, 1), (num_anchors, 1), generator=g)))
    return plan


def take_drawn(strata: Strata, plan: list[tuple[Tensor, Tensor]]) -> Tensor:
    """Each anchor's drawn columns of ``strata`` (whose rows ``plan``'s rotations match)."""
    picks = []
    for pool, (positions, offsets) in zip(strata.pools, plan):
        idx = (positions.unsqueeze(0) + offsets) % max(pool.size(1), 1)
        picks.append(pool.gather(1, idx.to(pool.device)))
    return torch.cat(picks, dim=1)


def drawn_sizes(plan: list[tuple[Tensor, Tensor]]) -> tuple[int, int, int]:
    """How many negatives per anchor each category of ``plan`` draws."""
    return tuple(positions.numel() for positions, _ in plan)  # type: ignore[return-value]


HardnessKey = Callable[[Tensor], Tensor]
"""An elementwise map of a block of similarities to the values the hard (and, with hardest
picks, intermediate) negatives are the top of: edgegcl.contrast.falseneg's ranks by ProGCL's
true-negative hardness. The easy negatives stay the least similar (a likely false negative,
dissimilar in no way, is never easy), and the loss reads the similarities themselves."""


@torch.no_grad()
def schedule_negatives(rows: CandidateRows, num_anchors: int, device: torch.device,
                       ratios: Mapping[str, float], counts: Mapping[str, int], draw: int, *,
                       keep_values: bool = False, pick: str = "random",
                       candidates: str = "both", key: HardnessKey | None = None
                       ) -> ActiveNegatives:
    """Each anchor's ``counts`` drawn from its strata (``stratify``; ``pick = "random"``: a
    uniform random subset of each pool, ``draw_positions``) or the hardest ``counts``
    (``pick = "hardest"``, ``_cut_hardest``), anchors a block at a time.

    ``rows(start, stop)`` gives the candidate similarities of anchors ``start .. stop - 1``
    (edgegcl.contrast.dense: slices of the dense blocks, or a product computed on demand). Blocks of
    STRATIFY_BLOCK_ELEMENTS candidates (by device type) are stratified and drawn from one
    after another, so neither the B x 2B candidates nor the B x (2B - 2) pools need exist at
    once: the memory a step spends here is a block's plus the B x K active columns, which is
    what lets a smaller theta_max need less (bench/results/budgets.md). ``keep_values`` also
    keeps each active column's similarity (``ActiveNegatives.values``). The result equals the
    unblocked composition, draw for draw (tests/test_negatives.py). ``candidates``: the
    layout of ``rows`` (``CANDIDATES``). ``key``: what is ranked instead of the similarity
    (``HardnessKey``).
    """
    if pick not in PICKS:
        raise ValueError(f"pick must be one of {', '.join(PICKS)}, got {pick!r}")
    c = num_candidates(num_anchors, candidates)
    views = candidate_views(candidates)
    hardest = pick == "hardest"
    plan = [] if hardest else [
        (positions.to(device), offsets.to(device)) for positions, offsets
        in draw_positions(tuple(pool_sizes(c, ratios).values()), counts, draw, num_anchors)]
    sizes = tuple(counts[cat] for cat in CATEGORIES) if hardest else drawn_sizes(plan)
    step = anchors_per_block(num_anchors, device, views * num_anchors)
    cols, values = [], []
    for start in range(0, num_anchors, step):
        stop = min(start + step, num_anchors)
        block = rows(start, stop)
        ranked = None if key is None else key(block)
        if hardest:
            own = own_columns(torch.arange(start, stop, device=block.device), num_anchors, views)
            picked = torch.cat(_cut_hardest(block, own, counts, ranked), dim=1)
        else:
            picked = take_drawn(stratify(block, ratios, start, candidates, ranked),
                           [(positions, offsets[start:stop]) for positions, offsets in plan])
        cols.append(picked)
        if keep_values:
            values.append(block.gather(1, picked))
    return ActiveNegatives(torch.cat(cols, dim=0), sizes, c,  # type: ignore[arg-type]
                           torch.cat(values, dim=0) if keep_values else None)
