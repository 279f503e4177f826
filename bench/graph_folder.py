"""A graph on disk under a memory cap: a graph folder trained, evaluated and converted under a
cgroup memory limit of a fraction of its storage, beside the same graph in memory.

Steps, each ``edgegcl`` command in a fresh process whose peak RSS (VmHWM), peak anonymous
memory (RssAnon, polled: mapped file pages are the page cache's to evict) and, under a cap,
the cgroup's kill count are reported:

1. a planted-class graph written as a graph folder with numpy alone, a block of rows at a
   time (docs/graph-folder.md), and the same arrays as an ``.npz``; before each capped step
   the files' pages are dropped from the page cache (``evict``), so the capped process reads
   the graph from disk and pays for what it caches;
2. ``edgegcl convert`` of the folder (adding the sampler's index) and of the ``.npz``, under
   the cap;
3. ``edgegcl train`` on the converted folder (one mini-batch epoch, the probe after it, the
   raw features beside it), under the cap;
4. ``edgegcl-embed`` of the folder with the run's exported model, under the cap (the export
   itself checks on the whole graph in memory, so it runs without one);
5. the same run on the folder and on the ``.npz`` without a cap, side by side (``--rounds``
   times each, alternating): the test figure of each and the epoch times' ratio.

The cap is a cgroup v1 memory controller group (``memory.limit_in_bytes``; the kernel kills a
process over it), which needs root; without one the capped steps are skipped and said so.

    python -m bench.graph_folder [--nodes 600000] [--features 768] [--cap 0.333]
        [--batch-size 128] [--rounds 1] [--work DIR [--resume]] [--name graph-folder]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import harness

CGROUP_ROOT = Path("/sys/fs/cgroup/memory")
CLASS_SIGNAL = 1.5
"""Norm of each class's mean feature vector in units of the noise (as the synthetic graph)."""


def write_graph(where: Path, nodes: int, features: int, avg_degree: float, classes: int,
                homophily: float, seed: int = 0, block: int = 1 << 15) -> dict[str, Any]:
    """A planted-class graph folder written by numpy alone, a block of rows at a time: each
    node's features its class's mean plus unit noise, each undirected edge (listed both ways)
    within the source's class with probability ``homophily``. Returns its sizes."""
    rng = np.random.default_rng(seed)
    where.mkdir(parents=True)
    y = rng.permutation(nodes) % classes
    means = rng.standard_normal((classes, features)).astype(np.float32)
    means *= CLASS_SIGNAL / np.linalg.norm(means, axis=1, keepdims=True)
    x = np.lib.format.open_memmap(where / "x.npy", "w+", np.float32, (nodes, features))
    for lo in range(0, nodes, block):
        hi = min(nodes, lo + block)
        x[lo:hi] = rng.standard_normal((hi - lo, features), dtype=np.float32) + means[y[lo:hi]]
    x.flush()
    del x
    order = np.argsort(y, kind="stable")
    count = np.bincount(y, minlength=classes)
    start = np.cumsum(count) - count
    half = int(nodes * avg_degree / 2)
    src = rng.integers(0, nodes, half)
    own = count[y[src]]
    same = start[y[src]] + (rng.random(half) * own).astype(np.int64)
    dst = np.where(rng.random(half) < homophily, order[same], rng.integers(0, nodes, half))
    keep = src != dst
    src, dst = src[keep], dst[keep]
    edges = np.lib.format.open_memmap(where / "edge_index.npy", "w+", np.int64, (2, 2 * src.size))
    edges[0, :src.size], edges[1, :src.size] = src, dst
    edges[0, src.size:], edges[1, src.size:] = dst, src
    edges.flush()
    num_edges = int(edges.shape[1])
    del edges
    np.save(where / "y.npy", y)
    (where / "metadata.json").write_text(json.dumps({
        "format": "edgegcl graph folder", "version": 1, "num_nodes": nodes,
        "num_edges": num_edges}))
    return {"nodes": nodes, "edges": num_edges, "features": features,
            "storage_MiB": folder_mib(where)}


def write_edge_csv(path: Path, nodes: int, edges: int, seed: int = 0,
                   block: int = 1 << 20) -> dict[str, Any]:
    """A CSV edge list without features: a header row, then ``edges`` rows of two integer
    ids drawn uniformly from ``nodes``, written a block of rows at a time. Returns its
    sizes."""
    rng = np.random.default_rng(seed)
    with open(path, "x") as fh:
        fh.write("source,target\n")
        for lo in range(0, edges, block):
            ends = rng.integers(0, nodes, size=(min(block, edges - lo), 2))
            fh.write("\n".join(f"{a},{b}" for a, b in ends.tolist()) + "\n")
    return {"rows": edges, "id_range": nodes, "MiB": path.stat().st_size / 2**20}


def evict(where: Path) -> None:
    """Drop the page cache's copies of every file under ``where`` (written back first), so a
    capped process reads them from disk and its own cgroup pays for what it caches; pages
    cached by this uncapped process would otherwise hold the graph for it, uncounted."""
    for path in (where.rglob("*") if where.is_dir() else [where]):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def folder_mib(where: Path) -> float:
    """The files' bytes under ``where``, MiB."""
    return sum(p.stat().st_size for p in where.rglob("*") if p.is_file()) / 2**20


def write_npz(folder: Path, path: Path) -> None:
    """The folder's arrays as an ``.npz`` (numpy streams a mapped array into the archive)."""
    arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r")
              for name in ("x", "edge_index", "y")}
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


class Cap:
    """A cgroup v1 memory group limiting what a process may use (killed over it), or None
    where the controller cannot be written (not root, no cgroup v1)."""

    def __init__(self, limit_bytes: int) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="edgegcl-bench-", dir=CGROUP_ROOT))
        (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
        self.limit, self.kills_before = limit_bytes, 0

    @staticmethod
    def make(limit_bytes: int) -> Cap | None:
        try:
            return Cap(limit_bytes)
        except OSError:
            return None

    def enter(self) -> None:
        """Move the calling process into the group (a child's preexec_fn)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def reset(self) -> None:
        """A new step: the peak cleared, the kills counted from here."""
        (self.path / "memory.max_usage_in_bytes").write_text("0")
        self.kills_before = self._kills()

    def _kills(self) -> int:
        oom = dict(line.split() for line in (self.path / "memory.oom_control").read_text()
                   .splitlines())
        return int(oom.get("oom_kill", 0))

    def readings(self) -> dict[str, Any]:
        """The cap, the group's peak and the processes it killed since ``reset``."""
        return {"cap_MiB": self.limit / 2**20,
                "cgroup_peak_MiB": int((self.path / "memory.max_usage_in_bytes").read_text())
                / 2**20, "oom_kills": self._kills() - self.kills_before}

    def close(self) -> None:
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def _status(pid: int) -> dict[str, int]:
    fields = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("VmHWM", "RssAnon", "RssFile"):
                    fields[key] = int(rest.split()[0])
    except OSError:
        pass
    return fields


def measured(args: list[str], cap: Cap | None = None,
             command: str = "edgegcl") -> dict[str, Any]:
    """``COMMAND ARGS`` (``edgegcl`` or ``edgegcl-embed``) in a fresh process (in ``cap``'s
    group when given): exit code, wall seconds, peak RSS and peak anonymous memory (polled
    every 50 ms), its last stderr lines, and the cgroup's readings."""
    if cap is not None:
        cap.reset()
    t0 = time.perf_counter()
    module = {"edgegcl": "edgegcl", "edgegcl-embed": "edgegcl_embed.embed"}[command]
    proc = subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=None if cap is None else cap.enter)
    peak_anon = hwm = 0
    with tempfile.TemporaryFile("w+") as err_file:
        import threading

        reader = threading.Thread(target=lambda: shutil.copyfileobj(proc.stderr, err_file))
        reader.start()
        while proc.poll() is None:
            now = _status(proc.pid)
            peak_anon = max(peak_anon, now.get("RssAnon", 0))
            hwm = max(hwm, now.get("VmHWM", 0))
            time.sleep(0.05)
        reader.join()
        err_file.seek(0)
        err = err_file.read()
    out = proc.stdout.read() if proc.stdout else ""
    result = {"command": f"{command} " + " ".join(args), "exit": proc.returncode,
              "wall_s": time.perf_counter() - t0, "peak_rss_MiB": hwm / 1024,
              "peak_anon_MiB": peak_anon / 1024,
              "last_lines": (out + err).strip().splitlines()[-3:]}
    if cap is not None:
        result.update(cap.readings())
    return result


def _metrics(run_dir: Path) -> dict[str, Any]:
    if not (run_dir / "metrics.json").exists():
        return {}
    metrics = json.loads((run_dir / "metrics.json").read_text())
    seed, summary = metrics["seeds"][0], metrics["summary"]
    return {"test_micro_f1": summary["test_micro_f1"]["mean"],
            "raw_features_test_micro_f1": summary.get("raw_features_test_micro_f1",
                                                      {}).get("mean"),
            "epoch_s": seed["train_time_s"]}


STEPS = ("convert_capped", "convert_npz_capped", "convert_csv_capped", "train_capped",
         "embed_capped", "side_by_side")
"""The steps, in the order they run."""


def _steps(text: str) -> list[str]:
    """``--steps``: names of STEPS, comma-separated (one argparse line otherwise)."""
    names = [t for t in text.split(",") if t]
    unknown = [t for t in names if t not in STEPS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown step {unknown[0] if unknown else text!r}; "
                                         f"choose from {', '.join(STEPS)}")
    return names


def main() -> None:
    p = harness.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=600_000)
    p.add_argument("--features", type=int, default=768)
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--cap", type=float, default=1 / 3,
                   help="the memory cap as a fraction of the graph folder's storage")
    p.add_argument("--batch-size", type=int, default=128,
                   help="seed nodes per training batch (edgegcl train --batch-size)")
    p.add_argument("--csv-edges", type=int, default=10_000_000,
                   help="rows of the CSV edge list (no features) converted under the cap")
    p.add_argument("--csv-nodes", type=int, default=1_000_000,
                   help="the range of that edge list's integer ids")
    p.add_argument("--rounds", type=int, default=1,
                   help="uncapped folder / .npz runs, alternating, for the epoch-time ratio")
    p.add_argument("--work", help="where the graphs and runs go (default: a new temporary "
                                  "folder, removed at the end)")
    p.add_argument("--resume", action="store_true",
                   help="keep the steps bench/results/NAME.json holds and run the others (the "
                        "same --work, which then keeps its graphs)")
    p.add_argument("--name", default="graph-folder", help="bench/results/NAME.{json,md}")
    p.add_argument("--steps", default=",".join(STEPS), type=_steps,
                   help=f"the steps to run, comma-separated (default all: {','.join(STEPS)})")
    p.add_argument("--note", default="nothing else running",
                   help="what else the machine ran meanwhile, for the report's header")
    args = p.parse_args()
    if args.nodes < 100 or args.features < 1 or not 0 < args.cap <= 1 or args.batch_size < 1:
        p.error("need --nodes >= 100, --features >= 1, 0 < --cap <= 1 and --batch-size >= 1")
    if args.resume and not args.work:
        p.error("--resume needs the --work folder of the run it continues")
    res = harness.record("graph_folder", [a if a != args.work else "WORK"
                                          for a in sys.argv[1:]])
    if args.resume and (harness.RESULTS / f"{args.name}.json").exists():
        kept = harness.read(args.name)
        res["graph"], res["steps"] = kept.get("graph"), kept.get("steps", {})
        if kept.get("csv"):
            res["csv"] = kept["csv"]
        res["resumed_from"] = kept.get("resumed_from") or kept.get("started")
    res.setdefault("steps", {})
    res["batch_size"], res["cap"], res["note"] = args.batch_size, args.cap, args.note
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="edgegcl-folder-"))
    try:
        _run(args, work, res)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(report(res))


def _save(args: Any, work: Path, res: dict[str, Any]) -> None:
    """The results so far, written (each step's result kept even if a later one never ends),
    with the work folder's path written as WORK."""
    res["wall_min"] = harness.wall_min(res)
    clean = json.loads(json.dumps({k: v for k, v in res.items() if not k.startswith("_")})
                       .replace(str(work), "WORK"))
    harness.write(args.name, clean, report(clean))


def _run(args: Any, work: Path, res: dict[str, Any]) -> None:
    """The steps the record does not hold yet, each saved as it ends."""
    steps = res["steps"]
    if not res.get("graph") or not (work / "numpy").exists():
        shutil.rmtree(work / "numpy", ignore_errors=True)
        t0 = time.perf_counter()
        res["graph"] = write_graph(work / "numpy", args.nodes, args.features, args.avg_degree,
                                   args.classes, 0.9)
        res["graph"]["generate_s"] = time.perf_counter() - t0
        (work / "graph.npz").unlink(missing_ok=True)
        steps.clear()
    if not (work / "graph.npz").exists():
        write_npz(work / "numpy", work / "graph.npz")
    print(f"graph: {res['graph']}", flush=True)
    train = ["--mode", "minibatch", "--epochs", "1", "--eval-every", "1", "--encoder", "gcn",
             "--batch-size", str(args.batch_size), "--threads", "2"]

    def step(name: str, run: Any) -> None:
        if name in steps or name not in args.steps:
            return
        result = run()
        when = f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {args.note}"
        for one in ([result] if "exit" in result else
                    [r for runs in result.values() for r in runs]):
            one["measured"] = when  # steps kept by --resume keep their own
        steps[name] = result
        print(name, steps[name], flush=True)
        _save(args, work, res)

    cap = Cap.make(int(res["graph"]["storage_MiB"] * 2**20 * args.cap))
    try:
        if cap is None:
            steps["capped"] = "no cgroup v1 memory controller could be written (needs root)"
        else:
            def convert() -> dict[str, Any]:
                shutil.rmtree(work / "folder", ignore_errors=True)
                evict(work / "numpy")
                return measured(["convert", str(work / "numpy"), "--out",
                                 str(work / "folder")], cap)

            def train_capped() -> dict[str, Any]:
                shutil.rmtree(work / "run-capped", ignore_errors=True)
                evict(work / "folder")
                one = measured(["train", "--dataset", str(work / "folder"), *train, "--out",
                                str(work / "run-capped")], cap)
                return {**one, **_metrics(work / "run-capped")}

            def convert_npz() -> dict[str, Any]:
                shutil.rmtree(work / "folder-npz", ignore_errors=True)
                evict(work / "graph.npz")
                one = measured(["convert", str(work / "graph.npz"), "--out",
                                str(work / "folder-npz")], cap)
                shutil.rmtree(work / "folder-npz", ignore_errors=True)
                return one

            def convert_csv() -> dict[str, Any]:
                table = work / "edges.csv"
                if not table.exists() or not res.get("csv"):
                    table.unlink(missing_ok=True)
                    res["csv"] = write_edge_csv(table, args.csv_nodes, args.csv_edges)
                shutil.rmtree(work / "folder-csv", ignore_errors=True)
                evict(table)
                one = measured(["convert", str(table), "--out", str(work / "folder-csv")], cap)
                if one["exit"] == 0:
                    meta = json.loads((work / "folder-csv" / "metadata.json").read_text())
                    one["folder"] = {"nodes": meta["num_nodes"], "edges": meta["num_edges"],
                                     "MiB": folder_mib(work / "folder-csv")}
                shutil.rmtree(work / "folder-csv", ignore_errors=True)
                return one

            step("convert_capped", convert)
            step("convert_npz_capped", convert_npz)
            step("convert_csv_capped", convert_csv)
            step("train_capped", train_capped)
        if not (work / "folder").exists():
            measured(["convert", str(work / "numpy"), "--out", str(work / "folder")])
        res["graph"]["folder_MiB"] = folder_mib(work / "folder")
        # the model embedded: the capped run's, else the uncapped folder run's (side_by_side)
        trained = next((work / r for r in ("run-capped", "run-folder-0")
                        if (work / r / "checkpoint.pt").exists()), None)
        if cap is not None and trained is not None:
            def embed_capped() -> dict[str, Any]:
                model = work / f"model-{trained.name}.onnx"
                if not model.exists():  # the export checks on the whole graph: uncapped
                    measured(["export", str(model), "--run", str(trained), "--graph",
                              str(work / "folder")])
                (work / "emb.npy").unlink(missing_ok=True)
                evict(work / "folder")
                one = measured([str(model), "--graph", str(work / "folder"), "--out",
                                str(work / "emb.npy")], cap, "edgegcl-embed")
                return {**one, "model_from": trained.name}

            step("embed_capped", embed_capped)

        def side_by_side() -> dict[str, list[dict[str, Any]]]:
            runs: dict[str, list[dict[str, Any]]] = {"folder": [], "npz": []}
            for r in range(args.rounds):
                for kind in (("folder", "npz") if r % 2 == 0 else ("npz", "folder")):
                    dataset = work / ("folder" if kind == "folder" else "graph.npz")
                    run_dir = work / f"run-{kind}-{r}"
                    shutil.rmtree(run_dir, ignore_errors=True)
                    one = measured(["train", "--dataset", str(dataset), *train, "--out",
                                    str(run_dir)])
                    runs[kind].append({**one, **_metrics(run_dir)})
                    print(kind, runs[kind][-1], flush=True)
            return runs

        step("side_by_side", side_by_side)
    finally:
        if cap is not None:
            cap.close()
    _save(args, work, res)


def report(res: dict[str, Any]) -> str:
    g, steps = res["graph"], res["steps"]
    if not g:
        return "# A graph folder under a memory cap\n\nNo graph written yet.\n"
    lines = ["# A graph folder under a memory cap", "",
             *harness.header(res, res.get("note", "nothing else running")),
             f"Graph: {g['nodes']} nodes, {g['edges']} directed edges, {g['features']} float32 "
             f"features, planted classes: {g['storage_MiB']:.0f} MiB as numpy wrote it, "
             f"{g.get('folder_MiB', 0):.0f} MiB with the sampler's index (written in "
             f"{g['generate_s']:.0f} s). Cap: {res['cap']:.3f} of the storage. Runs: one "
             f"mini-batch epoch (batch {res['batch_size']}, fanout 10,10, default budget), the "
             "GCN, the probe after the epoch with the raw features beside it."
             + (f" Steps kept from the run started {res['resumed_from']} (--resume); this "
                "run measured the others." if res.get("resumed_from") else ""), "",
             "| step | exit | wall s | peak RSS MiB | peak anonymous MiB | cgroup peak MiB "
             "| cap MiB | kills | epoch s | test micro-F1 | raw features | measured |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def row(name: str, r: dict[str, Any]) -> str:
        def f(key: str, fmt: str = ".0f") -> str:
            v = r.get(key)
            return "" if v is None else format(v, fmt)
        return (f"| {name} | {r['exit']} | {r['wall_s']:.0f} | {f('peak_rss_MiB')} | "
                f"{f('peak_anon_MiB')} | {f('cgroup_peak_MiB')} | {f('cap_MiB')} | "
                f"{f('oom_kills', 'd')} | {f('epoch_s', '.1f')} | {f('test_micro_f1', '.2f')} | "
                f"{f('raw_features_test_micro_f1', '.2f')} | {r.get('measured', '')} |")

    csv = res.get("csv")
    csv_name = ("convert (CSV edge list, no features -> folder), capped" if not csv else
                f"convert ({csv['rows']}-row CSV edge list of {csv['MiB']:.0f} MiB, no "
                "features -> folder), capped")
    for key, name in (("convert_capped", "convert (folder -> folder + index), capped"),
                      ("convert_npz_capped", "convert (.npz -> folder), capped"),
                      ("convert_csv_capped", csv_name),
                      ("train_capped", "train + evaluate the folder, capped"),
                      ("embed_capped", "edgegcl-embed the folder, capped (the model of "
                                       f"{steps.get('embed_capped', {}).get('model_from')})"
                                       if isinstance(steps.get("embed_capped"), dict) else "")):
        if isinstance(steps.get(key), dict):
            lines.append(row(name, steps[key]))
    side = steps.get("side_by_side", {})
    for kind in ("folder", "npz"):
        for i, r in enumerate(side.get(kind, [])):
            lines.append(row(f"train {kind}, no cap (round {i + 1})", r))
    if isinstance(steps.get("capped"), str):
        lines += ["", f"Capped steps skipped: {steps['capped']}."]
    if side.get("folder") and side.get("npz"):
        ratio = (sum(r["epoch_s"] for r in side["folder"])
                 / sum(r["epoch_s"] for r in side["npz"]))
        lines += ["", f"Epoch time, folder / in memory (no cap, side by side): {ratio:.2f} "
                      "(target: at most 1.2)."]
    capped = steps.get("train_capped")
    if isinstance(capped, dict) and capped.get("epoch_s") and side.get("folder"):
        free = sum(r["epoch_s"] for r in side["folder"]) / len(side["folder"])
        lines += ["", f"Epoch time of the folder under the cap / without it: "
                      f"{capped['epoch_s'] / free:.2f} (what reading the rows from disk costs "
                      "once the page cache cannot hold the features)."]
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
