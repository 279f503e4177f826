"""The encoder rebuilt from its weights as modules that export cleanly to ONNX.

``GCNEncoder`` itself does not export (torch.onnx has no lowering for its ``bincount`` or
sparse CSR products). ``StageGCN`` here and ``edgegcl.onnx.legacy.ScatterGCN`` compute the same
Z^(l+1) = sigma(D^-1/2 (A + I) D^-1/2 Z^(l) W^(l) + b^(l)) from the trained state dict
(keys ``convL.lin.weight``, ``convL.bias``, ``actL.*``), each layer's product in the cheaper
order (A_hat (Z W) or (A_hat Z) W: aggregate at the narrower width):

- ``StageGCN`` (interfaces 2 to 4): only the dense, row-wise stages between aggregations.
  ``edgegcl export`` wraps them in the portable graph's aggregation (interface 4,
  ``edgegcl.onnx.portable``), which the runtime cuts away again to multiply by A_hat as a CSR
  matrix (export.contract); interface 3's W1 outputs are added to the exported graph afterwards
  (``edgegcl.onnx.export.expose_initializer``).
- ``ScatterGCN`` (interface 1, the first files): in ``edgegcl.onnx.legacy``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from edgegcl.nn.model import make_activation


class _SlopeMax(nn.Module):
    """PReLU with every slope a <= 1, as max(z, a z): equal, and onnxruntime's Mul + Max take
    about a third of the time of its PRelu kernel (docs/performance.md, "Numbers behind
    constants")."""

    def __init__(self, slope: Tensor) -> None:
        super().__init__()
        self.register_buffer("slope", slope)

    def forward(self, z: Tensor) -> Tensor:
        return torch.maximum(z, z * self.slope)


class _ExpElu(nn.Module):
    """ELU (alpha 1) as max(z, exp(min(z, 0)) - 1): equal up to float rounding near 0, and
    onnxruntime's Exp kernel gives the same bits whatever the number of threads, where its Elu
    kernel computes some elements in vector packets and others one by one, split where the
    thread count cuts the tensor (1-ulp differences between thread counts, measured)."""

    def forward(self, z: Tensor) -> Tensor:
        return torch.maximum(z, torch.exp(torch.clamp(z, max=0.0)) - 1.0)


def _activation(name: str, params: dict[str, Tensor], channels: int) -> nn.Module:
    """The trained activation ``name`` with its parameters, in its fastest ONNX form whose
    result does not depend on onnxruntime's thread count."""
    act = make_activation(name, channels)
    act.load_state_dict(params)
    if isinstance(act, nn.PReLU) and bool((act.weight <= 1).all()):
        return _SlopeMax(act.weight.detach().float())
    if isinstance(act, nn.ELU) and act.alpha == 1.0:
        return _ExpElu()
    return act


def count_layers(state: dict[str, Tensor]) -> int:
    """The number of GCN layers in an encoder state dict (``conv1``, ``conv2``, ...)."""
    k = 0
    while f"conv{k + 1}.lin.weight" in state:
        k += 1
    if k == 0:
        raise ValueError("state dict has no conv1.lin.weight: not a GCNEncoder state dict")
    return k


class _Layers(nn.Module):
    """The trained weights, biases and activations of every layer, and each layer's order."""

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
        # aggregate first where the layer widens: A_hat (X W) = (A_hat X) W moves fewer numbers
        self.propagate_first = [w.size(1) < w.size(0) for w in weights]
        self.eval()

    def weight(self, i: int) -> Tensor:
        return getattr(self, f"weight{i}")

    def bias(self, i: int) -> Tensor:
        return getattr(self, f"bias{i}")


class StageGCN(_Layers):
    """The encoder's dense stages (interfaces 2, 3): forward(*stage inputs) -> stage outputs.

    Stage 0 (only when layer 1 transforms first) maps x to x W1; stage j >= 1 takes A_hat
    times stage j-1's output and finishes layer j (its W when it aggregated first, the bias,
    the activation), then starts layer j+1 (its W when it transforms first). Every stage is
    row-wise, so the runtime may run it on any block of rows.
    """

    @property
    def has_stage0(self) -> bool:
        return not self.propagate_first[0]

    def stage(self, j: int, h: Tensor) -> Tensor:
        """Stage j on rows ``h``."""
        if j > 0:
            if self.propagate_first[j - 1]:
                h = h @ self.weight(j)
            h = self.acts[j - 1](h + self.bias(j))
        if j < self.num_layers and not self.propagate_first[j]:
            h = h @ self.weight(j + 1)
        return h

    def stage_ids(self) -> list[int]:
        """The stages the model has, in input order."""
        return list(range(0 if self.has_stage0 else 1, self.num_layers + 1))

    def forward(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        return tuple(self.stage(j, h) for j, h in zip(self.stage_ids(), inputs))
