"""What InfoNCE's denominator does with a step's active negatives: each once (``PLAIN``), each
weighted by ProGCL's estimate of being a true negative (``ProGCLWeight``), or joined by
synthesised negatives mixed by it (``ProGCLMix``). The loss is given one of these
(edgegcl.contrast.loss.scheduled_info_nce); the similarities' own ``terms`` apply it on their path
(dense blocks or scheduled pairs), reading only ``reads_negatives``, ``weighs``, ``weights``
and ``extra``.

ProGCL (Xia et al. 2022): B = p(true negative) x similarity, from the two-component Beta mixture
fitted to the step's similarities (edgegcl.contrast.falseneg.true_negative_hardness); no
gradient flows through B.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

NegativeWeights = Callable[[Tensor], Tensor]
"""Detached cos / tau similarities to unnormalised, non-negative weights of those negatives in
the InfoNCE denominator (ProGCL's B: edgegcl.contrast.falseneg.true_negative_hardness)."""


class Plain:
    """Eq. 6's denominator: every active negative's exp once, nothing added."""

    reads_negatives = False
    """Whether the denominator depends on which negatives an anchor has (their weights, or the
    ones it mixes): a partial schedule then needs the active negatives' own logits."""
    weighs = False
    """Whether each negative's exp is weighted (``weights``)."""

    def weights(self, sims: Tensor) -> Tensor:
        """Each negative's weight from its detached similarity (only when ``weighs``)."""
        raise NotImplementedError("plain InfoNCE weighs no negative")

    def extra(self, logits: Tensor, exclude_diagonal: bool = False) -> Tensor | None:
        """Per anchor, the exp-sum of negatives added to the denominator (None: none).
        ``logits``: [anchors, candidates] cos / tau with gradient; ``exclude_diagonal``:
        column i of row i is the positive."""
        return None


PLAIN = Plain()
"""InfoNCE without ProGCL's estimate: the loss's default."""


@dataclass(frozen=True)
class ProGCLWeight(Plain):
    """ProGCL-weight (Eq. 9): each negative's exp weighted by B over the mean B of the anchor's
    negatives."""

    weigh: NegativeWeights
    reads_negatives = True
    weighs = True

    def weights(self, sims: Tensor) -> Tensor:
        return self.weigh(sims)


@dataclass(frozen=True)
class ProGCLMix(Plain):
    """ProGCL-mix (Eq. 10): ``count`` synthesised negatives per anchor join the unweighted
    ones (``mixed_negatives``)."""

    weigh: NegativeWeights
    count: int
    reads_negatives = True

    def extra(self, logits: Tensor, exclude_diagonal: bool = False) -> Tensor | None:
        return mixed_negatives(logits, self.weigh, self.count, exclude_diagonal)


def mixed_negatives(logits: Tensor, weigh: NegativeWeights, count: int,
                    exclude_diagonal: bool = False) -> Tensor:
    """ProGCL-mix's synthesised negatives (Xia et al. 2022, Eq. 10), per anchor the sum of
    their exp-similarities: the ``count`` candidates of highest B = ``weigh`` (p(true
    negative) x similarity) are paired with a random permutation of themselves, and each pair
    mixed by its B's, m = (B_a s_a + B_b s_b) / (B_a + B_b), the similarity to the B-weighted
    mix of the two embeddings. ``logits``: [anchors, candidates] cos / tau, with gradient (the
    weights carry none); ``exclude_diagonal``: column i of row i is the positive."""
    b = weigh(logits.detach())
    if exclude_diagonal:
        b = b - torch.diag_embed(torch.full_like(b.diagonal(), math.inf))
    count = min(count, logits.size(1) - int(exclude_diagonal))
    if count < 1:
        return logits.new_zeros(logits.size(0))
    top, cols = b.topk(count, dim=1)
    sel = logits.gather(1, cols)
    perm = torch.randperm(count, device=logits.device)
    top_b, sel_b = top[:, perm], sel[:, perm]
    total = top + top_b
    share = torch.where(total > 0, top / total.clamp_min(1e-30), 0.5)  # B's both 0: the mean
    mixed = share * sel + (1 - share) * sel_b
    ok = torch.isfinite(top) & torch.isfinite(top_b)  # a row with fewer candidates than count
    return torch.where(ok, torch.exp(mixed), 0.0).sum(1)
