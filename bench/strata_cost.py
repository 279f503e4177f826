"""What HANS's negatives cost and buy: default runs beside all-negatives and exact-strata runs.

Per dataset and seed, three full training runs through ``edgegcl.training.seeds.train_seed`` (the code
``edgegcl train`` runs), interleaved seed by seed in a rotating order so that a drifting
machine favours none of them:

- ``default``: the defaults (sampled strata, ``--logits auto``);
- ``exact``: ``--stratify exact`` (every anchor ranks all 2B - 2 candidates);
- ``all-negatives``: ``--eta-0 1`` (HANS saturated from the first epoch: every negative active,
  the GRACE-style contrast in the same code).

Reports the honest test micro-F1 (checkpoint chosen on validation), the mean training epoch
time (probes excluded) and the final eta of each, and the ratios the issue asks for. Writes
bench/results/NAME.md and NAME.json.

    python -m bench.strata_cost --root ../shared/datasets --datasets Cora,CiteSeer --seeds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import sys
from dataclasses import replace
from pathlib import Path

from bench import harness

import torch

from edgegcl.memory import reuse_freed_memory
from edgegcl.training.config import TrainConfig
from edgegcl.data import load_graph
from edgegcl.training.seeds import train_seed

HERE = Path(__file__).resolve().parent
VARIANTS = {"default": {}, "exact": {"stratify": "exact"}, "all-negatives": {"eta_0": 1.0}}


def run_variant(data, cfg: TrainConfig, seed: int) -> dict:
    """One seed of one configuration: honest scores, epoch times, final HANS state."""
    with tempfile.TemporaryDirectory() as tmp:
        r = train_seed(data, cfg, seed, torch.device("cpu"), Path(tmp), f"seed {seed}")
    used = sum(r.final_eta[c] * cfg.ratio_map()[c] for c in r.final_eta) * cfg.schedule.theta_max
    return {"seed": seed, "test_micro_f1": r.selection.scores.test_micro,
            "val_micro_f1": r.selection.scores.val_micro, "selected_epoch": r.selection.epoch,
            "epoch_s_mean": statistics.fmean(r.epoch_times), "train_s": sum(r.epoch_times),
            "final_eta": r.final_eta, "final_used_fraction": used}


def summary(runs: list[dict], key: str) -> str:
    values = [r[key] for r in runs]
    return f"{statistics.fmean(values):.2f} ± {statistics.pstdev(values):.2f}"


def main() -> None:
    p = harness.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True, help="directory holding Cora/ and CiteSeer/")
    p.add_argument("--datasets", default="Cora,CiteSeer")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=300)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--name", default="strata-cost")
    args = p.parse_args()
    reuse_freed_memory()  # as edgegcl train does
    res = harness.record("strata_cost", sys.argv[1:], root=args.root)
    variants = args.variants.split(",")
    results: dict[str, dict[str, list[dict]]] = {}
    for ds in args.datasets.split(","):
        data = load_graph(ds, args.root)
        results[ds] = {v: [] for v in variants}
        for seed in range(args.seeds):
            for k in range(len(variants)):  # rotate the order per seed
                v = variants[(k + seed) % len(variants)]
                cfg = replace(TrainConfig(encoder="gcn", dataset=ds, epochs=args.epochs,
                                          mode="full"),
                              **VARIANTS[v])
                results[ds][v].append(run_variant(data, cfg, seed))
                print(ds, v, json.dumps(results[ds][v][-1]), flush=True)
    lines = [
        "# HANS's cost and accuracy: default (sampled strata) vs exact strata vs all negatives",
        "", *harness.header({**res, "wall_min": harness.wall_min(res)}),
        "Full-graph training with the defaults otherwise (300 epochs, probe every 20), seeds "
        f"0..{args.seeds - 1} (each its own split and initialisation, the same across "
        "variants), run interleaved seed by seed. Honest test micro-F1 = the checkpoint "
        "chosen on validation micro-F1, test reported there (%, mean ± population std over "
        "seeds). Epoch s = mean training epoch time (probes excluded). 'used' = the fraction "
        "of the candidates active at the end (sum eta theta_cat).", "",
        "| dataset | variant | honest test micro-F1 | val micro-F1 | epoch s | used at end |",
        "|---|---|---|---|---|---|"]
    for ds, by in results.items():
        for v, runs in by.items():
            lines.append(f"| {ds} | {v} | {summary(runs, 'test_micro_f1')} | "
                         f"{summary(runs, 'val_micro_f1')} | "
                         f"{statistics.fmean(r['epoch_s_mean'] for r in runs):.3f} | "
                         f"{statistics.fmean(r['final_used_fraction'] for r in runs):.3f} |")
    lines += ["", "Ratios (same run):", ""]
    for ds, by in results.items():
        mean = {v: statistics.fmean(r["epoch_s_mean"] for r in runs) for v, runs in by.items()}
        f1 = {v: statistics.fmean(r["test_micro_f1"] for r in runs) for v, runs in by.items()}
        if "default" in by and "all-negatives" in by:
            lines.append(f"- {ds}: default / all-negatives mean epoch time "
                         f"{mean['default'] / mean['all-negatives']:.2f}; micro-F1 "
                         f"{f1['default'] - f1['all-negatives']:+.2f} points")
        if "default" in by and "exact" in by:
            lines.append(f"- {ds}: sampled - exact strata micro-F1 "
                         f"{f1['default'] - f1['exact']:+.2f} points; epoch time "
                         f"{mean['default'] / mean['exact']:.2f}x")
    lines.append("")
    out = harness.RESULTS
    harness.save(out / f"{args.name}.json", json.dumps(results, indent=1) + "\n")
    harness.save(out / f"{args.name}.md", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
