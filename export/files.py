"""Atomic file replacement, shared by the runtime and by ``edgegcl train`` / ``edgegcl export``.

``replacing`` is the one helper every written file goes through: the caller writes temporary
files beside the targets (named for this process, so two writers never share one), which are
fsynced and renamed over the targets only when the writing finished, so a target is either
its previous self or complete. A disk that refuses the write (full, read-only, no permission,
over quota) is one line in the caller's error type (``refusals``, which also guards the few
writes that are not replacements: appends, new directories). Standard library and numpy only: the
runtime needs no torch.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap

from .errors import InputError

REFUSED = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT)
"""The errnos of a disk that refuses a write; torch's RuntimeError names them only in text."""


def refused_write(exc: BaseException, depth: int = 4) -> str | None:
    """Why a write failed when the system refused it, else None (a bug keeps its traceback).

    Any OSError counts; a RuntimeError counts when its message (or the exception it wraps)
    names one of ``REFUSED``, as torch.save's does for a full or read-only disk.
    """
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    if not isinstance(exc, RuntimeError) or depth == 0:
        return None
    text = str(exc)
    for code in REFUSED:
        if os.strerror(code) in text or re.search(rf"errno\W*{code}\b", text, re.I):
            return os.strerror(code)
    inner = exc.__cause__ or exc.__context__
    return None if inner is None else refused_write(inner, depth - 1)


def _remove(path: Path) -> None:
    """Remove a temporary file; a failure (a read-only disk) must not hide the first error."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _fsync(path: Path) -> None:
    """Flush a file (or a directory: a rename in it) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def refusals(targets: Sequence[Path], error: type[Exception] = InputError,
             hint: str = "free space or choose another --out") -> Iterator[None]:
    """Writing ``targets``: an exception that says the system refused the write
    (``refused_write``) is raised as ``error("cannot write TARGETS (why); hint")``, one line;
    anything else as it is."""
    try:
        yield
    except BaseException as exc:
        why = refused_write(exc)
        if why is None:
            raise
        names = ", ".join(str(t) for t in targets)
        raise error(f"cannot write {names} ({why}); {hint}") from None


@contextmanager
def replacing(targets: Sequence[Path], error: type[Exception] = InputError,
              hint: str = "free space or choose another --out") -> Iterator[list[Path]]:
    """Replace ``targets`` atomically: yields one temporary path per target, beside it.

    The caller writes the temporaries. When the block ends cleanly each is fsynced and
    renamed over its target, then the directories are fsynced, so every target is either
    untouched or complete. Any exception removes the temporaries and leaves the targets as
    they were; a refused write is one ``error`` line (``refusals``).
    """
    temps = [t.with_name(f".{t.name}.{os.getpid()}.tmp") for t in targets]
    with refusals(targets, error, hint):
        try:
            yield temps
            for tmp in temps:
                _fsync(tmp)
            for tmp, target in zip(temps, targets):
                os.replace(tmp, target)
        except BaseException:
            for tmp in temps:
                _remove(tmp)
            raise
    for folder in dict.fromkeys(t.parent for t in targets):
        try:  # make the renames themselves durable
            _fsync(folder)
        except OSError:
            pass


@contextmanager
def npy_writer(path: Path, shape: tuple[int, int]) -> Iterator[np.ndarray]:
    """A float32 array of ``shape`` mapped onto a temporary .npy beside ``path``.

    The caller fills it; on a clean exit the map is flushed and the file replaces ``path``
    (``replacing``), so ``path`` is either untouched or complete. The file's blocks are
    reserved up front, so a full disk is an InputError here rather than a SIGBUS while
    writing through the map. Embeddings larger than memory go to disk page by page.
    """
    with replacing([path]) as (tmp,):
        array = open_memmap(tmp, mode="w+", dtype=np.float32, shape=shape)
        if hasattr(os, "posix_fallocate"):
            fd = os.open(tmp, os.O_RDWR)
            try:
                os.posix_fallocate(fd, 0, os.path.getsize(tmp))
            finally:
                os.close(fd)
        yield array
        array.flush()
        del array
