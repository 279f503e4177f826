"""Which encoder fits which graph: honest test micro-F1 of each encoder (and of ``auto``, the
default) beside the raw features' probe on the same splits, the graphs' published splits,
what ``auto`` chose and what its search cost, and each trained model's export.

Every cell is ``edgegcl train --dataset G --seeds S --encoder E`` run as a user runs it (each
graph's tuned defaults where it has them), one process at a time; ``--resume`` keeps the cells
already in bench/results/NAME.json. With ``--export`` each cell's kept checkpoint is exported
as a user would (``edgegcl export m.onnx --run RUN --quantize int8``) and its lines recorded:
onnxruntime against torch, and INT8 against fp32.

    python -m bench.encoders --root ROOT --files FILES \\
        --graphs Actor,chameleon_filtered.npz,Cora,CiteSeer --encoders auto,gcn,ego,poly --seeds 5

A graph ending in ``.npz`` is read from ``--files`` (e.g. yandex-research/heterophilous-graphs'
data folder), any other name through ``--root``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import harness

EXPORT_LINE = re.compile(r"max abs diff ([0-9.e+-]+)")
COSINE_LINE = re.compile(r"mean cosine to fp32 ([0-9.]+)")


def _mean_std(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "std": statistics.pstdev(values)}


def cell(metrics: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """What the report keeps of one run's metrics.json."""
    seeds = metrics["seeds"]
    out: dict[str, Any] = {
        "test": _mean_std([s["test_micro_f1"] for s in seeds]),
        "val": _mean_std([s["val_micro_f1"] for s in seeds]),
        "raw": _mean_std([s["raw_features"]["test_micro_f1"] for s in seeds]),
        "epoch_s": statistics.fmean(s["epoch_time_s"]["median"] for s in seeds),
        "train_s": statistics.fmean(s["train_time_s"] for s in seeds),
        "wall_s": wall_s, "encoders": [s.get("encoder") for s in seeds],
        "search_s": [s["encoder_choice"]["seconds"] for s in seeds if "encoder_choice" in s],
    }
    published = [s["published_split"] for s in seeds if "published_split" in s]
    if published:
        out["published"] = {"test": _mean_std([p["test_micro_f1"] for p in published]),
                            "raw": _mean_std([p["raw_features"]["test_micro_f1"]
                                              for p in published]),
                            "splits": [p["split"] for p in published],
                            "count": published[0]["splits"]}
    return out


def export(run_dir: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``edgegcl export`` of a run's kept checkpoint with INT8, as a user runs it: the largest
    onnxruntime-torch difference and INT8's mean cosine to fp32."""
    model = run_dir / "m.onnx"
    proc = subprocess.run([sys.executable, "-m", "edgegcl", "export", str(model), "--run",
                           str(run_dir), "--quantize", "int8"], capture_output=True, text=True,
                          env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"edgegcl export failed: {proc.stderr.strip()[-500:]}")
    diffs = [float(d) for d in EXPORT_LINE.findall(proc.stdout)]
    cosine = COSINE_LINE.search(proc.stdout)
    report = json.loads((run_dir / "m.int8.json").read_text())
    return {"max_abs_diff": max(diffs), "int8_mean_cosine": float(cosine.group(1)) if cosine
            else None, "int8_micro_f1_change": (report.get("downstream") or {}).get("change")}


def main() -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--root", default=None, help="datasets folder (PyG's raw files)")
    p.add_argument("--files", default=None, help="folder of the .npz graphs")
    p.add_argument("--graphs", default="Actor,Cora,CiteSeer")
    p.add_argument("--encoders", default="auto,gcn,ego,poly")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--extra", default="", help="more edgegcl train flags for every cell (they "
                   "name the cell beside graph and encoder, so one file holds several)")
    p.add_argument("--export", action="store_true", help="export each cell's checkpoint")
    p.add_argument("--name", default="encoders", help="file stem in bench/results/")
    p.add_argument("--resume", action="store_true", help="keep the cells already measured")
    args = p.parse_args()
    res = harness.cells_record("encoders", sys.argv[1:], args.name, args.root, args.files,
                               args.resume)
    with tempfile.TemporaryDirectory() as tmp:
        for graph in args.graphs.split(","):
            dataset = harness.graph_flag(graph, args.files)
            for encoder in args.encoders.split(","):
                key = " / ".join([graph, encoder, *([args.extra] if args.extra else [])])
                if key in res["cells"]:
                    continue
                out = Path(tmp) / f"{len(res['cells'])}"
                flags = ["--dataset", dataset, *(["--root", args.root] if args.root else []),
                         "--seeds", str(args.seeds), "--encoder", encoder, *args.extra.split()]
                run = harness.train(flags, out, root=args.root, show=True)
                entry = {"command": run.command.replace(args.files or "\0", "FILES"),
                         **cell(run.metrics, run.wall_s)}
                if args.export:
                    entry["export"] = export(out)
                res["cells"][key] = entry
                res["wall_min"] = harness.wall_min(res)
                harness.write(args.name, res, report(res))  # after every cell: resumable
    print(report(res))


def _figure(f: dict[str, float]) -> str:
    return f"{f['mean']:.2f} ± {f['std']:.2f}"


def report(res: dict[str, Any]) -> str:
    lines = ["# Encoders against the raw features", "", *harness.header(res, note=""),
             "Honest protocol (random 10/10/80 split per seed, checkpoint and classifier chosen "
             "on validation, test read once); the raw features probed the same way on the same "
             "splits. Published splits: seed s evaluated on the graph's split s, its checkpoint "
             "chosen on that split's validation nodes. Epoch: median seconds per epoch of "
             "training; wall: the whole command (auto: with its search).", "",
             "| graph | encoder | test micro-F1 | raw features | gain | published splits "
             "(test / raw) | chosen (auto) | epoch (s) | wall (s) |", "|---|---|---|---|---|---|"
             "---|---|---|"]
    for key, c in res["cells"].items():
        graph, encoder, *extra = key.split(" / ")
        encoder = " ".join([encoder, *(f"`{e}`" for e in extra)])
        pub = c.get("published")
        chosen = ""
        if encoder.startswith("auto"):
            counts = {e: c["encoders"].count(e) for e in dict.fromkeys(c["encoders"])}
            chosen = ", ".join(f"{e} x{n}" for e, n in counts.items())
        lines.append(
            f"| {graph} | {encoder} | {_figure(c['test'])} | {_figure(c['raw'])} | "
            f"{c['test']['mean'] - c['raw']['mean']:+.2f} | "
            + (f"{_figure(pub['test'])} / {_figure(pub['raw'])} (splits "
               f"{','.join(map(str, pub['splits']))} of {pub['count']})" if pub else "")
            + f" | {chosen} | {c['epoch_s']:.3f} | {c['wall_s']:.0f} |")
    exported = {k: c["export"] for k, c in res["cells"].items() if "export" in c}
    if exported:
        lines += ["", "Export of each cell's kept checkpoint (`edgegcl export m.onnx --run RUN "
                  "--quantize int8`):", "", "| graph / encoder | onnxruntime vs torch (max abs) | "
                  "INT8 mean cosine | INT8 micro-F1 change |", "|---|---|---|---|"]
        for key, e in exported.items():
            change = e["int8_micro_f1_change"]
            lines.append(f"| {key} | {e['max_abs_diff']:.1e} | {e['int8_mean_cosine']} | "
                         + ("" if change is None else f"{change:+.2f}") + " |")
    lines += ["", "Commands:", ""] + [f"- {k}: `{c['command']}`" for k, c in res["cells"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
