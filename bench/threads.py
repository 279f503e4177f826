"""Threads: a default run (the count measured by its first steps) against every fixed count.

``edgegcl train --dataset D --epochs E`` runs as a user runs it, once with no thread setting
(edgegcl.training.threads measures) and once with each ``--threads N`` of 1, 2, 4, ..., cores,
in interleaved rounds (the order reversed every other round), first on an idle machine, then
with a competing process (torch products on every core, as another job on the machine would
be). Each run's mean training epoch comes from its metrics.json, as its chosen count does.

    python -m bench.threads --root ROOT --dataset Cora --epochs 100 --rounds 2

Writes bench/results/threads.{json,md}. Run it alone: it is a timing.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import harness
from edgegcl.training.threads import available_cores

LOAD = ("import torch\ntorch.set_num_threads({cores})\na = torch.randn(1024, 1024)\n"
        "while True:\n    a @ a\n")


def one_run(root: str, dataset: str, epochs: int, threads: int | None, tmp: Path
            ) -> dict[str, Any]:
    """One ``edgegcl train`` process: its wall seconds, mean epoch and metrics' threads entry."""
    out = Path(tempfile.mkdtemp(dir=tmp))
    run = harness.train(["--dataset", dataset, "--root", root, "--epochs", str(epochs),
                         *(["--threads", str(threads)] if threads else [])],
                        out / "run", root=root, unset=("OMP_NUM_THREADS",))
    return {"wall_s": run.wall_s, "epoch_s": run.metrics["summary"]["epoch_time_s"]["mean"],
            "threads": run.metrics["threads"]}


def condition(args: argparse.Namespace, counts: list[int], tmp: Path) -> dict[str, Any]:
    variants: list[int | None] = [None, *counts]
    runs: dict[str, list[dict[str, Any]]] = {str(v or "default"): [] for v in variants}
    for r in range(args.rounds):
        for v in variants if r % 2 == 0 else variants[::-1]:
            runs[str(v or "default")].append(one_run(args.root, args.dataset, args.epochs, v,
                                                     tmp))
            print(f"threads: round {r + 1}/{args.rounds}, {v or 'default'} done", flush=True)
    return runs


def report(res: dict[str, Any]) -> str:
    lines = [f"# Threads: the measured default against fixed counts ({res['dataset']})", "",
             *harness.header(res, note=""),
             f"Each cell: the mean over {res['rounds']} runs (interleaved, order reversed every "
             f"other round) of the run's mean training epoch, from its metrics.json; "
             f"{res['epochs']} epochs per run. Busy: a competing process ran torch products on "
             "every core throughout.", "",
             "| machine | run | epoch ms | / best fixed | chosen (each run) | run wall s |",
             "|---|---|---|---|---|---|"]
    verdicts = []
    for cond, runs in res["conditions"].items():
        means = {k: statistics.fmean(r["epoch_s"] for r in v) for k, v in runs.items()}
        best = min(v for k, v in means.items() if k != "default")
        for k, v in runs.items():
            chosen = ", ".join(str(r["threads"]["threads"]) for r in v)
            wall = statistics.fmean(r["wall_s"] for r in v)
            lines.append(f"| {cond} | {'default' if k == 'default' else '--threads ' + k} | "
                         f"{1000 * means[k]:.0f} | {means[k] / best:.2f} | {chosen} | "
                         f"{wall:.1f} |")
        ratio = means["default"] / best
        verdicts.append(f"- {cond}: default / best fixed count = {ratio:.2f} (target <= 1.10): "
                        f"**{'met' if ratio <= 1.10 else 'missed'}**")
    return "\n".join([*lines, "", *verdicts, ""])


def main() -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--root", required=True)
    p.add_argument("--dataset", default="Cora")
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--no-busy", action="store_true", help="the idle machine only")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    if args.report_only:
        res = harness.read("threads")
        harness.write("threads", res, report(res))
        return
    cores = available_cores()
    counts = sorted({1, cores, *[2 ** k for k in range(1, 16) if 2 ** k < cores]})
    res: dict[str, Any] = {**harness.record("threads", sys.argv[1:], root=args.root),
                           "dataset": args.dataset, "epochs": args.epochs,
                           "rounds": args.rounds, "conditions": {}}
    with tempfile.TemporaryDirectory() as tmp:
        res["conditions"]["idle"] = condition(args, counts, Path(tmp))
        if not args.no_busy:
            load = subprocess.Popen([sys.executable, "-c", LOAD.format(cores=cores)])
            try:
                res["conditions"]["busy"] = condition(args, counts, Path(tmp))
            finally:
                load.kill()
                load.wait()
    res["wall_min"] = harness.wall_min(res)
    harness.write("threads", res, report(res))
    print(report(res))


if __name__ == "__main__":
    main()
