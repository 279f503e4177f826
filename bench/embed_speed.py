"""Embedding latency and peak memory: torch eager vs onnxruntime fp32 and int8 (issue 4).

On Cora (a trained encoder) and a 100k-node synthetic graph (average degree ~10, 128 features,
default layer sizes, random weights: latency does not depend on their values), every backend
runs in its own process: peak memory is that process's peak RSS (VmHWM), also shown above its RSS
once the libraries, the model and the graph are loaded. Latency is the median over repeats of
one embedding of the whole graph (after a warm-up run), from two rounds whose order is
reversed, so a background load on a shared machine does not favour one backend. The int8
report (size, cosine similarity to fp32, linear-probe micro-F1) comes from
``edgegcl.onnx.quantize.int8_report``.

    python -m bench.embed_speed --root /work/shared/datasets
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch_geometric.data import Data

HERE = Path(__file__).resolve().parent
WORK = HERE / "runs" / "embedding"


def _status_mib(field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process, from /proc/self/status.

    Not ``ru_maxrss``: Linux carries it across exec, so a child would inherit its parent's peak.
    """
    with open("/proc/self/status") as fh:
        kib = next(int(line.split()[1]) for line in fh if line.startswith(field + ":"))
    return kib / 1024


def child(backend: str, graph: Path, model: Path, repeats: int, batch_size: int) -> dict:
    """Measure one backend in this process; ORT backends never import torch."""
    import numpy as np

    with np.load(graph) as g:
        x, edge_index = g["x"], g["edge_index"]
    if backend.startswith("torch"):
        import torch

        from edgegcl.training.checkpoint import load_checkpoint

        if backend == "torch-1thread":
            torch.set_num_threads(1)
        threads = torch.get_num_threads()
        encoder = load_checkpoint(model).encoder
        xt, et = torch.from_numpy(x), torch.from_numpy(edge_index)

        def embed() -> None:
            with torch.no_grad():
                encoder(xt, et)
    else:
        from edgegcl_embed.runtime import EncoderSession

        threads = 1  # EncoderSession: one thread, see its docstring
        session = EncoderSession(model)

        def embed() -> None:
            session.embed(x, edge_index, batch_size=batch_size)
    loaded = _status_mib("VmRSS")
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        embed()
        times.append(time.perf_counter() - start)
    peak = _status_mib("VmHWM")
    return {"backend": backend, "threads": threads, "times": times[1:], "loaded_MiB": loaded,
            "peak_MiB": peak, "torch_imported": "torch" in sys.modules}


def _export(name: str, ckpt_path: Path, data: Data, out: Path) -> dict:
    """fp32 + int8 models of ``ckpt_path``, checked against torch; returns the int8 report."""
    from edgegcl.training.checkpoint import load_checkpoint
    from edgegcl.onnx.export import check_against_torch, export_encoder
    from edgegcl.onnx.quantize import int8_report, quantize_int8

    ckpt = load_checkpoint(ckpt_path)
    fp32, int8 = out / f"{name}.onnx", out / f"{name}.int8.onnx"
    export_encoder(ckpt, fp32)
    checks = check_against_torch(fp32, ckpt.encoder, data.x, data.edge_index)
    quantize_int8(fp32, int8)
    report = int8_report(fp32, int8, data)
    report["export_check_max_abs_diff"] = max(c.max_abs_diff for c in checks)
    return report


def _prepare(root: str, run: str, nodes: int) -> tuple[list[dict], dict[str, dict]]:
    """Models and graph files for both graphs; the Cora run is trained if not given."""
    import numpy as np
    import torch
    from torch_geometric.data import Data

    from edgegcl.training.checkpoint import save_checkpoint
    from edgegcl.config import TrainConfig
    from edgegcl.data import SyntheticSpec, load_graph, synthetic_graph
    from edgegcl.nn.model import GCNEncoder

    WORK.mkdir(parents=True, exist_ok=True)
    run_dir = Path(run) if run else HERE / "runs" / "embedding-Cora"
    if not (run_dir / "checkpoint.pt").is_file():
        cmd = [sys.executable, "-m", "edgegcl", "train", "--dataset", "Cora", "--root", root,
               "--epochs", "50", "--seeds", "1", "--out", str(run_dir)]
        print("training:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    cora = load_graph("Cora", root or None)
    cfg = TrainConfig(dataset="synthetic", nodes=nodes, classes=10, features=128,
                      avg_degree=10.0, graph_seed=0)
    synth = synthetic_graph(SyntheticSpec(nodes, 10, 128, 10.0, 0.8, 0))
    torch.manual_seed(0)
    synth_ckpt = WORK / "synthetic.pt"
    save_checkpoint(synth_ckpt, GCNEncoder(128, cfg.model_config()).state_dict(), cfg, 128, 0, 0)
    graphs, reports = [], {}
    for name, data, ckpt in (("Cora", cora, run_dir / "checkpoint.pt"),
                             (f"synthetic-{nodes}", synth, synth_ckpt)):
        print(f"exporting and quantising {name}", flush=True)
        path = WORK / f"{name}.npz"
        np.savez(path, x=data.x.numpy(), edge_index=data.edge_index.numpy())
        labelled = data if name == "Cora" else Data(x=data.x, edge_index=data.edge_index,
                                                    name=name)  # random weights: F1 meaningless
        reports[name] = _export(name, ckpt, labelled, WORK)
        graphs.append({"name": name, "npz": path, "ckpt": ckpt, "nodes": data.num_nodes,
                       "edges": int(data.edge_index.size(1)),
                       "fp32": WORK / f"{name}.onnx", "int8": WORK / f"{name}.int8.onnx"})
    return graphs, reports


def _measure(graphs: list[dict], repeats: int, batch_size: int) -> list[dict]:
    jobs = []
    for g in graphs:
        r = repeats if g["nodes"] < 10_000 else max(2, repeats // 3)
        jobs += [(g, "torch", g["ckpt"], r, 0), (g, "torch-1thread", g["ckpt"], r, 0),
                 (g, "onnxruntime-fp32", g["fp32"], r, 0), (g, "onnxruntime-int8", g["int8"], r, 0)]
    samples: dict[tuple[str, str], list[dict]] = {}
    for order in (jobs, jobs[::-1]):
        for g, backend, model, r, bs in order:
            cmd = [sys.executable, "-m", "bench.embed_speed", "--child", backend, str(g["npz"]),
                   str(model), "--repeats", str(r), "--batch-size", str(bs)]
            res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                            cwd=HERE.parent).stdout.strip().splitlines()[-1])
            print(g["name"], res["backend"], [round(t, 3) for t in res["times"]], flush=True)
            samples.setdefault((g["name"], backend), []).append(res)
    big = graphs[-1]  # batched mode once, on the large graph: bounded memory, at a time cost
    cmd = [sys.executable, "-m", "bench.embed_speed", "--child", "onnxruntime-fp32",
           str(big["npz"]), str(big["fp32"]), "--repeats", "1", "--batch-size", str(batch_size)]
    res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                    cwd=HERE.parent).stdout.strip().splitlines()[-1])
    res["backend"] = f"onnxruntime-fp32, batches of {batch_size}"
    samples[(big["name"], res["backend"])] = [res]
    rows = []
    for (name, backend), runs in samples.items():
        g = next(g for g in graphs if g["name"] == name)
        times = [t for r in runs for t in r["times"]]
        rows.append({"graph": name, "nodes": g["nodes"], "edges": g["edges"], "backend": backend,
                     "threads": runs[0]["threads"], "median_s": statistics.median(times),
                     "min_s": min(times), "samples": len(times),
                     "peak_MiB": max(r["peak_MiB"] for r in runs),
                     "above_loaded_MiB": max(r["peak_MiB"] - r["loaded_MiB"] for r in runs),
                     "torch_imported": runs[0]["torch_imported"]})
    return rows


def _markdown(rows: list[dict], reports: dict[str, dict], args: argparse.Namespace, wall: float,
              load: tuple[tuple[float, ...], tuple[float, ...]]) -> str:
    from bench.machine import describe

    def row(r: dict) -> str:
        return (f"| {r['graph']} | {r['backend']} | {r['threads']} | {r['median_s']:.3f} | "
                f"{r['min_s']:.3f} | {r['samples']} | {r['peak_MiB']:.0f} | "
                f"{r['above_loaded_MiB']:.0f} | {'yes' if r['torch_imported'] else 'no'} |")

    lines = [
        "# Embedding latency and memory: torch eager vs onnxruntime (issue 4)", "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on: {describe()}; "
        f"onnxruntime {__import__('onnxruntime').__version__}. Wall time {wall / 60:.1f} min.",
        "", "Command (from the repository root, OMP_NUM_THREADS unset):", "",
        f"    python -m bench.embed_speed --root {args.root}"
        + (f" --run {args.run}" if args.run else "") + f" --nodes {args.nodes} "
        f"--repeats {args.repeats} --batch-size {args.batch_size}", "",
        "The machine is shared with other work (2 cores): load average "
        f"{load[0][0]:.1f} / {load[0][1]:.1f} / {load[0][2]:.1f} at the start, "
        f"{load[1][0]:.1f} / {load[1][1]:.1f} / {load[1][2]:.1f} at the end, so single timings "
        "are noisy; the median of two interleaved rounds is reported, with the fastest run.", "",
        "Each backend embeds the whole graph in its own process. torch: "
        "`encoder(x, edge_index)` under `no_grad` (edgegcl's CSR propagation), at torch's "
        "default threads and at one thread. onnxruntime: `export.runtime.EncoderSession.embed`, "
        "which always runs one thread (its ScatterND loses updates with more, see README), "
        "including the numpy degree computation and input checks. Peak = the process's maximum "
        "RSS; above loaded = peak minus RSS after imports, model and graph were loaded.", "",
        "| graph | backend | threads | median s | min s | runs | peak RSS MiB | above loaded MiB "
        "| torch imported |", "|---|---|---|---|---|---|---|---|---|",
        *(row(r) for r in rows), ""]
    for name in reports:
        by = {r["backend"]: r for r in rows if r["graph"] == name}
        ratio = by["onnxruntime-fp32"]["median_s"] / by["torch"]["median_s"]
        ratio1 = by["onnxruntime-fp32"]["median_s"] / by["torch-1thread"]["median_s"]
        lines.append(f"- {name}: onnxruntime fp32 / torch eager median latency = {ratio:.2f} "
                     f"(torch at one thread: {ratio1:.2f}); target <= 1.")
    lines += ["", "## INT8 (dynamic quantisation of the MatMul weights)", "",
              "| graph | fp32 bytes | int8 bytes | size ratio | mean cosine to fp32 | min cosine "
              "| micro-F1 fp32 | micro-F1 int8 | change (points) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, rep in reports.items():
        f1 = rep.get("micro_f1")
        lines.append(f"| {name} | {rep['fp32_bytes']} | {rep['int8_bytes']} | "
                     f"{rep['size_ratio']:.3f} | {rep['mean_cosine']:.5f} | "
                     f"{rep['min_cosine']:.5f} | "
                     + (f"{f1['fp32']:.2f} | {f1['int8']:.2f} | {f1['change']:+.2f} |" if f1
                        else "- | - | - (random weights) |"))
    cora = reports.get("Cora", {}).get("micro_f1")
    if cora:
        lines += ["", f"Micro-F1: {cora['protocol']} ({cora['splits']} splits), the same splits "
                      f"for both models. Target: int8 at most 1.0 point below fp32 on Cora: "
                      f"{cora['change']:+.2f} -> {'met' if cora['change'] >= -1.0 else 'missed'}."]
    lines += ["", "Export check (onnxruntime vs torch, max abs difference on the training graph "
                  "and a random subgraph): "
              + ", ".join(f"{n} {r['export_check_max_abs_diff']:.1g}" for n, r in reports.items()),
              ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default="", help="datasets root holding Cora")
    p.add_argument("--run", default="", help="a Cora run directory (default: train 50 epochs)")
    p.add_argument("--nodes", type=int, default=100_000, help="synthetic graph size")
    p.add_argument("--repeats", type=int, default=6, help="timed runs per round (Cora; /3 large)")
    p.add_argument("--batch-size", type=int, default=4096, help="the batched row's batch size")
    p.add_argument("--child", nargs=3, metavar=("BACKEND", "GRAPH", "MODEL"),
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        backend, graph, model = args.child
        print(json.dumps(child(backend, Path(graph), Path(model), args.repeats, args.batch_size)))
        return
    start, load_start = time.perf_counter(), os.getloadavg()
    graphs, reports = _prepare(args.root, args.run, args.nodes)
    rows = _measure(graphs, args.repeats, args.batch_size)
    text = _markdown(rows, reports, args, time.perf_counter() - start,
                     (load_start, os.getloadavg()))
    (HERE / "results" / "embedding.md").write_text(text)
    (HERE / "results" / "embedding.json").write_text(
        json.dumps({"rows": rows, "int8": reports}, indent=2) + "\n")
    print(text)


if __name__ == "__main__":
    main()
