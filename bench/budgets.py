"""Epoch latency, peak memory and where a step's time goes, per theta_max: the developers'
breakdown. Users measure their device with ``edgegcl bench budgets --out DIR``
(edgegcl.budget.bench: medians of repeats, busy cells marked); this script adds each phase of a
step and both modes on two graphs, one measurement per cell.

For theta_max in {0.1, 0.2, ..., 1.0} and both logits paths (edgegcl.contrast.pairs: dense similarity
blocks, scheduled pairs only), the profiler's own measurement (edgegcl.budget.profiler) with HANS
saturated (every eta = 1: the most a run can use at that theta_max): steps after warm-up scaled
to an epoch, peak memory above the level before the model is built, and the mean time per step
of each phase (edgegcl.phases). Full-graph and mini-batch mode, on Cora and a 100k-node
synthetic graph (full-graph only where its N x N terms fit). The path ``--logits auto`` (the
default) takes at that state is marked, and the ratios against theta_max = 1 use it. Writes
NAME.csv, NAME.md and NAME.png into ``--out``.

    python -m bench.budgets --root ../shared/datasets [--device cuda] [--batch-size 4096]
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import replace
from pathlib import Path

import torch

from bench import harness
from edgegcl.memory import reuse_freed_memory
from edgegcl.training.config import TrainConfig
from edgegcl.data import SyntheticSpec, load_graph, synthetic_graph
from edgegcl.contrast.pairs import PATHS
from edgegcl.phases import PHASES
from edgegcl.budget.profiler import auto_logits, measure_theta
from edgegcl.contrast.scheduler import CATEGORIES
from edgegcl.training.placement import available_bytes, full_graph_bytes

HERE = Path(__file__).resolve().parent
SATURATED = dict.fromkeys(CATEGORIES, 1.0)
"""Every eta at 1: all of theta_max in use, the costliest state at any theta_max."""
THETAS = [round(0.1 * k, 1) for k in range(1, 11)]
FIELDS = ["graph", "nodes", "mode", "batch_size", "theta_max", "logits", "auto", "epoch_s",
          "peak_MiB", "oom", *(f"{p}_ms" for p in PHASES)]


def sweep(name: str, data, modes: list[str], cfg: TrainConfig, device: torch.device,
          thetas: list[float]) -> list[dict]:
    """One row per (mode, theta_max, logits path) on one graph."""
    rows = []
    for mode in modes:
        batch = cfg.run.batch_size if mode == "minibatch" else data.num_nodes
        for theta in thetas:
            auto = auto_logits(data, replace(cfg, mode=mode, logits="auto"), theta, SATURATED)
            for logits in PATHS:
                cost = measure_theta(data, replace(cfg, mode=mode, logits=logits), device, theta,
                                     SATURATED)
                phases = dict(cost.phases)
                rows.append({"graph": name, "nodes": data.num_nodes, "mode": mode,
                             "batch_size": batch, "theta_max": theta, "logits": logits,
                             "auto": logits == auto, "epoch_s": cost.epoch_s,
                             "peak_MiB": None if cost.oom else cost.peak_bytes / 2**20,
                             "oom": cost.oom,
                             **{f"{p}_ms": 1000 * phases.get(p, 0.0) for p in PHASES}})
                print(f"budgets: {name} {mode} theta_max {theta:.1f} {logits} logits: "
                      + ("out of memory" if cost.oom else
                         f"{cost.epoch_s:.3f} s, {cost.peak_bytes / 2**20:.0f} MiB"), flush=True)
    return rows


def contrast_ms(row: dict) -> float:
    """The contrast part of a step (everything but sampling, the encoder and the optimiser)."""
    return sum(row[f"{p}_ms"] for p in harness.CONTRAST_PHASES)


def _ratio_lines(rows: list[dict]) -> list[str]:
    """Each theta_max < 1 on the path auto takes, against theta_max = 1 on its path."""
    out = []
    for graph, mode in dict.fromkeys((r["graph"], r["mode"]) for r in rows):
        auto = {r["theta_max"]: r for r in rows
                if (r["graph"], r["mode"]) == (graph, mode) and r["auto"] and not r["oom"]}
        hi = auto.get(1.0)
        if hi is None:
            continue
        for theta, lo in sorted(auto.items()):
            if theta == 1.0:
                continue
            out.append(f"| {graph} | {mode} | {lo['batch_size']} | {theta:.1f} | {lo['logits']} | "
                       f"{lo['epoch_s'] / hi['epoch_s']:.2f} | "
                       f"{contrast_ms(lo) / contrast_ms(hi):.2f} | "
                       f"{lo['peak_MiB'] / hi['peak_MiB']:.2f} |")
    return out


def _breakdown(row: dict) -> str:
    enc = row["encoder forward_ms"] + row["encoder backward_ms"]
    return (f"{row['sample_ms']:.0f} / {enc:.0f} / {row['similarities_ms']:.0f} / "
            f"{row['strata_ms']:.0f} / {row['loss forward_ms'] + row['loss backward_ms']:.0f} / "
            f"{row['optimiser_ms']:.0f}")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 4))
    for graph, mode, logits in dict.fromkeys((r["graph"], r["mode"], r["logits"]) for r in rows):
        sel = [r for r in rows if (r["graph"], r["mode"], r["logits"]) == (graph, mode, logits)
               and not r["oom"]]
        label, style = f"{graph} {mode} {logits}", "o-" if logits == "dense" else "s--"
        ax_t.plot([r["theta_max"] for r in sel], [r["epoch_s"] for r in sel], style, label=label)
        ax_m.plot([r["theta_max"] for r in sel], [r["peak_MiB"] for r in sel], style, label=label)
    ax_t.set(xlabel="theta_max", ylabel="epoch latency (s)", yscale="log")
    ax_m.set(xlabel="theta_max", ylabel="peak memory above baseline (MiB)", yscale="log")
    ax_t.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    p = harness.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=None, help="datasets root holding Cora")
    p.add_argument("--device", default="cpu")
    p.add_argument("--nodes", type=int, default=100_000, help="synthetic graph size")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--stratify", default="sampled", choices=("sampled", "exact"))
    p.add_argument("--thetas", default=",".join(map(str, THETAS)),
                   help="comma-separated theta_max values (1.0 is always measured)")
    p.add_argument("--graphs", default="Cora,synthetic", help="Cora and/or synthetic")
    p.add_argument("--out", default=str(harness.RESULTS), help="directory for the results")
    p.add_argument("--name", default="budgets", help="file stem of the results")
    args = p.parse_args()
    reuse_freed_memory()  # as edgegcl train does
    try:  # checked before minutes of measuring, not after
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit("bench.budgets: the plot needs matplotlib: pip install -e '.[bench]'")
    device = torch.device(args.device)
    cfg = TrainConfig(encoder="gcn", batch_size=args.batch_size, sampler="builtin",
                      stratify=args.stratify)
    thetas = sorted({float(t) for t in args.thetas.split(",")} | {1.0})
    res = harness.record("budgets", sys.argv[1:], root=args.root)
    graphs = []
    if "Cora" in args.graphs:
        graphs.append(("Cora", load_graph("Cora", args.root)))
    if "synthetic" in args.graphs:
        graphs.append((f"synthetic-{args.nodes // 1000}k",
                       synthetic_graph(SyntheticSpec(num_nodes=args.nodes, num_classes=10,
                                                     num_features=128, avg_degree=10.0, seed=0))))
    rows = []
    for name, data in graphs:
        every = cfg.replace(schedule={"theta_max": 1.0})  # the largest budget measured
        fits = full_graph_bytes(every, data.num_nodes, int(data.edge_index.size(1)),
                                data.num_features) < 0.8 * available_bytes(device)
        rows += sweep(name, data, ["full", "minibatch"] if fits else ["minibatch"], cfg, device,
                      thetas)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / f"{args.name}.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, out / f"{args.name}.png")
    lines = [
        "# Epoch latency, peak memory and step breakdown per theta_max", "",
        *harness.header({**res, "wall_min": harness.wall_min(res)}, note=f"device {device}"),
        "Each figure is the profiler's measurement (edgegcl/budget/profiler.py): HANS saturated at that "
        "theta_max (every eta = 1), 5 steps after 2 warm-up steps scaled to an epoch (full "
        "graph: the median step, the strata's refresh amortised over T_int; mini-batch: the "
        "mean step x batches), peak memory above the level before the model is built (CUDA "
        "allocator peak, or CPU RSS); 'logits' is the path (edgegcl/contrast/pairs.py): the dense "
        "similarity blocks or the scheduled pairs only; 'auto' marks the one `--logits auto` "
        f"takes. Strata: {args.stratify}. Default model sizes, fanout 10,10, built-in sampler. "
        "Breakdown: mean ms per step of sampling / encoder and head (forward + backward) / "
        "dense similarity blocks / stratification and draw (with the pairs path's "
        "similarities) / loss forward + backward / optimiser (edgegcl/phases.py). "
        f"Plot: {args.name}.png; raw: {args.name}.csv.", "",
        "| graph | mode | batch | theta_max | logits | auto | epoch s | peak MiB | "
        "breakdown ms: sample / encoder / sims / strata / loss / optim |",
        "|---|---|---|---|---|---|---|---|---|",
        *(f"| {r['graph']} | {r['mode']} | {r['batch_size']} | {r['theta_max']:.1f} | "
          f"{r['logits']} | {'yes' if r['auto'] else ''} | "
          + ("OOM | OOM | |" if r["oom"] else
             f"{r['epoch_s']:.3f} | {r['peak_MiB']:.0f} | {_breakdown(r)} |")
          for r in rows), "",
        "Each theta_max < 1 against theta_max = 1, both on the path `--logits auto` takes "
        "(below 1: the smaller budget is cheaper); 'contrast' is the contrast part of a step "
        "(similarities, strata, loss forward and backward):", "",
        "| graph | mode | batch | theta_max | path | epoch latency ratio | contrast ratio | "
        "peak memory ratio |",
        "|---|---|---|---|---|---|---|---|", *_ratio_lines(rows), ""]
    harness.save(out / f"{args.name}.md", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
