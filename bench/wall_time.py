"""What users wait for: the default run's wall time to its final figure, beside the figure and
the raw features', on the graphs users have: Cora (through ``--root``), tolokers (the
heterophilous-graph benchmark's file, from ``--files``), the 1M-node power-law graph
(the generator's) and a 300k-node graph without features (the generator's edges written as a
CSV edge list with a node table of labels only: structural features).

Every cell is one ``edgegcl train`` process run as a user runs it, one at a time, its wall
time from the command to its exit (loading, the encoder search, every probe and the results
included); ``--extra`` adds flags to every cell (e.g. ``--time-budget 10m``), and ``--resume``
keeps the cells already in bench/results/NAME.json.

    python -m bench.wall_time --root ROOT --files FILES --graphs cora,tolokers,power-law-1m,csv-300k
    python -m bench.wall_time --graphs power-law-1m --extra "--time-budget 10m" --resume
"""

from __future__ import annotations

import csv
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import harness
from bench.tasks import cell

GRAPHS = ("cora", "tolokers", "power-law-1m", "csv-300k")
"""The graphs a cell may name (``--graphs``)."""

POWER_LAW = ["--dataset", "synthetic", "--nodes", "1000000", "--avg-degree", "20",
             "--degree-exponent", "2.5"]
"""The 1M-node power-law graph of bench/results/scaling-power-law.md."""


def write_csv_graph(nodes: int, folder: Path) -> list[str]:
    """The generator's planted-class graph of ``nodes`` nodes (average degree 10) as a CSV
    edge list (each undirected edge once) and a node table of ids and labels, no features:
    the ``edgegcl train`` flags that read them."""
    from edgegcl.data import SyntheticSpec, synthetic_graph

    data = synthetic_graph(SyntheticSpec(num_nodes=nodes, num_features=1))
    src, dst = data.edge_index
    once = src < dst
    with (folder / "edges.csv").open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["source", "target"])
        out.writerows(zip(src[once].tolist(), dst[once].tolist()))
    with (folder / "nodes.csv").open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["id", "label"])
        out.writerows(enumerate(data.y.tolist()))
    return ["--dataset", str(folder / "edges.csv"), "--node-table", str(folder / "nodes.csv")]


def graph_args(graph: str, root: str | None, files: str | None, work: Path,
               csv_nodes: int) -> list[str]:
    """The ``edgegcl train`` flags of a cell's graph (a CSV graph written into ``work``)."""
    if graph == "cora":
        if not root:
            raise SystemExit("wall_time: cora needs --root (the datasets folder)")
        return ["--dataset", "Cora", "--root", root]
    if graph == "tolokers":
        if not files:
            raise SystemExit("wall_time: tolokers needs --files (a folder with tolokers.npz)")
        return ["--dataset", str(Path(files) / "tolokers.npz")]
    if graph == "power-law-1m":
        return list(POWER_LAW)
    return write_csv_graph(csv_nodes, work)


def wall_cell(run: harness.TrainRun) -> dict[str, Any]:
    """A cell: ``bench.tasks.cell``'s figures and wall time, the epochs each seed trained and
    why it stopped, the mode and the encoder search's seconds."""
    seeds = run.metrics["seeds"]
    return {**cell(run.metrics, run.wall_s), "mode": run.metrics.get("mode"),
            "epochs": [s["epochs_trained"] for s in seeds], "cut": [s.get("cut", "") for s in seeds],
            "search_s": sum(float(s.get("encoder_choice", {}).get("seconds", 0.0))
                            for s in seeds)}


def report(res: dict[str, Any]) -> str:
    lines = ["# What users wait for: a default run's wall time to its figure", "",
             *harness.header(res, note=res.get("note", "")),
             "Each cell is one `edgegcl train` process, its wall time from the command to its exit "
             "(the graph loaded, the encoder chosen, every probe and the results included); the "
             "figure is the test figure of the run's metric at the checkpoint chosen on "
             "validation, the raw features' on the same split beside it. 'search' is the "
             "encoder search's share of the wall time.", "",
             "| graph | flags | mode | epochs (cut) | wall | search | test figure | raw features |",
             "|---|---|---|---|---|---|---|---|"]
    for key, c in res["cells"].items():
        graph, _, flags = key.partition(" ")
        metric = c["metric"]
        fig = c["figures"].get(f"test_{metric}", {})
        raw = c["figures"].get(f"raw_features_test_{metric}", {})
        cut = ", ".join(f"{e} ({k})" if k else str(e) for e, k in zip(c["epochs"], c["cut"]))
        share = 100 * c["search_s"] / c["wall_s"] if c["wall_s"] else 0.0
        lines.append(f"| {graph} | {flags or 'default'} | {c['mode']} | {cut} | "
                     f"{c['wall_s'] / 60:.1f} min | {share:.0f} % | "
                     f"{metric} {fig.get('mean', float('nan')):.2f} | "
                     f"{raw.get('mean', float('nan')):.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = harness.ArgumentParser(prog="python -m bench.wall_time", description=__doc__.split("\n\n")[0])
    p.add_argument("--graphs", default=",".join(GRAPHS), help=f"of {', '.join(GRAPHS)}")
    p.add_argument("--root", default=None, help="datasets folder (Cora's raw files)")
    p.add_argument("--files", default=None, help="folder with tolokers.npz")
    p.add_argument("--csv-nodes", type=int, default=300_000, help="nodes of the CSV graph")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--extra", default="", help="more edgegcl train flags for every cell")
    p.add_argument("--name", default="wall-time")
    p.add_argument("--note", default="nothing else running", help="what ran beside it")
    p.add_argument("--resume", action="store_true", help="keep the cells already measured")
    args = p.parse_args(argv)
    graphs = args.graphs.split(",")
    unknown = [g for g in graphs if g not in GRAPHS]
    if unknown:
        p.error(f"--graphs names {unknown[0]!r}; one of {', '.join(GRAPHS)}")
    res = harness.cells_record("wall_time", sys.argv[1:] if argv is None else argv, args.name,
                               args.root, args.files, args.resume)
    res["note"] = args.note
    extra = shlex.split(args.extra)
    with tempfile.TemporaryDirectory() as tmp:
        for graph in graphs:
            key = f"{graph} {args.extra}".strip()
            if key in res["cells"]:
                continue
            work = Path(tmp) / graph
            work.mkdir()
            flags = graph_args(graph, args.root, args.files, work, args.csv_nodes)
            run = harness.train([*flags, "--seeds", str(args.seeds), *extra], work / "run",
                                root=args.root)
            res["cells"][key] = wall_cell(run)
            print(f"wall_time: {key}: {run.wall_s / 60:.1f} min", flush=True)
            res["wall_min"] = harness.wall_min(res)
            harness.write(args.name, res, report(res))
    print(report(res))


if __name__ == "__main__":
    main()
