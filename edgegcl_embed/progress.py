"""A dependency-free progress line for long loops (edgegcl and the torch-free runtime).

On a terminal it redraws one line in place; elsewhere (CI logs, pipes) it prints a line at
most every ``every_s`` seconds, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def clock(seconds: float) -> str:
    """``1:02:03``, ``4:05`` or ``0:07``: a duration for a progress line."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """``update(done, text)`` shows ``label [####.....] done/total elapsed, ETA left | text``;
    ``close()`` ends it. ``done`` may be fractional (an epoch part-way through its batches):
    the estimate of the time left is the mean time per unit so far, times the units left.
    ``start``: units already done before this line began (a resumed run), left out of the
    rate. ``enabled=False`` shows nothing (ranks other than 0 under torchrun)."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None,
                 every_s: float = 10.0, width: int = 24, start: float = 0.0,
                 enabled: bool = True) -> None:
        self.enabled = enabled
        self.total, self.label, self.width, self.every_s = total, label, width, every_s
        self.start = start
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self._start = time.monotonic()
        self._last = -float("inf")
        self._open = False

    def update(self, done: float, text: str = "") -> None:
        now = time.monotonic()
        if not self.enabled:
            return
        if not self.tty and now - self._last < self.every_s and done < self.total:
            return
        self._last = now
        filled = int(self.width * done // max(self.total, 1))
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = now - self._start
        rate_done = done - self.start
        left = (f", ETA {clock(elapsed / rate_done * (self.total - done))}"
                if 0 < rate_done and done < self.total else "")
        line = (f"{self.label} [{bar}] {int(done)}/{self.total} {clock(elapsed)}{left}"
                + (f" | {text}" if text else ""))
        self._open = self.tty and done < self.total
        self.stream.write(("\r" + line + "\x1b[K") if self.tty else line + "\n")
        if self.tty and not self._open:
            self.stream.write("\n")
        self.stream.flush()

    def close(self) -> None:
        if self._open:
            self.stream.write("\n")
            self._open = False
            self.stream.flush()
