"""The layouts of older edgegcl model files (interfaces 1 to 3), written again so that tests
can check the runtime still reads them and benchmarks can measure them beside the portable
model (interface 4, what ``edgegcl export`` writes).

- interface 3: the dense stages (``StageGCN``) with W1 as the output ``w1`` when layer 1
  transforms first (edgegcl_embed.contract);
- interface 2: the same stages without ``w1``;
- interface 1, the first files: ``ScatterGCN``, the whole encoder, aggregating with one
  ``ScatterND(reduction="add")`` per layer over [E, d] messages. The generic lowerings are
  traps: torch.onnx turns ``index_add`` into a ScatterElements without reduction, which keeps
  one message per target instead of their sum, and ``scatter_add`` needs an [E, d] index
  tensor.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from edgegcl.onnx.export import DEFAULT_OPSET, write_model
from edgegcl.nn.model import GCNEncoder
from edgegcl.onnx.module import _Layers
from edgegcl.training.checkpoint import Checkpoint
from edgegcl_embed.contract import INPUT_DEG, INPUT_EDGE_INDEX, INPUT_X, OUTPUT, ModelMetadata

INTERFACE1_MIN_OPSET = 16
"""Interface 1's ScatterND(reduction="add") needs opset 16."""


class _ScatterAddRows(torch.autograd.Function):
    """``base`` with ``rows[e]`` added to row ``index[e]`` for every e; duplicates accumulate.

    Eager: ``index_add``. ONNX: ScatterND(base, index[:, None], rows, reduction="add") (opset
    16+), whose indices are [E, 1], not the [E, d] that ScatterElements would need.
    """

    @staticmethod
    def forward(ctx, base: Tensor, index: Tensor, rows: Tensor) -> Tensor:  # type: ignore[override]
        return base.index_add(0, index, rows)

    @staticmethod
    def symbolic(g, base, index, rows):  # type: ignore[no-untyped-def]
        column = g.op("Unsqueeze", index, g.op("Constant", value_t=torch.tensor([1])))
        return g.op("ScatterND", base, column, rows, reduction_s="add")


class ScatterGCN(_Layers):
    """The whole encoder forward(x, edge_index, deg) -> embeddings (interface 1, ScatterND)."""

    def forward(self, x: Tensor, edge_index: Tensor, deg: Tensor) -> Tensor:
        src, dst = edge_index[0], edge_index[1]
        # An input self-loop adds into a scratch row n that is dropped: GCN replaces such loops
        # with exactly one loop per node (the h_i term of ``propagate``), as PyG's gcn_norm does.
        dst = torch.where(src == dst, torch.full_like(dst, x.size(0)), dst)
        scale = deg.pow(-0.5).unsqueeze(1)

        def propagate(h: Tensor) -> Tensor:
            # A_hat h = D^-1/2 (h' + sum over in-edges of h'_src), h' = D^-1/2 h
            h = h * scale
            padded = torch.cat([h, h.new_zeros(1, h.size(1))])
            return _ScatterAddRows.apply(padded, dst, h.index_select(0, src))[:-1] * scale

        z = x
        for i, (act, first) in enumerate(zip(self.acts, self.propagate_first), start=1):
            w, b = self.weight(i), self.bias(i)
            z = propagate(z) @ w if first else propagate(z @ w)
            z = act(z + b)
        return z


def _interface1(ckpt: Checkpoint) -> tuple[ScatterGCN, tuple[Tensor, ...], dict]:
    module = ScatterGCN(ckpt.encoder.state_dict(), ckpt.config.model.activation)
    example = (torch.zeros(3, module.in_dim), torch.tensor([[0, 1], [1, 2]]), torch.ones(3))
    names = {"input_names": [INPUT_X, INPUT_EDGE_INDEX, INPUT_DEG], "output_names": [OUTPUT],
             "dynamic_axes": {INPUT_X: {0: "num_nodes"}, INPUT_EDGE_INDEX: {1: "num_edges"},
                              INPUT_DEG: {0: "num_nodes"}, OUTPUT: {0: "num_nodes"}}}
    return module, example, names


def export_legacy(ckpt: Checkpoint, path: Path, interface: int,
                  opset: int = DEFAULT_OPSET) -> ModelMetadata:
    """Write ``ckpt``'s encoder to ``path`` in the layout of interface 1, 2 or 3 (fp32);
    returns the metadata stored in the file.

    Example:
        >>> export_legacy(ckpt, Path("old.onnx"), interface=1)  # doctest: +SKIP
    """
    if interface not in (1, 2, 3):
        raise ValueError(f"interface must be 1, 2 or 3, got {interface}")
    if not isinstance(ckpt.encoder, GCNEncoder):
        raise ValueError("the older layouts (interfaces 1-3) hold the GCN only; export other "
                         "encoders as the portable model (export_encoder)")
    if interface == 1 and opset < INTERFACE1_MIN_OPSET:
        raise ValueError(f"interface 1 needs opset >= {INTERFACE1_MIN_OPSET}, got {opset}")
    return write_model(ckpt, path, opset, interface, _interface1(ckpt) if interface == 1 else None)
