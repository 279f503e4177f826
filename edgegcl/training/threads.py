"""torch's CPU threads for a run: the user's count, or the one its first steps measure fastest.

torch starts with one thread per core. On a machine where other work runs too, that many
threads wait on each other at every parallel region, and a step can take several times longer
than with fewer (docs/performance.md, "Threads"); on an idle machine all cores are usually
fastest. No rule fits every machine, so ``ThreadPicker`` measures: the run's own first
training steps, timed at cores, cores / 2, ..., 1 threads in turn, going down while fewer
threads are faster. The steps are real training steps, so nothing is spent on the measurement
but the steps run at slower counts; the results are the same up to float summation order.

``resolve_threads`` says which source sets the count: ``--threads N``, ``OMP_NUM_THREADS``
(set by the user, or by torchrun for several processes on one machine), a GPU run (threads
only feed the host's share), or the measurement.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from edgegcl.training.config import MAX_THREADS
from edgegcl_embed.cores import available_cores

__all__ = ["ThreadPicker", "ThreadChoice", "available_cores", "resolve_threads",
           "thread_candidates"]

STEPS_PER_COUNT = 2
"""Timed steps per thread count; the median decides (one step of each is a noisy sample)."""
WARMUP_STEPS = 1
"""Untimed first step: allocator growth, kernel selection, the optimiser's state."""
FEWER_MUST_SAVE = 0.1
"""The share of a step fewer threads must save to be chosen: a near-tie keeps more threads,
since the rest of a run (probes and embeddings of the whole graph, larger products than a
step's) gains from them where a step barely does (docs/performance.md, "Threads")."""


def thread_candidates(cores: int) -> list[int]:
    """Counts the picker tries, most first: cores, cores // 2, ..., 1.

    Example:
        >>> thread_candidates(12)
        [12, 6, 3, 1]
    """
    counts, n = [], max(1, cores)
    while n > 1:
        counts.append(n)
        n //= 2
    return counts + [1]


class ThreadPicker:
    """Sets torch's intra-op threads for each of a run's first steps and keeps the fastest.

    ``begin()`` before a step sets the count to measure, ``end(seconds)`` after it records the
    step's time. After a warm-up step at all cores, each count of ``thread_candidates`` runs
    ``steps`` steps; the search goes down while the median step gets faster (by more than
    ``FEWER_MUST_SAVE``) and stops at the first count that is not (on an idle machine: two counts, 2 * ``steps`` + 1 steps). Then
    the fastest count is set for the rest of the process and ``done`` is true; later
    ``begin()`` / ``end()`` calls do nothing.

    Args:
        cores: the most threads to try (default: the cores this process may run on).
        steps: timed steps per count.

    Example:
        >>> picker = ThreadPicker(cores=2, steps=1)
        >>> for seconds in (9.0, 2.0, 1.0):  # warm-up at 2, then 2 threads, then 1
        ...     picker.begin()
        ...     picker.end(seconds)
        >>> picker.done, picker.chosen
        (True, 1)
    """

    def __init__(self, cores: int | None = None, steps: int = STEPS_PER_COUNT) -> None:
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        self.cores = cores if cores is not None else available_cores()
        self.steps = steps
        self.order = thread_candidates(self.cores)
        self.seconds: dict[int, list[float]] = {}
        self._warm = False
        self._index = 0
        self.chosen: int | None = None

    @property
    def done(self) -> bool:
        return self.chosen is not None

    @property
    def current(self) -> int:
        """The count the next step runs at."""
        return self.chosen if self.chosen is not None else self.order[self._index]

    def begin(self) -> None:
        """Before a step: set the count it is timed at."""
        if self.chosen is None:
            torch.set_num_threads(self.current)

    def end(self, seconds: float) -> None:
        """After a step: its wall time in seconds."""
        if self.chosen is not None:
            return
        if not self._warm:
            self._warm = True
            return
        times = self.seconds.setdefault(self.current, [])
        times.append(seconds)
        if len(times) < self.steps:
            return
        best = self.fastest()
        if best != self.current or self._index + 1 == len(self.order):
            self.chosen = best  # fewer threads stopped paying (or none are left)
            torch.set_num_threads(best)
        else:
            self._index += 1

    def fastest(self) -> int:
        """The count to keep of those measured: the most threads unless fewer saved more than
        ``FEWER_MUST_SAVE`` of a step."""
        medians = self.medians()
        best = next(n for n in self.order if n in medians)
        for n in self.order:
            if n in medians and medians[n] < (1 - FEWER_MUST_SAVE) * medians[best]:
                best = n
        return best

    def medians(self) -> dict[int, float]:
        """Median step seconds of each count measured so far."""
        return {n: statistics.median(t) for n, t in self.seconds.items() if len(t) >= self.steps}

    def state_dict(self) -> dict[str, Any]:
        return {"cores": self.cores, "steps": self.steps, "seconds": dict(self.seconds),
                "warm": self._warm, "index": self._index, "chosen": self.chosen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue a ``state_dict()`` (one read from a file: every count is checked, a
        ValueError when one is out of range)."""
        cores, steps, index = int(state["cores"]), int(state["steps"]), int(state["index"])
        chosen = state["chosen"]
        if not (1 <= cores <= MAX_THREADS and steps >= 1 and 0 <= index < len(
                thread_candidates(cores)) and (chosen is None or 1 <= int(chosen) <= cores)):
            raise ValueError("a thread picker's state with counts out of range")
        self.cores, self.steps, self.order = cores, steps, thread_candidates(cores)
        self.seconds = {int(k): [float(x) for x in v] for k, v in state["seconds"].items()}
        self._warm, self._index = bool(state["warm"]), index
        self.chosen = None if chosen is None else int(chosen)
        if self.chosen is not None:
            torch.set_num_threads(self.chosen)


@dataclass
class ThreadChoice:
    """How a run's thread count is set: ``source`` is ``--threads``, ``OMP_NUM_THREADS``,
    ``cuda`` (left at torch's default) or ``measured`` (then ``picker`` measures it)."""

    source: str
    picker: ThreadPicker | None = None
    threads: int = field(default_factory=torch.get_num_threads)

    def line(self) -> str:
        """One line for the user: the count and why."""
        if self.picker is None:
            why = {"--threads": "--threads", "OMP_NUM_THREADS": "OMP_NUM_THREADS is set",
                   "cuda": "the GPU trains; threads serve the host's share"}[self.source]
            return f"threads: {self.threads} ({why})"
        if not self.picker.done:
            counts = ", ".join(map(str, self.picker.order))
            return (f"threads: measuring the first steps at {counts} threads, going down while "
                    "fewer are faster (--threads N sets it)")
        return (f"threads: {self.picker.chosen}, the fastest of the first steps ("
                + ", ".join(f"{n}: {1000 * s:.0f} ms" for n, s in self.picker.medians().items())
                + " per step; --threads N sets it)")

    def to_json(self) -> dict[str, Any]:
        """What metrics.json records: the count, its source and the measured medians."""
        threads = self.picker.chosen if self.picker is not None else self.threads
        out: dict[str, Any] = {"threads": threads if threads is not None else
                               torch.get_num_threads(), "source": self.source,
                               "cores": available_cores()}
        if self.picker is not None:
            out["step_s"] = {str(n): s for n, s in self.picker.medians().items()}
        return out


def resolve_threads(threads: int, device: torch.device) -> ThreadChoice:
    """The thread choice of a run: ``threads`` > 0 sets it now; else ``OMP_NUM_THREADS``
    (torchrun sets it to 1 for several processes per machine) keeps torch's count; on a GPU
    torch's default stays; otherwise a ``ThreadPicker`` measures the first steps."""
    if threads > 0:
        torch.set_num_threads(threads)
        return ThreadChoice("--threads", threads=threads)
    if os.environ.get("OMP_NUM_THREADS", "").strip():
        return ThreadChoice("OMP_NUM_THREADS")
    if device.type != "cpu":
        return ThreadChoice("cuda")
    return ThreadChoice("measured", ThreadPicker())
