"""The baselines HANS is measured against, as members of the scheduler family.

- ``random`` (``RandomSubset``): as many negatives as HANS's pace gives with every gate open
  (it reads no losses: its gate is always fed equal ones, Eq. 7 opens, Eq. 8 weighs the
  categories alike), each anchor's active set a uniform random subset of its candidates.
- ``none`` (``AllNegatives``): every candidate from epoch 1, GRACE's contrast in the same
  code; no schedule at all.

Both keep HANS's bookkeeping (eta, events, swaps, ``state_dict``), so their runs resume and
log as HANS's do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from edgegcl.contrast.hans import EQUAL_LOSSES, HANS, HANSEvent
from edgegcl.contrast.scheduler import register

if TYPE_CHECKING:
    from edgegcl.contrast.hans import HANSConfig

__all__ = ["AllNegatives", "RandomSubset"]


@register
class RandomSubset(HANS):
    """HANS's pace with every gate open, and a uniform random subset of the candidates.

    Example:
        >>> from edgegcl.contrast.hans import HANSConfig
        >>> s = RandomSubset.from_config(HANSConfig(theta_max=0.2), epochs=50)
        >>> for _ in range(49):
        ...     _ = s.step({"hard": 9.0, "inter": 0.1, "easy": 3.0})  # losses are not read
        >>> s.saturated, s.saturated_at
        (True, 30)
    """

    name = "random"
    ranks_candidates = False
    reads_losses = False
    unused_settings = ("gate", "category_loss", "gamma", "e")
    who = "the random subset has"

    def step(self, losses: Mapping[str, float]) -> list[HANSEvent]:
        return super().step(EQUAL_LOSSES)


@register
class AllNegatives(HANS):
    """Every candidate a negative from epoch 1 (a HANS saturated at theta_max = 1).

    Example:
        >>> from edgegcl.contrast.hans import HANSConfig
        >>> s = AllNegatives.from_config(HANSConfig())
        >>> s.saturated, s.counts(10)
        (True, {'hard': 3, 'inter': 5, 'easy': 2})
    """

    name = "none"
    ranks_candidates = False
    reads_losses = False
    who = ""

    @classmethod
    def from_config(cls, cfg: HANSConfig, epochs: int | None = None) -> AllNegatives:
        return cls(1.0, cfg.ratio_map(), T_init=cfg.T_init, T_int=cfg.T_int, e=cfg.e,
                   gamma=cfg.gamma, b=cfg.b, c_cat=dict(cfg.c_cat), eta_0=1.0, floor=cfg.floor)

    @classmethod
    def unused(cls, cfg: HANSConfig) -> tuple[str, ...]:
        return tuple(name for name in cfg.values() if name != "scheduler")

    def step(self, losses: Mapping[str, float]) -> list[HANSEvent]:
        return super().step(EQUAL_LOSSES)
