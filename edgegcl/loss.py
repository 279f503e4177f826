"""Symmetric InfoNCE over the HANS-scheduled negatives only (Eq. 6 of the paper).

For anchor h_i^1 with positive h_i^2 and active negatives A_i (a subset of N_i, see
``negatives``):

    l_i = -log( exp(s_ii / tau) / (exp(s_ii / tau) + sum_{j in A_i} exp(s_ij / tau)) )

with s the cosine similarity; the loss is the mean over anchors, averaged over the two
directions (h^1 as anchor, then h^2). The positive is kept in the denominator, as in GRACE and
every InfoNCE implementation: Eq. 6 as printed sums only over N_i, which makes the loss
unbounded below when few negatives are active (as during HANS's bootstrap at eta = 0.05).

Per-category losses l_hard, l_inter, l_easy (fed to HANS) are the same expression with A_i
restricted to that category's active negatives, computed without gradient; a category with no
active negative has loss 0 by definition.

Cosine similarities are bounded by 1, so exponentials are taken of s/tau - 1/tau <= 0: no
overflow, no max-subtraction pass, and no underflow for any tau above ~0.02.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from edgegcl.negatives import CATEGORIES, ActiveNegatives


@dataclass(frozen=True)
class Similarities:
    """Cosine similarities / tau between the two views' projected anchors: s12, s11, s22."""

    s12: Tensor
    s11: Tensor
    s22: Tensor
    tau: float

    def blocks(self, direction: int) -> tuple[Tensor, Tensor]:
        """(inter-view, intra-view) B x B blocks of direction 0 (view-1 anchors) or 1 (view-2)."""
        return (self.s12, self.s11) if direction == 0 else (self.s12.t(), self.s22)

    def candidates(self, direction: int) -> Tensor:
        """[B, 2B] candidate similarities of one direction: inter-view block, then intra-view."""
        return torch.cat(self.blocks(direction), dim=1)

    def gather(self, direction: int, cols: Tensor) -> Tensor:
        """``candidates(direction).gather(1, cols)`` without building the [B, 2B] matrix."""
        inter, intra = self.blocks(direction)
        b = inter.size(1)
        is_inter = cols < b
        return torch.where(is_inter, inter.gather(1, cols.clamp(max=b - 1)),
                           intra.gather(1, (cols - b).clamp(min=0)))

    def positives(self) -> Tensor:
        return self.s12.diagonal()


def similarities(h1: Tensor, h2: Tensor, tau: float) -> Similarities:
    """The three B x B blocks the loss needs (s21 is s12 transposed).

    1/tau is folded into the normalised rows (each scaled by tau^-1/2), which saves three
    B x B divisions forward and backward.
    """
    scale = tau ** -0.5
    a, b = F.normalize(h1, dim=1) * scale, F.normalize(h2, dim=1) * scale
    return Similarities(a @ b.t(), a @ a.t(), b @ b.t(), tau)


@dataclass(frozen=True)
class LossOutput:
    """The differentiable loss and the per-category losses (floats, no graph)."""

    loss: Tensor
    category: dict[str, float]


def _anchor_loss(pos: Tensor, neg_exp_sum: Tensor, shift: float) -> Tensor:
    """-log(e^p / (e^p + sum e^n)) per anchor, with exponentials pre-shifted by ``shift``."""
    return torch.log(torch.exp(pos - shift) + neg_exp_sum) - (pos - shift)


def _dense_denominators(sims: Similarities) -> tuple[Tensor, Tensor]:
    """Sum of exp over all candidates (every negative active), both directions, exp(s12) shared."""
    shift = 1.0 / sims.tau
    e12, e11, e22 = (torch.exp(s - shift) for s in (sims.s12, sims.s11, sims.s22))
    d12 = e12.diagonal()
    neg_1 = e12.sum(1) - d12 + e11.sum(1) - e11.diagonal()
    neg_2 = e12.sum(0) - d12 + e22.sum(1) - e22.diagonal()
    return neg_1, neg_2


@torch.no_grad()
def _category_losses(logits: list[Tensor], pos: Tensor, active: list[ActiveNegatives],
                     shift: float) -> dict[str, float]:
    out = {}
    for k, cat in enumerate(CATEGORIES):
        if active[0].sizes[k] == 0:
            out[cat] = 0.0
            continue
        per_dir = []
        for lg, act in zip(logits, active):
            start = sum(act.sizes[:k])
            seg = lg[:, start:start + act.sizes[k]]
            per_dir.append(_anchor_loss(pos, torch.exp(seg - shift).sum(1), shift).mean())
        out[cat] = float(torch.stack(per_dir).mean())
    return out


def scheduled_info_nce(sims: Similarities, active: tuple[ActiveNegatives, ActiveNegatives]
                       ) -> LossOutput:
    """Eq. 6, symmetrised, over the active negatives of each direction.

    With every candidate active (theta_max = 1 at saturation) the denominators are plain row
    and column sums of the similarity blocks (the GRACE computation, no gather); otherwise the
    active logits are gathered through the index lists.
    """
    shift = 1.0 / sims.tau
    pos = sims.positives()
    if active[0].complete and active[1].complete:
        with torch.no_grad():
            logits = [sims.gather(d, a.cols) for d, a in enumerate(active)]
        neg = _dense_denominators(sims)
    else:
        logits = [sims.gather(d, a.cols) for d, a in enumerate(active)]
        neg = tuple(torch.exp(lg - shift).sum(1) for lg in logits)
    loss = 0.5 * (_anchor_loss(pos, neg[0], shift).mean() + _anchor_loss(pos, neg[1], shift).mean())
    return LossOutput(loss, _category_losses(logits, pos.detach(), list(active), shift))
