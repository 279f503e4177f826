"""Adjusted homophily of labelled graphs: what ``--encoder auto`` reads to skip its search.

For each graph: the adjusted homophily of all its edges (Platonov et al. 2023) and, per seed,
of the edges between that seed's training and validation nodes (its random 10/10/80 split, the
nodes the search would read), with the lower bound the run compares with
``HOMOPHILY_THRESHOLD`` (the estimate less two standard errors). A seed whose bound reaches the
threshold trains the GCN without a search (edgegcl.training.choice). Beside them, the
majority-class rate of the seeds' test nodes, what a micro-F1 must beat. Seconds per graph: no
training.

    python -m bench.homophily --root ROOT --graphs Cora,CiteSeer
    python -m bench.homophily --files FILES --graphs actor.npz,chameleon_filtered.npz,tolokers.npz
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bench import harness


def measure(graph: str, root: str | None, files: str | None, seeds: int) -> dict[str, Any]:
    """The whole graph's adjusted homophily and each seed's on its labelled nodes."""
    import torch

    from edgegcl.data import load_graph
    from edgegcl.data.homophily import adjusted_homophily
    from edgegcl.evaluation.metrics import majority_rate
    from edgegcl.evaluation.probe import random_split
    from edgegcl.training.results import HOMOPHILY_THRESHOLD

    data = load_graph(harness.graph_flag(graph, files), root)
    whole = adjusted_homophily(data.y, data.edge_index, torch.arange(data.num_nodes))
    per_seed = []
    for seed in range(seeds):
        split = random_split(data.num_nodes, seed)
        found = adjusted_homophily(data.y, data.edge_index, torch.cat([split.train, split.val]))
        bound = None if found is None else found.value - 2 * found.standard_error
        per_seed.append({"value": None if found is None else found.value,
                         "edges": 0 if found is None else found.edges, "bound": bound,
                         "skips_search": bound is not None and bound >= HOMOPHILY_THRESHOLD,
                         "majority": majority_rate(data.y[split.test])})
    return {"nodes": data.num_nodes, "edges": int(data.edge_index.size(1)),
            "whole": None if whole is None else whole.value, "seeds": per_seed}


def report(res: dict[str, Any]) -> str:
    from edgegcl.training.results import HOMOPHILY_THRESHOLD

    def number(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    lines = ["# Adjusted homophily: where --encoder auto keeps the GCN without a search", "",
             *harness.header(res, note=""),
             "Adjusted homophily (Platonov et al. 2023): 0 for edges that ignore the classes, 1 "
             "for edges inside them, whatever the class balance. Per seed: the edges between "
             "its training and validation nodes (random 10/10/80 split), with the lower bound "
             f"(estimate - 2 standard errors) that must reach {HOMOPHILY_THRESHOLD} for the "
             "run to skip its search. Beside them, the majority class's share of each seed's "
             "test nodes: the micro-F1 of always predicting it (mean over the seeds).", "",
             "| graph | nodes | edges | whole graph | per seed: estimate / lower bound (edges) "
             "| seeds without a search | majority class on test nodes |",
             "|---|---|---|---|---|---|---|"]
    for graph, cell in res["cells"].items():
        seeds = "; ".join(f"{number(s['value'])} / {number(s['bound'])} ({s['edges']})"
                          for s in cell["seeds"])
        skipped = sum(s["skips_search"] for s in cell["seeds"])
        majority = sum(s["majority"] for s in cell["seeds"]) / len(cell["seeds"])
        lines.append(f"| {graph} | {cell['nodes']} | {cell['edges']} | {number(cell['whole'])} "
                     f"| {seeds} | {skipped} of {len(cell['seeds'])} | {majority:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = harness.ArgumentParser(prog="python -m bench.homophily", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", help="datasets folder (PyG's raw files) for graphs given by name")
    p.add_argument("--files", help="folder of .npz graph files (the heterophilous-graph "
                   "benchmark's layout, or edgegcl's)")
    p.add_argument("--graphs", default="Cora,CiteSeer",
                   help="comma-separated dataset names or .npz file names in --files")
    p.add_argument("--seeds", type=int, default=5, choices=range(1, 101), metavar="1..100",
                   help="seeds whose splits are measured")
    p.add_argument("--name", default="homophily", help="file stem in bench/results/")
    args = p.parse_args()
    res = harness.cells_record("homophily", sys.argv[1:], args.name, args.root, args.files)
    for graph in args.graphs.split(","):
        res["cells"][graph] = measure(graph, args.root, args.files, args.seeds)
    res["wall_min"] = harness.wall_min(res)
    harness.write(args.name, res, report(res))
    print(report(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
