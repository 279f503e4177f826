"""Symmetric InfoNCE over the scheduled negatives only (Eq. 6 of the paper).

For anchor h_i^1 with positive h_i^2 and active negatives A_i (a subset of N_i, see
``negatives``):

    l_i = -log( exp(s_ii / tau) / (exp(s_ii / tau) + sum_{j in A_i} exp(s_ij / tau)) )

with s the cosine similarity; the loss is the mean over anchors, averaged over the two
directions (h^1 as anchor, then h^2). The positive is kept in the denominator, as in GRACE and
every InfoNCE implementation: Eq. 6 as printed sums only over N_i, which makes the loss
unbounded below when few negatives are active (as during HANS's bootstrap at eta = 0.05).

A_i is drawn from the anchor's candidates N_i: the other anchors of both views (GRACE's,
the default) or of the other view only (``candidates = "inter"``: Eq. 6 as printed, the
intra-view terms absent from every denominator; edgegcl.contrast.negatives).

Per-category losses l_hard, l_inter, l_easy (fed to HANS) are the same expression over the
view-1 anchors with A_i restricted to that category's active negatives (``category_loss =
"sum"``, the paper's), or with the sum over A_i replaced by its mean (``"mean"``: InfoNCE
against the category's average negative, which does not grow with the number of active
negatives), computed without gradient; a category with no active negative has loss 0 by
definition. Active negatives drawn without categories (sampled strata once HANS is saturated,
when nothing reads these losses) give NaN.

Where the terms come from is the similarities' own business (``AnchorSimilarities.terms``):
the dense blocks (edgegcl.contrast.dense) or the scheduled pairs (edgegcl.contrast.pairs); what
the denominator does with each negative is the ``weighting`` the loss is given
(edgegcl.contrast.weighting: plain, ProGCL-weight, ProGCL-mix).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from edgegcl.contrast.negatives import CATEGORIES, ActiveNegatives, CandidateRows
from edgegcl.contrast.sampled import CandidateValues
from edgegcl.contrast.weighting import PLAIN, Plain


@dataclass(frozen=True)
class Terms:
    """Eq. 6's per-anchor parts: the positive s_ii, each direction's denominator sum over its
    active negatives (as the weighting says), and direction 1's unweighted sums of exp per
    category (None when the negatives were drawn without categories)."""

    pos: Tensor
    neg: tuple[Tensor, Tensor]
    category_sums: dict[str, Tensor] | None


class AnchorSimilarities(Protocol):
    """What the scheduler and the loss read of a step's similarities: the dense B x B blocks
    (edgegcl.contrast.dense.Similarities) or the scheduled pairs only
    (edgegcl.contrast.pairs.PairSimilarities)."""

    tau: float
    keeps_values: ClassVar[bool]
    """Whether the scheduler should keep the drawn columns' similarities for ``logits``."""

    @property
    def num_anchors(self) -> int: ...

    @property
    def intra(self) -> bool:
        """Whether the candidates include the anchor's own view (``candidates = "both"``)."""
        ...

    @property
    def device(self) -> torch.device: ...

    def candidate_rows(self, direction: int) -> CandidateRows: ...

    def candidate_values(self, direction: int) -> CandidateValues: ...

    def positives(self) -> Tensor: ...

    def logits(self, direction: int, active: ActiveNegatives) -> Tensor: ...

    def terms(self, active: tuple[ActiveNegatives, ActiveNegatives],
              weighting: Plain = PLAIN) -> Terms:
        """Eq. 6's terms over the active negatives of each direction, on this path."""
        ...


def unit_rows(h1: Tensor, h2: Tensor, tau: float) -> tuple[Tensor, Tensor]:
    """The two views' rows normalised and scaled by tau^-1/2, so that a dot product of two
    rows is their cosine similarity / tau (this saves a division per similarity)."""
    scale = tau ** -0.5
    return F.normalize(h1, dim=1) * scale, F.normalize(h2, dim=1) * scale


@dataclass(frozen=True)
class LossOutput:
    """The differentiable loss and the per-category losses (floats, no graph)."""

    loss: Tensor
    category: dict[str, float]


def _anchor_loss(pos: Tensor, neg_exp_sum: Tensor) -> Tensor:
    """-log(e^p / (e^p + sum e^n)) per anchor, given the sum of exp over its negatives."""
    return torch.log(torch.exp(pos) + neg_exp_sum) - pos


def gathered_terms(sims: AnchorSimilarities, active: tuple[ActiveNegatives, ActiveNegatives],
                   weighting: Plain = PLAIN) -> Terms:
    """Eq. 6's terms from the active negatives' logits (``sims.logits``): the scheduled-pairs
    path's, and the dense blocks' where a weighting weighs a partial schedule. A weighted
    denominator is each negative's exp times its weight over the mean weight of the anchor's
    active ones (ProGCL-weight, Eq. 9)."""
    logits = [sims.logits(d, a) for d, a in enumerate(active)]
    exps = [torch.exp(x) for x in logits]
    if weighting.weighs:
        w = [weighting.weights(x.detach()) for x in logits]
        neg = tuple((e * wi).sum(1) / wi.mean(1).clamp_min(1e-12) for e, wi in zip(exps, w))
    else:
        neg = tuple(e.sum(1) for e in exps)
        extra = [weighting.extra(x) for x in logits]
        if extra[0] is not None:
            neg = (neg[0] + extra[0], neg[1] + extra[1])
    sums = None
    if active[0].grouped:
        with torch.no_grad():
            blocks = torch.split(exps[0], list(active[0].sizes), dim=1)
            sums = {c: blk.sum(1) for c, blk in zip(CATEGORIES, blocks)}
    return Terms(sims.positives(), neg, sums)  # type: ignore[arg-type]


def scheduled_info_nce(sims: AnchorSimilarities,
                       active: tuple[ActiveNegatives, ActiveNegatives],
                       category_loss: str = "sum", weighting: Plain = PLAIN) -> LossOutput:
    """Eq. 6, symmetrised, over the active negatives of each direction, with ``weighting``'s
    denominator (edgegcl.contrast.weighting). The per-category losses are taken over the
    view-1 anchors h_i^1, the anchors of the paper's Eq. 6 and of its stratification, as
    ``category_loss`` says (``"sum"`` or ``"mean"``, see the module), without the weighting;
    NaN when the negatives were drawn without categories (``ActiveNegatives.grouped``)."""
    terms = sims.terms(active, weighting)
    pos, (neg_1, neg_2) = terms.pos, terms.neg
    loss = 0.5 * (_anchor_loss(pos, neg_1).mean() + _anchor_loss(pos, neg_2).mean())
    if terms.category_sums is None:  # drawn without categories (sampled strata, saturated)
        return LossOutput(loss, dict.fromkeys(CATEGORIES, math.nan))
    sums = terms.category_sums
    with torch.no_grad():
        category = {c: float(_anchor_loss(pos, sums[c] / (size if category_loss == "mean"
                                                          else 1)).mean()) if size else 0.0
                    for c, size in zip(CATEGORIES, active[0].sizes)}
    return LossOutput(loss, category)
