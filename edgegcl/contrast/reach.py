"""What a run's negative schedule reaches, worked out before it trains: the state of the
fastest growth HANS allows (``reachable_eta``, the costliest state the profiler measures) and
the start line that says when theta_max is in use and what sets the pace (``pace_line``),
from the schedule's configuration and the run's epochs alone."""

from __future__ import annotations

from dataclasses import replace

from edgegcl.config import Section
from edgegcl.contrast.scheduler import (CATEGORIES, NegativeScheduler, ScheduleConfig,
                                        scheduler_class)

def reachable_eta(schedule: ScheduleConfig, hans: Section | None,
                  epochs: int) -> dict[str, float]:
    """The eta of the last epoch of a run whose schedule grows as fast as HANS allows.

    A copy of the run's scheduler is fed constant losses (so the gate of Eq. 7 opens at every
    checkpoint) with b large enough that every step is its cap c_cat or the budget left
    (Eq. 9): no run's eta can be ahead of it, checkpoint for checkpoint. The step after the
    last epoch changes no epoch, so ``epochs - 1`` steps are taken.
    """
    return dict(_equal_loss_run(replace(schedule, b=1.0), hans, epochs).eta)


def _equal_loss_run(schedule: ScheduleConfig, hans: Section | None,
                    epochs: int) -> NegativeScheduler:
    """The run's scheduler after ``epochs - 1`` epochs of equal, constant category losses:
    the gate (Eq. 7) opens at every checkpoint and each step is min(b / 3, c_cat, budget
    left). Once saturated no later epoch changes eta: the loop stops there."""
    scheduler = schedule.build(epochs, hans)
    for _ in range(epochs - 1):
        scheduler.step(dict.fromkeys(CATEGORIES, 1.0))
        if scheduler.saturated_at is not None:
            break
    return scheduler


def pace_line(schedule: ScheduleConfig, hans: Section | None, epochs: int,
              budgeted: bool = False) -> str | None:
    """One line for the start of a HANS run: when it has theta_max in use (with equal
    category losses; with the deadline pace a closed gate delays the growth but not the
    epoch), for how many of its epochs, and what sets the pace; or, when its epochs cannot
    bring it there (the fixed pace), the share of theta_max it reaches, and at most
    (``reachable_eta``). None without a schedule (``--scheduler none``). ``budgeted``: the
    run has a time budget, so its epochs are known only as it trains.
    """
    h = schedule
    who = scheduler_class(h.scheduler).who
    if not who:  # no schedule (--scheduler none)
        return None
    if h.theta_max == 0:
        return (f"theta_max = 0: every category stays at its bootstrap share eta_0 = "
                f"{h.eta_0:g} of its ratio for all {epochs} epochs")
    ratios = schedule.ratio_map()

    def share(eta: dict[str, float]) -> float:  # sum eta theta_cat / theta_max
        return sum(eta[c] * ratios[c] for c in CATEGORIES)

    if budgeted and h.pace == "deadline":  # the epochs are known as the seed trains
        return (f"{who} theta_max = {h.theta_max:g} in use by {100 * h.reach:.0f} % of the "
                f"epochs that fit in the time budget, or from the start when they are too few "
                f"for a decision (--pace deadline, --reach {h.reach:g}, T_init = {h.T_init}, "
                f"T_int = {h.T_int})")
    run = _equal_loss_run(schedule, hans, epochs)
    if run.saturated_at is not None:
        at = run.saturated_at
        why = (f"--pace deadline, --reach {h.reach:g}" if h.pace == "deadline" else
               f"--pace fixed, b = {h.b:g}")
        return (f"{who} theta_max = {h.theta_max:g} in use from epoch {at + 1} of "
                f"{epochs} ({100 * (epochs - at) / epochs:.0f} % of the epochs; "
                f"{why}, T_init = {h.T_init}, T_int = {h.T_int})")
    typical = share(run.eta)
    if h.pace == "deadline":  # the run ends before the first decision can fill the budget
        return (f"with {epochs} epochs the schedule never decides (its first decision "
                f"comes after T_init = {h.T_init} at a multiple of T_int = {h.T_int}): "
                f"the negatives stay at {100 * typical:.0f} % of theta_max = "
                f"{h.theta_max:g}; a smaller --T-init or --T-int, or more --epochs, reach it")
    return (f"with {epochs} epochs {who.removesuffix(' has')} reaches about "
            f"{100 * typical:.0f} % of theta_max = {h.theta_max:g} (equal category losses; "
            f"at most {100 * share(reachable_eta(schedule, hans, epochs)):.0f} %): with --pace fixed, after "
            f"T_init = {h.T_init} it grows one category in turn every T_int = {h.T_int} "
            f"epochs by min(b w_cat, c_cat), b = {h.b:g}; --pace deadline reaches it by "
            f"--reach x --epochs")
