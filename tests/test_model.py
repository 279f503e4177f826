"""The encoder's layer-wise inference equals its message-passing forward."""

from __future__ import annotations

import pytest
import torch

from edgegcl.augment import as_features
from edgegcl.model import GCNEncoder, ModelConfig, embed_layerwise


@pytest.mark.parametrize("activation", ["prelu", "relu", "elu"])
@pytest.mark.parametrize("sparse", [False, True])
def test_layerwise_embeddings_equal_the_forward_pass(activation, sparse):
    torch.manual_seed(0)
    x = (torch.rand(300, 40) < 0.05).float() * torch.rand(300, 40)
    edge_index = torch.randint(0, 300, (2, 1500))  # directed, with duplicates and self-loops
    enc = GCNEncoder(40, ModelConfig(32, 16, 16, activation))
    enc.eval()
    expected = enc(x, edge_index)
    got = embed_layerwise(enc, as_features(x) if sparse else x, edge_index)
    assert torch.allclose(got, expected, atol=1e-5)
    enc.train()
    embed_layerwise(enc, x, edge_index)
    assert enc.training  # the caller's mode is restored
