"""What each theta_max costs on this device (``edgegcl bench budgets``): a table, a CSV file
and a plot in a directory the user names (edgegcl.budget.bench measures, edgegcl.budget.table
writes), writing nowhere else."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from edgegcl.budget.table import FILES, THETAS, write_budgets
from edgegcl.errors import UsageError
from edgegcl.jobs.arguments import flag_argument, path_argument, settings_argument
from edgegcl.jobs.plan import Request, config_argument, plan

if TYPE_CHECKING:
    from torch_geometric.data import Data

    from edgegcl.training.config import TrainConfig


def check_out_dir(out: str | Path | None, force: bool) -> Path:
    """The results' directory, checked before anything is measured: named, its parent
    exists, nothing in it is overwritten unless ``force``."""
    if not out:
        raise UsageError(f"edgegcl bench budgets writes {', '.join(FILES)}: say where with "
                         "--out DIR")
    path = Path(out)
    if not path.parent.is_dir():
        raise UsageError(f"directory {path.parent} does not exist; create it or choose another "
                         "--out")
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {path} is a file; give a directory")
    taken = [str(path / n) for n in FILES if (path / n).exists() or (path / n).is_symlink()]
    if taken and not force:
        raise UsageError(f"{', '.join(taken)} already exist(s); pass --force to replace them, or "
                         "another --out")
    _check_writable(path if path.is_dir() else path.parent)
    return path


def _check_writable(folder: Path) -> None:
    """One line, before minutes of measuring, when ``folder`` takes no new file (read-only,
    full, not ours): a file is created there exclusively and removed."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".edgegcl-probe-", dir=folder)
    except OSError as exc:
        raise UsageError(f"cannot write into {folder} ({exc.strerror or exc}); choose a "
                         "writable --out (nothing was measured)") from None
    os.close(fd)
    os.unlink(probe)


def bench_budgets(out: str | Path, config: TrainConfig | str | Path | None = None,
                  graph: Data | None = None, *, settings: Mapping[str, object] | None = None,
                  thetas: Sequence[float] | None = None, repeats: int = 3,
                  force: bool = False, command: str = "", target_epoch_s: float | None = None,
                  memory_gib: float | None = None) -> list[Path]:
    """Measure the epoch time and peak training memory of every theta_max in ``thetas`` on
    both logits paths (on one where the run's ``logits`` names it), ``repeats`` times
    interleaved, for the run ``config`` and ``settings`` describe (as ``edgegcl.train``'s),
    and write DIR/budgets.md, .csv and .png into ``out``; the paths written. The table ends
    with its choice (edgegcl.budget.table.choose): the largest theta_max within
    ``target_epoch_s`` and ``memory_gib`` when given, else the knee of the cost curve.
    ``command``: the command line to record above the table (the CLI's own).

    Example:
        >>> import edgegcl
        >>> edgegcl.bench_budgets("budgets-cora", settings={"dataset": "cora"},
        ...                       thetas=[0.1, 1.0])  # doctest: +SKIP
    """
    if thetas is not None and (not isinstance(thetas, Sequence) or isinstance(thetas, str) or
                               not all(isinstance(t, (int, float)) and not isinstance(t, bool)
                                       for t in thetas)):
        raise UsageError("thetas must be a list of theta_max values in (0, 1]")
    if isinstance(repeats, bool) or not isinstance(repeats, int):
        raise UsageError(f"repeats must be an integer, not {type(repeats).__name__}")
    flag_argument("force", force)
    settings = settings_argument(settings)
    out = path_argument("out", out)  # type: ignore[assignment]
    thetas = list(THETAS if thetas is None else thetas)
    if not thetas or not all(0.0 < t <= 1.0 for t in thetas):
        raise UsageError(f"--thetas must be theta_max values in (0, 1], comma-separated, got "
                         f"{','.join(f'{t:g}' for t in thetas)!r}")
    if not 1 <= repeats <= 1000:
        raise UsageError("--repeats must be in [1, 1000] (each repeat measures every theta_max "
                         f"again), got {repeats if abs(repeats) < 10**20 else 'a larger integer'}")
    for name, value in (("target_epoch_s", target_epoch_s), ("memory_gib", memory_gib)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 < value < float("inf")):
            raise UsageError(f"--{name.replace('_', '-')} must be a positive number, got "
                             f"{value!r}")
    path = check_out_dir(out, force)
    if importlib.util.find_spec("matplotlib") is None:  # checked before minutes of measuring
        raise UsageError("edgegcl bench budgets draws budgets.png with matplotlib: pip install "
                         "matplotlib (or the plot extra)")
    with ExitStack() as hold:
        settled = plan(Request(config_argument(config), {k: v for k, v in settings.items()
                                                         if k != "out"}),
                               hold)  # refusals before torch loads
        # torch loads here, once the plan has refused what it would (bench/results/cli-latency.md)
        from edgegcl.budget.bench import measure_budgets, progress_line
        from edgegcl.budget.profiler import pick_threads
        from edgegcl.jobs.start import choose_threads, start

        s = start(settled, graph)

        assert s.data is not None
        threads = choose_threads(s)
        if threads.picker is not None and not threads.picker.done:
            pick_threads(s.data, s.cfg, s.device, threads.picker)
            print(f"edgegcl: {threads.line()}", file=sys.stderr)
        paths = 2 if s.cfg.contrast.logits == "auto" else 1
        total = repeats * len(set(thetas)) * paths
        print(f"edgegcl: measuring {len(set(thetas))} theta_max values x {paths} logits "
              f"path{'s' if paths > 1 else ''} x {repeats} repeats on {s.data.name} "
              f"({s.data.num_nodes} nodes) on {s.device}", file=sys.stderr)
        table = measure_budgets(s.data, s.cfg, s.device, thetas, repeats,
                                progress_line(total, "budgets"))
        table.command = command
        table.target_epoch_s = target_epoch_s
        table.memory_bytes = None if memory_gib is None else memory_gib * 2**30
        try:
            path.mkdir(exist_ok=True)
            return [Path(p) for p in write_budgets(table, path)]
        except OSError as exc:  # the folder changed while measuring
            raise UsageError(f"cannot write the results into {path} ({exc.strerror or exc}); "
                             "free space or choose a writable --out and measure again") from None
