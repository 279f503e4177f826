"""Nodes that arrive after training, embedded on the device: 10 % of the nodes held out with
their edges, the encoder trained on the rest, the whole graph embedded by the exported model in
edgegcl-embed, the held-out nodes scored as new nodes beside the raw features.

For each graph and seed: ``edgegcl train --dataset seen.npz --seeds 1`` (the seen graph, its
defaults), ``edgegcl export m.onnx --run RUN --graph seen.npz``, ``edgegcl-embed m.onnx --graph
full.npz``; the largest difference to torch's embeddings of the same graph
(``edgegcl.load_run(RUN).embed``); then ``inductive_scores`` on the held-out nodes, of the
device's embeddings and of the raw features.

The protocol: a seeded share of the nodes (10 % by default) is held out with every edge it
touches (``hold_out_nodes``); the encoder trains on the graph of the other nodes
(``seen_graph``). Then the whole graph, held-out nodes included, is embedded by the trained
model, and the held-out nodes are scored as new nodes (``inductive_scores``): their labels by a
linear probe fitted on seen nodes only (its weight decay chosen on other seen nodes), their own
edges against as many non-edges from each of them, by the embeddings' cosine similarity. The
raw features are scored the same way.

    python -m bench.inductive --root ROOT --files FILES --graphs Cora,chameleon_filtered.npz --seeds 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

import edgegcl
from bench import harness
from edgegcl.evaluation.links import pair_figures
from edgegcl.evaluation.probe import Split, linear_probe


@dataclass(frozen=True)
class NodeHoldout:
    """The nodes training sees and the ones held out (sorted node ids of the whole graph)."""

    num_nodes: int
    seen: Tensor
    held: Tensor

    def seen_graph(self, data: Data) -> Data:
        """The graph of the seen nodes alone (renumbered 0 .. |seen| - 1 in order): their
        features, labels and the edges between them; every edge touching a held-out node is
        gone."""
        keep = torch.zeros(self.num_nodes, dtype=torch.bool)
        keep[self.seen] = True
        new_id = torch.full((self.num_nodes,), -1, dtype=torch.long)
        new_id[self.seen] = torch.arange(self.seen.numel())
        edges = data.edge_index[:, keep[data.edge_index[0]] & keep[data.edge_index[1]]]
        y = getattr(data, "y", None)
        return Data(x=data.x[self.seen], edge_index=new_id[edges],
                    **({} if y is None else {"y": y[self.seen]}))


def hold_out_nodes(num_nodes: int, seed: int, share: float = 0.1) -> NodeHoldout:
    """Hold out ``floor(share * N)`` nodes (at least one) chosen at random (seeded).

    Example:
        >>> h = hold_out_nodes(50, seed=0)
        >>> h.seen.numel(), h.held.numel()
        (45, 5)
    """
    count = max(1, int(share * num_nodes))
    perm = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(seed))
    return NodeHoldout(num_nodes, perm[count:].sort().values, perm[:count].sort().values)


def _held_pairs(data: Data, holdout: NodeHoldout, seed: int) -> tuple[Tensor, Tensor]:
    """The held-out nodes' own edges (each undirected edge once) and as many non-edges, each
    from a held-out node to a node drawn uniformly."""
    n = holdout.num_nodes
    held = torch.zeros(n, dtype=torch.bool)
    held[holdout.held] = True
    lo = torch.minimum(data.edge_index[0], data.edge_index[1])
    hi = torch.maximum(data.edge_index[0], data.edge_index[1])
    keys = torch.unique((lo * n + hi)[(lo != hi) & (held[lo] | held[hi])])
    positive = torch.stack([keys // n, keys % n])
    edges = torch.unique(lo * n + hi)
    g = torch.Generator().manual_seed(seed)
    found = torch.empty(0, dtype=torch.long)
    while found.numel() < keys.numel():
        a = holdout.held[torch.randint(0, holdout.held.numel(), (2 * keys.numel() + 8,),
                                       generator=g)]
        b = torch.randint(0, n, (a.numel(),), generator=g)
        k = torch.minimum(a, b) * n + torch.maximum(a, b)
        k = k[(a != b) & ~torch.isin(k, edges)]
        found = torch.unique(torch.cat([found, k]))
    found = found[torch.randperm(found.numel(), generator=g)[:keys.numel()]]
    return positive, torch.stack([found // n, found % n])


def _cosine(z: Tensor, pairs: Tensor) -> Tensor:
    return torch.nn.functional.cosine_similarity(z[pairs[0]].float(), z[pairs[1]].float(),
                                                 dim=1, eps=1e-12)


def inductive_scores(z: Tensor, data: Data, holdout: NodeHoldout, seed: int = 0
                     ) -> dict[str, float]:
    """The held-out nodes scored as new nodes from embeddings (or features) ``z`` [N, D] of
    the whole graph: ``test_micro_f1`` / ``test_macro_f1`` (and ``test_roc_auc`` for binary
    labels) of a probe fitted on seen nodes (80 % to fit, 20 % to choose its weight decay),
    and ``link_auc`` / ``link_ap`` of their own edges against non-edges by cosine."""
    out: dict[str, float] = {}
    y = getattr(data, "y", None)
    if y is not None:
        order = holdout.seen[torch.randperm(holdout.seen.numel(),
                                            generator=torch.Generator().manual_seed(seed))]
        cut = int(0.8 * order.numel())
        scores = linear_probe(z, y, Split(order[:cut], order[cut:], holdout.held), seed=seed)
        out.update({k: v for k, v in scores.figures().items() if k.startswith("test_")})
        out["majority_rate"] = scores.majority
    positive, negative = _held_pairs(data, holdout, seed)
    links = pair_figures(_cosine(z, positive), _cosine(z, negative))
    out.update(link_auc=links["auc"], link_ap=links["ap"])
    return out


def _save(path: Path, data: Any) -> Path:
    arrays = {"x": data.x.numpy(), "edge_index": data.edge_index.numpy()}
    if getattr(data, "y", None) is not None:
        arrays["y"] = data.y.numpy()
    np.savez(path, **arrays)
    return path


def _run(cmd: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", *cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed: {proc.stderr.strip()[-500:]}")


def one_seed(data: Any, seed: int, work: Path, extra: list[str]) -> dict[str, Any]:
    """One held-out split: train, export, embed on the runtime; the scores."""
    holdout = hold_out_nodes(data.num_nodes, seed)
    seen, full = _save(work / "seen.npz", holdout.seen_graph(data)), _save(work / "full.npz", data)
    run = harness.train(["--dataset", str(seen), "--seeds", "1", *extra], work / "run")
    model = work / "m.onnx"
    _run(["edgegcl", "export", str(model), "--run", str(run.run_dir), "--graph", str(seen)])
    _run(["edgegcl_embed.embed", str(model), "--graph", str(full), "--out", str(work / "z.npy")])
    device = torch.from_numpy(np.load(work / "z.npy"))
    torch_z = edgegcl.load_run(run.run_dir).embed(full)
    summary = run.metrics["summary"]
    metric = summary.get("metric", "micro_f1")
    return {"seed": seed, "held": int(holdout.held.numel()),
            "max_abs_diff": float((device - torch_z).abs().max()),
            "embeddings": inductive_scores(device, data, holdout, seed),
            "raw_features": inductive_scores(data.x, data, holdout, seed),
            "transductive": {f"test_{metric}": summary[f"test_{metric}"]["mean"],
                             "metric": metric},
            "encoder": run.metrics["seeds"][0].get("encoder"), "wall_s": run.wall_s}


def _mean_std(values: list[float]) -> str:
    return f"{statistics.fmean(values):.2f} ± {statistics.pstdev(values):.2f}"


def report(res: dict[str, Any]) -> str:
    lines = ["# New nodes, embedded on the device", "", *harness.header(res, note=""),
             "Each seed holds out 10 % of the nodes with every edge they touch; the encoder "
             "trains on the rest (its defaults, one seed); the exported model embeds the whole "
             "graph in edgegcl-embed. Node figures: a probe fitted on seen nodes only, tested on "
             "the held-out ones. Links: the held-out nodes' own edges against as many non-edges "
             "from each of them, by cosine. Transductive: the same run's honest test figure on "
             "the seen graph's random split. Mean ± std over seeds.", "",
             "| graph | held-out micro-F1 (raw) | held-out link AUC (raw) | held-out link AP (raw) "
             "| transductive test | device vs torch (max abs) | encoder |",
             "|---|---|---|---|---|---|---|"]
    for graph, seeds in res["cells"].items():
        e = [s["embeddings"] for s in seeds]
        r = [s["raw_features"] for s in seeds]
        metric = seeds[0]["transductive"]["metric"]
        lines.append(
            f"| {graph} | **{_mean_std([x['test_micro_f1'] for x in e])}** "
            f"({_mean_std([x['test_micro_f1'] for x in r])}) | "
            f"**{_mean_std([x['link_auc'] for x in e])}** ({_mean_std([x['link_auc'] for x in r])})"
            f" | {_mean_std([x['link_ap'] for x in e])} ({_mean_std([x['link_ap'] for x in r])}) | "
            f"{metric} {_mean_std([s['transductive'][f'test_{metric}'] for s in seeds])} | "
            f"{max(s['max_abs_diff'] for s in seeds):.1e} | "
            f"{', '.join(sorted({str(s['encoder']) for s in seeds}))} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--root", default=None, help="datasets folder (PyG's raw files)")
    p.add_argument("--files", default=None, help="folder of the .npz graphs")
    p.add_argument("--graphs", default="Cora")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--extra", default="", help="more edgegcl train flags for every run")
    p.add_argument("--name", default="inductive", help="file stem in bench/results/")
    p.add_argument("--resume", action="store_true",
                   help="keep the seeds already measured; a graph with fewer goes on from there")
    args = p.parse_args()
    res = harness.cells_record("inductive", sys.argv[1:], args.name, args.root, args.files,
                               args.resume)
    for graph in args.graphs.split(","):
        seeds = list(res["cells"].get(graph, []))[:args.seeds]
        if len(seeds) == args.seeds:
            continue
        data = edgegcl.load_graph(harness.graph_flag(graph, args.files), args.root)
        for seed in range(len(seeds), args.seeds):
            with tempfile.TemporaryDirectory() as tmp:
                seeds.append(one_seed(data, seed, Path(tmp), args.extra.split()))
            print(f"{graph} seed {seed}: {seeds[-1]['embeddings']} (raw "
                  f"{seeds[-1]['raw_features']})", flush=True)
        res["cells"][graph] = seeds
        res["wall_min"] = harness.wall_min(res)
        harness.write(args.name, res, report(res))
    print(report(res))


if __name__ == "__main__":
    main()
