"""The memory this process may use: the machine's, or less under a cgroup's limit (a container,
or a limit a small device's service manager sets), read without psutil or torch so that the
runtime and edgegcl agree."""

from __future__ import annotations

import os
from pathlib import Path


def memory_total() -> int:
    """Bytes of memory this process may use at most: the machine's physical memory, or less
    under a cgroup memory limit (v1 ``memory.limit_in_bytes`` or v2 ``memory.max`` of the
    process's own group)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # a platform without them: no bound known
        total = 1 << 62
    limit = cgroup_limit()
    return total if limit is None else min(total, limit)


def cgroup_limit() -> int | None:
    """This process's cgroup memory limit in bytes, None without one (or off Linux)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, group = parts
        if "memory" in controllers.split(","):  # v1
            where = Path("/sys/fs/cgroup/memory") / group.lstrip("/") / "memory.limit_in_bytes"
        elif controllers == "":  # v2's unified hierarchy
            where = Path("/sys/fs/cgroup") / group.lstrip("/") / "memory.max"
        else:
            continue
        try:
            text = where.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            return int(text)
    return None
