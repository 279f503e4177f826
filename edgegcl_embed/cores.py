"""The cores this process may use: what the runtime's threads and training's thread chooser
start from, without loading onnxruntime (training reads it too)."""

from __future__ import annotations

import os

__all__ = ["available_cores"]


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count).

    Example:
        >>> available_cores() >= 1
        True
    """
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
