"""The run directory a command makes: named by the dataset's canonical name, and removed with
what was written into it when the command fails before the run has really started.

A user who mistyped a flag, or whose machine lacks a sampler, should find nothing to clean up;
a run that trained an epoch keeps its directory, whatever ends it, since ``--resume`` can go on
from there. Importing this module loads the standard library alone.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path


def run_name(dataset: str) -> str:
    """A run directory's name for ``dataset``: the benchmark's canonical spelling (``cora``
    -> Cora), ``synthetic``, or a graph file's name without its suffix."""
    from edgegcl.data.datasets import canonical_name

    if dataset.strip().lower() == "synthetic":
        return "synthetic"
    return canonical_name(dataset) or Path(dataset).stem


def new_run_dir(hold: ExitStack, out: str, name: str) -> tuple[Path, Callable[[], None]]:
    """A new run directory (``out``, or ``runs/NAME-TIMESTAMP``), locked in ``hold``, and a
    function to call once the run has really started: until then, ``hold`` closing on an
    exception removes the directory, what was written into it and the folders made for it (a
    directory that existed, empty, is emptied), so that a failed start leaves nothing behind."""
    from edgegcl.training.run import prepare_run_dir
    from edgegcl.training.state import LOCK_NAME

    existed = bool(out) and Path(out).is_dir()
    parent = (Path(out) if out else Path("runs") / name).absolute().parent
    made = [p for p in (parent, *parent.parents) if not p.exists()]  # mkdir's parents
    run_dir = hold.enter_context(prepare_run_dir(out, name))
    started: list[bool] = []

    def discard(kind: type[BaseException] | None, *exc: object) -> None:
        if kind is None or started:
            return
        for path in list(run_dir.iterdir()) if run_dir.is_dir() else []:
            if path.name != LOCK_NAME:
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink()
        if not existed:
            shutil.rmtree(run_dir, ignore_errors=True)
            for folder in made:  # innermost first; one another process wrote into stays
                try:
                    folder.rmdir()
                except OSError:
                    break

    hold.push(discard)
    return run_dir, lambda: started.append(True)
