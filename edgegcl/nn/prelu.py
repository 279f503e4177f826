"""PReLU whose CPU backward is a few streaming passes (the encoder's default sigma, Eq. 4).

torch's fused ``_prelu_kernel_backward`` runs far below the speed of a plain element-wise
pass on the CPUs measured, and comparisons that write bool tensors are slow there too; the
same gradients as a handful of float passes and a column sum take about half its time on
Cora's layers (docs/performance.md, "The encoder's PReLU"). The forward is torch's own, so
outputs, parameter names and ONNX export are unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import FunctionCtx

__all__ = ["PReLU"]

_UP = 2.0 ** 127, 2.0 ** 22
"""Two factors taking the smallest positive float32 (2^-149) to 1: x * 2^127 * 2^22, clamped
to [0, 1], is 1 exactly where x > 0 and 0 elsewhere, without a comparison."""


class _PReLU(torch.autograd.Function):
    """PReLU(x) = max(0, x) + a min(0, x): dL/dx = g where x > 0, a g elsewhere (as torch);
    dL/da = sum over rows of g min(0, x)."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, weight: Tensor) -> Tensor:
        ctx.save_for_backward(x, weight)
        return F.prelu(x, weight)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        x, weight = ctx.saved_tensors
        w = weight.reshape(-1, *[1] * (x.dim() - 2)) if x.dim() > 1 else weight
        positive = x.mul(_UP[0]).mul_(_UP[1]).clamp_(0, 1)
        slope = torch.lerp(w.expand_as(x), x.new_ones(()), positive)  # exactly 1 or a
        grad_x = slope.mul_(grad) if ctx.needs_input_grad[0] else None
        grad_w = None
        if ctx.needs_input_grad[1]:
            terms = torch.mul(grad, x.clamp(max=0))
            if weight.numel() == 1:
                grad_w = terms.sum().reshape(weight.shape)
            else:  # one slope per channel: dim 1 (dim 0 of a vector)
                grad_w = terms.sum([d for d in range(x.dim()) if d != 1]) if x.dim() > 1 \
                    else terms
        return grad_x, grad_w


class PReLU(nn.PReLU):
    """``torch.nn.PReLU`` (same parameter, same forward) with ``_PReLU``'s backward for float32
    on CPU while training (``_UP`` is float32's); elsewhere (other dtypes, CUDA, no gradient,
    tracing or export) torch's own."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002 (torch's argument name)
        if (input.dim() == 0 or input.device.type != "cpu" or input.dtype != torch.float32
                or not torch.is_grad_enabled()
                or not (input.requires_grad or self.weight.requires_grad)
                or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()
                or torch.compiler.is_compiling()):
            return super().forward(input)
        return _PReLU.apply(input, self.weight)
