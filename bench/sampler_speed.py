"""Neighbour-sampling throughput: the built-in sampler against PyG's NeighborLoader (issue 3).

Sampled nodes per second (every node of every batch's subgraph, seeds included) on a
synthetic 100k-node graph (average degree ~10), batches of B = 1024 seeds, fanout 10,10, one
thread. The samplers alternate in rounds of ``--batches`` batches after a warm-up round, so a
background load does not favour one. PyG's loader needs pyg-lib or torch-sparse
(``pip install -e '.[sparse]'``); without them only the built-in sampler is measured.

    python -m bench.sampler_speed
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from itertools import islice
from pathlib import Path

from bench import harness

import torch

from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.data.sampling import make_loader, pyg_sampler_available

HERE = Path(__file__).resolve().parent


def one_round(loader, batches: int) -> tuple[float, int, int]:
    """(seconds, sampled nodes, sampled edges) for ``batches`` batches of a fresh epoch."""
    t0 = time.perf_counter()
    nodes = edges = 0
    for batch in islice(loader, batches):
        nodes += batch.num_nodes
        edges += batch.edge_index.size(1)
    return time.perf_counter() - t0, nodes, edges


def main() -> None:
    p = harness.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=40, help="batches per timed round")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)
    res = harness.record("sampler_speed", sys.argv[1:])
    data = synthetic_graph(SyntheticSpec(num_nodes=args.nodes, num_classes=10, num_features=128,
                                         avg_degree=10.0, seed=0))
    names = ["builtin", "pyg"] if pyg_sampler_available() else ["builtin"]
    loaders = {n: make_loader(data, args.batch_size, [10, 10], sampler=n, seed=0) for n in names}
    rates: dict[str, list[float]] = {n: [] for n in names}
    per_batch: dict[str, list[tuple[int, int]]] = {n: [] for n in names}
    for r in range(args.rounds + 1):
        for n in names:
            sec, nodes, edges = one_round(loaders[n], args.batches)
            if r > 0:
                rates[n].append(nodes / sec)
                per_batch[n].append((nodes // args.batches, edges // args.batches))
    rows = [f"| {n} | {statistics.median(rates[n]) / 1e6:.2f} | "
            f"{statistics.fmean(b[0] for b in per_batch[n]):.0f} | "
            f"{statistics.fmean(b[1] for b in per_batch[n]):.0f} |" for n in names]
    lines = ["# Neighbour-sampling throughput", "",
             *harness.header({**res, "wall_min": harness.wall_min(res)}),
             f"Synthetic graph, {args.nodes} nodes, average degree ~10; B = {args.batch_size} seeds, "
             "fanout 10,10, one thread; median over rounds of sampled nodes (subgraph nodes, "
             "seeds included) per second.", "",
             "| sampler | M sampled nodes / s | nodes / batch | edges / batch |",
             "|---|---|---|---|", *rows, ""]
    if len(names) == 2:
        ratio = statistics.median(rates["builtin"]) / statistics.median(rates["pyg"])
        lines += [f"Built-in / PyG: {ratio:.2f} (target: at least 0.5).", ""]
    else:
        lines += ["PyG's NeighborLoader was not measured: neither pyg-lib nor torch-sparse is "
                  "installed.", ""]
    harness.save(harness.RESULTS / "sampler.md", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
