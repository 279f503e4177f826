"""Choosing θ_max from measurements: the largest negative budget whose epoch fits the device.

``search_theta`` only decides which θ_max to try next and which to keep; ``measure(theta)``
(the profiler) runs the real steps and returns their ``Cost``, or ``OUT_OF_MEMORY`` after it
caught an allocation failure (edgegcl.errors.is_out_of_memory) and flushed the allocator's cache.

The search follows Lightning's batch-size finder in 'binsearch' mode: grow (double θ from
``start`` until a θ fails or 1.0 fits), then bisect between the last θ that fitted and the first
that failed, down to ``resolution``. Every θ it tries is a multiple of ``resolution``
(0.05, ..., 1.0), so the table reads cleanly and θ never leaves [resolution, 1].

A θ *fits* when it did not run out of memory and both its epoch time and peak memory are within
the budgets less a safety margin (``DEFAULT_MARGIN``). Lightning shrinks the batch size it found
by 5 % so that a size that barely fitted in a few trial steps does not fail in the real run; we
apply the margin to the measured costs instead, and use 10 % because it also covers epoch time,
which varies more from run to run than peak memory does (other processes on a shared CPU,
thermal throttling on passively cooled boards), and a whole run's memory can exceed a few steps'.

Once a θ has failed the search never tries a larger one (growth stops at the first failure,
bisection only looks below it), so every θ that fitted is smaller than every θ that failed: a
larger θ fitting after a smaller one failed cannot show up. When noise makes a θ fail spuriously
the search settles below it, which is conservative.
Noise in the other direction, a θ that fitted by luck, is what the margin is for. The choice is
the largest measured θ that fitted, never one that failed or ran out of memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any


DEFAULT_MARGIN = 0.10
DEFAULT_START = 0.1
DEFAULT_RESOLUTION = 0.05

@dataclass(frozen=True)
class Cost:
    """What an epoch at some θ_max costs: seconds and peak bytes, both None if it ran out of
    memory; ``label`` names how it was run when the measurer tries several ways (the
    profiler: the logits path) and is carried into the table."""

    epoch_s: float | None
    peak_bytes: int | None
    label: str = ""
    phases: tuple[tuple[str, float], ...] = ()
    """Mean seconds per step of each phase of the step (edgegcl.phases), when measured."""

    def __post_init__(self) -> None:
        if (self.epoch_s is None) != (self.peak_bytes is None):
            raise ValueError("epoch_s and peak_bytes are both measured, or both None (out of memory)")
        if self.epoch_s is not None and not (self.epoch_s >= 0 and self.peak_bytes >= 0):
            raise ValueError(f"costs must be >= 0, got {self.epoch_s} s and {self.peak_bytes} bytes")

    @property
    def oom(self) -> bool:
        return self.epoch_s is None


OUT_OF_MEMORY = Cost(None, None)


@dataclass(frozen=True)
class Budgets:
    """What an epoch may cost, and the safety margin a measured cost must stay under them by."""

    epoch_s: float
    memory_bytes: int
    margin: float = DEFAULT_MARGIN

    def __post_init__(self) -> None:
        if not (self.epoch_s > 0 and self.memory_bytes > 0 and 0 <= self.margin < 1):
            raise ValueError(f"budgets must be > 0 and margin in [0, 1), got {self}")

    @property
    def epoch_limit_s(self) -> float:
        return self.epoch_s * (1.0 - self.margin)

    @property
    def memory_limit_bytes(self) -> int:
        return int(self.memory_bytes * (1.0 - self.margin))

    def exceeded(self, cost: Cost) -> tuple[str, ...]:
        """The limits a measured cost breaks: a subset of ("memory", "latency")."""
        assert cost.epoch_s is not None and cost.peak_bytes is not None
        return tuple(name for name, over in (("memory", cost.peak_bytes > self.memory_limit_bytes),
                                             ("latency", cost.epoch_s > self.epoch_limit_s)) if over)


def best_of(costs: list[Cost], budgets: Budgets) -> Cost:
    """Of several ways to run one θ, the one to keep: the fastest that fits, or, when none
    does, the one that breaks the fewest limits (out of memory counts as breaking all), then
    the fastest."""
    def key(c: Cost) -> tuple[int, float]:
        if c.oom or c.epoch_s is None:
            return 3, 0.0
        return len(budgets.exceeded(c)), c.epoch_s
    return min(costs, key=key)


@dataclass(frozen=True)
class Measurement:
    """One θ_max tried: its cost, and whether it fits (``over``: the limits it broke)."""

    theta: float
    epoch_s: float | None
    peak_bytes: int | None
    oom: bool
    fits: bool
    over: tuple[str, ...]
    label: str = ""


@dataclass(frozen=True)
class SearchResult:
    """The θ_max chosen (None: nothing fits), every measurement in the order taken, and why."""

    chosen: float | None
    measurements: list[Measurement]
    reason: str
    budgets: Budgets


def search_theta(measure: Callable[[float], Cost], budgets: Budgets, *,
                 start: float = DEFAULT_START,
                 resolution: float = DEFAULT_RESOLUTION) -> SearchResult:
    """Grow then bisect θ_max on the grid of multiples of ``resolution``; keep the largest that fits.

    ``measure`` is called at most once per θ; errors it raises (other than the out-of-memory it
    reports as ``OUT_OF_MEMORY``) propagate. ``resolution`` must divide 1 and ``start`` be on
    the grid.
    """
    steps = round(1.0 / resolution) if 0 < resolution <= 1 else 0
    if not (steps and math.isclose(steps * resolution, 1.0)):
        raise ValueError(f"resolution must divide 1 (e.g. 0.05), got {resolution}")
    k = round(start * steps)
    if not (1 <= k <= steps and math.isclose(k, start * steps)):
        raise ValueError(f"start must be a multiple of {resolution} in [{resolution}, 1], got {start}")

    measurements: list[Measurement] = []

    def fits(i: int) -> bool:
        theta = i / steps
        cost = measure(theta)
        over = () if cost.oom else budgets.exceeded(cost)
        m = Measurement(theta, cost.epoch_s, cost.peak_bytes, cost.oom, not cost.oom and not over,
                        over, cost.label)
        measurements.append(m)
        return m.fits

    lo, hi = 0, steps + 1  # grid index of the largest θ that fitted / the smallest that failed
    while hi > steps:  # grow: double until a θ fails or the top of the grid fits
        if not fits(k):
            hi = k
        elif k == steps:
            break
        else:
            lo, k = k, min(2 * k, steps)
    while hi - lo > 1 and hi <= steps:  # bisect between them
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    chosen = max((m.theta for m in measurements if m.fits), default=None)
    return SearchResult(chosen, measurements, _reason(chosen, measurements, budgets), budgets)


def closest_fit(result: SearchResult) -> Measurement | None:
    """When no θ fits both budgets: the measurement to train with anyway, the fastest of
    those within the memory limit (of equal times, the larger θ); None when none is, since a
    run past the memory limit may fail where one past the epoch target is only slower."""
    within = [m for m in result.measurements if not m.oom and "memory" not in m.over]
    return min(within, key=lambda m: (m.epoch_s, -m.theta), default=None)


def closest_fit_reason(m: Measurement, budgets: Budgets) -> str:
    """Why the closest fit ``m`` was chosen, with the limit it still breaks and by how much."""
    over = m.epoch_s / budgets.epoch_limit_s - 1  # type: ignore[operator]
    return (f"no theta_max meets the epoch-time limit of {budgets.epoch_limit_s:.3f} s (the "
            f"budget {budgets.epoch_s:g} s less the {budgets.margin:.0%} margin); theta_max = "
            f"{m.theta:.2f} is the fastest within memory: {m.epoch_s:.3f} s per epoch, "
            f"{over:.0%} over that limit, peak {_mib(m.peak_bytes or 0)} of "
            f"{_mib(budgets.memory_limit_bytes)}")


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def _broke(m: Measurement) -> str:
    """"ran out of memory" or "exceeds the memory (and latency) limit(s)"."""
    if m.oom:
        return "ran out of memory"
    return f"exceeds the {' and '.join(m.over)} limit{'s' if len(m.over) > 1 else ''}"


def _reason(chosen: float | None, measurements: list[Measurement], budgets: Budgets) -> str:
    """One sentence: what was chosen and what stopped a larger θ, or why nothing fits."""
    limits = (f"limits {budgets.epoch_limit_s:.2f} s per epoch and {_mib(budgets.memory_limit_bytes)} "
              f"peak: the budgets {budgets.epoch_s:g} s and {_mib(budgets.memory_bytes)} "
              f"less the {budgets.margin:.0%} margin")
    if chosen is None:
        measured = sorted((m for m in measurements if not m.oom), key=lambda m: m.theta)
        if not measured:
            low = min(m.theta for m in measurements)
            return f"no theta_max fits: every theta tried ran out of memory, down to {low:.2f}"
        m = measured[0]
        return (f"no theta_max fits: the cheapest measured, theta_max = {m.theta:.2f}, takes "
                f"{m.epoch_s:.2f} s per epoch and peaks at {_mib(m.peak_bytes)} "
                f"({limits}); it {_broke(m)}")
    best = next(m for m in measurements if m.theta == chosen)
    text = (f"theta_max = {chosen:.2f} is the largest measured within both budgets: "
            f"{best.epoch_s:.2f} s per epoch, peak {_mib(best.peak_bytes)} ({limits})")
    above = sorted((m for m in measurements if m.theta > chosen), key=lambda m: m.theta)
    if above:
        text += f"; theta_max = {above[0].theta:.2f} {_broke(above[0])}"
    return text


def format_table(result: SearchResult) -> str:
    """The measurements as a table sorted by θ: epoch time, peak memory (MiB), the label (when
    the measurer gave one), fits? and the limits."""
    labelled = any(m.label for m in result.measurements)
    rows = [("theta_max", "epoch s", "peak MiB", *(("run as",) if labelled else ()), "fits?")]
    for m in sorted(result.measurements, key=lambda m: m.theta):
        if m.oom:
            verdict = "no: out of memory"
        elif m.fits:
            verdict = "yes, chosen" if m.theta == result.chosen else "yes"
        else:
            verdict = f"no: {' and '.join(m.over)}"
        rows.append((f"{m.theta:.2f}",
                     "-" if m.epoch_s is None else f"{m.epoch_s:.3f}",
                     "-" if m.peak_bytes is None else f"{m.peak_bytes / 2**20:.1f}",
                     *((m.label,) if labelled else ()), verdict))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join([*(c.rjust(w) for c, w in zip(r, widths)), r[-1]]) for r in rows]
    b = result.budgets
    lines.append(f"fits: epoch <= {b.epoch_limit_s:.3f} s and peak <= "
                 f"{b.memory_limit_bytes / 2**20:.1f} MiB (budgets less the {b.margin:.0%} margin)")
    return "\n".join(lines)


def to_json(result: SearchResult) -> dict[str, Any]:
    """The result as JSON-ready data (for the run directory)."""
    b = result.budgets
    return {
        "chosen_theta_max": result.chosen,
        "reason": result.reason,
        "budgets": {"epoch_s": b.epoch_s, "memory_bytes": b.memory_bytes, "margin": b.margin,
                    "epoch_limit_s": b.epoch_limit_s, "memory_limit_bytes": b.memory_limit_bytes},
        "measurements": [{**asdict(m), "over": list(m.over)} for m in result.measurements],
    }
