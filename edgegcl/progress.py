"""A dependency-free progress line for long loops.

On a terminal it redraws one line in place; elsewhere (CI logs, pipes) it prints a line at
most every ``every_s`` seconds, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``update(done, text)`` shows ``label [####.....] done/total text``; ``close()`` ends it."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None,
                 every_s: float = 10.0, width: int = 24) -> None:
        self.total, self.label, self.width, self.every_s = total, label, width, every_s
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self._last = -float("inf")
        self._open = False

    def update(self, done: int, text: str = "") -> None:
        now = time.monotonic()
        if not self.tty and now - self._last < self.every_s and done < self.total:
            return
        self._last = now
        filled = self.width * done // max(self.total, 1)
        bar = "#" * filled + "." * (self.width - filled)
        line = f"{self.label} [{bar}] {done}/{self.total} {text}"
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
