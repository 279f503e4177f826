"""Peak memory of a block of work, on the device it runs on.

CUDA: the caching allocator's own account (``max_memory_allocated`` after
``reset_peak_memory_stats``), exact and free to read. CPU: the process's resident set size,
sampled by a background thread with psutil (there is no allocator counter for the CPU), above
the RSS when the block starts; ``release_cpu_memory`` first hands freed heap pages back to the
OS so that an earlier, larger block does not hide this one's growth.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time
from types import TracebackType

import psutil
import torch

from edgegcl.errors import UsageError
from edgegcl_embed.memory import cgroup_limit

_LIBC_NAME = ctypes.util.find_library("c")
_LIBC = ctypes.CDLL(_LIBC_NAME) if _LIBC_NAME else None
if _LIBC is not None and not hasattr(_LIBC, "malloc_trim"):
    _LIBC = None  # not glibc

SAMPLE_INTERVAL_S = 0.002
"""RSS sampling period: a step of the smallest graphs we profile lasts tens of milliseconds."""


def memory_limit() -> int:
    """Bytes of memory available now: the most that a size read from the user's input (a
    file's length, a declared shape, a width) may ask for before it is allocated. The
    machine's available memory, or less under a cgroup memory limit (what the group still
    allows beyond this process's resident set: a container, a service's cap) or an
    address-space limit (``ulimit -v``, RLIMIT_AS: what this process may still map)."""
    free = int(psutil.virtual_memory().available)
    group = cgroup_limit()
    if group is not None:
        free = min(free, max(0, group - int(psutil.Process().memory_info().rss)))
    try:
        import resource  # Unix only: elsewhere there is no such limit to read

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):  # no such limit on this system
        return free
    if soft == resource.RLIM_INFINITY:
        return free
    return max(0, min(free, soft - psutil.Process().memory_info().vms))


def check_allocation(nbytes: float, what: str, fix: str) -> None:
    """One UsageError line when ``nbytes`` (what ``what`` would take) exceeds the memory
    available now, before anything is allocated, instead of an allocator's traceback."""
    free = memory_limit()
    if not nbytes <= free:  # NaN and inf too
        raise UsageError(f"{what} would take {nbytes / 2**30:.3g} GiB, more than the "
                         f"{free / 2**30:.3g} GiB of memory available; {fix}")


def release_cpu_memory() -> None:
    """Return free heap pages to the OS (glibc ``malloc_trim``; a no-op elsewhere), so RSS
    reflects live memory before a measurement starts.

    Tensors are freed by reference counting, so no garbage collection is run here: with torch
    loaded a ``gc.collect()`` takes about 150 ms, which once per training epoch would cost a
    Cora run 30 % of its wall time. Callers that may hold reference cycles (the profiler
    after an out-of-memory error) collect first.
    """
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # mallopt parameters, <malloc.h>
KEEP_HEAP_ENV = "EDGEGCL_MALLOC"
"""Set to ``system`` to leave glibc's allocator settings alone (``reuse_freed_memory``)."""


def reuse_freed_memory() -> bool:
    """Serve every allocation from the heap and keep freed pages for the next step (glibc).

    By default glibc maps each allocation above 32 MiB (a step's similarity blocks and
    hidden activations) afresh and unmaps it when freed, so every step pays a page fault per
    4 KiB of them: about 40 % of a mini-batch step's encoder time here
    (docs/performance.md). With ``M_MMAP_MAX = 0`` and no automatic trimming the pages stay
    mapped and are reused; the RSS then stays at the run's peak instead of falling between
    steps (``release_cpu_memory`` still hands free pages back on demand). Called by
    ``edgegcl train`` and ``edgegcl profile``; returns whether the settings took effect (not
    on other C libraries, or with ``EDGEGCL_MALLOC=system``).
    """
    if _LIBC is None or not hasattr(_LIBC, "mallopt") or os.environ.get(KEEP_HEAP_ENV) == "system":
        return False
    return bool(_LIBC.mallopt(_M_MMAP_MAX, 0)) and bool(
        _LIBC.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def current_bytes(device: torch.device) -> int:
    """Memory in use now: tensors allocated on a CUDA device, or this process's RSS (after
    ``release_cpu_memory``, so freed heap pages do not count)."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    release_cpu_memory()
    return psutil.Process().memory_info().rss


class PeakMemory:
    """Context manager: ``peak_bytes`` is the peak memory of the block above a baseline.

    ``with PeakMemory(device) as m: work()`` then read ``m.peak_bytes``; on CUDA it counts
    tensors allocated on that device, on CPU the process's RSS. The baseline is the level at
    entry, or ``baseline`` (from ``current_bytes``) when given: a training loop measures each
    epoch against the level before its model was built, so what it keeps between epochs
    (weights, optimiser state, cached negatives) counts, as it does in the profiler.
    """

    def __init__(self, device: torch.device, baseline: int | None = None) -> None:
        self.device = device
        self.peak_bytes = 0
        self._baseline = baseline
        self._base = 0
        self._peak_rss = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        else:  # with a baseline, no trim: freed pages kept for reuse would fault in again
            self._base = (current_bytes(self.device) if self._baseline is None
                          else psutil.Process().memory_info().rss)
            self._peak_rss = self._base
            self._thread = threading.Thread(target=self._sample, args=(psutil.Process(),),
                                            daemon=True)
            self._thread.start()
        if self._baseline is not None:
            self._base = self._baseline
        return self

    def _sample(self, proc: psutil.Process) -> None:
        while not self._stop.is_set():
            self._peak_rss = max(self._peak_rss, proc.memory_info().rss)
            time.sleep(SAMPLE_INTERVAL_S)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
        else:
            self._stop.set()
            assert self._thread is not None
            self._thread.join()
            peak = max(self._peak_rss, psutil.Process().memory_info().rss)
        self.peak_bytes = max(0, peak - self._base)
