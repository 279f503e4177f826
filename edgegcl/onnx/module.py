"""The encoder rebuilt from its weights as a module that exports cleanly to ONNX.

``GCNEncoder`` itself does not export (torch.onnx has no lowering for its ``bincount`` or
sparse CSR products), and the generic lowerings are traps: torch.onnx turns ``index_add``
into a ScatterElements without reduction, which keeps one message per target instead of
their sum (``index_put(accumulate=True)`` likewise), and ``scatter_add`` needs an [E, d]
index tensor. ``OnnxGCN`` computes the same
Z^(l+1) = sigma(D^-1/2 (A + I) D^-1/2 Z^(l) W^(l) + b^(l)) from the trained state dict
(keys ``convL.lin.weight``, ``convL.bias``, ``actL.*``), with the degrees as an input
(export.contract) and one ``ScatterND(reduction="add")`` per layer for the aggregation.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from edgegcl.nn.model import make_activation


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


class _SlopeMax(nn.Module):
    """PReLU with every slope a <= 1, as max(z, a z): equal, and onnxruntime's Mul + Max take
    about a third of the time of its PRelu kernel (docs/performance.md, "Numbers behind
    constants")."""

    def __init__(self, slope: Tensor) -> None:
        super().__init__()
        self.register_buffer("slope", slope)

    def forward(self, z: Tensor) -> Tensor:
        return torch.maximum(z, z * self.slope)


def _activation(name: str, params: dict[str, Tensor], channels: int) -> nn.Module:
    """The trained activation ``name`` with its parameters, in its fastest exact ONNX form."""
    act = make_activation(name, channels)
    act.load_state_dict(params)
    if isinstance(act, nn.PReLU) and bool((act.weight <= 1).all()):
        return _SlopeMax(act.weight.detach().float())
    return act


def count_layers(state: dict[str, Tensor]) -> int:
    """The number of GCN layers in an encoder state dict (``conv1``, ``conv2``, ...)."""
    k = 0
    while f"conv{k + 1}.lin.weight" in state:
        k += 1
    if k == 0:
        raise ValueError("state dict has no conv1.lin.weight: not a GCNEncoder state dict")
    return k


class OnnxGCN(nn.Module):
    """GCN encoder forward(x, edge_index, deg) -> embeddings, for export (eval-mode semantics).

    Each layer propagates at the narrower of its two widths: A_hat (X W) = (A_hat X) W, so when
    a layer widens (128 -> 512 features, say) aggregating first moves 4x fewer numbers.
    """

    def __init__(self, state: dict[str, Tensor], activation: str) -> None:
        super().__init__()
        self.num_layers = count_layers(state)
        weights = [state[f"conv{i}.lin.weight"].detach().float()
                   for i in range(1, self.num_layers + 1)]
        for i, w in enumerate(weights, start=1):
            self.register_buffer(f"weight{i}", w.t().contiguous())  # [in, out] for x @ W
            self.register_buffer(f"bias{i}", state[f"conv{i}.bias"].detach().float())
        self.acts = nn.ModuleList(
            _activation(activation, {k.split(".", 1)[1]: v for k, v in state.items()
                                     if k.startswith(f"act{i}.")}, w.size(0))
            for i, w in enumerate(weights, start=1))
        self.in_dim, self.out_dim = weights[0].size(1), weights[-1].size(0)
        self.propagate_first = [w.size(1) < w.size(0) for w in weights]  # widening layers
        self.eval()

    def forward(self, x: Tensor, edge_index: Tensor, deg: Tensor) -> Tensor:
        src, dst = edge_index[0], edge_index[1]
        # An input self-loop adds into a scratch row n that is dropped: GCN replaces such loops
        # with exactly one loop per node (the h_i term of ``propagate``), as PyG's gcn_norm does.
        dst = torch.where(src == dst, torch.full_like(dst, x.size(0)), dst)
        scale = deg.pow(-0.5).unsqueeze(1)

        def propagate(h: Tensor) -> Tensor:
            # A_hat h = D^-1/2 (h' + sum over in-edges of h'_src), h' = D^-1/2 h: the degree
            # scaling costs two [N, d] products instead of one per edge.
            h = h * scale
            padded = torch.cat([h, h.new_zeros(1, h.size(1))])
            return _ScatterAddRows.apply(padded, dst, h.index_select(0, src))[:-1] * scale

        z = x
        for i, (act, first) in enumerate(zip(self.acts, self.propagate_first), start=1):
            w, b = getattr(self, f"weight{i}"), getattr(self, f"bias{i}")
            z = propagate(z) @ w if first else propagate(z @ w)
            z = act(z + b)
        return z
