"""Whole-run anonymous memory on graph folders as the graph grows: does what a run holds of its
own grow with the graph, or only the page cache?

For each size a planted-class graph folder (written by numpy alone, then ``edgegcl convert``
adds its index), then ``edgegcl train`` on it in a fresh process: one mini-batch epoch, the
probe after it with the raw features beside it. The parent polls the run's RssAnon (its own
memory: mapped file pages are the page cache's to evict, and are not counted) every 50 ms; the
report compares its peak's growth from the smallest to the largest size with the growth of the
folder's storage.

    python -m bench.folder_memory [--sizes 100000,1000000] [--features 128]
        [--batch-size 1024] [--work DIR] [--name folder-memory] [--note TEXT]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import harness
from bench.graph_folder import folder_mib, measured, write_graph

TARGET = 0.3
"""The bound on RssAnon's growth over the storage's growth."""


def _sizes(text: str) -> list[int]:
    """``--sizes``: two or more node counts, each 100..10^8 (one argparse line otherwise)."""
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated integers: {text[:40]!r}") from None
    if len(sizes) < 2 or not all(100 <= n <= 10**8 for n in sizes):
        raise argparse.ArgumentTypeError("two or more sizes, each in 100..100000000")
    return sizes


def main() -> None:
    p = harness.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100000,1000000", type=_sizes,
                   help="node counts, comma-separated (the first and last are compared)")
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--work", help="where the graphs and runs go (default: a new temporary "
                                  "folder, removed at the end)")
    p.add_argument("--name", default="folder-memory", help="bench/results/NAME.{json,md}")
    p.add_argument("--note", default="nothing else running",
                   help="what else the machine ran meanwhile, for the report's header")
    args = p.parse_args()
    sizes = args.sizes
    if args.features < 1 or args.batch_size < 1:
        p.error("need --features >= 1 and --batch-size >= 1")
    res = harness.record("folder_memory", [a if a != args.work else "WORK"
                                           for a in sys.argv[1:]])
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="edgegcl-growth-"))
    rows = []
    try:
        for n in sizes:
            graph = write_graph(work / f"numpy-{n}", n, args.features, args.avg_degree, 10, 0.9)
            convert = measured(["convert", str(work / f"numpy-{n}"), "--out",
                                str(work / f"folder-{n}")])
            shutil.rmtree(work / f"numpy-{n}")
            run = measured(["train", "--dataset", str(work / f"folder-{n}"), "--mode",
                            "minibatch", "--epochs", "1", "--eval-every", "1", "--encoder",
                            "gcn", "--batch-size", str(args.batch_size), "--out",
                            str(work / f"run-{n}")])
            metrics = json.loads((work / f"run-{n}" / "metrics.json").read_text()) \
                if run["exit"] == 0 else {}
            summary = metrics.get("summary", {})
            row = {**graph, "folder_MiB": folder_mib(work / f"folder-{n}"),
                   "convert_peak_anon_MiB": convert["peak_anon_MiB"],
                   "train": {k: v for k, v in run.items() if k != "last_lines"},
                   "epoch_s": metrics["seeds"][0]["train_time_s"] if metrics else None,
                   "test_micro_f1": summary.get("test_micro_f1", {}).get("mean"),
                   "raw_features_test_micro_f1": summary.get("raw_features_test_micro_f1",
                                                             {}).get("mean")}
            print(json.dumps(row), flush=True)
            rows.append(row)
            shutil.rmtree(work / f"folder-{n}")
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    res["rows"] = json.loads(json.dumps(rows).replace(str(work), "WORK"))
    res["batch_size"], res["wall_min"] = args.batch_size, harness.wall_min(res)
    res["note"] = args.note
    harness.write(args.name, res, report(res))
    print(report(res))


def report(res: dict[str, Any]) -> str:
    rows = res["rows"]
    lines = ["# Anonymous memory of runs on graph folders, as the graph grows", "",
             *harness.header(res, res.get("note", "nothing else running")),
             "Each size: a planted-class graph folder (10 classes, float32 features), then "
             f"`edgegcl train` in a fresh process: one mini-batch epoch (batch "
             f"{res['batch_size']}, fanout 10,10, default budget), the GCN, the probe after "
             "the epoch and the raw features beside it. RssAnon is the process's own memory "
             "(mapped file pages excluded), polled every 50 ms; peak RSS (VmHWM) counts the "
             "mapped pages the run touched too.", "",
             "| nodes | edges | features | folder MiB | peak RssAnon MiB | peak RSS MiB | "
             "epoch s | wall s | test micro-F1 | raw features |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = r["train"]
        f1 = "" if r["test_micro_f1"] is None else f"{r['test_micro_f1']:.2f}"
        raw = ("" if r["raw_features_test_micro_f1"] is None
               else f"{r['raw_features_test_micro_f1']:.2f}")
        lines.append(f"| {r['nodes']} | {r['edges']} | {r['features']} | "
                     f"{r['folder_MiB']:.0f} | {t['peak_anon_MiB']:.0f} | "
                     f"{t['peak_rss_MiB']:.0f} | "
                     f"{'' if r['epoch_s'] is None else format(r['epoch_s'], '.1f')} | "
                     f"{t['wall_s']:.0f} | {f1} | {raw} |")
    small, large = rows[0], rows[-1]
    storage = large["folder_MiB"] - small["folder_MiB"]
    anon = large["train"]["peak_anon_MiB"] - small["train"]["peak_anon_MiB"]
    lines += ["", f"From {small['nodes']} to {large['nodes']} nodes the storage grew by "
                  f"{storage:.0f} MiB and the run's peak anonymous memory by {anon:.0f} MiB: "
                  f"ratio {anon / storage:.3f} (target: at most {TARGET})."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
