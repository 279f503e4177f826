"""Dynamic INT8 quantisation of an exported encoder, and what it costs in quality.

onnxruntime's ``quantize_dynamic`` stores the MatMul weights as int8 (QInt8, per tensor) and
quantises activations on the fly (per run, so per row block of the runtime, whose blocks do not
depend on the thread count), so no calibration data is needed. The aggregation, which the
runtime does outside the model, stays in float32: only the dense layers change.
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
from edgegcl.onnx.export import write_metadata
from edgegcl_embed.contract import ModelMetadata
from edgegcl_embed.runtime import EncoderSession


def quantize_int8(fp32_path: Path, int8_path: Path) -> None:
    """Write the INT8 version of the fp32 model at ``fp32_path`` to ``int8_path``."""
    logging.disable(logging.WARNING)  # quantize_dynamic's "consider pre-processing" notice
    try:
        quantize_dynamic(fp32_path, int8_path, weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul"])
    finally:
        logging.disable(logging.NOTSET)
    props = {p.key: p.value for p in onnx.load(str(fp32_path)).metadata_props}
    model = onnx.load(str(int8_path))
    write_metadata(model, dataclasses.replace(ModelMetadata.from_props(props), precision="int8"))
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
