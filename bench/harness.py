"""What the benchmarks share: the record of when, where and how one ran, its header in the
report, the median of repeated timings, and writing bench/results/NAME.{json,md} atomically.

    res = harness.record("threads", sys.argv[1:], root=args.root)   # started, machine, command
    ...
    res["wall_min"] = harness.wall_min(res)
    harness.write("threads", res, report(res))                      # report() uses header(res)
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def record(script: str, argv: Sequence[str], root: str | None = None) -> dict[str, Any]:
    """A new result record: the start (UTC), the machine and the command that reproduces it,
    with ``root`` (a machine's dataset folder) written as ROOT."""
    from bench.machine import describe  # imports torch: not for a torch-free child process

    args = ["ROOT" if root is not None and a == root else a for a in argv]
    return {"started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": describe(), "command": " ".join(["python -m bench." + script, *args]),
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


def write(name: str, res: dict[str, Any], markdown: str) -> None:
    """bench/results/NAME.json (``res``) and NAME.md (``markdown``), each written atomically."""
    from edgegcl.training.state import write_atomic

    data = {k: v for k, v in res.items() if not k.startswith("_")}
    write_atomic(RESULTS / f"{name}.json", json.dumps(data, indent=1) + "\n")
    write_atomic(RESULTS / f"{name}.md", markdown)


def read(name: str) -> dict[str, Any]:
    """bench/results/NAME.json, for ``--report-only``."""
    return json.loads((RESULTS / f"{name}.json").read_text())
