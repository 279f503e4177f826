"""The run directory a command makes: named by the dataset's canonical name, and removed with
what was written into it when the command fails before the run has really started.

A user who mistyped a flag, or whose machine lacks a sampler, should find nothing to clean up;
a run that trained an epoch keeps its directory, whatever ends it, since ``--resume`` can go on
from there. Importing this module loads the standard library alone.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from edgegcl import runfiles
from edgegcl.data.config import canonical_name
from edgegcl.errors import UsageError
from edgegcl.training.lock import RunLock
from edgegcl_embed.errors import shown

def run_name(dataset: str) -> str:
    """A run directory's name for ``dataset``: the benchmark's canonical spelling (``cora``
    -> Cora), ``synthetic``, or a graph file's name without its suffix."""
    if dataset.strip().lower() == "synthetic":
        return "synthetic"
    return canonical_name(dataset) or Path(dataset).stem


def new_run_dir(hold: ExitStack, out: str, name: str) -> tuple[Path, Callable[[], None]]:
    """A new run directory (``out``, or ``runs/NAME-TIMESTAMP``), locked in ``hold``, and a
    function to call once the run has really started: until then, ``hold`` closing on an
    exception removes the files a run writes (``runfiles.WRITTEN``), then the directory and the folders
    made for it when nothing else is in them, so that a failed start leaves nothing behind and
    takes nothing it did not make."""
    try:
        existed = bool(out) and Path(out).is_dir()
    except OSError as exc:  # a name too long, a loop of links: said before anything is made
        raise UsageError(f"--out {shown(out, 60)} cannot be used ({exc.strerror or exc}); pass "
                         "a shorter or plain path") from None
    parent = (Path(out) if out else Path("runs") / name).absolute().parent
    made = [p for p in (parent, *parent.parents) if not p.exists()]  # mkdir's parents
    run_dir = hold.enter_context(prepare_run_dir(out, name))
    started: list[bool] = []

    def discard(kind: type[BaseException] | None, *exc: object) -> None:
        if kind is None or started:
            return
        for path in list(run_dir.iterdir()) if run_dir.is_dir() else []:
            if not runfiles.WRITTEN.fullmatch(path.name):
                continue  # not a file a run writes: another process's, kept
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        if not existed:
            for folder in (run_dir, *made):  # innermost first; one holding others' files stays
                try:
                    folder.rmdir()
                except OSError:
                    break

    hold.push(discard)
    return run_dir, lambda: started.append(True)


def _unique(base: Path) -> Path:
    """``base``, or ``base-2``, ``base-3``...: the first name no other run has taken, made
    here with an exclusive mkdir, so that runs started in the same second never share one."""
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create run directory {base.parent} ({exc.strerror}); "
                         "pass a writable --out") from None
    for count in range(1, 10_000):
        path = base if count == 1 else base.with_name(f"{base.name}-{count}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise UsageError(f"cannot create run directory {path} ({exc.strerror}); pass a "
                             "writable --out") from None
        return path
    raise UsageError(f"every name {base}-N is taken; pass --out")


def prepare_run_dir(out: str, name: str) -> RunLock:
    """A new, empty run directory, locked for this process (``with prepare_run_dir(...) as
    run_dir``): ``out``, or ``runs/NAME-TIMESTAMP`` (``-2``, ``-3``... when a run started in
    the same second has it); an existing non-empty one is never written, nor one another
    process holds."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = Path(out) if out else _unique(Path("runs") / f"{name}-{stamp}")

    def refuse_if_used() -> None:
        if path.exists() and (not path.is_dir() or any(p.name != runfiles.LOCK
                                                       for p in path.iterdir())):
            raise UsageError(f"run directory {path} already exists and is not empty; "
                             "pass a new --out (nothing was written)")

    refuse_if_used()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create run directory {path} ({exc.strerror}); "
                         "pass a writable --out") from None
    lock = RunLock(path)
    try:
        refuse_if_used()  # written by another process between the first look and the lock
    except UsageError:
        lock.release()
        raise
    return lock

