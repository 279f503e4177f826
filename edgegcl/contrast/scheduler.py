"""Negative schedulers as one family: the base every member derives from, its settings (the
``[schedule]`` section) and the registry.

A negative scheduler decides, epoch by epoch, how many negatives of each hardness category
(hard / inter / easy) every anchor contrasts with, as ``torch.optim.lr_scheduler`` decides a
learning rate: ``step(losses)`` once per epoch, ``fractions()`` / ``counts(|N_i|)`` read by
the contrast, ``budget_share()``, ``events``, ``draw`` (which random subset: it changes at a
swap) and ``state_dict()`` / ``load_state_dict()``. ``NegativeScheduler`` keeps all of that
(eta^cat of each category's cap theta_cat, the budget theta_max, the event log, the swaps once
saturated); a member says when and how eta moves (``_waiting``, ``_decide``, ``_observe``).
Its class says what it needs of the contrast: ``ranks_candidates`` (hardness strata, or a
uniform subset of the candidates) and ``reads_losses`` (the per-category losses, or none),
and which settings it leaves unread (``unused``); ``from_config`` builds it.

Members (``MEMBERS``): ``hans`` (HANS, edgegcl.contrast.hans: the pace of
edgegcl.contrast.pace with its loss gate), ``random`` and ``none`` (the random-subset and
all-negatives baselines, edgegcl.contrast.baselines), ``constant`` (edgegcl.contrast.constant).
A new member is a module with a ``@register``-ed subclass and its module's name in ``MEMBERS``:
``--scheduler NAME``, config files, the contrast, the profiler and the command line's checks
follow from the class. This module imports no member.

Example:
    >>> {"hans", "random", "none", "constant"} <= set(scheduler_names())
    True
    >>> s = ScheduleConfig(scheduler="random", theta_max=0.3).build(epochs=100)
    >>> s.ranks_candidates, round(s.budget_share(), 3)
    (False, 0.05)
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Literal, TypeVar

from edgegcl.config import Section, flag, flag_form, option
from edgegcl.errors import UsageError

__all__ = ["CATEGORIES", "MEMBERS", "NegativeScheduler", "ScheduleConfig", "ScheduleEvent",
           "register", "scheduler_class", "scheduler_names"]

MEMBERS = ("edgegcl.contrast.hans", "edgegcl.contrast.baselines", "edgegcl.contrast.constant",
           "edgegcl.contrast.linear")
"""The modules whose ``@register``-ed classes are the schedulers ``--scheduler`` names."""

CATEGORIES = ("hard", "inter", "easy")
RATIO_ORDER = ("easy", "hard", "inter")
"""The order ``ratios`` keeps its keys in (the paper's ratio table lists EASY, HARD, INTER)."""
CAP_ORDER = CATEGORIES
"""The order ``c_cat`` keeps its keys in: the order the pace grows the categories in."""
EPS = 1e-9

_REGISTRY: dict[str, type[NegativeScheduler]] = {}


@dataclass(frozen=True)
class ScheduleEvent:
    """One line of the event log: what changed (or was decided) at the end of an epoch."""

    epoch: int
    category: str
    delta_eta: float
    eta: float
    reason: str


def deadline_epoch(reach: float, epochs: int) -> int:
    """The epoch by which the deadline pace has theta_max in use: ceil(reach x epochs)."""
    return math.ceil(reach * epochs - 1e-9)


Pace = Literal["deadline", "fixed"]
"""``pace``: b and c_cat rescaled so that theta_max is in use by ``reach`` x the epochs, or
used as given (the paper's fixed pace)."""


@dataclass(frozen=True)
class ScheduleConfig(Section):
    """A run's negative schedule, whichever scheduler runs it (the ``[schedule]`` section;
    Algorithm 1's names). HANS's loss gate has a section of its own
    (edgegcl.contrast.hans.HANSConfig, ``[hans]``).

    Example:
        >>> s = ScheduleConfig(theta_max=0.6, ratios="easy=10,hard=40,inter=50",
        ...                    scheduler="hans").build(100)
        >>> round(s.theta_cat["hard"], 2), s.T_reach
        (0.24, 40)
    """

    TITLE = "the negative schedule: budget, ratios and pace (Algorithm 1; the paper's names)"
    scheduler: str = option(
        "random", "random: as many negatives as HANS's pace gives with every gate open, a "
        "uniform random subset of the candidates (measured as accurate as HANS's hardness or "
        "all negatives on Cora and CiteSeer, and the cheapest: docs/hans.md); hans: HANS's "
        "hardness strata, gate and loss-aware steps; none: every candidate (2B - 2 or B - 1 "
        "by --candidates) from epoch 1, the schedule's settings ignored "
        "(edgegcl.contrast.scheduler lists every member)")
    theta_max: float = option(0.1, "global negative budget theta_max: the largest fraction of "
                              "each anchor's candidates used (of 2B - 2, or B - 1 with "
                              "--candidates inter; under --objective edges, of --edge-pool "
                              "non-edges), in [0, 1]; 0: the bootstrap share eta_0 only, never "
                              "grown")
    ratios: dict[str, float] = option({"easy": 20.0, "hard": 30.0, "inter": 50.0},
                                      "category shares in percent, summing to 100 (flag: "
                                      "hard=30,inter=50,easy=20); theta_cat = "
                                      "share x theta_max",
                                      keys=RATIO_ORDER)
    pace: Pace = option("deadline", "how fast eta grows: deadline (b and c_cat rescaled at "
                        "every decision so that theta_max is in use by --reach x --epochs; the "
                        "last decision before then fills every category) or fixed (b and c_cat "
                        "as given, the paper's: a short run may never reach theta_max)")
    reach: float = option(0.4, "deadline pace: the fraction of --epochs by which theta_max is "
                          "in use, in (0, 1]", above=0.0, at_most=1.0)
    T_init: int = option(20, "bootstrap epochs at eta_0 before the first decision", at_least=0,
                         at_most=1_000_000)
    T_int: int = option(10, "epochs between decisions", at_least=1, at_most=1_000_000)
    b: float = option(0.05, "base step size of eta (Eq. 9)", above=0.0)
    c_cat: dict[str, float] = option({"hard": 0.05, "inter": 0.05, "easy": 0.025},
                                     "per-step caps c_cat on eta's growth (flag: "
                                     "hard=0.05,inter=0.05,easy=0.025)", keys=CAP_ORDER)
    eta_0: float = option(0.05, "eta of every category during the bootstrap", above=0.0,
                          at_most=1.0)
    floor: float = option(0.05, "least eta of a category", at_least=0.0, at_most=1.0)
    swap_every: int = option(0, "epochs between stochastic swaps once saturated (0: T_int)",
                             at_least=0, at_most=1_000_000)

    def check(self) -> None:
        try:
            kind = scheduler_class(self.scheduler)
        except ValueError as exc:
            raise UsageError(f"--{exc}") from None
        ratios = list(self.ratios.values())
        if not (all(r > 0 for r in ratios) and abs(sum(ratios) - 100.0) < 1e-6):
            raise UsageError(f"--ratios must be positive and sum to 100, got "
                             f"{flag_form(self.ratios)!r}")
        if not all(c > 0 for c in self.c_cat.values()):
            raise UsageError(f"--c-cat caps must be > 0, got {flag_form(self.c_cat)!r}")
        try:  # whatever the scheduler: a file's theta_max is checked too
            NegativeScheduler(self.theta_max, self.theta_cat(), eta_0=self.eta_0,
                              floor=self.floor)
            kind.from_config(self, None)
        except UsageError:
            raise
        except ValueError as exc:  # the scheduler's own rules, said under the flag's name
            name, _, rest = str(exc).partition(" ")
            raise UsageError(f"{flag(name)} {rest}" if name in self.values() else str(exc)
                             ) from None

    def ratio_map(self) -> dict[str, float]:
        """``ratios`` as fractions of 1, keyed hard / inter / easy."""
        return {c: self.ratios[c] / 100.0 for c in CATEGORIES}

    def theta_cat(self) -> dict[str, float]:
        """The caps theta_cat = ratio x theta_max (with theta_max = 0 the caps of a full
        budget, held at eta_0)."""
        return {c: r * (self.theta_max or 1.0) for c, r in self.ratio_map().items()}

    def reach_epoch(self, epochs: int) -> int | None:
        """T_reach: the epoch by which the deadline pace has theta_max in use; None with the
        fixed pace."""
        return deadline_epoch(self.reach, epochs) if self.pace == "deadline" else None

    def build(self, epochs: int | None = None, hans: Section | None = None
              ) -> NegativeScheduler:
        """The scheduler ``scheduler`` names for a run of ``epochs`` epochs (None: no
        deadline pace); ``hans``: the ``[hans]`` section (default: its defaults)."""
        return scheduler_class(self.scheduler).from_config(self, epochs, hans)

    def unused(self, hans: Section | None = None) -> tuple[str, ...]:
        """The settings its scheduler never reads (``NegativeScheduler.unused``)."""
        return scheduler_class(self.scheduler).unused(self, hans)


class NegativeScheduler:
    """The bookkeeping every negative scheduler shares, and what the contrast, the trainer and
    the profiler read of it.

    Every default is the ``[schedule]`` section's (``ScheduleConfig``), as the flags' are.

    Args:
        theta_max: global budget, a fraction of each anchor's |N_i| candidates, in [0, 1];
            0 holds every category at its bootstrap share for the whole run.
        theta_cat: per-category caps, fractions of |N_i| keyed hard / inter / easy (default
            ``ratios`` x theta_max; with theta_max = 0, the ratios themselves); they must be
            able to fill theta_max.
        eta_0: every category's eta at the start.
        floor: least eta of a category.
        swap_every: epochs between redraws of the active subsets once saturated (``draw``).

    Class attributes:
        name: ``--scheduler``'s value.
        ranks_candidates: whether the negatives are drawn from hardness strata (the contrast
            ranks the candidates) or as a uniform random subset of the candidates.
        reads_losses: whether ``step`` reads the per-category losses (else the contrast need
            not compute them).
        unused_settings: the settings it never reads (refused on the command line).
        who: how a line about its schedule names it ("HANS has ..."); "" for one without a
            schedule.
        category_loss: which per-category loss the contrast reports to ``step``
            (edgegcl.contrast.loss); a member that reads them sets its own.
    """

    name: ClassVar[str] = ""
    ranks_candidates: ClassVar[bool] = False
    reads_losses: ClassVar[bool] = False
    unused_settings: ClassVar[tuple[str, ...]] = ()
    who: ClassVar[str] = ""
    category_loss: str = "mean"

    def __init__(self, theta_max: float = ScheduleConfig.theta_max,
                 theta_cat: Mapping[str, float] | None = None, *,
                 eta_0: float = ScheduleConfig.eta_0, floor: float = ScheduleConfig.floor,
                 swap_every: int = 1) -> None:
        if not 0.0 <= theta_max <= 1.0:
            raise ValueError(f"theta_max must be in [0, 1], got {theta_max}")
        caps = dict(theta_cat) if theta_cat is not None else {
            c: r / 100.0 * (theta_max or 1.0) for c, r in ScheduleConfig.default("ratios").items()}
        if set(caps) != set(CATEGORIES) or not all(0.0 < caps[c] <= 1.0 for c in CATEGORIES):
            raise ValueError(f"theta_cat needs hard, inter and easy in (0, 1], got {caps}")
        if sum(caps.values()) < theta_max - EPS:
            raise ValueError(f"the caps theta_cat {caps} cannot fill theta_max = {theta_max}")
        self.theta_max = theta_max
        self.theta_cat = caps
        self.eta_0, self.floor, self.swap_every = eta_0, floor, swap_every
        self.eta = {c: eta_0 for c in CATEGORIES}
        self.epoch = 0
        self.draw = 0
        self.events: list[ScheduleEvent] = [ScheduleEvent(0, c, eta_0, eta_0, "bootstrap")
                                            for c in CATEGORIES]
        self.saturated_at: int | None = None
        if self.theta_max == 0.0:
            self._log(0, "all", 0.0, "theta_max = 0: the bootstrap share only, never grown")

    @classmethod
    def from_config(cls: type[_S], cfg: ScheduleConfig, epochs: int | None = None,
                    hans: Section | None = None) -> _S:
        """The scheduler of a run of ``epochs`` epochs (None: no deadline) under ``cfg``
        (``hans``: the ``[hans]`` section, for the members that read it)."""
        raise NotImplementedError

    @classmethod
    def unused(cls, cfg: ScheduleConfig, hans: Section | None = None) -> tuple[str, ...]:
        """The settings of ``cfg`` and ``hans`` this scheduler never reads."""
        return cls.unused_settings

    # ---- what the training loop reads -------------------------------------------------
    def used(self) -> float:
        """sum_cat eta^cat theta^cat: the fraction of |N_i| in use."""
        return sum(self.eta[c] * self.theta_cat[c] for c in CATEGORIES)

    @property
    def saturated(self) -> bool:
        """The global budget is used up: sum eta theta_cat >= theta_max (always with
        theta_max = 0: nothing grows)."""
        return self.used() >= self.theta_max - EPS

    def budget_share(self) -> float:
        """sum eta theta_cat / theta_max: the share of the global budget in use (1 once
        saturated; with theta_max = 0, the bootstrap share counts as all of it)."""
        return 1.0 if self.theta_max == 0.0 else min(1.0, self.used() / self.theta_max)

    def fractions(self) -> dict[str, float]:
        """eta^cat theta^cat: the fraction of |N_i| each category uses now."""
        return {c: self.eta[c] * self.theta_cat[c] for c in CATEGORIES}

    def counts(self, num_cand: int) -> dict[str, int]:
        """Negatives per anchor of each category: floor(eta theta_cat |N_i|) (Algorithm 1, l. 4)."""
        return {c: math.floor(self.eta[c] * self.theta_cat[c] * num_cand + EPS)
                for c in CATEGORIES}

    # ---- an epoch ---------------------------------------------------------------------
    def step(self, losses: Mapping[str, float]) -> list[ScheduleEvent]:
        """End of an epoch with its per-category losses (``_observe``): nothing while
        ``_waiting``; once saturated, the active subsets redrawn every ``swap_every`` epochs
        (stochastic swapping: ``draw`` increments); else the member's ``_decide``. Returns the
        events this call added to ``events``."""
        self.epoch += 1
        t = self.epoch
        self._observe(losses)
        before = len(self.events)
        if self._waiting(t) or self.theta_max == 0.0:
            return []
        if self.saturated:
            if self.saturated_at is not None and (t - self.saturated_at) % self.swap_every == 0:
                self.draw += 1
                self._log(t, "all", 0.0, "swap: active negatives redrawn in every category")
            return self.events[before:]
        self._decide(t)
        return self.events[before:]

    def _observe(self, losses: Mapping[str, float]) -> None:
        """Record an epoch's per-category losses (a member that reads them)."""

    def _waiting(self, t: int) -> bool:
        """Whether epoch ``t`` is before the schedule starts (a bootstrap)."""
        return False

    def _decide(self, t: int) -> None:
        """Move eta at the end of epoch ``t`` (not yet saturated); the base never does."""

    def aim(self, T_reach: int | None, epochs: int) -> None:
        """A seed cut to ``epochs`` epochs in all (``--max-steps``, ``--time-budget``), with
        ``T_reach`` the deadline pace's epoch for them (None: the fixed pace): a pace re-aims
        at them (edgegcl.contrast.pace); the base has none."""

    def _apply(self, t: int, cat: str, delta: float, reason: str) -> None:
        self.eta[cat] = min(1.0, self.eta[cat] + delta)  # Eq. 10
        self._log(t, cat, delta, reason)

    def _saturate(self, t: int) -> None:
        if self.saturated and self.saturated_at is None:
            self.saturated_at = t
            self._log(t, "all", 0.0, "saturated: global budget theta_max in use; swapping from "
                                     "now on")

    def _log(self, t: int, cat: str, delta: float, reason: str) -> None:
        eta = self.eta[cat] if cat in self.eta else self.budget_share()
        self.events.append(ScheduleEvent(t, cat, delta, eta, reason))

    # ---- persistence, as torch.optim.lr_scheduler ----------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: configuration, eta, the member's own state, events,
        draw."""
        state = {k: v for k, v in self.__dict__.items() if k != "events"}
        state["events"] = [asdict(ev) for ev in self.events]
        return {k: _copied(v) for k, v in state.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a ``state_dict()``; the scheduler then continues exactly where it was.
        Entries this scheduler does not keep are left aside."""
        for k, v in state.items():
            if k == "events":
                self.events = [ScheduleEvent(**ev) for ev in v]
            elif k in self.__dict__:
                setattr(self, k, _copied(v))


def _copied(value: Any) -> Any:
    """A state entry detached from its owner (dicts and the lists in them copied)."""
    if isinstance(value, dict):
        return {k: list(v) if isinstance(v, list) else v for k, v in value.items()}
    return value


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
