"""Where a training step's time goes: a clock that splits steps into named phases.

``Trainer.train_step(..., clock=PhaseClock(device))`` marks the end of each phase (the device is
synchronised first, so a CUDA kernel counts in the phase that launched it); the profiler and
``bench.budgets`` report the mean seconds per step of each phase beside the totals, so a ratio
between two budgets says where the time went.

Example:
    >>> clock = PhaseClock(torch.device("cpu"))
    >>> clock.start()
    >>> _ = torch.ones(3).sum()
    >>> clock.mark("loss forward")
    >>> clock.steps = 1
    >>> clock.mean()["loss forward"] > 0.0
    True
"""

from __future__ import annotations

import time

import torch

PHASES = ("sample", "encoder forward", "similarities", "strata", "loss forward",
          "loss backward", "encoder backward", "optimiser")
"""A step in order: the sampler's batch (mini-batch mode); augmentation, GCN encoder and
projection head forward; the dense similarity blocks (dense path; the pairs path computes its
similarities inside 'strata'); stratification and drawing of the active negatives (the
selector: at a refresh only); Eq. 6 forward; its backward down to the projections; the
backward through head and encoder; the optimiser's update."""


class PhaseClock:
    """Accumulates seconds per phase over steps; ``mark(phase)`` ends a phase.

    Args:
        device: where the step runs (CUDA is synchronised at every mark).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.steps = 0
        self._last = time.perf_counter()

    def start(self) -> None:
        """Begin timing: the next ``mark`` measures from here."""
        self._sync()
        self._last = time.perf_counter()

    def mark(self, phase: str) -> None:
        """End ``phase`` (one of PHASES) now and start the next."""
        self._sync()
        now = time.perf_counter()
        self.seconds[phase] += now - self._last
        self._last = now

    def mean(self) -> dict[str, float]:
        """Mean seconds per step of each phase (``steps`` counts the steps timed)."""
        return {p: s / max(self.steps, 1) for p, s in self.seconds.items()}

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
