"""Dynamic INT8 quantisation of an exported encoder, and what it costs in quality.

onnxruntime's ``quantize_dynamic`` stores the MatMul weights as int8 (QInt8, per tensor) and
quantises activations on the fly (per run, so per row block of the runtime, whose blocks do not
depend on the thread count), so no calibration data is needed. The aggregation, which the
runtime does outside the model, stays in float32: only the dense layers change. The runtime's
sparse first layer multiplies x (not quantised) by the int8 W1 the file exposes, dequantised.
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

from edgegcl.evaluation.probe import linear_probe, random_split
from edgegcl.onnx.export import expose_initializer, write_metadata
from edgegcl_embed.contract import INPUT_X, STAGE0_WEIGHT, STAGE0_WEIGHT_INT8, ModelMetadata
from edgegcl_embed.runtime import EncoderSession


def _drop_stage0_weight(model: onnx.ModelProto) -> bool:
    """Remove the output ``w1`` and the node writing it; whether the model had them.

    Left in, the fp32 W1 it reads would stay in the INT8 file beside its int8 copy.
    """
    if not any(o.name == STAGE0_WEIGHT for o in model.graph.output):
        return False
    outputs = [o for o in model.graph.output if o.name != STAGE0_WEIGHT]
    nodes = [n for n in model.graph.node if STAGE0_WEIGHT not in n.output]
    del model.graph.output[:], model.graph.node[:]
    model.graph.output.extend(outputs)
    model.graph.node.extend(nodes)
    return True


def _stage0_int8_weight(model: onnx.ModelProto) -> tuple[str, str, str]:
    """The int8 weight, scale and zero point that stage 0 multiplies the quantised x by.

    Found through the graph quantize_dynamic writes, not its tensor names: x ->
    DynamicQuantizeLinear (x_q, x_scale, x_zero_point) -> MatMulInteger(x_q, W_q, x_zp, W_zp),
    and the Mul of x_scale with W's scale.
    """
    nodes = model.graph.node
    quant = next((n for n in nodes if n.op_type == "DynamicQuantizeLinear"
                  and n.input[0] == INPUT_X), None)
    matmul = quant and next((n for n in nodes if n.op_type == "MatMulInteger"
                             and n.input[0] == quant.output[0]), None)
    scale = quant and next((n for n in nodes if n.op_type == "Mul"
                            and quant.output[1] in n.input), None)
    if not (matmul and scale and len(matmul.input) == 4):
        raise RuntimeError("quantize_dynamic wrote stage 0 in an unexpected form (no "
                           "DynamicQuantizeLinear -> MatMulInteger of x): cannot expose W1")
    w_scale = next(i for i in scale.input if i != quant.output[1])
    return matmul.input[1], w_scale, matmul.input[3]


def quantize_int8(fp32_path: Path, int8_path: Path) -> None:
    """Write the INT8 version of the fp32 model at ``fp32_path`` to ``int8_path``.

    A model that exposes W1 (interface 3) exposes the int8 W1 its stage 0 multiplies by, with
    its scale and zero point, so the runtime's sparse first layer agrees with it.
    """
    model = onnx.load(str(fp32_path))
    props = {p.key: p.value for p in model.metadata_props}
    exposes = _drop_stage0_weight(model)
    logging.disable(logging.WARNING)  # quantize_dynamic's "consider pre-processing" notice
    try:
        quantize_dynamic(model, int8_path, weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul"])
    finally:
        logging.disable(logging.NOTSET)
    model = onnx.load(str(int8_path))
    if exposes:
        for name, output in zip(_stage0_int8_weight(model), STAGE0_WEIGHT_INT8):
            expose_initializer(model, name, output)
    write_metadata(model, dataclasses.replace(ModelMetadata.from_props(props), precision="int8"))
    onnx.checker.check_model(model)
    onnx.save(model, str(int8_path))


def _row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of ``a`` with the same row of ``b`` (0 for a zero row)."""
    dot = np.einsum("ij,ij->i", a.astype(np.float64), b.astype(np.float64))
    norms = np.linalg.norm(a, axis=1).astype(np.float64) * np.linalg.norm(b, axis=1)
    return np.divide(dot, norms, out=np.zeros_like(dot), where=norms > 0)


def int8_report(fp32_path: Path, int8_path: Path, data: Data, splits: int = 5) -> dict[str, Any]:
    """Size, embedding agreement and downstream micro-F1 of the INT8 model against fp32.

    Both models embed ``data``; the report has the file sizes and their ratio, the mean and
    minimum per-node cosine similarity of the INT8 embeddings to the fp32 ones, and, when
    ``data`` has labels, the test micro-F1 of the linear probe (edgegcl.evaluation.probe) on each,
    averaged over ``splits`` random 10/10/80 splits (the same splits for both).
    """
    x, edge_index = data.x.numpy(), data.edge_index.numpy()
    z32 = EncoderSession(fp32_path).embed(x, edge_index)
    z8 = EncoderSession(int8_path).embed(x, edge_index)
    cos = _row_cosines(z32, z8)
    size32, size8 = fp32_path.stat().st_size, int8_path.stat().st_size
    report: dict[str, Any] = {
        "graph": getattr(data, "name", "graph"), "nodes": int(x.shape[0]),
        "fp32_bytes": size32, "int8_bytes": size8, "size_ratio": size8 / size32,
        "mean_cosine": float(cos.mean()), "min_cosine": float(cos.min()),
        "max_abs_diff": float(np.abs(z32 - z8).max()),
    }
    if data.y is not None:
        f1 = {"fp32": [], "int8": []}
        for seed in range(splits):
            split = random_split(x.shape[0], seed)
            for name, z in (("fp32", z32), ("int8", z8)):
                scores = linear_probe(torch.from_numpy(z), data.y, split, seed=seed)
                f1[name].append(scores.test_micro)
        mean32, mean8 = float(np.mean(f1["fp32"])), float(np.mean(f1["int8"]))
        report["micro_f1"] = {"fp32": mean32, "int8": mean8, "change": mean8 - mean32,
                              "splits": splits,
                              "protocol": "linear probe test micro-F1 (%), random 10/10/80 "
                                          "splits, seeds 0..splits-1"}
    return report
