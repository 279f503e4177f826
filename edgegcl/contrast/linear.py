"""``--scheduler linear``: a fixed schedule that reads no losses and makes no decisions: every
category's eta rises in a straight line, epoch by epoch, from eta_0 after the T_init bootstrap
to 1 at the deadline (``reach`` x the epochs), and theta_max stays in use after. A uniform
random subset of the candidates, as the random subset's: the ablation of HANS's steps (is a
smooth ramp as good as growing one category per decision?)."""

from __future__ import annotations

import math

from edgegcl.config import Section
from edgegcl.contrast.scheduler import CATEGORIES, NegativeScheduler, ScheduleConfig, register

__all__ = ["LinearRamp"]


@register
class LinearRamp(NegativeScheduler):
    """eta_t = eta_0 + (1 - eta_0) (t - T_init) / (T_reach - T_init) in every category,
    for T_init < t <= T_reach; saturated from T_reach on, then swapping every ``swap_every``
    epochs.

    Example:
        >>> s = LinearRamp.from_config(ScheduleConfig(theta_max=0.2, T_init=10), epochs=100)
        >>> for _ in range(25):
        ...     _ = s.step({})
        >>> round(s.eta["hard"], 3), s.saturated_at  # halfway from epoch 10 to 40
        (0.525, None)
    """

    name = "linear"
    unused_settings = ("gate", "category_loss", "gamma", "e", "pace", "b", "c_cat", "floor")
    who = "the linear ramp has"

    def __init__(self, theta_max: float, theta_cat: dict[str, float], *, T_init: int,
                 T_reach: int, eta_0: float = 0.05, swap_every: int = 1) -> None:
        super().__init__(theta_max, theta_cat, eta_0=eta_0, floor=0.0, swap_every=swap_every)
        self.T_init, self.T_reach = T_init, max(T_reach, T_init + 1)

    @classmethod
    def from_config(cls, cfg: ScheduleConfig, epochs: int | None = None,
                    hans: Section | None = None) -> LinearRamp:
        # the ramp ends at reach x epochs whatever --pace says (it has no other pace)
        reach = cfg.T_init + 1 if epochs is None else math.ceil(cfg.reach * epochs - 1e-9)
        return cls(cfg.theta_max, cfg.theta_cat(), T_init=cfg.T_init, T_reach=reach,
                   eta_0=cfg.eta_0, swap_every=cfg.swap_every or cfg.T_int)

    def _waiting(self, t: int) -> bool:
        return t <= self.T_init

    def _decide(self, t: int) -> None:
        share = min(1.0, (t - self.T_init) / (self.T_reach - self.T_init))
        for c in CATEGORIES:
            target = self.eta_0 + (1.0 - self.eta_0) * share
            if target > self.eta[c]:
                self._apply(t, c, target - self.eta[c], "the ramp")
        self._saturate(t)
