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
import gc
import threading
import time
from types import TracebackType

import psutil
import torch

SAMPLE_INTERVAL_S = 0.002
"""RSS sampling period: a step of the smallest graphs we profile lasts tens of milliseconds."""


def release_cpu_memory() -> None:
    """Collect garbage and return free heap pages to the OS (glibc ``malloc_trim``; a no-op
    elsewhere), so RSS reflects live memory before a measurement starts."""
    gc.collect()
    name = ctypes.util.find_library("c")
    if name:
        libc = ctypes.CDLL(name)
        if hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)


class PeakMemory:
    """Context manager: ``peak_bytes`` is the peak memory above the level at entry.

    ``with PeakMemory(device) as m: work()`` then read ``m.peak_bytes``; on CUDA it counts
    tensors allocated on that device, on CPU the process's RSS.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.peak_bytes = 0
        self._base = 0
        self._peak_rss = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        else:
            release_cpu_memory()
            proc = psutil.Process()
            self._base = self._peak_rss = proc.memory_info().rss
            self._thread = threading.Thread(target=self._sample, args=(proc,), daemon=True)
            self._thread.start()
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
