"""HANS: the Hardness-Aware Negative Scheduler (paper, Sec. "HANS" and Algorithm 1).

A member of the scheduler family (edgegcl.contrast.scheduler): the pace of
edgegcl.contrast.pace, whose gate HANS opens only when the per-category losses stall (Eq. 7),
stepping each category by its loss share (Eq. 8). Shaped like ``torch.optim.lr_scheduler``:
call ``step(losses)`` once per epoch with that epoch's per-category losses; read
``counts(|N_i|)`` for how many negatives of each category every anchor uses. HANS knows
nothing of tensors or autograd: its inputs and outputs are plain numbers.

The class's defaults are the paper's printed values (T_init 60, T_int 20, e 10, b 0.05, a
fixed pace); ``edgegcl train``'s own defaults, chosen by measurement, are the ``[schedule]``
section's (edgegcl.contrast.scheduler.ScheduleConfig) and the ``[hans]`` section's
(``HANSConfig``: the gate).

Choices where the paper leaves room (also in docs/hans.md; the pace's in
edgegcl.contrast.pace):
- The gate (Eq. 7) compares window sums of e epochs. ``gate="any"`` (Algorithm 1, line 10)
  opens when any category's loss failed to improve by 1 - gamma; ``gate="total"`` reads the
  sum of the three categories' losses (one signal, as the authors' NegAmplify gates on its
  total loss), so the category that changes least (easy, whose negatives barely move) does
  not hold the gate open on its own.
- Loss shares w_cat use the current window sums; if any is <= 0 or not finite, the nominal
  weights [1, 1, 1/2] / 2.5 are used (Eq. 8).
- theta_max = 0 is the bootstrap share only: every category keeps eta_0 of its full share
  (ratio x |N_i|) and nothing ever grows or swaps (the paper's theta_max = 0 table row).
- ``category_loss`` says which per-category loss the trainer should hand to ``step``
  (edgegcl.contrast.loss): ``"sum"``, InfoNCE over the category's active negatives (the
  paper's; it grows with their number), or ``"mean"``, InfoNCE against their mean
  exp-similarity, which more negatives of the same hardness leave unchanged.
"""


from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from edgegcl.config import Section, choices, option
from edgegcl.contrast.pace import PacedScheduler
from edgegcl.contrast.scheduler import CATEGORIES, ScheduleConfig, register

__all__ = ["CATEGORIES", "EQUAL_LOSSES", "HANS", "HANSConfig"]

NOMINAL_WEIGHTS = {"hard": 1.0, "inter": 1.0, "easy": 0.5}
Gate = Literal["total", "any"]
"""What the gate (Eq. 7) reads: the sum of the category losses, or each category (opening
when any one has stalled: Algorithm 1, line 10, the paper's)."""
GATES: tuple[str, ...] = choices(Gate)
CategoryLoss = Literal["mean", "sum"]
"""What the per-category losses HANS reads are: InfoNCE against the category's mean
exp-similarity (``mean``), or over its active negatives (``sum``, the paper's)."""
CATEGORY_LOSSES: tuple[str, ...] = choices(CategoryLoss)
EQUAL_LOSSES = dict.fromkeys(CATEGORIES, 1.0)
"""Equal per-category losses: what a scheduler that reads none is handed."""


@dataclass(frozen=True)
class HANSConfig(Section):
    """HANS's loss gate (the ``[hans]`` section; Algorithm 1's names): what only
    ``--scheduler hans`` reads. The budget, ratios and pace every scheduler follows are the
    ``[schedule]`` section's (edgegcl.contrast.scheduler.ScheduleConfig).

    Example:
        >>> schedule = ScheduleConfig(scheduler="hans", theta_max=0.6)
        >>> HANSConfig(e=2, gate="any").build(schedule, epochs=100).e
        2
    """

    TITLE = "HANS's loss gate (Algorithm 1; the paper's names; with --scheduler hans)"
    e: int = option(5, "loss-gate window: the last e epochs against the e before (Eq. 7)",
                    at_least=1, at_most=1_000_000)
    gamma: float = option(0.99, "loss-gate factor: grow when the loss fell by less than "
                          "1 - gamma (Eq. 7)", above=0.0)
    gate: Gate = option("total", "what the loss gate (Eq. 7) reads: total (the sum of the "
                        "category losses, one signal) or any (opens when any category stalled, "
                        "Algorithm 1 as printed)")
    category_loss: CategoryLoss = option(
        "mean", "the per-category losses the gate and the step sizes read: mean (InfoNCE "
        "against the category's mean exp-similarity: more negatives of the same hardness leave "
        "it unchanged) or sum (InfoNCE over its active negatives, the paper's: it grows as "
        "negatives are added)")

    def build(self, schedule: ScheduleConfig, epochs: int | None = None) -> HANS:
        """HANS under ``schedule`` and this gate, for a run of ``epochs`` epochs."""
        return HANS.from_config(schedule, epochs, self)


@register
class HANS(PacedScheduler):
    """The scheduler of eta_t^cat, the used fraction of each category's budget theta_cat.

    Args (Algorithm 1's names; the budget and the pace as edgegcl.contrast.pace's
    ``PacedScheduler``: theta_max, theta_cat, T_init, T_int, b, c_cat, eta_0, floor,
    swap_every, T_reach, epochs; every default the ``[schedule]`` and ``[hans]`` sections',
    as ``--scheduler hans``'s):
        e: loss-gate window (Eq. 7): the last e epochs against the e before.
        gamma: loss-gate factor (Eq. 7).
        category_loss: ``"mean"`` or ``"sum"``: what the losses given to ``step`` are
            (CATEGORY_LOSSES); HANS only records the choice for whoever computes them.
        gate: ``"any"`` (a category that stalled opens it) or ``"total"`` (the categories'
            summed loss stalled) (GATES).

    Example:
        >>> hans = HANS(theta_max=0.6, T_init=2, T_int=2, e=1, T_reach=8, gate="any")
        >>> for epoch in range(8):  # once per epoch, with that epoch's per-category losses
        ...     events = hans.step({"hard": 2.0, "inter": 1.5, "easy": 1.0})
        >>> hans.saturated, round(hans.used(), 2)
        (True, 0.6)
    """

    name = "hans"
    who = "HANS has"
    ranks_candidates = True
    reads_losses = True

    def __init__(self, theta_max: float = ScheduleConfig.theta_max,
                 theta_cat: Mapping[str, float] | None = None, *,
                 T_init: int = ScheduleConfig.T_init, T_int: int = ScheduleConfig.T_int,
                 e: int = HANSConfig.e, gamma: float = HANSConfig.gamma,
                 b: float = ScheduleConfig.b, c_cat: Mapping[str, float] | None = None,
                 eta_0: float = ScheduleConfig.eta_0, floor: float = ScheduleConfig.floor,
                 swap_every: int | None = None, T_reach: int | None = None,
                 epochs: int | None = None, category_loss: str = HANSConfig.category_loss,
                 gate: str = HANSConfig.gate) -> None:
        if gate not in GATES:
            raise ValueError(f"gate must be one of {', '.join(GATES)}, got {gate!r}")
        if category_loss not in CATEGORY_LOSSES:
            raise ValueError(f"category_loss must be one of {', '.join(CATEGORY_LOSSES)}, got "
                             f"{category_loss!r}")
        if e < 1:
            raise ValueError("e must be >= 1")
        super().__init__(theta_max, theta_cat, T_init=T_init, T_int=T_int, b=b, c_cat=c_cat,
                         eta_0=eta_0, floor=floor, swap_every=swap_every, T_reach=T_reach,
                         epochs=epochs)
        self.e, self.gamma = e, gamma
        self.category_loss, self.gate = category_loss, gate
        self.history: dict[str, list[float]] = {c: [] for c in CATEGORIES}

    @classmethod
    def from_config(cls, cfg: ScheduleConfig, epochs: int | None = None,
                    hans: Section | None = None) -> HANS:
        """HANS under ``cfg`` and ``hans`` (a ``HANSConfig``; default its defaults): caps
        theta_cat = ratio x theta_max; the deadline pace for ``epochs`` (None: none)."""
        h = hans if isinstance(hans, HANSConfig) else HANSConfig()
        return cls(cfg.theta_max, cfg.theta_cat(), T_init=cfg.T_init, T_int=cfg.T_int, e=h.e,
                   gamma=h.gamma, b=cfg.b, c_cat=dict(cfg.c_cat), eta_0=cfg.eta_0,
                   floor=cfg.floor, swap_every=cfg.swap_every or None,
                   T_reach=None if epochs is None else cfg.reach_epoch(epochs),
                   category_loss=h.category_loss, gate=h.gate)

    def _observe(self, losses: Mapping[str, float]) -> None:
        for c in CATEGORIES:
            self.history[c].append(float(losses[c]))

    def _windows(self) -> tuple[dict[str, float], dict[str, float]] | None:
        """(L_curr, L_prev): sums of the last e and the e before (Algorithm 1, line 9)."""
        if len(self.history["hard"]) < 2 * self.e:
            return None
        e = self.e
        curr = {c: sum(self.history[c][-e:]) for c in CATEGORIES}
        prev = {c: sum(self.history[c][-2 * e:-e]) for c in CATEGORIES}
        return curr, prev

    def _gate(self, t: int) -> tuple[dict[str, float], str] | None:
        """The loss gate (Eq. 7) on the windows of e epochs, and the loss shares (Eq. 8)."""
        windows = self._windows()
        if windows is None:
            self._log(t, "all", 0.0, f"gate skipped: fewer than 2e = {2 * self.e} epochs of losses")
            return None
        curr, prev = windows
        if self.gate == "total":
            now, before = sum(curr.values()), sum(prev.values())
            stalled = ["total"] if now >= self.gamma * before else []  # Eq. 7 on the sum
        else:
            stalled = [c for c in CATEGORIES if curr[c] >= self.gamma * prev[c]]  # Eq. 7
        if not stalled:
            change = ", ".join(f"{c} {curr[c] / prev[c] - 1:+.1%}" if prev[c] else c
                               for c in CATEGORIES)
            what = "the total" if self.gate == "total" else "every category"
            self._log(t, "all", 0.0, f"gate closed: {what} improved by >= "
                                     f"{1 - self.gamma:.0%} ({change})")
            return None
        return self.loss_weights(curr), (f"gate open ({', '.join(stalled)} not improved by "
                                         f">= {1 - self.gamma:.0%})")

    @staticmethod
    def loss_weights(window: Mapping[str, float]) -> dict[str, float]:
        """w_cat = L_cat / L_total; nominal [1, 1, 1/2] normalised if any L_cat <= 0 (Eq. 8)."""
        if all(math.isfinite(window[c]) and window[c] > 0 for c in CATEGORIES):
            total = sum(window[c] for c in CATEGORIES)
            return {c: window[c] / total for c in CATEGORIES}
        total = sum(NOMINAL_WEIGHTS.values())
        return {c: NOMINAL_WEIGHTS[c] / total for c in CATEGORIES}
