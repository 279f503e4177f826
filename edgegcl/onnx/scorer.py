"""The link scorer of an edge-objective link run as its own ONNX model.

A run of ``--task link`` that learns from the edges trains a link decoder beside the encoder
(edgegcl.nn.decoder.LinkDecoder) and chooses it on validation like a checkpoint. On a device
the encoder's ONNX model gives the embeddings; this second small model scores pairs from them,
inputs ``z_u`` and ``z_v`` float32 [pairs, out_dim], output ``logits`` float32 [pairs]
(edgegcl_embed.contract), so that any ONNX runtime scores pairs as the run did.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch
from torch import Tensor

from edgegcl.errors import ExportCheckError, first_line
from edgegcl.nn.decoder import LinkDecoder
from edgegcl.onnx.opset import DEFAULT_OPSET
from edgegcl_embed.contract import SCORER_INPUTS, SCORER_OUTPUT

__all__ = ["export_scorer"]

SCORER_TOLERANCE = 1e-4
"""Largest |onnxruntime - torch| of a logit accepted."""


def export_scorer(decoder: LinkDecoder, path: Path, z: Tensor, pairs: int = 4096,
                  opset: int = DEFAULT_OPSET, seed: int = 0) -> float:
    """Write ``decoder`` (eval mode) to ``path`` as an ONNX model of (z_u, z_v) -> logits
    with a dynamic number of pairs, then check onnxruntime against torch on ``pairs`` random
    pairs of the embeddings ``z`` [N, out_dim]; the largest difference. A disagreement beyond
    SCORER_TOLERANCE is an ExportCheckError, and nothing is written.

    Example:
        >>> export_scorer(load_checkpoint(Path("runs/mine/checkpoint.pt")).decoder,
        ...               Path("scorer.onnx"), z)  # doctest: +SKIP
    """
    decoder = decoder.eval()
    generator = torch.Generator().manual_seed(seed)
    u, v = torch.randint(0, z.size(0), (2, pairs), generator=generator)
    z_u, z_v = z[u].float().contiguous(), z[v].float().contiguous()
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(decoder, (z_u, z_v), buffer, dynamo=False, opset_version=opset,
                          input_names=list(SCORER_INPUTS), output_names=[SCORER_OUTPUT],
                          dynamic_axes={**{name: {0: "pairs"} for name in SCORER_INPUTS},
                                        SCORER_OUTPUT: {0: "pairs"}})
    model = onnx.load_from_string(buffer.getvalue())
    model.doc_string = ("edgegcl link scorer: (z_u, z_v) -> logits, the link decoder of an "
                        "edge-objective link run on two nodes' embeddings")
    onnx.checker.check_model(model, full_check=True)
    try:
        session = onnxruntime.InferenceSession(model.SerializeToString(),
                                               providers=["CPUExecutionProvider"])
        got = session.run([SCORER_OUTPUT], {SCORER_INPUTS[0]: z_u.numpy(),
                                            SCORER_INPUTS[1]: z_v.numpy()})[0]
    except Exception as exc:  # onnxruntime raises its own types
        raise ExportCheckError(f"onnxruntime cannot run the exported link scorer "
                               f"({type(exc).__name__}: {first_line(exc)[:200]})") from None
    with torch.no_grad():
        expected = decoder(z_u, z_v).numpy()
    diff = float(np.abs(expected - got).max()) if pairs else 0.0
    if not diff <= SCORER_TOLERANCE:
        raise ExportCheckError(f"onnxruntime and torch disagree on the link scorer: max abs "
                               f"difference {diff:.3g} > {SCORER_TOLERANCE:g}")
    onnx.save(model, str(path))
    return diff
