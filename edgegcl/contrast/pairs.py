"""The scheduled-pairs path: the loss's similarities for the active pairs only.

The dense path (``edgegcl.contrast.dense.Similarities``) computes three B x B similarity blocks
and their gradients and weighs their entries by the schedule (``DenseTerms``), so a step costs
about the same at every theta_max. Eq. 6's gradient only reaches the B x K active pairs, so here:

- with sampled strata (the default) each block of anchors shares a sample of M candidates:
  its similarities are one product with the sampled rows (``block_values``, batched over the
  blocks), kept for the drawn columns, and ``BlockSampledLogits`` differentiates them as two
  products per block, O(B M d) at matrix-product speed;
- with exact strata the candidates' similarities, which stratification must rank, are
  computed a block of anchors at a time without gradient (``candidate_rows``), the scheduler
  keeps each drawn column's value (``schedule_negatives(..., keep_values=True)``), and
  ``ScheduledLogits``' backward is two weighted row sums over the active pairs
  (``embedding_bag``), O(B K d).

No B x 2B matrix with a gradient exists. Values and gradients equal the dense path's
(tests/test_pairs.py). Which path is cheaper depends on the candidates a step touches per
anchor, so ``--logits auto`` (``choose_logits``) decides per step, and the profiler measures
both at each theta_max (docs/performance.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import FunctionCtx

from edgegcl.contrast.loss import Terms, gathered_terms, unit_rows
from edgegcl.contrast.negatives import (
    ActiveNegatives,
    CandidateRows,
    CandidateSample,
    anchors_per_block,
    candidate_views,
)
from edgegcl.contrast.sampled import CandidateValues
from edgegcl.contrast.weighting import PLAIN, Plain

PATHS = ("dense", "pairs")
"""The two ways of computing the loss's logits; the profiler measures both."""
PAIRS_UP_TO = {"sampled": 0.3, "exact": 0.1}
"""``--logits auto`` takes the pairs path while the candidates it touches per anchor are at
most this fraction of |N_i| (2B - 2; B - 1 with inter-view candidates): the sample (sampled
strata) or the active set (exact strata, whose per-pair backward is slower per element).
With sampled strata the pairs path is faster up to about half the candidates, but from about
a third its memory passes the dense path's, which costs the same at every theta_max
(docs/performance.md, "The dense path's terms")."""


def choose_logits(logits: str, stratify: str, touched: int, num_cand: int) -> str:
    """The path a step takes: ``logits`` unless it is ``auto``, then pairs while ``touched``
    candidates per anchor (sample size or active count) are at most PAIRS_UP_TO of
    ``num_cand``, dense above."""
    if logits != "auto":
        return logits
    return "pairs" if touched <= PAIRS_UP_TO[stratify] * num_cand else "dense"


class ScheduledLogits(torch.autograd.Function):
    """s_ik = <u_i, z_cols[i,k]> for the active pairs, from values computed without gradient.

    ``forward(u, z, cols, values)`` returns ``values`` (which must equal those products) as a
    tensor whose gradient flows to u and z: with G the B x |z| matrix holding the incoming
    gradient at the active pairs, dL/du = G z and dL/dz = G^T u.
    """

    @staticmethod
    def forward(ctx: FunctionCtx, u: Tensor, z: Tensor, cols: Tensor, values: Tensor
                ) -> Tensor:
        ctx.save_for_backward(u, z, cols)
        return values  # no copy: autograd gives the output its own graph node

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        u, z, cols = ctx.saved_tensors
        k = cols.size(1)
        if k == 0:  # no active negative (e.g. a tiny batch early in the schedule)
            return torch.zeros_like(u), torch.zeros_like(z), None, None
        grad_u = grad_z = None
        if ctx.needs_input_grad[0]:  # row i: sum_k g_ik z_cols[i,k]
            grad_u = F.embedding_bag(cols, z, per_sample_weights=grad, mode="sum")
        if ctx.needs_input_grad[1]:  # row j: sum over the pairs (i, k) with cols[i,k] = j
            flat = cols.reshape(-1)
            order = flat.to(torch.int32).argsort(stable=True)  # int32 keys sort faster
            offsets = torch.zeros(z.size(0), dtype=torch.long, device=z.device)
            torch.cumsum(torch.bincount(flat, minlength=z.size(0))[:-1], 0, out=offsets[1:])
            grad_z = F.embedding_bag(torch.div(order, k, rounding_mode="floor"), u, offsets,
                                     per_sample_weights=grad.reshape(-1)[order], mode="sum")
        return grad_u, grad_z, None, None


class BlockSampledLogits(torch.autograd.Function):
    """s_ik = <u_i, z_j> for active pairs drawn from sampled strata (``CandidateSample``).

    Anchor i's active columns lie in its block's sample, so a block's gradient is dense over
    that sample: with G the [block, M + own] incoming gradient at the block's active positions,
    dL/du_block = G z_sample and dL/dz_sample = G^T u_block: two matrix products per block
    (O(B M d), at matrix-product speed) instead of per-pair gathers. ``forward(u, z, sample,
    positions, values)`` returns ``values``, which must equal those products (or -inf at a
    pair left out, whose gradient is then exp(-inf) = 0); ``positions`` None: ``values`` holds
    every sampled column ([B, M + own]).
    """

    @staticmethod
    def forward(ctx: FunctionCtx, u: Tensor, z: Tensor, sample: CandidateSample,
                positions: Tensor, values: Tensor) -> Tensor:
        ctx.save_for_backward(u, z, positions)
        ctx.sample = sample
        return values  # no copy: autograd gives the output its own graph node

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        u, z, positions = ctx.saved_tensors
        sample: CandidateSample = ctx.sample
        grad_u, grad_z = torch.empty_like(u), torch.zeros_like(z)
        width = sample.cols.size(1)
        for start, stop in sample.chunks(u.size(0)):
            g = grad[start:stop] if positions is None else grad.new_zeros(
                stop - start, width).scatter_add_(1, positions[start:stop], grad[start:stop])
            cols = sample.blocks(start, stop)
            zs = z.index_select(0, cols.reshape(-1)).view(*cols.shape, -1)
            (g_whole, g_last), (u_whole, u_last) = sample.split(g), sample.split(u[start:stop])
            n = g_whole.size(0)  # whole blocks: one batched product each, written in place
            torch.bmm(g_whole, zs[:n], out=grad_u[start:start + n * sample.block].view(
                n, sample.block, u.size(1)))
            grad_z.index_add_(0, cols[:n].reshape(-1),
                              torch.bmm(g_whole.transpose(1, 2), u_whole).flatten(0, 1))
            if g_last is not None and u_last is not None:  # a last, partial block
                torch.mm(g_last, zs[n], out=grad_u[start + n * sample.block:stop])
                grad_z.index_add_(0, cols[n], g_last.t() @ u_last)
        return grad_u, grad_z, None, None, None


def block_values(u: Tensor, z: Tensor) -> CandidateValues:
    """``CandidateValues`` of anchors ``u`` against candidates ``z``: per block of anchors one
    product with its sampled rows of ``z``, batched over the blocks (``torch.bmm``)."""
    def values(start: int, stop: int, sample: CandidateSample) -> Tensor:
        cols = sample.blocks(start, stop)
        zs = z.index_select(0, cols.reshape(-1)).view(*cols.shape, -1)
        out = u.new_empty(stop - start, cols.size(1))
        whole, last = sample.split(u[start:stop])
        n = whole.size(0)  # whole blocks in one batched product, a partial last one after
        torch.bmm(whole, zs[:n].transpose(1, 2), out=out[:n * sample.block].view(
            n, sample.block, cols.size(1)))
        if last is not None:
            torch.mm(last, zs[n].t(), out=out[n * sample.block:])
        return out
    return values


@dataclass(frozen=True)
class PairSimilarities:
    """A step's similarities, computed for the scheduled pairs only (see the module).

    ``a`` and ``b`` are the two views' projected anchors as ``unit_rows`` gives them (with
    gradient). Direction 0 ranks view-1 anchors against [b; a] (inter-view, then intra-view),
    direction 1 view-2 anchors against [a; b], as ``Similarities.candidates`` does;
    ``candidates`` holds those two concatenations, built once per step by
    ``pair_similarities``: with inter-view candidates only (``candidates = "inter"``), b and
    a themselves.
    """

    a: Tensor
    b: Tensor
    candidates: tuple[Tensor, Tensor]
    tau: float
    keeps_values: ClassVar[bool] = True

    @property
    def num_anchors(self) -> int:
        return self.a.size(0)

    @property
    def device(self) -> torch.device:
        return self.a.device

    @property
    def intra(self) -> bool:
        """Whether the candidates include the anchor's own view (both views' rows)."""
        return self.candidates[0].size(0) > self.a.size(0)

    def _sides(self, direction: int) -> tuple[Tensor, Tensor]:
        """(anchors, candidates) of a direction."""
        return (self.a, self.b)[direction], self.candidates[direction]

    def candidate_rows(self, direction: int) -> CandidateRows:
        """Anchors start..stop-1 against every candidate: one product per block, no gradient."""
        u, z = (t.detach() for t in self._sides(direction))
        return lambda start, stop: u[start:stop] @ z.t()

    def candidate_values(self, direction: int) -> CandidateValues:
        """Anchors against their blocks' sampled candidates (``block_values``), no gradient."""
        return block_values(*(t.detach() for t in self._sides(direction)))

    def logits(self, direction: int, active: ActiveNegatives) -> Tensor:
        """The active pairs' similarities, differentiable through ``ScheduledLogits``.

        The values come from the scheduler when it drew ``active`` in this step; for active
        sets kept from an earlier step (full-graph mode refreshes every T_int epochs) they are
        recomputed, blockwise as the scheduler computes them.
        """
        u, z = self._sides(direction)
        values = active.values
        if active.left_out is not None:  # every sampled column, the left-out ones at -inf
            return self._sampled_all(u, z, direction, active)
        if active.sample is not None:  # sampled strata: a block's pairs in one product
            if values is None:
                rows, pos = self.candidate_values(direction), active.positions
                with torch.no_grad():
                    values = torch.cat([rows(start, stop, active.sample).gather(
                        1, pos[start:stop])  # type: ignore[index]
                        for start, stop in active.sample.chunks(self.num_anchors)])
            return BlockSampledLogits.apply(u, z, active.sample, active.positions, values)
        if values is None:
            rows = self.candidate_rows(direction)
            step = anchors_per_block(self.num_anchors, u.device, z.size(0))
            with torch.no_grad():
                values = torch.cat([rows(r, r + step).gather(1, active.cols[r:r + step])
                                    for r in range(0, self.num_anchors, step)])
        return ScheduledLogits.apply(u, z, active.cols, values)

    def _sampled_all(self, u: Tensor, z: Tensor, direction: int, active: ActiveNegatives
                     ) -> Tensor:
        """[B, M + own] logits of every column of each anchor's block sample, its left-out
        columns -inf (exp 0, no gradient): a compact uniform draw (``ActiveNegatives.left_out``),
        with no index or position per pair."""
        sample, values = active.sample, active.values
        assert sample is not None and active.left_out_at is not None
        if values is None:  # kept from an earlier step: recomputed from this step's rows
            rows = self.candidate_values(direction)
            with torch.no_grad():
                values = torch.cat([rows(start, stop, sample)
                                    for start, stop in sample.chunks(self.num_anchors)])
        at = active.left_out_at
        anchors = torch.arange(at.size(0), device=at.device).repeat_interleave(at.size(1))
        # in place, no copy (``values`` are this step's, read by nothing after this); their
        # gradient there is exp(-inf) = 0, so the products' backward needs no mask
        values.index_put_((anchors, at.reshape(-1)), values.new_tensor(-math.inf))
        return BlockSampledLogits.apply(u, z, sample, None, values)

    def terms(self, active: tuple[ActiveNegatives, ActiveNegatives],
              weighting: Plain = PLAIN) -> Terms:
        """Eq. 6's terms over the active pairs' logits alone (``gathered_terms``)."""
        return gathered_terms(self, active, weighting)

    def positives(self) -> Tensor:
        return (self.a * self.b).sum(1)


def pair_similarities(h1: Tensor, h2: Tensor, tau: float, candidates: str = "both"
                      ) -> PairSimilarities:
    """The scheduled-pairs counterpart of ``edgegcl.contrast.dense.similarities``."""
    a, b = unit_rows(h1, h2, tau)
    if candidate_views(candidates) == 1:
        return PairSimilarities(a, b, (b, a), tau)
    return PairSimilarities(a, b, (torch.cat([b, a]), torch.cat([a, b])), tau)
