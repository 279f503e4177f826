"""The profiler's error: predicted against measured epoch time and peak memory of ``--auto-budget``.

Runs ``edgegcl train --profile PROFILE --auto-budget`` as a user does, each run with an empty
profile cache (so each one measures), and reads the prediction beside the measurement from
its ``metrics.json`` (``auto_budget``: the profiler's cost of the chosen theta_max against the
median of the last T_int epochs and the largest training peak). The error is
|measured / predicted - 1| (the goal: at most 15 % on a CPU).

    python -m bench.profiler_error --root ../shared/datasets --dataset Cora --runs 3
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import harness

HERE = Path(__file__).resolve().parent
GOAL = 0.15


def one_run(args: argparse.Namespace, work: Path, k: int) -> dict[str, Any]:
    """One auto-budget run in ``work``, its own empty cache; its ``auto_budget`` report."""
    run = harness.train(["--dataset", args.dataset, "--profile", args.profile, "--auto-budget",
                         "--epochs", str(args.epochs),
                         *(["--root", args.root] if args.root else []),
                         *shlex.split(args.flags)],
                        work / f"run-{k}", root=args.root or None,
                        env={"EDGEGCL_CACHE": str(work / f"cache-{k}")})
    return run.metrics["auto_budget"]


def report(runs: list[dict[str, Any]], args: argparse.Namespace, res: dict[str, Any]) -> str:
    """The markdown result: one row per run, the median error of each figure."""
    rows = ["| run | theta_max, logits | predicted epoch s | measured | error | "
            "predicted peak MiB | measured | error |", "|---|---|---|---|---|---|---|---|"]
    errors: dict[str, list[float]] = {"epoch_s": [], "peak_memory_bytes": []}
    for k, r in enumerate(runs, 1):
        cells = []
        for key, scale, fmt in (("epoch_s", 1, ".3f"), ("peak_memory_bytes", 2**20, ".0f")):
            ratio = r["measured_over_predicted"][key]
            errors[key].append(abs(ratio - 1))
            cells += [f"{r['predicted'][key] / scale:{fmt}}", f"{r['measured'][key] / scale:{fmt}}",
                      f"{100 * abs(ratio - 1):.0f} %"]
        rows.append(f"| {k} | {r['theta_max']:.2f}, {r['logits']} | {' | '.join(cells)} |")
    summary = [f"- median error of the {name}: {100 * statistics.median(e):.0f} % (goal "
               f"<= {100 * GOAL:.0f} %)"
               for name, e in (("epoch time", errors["epoch_s"]),
                               ("peak memory", errors["peak_memory_bytes"]))]
    return "\n".join([
        "# The resource profiler's error", "", *harness.header(res),
        f"Each run: `edgegcl train --dataset {args.dataset} --profile {args.profile} "
        f"--auto-budget --epochs {args.epochs} {args.flags}`, with an empty profile cache.", "",
        "Measured: the median epoch over each seed's last T_int epochs (the state the "
        "profiler holds) and the largest per-epoch training peak; error = |measured / "
        "predicted - 1|.", "", *rows, "", *summary, ""])


def main() -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--root", default="")
    p.add_argument("--dataset", default="Cora")
    p.add_argument("--profile", default="cpu")
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--flags", default="", help="more edgegcl train flags")
    p.add_argument("--out", default=str(harness.RESULTS / "profiler-error.md"))
    args = p.parse_args()

    res = harness.record("profiler_error", sys.argv[1:], root=args.root or None)
    with tempfile.TemporaryDirectory(prefix="profiler-error-") as tmp:
        runs = [one_run(args, Path(tmp), k) for k in range(args.runs)]
    res["wall_min"] = harness.wall_min(res)
    text = report(runs, args, res)
    harness.save(Path(args.out), text)
    print(text)


if __name__ == "__main__":
    main()
