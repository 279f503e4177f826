"""Epoch time of each built-in encoder against the GCN's, at the same widths and settings,
measured side by side: the encoders' epochs interleaved round by round (the order reversed
every other round) in one process, so the machine's drift hits them alike.

Each graph trains as ``edgegcl train`` would on it (full graph up to 10 000 nodes,
neighbour-sampled batches above), the schedule at the state a run reaches (theta_max in use).

    python -m bench.encoder_speed --root ROOT --graphs Cora,Actor,synthetic-50k --rounds 7
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import torch

from bench import harness
from edgegcl import TrainConfig, Trainer
from edgegcl.data import SyntheticSpec, load_graph, synthetic_graph
from edgegcl.nn.augment import as_features
from edgegcl.training.placement import resolve_mode, structure_loader

ENCODERS = ("gcn", "ego", "poly")


def _graph(name: str, root: str | None) -> Any:
    if name.startswith("synthetic-"):
        nodes = int(name.removeprefix("synthetic-").removesuffix("k")) * 1000
        return synthetic_graph(SyntheticSpec(num_nodes=nodes, num_classes=10, num_features=128,
                                             avg_degree=10.0, seed=0))
    return load_graph(name, root)


def measure(data: Any, rounds: int, threads: int) -> dict[str, Any]:
    """Median seconds per epoch of each encoder (rounds interleaved) and the ratio to gcn's."""
    torch.set_num_threads(threads)
    base = TrainConfig(epochs=1000, T_init=0, T_int=1)
    mode = resolve_mode(base, data, torch.device("cpu"))
    x = as_features(data.x) if mode == "full" else data.x
    trainers = {}
    for name in ENCODERS:
        trainer = Trainer(base.with_encoder(name), data.x.size(1), mode=mode, seed=0)
        trainer.scheduler.eta = {c: 1.0 for c in trainer.scheduler.eta}  # theta_max in use
        trainers[name] = trainer
    loader = None if mode == "full" else structure_loader(data, base.run, 0)

    def epoch(name: str) -> float:
        t0 = time.perf_counter()
        trainers[name].fit_epoch(x, data.edge_index, loader)
        return time.perf_counter() - t0

    times: dict[str, list[float]] = {name: [] for name in ENCODERS}
    for name in ENCODERS:  # warm-up
        epoch(name)
    for r in range(rounds):
        for name in (ENCODERS if r % 2 == 0 else ENCODERS[::-1]):
            times[name].append(epoch(name))
    median = {name: statistics.median(t) for name, t in times.items()}
    return {"mode": mode, "nodes": data.num_nodes, "median_s": median,
            "spread_s": {n: [min(t), max(t)] for n, t in times.items()},
            "ratio_to_gcn": {n: median[n] / median["gcn"] for n in ENCODERS}}


def main() -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--root", default=None)
    p.add_argument("--graphs", default="Cora,synthetic-50k")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--name", default="encoder-speed")
    args = p.parse_args()
    res: dict[str, Any] = {**harness.record("encoder_speed", sys.argv[1:], root=args.root),
                           "graphs": {}}
    for name in args.graphs.split(","):
        res["graphs"][name] = measure(_graph(name, args.root), args.rounds, args.threads)
        print(name, res["graphs"][name]["ratio_to_gcn"], flush=True)
    res["wall_min"] = harness.wall_min(res)
    harness.write(args.name, res, report(res))
    print(report(res))


def report(res: dict[str, Any]) -> str:
    lines = ["# Epoch time of the encoders against the GCN's", "", *harness.header(res),
             "Default widths (512 / 256, head 256), theta_max 0.1 in use, the random subset; "
             "median of the interleaved rounds (spread: fastest - slowest).", "",
             "| graph | mode | encoder | epoch (s) | spread (s) | x GCN |",
             "|---|---|---|---|---|---|"]
    for graph, g in res["graphs"].items():
        for name in ENCODERS:
            lo, hi = g["spread_s"][name]
            lines.append(f"| {graph} ({g['nodes']} nodes) | {g['mode']} | {name} | "
                         f"{g['median_s'][name]:.3f} | {lo:.3f}-{hi:.3f} | "
                         f"{g['ratio_to_gcn'][name]:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
