"""A run directory held by one writer: ``RunLock``, an exclusive ``flock`` on
RUN_DIR/.edgegcl.lock. Standard library alone, so that a job takes it (a resumed run, before
its files are read) before torch loads.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path

from edgegcl import runfiles
from edgegcl.errors import UsageError
from edgegcl_embed.errors import InputError
from edgegcl_embed.files import read_regular

"""The file in a run directory that its writing process holds locked (``RunLock``)."""

class RunLock:
    """This process's hold on a run directory, so that no second process writes it.

    An exclusive ``fcntl.flock`` on RUN_DIR/.edgegcl.lock, taken without waiting (another
    holder is one UsageError line), kept until ``release()`` or the end of the ``with``
    block; the OS drops it when the process ends, by a crash or kill -9 too, and a lock file
    left behind is simply taken again. The file names the holder's pid; ``release()``
    removes it.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir, self.path = Path(run_dir), Path(run_dir) / runfiles.LOCK
        self._fd: int | None = self._acquire()

    def _acquire(self) -> int:
        while True:
            try:  # a planted link or FIFO is refused, never followed or waited on
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                             | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise UsageError(f"{self.path} is a symbolic link; a run directory's lock "
                                     "is never a link: remove it") from None
                raise UsageError(f"cannot lock {self.run_dir} ({exc.strerror}); pick a "
                                 "writable run directory") from None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise UsageError(f"{self.path} is not a regular file; remove it")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise UsageError(f"cannot lock {self.run_dir} ({exc.strerror}); pick a run "
                                     "directory on a local disk") from None
                raise UsageError(f"{self.run_dir} is being written by another edgegcl process"
                                 f"{self._holder()}; wait for it to end (or stop it), or use "
                                 "another run directory") from None
            try:  # the holder may have released (and removed) it as we opened it
                if os.path.samestat(os.fstat(fd), os.stat(self.path)):
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass  # the pid only makes the refusal's message nicer
        return fd

    def _holder(self) -> str:
        try:
            pid = read_regular(self.path, "lock", "", 64).decode().strip()
        except (OSError, UnicodeDecodeError, InputError):
            return ""
        return f" (pid {pid})" if pid.isdigit() else ""

    def release(self) -> None:
        """Give the run directory up (removing the lock file first, while still held)."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> Path:
        return self.run_dir

    def __exit__(self, *exc: object) -> None:
        self.release()
