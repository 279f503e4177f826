"""``--scheduler constant``: a uniform random subset of theta_max of the candidates from the
first epoch, with no pace at all: the ablation of HANS's growing budget (does starting with
few negatives and adding more matter, or only how many are used?)."""

from __future__ import annotations

from edgegcl.config import Section
from edgegcl.contrast.scheduler import NegativeScheduler, ScheduleConfig, register

__all__ = ["ConstantSubset"]


@register
class ConstantSubset(NegativeScheduler):
    """theta_max of every anchor's candidates from epoch 1 (saturated at once), drawn
    uniformly and redrawn every ``swap_every`` epochs (T_int when 0), as the random subset
    once saturated.

    Example:
        >>> s = ConstantSubset.from_config(ScheduleConfig(theta_max=0.2), epochs=100)
        >>> s.saturated, round(s.used(), 3)
        (True, 0.2)
        >>> [s.step({}) and s.draw for _ in range(20)][-1]  # a swap every T_int = 10 epochs
        2
    """

    name = "constant"
    unused_settings = ("gate", "category_loss", "gamma", "e", "pace", "reach", "T_init", "b",
                       "c_cat", "eta_0", "floor")
    who = "the constant subset has"

    @classmethod
    def from_config(cls, cfg: ScheduleConfig, epochs: int | None = None,
                    hans: Section | None = None) -> ConstantSubset:
        full = cfg.theta_max > 0  # theta_max = 0: the bootstrap share, as every scheduler
        scheduler = cls(cfg.theta_max, cfg.theta_cat(), eta_0=1.0 if full else cfg.eta_0,
                        floor=0.0, swap_every=cfg.swap_every or cfg.T_int)
        if full:  # saturated from the start: its swaps count from epoch 0
            scheduler.saturated_at = 0
        return scheduler
