"""Crash-safe files: atomic writes, a run directory's lock and configuration hash, and a seed's
complete training state for ``--resume``.

Every file a run writes goes through ``write_atomic`` / ``save_atomic`` (edgegcl_embed.files
``replacing``: a temporary file of this process's beside the target, fsynced, then renamed
over it), so a kill at any instant leaves either the previous complete file or the new one,
and a full or read-only disk is one line. One process at a time writes a run directory: it
holds ``RunLock``. Every seed file names the configuration it was trained under
(``config_hash``), so ``--resume`` refuses one copied from another run. A seed's state
(``seed-K/state.pt``) holds everything its next epoch depends on (the engine's state, the
selector's kept strata, the loader's random streams, the probes so far and the best
checkpoint), as plain tensors and Python values: ``torch.load(weights_only=True)`` reads it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import stat
import warnings
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from edgegcl.config import to_toml
from edgegcl.training.config import FIELDS, RESUMABLE, TrainConfig
from edgegcl.errors import UsageError
from edgegcl_embed.errors import InputError, shown
from edgegcl_embed.files import open_regular, read_regular, refusals, replacing

if TYPE_CHECKING:
    from torch_geometric.loader import NodeLoader

STATE_FORMAT = "edgegcl-seed-state-1"

UNHASHED = (*RESUMABLE, "out")
"""Fields ``config_hash`` leaves out: what a resume may change, and where the run lives."""
LOCK_NAME = ".edgegcl.lock"
"""The file in a run directory that its writing process holds locked (``RunLock``)."""

_WRITE_HINT = "free space or pick a writable --out (the previous files are intact)"


def config_hash(cfg: TrainConfig) -> str:
    """SHA-256 of the configuration as config.toml writes it (``to_toml``) without
    ``UNHASHED``: the identity of the training a seed file belongs to,
    stored in state.pt, result.pt and checkpoint.pt."""
    defaults = {name: FIELDS[name].default for name in UNHASHED}
    return hashlib.sha256(to_toml(replace(cfg, **defaults)).encode()).hexdigest()


def check_config(path: Path, saved: dict[str, Any], cfg: TrainConfig) -> None:
    """Refuse, in one line, a seed file trained under another configuration than ``cfg``.

    A state names the fields that differ (it keeps its configuration)."""
    stored = saved.get("config_hash")
    if stored == config_hash(cfg):
        return
    if stored is None:
        raise UsageError(f"{path} carries no configuration hash: it was not written by this "
                         "version of edgegcl; remove it to train that seed afresh")
    theirs, ours = saved.get("config"), cfg.to_dict()
    differ = [f"{k} {theirs[k]!r} there, {ours[k]!r} here" for k in ours
              if isinstance(theirs, dict) and k not in UNHASHED and k in theirs
              and theirs[k] != ours[k]]
    raise UsageError(f"{path} was trained under another configuration than this run's "
                     f"config.toml{' (' + '; '.join(differ[:3]) + ')' if differ else ''}: it "
                     "comes from another run; remove it to train that seed afresh")


_HELD: set[str] = set()
"""The run directories this process holds locked (``RunLock.held``)."""


class RunLock:
    """This process's hold on a run directory, so that no second process writes it.

    An exclusive ``fcntl.flock`` on RUN_DIR/.edgegcl.lock, taken without waiting (another
    holder is one UsageError line), kept until ``release()`` or the end of the ``with``
    block; the OS drops it when the process ends, by a crash or kill -9 too, and a lock file
    left behind is simply taken again. The file names the holder's pid; ``release()``
    removes it.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir, self.path = Path(run_dir), Path(run_dir) / LOCK_NAME
        self._fd: int | None = self._acquire()
        self._key = os.path.realpath(self.run_dir)
        _HELD.add(self._key)

    @staticmethod
    def held(run_dir: Path) -> bool:
        """Whether this process holds ``run_dir``'s lock (a job locked it, then trains)."""
        return os.path.realpath(run_dir) in _HELD

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
        _HELD.discard(self._key)

    def __enter__(self) -> Path:
        return self.run_dir

    def __exit__(self, *exc: object) -> None:
        self.release()


def guard_writes(path: Path) -> AbstractContextManager[None]:
    """For the writes to ``path`` that are not replacements (an append, a new directory): a
    disk that refuses them is one line, as with ``write_atomic``."""
    return refusals([path], UsageError, _WRITE_HINT)


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` (UTF-8) atomically."""
    with replacing([path], UsageError, _WRITE_HINT) as (tmp,):
        tmp.write_bytes(text.encode())


def save_atomic(obj: Any, path: Path) -> None:
    """``torch.save(obj)`` to ``path`` atomically."""
    with replacing([path], UsageError, _WRITE_HINT) as (tmp,), tmp.open("wb") as fh:
        torch.save(obj, fh)


def loader_state(loader: NodeLoader | None) -> dict[str, Any]:
    """The random streams of a mini-batch loader: its seed order and, for the built-in
    sampler, its neighbour draws (PyG's sampler draws from the global stream, saved too)."""
    if loader is None:
        return {}
    out: dict[str, Any] = {}
    order = getattr(loader, "sampler", None)
    if hasattr(order, "generator"):
        out["order"] = order.generator.get_state()
    sampler = getattr(loader, "node_sampler", None)
    if hasattr(sampler, "_generator"):
        out["neighbours"] = sampler._generator.get_state()
    return out


def load_loader_state(loader: NodeLoader | None, state: dict[str, Any]) -> None:
    if loader is None:
        return
    if "order" in state:
        loader.sampler.generator.set_state(state["order"])  # type: ignore[attr-defined]
    if "neighbours" in state:
        loader.node_sampler._generator.set_state(state["neighbours"])  # type: ignore[attr-defined]


def load_tensors(path: Path, what: str, fix: str) -> Any:
    """``torch.load(weights_only=True)`` of a regular file no larger than the memory available
    (a FIFO, device or oversized file is one UsageError line naming ``what``); torch's own
    errors for a damaged file pass through for the caller to name."""
    from edgegcl.memory import memory_limit

    with open_regular(path, what, fix, memory_limit(), UsageError) as fh, \
            warnings.catch_warnings():
        # torch's deprecation notes (TypedStorage, for a quantised tensor) are not the user's
        # to act on: the values are judged by the caller, in one line
        warnings.simplefilter("ignore", UserWarning)
        return torch.load(fh, map_location="cpu", weights_only=True)


def odd_tensor(value: Any, where: str = "", depth: int = 0) -> str | None:
    """The first tensor in ``value`` (dicts, lists and tuples walked) that no saved state
    holds: sparse, quantised, on the meta device, or floating with NaN or inf; where it is
    and what it is, or None. A loaded state is checked before anything uses its values."""
    if depth > 32:
        return f"{where or 'the state'} is nested more than 32 deep"
    if isinstance(value, torch.Tensor):
        kind = ("a sparse" if value.layout != torch.strided else
                "a quantised" if value.is_quantized else
                "a meta" if value.is_meta else None)
        if kind is None and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            kind = "a non-finite"
        return None if kind is None else f"{where or 'the state'} is {kind} tensor"
    items = (value.items() if isinstance(value, dict) else
             enumerate(value) if isinstance(value, (list, tuple)) else ())
    for key, inner in items:
        found = odd_tensor(inner, f"{where}[{key!r}]" if where else repr(key), depth + 1)
        if found is not None:
            return found
    return None


def read_state(path: Path) -> dict[str, Any]:
    """A seed's ``state.pt``, or one line naming the problem (truncated, foreign)."""
    fix = "remove it to restart that seed from epoch 0"
    try:
        raw = load_tensors(path, "seed state", fix)
    except UsageError:
        raise
    except Exception:  # torch raises many types for truncated or unsafe files
        raise UsageError(f"{path} cannot be read: it is truncated or not edgegcl's; {fix}"
                         ) from None
    if not isinstance(raw, dict) or raw.get("format") != STATE_FORMAT:
        raise UsageError(f"{path} is not an edgegcl seed state (format {STATE_FORMAT!r}); "
                         "remove it to restart that seed from epoch 0")
    odd = odd_tensor(raw)
    if odd is not None:
        raise UsageError(f"{path} holds what no seed state holds ({shown(odd, 160)}); {fix}")
    return raw
