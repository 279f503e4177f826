"""How well does each unsupervised estimate find the false negatives, and what do the strata hold?

A model is trained with the dataset's tuned defaults for ``--epochs`` epochs, the two views of
one step are projected, and every anchor's 2B - 2 candidates are labelled with the anchor's
class (labels are read here only, never by training). Each estimate of "this candidate is a
false negative" is scored against "same class":

- **ProGCL's Beta mixture**: p(true negative) < 0.5 under the two-component mixture fitted to
  the step's similarities (edgegcl.contrast.falseneg, as ``--hardness progcl`` fits it);
- **graph neighbours**: the candidate is a 1-hop neighbour of the anchor (message passing
  makes neighbours alike; homophily makes them same-class);
- **mutual nearest neighbours across the views**: the candidate is among the anchor's k most
  similar other-view rows and the anchor among the candidate's (k = 10);
- **closer than the positive**: the candidate is more similar to the anchor than the anchor's
  own other view (one comparison per candidate against a number every step has).

Then the strata themselves at each theta_max: the hard and intermediate picks of HANS's
hardest picks ranked by similarity (``--hardness similarity``) and by ProGCL's
p(true negative) x similarity (``--hardness progcl``), with the share of each stratum's picks
that are of the anchor's class and their mean cosine similarity.

    python -m bench.false_negatives --root ../shared/datasets --epochs 100
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import harness

import torch

from edgegcl.contrast.falseneg import BetaMixture, FIT_SAMPLE
from edgegcl.contrast.scheduler import CATEGORIES
from edgegcl.contrast.dense import Similarities, similarities
from edgegcl.contrast.negatives import ActiveNegatives
from edgegcl.contrast.selection import NegativeSelector
from edgegcl.nn.augment import as_features
from edgegcl.training.config import TrainConfig, build, tuned_defaults
from edgegcl.training.engine import Trainer

HERE = Path(__file__).resolve().parent
THETAS = (0.1, 0.3)
MUTUAL_K = 10


def candidate_matrix(sims: Similarities) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, 2B] cosine similarities of every anchor's candidates, and the mask of its own two
    columns (the positive and itself), which are no candidates."""
    cand = sims.candidates(0).detach() * sims.tau
    b = cand.size(0)
    own = torch.zeros_like(cand, dtype=torch.bool)
    rows = torch.arange(b)
    own[rows, rows] = own[rows, rows + b] = True
    return cand, own


def scores(predicted: torch.Tensor, truth: torch.Tensor, valid: torch.Tensor) -> dict[str, float]:
    """Precision and recall of ``predicted`` against ``truth`` over the ``valid`` entries."""
    p, t = predicted & valid, truth & valid
    hits = float((p & t).sum())
    return {"flagged_share": float(p.sum()) / float(valid.sum()),
            "precision": hits / max(1.0, float(p.sum())),
            "recall": hits / max(1.0, float(t.sum()))}


def estimates(cand: torch.Tensor, own: torch.Tensor, same: torch.Tensor,
              edge_index: torch.Tensor, generator: torch.Generator) -> dict[str, dict[str, float]]:
    b = cand.size(0)
    valid = ~own
    flat = cand[valid]
    sample = flat[torch.randperm(flat.numel(), generator=generator)[:FIT_SAMPLE]]
    mixture = BetaMixture().fit((sample + 1) / 2)
    p_tn = mixture.true_negative((cand + 1) / 2)
    neighbours = torch.zeros(b, b, dtype=torch.bool)
    neighbours[edge_index[0], edge_index[1]] = True
    graph = torch.cat([neighbours, neighbours], dim=1)
    inter = cand[:, :b].clone()
    inter.fill_diagonal_(-torch.inf)
    top = torch.zeros(b, b, dtype=torch.bool).scatter_(1, inter.topk(MUTUAL_K, 1).indices, True)
    mutual = top & top.t()
    mutual = torch.cat([mutual, torch.zeros_like(mutual)], dim=1)
    closer = cand > cand.diagonal().unsqueeze(1)  # column i of row i: the positive
    means = (mixture.alphas / (mixture.alphas + mixture.betas)).flatten().tolist()
    return {"ProGCL Beta mixture (p(true negative) < 0.5)": {
                **scores(p_tn < 0.5, same, valid),
                "mixture": f"means {means[0]:.3f} / {means[1]:.3f} (cos {2 * means[0] - 1:.3f} / "
                           f"{2 * means[1] - 1:.3f}), upper weight "
                           f"{float(mixture.weights[1]):.3f}"},
            "graph neighbours (1 hop)": scores(graph, same, valid),
            f"mutual {MUTUAL_K} nearest across the views": scores(mutual, same, valid),
            "closer than the positive": scores(closer, same, valid),
            "uniform (every candidate)": scores(valid, same, valid)}


def strata(cfg: TrainConfig, sims: Similarities, cand: torch.Tensor, same: torch.Tensor,
           theta: float, hardness: str) -> dict[str, Any]:
    """HANS's hardest picks at ``theta`` (every eta = 1, just below saturation) ranked by
    ``hardness``: each category's same-class share and mean cosine similarity."""
    run = replace(cfg, theta_max=theta, scheduler="hans", pick="hardest", stratify="exact")
    hans = run.build_scheduler()
    hans.eta = dict.fromkeys(CATEGORIES, 0.999)
    selector = NegativeSelector(run.ratio_map(), 1, "exact", seed=0, pick="hardest",
                                hardness=hardness)
    active: ActiveNegatives = selector.get(sims, hans, 1)[0]
    out: dict[str, Any] = {}
    for cat, cols in active.segments().items():
        out[cat] = {"count": cols.size(1),
                    "same_class": float(same.gather(1, cols).float().mean()),
                    "mean_cos": float(cand.gather(1, cols).mean())}
    return out


def measure(data: Any, cfg: TrainConfig, epochs: int) -> dict[str, Any]:
    x = as_features(data.x)
    trainer = Trainer(cfg, x.size(1), seed=0)
    for _ in range(epochs):
        trainer.fit_epoch(x, data.edge_index)
    trainer.model.eval()
    with torch.no_grad():
        trainer.views.generator.manual_seed(1)
        h1, h2 = trainer.project(x, data.edge_index)
    sims = similarities(h1, h2, cfg.contrast.tau)
    cand, own = candidate_matrix(sims)
    b = cand.size(0)
    y = data.y
    same = (y.repeat(2).unsqueeze(0) == y.unsqueeze(1))
    generator = torch.Generator().manual_seed(0)
    rows = {theta: {h: strata(cfg, sims, cand, same, theta, h)
                    for h in ("similarity", "progcl")} for theta in THETAS}
    return {"nodes": b, "candidates": 2 * b - 2,
            "estimates": estimates(cand, own, same, data.edge_index, generator),
            "strata": {f"{t:g}": v for t, v in rows.items()}}


def report(res: dict[str, Any]) -> str:
    intro = (__doc__ or "").split("\n\n")
    lines = ["# False negatives: estimates against the labels, and what the strata hold", "",
             *harness.header(res, note=""),
             *(p.replace("\n  ", " ").replace("\n- ", "\0").replace("\n", " ").replace("\0", "\n- ")
               + "\n" for p in intro[1:4])]
    for g in res["graphs"]:
        lines += [f"## {g['name']}: B = {g['nodes']} anchors, |N_i| = {g['candidates']}, after "
                  f"{res['epochs']} epochs of its tuned defaults", "",
                  "| estimate of a false negative | flagged share | precision (same class) | "
                  "recall | note |", "|---|---|---|---|---|"]
        for name, e in g["estimates"].items():
            lines.append(f"| {name} | {e['flagged_share']:.3f} | {e['precision']:.3f} | "
                         f"{e['recall']:.3f} | {e.get('mixture', '')} |")
        lines += ["", "| theta_max | ranked by | hard: count / same class / mean cos | "
                      "inter: count / same class / mean cos | easy: count / same class / "
                      "mean cos |", "|---|---|---|---|---|"]
        for theta, by in g["strata"].items():
            for hardness, cats in by.items():
                cells = " | ".join(f"{c['count']} / {c['same_class']:.3f} / {c['mean_cos']:.3f}"
                                   for c in (cats[k] for k in CATEGORIES))
                lines.append(f"| {theta} | {hardness} | {cells} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--root", required=True)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--datasets", default="Cora")
    p.add_argument("--synthetic-nodes", type=int, default=2708,
                   help="also a planted graph of this many nodes, false negatives known by "
                        "construction (0: none)")
    p.add_argument("--name", default="false-negatives")
    args = p.parse_args()

    from edgegcl.data import SyntheticSpec, load_graph, synthetic_graph

    t0 = time.perf_counter()
    res: dict[str, Any] = {
        **harness.record("false_negatives", sys.argv[1:], root=args.root),
        "epochs": args.epochs, "graphs": []}
    graphs = [(ds, load_graph(ds, args.root), build({"dataset": ds, **tuned_defaults(ds)[1]}, {}))
              for ds in args.datasets.split(",") if ds]
    if args.synthetic_nodes:
        spec = SyntheticSpec(num_nodes=args.synthetic_nodes)
        graphs.append((f"synthetic ({args.synthetic_nodes} nodes, planted classes)",
                       synthetic_graph(spec), TrainConfig(encoder="gcn")))
    for name, data, cfg in graphs:
        print(f"false_negatives: {name}", flush=True)
        res["graphs"].append({"name": name, **measure(data, cfg, args.epochs)})
    res["wall_min"] = (time.perf_counter() - t0) / 60
    harness.save(harness.RESULTS / f"{args.name}.json", json.dumps(res, indent=1) + "\n")
    harness.save(harness.RESULTS / f"{args.name}.md", report(res))
    print(report(res))


if __name__ == "__main__":
    main()
