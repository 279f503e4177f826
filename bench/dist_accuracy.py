"""Accuracy of data-parallel training (issue 14): Cora in mini-batches, W ranks with global
negatives against one process with the same global batch, honest micro-F1 over seeds.

Both runs are ``edgegcl train`` with the same flags except the launch: ``torchrun
--nproc-per-node W ... --batch-size B --negatives global`` and one process with
``--batch-size W*B``. Global negatives make each step's loss the one process's loss (tested
in tests/test_distributed.py); what still differs is each rank's own augmentation and
neighbour streams, so the two are compared as distributions over seeds. The two commands run
side by side (``cores / 2`` threads each).

    python -m bench.dist_accuracy --root ../shared/datasets --epochs 100 --seeds 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

from bench import harness

HERE = Path(__file__).resolve().parent


def main() -> None:
    p = harness.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True)
    p.add_argument("--dataset", default="Cora")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=512, help="seeds per rank")
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--out", default=str(harness.RESULTS))
    args = p.parse_args()


    cores = psutil.cpu_count(logical=True) or 2
    common = ["train", "--dataset", args.dataset, "--root", os.path.abspath(args.root),
              "--mode", "minibatch", "--epochs", str(args.epochs), "--seeds", str(args.seeds),
              "--device", "cpu", "--eval-every", str(max(1, args.epochs // 10))]
    res = harness.record("dist_accuracy", sys.argv[1:], root=args.root)
    with tempfile.TemporaryDirectory() as tmp:
        runs = {
            f"{args.ranks} ranks, global negatives, B = {args.batch_size} each": (
                [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                 str(args.ranks), "-m", "edgegcl", *common, "--batch-size",
                 str(args.batch_size), "--negatives", "global", "--out", f"{tmp}/dist"],
                f"{tmp}/dist", max(1, cores // 2 // args.ranks)),
            f"1 process, B = {args.ranks * args.batch_size}": (
                [sys.executable, "-m", "edgegcl", *common, "--batch-size",
                 str(args.ranks * args.batch_size), "--out", f"{tmp}/one"],
                f"{tmp}/one", max(1, cores // 2)),
        }
        procs = {name: subprocess.Popen(cmd, cwd=HERE.parent, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True,
                                        env={**os.environ, "OMP_NUM_THREADS": str(threads),
                                             "PYTHONWARNINGS": "ignore"})
                 for name, (cmd, _, threads) in runs.items()}
        results = {}
        for name, proc in procs.items():
            _, err = proc.communicate()
            if proc.returncode != 0:
                raise SystemExit(f"dist_accuracy: {name} failed:\n{err[-2000:]}")
            metrics = json.loads((Path(runs[name][1]) / "metrics.json").read_text())
            results[name] = metrics
    res["wall_min"] = harness.wall_min(res)
    lines = ["# Data-parallel accuracy: global negatives against one process", "",
             *harness.header(res, note="both runs side by side"),
             f"{args.dataset}, mini-batch (fanout 10,10), {args.epochs} epochs, {args.seeds} "
             "seeds, defaults otherwise; honest test micro-F1 (checkpoint chosen on "
             "validation), mean ± std over seeds.", "",
             "| run | honest test micro-F1 | per seed | mean epoch s |", "|---|---|---|---|"]
    means = []
    for name, m in results.items():
        t = m["summary"]["test_micro_f1"]
        means.append(t["mean"])
        per = ", ".join(f"{s['test_micro_f1']:.2f}" for s in m["seeds"])
        lines.append(f"| {name} | {t['mean']:.2f} ± {t['std']:.2f} | {per} | "
                     f"{m['summary']['epoch_time_s']['mean']:.3f} |")
    lines += ["", f"Difference (ranks - one process): {means[0] - means[1]:+.2f} points "
                  "(target: within 0.5)."]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    harness.save(out / "dist-accuracy.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
