"""The pace: a scheduler that grows eta one category at a time at decision epochs (Eqs. 9-10),
after a bootstrap of T_init epochs, every T_int epochs, until theta_max is in use.

``PacedScheduler`` is what HANS and the random-subset baseline share; they differ in the gate
(``_gate``): HANS opens it when the losses stall (Eq. 7) and weighs the categories by their
loss shares (Eq. 8); the baseline reads no losses, so every gate opens with equal weights.

Choices where the paper leaves room (also in docs/hans.md):
- One category moves per open gate: round-robin hard -> inter -> easy over categories below
  their cap, with hard preference: easy's turn goes to hard whenever easy's step would bring it
  level with or past hard while hard is below its cap. So hard always fills before easy.
- Per-category floors (default 0.05, the bootstrap eta_0) are enforced before every update.
- After saturation (sum eta theta_cat >= theta_max) eta no longer moves; every ``swap_every``
  epochs the active subsets are redrawn (stochastic swapping).
- The deadline pace: with ``T_reach`` set, b and c_cat of Eq. 9 are rescaled at every decision
  so that the budget left fills over the decisions left before epoch ``T_reach`` (a category
  with an average loss share takes the even step; a larger share a larger one, up to c_cat / b
  times it), and the last decision at or before ``T_reach`` fills every category whatever the
  gate says. Without it (the paper's fixed pace) b and c_cat are used as given, and a short run
  may never reach theta_max.
"""

from __future__ import annotations

from collections.abc import Mapping

from edgegcl.contrast.scheduler import (CATEGORIES, EPS, NegativeScheduler, ScheduleConfig,
                                        deadline_epoch)

__all__ = ["EQUAL_WEIGHTS", "PacedScheduler"]

EQUAL_WEIGHTS = dict.fromkeys(CATEGORIES, 1.0 / 3.0)
"""Loss shares w_cat when the losses are not read: every category alike (Eq. 8 on equal
losses)."""


class PacedScheduler(NegativeScheduler):
    """Eta grown at decisions by the pace (Eq. 9), one category per open gate.

    Args (besides ``NegativeScheduler``'s; Algorithm 1's names; every default the ``[schedule]``
    section's, as the flags'):
        T_init: bootstrap epochs at ``eta_0``.
        T_int: epochs between decisions.
        b: base step size (Eq. 9).
        c_cat: per-step caps on eta's growth, keyed by category.
        swap_every: epochs between stochastic swaps after saturation (default T_int).
        T_reach: the epoch by which theta_max is in use (the deadline pace; see the module);
            None: the paper's fixed pace, b and c_cat as given.
        epochs: the run's length, for the deadline pace at ``--reach``'s default when no
            ``T_reach`` is given (what ``edgegcl train --epochs N`` runs); None: the fixed pace.
    """

    def __init__(self, theta_max: float = ScheduleConfig.theta_max,
                 theta_cat: Mapping[str, float] | None = None, *,
                 T_init: int = ScheduleConfig.T_init, T_int: int = ScheduleConfig.T_int,
                 b: float = ScheduleConfig.b, c_cat: Mapping[str, float] | None = None,
                 eta_0: float = ScheduleConfig.eta_0, floor: float = ScheduleConfig.floor,
                 swap_every: int | None = None, T_reach: int | None = None,
                 epochs: int | None = None) -> None:
        if T_init < 0 or T_int < 1:
            raise ValueError("T_int must be >= 1 and T_init >= 0")
        if T_reach is None and epochs is not None:
            T_reach = deadline_epoch(ScheduleConfig.reach, epochs)
        super().__init__(theta_max, theta_cat, eta_0=eta_0, floor=floor,
                         swap_every=swap_every if swap_every is not None else T_int)
        self.T_init, self.T_int = T_init, T_int
        self.b = b
        self.c_cat = dict(c_cat) if c_cat is not None else ScheduleConfig.default("c_cat")
        self.T_reach = T_reach
        self._next = 0

    def _waiting(self, t: int) -> bool:
        return t <= self.T_init

    def _decide(self, t: int) -> None:
        if t % self.T_int == 0:
            self._update(t)

    def _gate(self, t: int) -> tuple[dict[str, float], str] | None:
        """At decision ``t``: the loss shares w_cat and why the gate is open, or None when it
        stays closed (its reason logged). Without losses to read: always open, equal
        shares."""
        return dict(EQUAL_WEIGHTS), "every gate open (no losses read)"

    def decisions_left(self, t: int) -> int | None:
        """Decision epochs from ``t`` (a decision epoch) to ``T_reach``, both included; None
        with the fixed pace."""
        if self.T_reach is None:
            return None
        return max(0, self.T_reach // self.T_int - t // self.T_int + 1)

    def aim(self, T_reach: int | None, epochs: int) -> None:
        """The deadline pace re-aimed at a seed cut to ``epochs`` epochs: theta_max in use by
        ``T_reach``, or from now on when no decision epoch is left within them (a seed shorter
        than the bootstrap T_init still trains at the budget it was given). Decisions already
        made stand; the fixed pace (``T_reach`` None) is left as the paper's."""
        if T_reach is None or self.T_reach is None:
            return
        self.T_reach = T_reach
        first = max(self.epoch + 1, self.T_init + 1)  # the first decision epoch still to come
        first += -first % self.T_int
        if first > epochs and not self.saturated:
            self._fill(self.epoch, f"deadline: no decision within the seed's {epochs} epochs")

    def _fill(self, t: int, why: str) -> None:
        """Every category to its cap: theta_max in use from epoch ``t``."""
        for c in CATEGORIES:
            if self.eta[c] < 1.0 - EPS:
                self._apply(t, c, 1.0 - self.eta[c], why)
        self._saturate(t)

    def _update(self, t: int) -> None:
        left = self.decisions_left(t)
        if left is not None and left <= 1:  # the pace's deadline: fill whatever is left
            self._fill(t, f"deadline: theta_max in use by T_reach = {self.T_reach}")
            return
        opened = self._gate(t)
        if opened is None:
            return
        weights, why = opened
        for c in CATEGORIES:
            if self.eta[c] < self.floor:
                self._apply(t, c, self.floor - self.eta[c], "floor")
        cat, delta, bound = self._choose(weights, left)
        if delta <= 0.0:
            self._log(t, cat, 0.0, "gate open but no budget left to grow")
            return
        self._apply(t, cat, delta, f"{why}; step bound by {bound}")
        self._saturate(t)

    def pace_scale(self, cat: str, weights: Mapping[str, float], left: int | None) -> float:
        """The factor b and c_cat are multiplied by at this decision: 1 with the fixed pace;
        with ``T_reach``, the one that makes a category of average loss share among those
        still growing step (1 - eta^cat) n / (left - 1 + n): its budget left spread evenly
        over its turns (n categories grow in turn over the ``left - 1`` decisions before the
        last, which fills every category)."""
        if left is None:
            return 1.0
        growing = [c for c in CATEGORIES if self.eta[c] < 1.0 - EPS]
        n = len(growing)
        even = (1.0 - self.eta[cat]) * n / (left - 1 + n)
        mean_w = sum(weights[c] for c in growing) / n
        return even / (self.b * mean_w) if mean_w > 0 else even / self.b

    def step_size(self, cat: str, weights: Mapping[str, float], left: int | None = None
                  ) -> tuple[float, str]:
        """Delta eta^cat = min(b w_cat, c_cat, 1 - eta^cat, global budget left / theta_cat)
        (Eq. 9), b and c_cat scaled by ``pace_scale`` (``left``: decisions left to T_reach).

        Returns the step and the name of the binding term (u1..u4).
        """
        scale = self.pace_scale(cat, weights, left)
        terms = {
            "u1 (loss-proportional b*w)": scale * self.b * weights[cat],
            "u2 (per-step cap c_cat)": scale * self.c_cat[cat],
            "u3 (category budget left)": 1.0 - self.eta[cat],
            "u4 (global budget left)": (self.theta_max - self.used()) / self.theta_cat[cat],
        }
        bound = min(terms, key=terms.__getitem__)
        return max(terms[bound], 0.0), bound

    def _choose(self, weights: Mapping[str, float], left: int | None = None
                ) -> tuple[str, float, str]:
        """Round-robin hard -> inter -> easy over categories below cap, with hard preference."""
        open_cats = [CATEGORIES[(self._next + k) % 3] for k in range(3)]
        open_cats = [c for c in open_cats if self.eta[c] < 1.0 - EPS]
        cat = open_cats[0]
        delta, bound = self.step_size(cat, weights, left)
        if (cat == "easy" and self.eta["hard"] < 1.0 - EPS
                and self.eta["easy"] + delta >= self.eta["hard"] - EPS):
            cat = "hard"
            delta, bound = self.step_size(cat, weights, left)
        self._next = (CATEGORIES.index(cat) + 1) % 3
        return cat, delta, bound
