"""The dense path: Eq. 6 from the three B x B similarity blocks of a step.

The denominators are sums of exp over each anchor's active candidates, computed a chunk of
rows at a time and weighted 0 / 1 by the schedule (``DenseTerms``, weights from
edgegcl.contrast.masks), so this path costs the same at every theta_max; the scheduled-pairs
path (edgegcl.contrast.pairs) computes the active logits only. Both give
edgegcl.contrast.loss.scheduled_info_nce its ``Terms``.

Cosine similarities are bounded by 1, so |s / tau| <= 1 / tau <= 20 for the tau >= 0.05 the
configuration allows: exp never overflows float32 (e^20 ~ 5e8, even summed over millions of
candidates), so no max-subtraction pass is needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx

from edgegcl.contrast.loss import Terms, gathered_terms, unit_rows
from edgegcl.contrast.masks import ChunkMasks, chunk_masks
from edgegcl.contrast.negatives import (
    CATEGORIES,
    ActiveNegatives,
    CandidateRows,
    CandidateSample,
    candidate_views,
    num_candidates,
)
from edgegcl.contrast.sampled import CandidateValues
from edgegcl.contrast.weighting import PLAIN, NegativeWeights, Plain


@dataclass(frozen=True)
class Similarities:
    """Cosine similarities / tau between the two views' projected anchors: s12, s11, s22.

    With inter-view candidates only (``candidates = "inter"``) the intra-view blocks s11 and
    s22 are not computed: None, and each direction's candidates are its inter-view block.
    """

    s12: Tensor
    s11: Tensor | None
    s22: Tensor | None
    tau: float
    keeps_values: ClassVar[bool] = False

    @property
    def num_anchors(self) -> int:
        return self.s12.size(0)

    @property
    def device(self) -> torch.device:
        return self.s12.device

    @property
    def intra(self) -> bool:
        """Whether the candidates include the anchor's own view (the intra-view blocks)."""
        return self.s11 is not None

    def blocks(self, direction: int) -> tuple[Tensor, ...]:
        """(inter-view, intra-view) B x B blocks of direction 0 (view-1 anchors) or 1 (view-2);
        (inter-view,) alone without the intra-view candidates."""
        inter = self.s12 if direction == 0 else self.s12.t()
        if not self.intra:
            return (inter,)
        return inter, self.s11 if direction == 0 else self.s22  # type: ignore[return-value]

    def candidates(self, direction: int) -> Tensor:
        """[B, 2B] candidate similarities of one direction: inter-view block, then intra-view
        ([B, B], the inter-view block, without the intra-view candidates)."""
        blocks = self.blocks(direction)
        return torch.cat(blocks, dim=1) if len(blocks) > 1 else blocks[0]

    def gather(self, direction: int, cols: Tensor) -> Tensor:
        """``candidates(direction).gather(1, cols)``.

        For few columns per anchor (K < B / 4) each block is gathered separately, which avoids
        copying both blocks into one [B, 2B] matrix; for many, the copy plus one gather is
        cheaper (measured in docs/performance.md, "Gathering the scheduled logits").
        """
        if not self.intra:
            return self.blocks(direction)[0].gather(1, cols)
        inter, intra = self.blocks(direction)
        b = inter.size(1)
        if cols.size(1) >= b // 4:
            return self.candidates(direction).gather(1, cols)
        return torch.where(cols < b, inter.gather(1, cols.clamp(max=b - 1)),
                           intra.gather(1, (cols - b).clamp(min=0)))

    def candidate_rows(self, direction: int) -> CandidateRows:
        """Slices of ``candidates(direction)``, detached (for the scheduler)."""
        if not self.intra:
            only = self.blocks(direction)[0].detach()
            return lambda start, stop: only[start:stop]
        inter, intra = (blk.detach() for blk in self.blocks(direction))
        return lambda start, stop: torch.cat([inter[start:stop], intra[start:stop]], dim=1)

    def candidate_values(self, direction: int) -> CandidateValues:
        """Each anchor's sampled columns of ``candidates(direction)``, detached."""
        if not self.intra:
            only = self.blocks(direction)[0].detach()
            return lambda start, stop, sample: only[start:stop].gather(
                1, sample.row_cols(start, stop))
        inter, intra = (blk.detach() for blk in self.blocks(direction))
        b = inter.size(1)

        def values(start: int, stop: int, sample: CandidateSample) -> Tensor:
            cols = sample.row_cols(start, stop)
            return torch.where(cols < b, inter[start:stop].gather(1, cols.clamp(max=b - 1)),
                               intra[start:stop].gather(1, (cols - b).clamp(min=0)))
        return values

    def logits(self, direction: int, active: ActiveNegatives) -> Tensor:
        """The active negatives' similarities, differentiable: gathered from the blocks."""
        return self.gather(direction, active.cols)

    def terms(self, active: tuple[ActiveNegatives, ActiveNegatives],
              weighting: Plain = PLAIN) -> Terms:
        """Eq. 6's terms from the blocks: the denominators as row and column sums of
        exp(similarity) (GRACE's computation), weighted 0 / 1 by the schedule when not every
        candidate is active (``DenseTerms``); a weighting that reads each anchor's negatives
        (ProGCL's) uses the blocks when every candidate is active and the gathered active
        logits otherwise (``gathered_terms``)."""
        complete = active[0].complete and active[1].complete
        if weighting.reads_negatives and not complete:
            return gathered_terms(self, active, weighting)
        blocks = (self.s12, self.s11, self.s22)
        if weighting.weighs:  # the categories below stay the unweighted sums HANS reads
            pos, neg = self.positives(), _weighted_dense_sums(self, weighting.weights)
            with torch.no_grad():
                plain_1 = DenseTerms.apply(*blocks, None)[1] if active[0].grouped else None
        else:
            masks = None if complete else chunk_masks(active, self.num_anchors, self.intra,
                                                      self.s12.dtype)
            pos, neg_1, neg_2 = DenseTerms.apply(*blocks, masks)
            plain_1 = neg_1.detach()
            # ProGCL-mix mixes the other view's candidates, as its between-view similarities
            extra = (weighting.extra(self.s12, True), weighting.extra(self.s12.t(), True))
            neg = (neg_1, neg_2) if extra[0] is None else (neg_1 + extra[0], neg_2 + extra[1])
        sums = (_category_sums(self, active[0], plain_1 if complete else None)
                if active[0].grouped else None)
        return Terms(pos, neg, sums)

    def positives(self) -> Tensor:
        return self.s12.diagonal()


def similarities(h1: Tensor, h2: Tensor, tau: float, candidates: str = "both") -> Similarities:
    """The three B x B blocks the loss needs (s21 is s12 transposed), 1/tau folded in
    (``unit_rows``: three B x B divisions fewer, forward and backward); s12 alone with
    ``candidates = "inter"`` (edgegcl.contrast.negatives.CANDIDATES)."""
    a, b = unit_rows(h1, h2, tau)
    if candidate_views(candidates) == 1:
        return Similarities(a @ b.t(), None, None, tau)
    return Similarities(a @ b.t(), a @ a.t(), b @ b.t(), tau)


DENSE_CHUNK_ELEMENTS = 1 << 20
"""Similarities per chunk of rows in ``DenseTerms`` (4 MiB of floats; at most one block of
anchors with a sampled draw): few enough chunks that their per-chunk overhead stays small,
small enough that the chunk's three exps stay near the cache (docs/performance.md, "The dense
path's terms")."""


def _chunks(rows: int, width: int, align: int = 1) -> list[tuple[int, int]]:
    """Row ranges of about DENSE_CHUNK_ELEMENTS, each inside one span of ``align`` rows."""
    step = max(1, DENSE_CHUNK_ELEMENTS // max(width, 1))
    if align > 1:  # a divisor of align: every chunk inside one span
        step = min(step, align)
        while align % step:
            step -= 1
    return [(r, min(r + step, rows)) for r in range(0, rows, step)]


class DenseTerms(torch.autograd.Function):
    """Eq. 6's per-anchor terms from the dense blocks: the positive s_ii and, per direction, the
    denominator's sum_{j in A_i} exp(s_ij) over the active candidates (every candidate with
    ``masks`` None, else those ``masks`` mark: edgegcl.contrast.masks).

    A chunk of rows at a time: exp is taken in cache and never kept, and recomputed in the
    backward (one exp pass against three B x B tensors held from forward to backward), so the
    path costs the same at every theta_max: the budget only changes the 0 / 1 weights of the
    chunk's sums, not what is computed or stored. ``forward(s12, s11, s22, masks)`` ->
    (pos, n1, n2).
    """

    @staticmethod
    def forward(ctx: FunctionCtx, s12: Tensor, s11: Tensor | None, s22: Tensor | None,
                masks: ChunkMasks | None) -> tuple[Tensor, Tensor, Tensor]:
        b = s12.size(0)
        n1, n2 = s12.new_zeros(b), s12.new_zeros(b)
        with torch.no_grad():
            for r0, r1 in _chunks(b, b, 1 if masks is None else masks.align):
                e12, e11, e22 = (None if s is None else torch.exp(s[r0:r1])
                                 for s in (s12, s11, s22))
                if masks is not None:
                    rows_1, cols_2, rows_2 = masks.sums(r0, r1, e12, e11, e22)  # type: ignore[arg-type]
                    n1[r0:r1] = rows_1
                    n2 += cols_2
                    n2[r0:r1] += rows_2
                    continue
                for e in (e12, e11, e22):  # the positive, and the anchor itself: no negatives
                    if e is not None:
                        e.diagonal(r0).zero_()
                n1[r0:r1] = e12.sum(1)  # type: ignore[union-attr]
                n2 += e12.sum(0)  # type: ignore[union-attr]
                if e11 is not None and e22 is not None:
                    n1[r0:r1] += e11.sum(1)
                    n2[r0:r1] += e22.sum(1)
        ctx.save_for_backward(s12, s11, s22)
        ctx.masks = masks
        return s12.diagonal().clone(), n1, n2

    @staticmethod
    def backward(ctx: Any, g_pos: Tensor, g1: Tensor, g2: Tensor
                 ) -> tuple[Tensor | None, ...]:
        s12, s11, s22 = ctx.saved_tensors
        masks: ChunkMasks | None = ctx.masks
        b = s12.size(0)
        grads = tuple(None if s is None else torch.empty_like(s) for s in (s12, s11, s22))
        col_1, row_2, col_2 = g1.unsqueeze(1), g2.unsqueeze(0), g2.unsqueeze(1)
        for r0, r1 in _chunks(b, b, 1 if masks is None else masks.align):
            e = tuple(None if s is None else torch.exp(s[r0:r1]) for s in (s12, s11, s22))
            out = tuple(None if g is None else g[r0:r1] for g in grads)
            if masks is not None:
                masks.grads(r0, r1, e, g1, g2, out)  # type: ignore[arg-type]
                out[0].diagonal(r0).add_(g_pos[r0:r1])  # type: ignore[union-attr]
                continue
            torch.mul(e[0], col_1[r0:r1] + row_2, out=out[0])  # type: ignore[arg-type]
            out[0].diagonal(r0).copy_(g_pos[r0:r1])  # type: ignore[union-attr]
            for k, g in ((1, col_1), (2, col_2)):
                if e[k] is not None:
                    torch.mul(e[k], g[r0:r1], out=out[k])  # type: ignore[arg-type]
                    out[k].diagonal(r0).zero_()  # type: ignore[union-attr]
        return grads[0], grads[1], grads[2], None


def _off_diagonal(w: Tensor) -> Tensor:
    """``w`` with its diagonal zeroed (the positive, or the anchor itself: no negatives)."""
    return w - torch.diag_embed(w.diagonal())


def _weighted_dense_sums(sims: Similarities, weigh: NegativeWeights) -> tuple[Tensor, Tensor]:
    """The two denominators over every candidate with each negative's exp weighted by ``weigh`` of its
    similarity over the mean weight of the anchor's negatives (ProGCL-weight); the weights
    carry no gradient. Direction 1 reads the rows of s12 and s11, direction 2 the columns of
    s12 and the rows of s22."""
    count = num_candidates(sims.num_anchors, "both" if sims.intra else "inter")
    e12, w12 = torch.exp(sims.s12), _off_diagonal(weigh(sims.s12.detach()))
    num_1, num_2 = (e12 * w12).sum(1), (e12 * w12).sum(0)
    den_1, den_2 = w12.sum(1), w12.sum(0)
    if sims.intra:
        e11, w11 = torch.exp(sims.s11), _off_diagonal(weigh(sims.s11.detach()))  # type: ignore[arg-type, union-attr]
        e22, w22 = torch.exp(sims.s22), _off_diagonal(weigh(sims.s22.detach()))  # type: ignore[arg-type, union-attr]
        num_1, num_2 = num_1 + (e11 * w11).sum(1), num_2 + (e22 * w22).sum(1)
        den_1, den_2 = den_1 + w11.sum(1), den_2 + w22.sum(1)
    return (num_1 / (den_1 / count).clamp_min(1e-12),
            num_2 / (den_2 / count).clamp_min(1e-12))


@torch.no_grad()
def _category_sums(sims: Similarities, active: ActiveNegatives, every: Tensor | None
                   ) -> dict[str, Tensor]:
    """Direction 1's sums of exp over each category's active negatives: gathered for hard and
    easy, the intermediate (the largest) by difference from ``every`` candidate's sum when all
    are active, gathered too otherwise."""
    seg = active.segments()
    out = {c: torch.exp(sims.gather(0, seg[c])).sum(1) for c in CATEGORIES
           if every is None or c != "inter"}
    if every is not None:
        out["inter"] = (every - out["hard"] - out["easy"]).clamp_min(0.0)
    return out
