"""Epoch latency and peak memory per theta_max: what the negative budget buys (issue 4).

For theta_max in {0.1, 0.2, ..., 1.0} and both logits paths (edgegcl.pairs: dense similarity
blocks, scheduled pairs only), the profiler's own measurement (edgegcl.profiler) with HANS
saturated (every eta = 1: the most a run can use at that theta_max): steps after warm-up
scaled to an epoch, peak memory above the level before the model is built; full-graph and
mini-batch mode, on Cora and a 100k-node synthetic graph (full-graph only where its N x N
terms fit). Writes bench/results/budgets.csv, budgets.md and budgets.png.

    python -m bench.budgets --root ../shared/datasets [--device cuda]
"""

from __future__ import annotations

import argparse
import csv
import time
from dataclasses import replace
from pathlib import Path

import torch

from bench.machine import describe
from edgegcl.config import TrainConfig
from edgegcl.data import SyntheticSpec, load_graph, synthetic_graph
from edgegcl.pairs import LOGITS
from edgegcl.profiler import SATURATED, measure_theta
from edgegcl.train import full_graph_bytes

HERE = Path(__file__).resolve().parent
THETAS = [round(0.1 * k, 1) for k in range(1, 11)]
FIELDS = ["graph", "nodes", "mode", "batch_size", "theta_max", "logits", "epoch_s", "peak_MiB",
          "oom"]


def sweep(name: str, data, modes: list[str], cfg: TrainConfig, device: torch.device) -> list[dict]:
    """One row per (mode, theta_max, logits path) on one graph."""
    rows = []
    for mode in modes:
        for theta in THETAS:
            for logits in LOGITS:
                cost = measure_theta(data, replace(cfg, mode=mode, logits=logits), device, theta,
                                     SATURATED)
                rows.append({"graph": name, "nodes": data.num_nodes, "mode": mode,
                             "batch_size": cfg.batch_size if mode == "minibatch"
                             else data.num_nodes, "theta_max": theta, "logits": logits,
                             "epoch_s": cost.epoch_s,
                             "peak_MiB": None if cost.oom else cost.peak_bytes / 2**20,
                             "oom": cost.oom})
                print(rows[-1], flush=True)
    return rows


def _ratio_lines(rows: list[dict]) -> list[str]:
    """theta 0.1 on each path against theta 1.0 on the dense path, for each graph and mode:
    the issue's 'the budget buys something'."""
    out = []
    for graph, mode in dict.fromkeys((r["graph"], r["mode"]) for r in rows):
        by = {(r["theta_max"], r["logits"]): r for r in rows
              if (r["graph"], r["mode"]) == (graph, mode)}
        hi = by.get((1.0, "dense"))
        for logits in LOGITS:
            lo = by.get((0.1, logits))
            if lo and hi and not (lo["oom"] or hi["oom"]):
                out.append(f"| {graph} | {mode} | {logits} | {lo['epoch_s'] / hi['epoch_s']:.2f} | "
                           f"{lo['peak_MiB'] / hi['peak_MiB']:.2f} |")
    return out


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
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=None, help="datasets root holding Cora")
    p.add_argument("--device", default="cpu")
    p.add_argument("--nodes", type=int, default=100_000, help="synthetic graph size")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--out", default=str(HERE / "results"), help="directory for the results")
    args = p.parse_args()
    try:  # checked before minutes of measuring, not after
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit("bench.budgets: the plot needs matplotlib: pip install -e '.[bench]'")
    device = torch.device(args.device)
    cfg = TrainConfig(batch_size=args.batch_size, sampler="builtin")
    start = time.time()
    graphs = [("Cora", load_graph("Cora", args.root)),
              (f"synthetic-{args.nodes // 1000}k",
               synthetic_graph(SyntheticSpec(num_nodes=args.nodes, num_classes=10,
                                             num_features=128, avg_degree=10.0, seed=0)))]
    rows = []
    for name, data in graphs:
        fits = full_graph_bytes(data.num_nodes) < 0.8 * (
            torch.cuda.mem_get_info(device)[0] if device.type == "cuda"
            else __import__("psutil").virtual_memory().available)
        rows += sweep(name, data, ["full", "minibatch"] if fits else ["minibatch"], cfg, device)
    out = Path(args.out)
    with (out / "budgets.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, out / "budgets.png")
    lines = [
        "# Epoch latency and peak memory per theta_max (issue 4)", "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on: {describe()}; "
        f"device {device}; {(time.time() - start) / 60:.1f} min wall.", "",
        f"    python -m bench.budgets --root ROOT --device {args.device} --nodes {args.nodes} "
        f"--batch-size {args.batch_size}", "",
        "Each figure is the profiler's measurement (edgegcl/profiler.py): HANS saturated at that "
        "theta_max, 5 steps after 2 warm-up steps scaled to an epoch (full graph: the median "
        "step, the strata's refresh amortised over T_int; mini-batch: the mean step x batches), "
        "peak memory above the level before the model is built (CUDA allocator peak, or CPU "
        "RSS); 'logits' is the path (edgegcl/pairs.py): the dense similarity blocks or the "
        "scheduled pairs only. Default model sizes, fanout 10,10, built-in sampler. Full-graph "
        "mode only where the N x N terms fit. Plot: budgets.png; raw: budgets.csv.", "",
        "| graph | mode | batch | theta_max | logits | epoch s | peak MiB |",
        "|---|---|---|---|---|---|---|",
        *(f"| {r['graph']} | {r['mode']} | {r['batch_size']} | {r['theta_max']:.1f} | "
          f"{r['logits']} | "
          + ("OOM | OOM |" if r["oom"] else f"{r['epoch_s']:.3f} | {r['peak_MiB']:.0f} |")
          for r in rows), "",
        "theta_max = 0.1 on each path against theta_max = 1.0 on the dense path (below 1: the "
        "smaller budget is cheaper):", "",
        "| graph | mode | logits at 0.1 | epoch latency ratio | peak memory ratio |",
        "|---|---|---|---|---|", *_ratio_lines(rows), ""]
    (out / "budgets.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
