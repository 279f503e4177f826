"""Embeddings judged on the user's task: links (85 / 5 / 10 edge split, AUC / AP / Hits@K of
every scorer beside the raw features and Adamic-Adar) and labels of every shape (ROC-AUC for
binary labels, beside micro-F1 and the majority-class rate).

Every cell is ``edgegcl train --dataset G --seeds S --task T`` run as a user runs it (each
graph's tuned defaults where it has them), one process at a time; ``--resume`` keeps the cells
already in bench/results/NAME.json.

    python -m bench.tasks --root ROOT --graphs Cora,CiteSeer --task link --seeds 5
    python -m bench.tasks --files FILES --graphs tolokers.npz --task node --seeds 5

A graph ending in ``.npz`` is read from ``--files`` (e.g. yandex-research/heterophilous-graphs'
data folder), any other name through ``--root``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import harness
from edgegcl.evaluation.links import SCORERS


def _mean_std(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "std": statistics.pstdev(values)}


def cell(metrics: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """What the report keeps of one run's metrics.json: every figure of the summary (mean and
    std over seeds), the scorers or encoders the seeds chose, and the wall time."""
    seeds = metrics["seeds"]
    summary = {k: v for k, v in metrics["summary"].items()
               if isinstance(v, dict) and "mean" in v and "std" in v}
    return {"metric": metrics["summary"].get("metric"), "figures": summary,
            "scorers": [s.get("scorer") for s in seeds if "scorer" in s],
            "encoders": [s.get("encoder") for s in seeds], "seeds": len(seeds),
            "wall_s": wall_s}


def _f(figures: dict[str, Any], key: str) -> str:
    f = figures.get(key)
    return "" if f is None else f"{f['mean']:.2f} ± {f['std']:.2f}"


def _counts(names: list[str | None]) -> str:
    kept = [n for n in names if n]
    return ", ".join(f"{n} x{kept.count(n)}" for n in dict.fromkeys(kept))


def report(res: dict[str, Any]) -> str:
    lines = ["# Embeddings on the user's task", "", *harness.header(res, note=""),
             "Honest protocol: the checkpoint (and, for links, the scorer) chosen on validation, "
             "test read once; the raw features scored the same way on the same splits. Links: "
             "each seed holds out 5 % / 10 % of the undirected edges for validation / test with "
             "as many non-edges of the whole graph, and trains on the rest; Hits@K against the "
             "test non-edges, as OGB's evaluators. Mean ± std over seeds.", ""]
    links = {k: c for k, c in res["cells"].items() if c["metric"] in ("auc", "ap")}
    nodes = {k: c for k, c in res["cells"].items() if k not in links}
    if links:
        lines += ["## Links", "",
                  "| graph | test AUC | test AP | Hits@50 | scorer (chosen) | AUC "
                  f"{' / '.join(SCORERS)} | raw features AUC (AP) | Adamic-Adar AUC (AP) | "
                  "encoder | wall (s) |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for key, c in links.items():
            f = c["figures"]
            by = " / ".join(_f(f, f"test_auc_{s}") for s in SCORERS)
            lines.append(
                f"| {key} | **{_f(f, 'test_auc')}** | **{_f(f, 'test_ap')}** | "
                f"{_f(f, 'test_hits@50')} | {_counts(c['scorers'])} | {by} | "
                f"{_f(f, 'raw_features_test_auc')} ({_f(f, 'raw_features_test_ap')}) | "
                f"{_f(f, 'adamic_adar_test_auc')} ({_f(f, 'adamic_adar_test_ap')}) | "
                f"{_counts(c['encoders'])} | {c['wall_s']:.0f} |")
        lines += ["", "Every scorer's AP and Hits@K, and the raw features' per scorer, are in "
                  "the JSON file beside this one.", ""]
    if nodes:
        lines += ["## Node labels", "",
                  "| graph | metric | test (chosen metric) | raw features | micro-F1 | "
                  "majority class | macro-F1 | encoder | wall (s) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for key, c in nodes.items():
            f, m = c["figures"], c["metric"]
            lines.append(
                f"| {key} | {m} | **{_f(f, f'test_{m}')}** | {_f(f, f'raw_features_test_{m}')} | "
                f"{_f(f, 'test_micro_f1')} | {_f(f, 'majority_rate')} | "
                f"{_f(f, 'test_macro_f1')} | {_counts(c['encoders'])} | {c['wall_s']:.0f} |")
        lines.append("")
    lines += ["Commands:", ""] + [f"- {k}: `{c['command']}`" for k, c in res["cells"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--root", default=None, help="datasets folder (PyG's raw files)")
    p.add_argument("--files", default=None, help="folder of the .npz graphs")
    p.add_argument("--graphs", default="Cora,CiteSeer")
    p.add_argument("--task", choices=("node", "link"), default="link")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--extra", default="", help="more edgegcl train flags for every cell (they "
                   "name the cell beside the graph and task)")
    p.add_argument("--name", default="tasks", help="file stem in bench/results/")
    p.add_argument("--resume", action="store_true", help="keep the cells already measured")
    args = p.parse_args()
    res = harness.cells_record("tasks", sys.argv[1:], args.name, args.root, args.files,
                               args.resume)
    with tempfile.TemporaryDirectory() as tmp:
        for graph in args.graphs.split(","):
            dataset = harness.graph_flag(graph, args.files)
            key = " / ".join([graph, args.task, *([args.extra] if args.extra else [])])
            if key in res["cells"]:
                continue
            out = Path(tmp) / f"{len(res['cells'])}"
            flags = ["--dataset", dataset, *(["--root", args.root] if args.root else []),
                     "--seeds", str(args.seeds), "--task", args.task, *args.extra.split()]
            run = harness.train(flags, out, root=args.root, show=True)
            res["cells"][key] = {"command": run.command.replace(args.files or "\0", "FILES"),
                                 **cell(run.metrics, run.wall_s)}
            res["wall_min"] = harness.wall_min(res)
            harness.write(args.name, res, report(res))  # after every cell: resumable
    print(report(res))


if __name__ == "__main__":
    main()
