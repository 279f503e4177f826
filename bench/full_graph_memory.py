"""A full-graph step's peak memory beside the prediction ``--mode auto`` decides by.

``edgegcl train --mode auto`` trains full-graph while
``edgegcl.training.placement.full_graph_bytes`` predicts that a full-graph step takes at most
half of the memory available. This benchmark measures what such a step takes, on planted
synthetic graphs (10 classes, 128 features, the default model, ``--encoder gcn``), one size
after another in this process:

- the views' contrast at each ``--thetas`` (the random subset; the profiler's
  ``measure_theta``: warm-up and timed steps with the schedule saturated, a strata refresh
  included), average degree 10;
- the edge objective (``--task link``'s, the default model) at average degree 10 and 20:
  three full-graph steps of a ``Trainer``.

Each peak is above the level before the model is built (``edgegcl.memory.PeakMemory``: CPU
RSS sampled every 2 ms, or CUDA's allocator), beside the prediction; a prediction below the
measurement would let ``--mode auto`` pick a step that does not fit.

    python -m bench.full_graph_memory [--sizes 2000,4000,8000] [--thetas 0.1,0.3,1.0]
        [--edge-sizes 10000,20000] [--device cpu]
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from bench import harness
from edgegcl.budget.profiler import measure_theta
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.memory import PeakMemory, reuse_freed_memory
from edgegcl.training.config import TrainConfig
from edgegcl.training.engine import Trainer
from edgegcl.training.placement import full_graph_bytes

EDGE_DEGREES = (10.0, 20.0)
"""Average degrees of the edge objective's graphs: its step grows with the edges."""


def _graph(nodes: int, degree: float) -> Any:
    return synthetic_graph(SyntheticSpec(num_nodes=nodes, num_classes=10, num_features=128,
                                         avg_degree=degree, seed=0))


def views_row(nodes: int, theta: float, device: torch.device) -> dict[str, Any]:
    """The views' full-graph step at ``theta``: measured and predicted bytes."""
    data = _graph(nodes, 10.0)
    cfg = TrainConfig(encoder="gcn", mode="full", device=str(device), theta_max=theta)
    cost = measure_theta(data, cfg, device, theta)
    return {"objective": "views", "nodes": nodes, "edges": int(data.edge_index.size(1)),
            "theta": theta, "measured": cost.peak_bytes, "oom": cost.oom,
            "predicted": full_graph_bytes(cfg, nodes, int(data.edge_index.size(1)),
                                          data.num_features)}


def edges_row(nodes: int, degree: float, device: torch.device) -> dict[str, Any]:
    """Three full-graph steps of the edge objective: measured and predicted bytes."""
    data = _graph(nodes, degree)
    cfg = TrainConfig(encoder="gcn", mode="full", device=str(device), task="link",
                      objective="edges")
    x, edge_index = data.x.to(device), data.edge_index.to(device)
    with PeakMemory(device) as peak:
        trainer = Trainer(cfg, data.num_features, mode="full", device=device, seed=0)
        for _ in range(3):
            trainer.fit_epoch(x, edge_index)
    return {"objective": "edges", "nodes": nodes, "edges": int(edge_index.size(1)),
            "theta": cfg.schedule.theta_max, "measured": peak.peak_bytes, "oom": False,
            "predicted": full_graph_bytes(cfg, nodes, int(edge_index.size(1)),
                                          data.num_features)}


def report(res: dict[str, Any]) -> str:
    """The results as markdown: each step's peak beside the prediction."""
    lines = ["# A full-graph step's peak memory beside --mode auto's prediction", "",
             *harness.header(res),
             "Each row one full-graph step (the views' at theta_max, the random subset; or "
             "the edge objective's) on a planted synthetic graph, default model, --encoder "
             "gcn; 'measured' is the peak above the level before the model was built, "
             "'predicted' edgegcl.training.placement.full_graph_bytes, which --mode auto "
             "compares with half the memory available.", "",
             "| objective | nodes | edges | theta_max | measured MiB | predicted MiB | "
             "predicted / measured |", "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        measured = "out of memory" if r["oom"] else f"{r['measured'] / 2**20:.0f}"
        ratio = "" if r["oom"] or r["measured"] <= 0 else f"{r['predicted'] / r['measured']:.2f}"
        lines.append(f"| {r['objective']} | {r['nodes']} | {r['edges']} | {r['theta']:g} | "
                     f"{measured} | {r['predicted'] / 2**20:.0f} | {ratio} |")
    ratios = [r["predicted"] / r["measured"] for r in res["rows"]
              if not r["oom"] and r["measured"] > 0]
    if ratios:
        lines += ["", f"Prediction / measurement: {min(ratios):.2f} to {max(ratios):.2f}."]
    return "\n".join(lines) + "\n"


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def main() -> None:
    p = harness.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="2000,4000,8000", help="nodes of the views' graphs")
    p.add_argument("--thetas", default="0.1,0.3,1.0", help="theta_max of the views' steps")
    p.add_argument("--edge-sizes", default="10000,20000",
                   help="nodes of the edge objective's graphs ('' for none)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--name", default="full-graph-memory", help="file stem of the results")
    args = p.parse_args()
    try:
        sizes, edge_sizes = _ints(args.sizes), _ints(args.edge_sizes)
        thetas = [float(t) for t in args.thetas.split(",") if t.strip()]
    except ValueError:
        p.error("--sizes, --edge-sizes and --thetas are comma-separated numbers")
    reuse_freed_memory()  # as edgegcl train does
    device = torch.device(args.device)
    res = harness.record("full_graph_memory", sys.argv[1:])
    res["rows"] = []
    for nodes in sizes:
        for theta in thetas:
            res["rows"].append(views_row(nodes, theta, device))
            print(f"full_graph_memory: views, {nodes} nodes, theta_max {theta:g}", flush=True)
    for nodes in edge_sizes:
        for degree in EDGE_DEGREES:
            res["rows"].append(edges_row(nodes, degree, device))
            print(f"full_graph_memory: edges, {nodes} nodes, degree {degree:g}", flush=True)
    res["wall_min"] = harness.wall_min(res)
    harness.write(args.name, res, report(res))
    print(report(res))


if __name__ == "__main__":
    main()
