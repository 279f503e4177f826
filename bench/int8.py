"""INT8 schemes side by side on trained encoders (issue 24): quality, speed, and whether the
integer products can overflow the 16-bit pair sums of x86 CPUs without VNNI.

For every run given (a trained encoder and its dataset) the portable fp32 model is exported and
quantised with each scheme of ``edgegcl.onnx.quantize.SCHEMES``; for each the bench reports
the file size, the per-node cosine similarity of the INT8 embeddings to fp32 (the runtime's
staged path, and the portable file run by onnxruntime alone), the linear probe's test
micro-F1 on both (``int8_report``: 5 random 10/10/80 splits, weight decay chosen on
validation), the runtime's latency against fp32 (one thread, interleaved in this process),
and an emulation of the kernel of CPUs without VNNI: onnxruntime's uint8 x int8 MatMul there
adds the products of consecutive k in pairs with saturating 16-bit instructions (vpmaddubsw),
so a pair |a[k] w[k] + a[k+1] w[k+1]| above 32767 gives other numbers than on a VNNI or ARM
CPU. The bench counts such pairs on the uint8 activations the portable INT8 model actually
quantises (whole graph) and its int8 weights.

    python3 -m bench.int8 --root ROOT --run Cora=runs/Cora-... \\
        --run CiteSeer=runs/CiteSeer-...

Writes bench/results/int8-CPUTAG.md and .json (CPUTAG: the instruction set that picks the
kernel, e.g. x86-avx512vnni, x86-avx2, arm64).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from bench import harness

HERE = Path(__file__).resolve().parent
PAIR_LIMIT = 2**15 - 1  # vpmaddubsw saturates its int16 pair sums here


def cpu_tag() -> str:
    """The instruction-set family onnxruntime's integer kernels are chosen by."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return "arm64-dotprod" if "asimddp" in flags else "arm64"
    if "avx512_vnni" in flags:
        return "x86-avx512vnni"
    if "avx_vnni" in flags:
        return "x86-avxvnni"
    if "avx512bw" in flags:
        return "x86-avx512"
    return "x86-avx2" if "avx2" in flags else f"{machine or 'cpu'}"


def saturating_pairs(int8_path: Path, x: np.ndarray, edge_index: np.ndarray) -> list[dict]:
    """For each MatMulInteger of the INT8 portable model: how many (row, k pair, column)
    products a 16-bit pair sum would clip, on the activations this graph gives it."""
    import onnxruntime as ort

    from edgegcl.onnx.quantize import int8_matmuls

    model = onnx.load(str(int8_path))
    inits = {t.name: t for t in model.graph.initializer}
    quantised = {n.input[0]: n.output[0] for n in model.graph.node
                 if n.op_type == "DynamicQuantizeLinear"}  # float tensor -> its uint8 values
    matmuls = int8_matmuls(model)
    for source, *_ in matmuls:
        model.graph.output.append(onnx.helper.make_tensor_value_info(
            quantised[source], onnx.TensorProto.UINT8, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    activations = session.run([quantised[source] for source, *_ in matmuls],
                              {"x": x, "edge_index": edge_index})
    rows = []
    for (_, weight, *_), a in zip(matmuls, activations):
        w = numpy_helper.to_array(inits[weight]).astype(np.int32)
        a = a.astype(np.int32)
        clipped = pairs = 0
        for k in range(0, a.shape[1] - 1, 2):
            both = np.flatnonzero((a[:, k] != 0) & (a[:, k + 1] != 0))  # else |sum| <= 255 x 128
            pairs += a.shape[0] * w.shape[1]
            if both.size:
                sums = np.outer(a[both, k], w[k]) + np.outer(a[both, k + 1], w[k + 1])
                clipped += int((np.abs(sums) > PAIR_LIMIT).sum())
        rows.append({"weight": weight, "shape": list(w.shape),
                     "max_abs_weight": int(np.abs(w).max()), "pairs": pairs,
                     "clipped": clipped})
    return rows


def _latency(paths: dict[str, Path], x: Any, edge_index: np.ndarray,
             repeats: int) -> dict[str, float]:
    """Median one-thread latency of the runtime per model, rounds interleaved."""
    from edgegcl_embed.runtime import EncoderSession

    sessions = {name: EncoderSession(p, threads=1, kernel="scipy") for name, p in paths.items()}
    times: dict[str, list[float]] = {name: [] for name in paths}
    for session in sessions.values():
        session.embed(x, edge_index)  # warm-up
    for _ in range(repeats):
        for name, session in sessions.items():
            start = time.perf_counter()
            session.embed(x, edge_index)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def measure(name: str, run: Path, root: str, repeats: int) -> dict[str, Any]:
    import scipy.sparse

    from edgegcl.data import load_graph
    from edgegcl.onnx.export import check_against_torch, export_encoder
    from edgegcl.onnx.quantize import SCHEMES, int8_report, quantize_int8
    from edgegcl.training.checkpoint import load_checkpoint

    ckpt = load_checkpoint(run / "checkpoint.pt")
    data = load_graph(name, root or None)
    x, edge_index = data.x.numpy(), data.edge_index.numpy()
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "model.onnx"
        export_encoder(ckpt, fp32)
        checks = check_against_torch(fp32, ckpt.encoder, data.x, data.edge_index)
        paths, schemes = {"fp32": fp32}, {}
        for scheme in SCHEMES:
            paths[scheme] = Path(tmp) / f"model.{scheme}.onnx"
            quantize_int8(fp32, paths[scheme], scheme)
            print(f"{name} {scheme}: report", flush=True)
            schemes[scheme] = {"report": int8_report(fp32, paths[scheme], data),
                               "pairs": saturating_pairs(paths[scheme], x, edge_index)}
        features = scipy.sparse.csr_matrix(x) if (x != 0).mean() < 0.1 else x
        latency = _latency(paths, features, edge_index, repeats)
    return {"dataset": name, "run": str(run), "nodes": int(x.shape[0]),
            "edges": int(edge_index.shape[1]), "in_dim": int(x.shape[1]),
            "export_check": max(c.max_abs_diff for c in checks), "latency_s": latency,
            "schemes": schemes}


def markdown(results: list[dict[str, Any]], res: dict[str, Any], tag: str) -> str:
    import onnxruntime

    from edgegcl.onnx.quantize import DEFAULT_SCHEME, scheme_description

    lines = [f"# INT8 schemes on {tag}", "",
             *harness.header(res, note=f"onnxruntime {onnxruntime.__version__}; CPU tag {tag}"),
             "Schemes (`edgegcl.onnx.quantize.SCHEMES`; shipped: "
             f"**{DEFAULT_SCHEME}**):", ""]
    lines += [f"- {scheme_description(s)}" for s in results[0]["schemes"]]
    lines += ["", "Cosine: per-node cosine similarity of the INT8 embeddings to fp32 on the "
              "training graph, through the runtime (activations quantised per row block) and "
              "through the portable file run by onnxruntime alone (activations quantised over "
              "the whole graph). Micro-F1: linear probe test micro-F1, 5 random 10/10/80 "
              "splits, weight decay chosen on validation, the same splits for fp32 and INT8. "
              "Latency: the runtime, one thread, scipy's kernel, x as CSR where under 10 % "
              "nonzero, median of interleaved runs in one process (ratios are what count on a "
              "shared machine). Clipped pairs: products a[k] w[k] + a[k+1] w[k+1] beyond int16 "
              "on the activations of the portable INT8 model, summed over its MatMuls: what a "
              "CPU without VNNI would saturate.", "",
              "| dataset | scheme | size ratio | mean cosine | min cosine | portable mean "
              "cosine | micro-F1 fp32 | micro-F1 int8 | change (points) | latency / fp32 | "
              "max abs weight | clipped pairs |", "|---" * 12 + "|"]
    for r in results:
        for scheme, s in r["schemes"].items():
            rep, f1 = s["report"], s["report"].get("downstream", {})
            clipped = sum(p["clipped"] for p in s["pairs"])
            total = sum(p["pairs"] for p in s["pairs"])
            lines.append(
                f"| {r['dataset']} | {scheme} | {rep['size_ratio']:.3f} | "
                f"{rep['mean_cosine']:.5f} | {rep['min_cosine']:.5f} | "
                f"{rep['portable_mean_cosine']:.5f} | {f1.get('fp32', float('nan')):.2f} | "
                f"{f1.get('int8', float('nan')):.2f} | {f1.get('change', float('nan')):+.2f} | "
                f"{r['latency_s'][scheme] / r['latency_s']['fp32']:.2f} | "
                f"{max(p['max_abs_weight'] for p in s['pairs'])} | "
                f"{clipped} of {total} ({clipped / total:.1e}) |")
    lines += ["", "fp32 latency (s): " + ", ".join(
        f"{r['dataset']} {r['latency_s']['fp32']:.4f}" for r in results)
        + "; export check (max abs difference to torch): " + ", ".join(
        f"{r['dataset']} {r['export_check']:.1g}" for r in results), ""]
    return "\n".join(lines)


def main() -> None:
    p = harness.ArgumentParser(prog="bench.int8", description=__doc__.splitlines()[0])
    p.add_argument("--root", default="", help="datasets root")
    p.add_argument("--run", action="append", required=True, metavar="DATASET=RUN_DIR",
                   help="a dataset and the run directory of an encoder trained on it")
    p.add_argument("--repeats", type=int, default=15, help="timed runs per model")
    p.add_argument("--out", default=str(harness.RESULTS), help="directory for the results")
    args = p.parse_args()

    res, tag = harness.record("int8", sys.argv[1:], root=args.root or None), cpu_tag()
    results = []
    for spec in args.run:
        name, _, run = spec.partition("=")
        results.append(measure(name, Path(run), args.root, args.repeats))
    res["wall_min"] = harness.wall_min(res)
    text = markdown(results, res, tag)
    out = Path(args.out)
    harness.save(out / f"int8-{tag}.md", text)
    harness.save(out / f"int8-{tag}.json", json.dumps(results, indent=2) + "\n")
    print(text)


if __name__ == "__main__":
    main()
