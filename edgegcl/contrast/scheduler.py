"""Negative schedulers as one family: the interface every member keeps, and the registry.

A negative scheduler decides, epoch by epoch, how many negatives of each hardness category
(hard / inter / easy) every anchor contrasts with, as ``torch.optim.lr_scheduler`` decides a
learning rate: ``step(losses)`` once per epoch, ``fractions()`` / ``counts(|N_i|)`` read by
the contrast, ``budget_share()``, ``events`` and ``state_dict()`` / ``load_state_dict()``.
Its class says what it needs of the contrast: ``ranks_candidates`` (hardness strata, or a
uniform subset of the candidates) and ``reads_losses`` (the per-category losses, or none), and
which ``[hans]`` settings it leaves unread (``unused_settings``); ``from_config`` builds it.

Members: ``hans`` (HANS, edgegcl.contrast.hans), ``random`` and ``none`` (the random-subset
and all-negatives baselines, edgegcl.contrast.baselines). A new member is a module with a
``@register``-ed subclass, and its module's name in ``MEMBERS`` below: ``--scheduler NAME``,
config files, the contrast, the profiler and the command line's checks follow from the class.

Example:
    >>> from edgegcl.contrast.hans import HANSConfig
    >>> sorted(scheduler_names())
    ['hans', 'none', 'random']
    >>> s = scheduler_class("random").from_config(HANSConfig(theta_max=0.3), epochs=100)
    >>> s.ranks_candidates, round(s.budget_share(), 3)
    (False, 0.05)
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from edgegcl.contrast.hans import HANSConfig, HANSEvent

__all__ = ["MEMBERS", "NegativeScheduler", "register", "scheduler_class", "scheduler_names"]

MEMBERS = ("edgegcl.contrast.hans", "edgegcl.contrast.baselines", "edgegcl.contrast.constant")
"""The modules whose ``@register``-ed classes are the schedulers ``--scheduler`` names."""

_REGISTRY: dict[str, type[NegativeScheduler]] = {}


class NegativeScheduler:
    """What the contrast, the trainer and the profiler read of a negative scheduler.

    Class attributes:
        name: ``--scheduler``'s value.
        ranks_candidates: whether the negatives are drawn from hardness strata (the contrast
            ranks the candidates) or as a uniform random subset of the candidates.
        reads_losses: whether ``step`` reads the per-category losses (else the contrast need
            not compute them).
        unused_settings: ``[hans]`` fields it never reads (refused on the command line).
        who: how a line about its schedule names it ("HANS has ..."); "" for one without a
            schedule.
    """

    name: ClassVar[str] = ""
    ranks_candidates: ClassVar[bool] = True
    reads_losses: ClassVar[bool] = True
    unused_settings: ClassVar[tuple[str, ...]] = ()
    who: ClassVar[str] = ""

    epoch: int
    draw: int
    eta: dict[str, float]
    events: list[HANSEvent]
    saturated_at: int | None

    @classmethod
    def from_config(cls: type[_S], cfg: HANSConfig, epochs: int | None = None) -> _S:
        """The scheduler of a run of ``epochs`` epochs (None: no deadline) under ``cfg``."""
        raise NotImplementedError

    @classmethod
    def unused(cls, cfg: HANSConfig) -> tuple[str, ...]:
        """The ``[hans]`` fields of ``cfg`` this scheduler never reads."""
        return cls.unused_settings

    @property
    def saturated(self) -> bool:
        raise NotImplementedError

    def step(self, losses: Mapping[str, float]) -> list[HANSEvent]:
        """End of an epoch with its per-category losses; returns the events it added."""
        raise NotImplementedError

    def fractions(self) -> dict[str, float]:
        """The fraction of |N_i| each category uses now."""
        raise NotImplementedError

    def counts(self, num_cand: int) -> dict[str, int]:
        """Negatives per anchor of each category out of ``num_cand`` candidates."""
        raise NotImplementedError

    def budget_share(self) -> float:
        """The share of the global budget in use, in [0, 1]."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        raise NotImplementedError


_S = TypeVar("_S", bound=NegativeScheduler)


def register(cls: type[_S]) -> type[_S]:
    """Class decorator: make ``cls`` the scheduler ``--scheduler cls.name`` builds."""
    if not cls.name or cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"a scheduler needs a new name, got {cls.name!r}")
    _REGISTRY[cls.name] = cls
    return cls


def _load() -> dict[str, type[NegativeScheduler]]:
    for module in MEMBERS:
        importlib.import_module(module)
    return _REGISTRY


def scheduler_names() -> tuple[str, ...]:
    """Every registered scheduler's name, in ``MEMBERS`` order."""
    return tuple(_load())


def scheduler_class(name: str) -> type[NegativeScheduler]:
    """The class ``--scheduler name`` builds; a ValueError naming the choices otherwise."""
    members = _load()
    if name not in members:
        raise ValueError(f"scheduler must be one of {', '.join(members)}, got {name!r}")
    return members[name]
