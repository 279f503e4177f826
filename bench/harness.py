"""What the benchmarks share: the record of when, where and how one ran, its header in the
report, the median of repeated timings, ``edgegcl train`` run as a user runs it, and writing
bench/results/NAME.{json,md} atomically.

    res = harness.record("threads", sys.argv[1:], root=args.root)   # started, machine, command
    ...
    res["wall_min"] = harness.wall_min(res)
    harness.write("threads", res, report(res))                      # report() uses header(res)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

CONTRAST_PHASES = ("similarities", "strata", "loss forward", "loss backward")
"""The contrast part of a step (edgegcl.phases.PHASES): everything but sampling, the encoder
and the optimiser."""

RESULTS = Path(os.environ.get("EDGEGCL_BENCH_RESULTS") or Path(__file__).resolve().parent / "results")
"""Where results go: bench/results/, or ``$EDGEGCL_BENCH_RESULTS`` (a trial run's own folder)."""


class Refused(Exception):
    """An ``edgegcl`` command a benchmark ran refused its input, and its one line is already
    on the terminal: the benchmark ends with exit code 2 and says nothing more."""


class ArgumentParser(argparse.ArgumentParser):
    """A benchmark's flags: a bad one is one line and exit code 2, as edgegcl's commands do
    (argparse's own error prints the usage too)."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def stamp() -> str:
    """Now, as the reports write it (UTC, to the minute)."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def shown(cmd: Sequence[str], root: str | None = None, out: Path | None = None) -> str:
    """A command as a report prints it: a machine's dataset folder as ROOT, an output folder
    as OUT, this interpreter as python."""
    text = shlex.join(["python" if a == sys.executable else str(a) for a in cmd])
    if root:
        text = text.replace(root, "ROOT")
    return text.replace(str(out), "OUT") if out is not None else text


def record(script: str, argv: Sequence[str], root: str | None = None) -> dict[str, Any]:
    """A new result record: the start (UTC), the machine and the command that reproduces it,
    with ``root`` (a machine's dataset folder) written as ROOT."""
    from bench.machine import describe  # imports torch: not for a torch-free child process

    args = ["ROOT" if root is not None and a == root else a for a in argv]
    return {"started": stamp(), "machine": describe(), "command": shlex.join(["python", "-m", "bench." + script, *args]),
            "_t0": time.time()}


def wall_min(res: dict[str, Any]) -> float:
    """Minutes since ``record`` made ``res``."""
    return (time.time() - res["_t0"]) / 60


def header(res: dict[str, Any], note: str = "nothing else running") -> list[str]:
    """The report's opening lines: when, on what, for how long, and the command."""
    wall = f"; {res['wall_min']:.1f} min wall" if "wall_min" in res else ""
    return [f"Measured {res['started']} on: {res['machine']}{wall}" + (f", {note}" if note else "")
            + ".", "", f"    {res['command']}", ""]


def median_seconds(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    """Median wall seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved_medians(calls: dict[str, Callable[[], Any]], repeats: int,
                        warmup: int = 1) -> dict[str, float]:
    """Median wall seconds of each call, measured side by side: every round times each call
    once (in reverse order every other round), so that a drift of the machine's speed falls
    on all of them alike; ``warmup`` untimed rounds first."""
    for _ in range(warmup):
        for fn in calls.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def write(name: str, res: dict[str, Any], markdown: str) -> None:
    """bench/results/NAME.json (``res``) and NAME.md (``markdown``), each written atomically."""
    from edgegcl.training.state import write_atomic

    data = {k: v for k, v in res.items() if not k.startswith("_")}
    write_atomic(RESULTS / f"{name}.json", json.dumps(data, indent=1) + "\n")
    write_atomic(RESULTS / f"{name}.md", markdown)


def read(name: str) -> dict[str, Any]:
    """bench/results/NAME.json, for ``--report-only``."""
    return json.loads((RESULTS / f"{name}.json").read_text())


def cells_record(script: str, argv: Sequence[str], name: str, root: str | None = None,
                 files: str | None = None, resume: bool = False) -> dict[str, Any]:
    """``record`` for a benchmark of cells (one ``edgegcl train`` each): a graph folder
    written as FILES, and with ``resume`` the cells bench/results/NAME.json already holds."""
    res = record(script, argv, root=root)
    if files:
        res["command"] = res["command"].replace(files, "FILES")
    if resume and (RESULTS / f"{name}.json").exists():
        res["cells"] = read(name).get("cells", {})
    res.setdefault("cells", {})
    return res


def graph_flag(graph: str, files: str | None) -> str:
    """The ``--dataset`` of a benchmark's graph: a ``.npz`` name in the ``files`` folder, any
    other name as given (read through ``--root``)."""
    return str(Path(files or ".") / graph) if graph.endswith(".npz") else graph


@dataclass
class TrainRun:
    """One ``edgegcl train`` process: its metrics.json, wall seconds, the command as a report
    prints it, its run directory and what it printed on stderr."""

    metrics: dict[str, Any]
    wall_s: float
    command: str
    run_dir: Path
    stderr: str


def train(args: Sequence[str], out: Path, root: str | None = None,
          env: dict[str, str] | None = None, cwd: Path | None = None,
          show: bool = False, unset: Sequence[str] = ()) -> TrainRun:
    """``python -m edgegcl train ARGS --out OUT`` in a fresh process, as a user runs it (``env``
    added to this one's environment, ``unset`` taken out of it); a failure raises with the
    command and its last lines. ``show``: its progress goes to this terminal (else captured)."""
    cmd = [sys.executable, "-m", "edgegcl", "train", *args, "--out", str(out)]
    environ = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in unset}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=environ, cwd=cwd, text=True,
                          stdout=None if show else subprocess.DEVNULL,
                          stderr=None if show else subprocess.PIPE)
    wall = time.perf_counter() - t0
    if proc.returncode == 2:  # the command refused its input in one line
        if show:
            raise Refused(shown(cmd, root, out))  # its line is on the terminal already
        from edgegcl.errors import UsageError

        said = ((proc.stderr or "").strip().splitlines() or ["no line"])[-1]
        raise UsageError(f"{shown(cmd, root, out)} refused its input ({said})")
    if proc.returncode != 0:
        tail = "" if show else "\n".join((proc.stderr or "").splitlines()[-5:])
        raise RuntimeError(f"{shown(cmd, root, out)} exited {proc.returncode}\n{tail}")
    metrics = json.loads((out / "metrics.json").read_text())
    return TrainRun(metrics, wall, shown(["edgegcl", *cmd[3:]], root, out), out,
                    proc.stderr or "")


def save(path: Path, text: str) -> None:
    """Write one result file atomically (a report a reader may have open is never half new)."""
    from edgegcl.training.state import write_atomic

    write_atomic(Path(path), text)
