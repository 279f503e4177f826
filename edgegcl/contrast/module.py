"""The scheduled contrast as one object, for ``edgegcl train`` and any encoder alike: two views'
projections in, the loss (and its per-category parts) out.

``ScheduledContrast`` keeps the negative selection between
steps, sums each epoch's losses weighted by its anchors, and hands its negative scheduler
(HANS, or another member of edgegcl.contrast.scheduler) their means at the end of the epoch
(``step()``, once per epoch, as ``torch.optim.lr_scheduler``). The Trainer
(edgegcl.training.engine) builds its contrast from the run's ``[schedule]``, ``[hans]`` and
``[contrast]`` sections (``ScheduledContrast.from_config``);
a hand-written loop builds one for its own encoder (README). Nothing N x N is built:
candidates are the batch's other anchors in both views (2B - 2 per anchor; or in the other
view only, B - 1, with ``candidates="inter"``), stratified and scheduled as HANS says.
``ContrastConfig`` is the ``[contrast]`` section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from edgegcl.contrast.config import (CANDIDATES, LOGITS, NEGATIVE_WEIGHTS,
                                     ContrastConfig)
from edgegcl.contrast.hans import EQUAL_LOSSES, HANS, HANSConfig
from edgegcl.contrast.dense import similarities
from edgegcl.contrast.loss import AnchorSimilarities, LossOutput, scheduled_info_nce
from edgegcl.contrast.negatives import CATEGORIES, STRATIFY, num_candidates
from edgegcl.contrast.pairs import choose_logits, pair_similarities
from edgegcl.contrast.falseneg import fit_rows, true_negative_hardness
from edgegcl.contrast.scheduler import NegativeScheduler, ScheduleConfig, ScheduleEvent
from edgegcl.contrast.selection import NegativeSelector
from edgegcl.contrast.weighting import PLAIN, Plain, ProGCLMix, ProGCLWeight
from edgegcl.phases import PhaseClock

__all__ = ["ContrastConfig", "EpochLoss", "ScheduledContrast"]


class ContrastWorld(Protocol):
    """What the contrast needs of data-parallel ranks (edgegcl.training.distributed.World)."""

    def gather_views(self, h1: Tensor, h2: Tensor) -> tuple[Tensor, Tensor]: ...

    def weighted_mean(self, values: dict[str, float], weight: float) -> dict[str, float]: ...


@dataclass(frozen=True)
class EpochLoss:
    """An epoch's loss and per-category losses, each the mean over its anchors (what HANS
    read at the epoch's end; the categories NaN where they were not computed)."""

    loss: float
    category: dict[str, float]


class ScheduledContrast(nn.Module):
    """Symmetric InfoNCE whose negatives a scheduler (HANS by default) schedules (Eq. 6),
    between ``h1`` and ``h2``.

    Args:
        scheduler: the negative scheduler (edgegcl.contrast.scheduler); its per-category caps
            ``theta_cat`` also give the strata's ratios (theta_cat / sum theta_cat) unless
            ``ratios`` are given. Default ``HANS()``. The other defaults are the
            ``[contrast]`` section's (``ContrastConfig``), as the flags'; ``stratify`` is
            ``"sampled"``, what its ``auto`` resolves to with random picks.
        tau: temperature.
        refresh_every: forward calls between re-stratifications: 1 where every call brings
            new anchors (mini-batches), T_int for one graph contrasted every epoch.
        stratify: ``"sampled"`` or ``"exact"`` strata (edgegcl.contrast.negatives).
        stratify_sample: least number of candidates an anchor ranks with sampled strata.
        logits: ``"auto"``, ``"dense"`` or ``"pairs"`` (edgegcl.contrast.pairs).
        seed: seed of the strata's random sample.
        candidates: ``"both"`` (the other anchors of both views, 2B - 2) or ``"inter"``
            (the other view's only, B - 1: Eq. 6 as printed); edgegcl.contrast.negatives.
        pick: each category's ``"hardest"`` candidates (needs exact strata) or a ``"random"``
            subset of its pool (edgegcl.contrast.negatives.PICKS).
        uniform: no strata: each anchor's active set is a uniform random subset of its
            candidates, as many as HANS's counts, and HANS is handed equal losses
            (``EQUAL_LOSSES``: every gate opens), the random-subset baseline.
        ratios: the strata's category shares (fractions keyed hard / inter / easy).
        world: data-parallel ranks: each call's anchors are every rank's (global negatives,
            ``world.gather_views``), and HANS reads the losses averaged over the ranks.
        hardness: what the strata rank: ``"similarity"`` or ``"progcl"`` (p(true negative)
            x similarity, the mixture fitted at each refresh: edgegcl.contrast.falseneg).
        negative_weight: ``"none"``, ``"progcl"`` (ProGCL-weight: each negative's exp over
            the anchor's mean of B = p(true negative) x similarity) or ``"progcl-mix"``
            (ProGCL-mix: ``mix_negatives`` synthesised negatives added to the denominator).
        mix_negatives: how many of each anchor's highest-B negatives ProGCL-mix pairs.
        false_negatives_from: the epoch (``hans.epoch``, epochs stepped) from which the
            estimate acts on the strata and the loss (ProGCL's epoch_start).

    Example:
        >>> import torch
        >>> contrast = ScheduledContrast(HANS(theta_max=0.6), tau=0.5)
        >>> h1 = torch.randn(32, 16, requires_grad=True)
        >>> out = contrast(h1, torch.randn(32, 16))
        >>> out.loss.backward()
        >>> events = contrast.step()  # end of the epoch: HANS reads the epoch's losses
        >>> contrast.scheduler.epoch
        1
    """

    def __init__(self, scheduler: NegativeScheduler | None = None, *,
                 tau: float = ContrastConfig.tau, refresh_every: int = 1,
                 stratify: str = "sampled", stratify_sample: int = ContrastConfig.stratify_sample,
                 logits: str = ContrastConfig.logits, seed: int = 0,
                 candidates: str = ContrastConfig.candidates, pick: str = ContrastConfig.pick,
                 uniform: bool = False, ratios: dict[str, float] | None = None,
                 world: ContrastWorld | None = None, hardness: str = ContrastConfig.hardness,
                 negative_weight: str = ContrastConfig.negative_weight,
                 mix_negatives: int = ContrastConfig.mix_negatives,
                 false_negatives_from: int = ContrastConfig.false_negatives_from) -> None:
        super().__init__()
        if tau <= 0 or refresh_every < 1:
            raise ValueError(f"need tau > 0 and refresh_every >= 1, got {tau=}, {refresh_every=}")
        if stratify not in STRATIFY or logits not in LOGITS or candidates not in CANDIDATES:
            raise ValueError(f"stratify must be one of {STRATIFY}, logits one of {LOGITS} and "
                             f"candidates one of {CANDIDATES}, got {stratify!r}, {logits!r}, "
                             f"{candidates!r}")
        self.scheduler = scheduler if scheduler is not None else HANS()
        if ratios is None:
            total = sum(self.scheduler.theta_cat.values())
            ratios = {c: self.scheduler.theta_cat[c] / total for c in CATEGORIES}
        self.selector = NegativeSelector(ratios, refresh_every, stratify, stratify_sample, seed,
                                         pick, candidates, uniform=uniform, hardness=hardness)
        self.tau, self.logits, self.uniform, self.world = tau, logits, uniform, world
        if negative_weight not in NEGATIVE_WEIGHTS or mix_negatives < 1 or false_negatives_from < 0:
            raise ValueError(f"negative_weight must be one of {NEGATIVE_WEIGHTS}, mix_negatives "
                             f">= 1 and false_negatives_from >= 0, got {negative_weight!r}, "
                             f"{mix_negatives}, {false_negatives_from}")
        self.negative_weight = negative_weight
        self.mix_negatives = mix_negatives
        self.false_negatives_from = false_negatives_from
        self.calls = 0
        self.strata_device: torch.device | str = "cpu"
        """Where ``set_extra_state`` puts the kept strata (the Trainer's device)."""
        self.last_epoch: EpochLoss | None = None
        """The means HANS read at the last ``step()``."""
        self._epoch: list[tuple[Tensor, dict[str, float], int]] = []

    @classmethod
    def from_config(cls, schedule: ScheduleConfig, contrast: ContrastConfig, *, epochs: int,
                    hans: HANSConfig | None = None, refresh_every: int = 1, seed: int = 0,
                    world: ContrastWorld | None = None) -> ScheduledContrast:
        """The contrast of a run of ``epochs`` epochs: its scheduler (``ScheduleConfig.build``,
        with HANS's gate ``hans``), and its selection as the scheduler wants it (the
        baselines rank nothing)."""
        name = schedule.scheduler
        contrast.check_with(name)
        scheduler = schedule.build(epochs, hans)
        ranks = scheduler.ranks_candidates
        return cls(scheduler, tau=contrast.tau, refresh_every=refresh_every,
                   stratify=contrast.resolved_stratify(name),
                   stratify_sample=contrast.stratify_sample, logits=contrast.logits, seed=seed,
                   candidates=contrast.candidates, pick=contrast.pick if ranks else "random",
                   uniform=not ranks, ratios=schedule.ratio_map(), world=world,
                   hardness=contrast.hardness if ranks else "similarity",
                   negative_weight=contrast.negative_weight,
                   mix_negatives=contrast.mix_negatives,
                   false_negatives_from=contrast.false_negatives_from)

    def forward(self, h1: Tensor, h2: Tensor, *, step: int | None = None,
                clock: PhaseClock | None = None) -> LossOutput:
        """The loss of anchors ``h1[i]`` / ``h2[i]`` (row i of both views is one node), with
        ``.loss`` to backpropagate and ``.category`` the per-category parts (NaN once HANS is
        saturated and they are not computed). ``step`` numbers the selector's refreshes
        (default: the count of calls); ``clock`` times the phases (edgegcl.phases)."""
        if h1.dim() != 2 or h1.shape != h2.shape:
            raise ValueError(f"need two [B, D] projections of equal shape, got "
                             f"{tuple(h1.shape)} and {tuple(h2.shape)}")
        self.calls += 1
        anchors = h1.size(0)  # this rank's: the weight of its losses in the epoch's means
        if self.world is not None:
            h1, h2 = self.world.gather_views(h1, h2)
        num_anchors = h1.size(0)
        path = choose_logits(self.logits, self.selector.stratify,
                             self.selector.touched(num_anchors, self.scheduler),
                             num_candidates(num_anchors, self.selector.candidates))
        sims = (pair_similarities if path == "pairs" else similarities)(
            h1, h2, self.tau, self.selector.candidates)
        if clock is not None:
            clock.mark("similarities")
        estimate = self.scheduler.epoch >= self.false_negatives_from
        active = self.selector.get(sims, self.scheduler, self.calls if step is None else step,
                                   estimate=estimate, compact=self.negative_weight == "none")
        if clock is not None:
            clock.mark("strata")
        weighting = self._weighting(sims) if estimate else PLAIN
        out = scheduled_info_nce(sims, active, self.scheduler.category_loss, weighting)
        if clock is not None:
            clock.mark("loss forward")
        self._epoch.append((out.loss.detach(), out.category, anchors))
        return out

    def _weighting(self, sims: AnchorSimilarities) -> Plain:
        """What the denominator does with this step's negatives (``negative_weight``): plain,
        or ProGCL's B = p(true negative) x similarity weighing them (``"progcl"``) or mixing
        them (``"progcl-mix"``), B from the Beta mixture fitted to the first anchors'
        similarities with every ``C / 256``-th candidate (a fixed sample: nothing random, so
        a resumed run weighs as the uninterrupted one)."""
        if self.negative_weight == "none":
            return PLAIN
        block = sims.candidate_rows(0)(0, fit_rows(sims.num_anchors))
        cols = torch.arange(0, block.size(1), max(1, block.size(1) // 256), device=block.device)
        weigh = true_negative_hardness(block[:, cols], sims.tau)
        if self.negative_weight == "progcl-mix":
            return ProGCLMix(weigh, self.mix_negatives)
        return ProGCLWeight(weigh)

    def epoch_loss(self) -> EpochLoss:
        """The loss and per-category losses of the calls since the last ``step()``, each the
        anchor-weighted mean (one call: its own values), over every rank with a ``world``."""
        if not self._epoch:
            raise RuntimeError("step() before any forward call: contrast a batch first")
        if len(self._epoch) == 1 and self.world is None:
            loss, category, _ = self._epoch[0]
            return EpochLoss(loss.item(), dict(category))
        anchors, loss = 0, 0.0
        sums = dict.fromkeys(CATEGORIES, 0.0)
        for value, category, b in self._epoch:
            loss += value.item() * b
            anchors += b
            for c in CATEGORIES:
                sums[c] += category[c] * b
        means = {c: v / anchors for c, v in sums.items()}
        if self.world is None:
            return EpochLoss(loss / anchors, means)
        # one decision for every rank: the means over all ranks' anchors
        both = self.world.weighted_mean({**means, "_loss": loss / anchors}, anchors)
        return EpochLoss(both.pop("_loss"), both)

    def step(self) -> list[ScheduleEvent]:
        """End of an epoch: HANS steps on the epoch's anchor-weighted mean per-category losses
        (``epoch_loss``, kept as ``last_epoch``; equal losses with ``uniform``) and returns its
        events (Algorithm 1)."""
        self.last_epoch = self.epoch_loss()
        self._epoch = []
        reads = self.scheduler.reads_losses and not self.uniform
        return self.scheduler.step(self.last_epoch.category if reads else EQUAL_LOSSES)

    def get_extra_state(self) -> dict[str, Any]:
        """HANS's state, the selector's kept strata and stream, and the count of calls, taken
        between epochs: the module has no parameters, so this is all ``state_dict()`` holds
        (under torch's ``_extra_state`` key)."""
        return {"hans": self.scheduler.state_dict(), "selector": self.selector.state_dict(),
                "calls": self.calls}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore a ``get_extra_state()``; the kept strata go to ``strata_device``."""
        self.scheduler.load_state_dict(state["hans"])
        self.selector.load_state_dict(state["selector"], self.strata_device)
        self.calls = int(state.get("calls", 0))
        self._epoch = []

