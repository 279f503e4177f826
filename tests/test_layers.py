"""The GCN with ``num_layers`` layers: training, trimming, all-node embeddings, export,
the torch-free runtime and INT8."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import capture

from edgegcl.cli.main import main
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.data.sampling import make_loader
from edgegcl.nn.model import GCNEncoder, ModelConfig
from edgegcl.training.config import TrainConfig
from edgegcl_embed.runtime import EncoderSession


@pytest.mark.parametrize("layers", [1, 3, 4])
def test_layers_and_their_widths(layers: int) -> None:
    enc = GCNEncoder(6, ModelConfig(12, 5, 5, "prelu", num_layers=layers))
    widths = [enc.layer(i)[0].lin.weight.shape for i in range(1, layers + 1)]
    assert widths == [(12 if i < layers else 5, 6 if i == 1 else 12)
                      for i in range(1, layers + 1)]
    assert not hasattr(enc, f"conv{layers + 1}")


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_all_node_embeddings_equal_the_forward(layers: int) -> None:
    torch.manual_seed(0)
    data = synthetic_graph(SyntheticSpec(num_nodes=150, num_features=10, avg_degree=6, seed=1))
    enc = GCNEncoder(10, ModelConfig(16, 8, 8, "prelu", num_layers=layers)).eval()
    with torch.no_grad():
        full = enc(data.x, data.edge_index)
    chunked = enc.embed_nodes(data.x, data.edge_index, chunk_rows=37, edge_block=50)
    # float32 sums of a few dozen terms in another order: well inside 1e-5
    torch.testing.assert_close(chunked, full, rtol=1e-5, atol=1e-5)


def test_three_layers_trim_to_the_seeds_exactly() -> None:
    data = synthetic_graph(SyntheticSpec(num_nodes=300, num_features=8, avg_degree=5, seed=2))
    enc = GCNEncoder(8, ModelConfig(16, 8, 8, "prelu", num_layers=3))
    batch = next(iter(make_loader(data, 20, [-1, -1, -1], sampler="builtin", seed=0)))
    trimmed = enc(batch.x, batch.edge_index, batch.num_sampled_nodes)
    full = enc(batch.x, batch.edge_index)
    assert torch.allclose(trimmed, full[:20], atol=1e-6)


def test_the_default_two_layers_leave_configurations_as_they_were() -> None:
    assert "num_layers" not in TrainConfig().to_dict()
    assert TrainConfig(num_layers=3).to_dict()["num_layers"] == 3


def test_three_layers_train_export_embed_and_quantise(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EDGEGCL_DATA", str(tmp_path / "data"))
    tiny = ["--nodes", "150", "--features", "12", "--hidden-dim", "16", "--out-dim", "8",
            "--proj-dim", "8", "--epochs", "4", "--eval-every", "2", "--T-init", "1",
            "--T-int", "1", "--device", "cpu", "--num-layers", "3"]
    code, _, err = capture(main, ["train", *tiny, "--out", "run"])
    assert code == 0, err
    code, _, err = capture(main, ["train", *tiny, "--mode", "minibatch", "--batch-size", "32",
                                  "--fanout", "4,4,4", "--out", "mb"])
    assert code == 0, err
    code, _, err = capture(main, ["train", *tiny, "--mode", "minibatch", "--batch-size", "32",
                                  "--out", "short"])
    assert code == 0 and "samples 2 hop(s) for a 3-layer encoder" in err, err
    code, out, err = capture(main, ["export", "m.onnx", "--run", "run", "--quantize", "int8"])
    assert code == 0, err
    cfg = TrainConfig(nodes=150, features=12)
    data = synthetic_graph(cfg.synthetic_spec())
    ckpt = torch.load("run/checkpoint.pt", weights_only=True)
    enc = GCNEncoder(12, ModelConfig(16, 8, 8, "prelu", num_layers=3))
    enc.load_state_dict(ckpt["encoder"])
    with torch.no_grad():
        expected = enc.eval()(data.x, data.edge_index).numpy()
    session = EncoderSession("m.onnx")
    assert session.metadata.num_layers == 3
    got = session.embed(data.x.numpy(), data.edge_index.numpy())
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    report = json.loads(Path("m.int8.json").read_text())
    assert report["mean_cosine"] > 0.99
    int8 = EncoderSession("m.int8.onnx").embed(data.x.numpy(), data.edge_index.numpy())
    assert int8.shape == expected.shape
