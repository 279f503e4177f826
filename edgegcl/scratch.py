"""Buffers of N rows for work over every node: in memory, or in files the page cache holds.

An all-node embedding holds whole layers (N x width) and a probe its training rows (a tenth of
N); on a graph on disk (edgegcl.data.folder) they grow with the graph, so they go to mapped
files instead (``mapped_scratch``), whose pages the kernel may write back and drop under
memory pressure: the process's own memory stays bounded by the batch. Such a buffer is written
front to back and read at scattered rows (all-node layers), so its mapping reads one page at a time
(``MADV_RANDOM``: reading ahead of a scattered row brings in pages nobody asked for and, under
a cap, evicts the ones in use), and a buffer larger than half the memory this process may use
has the rows a chunk is about to read asked for at once (``prefetch``), as a folder's features
are.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from edgegcl_embed.folder import MappedRows
from edgegcl_embed.scratch import mapped_array

__all__ = ["Scratch", "in_memory", "mapped_scratch", "prefetch"]

Scratch = Callable[[int, int], Tensor]
"""Makes an uninitialised [rows, cols] float32 buffer."""

_READ_AHEAD: dict[int, MappedRows] = {}
"""The mapped buffers whose rows are read ahead, by their tensors' data pointers."""


def in_memory(device: torch.device) -> Scratch:
    """The ``Scratch`` of tensors in memory on ``device``."""
    return lambda rows, cols: torch.empty(rows, cols, device=device)


def mapped_scratch(folder: str | Path, scattered: bool = True) -> Scratch:
    """A ``Scratch`` whose buffers are memory-mapped files made exclusively in ``folder`` and
    unlinked at once: their pages are file-backed, not the process's memory, and nothing is
    left behind when the tensor is freed or the process ends. ``scattered``: the buffers are
    read at scattered rows (all-node layers: read one page at a time, and ahead by
    ``prefetch`` where large), else front to back (a probe's training rows: the kernel's
    own read-ahead).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     rows = mapped_scratch(folder)(3, 2)
        ...     rows.shape, sorted(Path(folder).iterdir())
        (torch.Size([3, 2]), [])
    """
    def allocate(rows: int, cols: int) -> Tensor:
        array, read_ahead = mapped_array(folder, rows, cols, scattered)
        tensor = torch.from_numpy(array)
        if read_ahead is not None:
            key = tensor.data_ptr()
            _READ_AHEAD[key] = read_ahead
            weakref.finalize(tensor, _READ_AHEAD.pop, key, None)
        return tensor
    return allocate


def prefetch(buffer: Tensor, rows: Tensor) -> None:
    """Ask for ``rows`` of a mapped buffer larger than half the memory this process may use at
    once (``MappedRows.prefetch``), before they are gathered; nothing for any other tensor."""
    if buffer.layout != torch.strided:
        return
    found = _READ_AHEAD.get(buffer.data_ptr())
    if found is not None and buffer.dim() == 2 and buffer.size(1) * 4 == found.row_bytes:
        found.prefetch(rows.numpy())
