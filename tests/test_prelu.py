"""edgegcl.nn.prelu.PReLU: torch's PReLU with a faster CPU backward, the same gradients."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from edgegcl.nn.prelu import PReLU


@pytest.mark.parametrize("shape, channels", [((37, 11), 11), ((37, 11), 1), ((5, 4, 6), 4),
                                             ((9,), 1)])
def test_forward_and_gradients_equal_torch(shape: tuple[int, ...], channels: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(*shape)
    x.view(-1)[:4] = torch.tensor([0.0, -0.0, 1e-45, -1e-45])  # zeros and denormals: x > 0?
    ours, ref = PReLU(channels), nn.PReLU(channels)
    with torch.no_grad():
        ours.weight.uniform_(-0.3, 1.7)  # slopes whose 1 - a is inexact: slope must be 1 or a
        ref.weight.copy_(ours.weight)
    g = torch.randn(*shape)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = ours(xa), ref(xb)
    assert torch.equal(ya, yb)
    ya.backward(g)
    yb.backward(g)
    assert torch.equal(xa.grad, xb.grad)  # one product per element, as torch's
    # dL/da sums g min(0, x) over every dim but the channel one: against that sum in float64,
    # within float32 summation's bound (terms summed times eps times their absolute sum)
    terms = (g.double() * x.double().clamp(max=0)).reshape(-1, channels) if x.dim() < 3 else \
        (g.double() * x.double().clamp(max=0)).transpose(1, -1).reshape(-1, channels)
    exact, bound = terms.sum(0), terms.abs().sum(0) * terms.size(0) * torch.finfo(torch.float32).eps
    assert ((ours.weight.grad.double() - exact).abs() <= bound).all()
    assert ((ref.weight.grad.double() - exact).abs() <= bound).all()


def test_it_is_the_encoders_prelu_and_keeps_torchs_forward() -> None:
    from edgegcl.nn.config import ModelConfig
    from edgegcl.nn.model import GCNEncoder

    enc = GCNEncoder(8, ModelConfig(16, 4, 4, "prelu"))
    assert isinstance(enc.act1, PReLU) and list(enc.act1.state_dict()) == ["weight"]
    x = torch.randn(3, 4, requires_grad=True)
    assert type(enc.act2(x).grad_fn).__name__ == "_PReLUBackward"  # training, on CPU
    with torch.no_grad():
        assert enc.act2(x).grad_fn is None
    tiny = torch.tensor([[1e-300, -1e-300, 2.0, -3.0]], dtype=torch.float64, requires_grad=True)
    act = PReLU(4).double()
    act(tiny).sum().backward()  # float64: torch's own (2^149 does not reach its denormals)
    assert tiny.grad.tolist() == [[1.0, 0.25, 1.0, 0.25]]
