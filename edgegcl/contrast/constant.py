"""``--scheduler constant``: a uniform random subset of theta_max of the candidates from the
first epoch, with no pace at all: the ablation of HANS's growing budget (does starting with
few negatives and adding more matter, or only how many are used?)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgegcl.contrast.baselines import RandomSubset
from edgegcl.contrast.scheduler import register

if TYPE_CHECKING:
    from edgegcl.contrast.hans import HANSConfig

__all__ = ["ConstantSubset"]


@register
class ConstantSubset(RandomSubset):
    """theta_max of every anchor's candidates from epoch 1 (saturated at once), drawn
    uniformly and redrawn every ``swap_every`` epochs, as the random subset once saturated.

    Example:
        >>> from edgegcl.contrast.hans import HANSConfig
        >>> s = ConstantSubset.from_config(HANSConfig(theta_max=0.2), epochs=100)
        >>> s.saturated, round(s.used(), 3)
        (True, 0.2)
    """

    name = "constant"
    unused_settings = ("gate", "category_loss", "gamma", "e", "pace", "reach", "T_init", "b",
                       "c_cat", "eta_0", "floor")
    who = "the constant subset has"

    @classmethod
    def from_config(cls, cfg: HANSConfig, epochs: int | None = None) -> ConstantSubset:
        ratios = cfg.ratio_map()
        full = cfg.theta_max > 0  # theta_max = 0: the bootstrap share, as every scheduler
        return cls(cfg.theta_max, {c: r * (cfg.theta_max or 1.0) for c, r in ratios.items()},
                   T_init=0, T_int=cfg.T_int, e=1, eta_0=1.0 if full else cfg.eta_0,
                   floor=0.0, swap_every=cfg.swap_every or None)
