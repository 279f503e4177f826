"""The encoder equals PyG's GCNConv stack, and layer trimming leaves the seeds' embeddings as they were."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.nn import GCNConv

from edgegcl.augment import as_features
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.model import AdNGCL, GCNEncoder, ModelConfig
from edgegcl.sampling import make_loader


def _pyg_reference(enc: GCNEncoder, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    """The same weights run through PyG's GCNConv (self-loops, symmetric normalisation)."""
    convs = []
    for layer in (enc.conv1, enc.conv2):
        conv = GCNConv(layer.lin.in_features, layer.lin.out_features)
        conv.lin.weight.data.copy_(layer.lin.weight)
        conv.bias.data.copy_(layer.bias)
        convs.append(conv)
    return enc.act2(convs[1](enc.act1(convs[0](x, edge_index)), edge_index))


@pytest.mark.parametrize("activation", ["prelu", "relu", "elu"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("in_dim", [40, 8])  # wider / narrower than hidden: both product orders
def test_encoder_equals_pyg_gcnconv(activation, sparse, in_dim):
    torch.manual_seed(0)
    x = (torch.rand(300, in_dim) < 0.3).float() * torch.rand(300, in_dim)
    edge_index = torch.randint(0, 300, (2, 1500))  # directed, with duplicates and self-loops
    assert bool((edge_index[0] == edge_index[1]).any())
    enc = GCNEncoder(in_dim, ModelConfig(32, 16, 16, activation)).eval()
    expected = _pyg_reference(enc, x, edge_index)
    got = enc(as_features(x) if sparse else x, edge_index)
    assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("fanout", [[3, 2], [4, 4, 4], [5]])
def test_trimmed_forward_equals_untrimmed_on_the_seeds(fanout):
    data = synthetic_graph(SyntheticSpec(num_nodes=400, num_features=12, avg_degree=8, seed=3))
    enc = GCNEncoder(12, ModelConfig(32, 16, 16, "prelu"))
    batch = next(iter(make_loader(data, 25, fanout, sampler="builtin", seed=0)))
    hops = batch.num_sampled_nodes
    assert len(hops) == len(fanout) + 1 and hops[0] == 25
    trimmed = enc(batch.x, batch.edge_index, hops)
    full = enc(batch.x, batch.edge_index)
    assert trimmed.shape == (25, 16)
    assert torch.allclose(trimmed, full[:25], atol=1e-6)
    trimmed.sum().backward()  # gradients flow through the trimmed CSR products
    assert enc.conv1.lin.weight.grad is not None and enc.conv1.lin.weight.grad.abs().sum() > 0


def test_embed_runs_in_eval_mode_and_restores_the_callers_mode():
    torch.manual_seed(0)
    model = AdNGCL(6, ModelConfig(8, 4, 4, "rrelu"))  # RReLU is random in train mode only
    x, edge_index = torch.randn(20, 6), torch.randint(0, 20, (2, 60))
    model.train()
    a, b = model.embed(x, edge_index), model.embed(x, edge_index)
    assert torch.equal(a, b) and not a.requires_grad
    assert model.training
