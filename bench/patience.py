"""What early stopping (``--patience P``) would have given: epochs trained and honest test
micro-F1 per patience, from full runs' probe histories.

Early stopping changes nothing before it stops (the same random streams, the same probes), and
the checkpoint it keeps is the best validation probe up to its stop, so one full run per seed
answers every patience exactly: for each P, the stop is the first probe P probes after the best
so far, and the kept checkpoint that best one. Each dataset trains as ``edgegcl train --dataset
D --seeds S`` (its tuned defaults); the test figure of a kept checkpoint is its probe's (the
checkpoint probe uses every labelled node on these graphs, as the final selection does).

    python -m bench.patience --root ../shared/datasets --datasets synthetic,Cora,CiteSeer --seeds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import harness

PATIENCES = (1, 2, 3, 5, 8)


def stop(history: list[dict[str, Any]], patience: int | None) -> dict[str, Any]:
    """The probe early stopping ends at and the one it keeps (None: no early stopping)."""
    best_i, best_val = 0, -1.0
    for i, h in enumerate(history):
        if h["val_micro"] > best_val:
            best_i, best_val = i, h["val_micro"]
        if patience is not None and i - best_i >= patience:
            return {"epochs": h["epoch"], "kept": history[best_i]}
    return {"epochs": None, "kept": history[best_i]}


def main() -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--root", default=None)
    p.add_argument("--datasets", default="synthetic,Cora,CiteSeer")
    p.add_argument("--seeds", type=int, default=5)
    args = p.parse_args()
    res: dict[str, Any] = {**harness.record("patience", sys.argv[1:], root=args.root),
                           "datasets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for ds in args.datasets.split(","):
            run = harness.train(["--dataset", ds, *(["--root", args.root] if args.root else []),
                                 "--seeds", str(args.seeds)], Path(tmp) / ds, root=args.root,
                                show=True)
            res["datasets"][ds] = {"command": run.command, "wall_s": run.wall_s,
                                   "epochs": run.metrics["seeds"][0]["epochs_trained"],
                                   "seeds": [s["history"] for s in run.metrics["seeds"]]}
    res["wall_min"] = harness.wall_min(res)
    harness.write("patience", res, report(res))
    print(report(res))


def report(res: dict[str, Any]) -> str:
    lines = ["# Early stopping: epochs trained and honest test micro-F1 per --patience", "",
             *harness.header(res, note=""), (__doc__ or "").split("\n\n")[1].replace("\n", " "),
             "", "| dataset | patience | epochs trained (mean) | share of the run | test "
             "micro-F1 (mean ± std) | change (points) |", "|---|---|---|---|---|---|"]
    for ds, d in res["datasets"].items():
        full = [stop(h, None) for h in d["seeds"]]
        base = [s["kept"]["test_micro"] for s in full]
        for patience in (None, *PATIENCES):
            got = [stop(h, patience) for h in d["seeds"]]
            epochs = [s["epochs"] or d["epochs"] for s in got]
            test = [s["kept"]["test_micro"] for s in got]
            lines.append(
                f"| {ds} | {patience or 'off'} | {statistics.fmean(epochs):.0f} | "
                f"{statistics.fmean(epochs) / d['epochs']:.0%} | {statistics.fmean(test):.2f} ± "
                f"{statistics.pstdev(test):.2f} | "
                f"{statistics.fmean(t - b for t, b in zip(test, base)):+.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
