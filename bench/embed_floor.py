"""Embedding inference against its floor, at 1 thread and at all cores, per CSR kernel.

The floor of one embedding of the whole graph by ``EncoderSession`` (onnxruntime dense stages,
CSR aggregation): the two layers' dense products at the fastest rate this machine reaches for
them (float32, the same shapes; the fastest of numpy's, torch's and onnxruntime's own MatMul,
each at the same threads), plus the bytes the sparse products must move (each
stored entry reads its source row of d floats, its index and its value; each output row is
written once) at the bandwidth a plain copy reaches with the same threads. Each thread count
runs in its own process (numpy's BLAS and numba read their thread counts at start-up); the
embedding is timed with numba's kernel and with scipy's, and the faster is what ``kernel
"auto"`` should take on this machine.

    python -m bench.embed_floor --nodes 100000 --repeats 5
    python -m bench.embed_floor --nodes 1000000 --avg-degree 20 --degree-exponent 2.5 \
        --repeats 3 --name embedding-floor-power-law

Writes bench/results/embedding-floor.{json,md} (or --name). Run it alone: it is a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import harness

HERE = Path(__file__).resolve().parent
PROG = "bench.embed_floor"


def child(graph: Path, model: Path, threads: int, repeats: int) -> dict[str, Any]:
    """In a fresh process whose BLAS and numba were given ``threads``: the floor's parts and
    the session's embedding with each kernel."""
    from concurrent.futures import ThreadPoolExecutor
    from functools import partial

    import numpy as np

    from edgegcl_embed.runtime import EncoderSession

    with np.load(graph) as g:
        x, edge_index = g["x"], g["edge_index"]
        widths = [int(w) for w in g["widths"]]  # in, hidden, out
        agg = [int(w) for w in g["aggregated"]]  # widths the two aggregations run at
    n, nnz = x.shape[0], edge_index.shape[1] + x.shape[0]  # A_hat's entries: edges + loops
    rng = np.random.default_rng(0)
    calls = {}
    for layer, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        left = rng.standard_normal((n, a), dtype=np.float32)
        right = rng.standard_normal((a, b), dtype=np.float32)
        for name in GEMMS:
            calls[f"{name} {layer}"] = gemm(name, left, right, threads)
    src = rng.standard_normal(1 << 26, dtype=np.float32)  # 256 MiB: past any cache
    dst = np.empty_like(src)
    parts = np.array_split(np.arange(src.size), threads)
    bounds = [(int(p[0]), int(p[-1]) + 1) for p in parts if p.size]
    pool = ThreadPoolExecutor(threads)

    def copy() -> None:
        list(pool.map(lambda b: np.copyto(dst[b[0]:b[1]], src[b[0]:b[1]]), bounds))
    calls["copy"] = copy
    for kernel in ("numba", "scipy"):
        session = EncoderSession(model, threads=threads, kernel=kernel)
        calls[kernel] = partial(session.embed, x, edge_index)
    # every part measured side by side, so that the ratio to the floor holds under drift
    t = harness.interleaved_medians(calls, repeats)
    dense_by = {name: sum(t[f"{name} {layer}"] for layer in range(len(widths) - 1))
                for name in GEMMS}
    dense_s = sum(min(t[f"{name} {layer}"] for name in GEMMS)  # the fastest GEMM per shape
                  for layer in range(len(widths) - 1))
    bandwidth = 2 * src.nbytes / t["copy"]  # read + write
    sparse_bytes = sum(nnz * (4 * d + 8 + 4) + n * 4 * d for d in agg)
    floor = dense_s + sparse_bytes / bandwidth
    return {"threads": threads, "dense_s": dense_s, "dense_by": dense_by,
            "copy_GBps": bandwidth / 1e9, "sparse_bytes": sparse_bytes, "floor_s": floor,
            "embed_s": {kernel: t[kernel] for kernel in ("numba", "scipy")}}


GEMMS = ("numpy", "torch", "onnxruntime")
"""The float32 GEMMs timed for each dense product; the floor takes the fastest."""


def gemm(name: str, left: Any, right: Any, threads: int) -> Any:
    """A call computing ``left @ right`` with ``name``'s GEMM at ``threads`` threads:
    numpy's BLAS, torch's, or onnxruntime's own MatMul kernel (a one-node model whose weight
    is ``right``, as the runtime's stages hold it)."""
    if name == "numpy":
        return lambda: left @ right
    if name == "torch":
        import torch

        torch.set_num_threads(threads)
        tl, tr = torch.from_numpy(left), torch.from_numpy(right)
        return lambda: tl @ tr
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["z"])], "gemm",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["rows", left.shape[1]])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["rows", right.shape[1]])],
        [numpy_helper.from_array(right, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    del onnx
    return lambda: session.run(["z"], {"a": left})


def _prepare(nodes: int, work: Path, avg_degree: float = 10.0, degree_exponent: float = 0.0
             ) -> tuple[Path, Path, dict[str, Any]]:
    """A synthetic graph (128 features, average degree ``avg_degree``, power-law degrees with
    ``degree_exponent``) and a random-weight encoder of the default widths, exported fp32."""
    import numpy as np
    import torch

    from edgegcl.data import synthetic_graph
    from edgegcl.nn.model import GCNEncoder
    from edgegcl.onnx.export import export_encoder
    from edgegcl.training.checkpoint import load_checkpoint, save_checkpoint
    from edgegcl.training.config import TrainConfig

    cfg = TrainConfig(encoder="gcn", dataset="synthetic", nodes=nodes, classes=10, features=128,
                      avg_degree=avg_degree, degree_exponent=degree_exponent, graph_seed=0)
    data = synthetic_graph(cfg.synthetic.spec())
    torch.manual_seed(0)
    m = cfg.model
    ckpt = work / "model.pt"
    save_checkpoint(ckpt, GCNEncoder(128, m).state_dict(), cfg, 128, 0, 0)
    model = work / "model.onnx"
    export_encoder(load_checkpoint(ckpt), model)
    widths = [128, m.hidden_dim, m.out_dim]
    # layer 1 aggregates at the narrower of its two sides; layer 2 after its product
    aggregated = [min(128, m.hidden_dim), m.out_dim]
    graph = work / "graph.npz"
    np.savez(graph, x=data.x.numpy(), edge_index=data.edge_index.numpy(), widths=widths,
             aggregated=aggregated)
    return graph, model, {"nodes": nodes, "edges": int(data.edge_index.size(1)),
                          "degree_exponent": degree_exponent,
                          "max_degree": int(data.edge_index[1].bincount().max()),
                          "widths": widths, "aggregated": aggregated}


def report(res: dict[str, Any]) -> str:
    g = res["graph"]
    lines = [f"# Embedding inference against its floor ({g['nodes']} nodes)", "",
             *harness.header(res),
             f"Synthetic graph: {g['nodes']} nodes, {g['edges']} edges"
             + (f", power-law degrees (exponent {g['degree_exponent']:g}, largest in-degree "
                f"{g['max_degree']})" if g.get("degree_exponent") else "") + ", widths "
             f"{' -> '.join(map(str, g['widths']))} (random weights), aggregations at "
             f"{g['aggregated']} wide. Floor = the two dense products at the fastest GEMM "
             "this machine has for each shape (numpy's, torch's or onnxruntime's own MatMul, "
             "same threads) + the sparse "
             "products' bytes (per stored entry: a source row, its index and value; each "
             "output row written once) at a plain copy's bandwidth with the same threads. "
             "Median of the repeats after a warm-up; every part (each GEMM, the copy, the "
             "embedding with each kernel) is timed once per round, side by side, so that a "
             "drift of the machine's speed falls on floor and embedding alike.", "",
             "| threads | dense ms (numpy / torch / onnxruntime) | copy GB/s | sparse MB | "
             "floor ms | numba ms | scipy ms | faster | best / floor |",
             "|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for r in res["rows"]:
        e = r["embed_s"]
        kernel = min(e, key=e.__getitem__)
        ratio = e[kernel] / r["floor_s"]
        by = r.get("dense_by")
        dense = f"{1000 * r['dense_s']:.0f}" + (
            f" ({' / '.join(f'{1000 * by[k]:.0f}' for k in GEMMS)})" if by else " (numpy)")
        lines.append(f"| {r['threads']} | {dense} | {r['copy_GBps']:.1f} | "
                     f"{r['sparse_bytes'] / 1e6:.0f} | {1000 * r['floor_s']:.0f} | "
                     f"{1000 * e['numba']:.0f} | {1000 * e['scipy']:.0f} | {kernel} | "
                     f"{ratio:.2f} |")
        verdicts.append(f"- {r['threads']} thread(s): {kernel} {1000 * e[kernel]:.0f} ms / floor "
                        f"{1000 * r['floor_s']:.0f} ms = {ratio:.2f} (target <= 1.2): "
                        f"**{'met' if ratio <= 1.2 else 'missed'}**")
    return "\n".join([*lines, "", *verdicts, ""])


def main() -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--degree-exponent", type=float, default=0.0,
                   help="power-law degrees with this exponent (0: near-uniform)")
    p.add_argument("--name", default="embedding-floor",
                   help="results file name in bench/results (.json and .md)")
    p.add_argument("--child", nargs=4, metavar=("GRAPH", "MODEL", "THREADS", "REPEATS"),
                   help=argparse.SUPPRESS)
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    if args.child:
        graph, model, threads, repeats = args.child
        print(json.dumps(child(Path(graph), Path(model), int(threads), int(repeats))))
        return
    from edgegcl_embed.cores import available_cores

    if args.report_only:
        res = harness.read(args.name)
        harness.write(args.name, res, report(res))
        return
    res = harness.record("embed_floor", sys.argv[1:])
    cores = available_cores()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        graph, model, info = _prepare(args.nodes, Path(tmp), args.avg_degree,
                                      args.degree_exponent)
        for threads in sorted({1, cores}):
            env = {**os.environ, "OMP_NUM_THREADS": str(threads),
                   "OPENBLAS_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
                   "NUMBA_NUM_THREADS": str(threads)}
            proc = subprocess.run([sys.executable, "-m", PROG, "--child", str(graph), str(model),
                                   str(threads), str(args.repeats)], capture_output=True,
                                  text=True, env=env, cwd=HERE.parent, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"embed_floor: child at {threads} threads failed:\n"
                                 f"{proc.stderr[-2000:]}")
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(f"embed_floor: {threads} thread(s) done", flush=True)
    res.update(graph=info, rows=rows, wall_min=harness.wall_min(res))
    harness.write(args.name, res, report(res))
    print(report(res))


if __name__ == "__main__":
    main()
