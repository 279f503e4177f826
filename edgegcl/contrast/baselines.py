"""The baselines HANS is measured against, as members of the scheduler family.

- ``random`` (``RandomSubset``): as many negatives as HANS's pace gives with every gate open
  (it reads no losses: every decision grows, the categories weighed alike), each anchor's
  active set a uniform random subset of its candidates.
- ``none`` (``AllNegatives``): every candidate from epoch 1, GRACE's contrast in the same
  code; no schedule at all.

Both keep the family's bookkeeping (eta, events, swaps, ``state_dict``), so their runs resume
and log as HANS's do.
"""

from __future__ import annotations

from edgegcl.config import Section
from edgegcl.contrast.pace import PacedScheduler
from edgegcl.contrast.scheduler import NegativeScheduler, ScheduleConfig, register

__all__ = ["AllNegatives", "RandomSubset"]

GATE_SETTINGS = ("gate", "category_loss", "gamma", "e")
"""HANS's gate (the ``[hans]`` section): what a scheduler that reads no losses leaves unread."""


@register
class RandomSubset(PacedScheduler):
    """HANS's pace with every gate open, and a uniform random subset of the candidates.

    Example:
        >>> s = RandomSubset.from_config(ScheduleConfig(theta_max=0.2), epochs=50)
        >>> for _ in range(49):
        ...     _ = s.step({"hard": 9.0, "inter": 0.1, "easy": 3.0})  # losses are not read
        >>> s.saturated, s.saturated_at
        (True, 30)
    """

    name = "random"
    unused_settings = GATE_SETTINGS
    who = "the random subset has"

    @classmethod
    def from_config(cls, cfg: ScheduleConfig, epochs: int | None = None,
                    hans: Section | None = None) -> RandomSubset:
        return cls(cfg.theta_max, cfg.theta_cat(), T_init=cfg.T_init, T_int=cfg.T_int,
                   b=cfg.b, c_cat=dict(cfg.c_cat), eta_0=cfg.eta_0, floor=cfg.floor,
                   swap_every=cfg.swap_every or None,
                   T_reach=None if epochs is None else cfg.reach_epoch(epochs))


@register
class AllNegatives(NegativeScheduler):
    """Every candidate a negative from epoch 1 (saturated at theta_max = 1 from the start).

    Example:
        >>> s = AllNegatives.from_config(ScheduleConfig())
        >>> s.saturated, s.counts(10)
        (True, {'hard': 3, 'inter': 5, 'easy': 2})
    """

    name = "none"
    who = ""

    @classmethod
    def from_config(cls, cfg: ScheduleConfig, epochs: int | None = None,
                    hans: Section | None = None) -> AllNegatives:
        return cls(1.0, {c: r for c, r in cfg.ratio_map().items()}, eta_0=1.0,
                   floor=cfg.floor)

    @classmethod
    def unused(cls, cfg: ScheduleConfig, hans: Section | None = None) -> tuple[str, ...]:
        return (*(name for name in cfg.values() if name != "scheduler"), *GATE_SETTINGS)
