"""The encoders rebuilt from their weights as modules that export cleanly to ONNX.

The built-in encoders do not export themselves (torch.onnx has no lowering for their
``bincount`` or sparse CSR products). Each is a chain of dense, row-wise stages between
multiplications by A_hat = D^-1/2 (A + I) D^-1/2 (``Stages``): stage j takes A_hat times stage
j - 1's output (stage 0 takes x) and, where the encoder keeps something per node across an
aggregation, the tensor stage j - 1 carried to it unaggregated.
``edgegcl export`` wraps the stages in the portable graph's aggregations
(``edgegcl.onnx.portable``), which the runtime cuts away again to multiply by A_hat as a CSR
matrix (edgegcl_embed.contract).

- ``StageGCN``: the GCN, Z^(l+1) = sigma(A_hat Z^(l) W^(l) + b^(l)) from the
  trained state dict (keys ``convL.lin.weight``, ``convL.bias``, ``actL.*``), each layer's
  product in the cheaper order (A_hat (Z W) or (A_hat Z) W: aggregate at the narrower width).
- ``StageEgo``: the ego encoder (edgegcl.nn.ego); each stage hands the next the
  ego part of its layer, h R, as a carried tensor.
- ``StagePoly``: the polynomial filter (edgegcl.nn.poly); every stage carries
  the running sum gamma_0 P + ... + gamma_j A_hat^j P of the features (or x W_1), the last
  maps it through the node-wise rest.
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


class Stages(nn.Module):
    """The dense stages of an encoder: ``stage(j, h, carried)`` on rows of stage j's input
    (x for stage 0, else A_hat times stage j - 1's output) and of its carried input; it
    returns stage j's output, then its carried output when it has one (``carries``).
    ``forward`` takes every stage's inputs in order (x or a{j}, then s{j} when carried) and
    returns every stage's outputs in order: the form torch.onnx exports."""

    num_layers: int
    in_dim: int
    out_dim: int
    stage0_is_product = False
    """Whether stage 0 is x W1 alone, which a runtime may compute as a sparse product."""

    def stage_ids(self) -> list[int]:
        """The stages the model has, in input order."""
        raise NotImplementedError

    def carries(self, j: int) -> bool:
        """Whether stage j hands a tensor to stage j + 1 unaggregated."""
        return False

    def stage(self, j: int, h: Tensor, carried: Tensor | None = None) -> tuple[Tensor, ...]:
        raise NotImplementedError

    def forward(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        feed = iter(inputs)
        out: list[Tensor] = []
        for j in self.stage_ids():
            h = next(feed)
            carried = next(feed) if j > 0 and self.carries(j - 1) else None
            out.extend(self.stage(j, h, carried))
        return tuple(out)


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


class StageGCN(_Layers, Stages):
    """The GCN's dense stages: forward(*stage inputs) -> stage outputs.

    Stage 0 (only when layer 1 transforms first) maps x to x W1; stage j >= 1 takes A_hat
    times stage j-1's output and finishes layer j (its W when it aggregated first, the bias,
    the activation), then starts layer j+1 (its W when it transforms first). Every stage is
    row-wise, so the runtime may run it on any block of rows.
    """

    stage0_is_product = True

    @property
    def has_stage0(self) -> bool:
        return not self.propagate_first[0]

    def stage(self, j: int, h: Tensor, carried: Tensor | None = None) -> tuple[Tensor, ...]:
        """Stage j on rows ``h``."""
        if j > 0:
            if self.propagate_first[j - 1]:
                h = h @ self.weight(j)
            h = self.acts[j - 1](h + self.bias(j))
        if j < self.num_layers and not self.propagate_first[j]:
            h = h @ self.weight(j + 1)
        return (h,)

    def stage_ids(self) -> list[int]:
        """The stages the model has, in input order."""
        return list(range(0 if self.has_stage0 else 1, self.num_layers + 1))


def _params(state: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    """The entries of ``state`` under ``prefix.``, without it."""
    return {k[len(prefix) + 1:]: v for k, v in state.items() if k.startswith(prefix + ".")}


class _CarryingStages(Stages):
    """Stages 0 .. k, each but the last carrying a tensor to the next."""

    def stage_ids(self) -> list[int]:
        return list(range(self.num_layers + 1))

    def carries(self, j: int) -> bool:
        return j < self.num_layers


class StageEgo(_CarryingStages):
    """The ego encoder's stages (edgegcl.nn.ego): stage 0 maps x to x W_1
    (the neighbour part, aggregated next) and carries x R_1; stage j finishes layer j,
    h = sigma([a + b_j || s]), and starts layer j + 1 the same way; the last returns h."""

    def __init__(self, state: dict[str, Tensor], activation: str) -> None:
        super().__init__()
        self.num_layers = count_layers(state)
        k = self.num_layers
        for i in range(1, k + 1):
            self.register_buffer(f"weight{i}",
                                 state[f"conv{i}.lin.weight"].detach().float().t().contiguous())
            self.register_buffer(f"bias{i}", state[f"conv{i}.bias"].detach().float())
            self.register_buffer(f"root{i}",
                                 state[f"root{i}.weight"].detach().float().t().contiguous())
        self.acts = nn.ModuleList(
            _activation(activation, _params(state, f"act{i}"),
                        state[f"conv{i}.lin.weight"].size(0) + state[f"root{i}.weight"].size(0))
            for i in range(1, k + 1))
        self.in_dim = state["conv1.lin.weight"].size(1)
        self.out_dim = state[f"conv{k}.lin.weight"].size(0) + state[f"root{k}.weight"].size(0)
        self.eval()

    def stage(self, j: int, h: Tensor, carried: Tensor | None = None) -> tuple[Tensor, ...]:
        if j > 0:
            assert carried is not None
            h = self.acts[j - 1](torch.cat([h + getattr(self, f"bias{j}"), carried], dim=1))
        if j == self.num_layers:
            return (h,)
        return h @ getattr(self, f"weight{j + 1}"), h @ getattr(self, f"root{j + 1}")


class StagePoly(_CarryingStages):
    """The polynomial filter's stages (edgegcl.nn.poly), filtering at the
    narrower of the features and W_1's width as the encoder does: stage 0 passes on P_0 (x, or
    x W_1) and carries gamma_0 P_0; stage j passes on its input P_j = A_hat^j P_0 and carries
    the sum so far plus gamma_j P_j; the last adds gamma_K P_K, maps it by W_1 if that is still
    to do and returns the node-wise rest, sigma(sigma(. + b_1) W_2 + b_2)."""

    def __init__(self, state: dict[str, Tensor], activation: str) -> None:
        super().__init__()
        self.register_buffer("gamma", state["gamma"].detach().float())
        self.num_layers = self.gamma.numel() - 1
        if self.num_layers < 1:
            raise ValueError("a polynomial filter of degree 0 has no stages to aggregate")
        for name in ("lin1", "lin2"):
            self.register_buffer(f"{name}_weight",
                                 state[f"{name}.weight"].detach().float().t().contiguous())
        self.register_buffer("bias1", state["bias1"].detach().float())
        self.register_buffer("bias2", state["lin2.bias"].detach().float())
        hidden = state["lin1.weight"].size(0)
        self.act1 = _activation(activation, _params(state, "act1"), hidden)
        self.act2 = _activation(activation, _params(state, "act2"), state["lin2.weight"].size(0))
        self.in_dim = state["lin1.weight"].size(1)
        self.out_dim = state["lin2.weight"].size(0)
        self.mapped_first = self.in_dim >= hidden  # aggregate at the narrower width
        self.eval()

    def stage(self, j: int, h: Tensor, carried: Tensor | None = None) -> tuple[Tensor, ...]:
        if j == 0:
            if self.mapped_first:
                h = h @ self.lin1_weight
            return h, h * self.gamma[0]
        assert carried is not None
        total = carried + h * self.gamma[j]
        if j < self.num_layers:
            return h, total
        if not self.mapped_first:
            total = total @ self.lin1_weight
        return (self.act2(self.act1(total + self.bias1) @ self.lin2_weight + self.bias2),)


STAGES: dict[str, type[Stages]] = {"gcn": StageGCN, "ego": StageEgo, "poly": StagePoly}
"""Each built-in encoder's stage module, by its name (edgegcl.nn.family.ENCODERS)."""
