"""Writing the embeddings: a memory-mapped .npy under a temporary name, renamed when complete."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap

from .errors import InputError


@contextmanager
def npy_writer(path: Path, shape: tuple[int, int]) -> Iterator[np.ndarray]:
    """A float32 array of ``shape`` mapped onto a temporary .npy beside ``path``.

    The caller fills it; on a clean exit the map is flushed, the file fsynced and renamed
    over ``path`` (then the directory fsynced), so ``path`` is either untouched or complete.
    Any exception removes the temporary file. The file's blocks are reserved up front, so a
    full disk is an InputError here rather than a SIGBUS while writing through the map.
    Embeddings larger than memory go to disk page by page.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        array = open_memmap(tmp, mode="w+", dtype=np.float32, shape=shape)
        fd = os.open(tmp, os.O_RDWR)
        try:
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, os.path.getsize(tmp))
            yield array
            array.flush()
            os.fsync(fd)
        finally:
            os.close(fd)
        del array
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write {path} ({exc.strerror or exc}); free space or choose "
                         "another --out") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass
