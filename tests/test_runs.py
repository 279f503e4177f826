"""Runs loaded back in Python (``edgegcl.load_run``) and ``--save-embeddings``: the same
embeddings as the exported model run by the torch-free runtime."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import edgegcl
from edgegcl.cli.main import main
from edgegcl.errors import UsageError

TINY = ["--dataset", "synthetic", "--nodes", "150", "--features", "12", "--hidden-dim", "16",
        "--out-dim", "8", "--proj-dim", "8", "--epochs", "4", "--eval-every", "2",
        "--threads", "1", "--encoder", "gcn"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "run"
    assert main(["train", *TINY, "--out", str(out), "--save-embeddings"]) == 0
    return out


def test_load_run_gives_config_encoder_metrics_and_the_runtimes_embeddings(
        run_dir: Path, tmp_path: Path) -> None:
    from edgegcl_embed.runtime import EncoderSession

    run = edgegcl.load_run(run_dir)
    assert run.config.model.out_dim == 8 and run.in_dim == 12
    assert run.metrics == json.loads((run_dir / "metrics.json").read_text())
    assert run.epoch == run.metrics["seeds"][0]["selected_epoch"]
    z = run.embed()  # the training graph, rebuilt from the config
    assert z.shape == (150, 8) and not z.requires_grad
    assert main(["export", str(tmp_path / "m.onnx"), "--run", str(run_dir)]) == 0
    data = run.graph()
    onnx_z = EncoderSession(tmp_path / "m.onnx", threads=1).embed(
        data.x.numpy(), data.edge_index.numpy())
    np.testing.assert_allclose(z.numpy(), onnx_z, atol=1e-5, rtol=0)
    # another graph with the same features, given as a file
    other = tmp_path / "g.npz"
    rng = np.random.default_rng(0)
    edges = rng.integers(0, 40, (2, 120))
    np.savez(other, x=rng.standard_normal((40, 12)).astype(np.float32),
             edge_index=np.concatenate([edges, edges[::-1]], axis=1))
    with np.load(other) as g:
        want = EncoderSession(tmp_path / "m.onnx", threads=1).embed(g["x"], g["edge_index"])
    np.testing.assert_allclose(run.embed(other).numpy(), want, atol=1e-5, rtol=0)


def test_save_embeddings_writes_what_load_run_gives(run_dir: Path) -> None:
    saved = np.load(run_dir / "embeddings.npy")
    np.testing.assert_allclose(saved, edgegcl.load_run(run_dir).embed().numpy(), atol=1e-6,
                               rtol=0)
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".")]  # no temporary left


def test_load_run_refuses_what_is_not_a_run(tmp_path: Path, run_dir: Path) -> None:
    with pytest.raises(UsageError, match="has no checkpoint.pt"):
        edgegcl.load_run(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "checkpoint.pt").write_bytes((run_dir / "checkpoint.pt").read_bytes())
    (broken / "metrics.json").write_text("{not json")
    with pytest.raises(UsageError, match="is not edgegcl's metrics"):
        edgegcl.load_run(broken)
    (broken / "metrics.json").unlink()
    assert edgegcl.load_run(broken).metrics is None  # a run still going: no metrics yet
    with pytest.raises(UsageError, match="has 3 features but the encoder"):
        edgegcl.load_run(broken).embed(_graph_with_features(3))


def _graph_with_features(f: int):
    import torch
    from torch_geometric.data import Data

    return Data(x=torch.ones(4, f), edge_index=torch.tensor([[0, 1], [1, 0]]))
