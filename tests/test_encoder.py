"""Any encoder through the whole tool (edgegcl.nn.encoders): PyG's GraphSAGE trained from
Python (``Trainer(encoder=...)``) and from the command line (``--encoder FILE.py:FN``),
full-graph and in mini-batches, resumed exactly, and refused in one line when it is not one."""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path

import pytest
import torch
from helpers import capture
from torch_geometric.nn import GraphSAGE

from edgegcl.cli.main import main
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.data.sampling import make_loader
from edgegcl.errors import UsageError
from edgegcl.nn.encoders import Encoded, load_encoder
from edgegcl.training.config import TrainConfig
from edgegcl.training.engine import Trainer

CFG = TrainConfig(proj_dim=8, T_init=2, T_int=2, e=1, theta_max=0.5, b=0.5, scheduler="hans",
                  epochs=8)
SAGE = """from torch_geometric.nn import GraphSAGE


def make(in_dim):
    return GraphSAGE(in_dim, hidden_channels=16, num_layers=2, out_channels=8)
"""
TINY = ["--nodes", "150", "--features", "12", "--proj-dim", "8", "--T-init", "2", "--T-int",
        "2", "--eval-every", "2", "--device", "cpu", "--sampler", "builtin", "--scheduler",
        "hans", "--e", "1", "--theta-max", "0.5"]
BATCHES = {"full": [], "minibatch": ["--batch-size", "48", "--fanout", "4,4"]}
"""What a mode reads beside TINY (--mode full reads no batch size)."""


@pytest.fixture(scope="module")
def data():
    return synthetic_graph(SyntheticSpec(num_nodes=150, num_features=12, avg_degree=5, seed=1))


def sage(in_dim: int = 12) -> GraphSAGE:
    return GraphSAGE(in_dim, hidden_channels=16, num_layers=2, out_channels=8)


@pytest.mark.parametrize("mode", ["full", "minibatch"])
def test_graphsage_trains_through_the_trainer_and_resumes_exactly(data, mode: str) -> None:
    def epochs(trainer: Trainer, n: int) -> list[float]:
        out = []
        for _ in range(n):
            loader = make_loader(data, 48, [4, 4], sampler="builtin", seed=trainer.epoch) \
                if mode == "minibatch" else None
            out.append(trainer.fit_epoch(data.x, data.edge_index, loader).loss)
        return out

    straight = Trainer(CFG, 12, mode=mode, seed=1, encoder=sage())
    assert isinstance(straight.model, Encoded) and straight.model.head.fc1.in_features == 8
    before = copy.deepcopy(straight.model.encoder.state_dict())
    epochs(straight, 4)
    assert any(not torch.equal(a, b) for a, b in
               zip(before.values(), straight.model.encoder.state_dict().values()))  # it learns
    state = copy.deepcopy(straight.state_dict())
    expected = epochs(straight, 4)
    assert straight.scheduler.eta["hard"] > CFG.schedule.eta_0  # HANS moved on this encoder's losses
    resumed = Trainer(CFG, 12, mode=mode, seed=9, encoder=sage())
    resumed.load_state_dict(state)
    assert epochs(resumed, 4) == expected
    assert all(torch.equal(a, b) for a, b in zip(resumed.model.state_dict().values(),
                                                  straight.model.state_dict().values()))
    embeddings = straight.model.embed(data.x, data.edge_index)
    assert embeddings.shape == (150, 8) and not embeddings.requires_grad


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "seed-0" / "state.pt", weights_only=True)["trainer"]["model"]


@pytest.mark.parametrize("mode", ["full", "minibatch"])
def test_graphsage_trains_from_the_command_line_and_resumes(tmp_path: Path, mode: str) -> None:
    (tmp_path / "sage.py").write_text(SAGE)
    flags = [*TINY, "--mode", mode, *BATCHES[mode], "--encoder",
             str(tmp_path / "sage.py") + ":make"]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    code, _, err = capture(main, ["train", *flags, "--epochs", "6", "--out", str(straight)])
    assert code == 0, err
    code, _, err = capture(main, ["train", *flags, "--epochs", "4", "--out", str(stopped)])
    assert code == 0, err
    saved = tomllib.loads((stopped / "config.toml").read_text())
    assert saved["model"]["encoder"] == f"{tmp_path / 'sage.py'}:make"  # recorded, absolute
    code, _, err = capture(main, ["train", "--resume", str(stopped), "--epochs", "6"])
    assert code == 0, err
    for run_dir in (straight, stopped):
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert metrics["mode"] == mode and len(metrics["seeds"][0]["history"]) == 3
        assert {p.name for p in (run_dir / "seed-0").iterdir()} >= {
            "checkpoint.pt", "epochs.csv", "hans_events.jsonl", "state.pt", "result.pt"}
    assert all(torch.equal(a, b) for a, b in zip(_weights(straight).values(),
                                                  _weights(stopped).values()))
    assert (straight / "seed-0" / "epochs.csv").read_text().count("\n") == 7


def test_a_bad_encoder_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("def make(in_dim):\n    return 3\n")
    for spec, words in [(str(tmp_path / "gone.py") + ":make", "does not exist"),
                        (str(tmp_path / "bad.py") + ":nope", "has no function"),
                        (str(tmp_path / "bad.py") + ":make", "not a torch.nn.Module"),
                        ("no_such_package_x:make", "importing no_such_package_x failed")]:
        with pytest.raises(UsageError, match=words):
            load_encoder(spec, 12)
    code, _, err = capture(main, ["train", *TINY, "--encoder", "torch", "--out",
                                  str(tmp_path / "r")])
    assert code == 2 and err.count("\n") == 1 and "--encoder" in err
    code, _, err = capture(main, ["train", *TINY, "--encoder", "torch.nn:Identity",
                                  "--hidden-dim", "32", "--out", str(tmp_path / "r")])
    assert code == 2 and "--hidden-dim" in err and err.count("\n") == 1


def test_a_graphsage_run_exports_through_torch_onnx(tmp_path: Path) -> None:
    import numpy as np
    import onnxruntime

    (tmp_path / "sage.py").write_text(SAGE)
    run_dir, model = tmp_path / "run", tmp_path / "sage.onnx"
    code, _, err = capture(main, ["train", *TINY, "--mode", "full", "--epochs", "2", "--encoder",
                                  str(tmp_path / "sage.py") + ":make", "--out", str(run_dir)])
    assert code == 0, err
    code, out, err = capture(main, ["export", str(model), "--run", str(run_dir)])
    assert code == 0 and "torch.onnx" in out and "max abs diff" in out, err
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    encoder = sage()
    encoder.load_state_dict(ckpt["encoder"])
    data = synthetic_graph(SyntheticSpec(num_nodes=150, num_features=12))  # the run's graph
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": data.x.numpy(), "edge_index": data.edge_index.numpy()})[0]
    with torch.no_grad():
        expected = encoder.eval()(data.x, data.edge_index).numpy()
    assert np.abs(got - expected).max() <= 1e-4  # float32 sums in another order
    code, _, err = capture(main, ["export", str(tmp_path / "q.onnx"), "--run", str(run_dir),
                                  "--quantize", "int8"])
    assert code == 2 and err.count("\n") == 1 and "built-in encoder" in err
