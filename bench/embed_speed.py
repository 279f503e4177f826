"""Embedding latency and peak memory per backend and thread count (issues 4 and 15).

Two graphs: Cora (a trained encoder) and a synthetic graph (100k nodes, average degree ~10,
128 features, default layer sizes, random weights: latency does not depend on their values).
Every backend runs in its own process on the same graph file; peak memory is that process's
peak RSS (VmHWM), also shown above its RSS once the libraries, the model and the graph were
loaded. Latency is the median over repeats of one embedding of the whole graph (after a
warm-up run), from two rounds in opposite orders, so a background load does not favour one
backend.

Features reach each backend as it gets them in practice. Cora's bag-of-words x (about 1 %
nonzero) is CSR for every backend that takes CSR: torch as edgegcl's ``as_features`` makes it
for training and evaluation (CSR below 10 % nonzeros), onnxruntime as a scipy CSR matrix,
both built from the graph file's dense x outside the timed call. The synthetic graph's Gaussian
x is dense for all. Backends:

- ``torch-eager``: edgegcl's ``GCNEncoder(x, edge_index)`` under ``no_grad``;
  ``torch-eager-dense-x`` (graphs with a sparse x, torch's default threads): the same with x
  dense, as this benchmark fed it before the sparse first layer, for comparison;
- ``torch-csr``: the best plain-torch path: A_hat built from edge_index as one CSR matrix
  (inside the timed call, as the runtime builds its own), ``torch.sparse.mm``, every layer in
  the cheaper order;
- ``onnxruntime-fp32`` / ``-int8``: ``EncoderSession.embed`` (the portable file cut into its
  ONNX dense stages, CSR aggregation in between, stage 0 as a CSR product for a sparse x; the
  default kernel, numba's when installed), at 1, 2, 4, ... and all threads; ``onnxruntime-fp32-scipy``: the
  same with scipy's CSR kernel (what a device without numba runs), all threads;
- ``onnxruntime-portable-fp32`` / ``-int8`` (issue 24): the same model files run whole by
  onnxruntime alone (``portable_session``: x dense and edge_index in, the aggregation a Loop
  inside the graph), as a C++, Java or JavaScript consumer runs them, at 1, 2, 4, ... and all
  threads (INT8 at all); ``onnxruntime-portable-fp32-defaults``: the same with onnxruntime's
  default session options (memory pattern on), all threads;
- ``edgegcl-embed``: the command itself (npz in, memory-mapped .npy out), for its peak RSS
  against the libraries' footprint (a process that only imports them and opens the model).

The aggregation designs are also timed side by side in one process (A_hat times the widths
the encoder aggregates at): scipy's and numba's CSR kernels (edgegcl_embed/kernels.py), onnxruntime's
SparseToDenseMatMul, numpy degree buckets; and the two builds of A_hat.

    python3 -m bench.embed_speed --root ROOT
    python3 -m bench.embed_speed --root DATASETS --device cuda --out $OUT   # GPU machine

``--device cuda`` times torch on CUDA and onnxruntime's CUDA provider (dense stages on the GPU,
aggregation on the host) beside the CPU backends at all threads, and writes embedding-cuda.*.
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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor
    from torch_geometric.data import Data

from bench import harness

HERE = Path(__file__).resolve().parent
WORK = HERE / "runs" / "embedding"
PROG = "bench.embed_speed"

# Backends that take a sparse x as CSR.
SPARSE_X_BACKENDS = ("torch-eager", "torch-csr", "onnxruntime-fp32", "onnxruntime-int8",
                     "onnxruntime-fp32-scipy")


def _runtime_importable() -> None:
    """Make ``edgegcl_embed`` importable from a checkout that was not pip-installed (the
    repository's folder of that name)."""
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))


_runtime_importable()


def _status_mib(field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process, from /proc/self/status.

    Not ``ru_maxrss``: Linux carries it across exec, so a child would inherit its parent's peak.
    """
    with open("/proc/self/status") as fh:
        kib = next(int(line.split()[1]) for line in fh if line.startswith(field + ":"))
    return kib / 1024


def torch_csr_embed(encoder: Any, x: Tensor, edge_index: Tensor) -> Tensor:
    """The best plain-torch path: A_hat as one CSR matrix, ``torch.sparse.mm``, cheaper order."""
    import torch

    n = x.size(0)
    src, dst = edge_index
    keep = src != dst
    loop = torch.arange(n, device=x.device)
    row, col = torch.cat([dst[keep], loop]), torch.cat([src[keep], loop])
    counts = torch.bincount(row, minlength=n)
    dinv = counts.to(x.dtype).pow(-0.5)
    order = torch.argsort(row)
    crow = torch.zeros(n + 1, dtype=torch.long, device=x.device)
    crow[1:] = torch.cumsum(counts, 0)
    col = col[order]
    adj = torch.sparse_csr_tensor(crow, col, dinv[row[order]] * dinv[col], (n, n))
    h = x
    for i in range(1, encoder.num_layers + 1):
        conv, act = getattr(encoder, f"conv{i}"), getattr(encoder, f"act{i}")
        w = conv.lin.weight
        if w.size(1) < w.size(0):  # widening: aggregate at the input width
            h = h.to_dense() if h.layout != torch.strided else h
            h = torch.sparse.mm(adj, h) @ w.t()
        else:
            h = torch.sparse.mm(adj, h @ w.t())
        h = act(h + conv.bias)
    return h


def child(backend: str, graph: Path, model: Path, repeats: int, threads: int,
          device: str, sparse_x: bool = False) -> dict[str, Any]:
    """Measure one backend in this process; onnxruntime backends never import torch.

    ``sparse_x``: the backend gets x as CSR (module docstring), converted before timing.
    """
    import numpy as np

    with np.load(graph) as g:
        x, edge_index = g["x"], g["edge_index"]
    extra: dict[str, Any] = {}
    if backend.startswith("torch"):
        import torch

        from edgegcl.training.checkpoint import load_checkpoint

        if threads:
            torch.set_num_threads(threads)
        threads = torch.get_num_threads()
        encoder = load_checkpoint(model).encoder.to(device).eval()
        xt, et = torch.from_numpy(x).to(device), torch.from_numpy(edge_index).to(device)
        if sparse_x:
            xt = xt.to_sparse_csr()
        forward = encoder if backend.startswith("torch-eager") else (
            lambda a, b: torch_csr_embed(encoder, a, b))

        def embed() -> None:
            with torch.no_grad():
                forward(xt, et)
            if device == "cuda":
                torch.cuda.synchronize()
    elif backend.startswith("onnxruntime-portable"):
        from edgegcl_embed.cores import available_cores
        from edgegcl_embed.runtime import portable_session

        threads = threads or available_cores()
        session = portable_session(model, threads, memory_pattern=backend.endswith("-defaults"))

        def embed() -> None:
            session.run(["embeddings"], {"x": x, "edge_index": edge_index})
    else:
        from edgegcl_embed.errors import InputError
        from edgegcl_embed.runtime import EncoderSession

        try:
            session = EncoderSession(model, threads=threads or None, device=device,
                                     kernel="scipy" if backend.endswith("-scipy") else "auto")
        except InputError as exc:
            return {"backend": backend, "skipped": str(exc)}
        threads = session.threads
        extra["kernel"] = session.kernel
        if sparse_x:
            import scipy.sparse

            x = scipy.sparse.csr_matrix(x)

        def embed() -> None:
            session.embed(x, edge_index)
    loaded = _status_mib("VmRSS")
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        embed()
        times.append(time.perf_counter() - start)
    if device == "cuda" and backend.startswith("torch"):
        import torch

        extra["gpu_peak_MiB"] = torch.cuda.max_memory_allocated() / 2**20
    return {"backend": backend, "threads": threads, "times": times[1:], "loaded_MiB": loaded,
            "peak_MiB": _status_mib("VmHWM"), "torch_imported": "torch" in sys.modules,
            "sparse_x": sparse_x, **extra}


def child_cli(graph: Path, model: Path, out: Path) -> dict[str, Any]:
    """Run ``edgegcl-embed`` in this process (no torch) and report its peak RSS and time."""
    from edgegcl_embed.embed import main as embed_main

    start = time.perf_counter()
    code = embed_main([str(model), "--graph", str(graph), "--out", str(out), "--force"])
    return {"code": code, "wall_s": time.perf_counter() - start,
            "peak_MiB": _status_mib("VmHWM"), "torch_imported": "torch" in sys.modules,
            "kernel": "numba" if "numba" in sys.modules else "scipy"}


def child_footprint(model: Path, kernel: str) -> dict[str, Any]:
    """Peak RSS of a process that imports the runtime's libraries and opens the model with
    ``kernel`` (the one the command chose: numba's adds numba and its loops)."""
    import numpy  # noqa: F401
    import onnxruntime  # noqa: F401
    import scipy.sparse  # noqa: F401

    from edgegcl_embed.embed import main  # noqa: F401
    from edgegcl_embed.runtime import EncoderSession

    EncoderSession(model, kernel=kernel)
    return {"peak_MiB": _status_mib("VmHWM")}


def _degree_buckets(indptr: Any, indices: Any, data: Any) -> Any:
    """Numpy aggregation without Python loops over nodes: rows grouped by degree, each group
    gathered as [rows, degree, d] and summed (a loop over the distinct degrees only)."""
    import numpy as np

    counts = np.diff(indptr)
    rows = np.argsort(counts, kind="stable")
    groups = np.split(rows, np.flatnonzero(np.diff(counts[rows])) + 1)
    plans = []
    for g in groups:
        k = int(counts[g[0]])
        if k:
            slots = (indptr[g][:, None] + np.arange(k)).ravel()
            plans.append((g, k, indices[slots], data[slots].reshape(len(g), k, 1)))

    def product(h: Any) -> Any:
        out = np.zeros((h.shape[0], h.shape[1]), dtype=np.float32)
        for g, k, idx, w in plans:
            out[g] = (h[idx].reshape(len(g), k, -1) * w).sum(axis=1)
        return out

    return product


def _sparse_to_dense_matmul(n: int, d: int, threads: int) -> Any:
    """A session computing A @ B with onnxruntime's com.microsoft SparseToDenseMatMul."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    a = onnx.ValueInfoProto()
    a.name = "A"
    a.type.sparse_tensor_type.elem_type = TensorProto.FLOAT
    for size in (n, n):
        a.type.sparse_tensor_type.shape.dim.add().dim_value = size
    node = helper.make_node("SparseToDenseMatMul", ["A", "B"], ["Y"], domain="com.microsoft")
    graph = helper.make_graph([node], "agg", [a, helper.make_tensor_value_info(
        "B", TensorProto.FLOAT, [n, d])], [helper.make_tensor_value_info("Y", TensorProto.FLOAT,
                                                                         [n, d])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def child_designs(graph: Path, widths: list[int], threads: int) -> dict[str, Any]:
    """Time A_hat @ H at each width with every aggregation design, in this one process."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import onnxruntime as ort

    from edgegcl_embed.adjacency import NormalisedAdjacency
    from edgegcl_embed.kernels import numba_problem, resolve_kernel, warm_up
    from edgegcl_embed.runtime import block_bounds, default_block_rows

    kernels = ["scipy", *(["numba"] if numba_problem() is None else [])]
    with np.load(graph) as g:
        edge_index, n = g["edge_index"], g["x"].shape[0]
    build_s = {}
    for kernel in kernels:
        warm_up(resolve_kernel(kernel))
        times = []
        for _ in range(3):
            start = time.perf_counter()
            adj = NormalisedAdjacency(edge_index, n, kernel=kernel)
            times.append(time.perf_counter() - start)
        build_s[kernel] = statistics.median(times)
    bounds = block_bounds(n, default_block_rows(n))
    buckets = _degree_buckets(adj.indptr, adj.indices, adj.data)
    csr = ort.SparseTensor.sparse_csr_from_numpy(
        [n, n], adj.data, adj.indices.astype(np.int64), adj.indptr.astype(np.int64),
        ort.OrtDevice.make("cpu", 0))
    csr_value = ort.OrtValue.ort_value_from_sparse_tensor(csr)
    rng = np.random.default_rng(0)
    rows = []
    with ThreadPoolExecutor(threads) as pool:
        for d in widths:
            h = rng.standard_normal((n, d)).astype(np.float32)
            reference = adj.rows(0, n) @ h
            s2d = {t: _sparse_to_dense_matmul(n, d, t) for t in sorted({1, threads})}
            h_value = ort.OrtValue.ortvalue_from_numpy(h)

            out = np.empty_like(reference)

            def blocks(kernel: str) -> Any:  # as the runtime does: blocks into one output
                list(pool.map(lambda b: adj.product(*b, h, kernel, out[b[0]:b[1]]), bounds))
                return out

            designs = {}
            for kernel in kernels:
                designs[f"{kernel} CSR, 1 thread"] = (
                    lambda kernel=kernel: adj.product(0, n, h, kernel))
                designs[f"{kernel} CSR row blocks, {threads} threads"] = (
                    lambda kernel=kernel: blocks(kernel))
            designs["numpy degree buckets, 1 thread"] = lambda: buckets(h)
            for t, sess in s2d.items():
                designs[f"onnxruntime SparseToDenseMatMul, {t} thread{'s' * (t > 1)}"] = (
                    lambda sess=sess: sess.run_with_ort_values(
                        ["Y"], {"A": csr_value, "B": h_value})[0].numpy())
            for name, fn in designs.items():
                err = float(np.abs(fn() - reference).max())
                times = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - t0)
                rows.append({"width": d, "design": name, "min_s": min(times),
                             "median_s": statistics.median(times), "max_abs_diff": err})
    return {"nodes": n, "nnz": adj.nnz, "build_s": build_s, "rows": rows}


def _export(name: str, ckpt_path: Path, data: Data, out: Path) -> dict[str, Any]:
    """fp32 and int8 models of ``ckpt_path``, checked; returns the int8 report."""
    from edgegcl.onnx.export import check_against_torch, export_encoder
    from edgegcl.onnx.quantize import int8_report, quantize_int8
    from edgegcl.training.checkpoint import load_checkpoint

    ckpt = load_checkpoint(ckpt_path)
    fp32, int8 = out / f"{name}.onnx", out / f"{name}.int8.onnx"
    export_encoder(ckpt, fp32)
    checks = check_against_torch(fp32, ckpt.encoder, data.x, data.edge_index)
    quantize_int8(fp32, int8)
    report = int8_report(fp32, int8, data)
    report["export_check_max_abs_diff"] = max(c.max_abs_diff for c in checks)
    return report


def _prepare(root: str, run: str, nodes: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Models and graph files for both graphs; the Cora run is trained if not given."""
    import numpy as np
    import torch
    from torch_geometric.data import Data

    from edgegcl.training.config import TrainConfig
    from edgegcl.data import SyntheticSpec, load_graph, synthetic_graph
    from edgegcl.nn.augment import as_features
    from edgegcl.nn.model import GCNEncoder
    from edgegcl.training.checkpoint import load_checkpoint, save_checkpoint

    WORK.mkdir(parents=True, exist_ok=True)
    run_dir = Path(run) if run else HERE / "runs" / "embedding-Cora"
    if not (run_dir / "checkpoint.pt").is_file():
        from edgegcl.cli.main import main as edgegcl_main

        # in this process, where edgegcl_embed is importable even from a checkout that was
        # not pip-installed (_runtime_importable)
        cmd = ["train", "--dataset", "Cora", "--root", root, "--epochs", "50", "--seeds", "1",
               "--out", str(run_dir)]
        print("training: edgegcl", " ".join(cmd), flush=True)
        if edgegcl_main(cmd) != 0:
            raise SystemExit("embed_speed: training the Cora model failed (see above)")
    cora = load_graph("Cora", root or None)
    cfg = TrainConfig(encoder="gcn", dataset="synthetic", nodes=nodes, classes=10, features=128,
                      avg_degree=10.0, graph_seed=0)
    synth = synthetic_graph(SyntheticSpec(nodes, 10, 128, 10.0, 0.8, 0))
    torch.manual_seed(0)
    synth_ckpt = WORK / "synthetic.pt"
    save_checkpoint(synth_ckpt, GCNEncoder(128, cfg.model).state_dict(), cfg, 128, 0, 0)
    graphs, reports = [], {}
    for name, data, ckpt in (("Cora", cora, run_dir / "checkpoint.pt"),
                             (f"synthetic-{nodes}", synth, synth_ckpt)):
        print(f"exporting and quantising {name}", flush=True)
        path = WORK / f"{name}.npz"
        np.savez(path, x=data.x.numpy(), edge_index=data.edge_index.numpy())
        labelled = data if name == "Cora" else Data(x=data.x, edge_index=data.edge_index,
                                                    name=name)  # random weights: F1 meaningless
        reports[name] = _export(name, ckpt, labelled, WORK)
        encoder = load_checkpoint(ckpt).encoder
        w2 = encoder.conv2.lin.weight  # [out, in]
        widths = [min(encoder.conv1.lin.weight.shape), min(w2.shape)]  # aggregation widths
        graphs.append({"name": name, "npz": path, "ckpt": ckpt, "nodes": data.num_nodes,
                       "edges": int(data.edge_index.size(1)), "in_dim": data.x.size(1),
                       "sparse_x": as_features(data.x).layout == torch.sparse_csr,
                       "out_dim": int(w2.shape[0]), "widths": widths,
                       "fp32": WORK / f"{name}.onnx", "int8": WORK / f"{name}.int8.onnx"})
    return graphs, reports


def thread_counts(cores: int) -> list[int]:
    """1, 2, 4, ... below ``cores``, and ``cores``."""
    counts, t = [], 1
    while t < cores:
        counts.append(t)
        t *= 2
    return [*counts, cores]


def _run_child(args: list[str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", PROG, *args], capture_output=True, text=True,
                          cwd=HERE.parent)
    if proc.returncode != 0:
        raise RuntimeError(f"child {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _jobs(graphs: list[dict[str, Any]], repeats: int, device: str,
          cores: int) -> list[tuple[dict[str, Any], str, Path, int, int, str]]:
    jobs = []
    for g in graphs:
        r = repeats if g["nodes"] < 10_000 else max(2, repeats // 3)
        jobs += [(g, "torch-eager", g["ckpt"], r, 0, "cpu"),
                 (g, "torch-csr", g["ckpt"], r, 0, "cpu")]
        if g["sparse_x"]:
            jobs.append((g, "torch-eager-dense-x", g["ckpt"], r, 0, "cpu"))
        if device == "cuda":
            jobs += [(g, "torch-eager", g["ckpt"], r, 0, "cuda"),
                     (g, "torch-csr", g["ckpt"], r, 0, "cuda"),
                     (g, "onnxruntime-fp32", g["fp32"], r, 1, "cuda"),
                     (g, "onnxruntime-int8", g["int8"], r, 1, "cuda"),
                     (g, "onnxruntime-fp32", g["fp32"], r, cores, "cpu"),
                     (g, "onnxruntime-int8", g["int8"], r, cores, "cpu")]
            continue
        jobs += [(g, "torch-eager", g["ckpt"], r, 1, "cpu"),
                 (g, "torch-csr", g["ckpt"], r, 1, "cpu")]
        for t in thread_counts(cores):
            jobs += [(g, "onnxruntime-fp32", g["fp32"], r, t, "cpu"),
                     (g, "onnxruntime-int8", g["int8"], r, t, "cpu"),
                     (g, "onnxruntime-portable-fp32", g["fp32"], r, t, "cpu")]
        jobs += [(g, "onnxruntime-fp32-scipy", g["fp32"], r, cores, "cpu"),
                 (g, "onnxruntime-portable-int8", g["int8"], r, cores, "cpu"),
                 (g, "onnxruntime-portable-fp32-defaults", g["fp32"], r, cores, "cpu")]
    return jobs


def _measure(graphs: list[dict[str, Any]], repeats: int, device: str,
             cores: int) -> list[dict[str, Any]]:
    jobs = _jobs(graphs, repeats, device, cores)
    samples: dict[tuple[str, str, int, str], list[dict[str, Any]]] = {}
    for order in (jobs, jobs[::-1]):
        for g, backend, model, r, threads, dev in order:
            sparse = ["--sparse-x"] if g["sparse_x"] and backend in SPARSE_X_BACKENDS else []
            res = _run_child(["--child", backend, str(g["npz"]), str(model), "--repeats", str(r),
                              "--threads", str(threads), "--device", dev, *sparse])
            print(g["name"], backend, dev, threads, res.get("skipped") or
                  [round(t, 3) for t in res["times"]], flush=True)
            samples.setdefault((g["name"], backend, threads, dev), []).append(res)
    rows = []
    for (name, backend, _, dev), runs in samples.items():
        g = next(g for g in graphs if g["name"] == name)
        row = {"graph": name, "nodes": g["nodes"], "edges": g["edges"], "device": dev,
               "backend": backend}
        if "skipped" in runs[0]:
            rows.append({**row, "skipped": runs[0]["skipped"]})
            continue
        times = [t for r in runs for t in r["times"]]
        rows.append({**row, "threads": runs[0]["threads"], "median_s": statistics.median(times),
                     "min_s": min(times), "samples": len(times), "sparse_x": runs[0]["sparse_x"],
                     "peak_MiB": max(r["peak_MiB"] for r in runs),
                     "above_loaded_MiB": max(r["peak_MiB"] - r["loaded_MiB"] for r in runs),
                     "torch_imported": runs[0]["torch_imported"],
                     **({"gpu_peak_MiB": max(r["gpu_peak_MiB"] for r in runs)}
                        if "gpu_peak_MiB" in runs[0] else {})})
    return rows


def _cli_memory(graphs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The embed command's peak RSS on each graph, and the libraries' footprint."""
    out = []
    for g in graphs:
        cli = _run_child(["--child-cli", str(g["npz"]), str(g["fp32"]),
                          str(WORK / f"{g['name']}.emb.npy")])
        if cli["code"] != 0:
            raise RuntimeError(f"edgegcl-embed failed on {g['name']}")
        foot = _run_child(["--child-footprint", str(g["fp32"]), "--kernel", cli["kernel"]])
        data_mib = (g["nodes"] * g["in_dim"] * 4 + g["edges"] * 16
                    + g["nodes"] * g["out_dim"] * 4) / 2**20
        out.append({"graph": g["name"], "footprint_MiB": foot["peak_MiB"],
                    "cli_peak_MiB": cli["peak_MiB"], "cli_wall_s": cli["wall_s"],
                    "inputs_outputs_MiB": data_mib,
                    "above_footprint_MiB": cli["peak_MiB"] - foot["peak_MiB"],
                    "torch_imported": cli["torch_imported"], "kernel": cli["kernel"]})
    return out


def _best(rows: list[dict[str, Any]], graph: str, backend: str, device: str = "cpu",
          threads: int | None = None) -> dict[str, Any] | None:
    found = [r for r in rows if r["graph"] == graph and r["backend"] == backend
             and r["device"] == device and "skipped" not in r
             and (threads is None or r["threads"] == threads)]
    return max(found, key=lambda r: r["threads"]) if found else None


def _verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def _targets(rows: list[dict[str, Any]], cli: list[dict[str, Any]], graphs: list[dict[str, Any]],
             cores: int) -> list[str]:
    """The issue-15 targets, as ratios of rows measured in this run."""
    lines = []
    for g in graphs:
        name = g["name"]
        fp32, int8 = _best(rows, name, "onnxruntime-fp32"), _best(rows, name, "onnxruntime-int8")
        default_threads = max(r["threads"] for r in rows if r["graph"] == name
                              and r["backend"] == "torch-csr" and r["device"] == "cpu")
        csr = _best(rows, name, "torch-csr", threads=default_threads)
        eager = _best(rows, name, "torch-eager", threads=default_threads)
        if not (fp32 and int8 and csr and eager):
            continue
        if g["nodes"] >= 10_000:
            ratio = fp32["median_s"] / csr["median_s"]
            lines.append(f"- {name}: onnxruntime fp32 ({fp32['threads']} threads) / torch CSR "
                         f"({csr['threads']} threads) = {fp32['median_s']:.3f} / "
                         f"{csr['median_s']:.3f} s = {ratio:.2f} (target <= 0.5): "
                         f"{_verdict(ratio <= 0.5)}; against torch eager "
                         f"({eager['threads']} threads, {eager['median_s']:.3f} s): "
                         f"{fp32['median_s'] / eager['median_s']:.2f}")
        else:
            ratio = fp32["median_s"] / eager["median_s"]
            dense = _best(rows, name, "torch-eager-dense-x", threads=default_threads)
            lines.append(f"- {name}: onnxruntime fp32 ({fp32['threads']} threads) / torch eager "
                         f"({eager['threads']} threads) = {fp32['median_s']:.3f} / "
                         f"{eager['median_s']:.3f} s = {ratio:.2f} (target <= 0.5): "
                         f"{_verdict(ratio <= 0.5)}"
                         + (f"; against torch eager with x dense ({dense['median_s']:.3f} s): "
                            f"{fp32['median_s'] / dense['median_s']:.2f}" if dense else ""))
        lines.append(f"- {name}: int8 / fp32 latency = {int8['median_s']:.3f} / "
                     f"{fp32['median_s']:.3f} s = {int8['median_s'] / fp32['median_s']:.2f} "
                     f"(target < 1): {_verdict(int8['median_s'] < fp32['median_s'])}")
        for backend in ("onnxruntime-fp32", "onnxruntime-int8"):
            one, full = _best(rows, name, backend, threads=1), _best(rows, name, backend)
            if one and full and full["threads"] > 1:
                gain = one["median_s"] / full["median_s"]
                lines.append(f"- {name}: {backend} throughput at {full['threads']} threads / "
                             f"1 thread = {one['median_s']:.3f} / {full['median_s']:.3f} s = "
                             f"{gain:.2f}x (target >= 1.6 on 2 cores): {_verdict(gain >= 1.6)}")
    for c in cli:
        budget = 1.5 * c["inputs_outputs_MiB"]
        lines.append(f"- {c['graph']}: edgegcl-embed peak RSS {c['cli_peak_MiB']:.0f} MiB = "
                     f"libraries' footprint {c['footprint_MiB']:.0f} + "
                     f"{c['above_footprint_MiB']:.0f} MiB; 1.5 x (x + edge_index + "
                     f"embeddings) = 1.5 x {c['inputs_outputs_MiB']:.0f} = {budget:.0f} MiB: "
                     f"{_verdict(c['above_footprint_MiB'] <= budget)}")
    return lines


def _portable_lines(rows: list[dict[str, Any]], graphs: list[dict[str, Any]]) -> list[str]:
    """The portable model's latency and memory against the staged path."""
    lines = []
    for g in graphs:
        name = g["name"]
        for threads in sorted({r["threads"] for r in rows if r["graph"] == name
                               and r["backend"] == "onnxruntime-portable-fp32"}):
            alone = _best(rows, name, "onnxruntime-portable-fp32", threads=threads)
            staged = _best(rows, name, "onnxruntime-fp32", threads=threads)
            if alone and staged:
                lines.append(f"- {name}, fp32, {threads} thread{'s' * (threads > 1)}: portable "
                             f"{alone['median_s']:.3f} s against staged {staged['median_s']:.3f}"
                             f" s ({alone['median_s'] / staged['median_s']:.2f}x); peak above "
                             f"loaded {alone['above_loaded_MiB']:.0f} against "
                             f"{staged['above_loaded_MiB']:.0f} MiB")
        for backend, label in (("onnxruntime-portable-fp32-defaults",
                                "with onnxruntime's default options (memory pattern on)"),
                               ("onnxruntime-portable-int8", "INT8")):
            alone = _best(rows, name, backend)
            if alone:
                lines.append(f"- {name}, portable {label}, {alone['threads']} threads: "
                             f"{alone['median_s']:.3f} s, peak above loaded "
                             f"{alone['above_loaded_MiB']:.0f} MiB")
    return lines


def _markdown(rows: list[dict[str, Any]], cli: list[dict[str, Any]],
              designs: dict[str, Any], reports: dict[str, Any], graphs: list[dict[str, Any]],
              res: dict[str, Any],
              load: tuple[tuple[float, ...], tuple[float, ...]], cores: int) -> str:
    import onnxruntime
    import scipy

    def row(r: dict[str, Any]) -> str:
        if "skipped" in r:
            return (f"| {r['graph']} | {r['backend']} | {r['device']} | - | - | skipped: "
                    f"{r['skipped']} | | | | | |")
        gpu = f" (GPU {r['gpu_peak_MiB']:.0f})" if "gpu_peak_MiB" in r else ""
        return (f"| {r['graph']} | {r['backend']} | {r['device']} | {r['threads']} | "
                f"{'CSR' if r.get('sparse_x') else 'dense'} | "
                f"{r['median_s']:.3f} | {r['min_s']:.3f} | {r['samples']} | "
                f"{r['peak_MiB']:.0f}{gpu} | {r['above_loaded_MiB']:.0f} | "
                f"{'yes' if r['torch_imported'] else 'no'} |")

    lines = [
        "# Embedding latency and memory: torch vs onnxruntime", "",
        *harness.header(res, note=f"onnxruntime {onnxruntime.__version__}, scipy "
                        f"{scipy.__version__}; {cores} cores available; OMP_NUM_THREADS unset"),
        f"Load average {load[0][0]:.2f} / {load[0][1]:.2f} / {load[0][2]:.2f} at the start, "
        f"{load[1][0]:.2f} / {load[1][1]:.2f} / {load[1][2]:.2f} at the end. Median of two "
        "interleaved rounds (opposite orders), with the fastest run.", "",
        "Each backend embeds the whole graph in its own process (see the module docstring of "
        "bench/embed_speed.py): torch-eager is edgegcl's encoder, torch-csr the best "
        "plain-torch path (A_hat built as one CSR matrix inside the timed call, "
        "`torch.sparse.mm`, cheaper order per layer); onnxruntime-* is "
        "`EncoderSession.embed` (the portable file cut into its ONNX dense stages + CSR "
        "aggregation, stage 0 as "
        "a CSR product for a sparse x; degree and adjacency construction and input checks "
        "included; the kernel numba's, -scipy with scipy's); onnxruntime-portable-* the same files run whole by onnxruntime "
        "alone (x dense; -defaults: onnxruntime's default session options). Column x: how the "
        "features reach the backend, as they would in practice: Cora's (1.3 % nonzero) as CSR "
        "(torch: edgegcl's as_features; onnxruntime: scipy CSR), built before the timed call. "
        "Threads 0 in the command means torch's "
        "default. Peak = the process's maximum RSS; above loaded = peak minus RSS after "
        "imports, model and graph.",
        "", "| graph | backend | device | threads | x | median s | min s | runs | peak RSS MiB | "
        "above loaded MiB | torch imported |", "|---|---|---|---|---|---|---|---|---|---|---|",
        *(row(r) for r in rows), "", "## Targets (issue 15)", "",
        *_targets(rows, cli, graphs, cores), "", "## The portable model beside the staged path "
        "(issue 24)", "", "The same .onnx file, run whole by onnxruntime alone (aggregation "
        "inside the graph: a Loop over each node's entries, O(N d + E) memory) and by "
        "`EncoderSession` (the file cut into its dense stages, CSR aggregation, row blocks). "
        "Ratios of medians "
        "measured in this run; peak above loaded as in the table.", "",
        *_portable_lines(rows, graphs), ""]
    if cli:
        lines += ["## edgegcl-embed memory", "",
                  "`edgegcl-embed MODEL --graph GRAPH.npz --out EMB.npy --force` (fp32, all "
                  "threads; the .npz holds x dense, which the runtime converts to CSR block by "
                  "block where x is mostly zeros) run in-process by a child that never imports "
                  "torch; kernel: the one its `--kernel auto` chose for the graph (numba's only "
                  "where the graph repays numba's start-up); the footprint is the peak RSS of a "
                  "process that imports numpy, scipy, onnxruntime and the runtime and opens the "
                  "model with that kernel (numba's adds numba and its compiled loops).", "",
                  "| graph | kernel | footprint MiB | command peak MiB | above footprint MiB | "
                  "x + edge_index + embeddings MiB | wall s |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {c['graph']} | {c['kernel']} | {c['footprint_MiB']:.0f} | "
                  f"{c['cli_peak_MiB']:.0f} | "
                  f"{c['above_footprint_MiB']:.0f} | {c['inputs_outputs_MiB']:.0f} | "
                  f"{c['cli_wall_s']:.2f} |" for c in cli]
        lines.append("")
    if designs:
        lines += ["## Aggregation designs side by side", "",
                  "A_hat @ H (A_hat with self-loops, normalised; H random float32) at the "
                  "widths the encoder aggregates at, all in one process on the same graph; "
                  "median of 3 after a warm-up.", "",
                  "| graph | nnz | width | design | median s | min s | max abs diff to scipy |",
                  "|---|---|---|---|---|---|---|"]
        for name, d in designs.items():
            lines += [f"| {name} | {d['nnz']} | {r['width']} | {r['design']} | "
                      f"{r['median_s']:.3f} | {r['min_s']:.3f} | {r['max_abs_diff']:.1g} |"
                      for r in d["rows"]]
            lines += [f"| {name} | {d['nnz']} | - | building A_hat (CSR) from edge_index, "
                      f"{kernel} | {t:.3f} | | |" for kernel, t in d["build_s"].items()]
        lines.append("")
    lines += ["## INT8 (dynamic quantisation of the MatMul weights)", "",
              "| graph | fp32 bytes | int8 bytes | size ratio | mean cosine to fp32 | min cosine "
              "| micro-F1 fp32 | micro-F1 int8 | change (points) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, rep in reports.items():
        f1 = rep.get("downstream")
        lines.append(f"| {name} | {rep['fp32_bytes']} | {rep['int8_bytes']} | "
                     f"{rep['size_ratio']:.3f} | {rep['mean_cosine']:.5f} | "
                     f"{rep['min_cosine']:.5f} | "
                     + (f"{f1['fp32']:.2f} | {f1['int8']:.2f} | {f1['change']:+.2f} |" if f1
                        else "- | - | - (random weights) |"))
    cora = reports.get("Cora", {}).get("downstream")
    if cora:
        lines += ["", f"Micro-F1: {cora['protocol']} ({cora['splits']} splits), the same splits "
                      f"for both models. Target: int8 at most 1.0 point below fp32 on Cora: "
                      f"{cora['change']:+.2f} -> {'met' if cora['change'] >= -1.0 else 'missed'}."]
    lines += ["", "Export check (onnxruntime vs torch, max abs difference on the training graph, "
                  "a random subgraph and, for models that expose W1, the training graph through "
                  "the sparse first layer): "
              + ", ".join(f"{n} {r['export_check_max_abs_diff']:.1g}" for n, r in reports.items()),
              ""]
    return "\n".join(lines)


def _fail(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    p = harness.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--root", default="", help="datasets root holding Cora")
    p.add_argument("--run", default="", help="a Cora run directory (default: train 50 epochs)")
    p.add_argument("--nodes", type=int, default=100_000, help="synthetic graph size")
    p.add_argument("--repeats", type=int, default=6, help="timed runs per round (Cora; /3 large)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: torch on CUDA and onnxruntime's CUDA provider, beside the CPU")
    p.add_argument("--out", default=str(harness.RESULTS),
                   help="directory for embedding.md / .json (embedding-cuda.* with --device "
                        "cuda); default bench/results")
    p.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--sparse-x", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--child", nargs=3, metavar=("BACKEND", "GRAPH", "MODEL"),
                   help=argparse.SUPPRESS)
    p.add_argument("--child-cli", nargs=3, help=argparse.SUPPRESS)
    p.add_argument("--child-footprint", help=argparse.SUPPRESS)
    p.add_argument("--kernel", default="auto", help=argparse.SUPPRESS)
    p.add_argument("--child-designs", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        backend, graph, model = args.child
        result = child(backend, Path(graph), Path(model), args.repeats, args.threads, args.device,
                       args.sparse_x)
    elif args.child_cli:
        result = child_cli(*map(Path, args.child_cli))
    elif args.child_footprint:
        result = child_footprint(Path(args.child_footprint), args.kernel)
    elif args.child_designs:
        graph, widths = args.child_designs
        result = child_designs(Path(graph), [int(w) for w in widths.split(",")], args.threads)
    else:
        return run(args)
    print(json.dumps(result))


def run(args: argparse.Namespace) -> None:
    """The whole benchmark; writes embedding[-cuda].md and .json into ``args.out``."""
    out = Path(args.out)
    if not out.is_dir():
        _fail(f"--out {out} is not a directory; create it or pass another one")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            _fail("--device cuda needs a CUDA GPU, but torch.cuda.is_available() is False "
                  "here; run on a GPU machine or drop --device cuda")
    from edgegcl.errors import UsageError
    from edgegcl_embed.cores import available_cores

    cores = available_cores()
    res, load_start = harness.record("embed_speed", sys.argv[1:], root=args.root), os.getloadavg()
    try:
        graphs, reports = _prepare(args.root, args.run, args.nodes)
    except UsageError as exc:
        _fail(f"{exc} (pass the datasets root holding Cora with --root)")
    designs = {}
    cli: list[dict[str, Any]] = []
    if args.device == "cpu":
        for g in graphs:
            designs[g["name"]] = _run_child(["--child-designs", str(g["npz"]),
                                             ",".join(map(str, g["widths"])),
                                             "--threads", str(cores)])
        cli = _cli_memory(graphs)
    rows = _measure(graphs, args.repeats, args.device, cores)
    res["wall_min"] = harness.wall_min(res)
    text = _markdown(rows, cli, designs, reports, graphs, res, (load_start, os.getloadavg()),
                     cores)
    stem = "embedding" if args.device == "cpu" else "embedding-cuda"
    harness.save(out / f"{stem}.md", text)
    harness.save(out / f"{stem}.json", json.dumps(
        {"rows": rows, "cli": cli, "designs": designs, "int8": reports}, indent=2) + "\n")
    print(text)


if __name__ == "__main__":
    main()
