"""Are the negatives HANS calls hard the hardest? Recall of the hard picks against an exact sort.

A model is trained with ``edgegcl train``'s defaults for the graph (``--epochs`` of them), the
two views of one step are projected, and each way of choosing negatives is asked for its active
sets at a budget (HANS's categories at theta_max x their ratio, every eta = 1). For every anchor
the exact top-k of its 2B - 2 candidates is found by a full ``torch.topk`` (k = the hard count);
**hard recall** is the share of the negatives a method labels hard that lie in that top-k (1 for
the exact hardest, about k / pool for random members of a ratio-cut pool, about M / |N_i| for
the top of a sample of M), **top share** the share of *all* active negatives that lie in it
(uniform: k / |N_i|).

Two readings put the figure in context: the same picks against the exact top-k of another
draw of the two views with the same weights (how much of "hardest" is the augmentation's), and
the kept picks of full-graph training against the exact top-k 1, 5 and 10 epochs later (the
strata are refreshed every T_int epochs). Where the graph has labels, the share of the hard
picks whose node is of the anchor's own class says how many "hard" negatives are false ones
(uniform: about the share of the anchor's class among all nodes, both views).

    python -m bench.hard_recall --root ../shared/datasets --epochs 100
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import harness

import torch

from edgegcl.training.config import TrainConfig, build, tuned_defaults
from edgegcl.contrast.scheduler import CATEGORIES
from edgegcl.contrast.dense import Similarities, similarities
from edgegcl.contrast.config import SAMPLE_MIN
from edgegcl.contrast.negatives import ActiveNegatives, num_candidates
from edgegcl.contrast.sampled import sample_size
from edgegcl.contrast.selection import NegativeSelector
from edgegcl.nn.augment import as_features
from edgegcl.training.engine import Trainer

HERE = Path(__file__).resolve().parent
THETAS = (0.1, 0.3, 0.6)
METHODS = {
    "hardest (exact)": dict(pick="hardest", stratify="exact"),
    "random members, exact pools": dict(pick="random", stratify="exact"),
    "random members, sampled pools": dict(pick="random", stratify="sampled"),
}


def exact_top(sims: Similarities, k: int) -> torch.Tensor:
    """[B, 2B] mask of every anchor's k most similar candidates (own columns left out)."""
    cand = sims.candidates(0).detach().clone()
    b = cand.size(0)
    rows = torch.arange(b)
    cand[rows, rows] = cand[rows, rows + b] = -torch.inf
    return torch.zeros_like(cand, dtype=torch.bool).scatter_(1, cand.topk(k, 1).indices, True)


def _share(mask: torch.Tensor, cols: torch.Tensor) -> float:
    return float(mask.gather(1, cols).float().mean()) if cols.numel() else float("nan")


def _same_class(y: torch.Tensor | None, cols: torch.Tensor) -> float:
    """Share of the negatives ``cols`` ([B, K] candidate columns) whose node has the anchor's
    label: false negatives, for a graph with labels (NaN without)."""
    if y is None or not cols.numel():
        return float("nan")
    b = y.numel()
    return float((y[cols % b] == y.unsqueeze(1)).float().mean())


def picks(cfg: TrainConfig, sims: Similarities, theta: float, grow: bool) -> ActiveNegatives:
    """Direction 0's active negatives of ``cfg``'s selector at ``theta``, every eta = 1 (``grow``:
    just below saturation, so sampled strata still rank and label their picks)."""
    run = replace(cfg, theta_max=theta)
    hans = run.build_scheduler()
    hans.eta = dict.fromkeys(CATEGORIES, 0.999 if grow else 1.0)
    selector = NegativeSelector(run.ratio_map(), 1,
                                run.contrast.resolved_stratify(run.scheduler), SAMPLE_MIN, 0,
                                run.pick)
    return selector.get(sims, hans, 1)[0]


def measure(data, cfg: TrainConfig, epochs: int) -> dict[str, Any]:
    x = as_features(data.x)
    trainer = Trainer(cfg, x.size(1), seed=0)
    for _ in range(epochs):
        trainer.fit_epoch(x, data.edge_index)
    b = data.num_nodes
    c = num_candidates(b)
    y = getattr(data, "y", None)

    def views(seed: int) -> Similarities:
        trainer.model.eval()
        with torch.no_grad():
            trainer.views.generator.manual_seed(seed)
            h1, h2 = trainer.project(x, data.edge_index)
        return similarities(h1, h2, cfg.contrast.tau)

    sims, other = views(1), views(2)
    rows: list[dict[str, Any]] = []
    for theta in THETAS:
        k = int(theta * cfg.ratio_map()["hard"] * c)
        top, top_other = exact_top(sims, k), exact_top(other, k)
        for name, over in METHODS.items():
            method = replace(cfg, **over)
            labelled = picks(method, sims, theta, grow=True)
            hard = labelled.segments()["hard"]
            row = {"theta_max": theta, "k": k, "method": name,
                   "hard_recall": _share(top, hard),
                   "hard_recall_other_views": _share(top_other, hard),
                   "top_share": _share(top, labelled.cols),
                   "hard_same_class": _same_class(y, hard)}
            if method.contrast.resolved_stratify(method.schedule.scheduler) == "sampled":
                saturated = picks(method, sims, theta, grow=False)
                row["top_share_saturated"] = _share(top, saturated.cols)
            rows.append(row)
        # the top of a uniform sample of M candidates, as sampled strata would give "hardest"
        run = replace(cfg, theta_max=theta)
        full = run.build_scheduler()
        full.eta = dict.fromkeys(CATEGORIES, 1.0)
        counts = full.counts(c)
        m = sample_size(c, cfg.ratio_map(), counts)
        cand = sims.candidates(0).detach().clone()
        r = torch.arange(b)
        cand[r, r] = cand[r, r + b] = -torch.inf
        sample = torch.stack([torch.randperm(2 * b, generator=torch.Generator().manual_seed(i))
                              for i in range(b)])[:, : m + 2]
        values = cand.gather(1, sample)
        top_of_sample = sample.gather(1, values.topk(counts["hard"], 1).indices)
        rows.append({"theta_max": theta, "k": k, "method": f"top of a sample of M = {m}",
                     "hard_recall": _share(top, top_of_sample),
                     "hard_recall_other_views": _share(top_other, top_of_sample),
                     "top_share": float("nan"), "hard_same_class": _same_class(y, top_of_sample)})
        everyone = torch.arange(2 * b).expand(b, 2 * b)
        rows.append({"theta_max": theta, "k": k, "method": "uniform (expected)",
                     "hard_recall": k / c, "hard_recall_other_views": k / c,
                     "top_share": k / c, "hard_same_class": _same_class(y, everyone)})
    # staleness: the kept picks of training against the exact top-k epochs later
    theta = 0.3
    k = int(theta * cfg.ratio_map()["hard"] * c)
    kept = picks(cfg, sims, theta, grow=True).segments()["hard"]
    stale = {}
    for j in range(1, 11):
        trainer.fit_epoch(x, data.edge_index)
        if j in (1, 5, 10):
            stale[j] = _share(exact_top(views(1), k), kept)
    return {"nodes": b, "candidates": c, "rows": rows, "stale_theta": theta, "stale": stale}


def report(res: dict[str, Any]) -> str:
    lines = ["# Are the hard picks the hardest?", "", *harness.header(res, note=""), (__doc__ or "").split("\n\n")[1].replace("\n", " "),
             "", (__doc__ or "").split("\n\n")[2].replace("\n", " "), ""]
    for g in res["graphs"]:
        lines += [f"## {g['name']}: B = {g['nodes']} anchors (every node), |N_i| = "
                  f"{g['candidates']}, after {res['epochs']} training epochs", "",
                  "| theta_max | k (hard count) | method | hard recall | against other views "
                  "| top share | top share once saturated | hard picks of the anchor's class |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in g["rows"]:
            sat = r.get("top_share_saturated")
            lines.append(f"| {r['theta_max']:g} | {r['k']} | {r['method']} | "
                         f"{r['hard_recall']:.3f} | {r['hard_recall_other_views']:.3f} | "
                         f"{r['top_share']:.3f} | " + (f"{sat:.3f}" if sat is not None else "—")
                         + f" | {r['hard_same_class']:.3f} |")
        lines += ["", f"Kept hardest picks (theta_max {g['stale_theta']:g}) against the exact "
                      "top-k of later epochs' views: " + ", ".join(
                          f"{j} epoch(s) later {v:.3f}" for j, v in g["stale"].items()), ""]
    return "\n".join(lines)


def main() -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--root", required=True)
    p.add_argument("--epochs", type=int, default=100, help="training epochs before measuring")
    p.add_argument("--synthetic-nodes", type=int, default=4096,
                   help="also a planted graph of this many nodes (0: none)")
    args = p.parse_args()

    import sys

    from edgegcl.data import SyntheticSpec, load_graph, synthetic_graph
    from edgegcl.memory import reuse_freed_memory

    reuse_freed_memory()
    t0 = time.perf_counter()
    res: dict[str, Any] = {
        **harness.record("hard_recall", sys.argv[1:], root=args.root),
        "epochs": args.epochs, "graphs": []}
    graphs = [("Cora", load_graph("Cora", args.root),
               build({"dataset": "Cora", **tuned_defaults("Cora")[1]}, {}))]
    if args.synthetic_nodes:
        spec = SyntheticSpec(num_nodes=args.synthetic_nodes)
        graphs.append((f"synthetic ({args.synthetic_nodes} nodes)", synthetic_graph(spec),
                       TrainConfig(encoder="gcn")))
    for name, data, cfg in graphs:
        print(f"hard_recall: {name}", flush=True)
        res["graphs"].append({"name": name, **measure(data, cfg, args.epochs)})
    res["wall_min"] = (time.perf_counter() - t0) / 60
    harness.save(harness.RESULTS / "hard-recall.json", json.dumps(res, indent=1) + "\n")
    harness.save(harness.RESULTS / "hard-recall.md", report(res))
    print(report(res))


if __name__ == "__main__":
    main()
