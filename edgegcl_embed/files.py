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
import secrets
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np
from numpy.lib.format import open_memmap

from .errors import InputError, shown

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


def describe_open_error(exc: OSError) -> str:
    """What an OSError from opening a path says about that path, in a few words."""
    if exc.errno == errno.ELOOP:
        return "is a symlink loop"
    if exc.errno == errno.ENAMETOOLONG:
        return "has a name too long for the file system"
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return "does not exist"
    if exc.errno == errno.EISDIR:
        return "is a directory, not a file"
    return f"cannot be opened ({exc.strerror or exc})"


def open_checked(path: Path, limit: int) -> tuple[BinaryIO | None, str]:
    """``path`` opened for reading when it is a regular file of at most ``limit`` bytes, else
    None and what it is instead ("is a FIFO ...", "does not exist", ...).

    Opened without blocking and checked on the open descriptor (no race between a check and
    the read): a FIFO, socket or device (which a reader would wait on, or read forever), a
    directory, a missing file or one over ``limit`` is refused. A symlink the user named is
    followed; its target is checked.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return None, describe_open_error(exc)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            problem = "is a directory, not a file"
        elif not stat.S_ISREG(info.st_mode):
            problem = "is not a regular file (a FIFO, socket or device)"
        elif info.st_size > limit:
            problem = f"is {info.st_size} bytes, more than the {limit} such a file can hold"
        else:
            os.set_blocking(fd, True)
            return os.fdopen(fd, "rb"), ""
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None, problem


def open_regular(path: Path, what: str, fix: str, limit: int,
                 error: type[Exception] = InputError) -> BinaryIO:
    """``path`` opened for reading (``open_checked``), or one ``error`` line naming ``what``
    and ``path``, what it is instead, and ending in ``fix``."""
    fh, problem = open_checked(path, limit)
    if fh is None:
        raise error(f"{what} {path} {problem}; {fix}")
    return fh


def refuse_holes(fh: BinaryIO, path: Path, what: str,
                 error: type[Exception] = InputError) -> None:
    """One ``error`` line when the file ``fh`` has unwritten regions (holes: made by
    ``truncate`` or a seek past its end), which read as NUL bytes no text table holds: refused
    before a byte is read, not after a whole parse. Nothing where the system cannot tell."""
    hole = getattr(os, "SEEK_HOLE", None)
    if hole is None:
        return
    fd = fh.fileno()
    size = os.fstat(fd).st_size
    try:
        at = os.lseek(fd, 0, hole)
    except OSError:  # a file system that cannot say
        return
    finally:
        os.lseek(fd, 0, os.SEEK_SET)
    if at < size:
        raise error(f"{what} {path} has unwritten regions (the first at byte {at} of {size}: "
                    "a file made with truncate, or cut short while written); write it again")


def read_regular(path: Path, what: str, fix: str, limit: int,
                 error: type[Exception] = InputError, text: bool = False) -> bytes:
    """The bytes of ``path`` (``open_regular``'s checks), never more than ``limit``: a file
    that grows while it is read is cut there and refused; ``text``: a file with holes is
    refused before it is read (``refuse_holes``)."""
    with open_regular(path, what, fix, limit, error) as fh:
        if text:
            refuse_holes(fh, path, what, error)
        try:
            data = _read_bounded(fh, limit)
        except OSError as exc:
            raise error(f"{what} {path} cannot be read ({exc.strerror or exc}); {fix}") from None
    if len(data) > limit:
        raise error(f"{what} {path} is more than the {limit} bytes such a file can hold; {fix}")
    return data


def _read_bounded(fh: BinaryIO, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``fh``, reserving memory for what the file holds (its
    size, then 1 MiB at a time if it grows), not for ``limit``: under an address-space limit
    a 2 GiB reservation fails before a small file is read."""
    want = min(os.fstat(fh.fileno()).st_size, limit) + 1
    first = fh.read(want)
    if len(first) < want:  # the whole file, as its size said
        return first
    data = bytearray(first)
    while len(data) <= limit:
        chunk = fh.read(min(1 << 20, limit + 1 - len(data)))
        if not chunk:
            break
        data += chunk
    return bytes(data)


TEMP_SUFFIX = ".tmp"


def temp_name(target: Path) -> Path:
    """A fresh temporary path beside ``target``, created empty and exclusively (O_EXCL,
    O_NOFOLLOW: nothing planted at that name is opened): ``.NAME.PID.RANDOM.tmp``."""
    while True:
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644)
        except FileExistsError:
            continue
        os.close(fd)
        return tmp


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphan_temps(target: Path) -> None:
    """Remove the temporaries a killed writer of ``target`` left beside it (``temp_name``'s
    names whose process is gone); a live writer's are kept. Links are removed, not followed."""
    try:
        names = os.listdir(target.parent)
    except OSError:
        return
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(\d+)(?:\.[0-9a-f]+)?{re.escape(TEMP_SUFFIX)}$")
    for name in names:
        match = pattern.match(name)
        if match is None:
            continue
        pid = int(match.group(1))
        if pid != os.getpid() and not _pid_alive(pid):  # our own are in use
            _remove(target.parent / name)


def refuse_link(path: Path, what: str, error: type[Exception] = InputError) -> None:
    """One ``error`` line when ``path`` is a symbolic link: a file or folder a run writes is
    never reached through a link planted in a directory it received."""
    if path.is_symlink():
        raise error(f"{what} {path} is a symbolic link; edgegcl does not write through links "
                    "in a run's files: remove the link (or pick another output)")


def refuse_planted_links(run_dir: Path, error: type[Exception] = InputError) -> None:
    """One line when an entry of ``run_dir`` or of its ``seed-*`` folders is a symbolic link:
    a run directory's files are never read (nor written) through a link planted in it, so a
    received run cannot make edgegcl read a file elsewhere. ``run_dir`` itself, which the user
    named, may be a link; one ``error`` line names the link."""
    try:
        entries = list(os.scandir(run_dir))
        for entry in list(entries):
            if entry.name.startswith("seed-") and entry.is_dir(follow_symlinks=False):
                entries.extend(os.scandir(entry.path))
    except OSError:
        return  # a missing or unreadable folder is for the reader to name
    planted = next((e for e in entries if e.is_symlink()), None)
    if planted is not None:
        raise error(f"{shown(planted.path, 200)} is a symbolic link; edgegcl does not read "
                         "through links in a run's files: remove the link (or copy what it "
                         "points to in its place)")


def run_files(run_dir: Path) -> list[Path]:
    """The entries of a run directory and of its ``seed-*`` folders (listed, not walked: a
    command that reads a run treats them all as its inputs, which no output may replace)."""
    try:
        top = list(run_dir.iterdir())
        return top + [p for d in top if d.name.startswith("seed-") and d.is_dir()
                      and not d.is_symlink() for p in d.iterdir()]
    except OSError:
        return []


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths reach the same file: through links, hard links or ``..``."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): the same name, resolved
        return os.path.realpath(a) == os.path.realpath(b)


def refuse_inputs_as_outputs(outputs: Sequence[Path], inputs: Sequence[Path],
                             error: type[Exception] = InputError) -> None:
    """One line when an output would replace one of the command's inputs (``--force`` or
    not): a run's checkpoint, the graph being embedded, the model reading it."""
    for out in outputs:
        for given in inputs:
            if same_file(Path(out), Path(given)):
                raise error(f"{out} is {given}, which this command reads; write the output "
                            "elsewhere (--force never replaces an input)")


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

    The caller writes the temporaries, each created empty and exclusively beside its target
    (``temp_name``), after the orphans of a killed writer are removed. When the block ends
    cleanly each is fsynced and renamed over its target, then the directories are fsynced, so
    every target is either untouched or complete. A target that is a symbolic link is refused
    (a planted link is never written through, nor silently replaced). Any exception removes
    the temporaries and leaves the targets as they were; a refused write is one ``error`` line
    (``refusals``).
    """
    for target in targets:
        refuse_link(target, "output", error)
    temps: list[Path] = []
    with refusals(targets, error, hint):
        try:
            for target in targets:
                remove_orphan_temps(target)
                temps.append(temp_name(target))
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
