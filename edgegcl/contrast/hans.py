"""HANS: the Hardness-Aware Negative Scheduler (paper, Sec. "HANS" and Algorithm 1).

Shaped like ``torch.optim.lr_scheduler``: call ``step(losses)`` once per epoch with that
epoch's per-category losses; read ``counts(|N_i|)`` for how many negatives of each category
every anchor uses, and ``draw`` for which random subset (it changes when HANS swaps).
``state_dict()`` / ``load_state_dict()`` save and restore everything. HANS knows nothing of
tensors or autograd: its inputs and outputs are plain numbers.

The class's defaults are the paper's printed values (T_init 60, T_int 20, e 10, b 0.05, a
fixed pace); ``edgegcl train``'s own defaults, chosen by measurement, are ``HANSConfig``'s
(the ``[hans]`` section), which builds a run's scheduler (``HANSConfig.build``).

Choices where the paper leaves room (also in docs/hans.md):
- The gate (Eq. 7) compares window sums of e epochs. ``gate="any"`` (Algorithm 1, line 10)
  opens when any category's loss failed to improve by 1 - gamma; ``gate="total"`` reads the
  sum of the three categories' losses (one signal, as the authors' NegAmplify gates on its
  total loss), so the category that changes least (easy, whose negatives barely move) does
  not hold the gate open on its own.
- One category moves per open gate: round-robin hard -> inter -> easy over categories below
  their cap, with hard preference: easy's turn goes to hard whenever easy's step would bring it
  level with or past hard while hard is below its cap. So hard always fills before easy.
- Loss shares w_cat use the current window sums; if any is <= 0 or not finite, the nominal
  weights [1, 1, 1/2] / 2.5 are used (Eq. 8).
- Per-category floors (default 0.05, the bootstrap eta_0) are enforced before every update.
- After saturation (sum eta theta_cat >= theta_max) eta no longer moves; every ``swap_every``
  epochs the active subsets are redrawn (stochastic swapping): ``draw`` increments.
- The pace: with ``T_reach`` set, b and c_cat of Eq. 9 are rescaled at every decision so that
  the budget left fills over the decisions left before epoch ``T_reach`` (a category with an
  average loss share takes the even step; a larger share a larger one, up to c_cat / b times
  it), and the last decision at or before ``T_reach`` fills every category whatever the gate
  says. Without it (the paper's fixed pace) b and c_cat are used as given, and a short run
  may never reach theta_max.
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
from dataclasses import asdict, dataclass
from typing import Any, Literal

from edgegcl.config import Section, choices, flag, flag_form, option
from edgegcl.contrast.scheduler import NegativeScheduler, register, scheduler_class
from edgegcl.errors import UsageError

CATEGORIES = ("hard", "inter", "easy")
NOMINAL_WEIGHTS = {"hard": 1.0, "inter": 1.0, "easy": 0.5}
DEFAULT_RATIOS = {"hard": 0.30, "inter": 0.50, "easy": 0.20}
DEFAULT_STEP_CAPS = {"hard": 0.05, "inter": 0.05, "easy": 0.025}
Gate = Literal["total", "any"]
"""What the gate (Eq. 7) reads: the sum of the category losses, or each category (opening
when any one has stalled: Algorithm 1, line 10, the paper's)."""
GATES: tuple[str, ...] = choices(Gate)
CategoryLoss = Literal["mean", "sum"]
"""What the per-category losses HANS reads are: InfoNCE against the category's mean
exp-similarity (``mean``), or over its active negatives (``sum``, the paper's)."""
CATEGORY_LOSSES: tuple[str, ...] = choices(CategoryLoss)
Pace = Literal["deadline", "fixed"]
"""``pace``: b and c_cat rescaled so that theta_max is in use by ``reach`` x the epochs, or
used as given (the paper's fixed pace)."""
RATIO_ORDER = ("easy", "hard", "inter")
"""``--ratios E,H,I``: the paper's order (its ratio table lists EASY, HARD, INTER)."""
CAP_ORDER = CATEGORIES
"""``--c-cat H,I,E``: the order HANS grows the categories in."""
EQUAL_LOSSES = dict.fromkeys(CATEGORIES, 1.0)
"""What the random-subset baseline's HANS reads every epoch: its gate always opens (Eq. 7)
and every category has the same loss share (Eq. 8), so its counts follow the pace alone."""
_EPS = 1e-9


@dataclass(frozen=True)
class HANSEvent:
    """One line of the event log: what changed (or was decided) at the end of an epoch."""

    epoch: int
    category: str
    delta_eta: float
    eta: float
    reason: str


@register
class HANS(NegativeScheduler):
    """The scheduler of eta_t^cat, the used fraction of each category's budget theta_cat.

    Args (Algorithm 1's names):
        theta_max: global budget, a fraction of each anchor's |N_i| candidates, in [0, 1];
            0 holds every category at its bootstrap share for the whole run.
        theta_cat: per-category caps, fractions of |N_i| keyed hard / inter / easy (default
            ratios 30 / 50 / 20 x theta_max; with theta_max = 0, the ratios themselves); they
            must be able to fill theta_max.
        T_init: bootstrap epochs at ``eta_0``.
        T_int: epochs between decisions.
        e: loss-gate window (Eq. 7): the last e epochs against the e before.
        gamma: loss-gate factor (Eq. 7).
        b: base step size (Eq. 9).
        c_cat: per-step caps on eta's growth, keyed by category.
        eta_0: every category's eta during the bootstrap.
        floor: least eta of a category.
        swap_every: epochs between stochastic swaps after saturation (default T_int).
        T_reach: the epoch by which theta_max is in use (the pace follows it; see the module);
            None: the paper's fixed pace, b and c_cat as given.
        category_loss: ``"mean"`` or ``"sum"``: what the losses given to ``step`` are
            (CATEGORY_LOSSES); HANS only records the choice for whoever computes them.
        gate: ``"any"`` (a category that stalled opens it) or ``"total"`` (the categories'
            summed loss stalled) (GATES).

    Example:
        >>> hans = HANS(theta_max=0.6, T_init=2, T_int=2, e=1, T_reach=8)
        >>> for epoch in range(8):  # once per epoch, with that epoch's per-category losses
        ...     events = hans.step({"hard": 2.0, "inter": 1.5, "easy": 1.0})
        >>> hans.saturated, round(hans.used(), 2)
        (True, 0.6)
    """

    name = "hans"
    who = "HANS has"

    def __init__(self, theta_max: float = 1.0, theta_cat: Mapping[str, float] | None = None, *,
                 T_init: int = 60, T_int: int = 20, e: int = 10, gamma: float = 0.99,
                 b: float = 0.05, c_cat: Mapping[str, float] | None = None,
                 eta_0: float = 0.05, floor: float = 0.05, swap_every: int | None = None,
                 T_reach: int | None = None, category_loss: str = "sum", gate: str = "any"
                 ) -> None:
        if not 0.0 <= theta_max <= 1.0:
            raise ValueError(f"theta_max must be in [0, 1], got {theta_max}")
        if gate not in GATES:
            raise ValueError(f"gate must be one of {', '.join(GATES)}, got {gate!r}")
        if category_loss not in CATEGORY_LOSSES:
            raise ValueError(f"category_loss must be one of {', '.join(CATEGORY_LOSSES)}, got "
                             f"{category_loss!r}")
        caps = dict(theta_cat) if theta_cat is not None else {
            c: r * (theta_max or 1.0) for c, r in DEFAULT_RATIOS.items()}
        if set(caps) != set(CATEGORIES) or not all(0.0 < caps[c] <= 1.0 for c in CATEGORIES):
            raise ValueError(f"theta_cat needs hard, inter and easy in (0, 1], got {caps}")
        if sum(caps.values()) < theta_max - _EPS:
            raise ValueError(f"the caps theta_cat {caps} cannot fill theta_max = {theta_max}")
        if min(T_init, e) < 0 or min(T_int, e) < 1:
            raise ValueError("T_int and e must be >= 1 and T_init >= 0")
        self.theta_max = theta_max
        self.theta_cat = caps
        self.T_init, self.T_int, self.e = T_init, T_int, e
        self.gamma, self.b = gamma, b
        self.c_cat = dict(c_cat) if c_cat is not None else dict(DEFAULT_STEP_CAPS)
        self.eta_0, self.floor = eta_0, floor
        self.swap_every = swap_every if swap_every is not None else T_int
        self.T_reach, self.category_loss, self.gate = T_reach, category_loss, gate
        self.eta = {c: eta_0 for c in CATEGORIES}
        self.epoch = 0
        self.draw = 0
        self.history: dict[str, list[float]] = {c: [] for c in CATEGORIES}
        self.events: list[HANSEvent] = [HANSEvent(0, c, eta_0, eta_0, "bootstrap")
                                        for c in CATEGORIES]
        self.saturated_at: int | None = None
        self._next = 0
        if theta_max == 0.0:
            self._log(0, "all", 0.0, "theta_max = 0: the bootstrap share only, never grown")

    @classmethod
    def from_config(cls, cfg: HANSConfig, epochs: int | None = None) -> HANS:
        """HANS under ``cfg``: caps theta_cat = ratio x theta_max (with theta_max = 0 the caps
        of a full budget, held at eta_0); the deadline pace for ``epochs`` (None: none)."""
        ratios = cfg.ratio_map()
        return cls(cfg.theta_max, {c: r * (cfg.theta_max or 1.0) for c, r in ratios.items()},
                   T_init=cfg.T_init, T_int=cfg.T_int, e=cfg.e, gamma=cfg.gamma, b=cfg.b,
                   c_cat=dict(cfg.c_cat), eta_0=cfg.eta_0, floor=cfg.floor,
                   swap_every=cfg.swap_every or None,
                   T_reach=None if epochs is None else cfg.reach_epoch(epochs),
                   category_loss=cfg.category_loss, gate=cfg.gate)

    # ---- what the training loop reads -------------------------------------------------
    def used(self) -> float:
        """sum_cat eta^cat theta^cat: the fraction of |N_i| in use."""
        return sum(self.eta[c] * self.theta_cat[c] for c in CATEGORIES)

    @property
    def saturated(self) -> bool:
        """The global budget is used up: sum eta theta_cat >= theta_max (always with
        theta_max = 0: nothing grows)."""
        return self.used() >= self.theta_max - _EPS

    def budget_share(self) -> float:
        """sum eta theta_cat / theta_max: the share of the global budget in use (1 once
        saturated; with theta_max = 0, the bootstrap share counts as all of it)."""
        return 1.0 if self.theta_max == 0.0 else min(1.0, self.used() / self.theta_max)

    def fractions(self) -> dict[str, float]:
        """eta^cat theta^cat: the fraction of |N_i| each category uses now."""
        return {c: self.eta[c] * self.theta_cat[c] for c in CATEGORIES}

    def counts(self, num_cand: int) -> dict[str, int]:
        """Negatives per anchor of each category: floor(eta theta_cat |N_i|) (Algorithm 1, l. 4)."""
        return {c: math.floor(self.eta[c] * self.theta_cat[c] * num_cand + _EPS)
                for c in CATEGORIES}

    # ---- the schedule -------------------------------------------------------------------
    def step(self, losses: Mapping[str, float]) -> list[HANSEvent]:
        """End of an epoch: record l_t^cat, then bootstrap / gate / step / swap as Algorithm 1.

        Returns the events this call added to ``events``.
        """
        self.epoch += 1
        t = self.epoch
        for c in CATEGORIES:
            self.history[c].append(float(losses[c]))
        before = len(self.events)
        if t <= self.T_init or self.theta_max == 0.0:
            return []
        if self.saturated:
            if self.saturated_at is not None and (t - self.saturated_at) % self.swap_every == 0:
                self.draw += 1
                self._log(t, "all", 0.0, "swap: active negatives redrawn in every category")
            return self.events[before:]
        if t % self.T_int == 0:
            self._update(t)
        return self.events[before:]

    def _windows(self) -> tuple[dict[str, float], dict[str, float]] | None:
        """(L_curr, L_prev): sums of the last e and the e before (Algorithm 1, line 9)."""
        if len(self.history["hard"]) < 2 * self.e:
            return None
        e = self.e
        curr = {c: sum(self.history[c][-e:]) for c in CATEGORIES}
        prev = {c: sum(self.history[c][-2 * e:-e]) for c in CATEGORIES}
        return curr, prev

    def decisions_left(self, t: int) -> int | None:
        """Decision epochs from ``t`` (a decision epoch) to ``T_reach``, both included; None
        with the fixed pace."""
        if self.T_reach is None:
            return None
        return max(0, self.T_reach // self.T_int - t // self.T_int + 1)

    def _update(self, t: int) -> None:
        left = self.decisions_left(t)
        if left is not None and left <= 1:  # the pace's deadline: fill whatever is left
            for c in CATEGORIES:
                if self.eta[c] < 1.0 - _EPS:
                    self._apply(t, c, 1.0 - self.eta[c],
                                f"deadline: theta_max in use by T_reach = {self.T_reach}")
            self._saturate(t)
            return
        windows = self._windows()
        if windows is None:
            self._log(t, "all", 0.0, f"gate skipped: fewer than 2e = {2 * self.e} epochs of losses")
            return
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
            return
        for c in CATEGORIES:
            if self.eta[c] < self.floor:
                self._apply(t, c, self.floor - self.eta[c], "floor")
        weights = self.loss_weights(curr)
        cat, delta, bound = self._choose(weights, left)
        if delta <= 0.0:
            self._log(t, cat, 0.0, "gate open but no budget left to grow")
            return
        self._apply(t, cat, delta, f"gate open ({', '.join(stalled)} not improved by "
                                   f">= {1 - self.gamma:.0%}); step bound by {bound}")
        self._saturate(t)

    def _saturate(self, t: int) -> None:
        if self.saturated and self.saturated_at is None:
            self.saturated_at = t
            self._log(t, "all", 0.0, "saturated: global budget theta_max in use; swapping from "
                                     "now on")

    @staticmethod
    def loss_weights(window: Mapping[str, float]) -> dict[str, float]:
        """w_cat = L_cat / L_total; nominal [1, 1, 1/2] normalised if any L_cat <= 0 (Eq. 8)."""
        if all(math.isfinite(window[c]) and window[c] > 0 for c in CATEGORIES):
            total = sum(window[c] for c in CATEGORIES)
            return {c: window[c] / total for c in CATEGORIES}
        total = sum(NOMINAL_WEIGHTS.values())
        return {c: NOMINAL_WEIGHTS[c] / total for c in CATEGORIES}

    def pace_scale(self, cat: str, weights: Mapping[str, float], left: int | None) -> float:
        """The factor b and c_cat are multiplied by at this decision: 1 with the fixed pace;
        with ``T_reach``, the one that makes a category of average loss share among those
        still growing step (1 - eta^cat) n / (left - 1 + n): its budget left spread evenly
        over its turns (n categories grow in turn over the ``left - 1`` decisions before the
        last, which fills every category)."""
        if left is None:
            return 1.0
        growing = [c for c in CATEGORIES if self.eta[c] < 1.0 - _EPS]
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
        open_cats = [c for c in open_cats if self.eta[c] < 1.0 - _EPS]
        cat = open_cats[0]
        delta, bound = self.step_size(cat, weights, left)
        if (cat == "easy" and self.eta["hard"] < 1.0 - _EPS
                and self.eta["easy"] + delta >= self.eta["hard"] - _EPS):
            cat = "hard"
            delta, bound = self.step_size(cat, weights, left)
        self._next = (CATEGORIES.index(cat) + 1) % 3
        return cat, delta, bound

    def _apply(self, t: int, cat: str, delta: float, reason: str) -> None:
        self.eta[cat] = min(1.0, self.eta[cat] + delta)  # Eq. 10
        self._log(t, cat, delta, reason)

    def _log(self, t: int, cat: str, delta: float, reason: str) -> None:
        eta = self.eta[cat] if cat in self.eta else self.budget_share()
        self.events.append(HANSEvent(t, cat, delta, eta, reason))

    # ---- persistence, as torch.optim.lr_scheduler ----------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: configuration, eta, loss history, events, draw."""
        state = {k: v for k, v in self.__dict__.items() if k != "events"}
        state["events"] = [asdict(ev) for ev in self.events]
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in state.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a ``state_dict()``; the scheduler then continues exactly where it was."""
        for k, v in state.items():
            if k == "events":
                self.events = [HANSEvent(**ev) for ev in v]
            elif k == "history":
                self.history = {c: list(v[c]) for c in CATEGORIES}
            else:
                setattr(self, k, dict(v) if isinstance(v, dict) else v)


@dataclass(frozen=True)
class HANSConfig(Section):
    """A run's negative schedule (the ``[hans]`` section; Algorithm 1's names).

    ``build(epochs)`` makes the scheduler ``scheduler`` names (edgegcl.contrast.scheduler:
    HANS, or the baselines of edgegcl.contrast.baselines), whose own checks (theta_max in
    [0, 1], the windows) are this section's too.

    Example:
        >>> hans = HANSConfig(theta_max=0.6, ratios="10,40,50").build(epochs=100)
        >>> round(hans.theta_cat["hard"], 2), hans.T_reach
        (0.24, 40)
    """

    TITLE = "the Hardness-Aware Negative Scheduler (Algorithm 1; the paper's names)"
    scheduler: str = option(
        "random", "random: as many negatives as HANS's pace gives with every gate open, a "
        "uniform random subset of the candidates (measured as accurate as HANS's hardness or "
        "all negatives on Cora and CiteSeer, and the cheapest: docs/hans.md); hans: HANS's "
        "hardness strata, gate and loss-aware steps; none: every candidate (2B - 2 or B - 1 "
        "by --candidates) from epoch 1, the HANS settings ignored "
        "(edgegcl.contrast.scheduler lists every member)")
    theta_max: float = option(0.1, "global negative budget theta_max: the largest fraction of "
                              "each anchor's candidates used (of 2B - 2, or B - 1 with "
                              "--candidates inter), in [0, 1]; 0: the bootstrap share eta_0 "
                              "only, never grown")
    ratios: dict[str, float] = option({"easy": 20.0, "hard": 30.0, "inter": 50.0},
                                      "category shares in percent, summing to 100 (flag: "
                                      "hard=30,inter=50,easy=20; the older EASY,HARD,INTER too); theta_cat = "
                                      "share x theta_max",
                                      keys=RATIO_ORDER)
    pace: Pace = option("deadline", "how fast eta grows: deadline (b and c_cat rescaled at "
                        "every decision so that theta_max is in use by --reach x --epochs; the "
                        "last decision before then fills every category) or fixed (b and c_cat "
                        "as given, the paper's: a short run may never reach theta_max)")
    reach: float = option(0.4, "deadline pace: the fraction of --epochs by which theta_max is "
                          "in use, in (0, 1]", above=0.0, at_most=1.0)
    T_init: int = option(20, "bootstrap epochs at eta_0 before the first decision", at_least=0)
    T_int: int = option(10, "epochs between HANS decisions", at_least=1)
    e: int = option(5, "loss-gate window: the last e epochs against the e before (Eq. 7)",
                    at_least=1)
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
    b: float = option(0.05, "base step size of eta (Eq. 9)", above=0.0)
    c_cat: dict[str, float] = option({"hard": 0.05, "inter": 0.05, "easy": 0.025},
                                     "per-step caps c_cat on eta's growth (flag: "
                                     "hard=0.05,inter=0.05,easy=0.025; the older HARD,INTER,EASY "
                                     "too)", keys=CAP_ORDER)
    eta_0: float = option(0.05, "eta of every category during the bootstrap", above=0.0,
                          at_most=1.0)
    floor: float = option(0.05, "least eta of a category", at_least=0.0, at_most=1.0)
    swap_every: int = option(0, "epochs between stochastic swaps once saturated (0: T_int)",
                             at_least=0)

    def check(self) -> None:
        try:
            scheduler_class(self.scheduler)
        except ValueError as exc:
            raise UsageError(f"--{exc}") from None
        ratios = list(self.ratios.values())
        if not (all(r > 0 for r in ratios) and abs(sum(ratios) - 100.0) < 1e-6):
            raise UsageError(f"--ratios must be positive and sum to 100, got "
                             f"{flag_form(self.ratios)!r}")
        if not all(c > 0 for c in self.c_cat.values()):
            raise UsageError(f"--c-cat caps must be > 0, got {flag_form(self.c_cat)!r}")
        try:
            self._scheduled(None)  # whatever the scheduler: a file's theta_max is checked too
        except UsageError:
            raise
        except ValueError as exc:  # HANS's own rules, said once there, under the flag's name
            name, _, rest = str(exc).partition(" ")
            raise UsageError(f"{flag(name)} {rest}" if name in self.values() else str(exc)
                             ) from None

    def ratio_map(self) -> dict[str, float]:
        """``ratios`` as fractions of 1, keyed hard / inter / easy."""
        return {c: self.ratios[c] / 100.0 for c in CATEGORIES}

    def reach_epoch(self, epochs: int) -> int | None:
        """T_reach: the epoch by which the deadline pace has theta_max in use (ceil(reach x
        epochs)); None with the fixed pace."""
        return math.ceil(self.reach * epochs - 1e-9) if self.pace == "deadline" else None

    def build(self, epochs: int | None = None) -> HANS:
        """The scheduler of a run of ``epochs`` epochs (None: no deadline pace), of the class
        ``scheduler`` names."""
        return scheduler_class(self.scheduler).from_config(self, epochs)  # type: ignore[return-value]

    def _scheduled(self, epochs: int | None) -> HANS:
        return HANS.from_config(self, epochs)

    def unused(self) -> tuple[str, ...]:
        """The fields its scheduler never reads (``NegativeScheduler.unused``)."""
        return scheduler_class(self.scheduler).unused(self)
