"""Arrays of N rows in files the page cache holds, for work over every node of a graph on disk.

A layer-by-layer embedding of every node holds whole layers (N x width); on a graph folder they
grow with the graph, so they go to memory-mapped files instead, whose pages the kernel may
write back and drop under memory pressure: the process's own memory stays bounded by the
block. The files are made exclusively and unlinked at once, so nothing is left behind when
the array is freed or the process is killed. An array written front to back and read at
scattered rows is mapped to read one page at a time (``MADV_RANDOM``: reading ahead of a
scattered row brings in pages nobody asked for and, under a cap, evicts the ones in use); one
larger than half the memory this process may use comes with its ``MappedRows``, so that a
block can ask for the rows it is about to read at once, as a folder's features are.
(edgegcl.scratch hands the same files to torch.)
"""

from __future__ import annotations

import mmap
import os
import tempfile
from pathlib import Path

import numpy as np

from .folder import MappedRows
from .memory import memory_total

__all__ = ["mapped_array"]


def mapped_array(folder: str | Path, rows: int, cols: int, scattered: bool = True
                 ) -> tuple[np.ndarray, MappedRows | None]:
    """An uninitialised float32 [rows, cols] array in a file made exclusively in ``folder``
    and unlinked at once, and the ``MappedRows`` that reads its rows ahead (None unless it is
    ``scattered`` and larger than half the memory this process may use). ``scattered``: read
    at scattered rows (one page at a time), else front to back (the kernel's own read-ahead).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     array, _ = mapped_array(folder, 3, 2)
        ...     array.shape, sorted(Path(folder).iterdir())
        ((3, 2), [])
    """
    size = rows * cols * 4
    if size == 0:
        return np.empty((rows, cols), dtype=np.float32), None
    fd, name = tempfile.mkstemp(prefix=".scratch-", dir=folder)
    try:
        os.unlink(name)
        os.ftruncate(fd, size)  # a sparse file: nothing is written until a row is
        mapping = mmap.mmap(fd, size)
    finally:
        os.close(fd)
    if scattered and hasattr(mapping, "madvise") and hasattr(mmap, "MADV_RANDOM"):
        mapping.madvise(mmap.MADV_RANDOM)
    array = np.frombuffer(mapping, dtype=np.float32).reshape(rows, cols)
    read_ahead = (MappedRows(mapping, 0, cols * 4)
                  if scattered and size > memory_total() // 2 else None)
    return array, read_ahead
