"""Signals in a job: a Ctrl-C or SIGTERM while starting up is remembered and raised
(``interrupt``, ``INTERRUPTED``: the command line installs it); while training, the first asks
the run to stop after its epoch (``StopAfterEpoch``). Importing this module loads the standard
library alone.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from edgegcl.training.distributed import World


INTERRUPTED: list[int] = []
"""SIGINTs and SIGTERMs received before training took them over (``_interrupt``)."""


def interrupt(signum: int, frame: object) -> NoReturn:
    """Ctrl-C or SIGTERM while starting up (or profiling): remembered, then raised. A module
    being imported when it lands may swallow the KeyboardInterrupt or fail otherwise as it
    unwinds; ``main`` reads any exception after it as the interruption. What the command had
    made is removed on the way out (a new run directory that never trained)."""
    INTERRUPTED.append(signum)
    raise KeyboardInterrupt


class StopAfterEpoch:
    """SIGINT / SIGTERM handler while training: the first asks the run to stop after the
    epoch (its state saved), a second one stops at once (not under torchrun, where Ctrl-C
    reaches every rank and torchrun then sends SIGTERM). ``installed()`` sets it for a block."""

    def __init__(self, world: World | None, main: bool) -> None:
        self.world, self.main = world, main
        self.signals: list[int] = []

    def __call__(self, signum: int, frame: object) -> None:
        if self.signals:
            if self.world is not None:
                return
            raise KeyboardInterrupt  # a second signal: stop now, without saving
        self.signals.append(signum)
        if self.main:
            print("\nedgegcl: stopping after this epoch, once its state is saved"
                  + (" (signal again to stop at once)" if self.world is None else ""),
                  file=sys.stderr)

    def __bool__(self) -> bool:
        return bool(self.signals)

    @contextmanager
    def installed(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
