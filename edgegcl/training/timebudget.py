"""How long a run trains: ``--time-budget`` (a wall-clock budget for the whole run) and
``--max-steps`` (optimizer steps a seed trains at most), which cut a seed's epochs to fit.

Users wait for the run, not for its epoch count: on a large graph one mini-batch epoch is
minutes, and 300 of them hours. Two bounds, both read here:

- ``max_steps``: a seed trains at most this many optimizer steps, its epochs cut to
  ``max_steps // batches per epoch`` (at least one). ``-1`` (the default) bounds mini-batch runs
  at ``MINIBATCH_STEPS`` and leaves full-graph runs (one step an epoch) to ``--epochs``.
- ``time_budget`` (``10m``, ``90s``, ``1h30m``; ``duration_seconds``): the run's wall time.
  The seeds still to train share what is left of it evenly (``RunClock.seed_end``); a seed's
  encoder search takes at most ``SEARCH_SHARE`` of its part (``RunClock.search_end``), and
  the seed trains while one more epoch and the final probe fit before its part ends
  (``epochs_that_fit``), probing often enough to keep a checkpoint to choose from.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

from edgegcl.errors import UsageError

__all__ = ["MINIBATCH_STEPS", "SEARCH_SHARE", "RunClock", "bounded_epochs", "budget_line",
           "duration_seconds", "duration_text", "epochs_that_fit", "probe_interval",
           "step_bound"]

SEARCH_SHARE = 0.25
"""The most of a seed's part of ``--time-budget`` its encoder search may take."""

MINIBATCH_STEPS = 4000
"""``max_steps = -1``: the steps a mini-batch seed trains at most. The default 300 epochs of a
graph up to 13 312 nodes (13 batches of 1024, tolokers' 12 included) stay whole; a 1M-node
graph trains 4 epochs (its whole run 12.2 minutes on 2 cores, bench/results/wall-time-1m.md)
instead of 300 (about 14 hours at its 170 s an epoch)."""

RESERVE_SHARE = 0.05
"""The share of ``--time-budget`` kept for what follows the seeds' training: their results
(the raw features' and a heuristic's figures beside them), the run's metrics and checkpoint."""

PROBES_AT_LEAST = 10
"""Under a time budget a seed probes at least this many times when its ``--eval-every``
would probe fewer: the checkpoint is chosen among them."""

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}
_NUMBER = r"(\d+(?:\.\d+)?)"
_DURATION = re.compile(rf"(?:{_NUMBER}h)?(?:{_NUMBER}m)?(?:{_NUMBER}s)?")


def duration_seconds(text: str) -> float:
    """``text`` (``90s``, ``10m``, ``1h30m``, ``2.5h``, or plain seconds ``600``) in seconds;
    ``""``: 0 (no budget). Anything else is one UsageError line.

    Example:
        >>> duration_seconds("1h30m"), duration_seconds("90s"), duration_seconds("600")
        (5400.0, 90.0, 600.0)
    """
    compact = text.strip().lower().replace(" ", "")
    if not compact:
        return 0.0
    if re.fullmatch(_NUMBER, compact):
        compact += "s"
    found = _DURATION.fullmatch(compact)
    if found is None or not any(found.groups()):
        raise UsageError(f"--time-budget must be a duration such as 10m, 90s, 1h30m or 600 "
                         f"(seconds), got {text!r}")
    seconds = sum(float(v) * _UNITS[u] for v, u in zip(found.groups(), "hms") if v)
    if not 0 < seconds <= 365 * 86400:
        raise UsageError(f"--time-budget must be more than 0 s and at most a year, got {text!r}")
    return seconds


def duration_text(seconds: float) -> str:
    """A duration as the budget is written: ``1h05m``, ``10m``, ``45s``.

    Example:
        >>> duration_text(3900), duration_text(600), duration_text(45.2)
        ('1h05m', '10m', '45s')
    """
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m" + (f"{secs:02d}s" if secs else "")
    return f"{secs}s"


def step_bound(max_steps: int, minibatch: bool) -> int | None:
    """The steps a seed trains at most under ``max_steps`` (-1: ``MINIBATCH_STEPS`` in
    mini-batches, no bound on the whole graph; 0: no bound), or None for no bound."""
    if max_steps == -1:
        return MINIBATCH_STEPS if minibatch else None
    return max_steps or None


def bounded_epochs(epochs: int, steps_per_epoch: int, max_steps: int, minibatch: bool
                   ) -> int:
    """A seed's epochs: ``epochs``, cut so that ``steps_per_epoch`` times them stays within
    the step bound (at least one epoch).

    Example:
        >>> bounded_epochs(300, 977, -1, True), bounded_epochs(300, 12, -1, True)
        (4, 300)
    """
    bound = step_bound(max_steps, minibatch)
    if bound is None:
        return epochs
    return max(1, min(epochs, bound // max(steps_per_epoch, 1)))


def probe_interval(eval_every: int, epochs: int) -> int:
    """Epochs between probes of a time-budgeted seed expected to train ``epochs``:
    ``eval_every``, or less so that it probes at least ``PROBES_AT_LEAST`` times."""
    return max(1, min(eval_every, epochs // PROBES_AT_LEAST))


def epochs_that_fit(seconds_left: float, epoch_s: float, probe_s: float, every: int) -> int:
    """Epochs that fit in ``seconds_left``: each costs ``epoch_s`` and a probe every ``every``
    of them costs ``probe_s``; the final probe is kept aside. 0 when not even one fits.

    Example:
        >>> epochs_that_fit(100.0, 9.0, 10.0, 10)  # 90 s left after the final probe, 10 s each
        9
    """
    per_epoch = epoch_s + probe_s / max(every, 1)
    return max(0, math.floor((seconds_left - probe_s) / max(per_epoch, 1e-9)))


@dataclass
class RunClock:
    """The run's wall-clock budget from ``start`` (``time.monotonic``): ``seconds`` in all
    (None: no budget); and the epochs it has trained so far (``done``, the encoder search's
    included, since ``since``), from which ``expected_end`` tells when the run will end."""

    seconds: float | None
    start: float
    done: int = 0
    since: float | None = None

    def count(self) -> None:
        """One more epoch trained (a search candidate's or a seed's)."""
        if self.since is None:  # from the first epoch on: loading and setup are not epochs
            self.since = time.monotonic()
        else:
            self.done += 1

    def expected_end(self, epochs_left: int) -> float | None:
        """When the run ends (``time.monotonic``): its budget's end, else, with
        ``epochs_left`` epochs still to train, their share of the time the ones so far took
        (None before one has)."""
        if self.end is not None:
            return self.end
        if self.since is None or self.done == 0:
            return None
        now = time.monotonic()
        return now + (now - self.since) / self.done * max(epochs_left, 0)

    @classmethod
    def started(cls, seconds: float) -> RunClock:
        """A budget of ``seconds`` (0: none) starting now."""
        return cls(seconds or None, time.monotonic())

    @property
    def end(self) -> float | None:
        """When the run is due to end (``time.monotonic``), None without a budget."""
        return None if self.seconds is None else self.start + self.seconds

    def seed_end(self, seeds_left: int) -> float | None:
        """When the next seed's part ends: now plus an even share among the ``seeds_left``
        seeds still to train of what is left, less ``RESERVE_SHARE`` of the budget for what
        follows the last seed."""
        if self.end is None or self.seconds is None:
            return None
        now = time.monotonic()
        left = self.end - RESERVE_SHARE * self.seconds - now
        return now + max(0.0, left) / max(seeds_left, 1)

    @staticmethod
    def search_end(seed_end: float | None) -> float | None:
        """When a seed's encoder search must end: ``SEARCH_SHARE`` of its part from now."""
        if seed_end is None:
            return None
        now = time.monotonic()
        return now + SEARCH_SHARE * max(0.0, seed_end - now)


def ends_text(clock: RunClock | None, epochs_left: int) -> str:
    """`` | the run ends by 14:05:10`` (a time budget's end) or `` | the run ends about
    14:05:10`` (``epochs_left`` more epochs at the pace so far), as the local wall-clock time,
    for a progress line; "" before there is a pace."""
    end = None if clock is None else clock.expected_end(epochs_left)
    if end is None:
        return ""
    at = time.strftime("%H:%M:%S", time.localtime(time.time() + (end - time.monotonic())))
    return f" | the run ends {'by' if clock.end is not None else 'about'} {at}"


def budget_line(time_budget: str, seeds: int, epochs: int) -> str:
    """What a run with ``--time-budget`` (``time_budget``) of ``seeds`` seeds of at most
    ``epochs`` epochs says before it starts: how the seeds share it."""
    each = (1 - RESERVE_SHARE) * duration_seconds(time_budget) / seeds
    return (f"time budget {time_budget}: {seeds} seed(s) of about {duration_text(each)} "
            f"each ({100 * RESERVE_SHARE:.0f} % kept for the results), each training the epochs "
            f"that fit (at most {epochs}, --epochs), probed at least {PROBES_AT_LEAST} times; "
            f"an encoder search takes at most {100 * SEARCH_SHARE:.0f} % of a seed's part")
