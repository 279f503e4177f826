"""Dynamic INT8 quantisation of an exported encoder, and what it costs in quality.

onnxruntime's ``quantize_dynamic`` stores the MatMul weights as int8 and quantises activations
to uint8 on the fly (per run: per row block in the edgegcl runtime, whose blocks do not depend
on the thread count; the whole graph when the portable file runs alone), so no calibration
data is needed. The aggregation stays in float32: only the dense layers change. The runtime's
sparse first layer multiplies x (not quantised) by the int8 W1, dequantised.

``SCHEMES`` are the weight quantisations compared in bench/int8.py; ``DEFAULT_SCHEME`` is the
one ``edgegcl export --quantize int8`` writes: one scale per output channel, and weights in
-64..64 (7 bits), so that no product pair of the uint8 x int8 kernel exceeds int16. x86 CPUs
without VNNI (AVX2, AVX-512 before VNNI) add such pairs with saturating 16-bit instructions
(vpmaddubsw), those with VNNI and ARM's dot products in 32 bits: with 8-bit weights a pair can
reach 2 x 255 x 127 and the same file gives other numbers on an AVX2 machine; with 7-bit
weights every kernel computes the same exact integer products. Per-channel scales win back the
bit. docs/export.md, "INT8 on every CPU", has the measurements.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from torch_geometric.data import Data

from edgegcl.onnx.metadata import write_metadata
from edgegcl.onnx.portable import topological
from edgegcl.training.task import task_named
from edgegcl_embed.contract import (INPUT_X, STAGE0_INITIALIZER, STAGE0_INITIALIZERS,
                                    STAGE0_WEIGHT_INT8, ModelMetadata)
from edgegcl_embed.runtime import EncoderSession, portable_session

SCHEMES = {  # name: (quantize_dynamic's per_channel, reduce_range)
    "tensor8": (False, False),  # one scale per matrix, -127..127
    "tensor7": (False, True),
    "channel8": (True, False),
    "channel7": (True, True),
}
DEFAULT_SCHEME = "channel7"


def scheme_description(scheme: str) -> str:
    """The metadata line naming a scheme: what is quantised, how, and why."""
    per_channel, reduce_range = SCHEMES[scheme]
    weights = ("-64..64 (7 bits: no uint8 x int8 pair sum overflows int16)" if reduce_range
               else "-127..127")
    return (f"{scheme}: MatMul weights int8 "
            f"{'per output channel' if per_channel else 'per tensor'}, {weights}; "
            "activations uint8, quantised per run")


def int8_matmuls(model: onnx.ModelProto) -> list[tuple[str, str, str, str]]:
    """The quantised products quantize_dynamic wrote, in graph order, as (the float tensor it
    quantises, int8 weight, weight scale, weight zero point): found through the graph, not its
    tensor names: input -> DynamicQuantizeLinear (q, scale, zero point) -> MatMulInteger(q, W_q,
    zero point, W_zero_point), and the Mul of the input's scale with W's."""
    nodes = model.graph.node
    found = []
    for quant in (n for n in nodes if n.op_type == "DynamicQuantizeLinear"):
        matmul = next((n for n in nodes if n.op_type == "MatMulInteger"
                       and n.input[0] == quant.output[0]), None)
        scale = next((n for n in nodes if n.op_type == "Mul" and quant.output[1] in n.input),
                     None)
        if not (matmul and scale and len(matmul.input) == 4):
            raise RuntimeError("quantize_dynamic wrote a product in an unexpected form (no "
                               "DynamicQuantizeLinear -> MatMulInteger, Mul of the scales)")
        w_scale = next(i for i in scale.input if i != quant.output[1])
        found.append((quant.input[0], matmul.input[1], w_scale, matmul.input[3]))
    return found


def _rename(model: onnx.ModelProto, old: str, new: str) -> None:
    """Rename the initializer ``old`` to ``new``, in the graph and every node reading it."""
    for init in model.graph.initializer:
        if init.name == old:
            init.name = new
    for node in model.graph.node:
        node.input[:] = [new if name == old else name for name in node.input]


def quantize_int8(fp32_path: Path, int8_path: Path, scheme: str = DEFAULT_SCHEME) -> None:
    """Write the INT8 version of the fp32 model at ``fp32_path`` to ``int8_path``.

    When the model has stage 0, its int8 weight, scale and zero point are renamed to
    STAGE0_INITIALIZERS, where the runtime finds them for its sparse first layer.
    """
    model = onnx.load(str(fp32_path))
    meta = ModelMetadata.from_props({p.key: p.value for p in model.metadata_props})
    if meta.precision != "fp32":
        raise ValueError(f"{fp32_path} is an edgegcl {meta.precision} model, not an fp32 one")
    exposes = any(init.name == STAGE0_INITIALIZER for init in model.graph.initializer)
    per_channel, reduce_range = SCHEMES[scheme]
    logging.disable(logging.WARNING)  # quantize_dynamic's "consider pre-processing" notice
    try:
        quantize_dynamic(model, int8_path, weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul"], per_channel=per_channel,
                         reduce_range=reduce_range)
    finally:
        logging.disable(logging.NOTSET)
    model = onnx.load(str(int8_path))
    for source, *weight in int8_matmuls(model):
        if source == INPUT_X and exposes:  # stage 0, which the runtime may run sparse
            for name, output in zip(weight, STAGE0_WEIGHT_INT8):
                _rename(model, name, STAGE0_INITIALIZERS[output])
    ordered = topological(list(model.graph.node))
    del model.graph.node[:]
    model.graph.node.extend(ordered)
    write_metadata(model, dataclasses.replace(meta, precision="int8",
                                              quantization=scheme_description(scheme)))
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(int8_path))


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of ``a`` with the same row of ``b`` (0 for a zero row)."""
    dot = np.einsum("ij,ij->i", a.astype(np.float64), b.astype(np.float64))
    norms = np.linalg.norm(a, axis=1).astype(np.float64) * np.linalg.norm(b, axis=1)
    return np.divide(dot, norms, out=np.zeros_like(dot), where=norms > 0)


def int8_report(fp32_path: Path, int8_path: Path, data: Data, task: str = "node",
                metric: str = "auto", splits: int = 5) -> dict[str, Any]:
    """Size, embedding agreement and the run's own downstream figure of the INT8 model
    against fp32.

    Both models embed ``data`` with the runtime (``EncoderSession``); the report has the file
    sizes and their ratio, the mean and minimum per-node cosine similarity of the INT8
    embeddings to the fp32 ones, the same mean for the portable files run by onnxruntime alone
    (INT8 activations quantised over the whole graph at once), and, where ``task`` can judge
    ``data`` (edgegcl.training.task: ``score_embeddings``), ``downstream``: the run's
    ``metric`` (micro-F1, ROC-AUC for binary labels, AUC for links...) on each, averaged over
    ``splits`` seeded splits (the same splits for both).
    """
    x, edge_index = data.x.numpy(), data.edge_index.numpy()
    z32 = EncoderSession(fp32_path).embed(x, edge_index)
    session8 = EncoderSession(int8_path)
    z8 = session8.embed(x, edge_index)
    cos = row_cosines(z32, z8)
    alone = [portable_session(p).run(None, {"x": x, "edge_index": edge_index})[0]
             for p in (fp32_path, int8_path)]
    size32, size8 = fp32_path.stat().st_size, int8_path.stat().st_size
    report: dict[str, Any] = {
        "graph": getattr(data, "name", "graph"), "nodes": int(x.shape[0]),
        "fp32_bytes": size32, "int8_bytes": size8, "size_ratio": size8 / size32,
        "mean_cosine": float(cos.mean()), "min_cosine": float(cos.min()),
        "max_abs_diff": float(np.abs(z32 - z8).max()),
        "portable_mean_cosine": float(row_cosines(*alone).mean()),
        "quantization": session8.metadata.quantization,
    }
    judge = task_named(task)
    figures: dict[str, list[float]] = {"fp32": [], "int8": []}
    name = None
    for seed in range(splits):
        for precision, z in (("fp32", z32), ("int8", z8)):
            scored = judge.score_embeddings(torch.from_numpy(z), data, metric, seed)
            if scored is None:
                return report
            name = scored[0]
            figures[precision].append(scored[1])
    mean32, mean8 = float(np.mean(figures["fp32"])), float(np.mean(figures["int8"]))
    report["downstream"] = {"metric": name, "fp32": mean32, "int8": mean8,
                            "change": mean8 - mean32, "splits": splits,
                            "protocol": f"test {name} (%) by {judge.scored_by}, seeds "
                                        "0..splits-1"}
    return report
