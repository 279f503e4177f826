"""The encoder equals PyG's GCNConv stack, and layer trimming leaves the seeds' embeddings as they were."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.nn import GCNConv

from edgegcl.nn.augment import as_features
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.nn.model import AdNGCL, GCNEncoder, ModelConfig
from edgegcl.data.sampling import make_loader


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


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("in_dim", [40, 8])  # both product orders of the first layer
def test_feature_keep_equals_masking_the_features_forward_and_backward(sparse, in_dim):
    """View 1's column mask applied to the first layer's weights (training's path) gives the
    embeddings and the weight gradients of the explicitly masked features (Eq. 2)."""
    torch.manual_seed(0)
    x = (torch.rand(200, in_dim) < 0.3).float() * torch.rand(200, in_dim)
    edge_index = torch.randint(0, 200, (2, 900))
    keep = (torch.rand(in_dim) > 0.4).float()
    assert 0 < keep.sum() < in_dim
    enc = GCNEncoder(in_dim, ModelConfig(32, 16, 16, "prelu"))
    grads = []
    for features, mask in ((x * keep, None), (x, keep)):
        enc.zero_grad()
        out = enc(as_features(features) if sparse else features, edge_index, None, mask)
        (out ** 2).sum().backward()
        grads.append((out.detach(), [p.grad.clone() for p in enc.parameters()],
                      enc.conv1.lin.weight.grad.clone()))
    (out_a, grads_a, _), (out_b, grads_b, w_grad) = grads
    torch.testing.assert_close(out_b, out_a)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(b, a)
    assert bool((w_grad[:, keep == 0] == 0).all())  # masked columns learn nothing
    assert bool((w_grad[:, keep == 1] != 0).any())


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


def test_product_order_follows_the_multiply_add_count():
    from edgegcl.nn.adjacency import gcn_adjacency
    from edgegcl.nn.model import aggregate_first

    edge_index = torch.randint(0, 1000, (2, 5000))
    (full,) = gcn_adjacency(edge_index, 1000, [1000])
    assert aggregate_first(full, 1000, 128, 512)  # full graph: narrower input first
    assert not aggregate_first(full, 1000, 512, 256)
    data = synthetic_graph(SyntheticSpec(num_nodes=2000, num_features=8, avg_degree=8, seed=1))
    batch = next(iter(make_loader(data, 20, [5, 5], sampler="builtin", seed=0)))
    hops = batch.num_sampled_nodes
    _, layer_2 = gcn_adjacency(batch.edge_index, batch.num_nodes, [hops[0] + hops[1], hops[0]])
    assert aggregate_first(layer_2, hops[0] + hops[1], 512, 256)  # 20 targets of ~120 inputs


def test_batch_normalisation_folds_into_the_layers_for_chunked_embedding() -> None:
    """--norm batch: training normalises by the batch, inference by the running statistics,
    which embed_nodes and the export read folded into each layer's weights."""
    from edgegcl.nn.config import ModelConfig as Config

    torch.manual_seed(0)
    x = torch.randn(60, 8)
    edges = torch.randint(0, 60, (2, 240))
    for layers in (1, 2, 3):
        enc = GCNEncoder(8, Config(16, 4, 4, "elu", num_layers=layers, norm="batch"))
        assert any(name.startswith("norm") for name in enc.state_dict())
        opt = torch.optim.SGD(enc.parameters(), lr=0.1)
        for _ in range(3):  # running statistics and weights away from their start
            opt.zero_grad()
            enc(x, edges).pow(2).mean().backward()
            opt.step()
        enc.eval()
        with torch.no_grad():
            expected = enc(x, edges)
            chunked = enc.embed_nodes(x, edges, chunk_rows=7)
        assert torch.allclose(chunked, expected, atol=1e-5)
        plain = GCNEncoder(8, Config(16, 4, 4, "elu", num_layers=layers))
        plain.load_state_dict(enc.folded_state_dict())
        with torch.no_grad():
            assert torch.allclose(plain.eval()(x, edges), expected, atol=1e-5)


def test_batch_normalisation_is_the_gcns_and_refused_for_another_encoder(tmp_path) -> None:
    from edgegcl.cli.main import main
    from helpers import capture

    code, _, err = capture(main, ["train", "--nodes", "100", "--epochs", "2", "--encoder", "ego",
                                  "--norm", "batch", "--out", str(tmp_path / "run")])
    assert code == 2 and "--norm" in err.splitlines()[-1] and "ego" in err.splitlines()[-1]
    assert not (tmp_path / "run").exists()
