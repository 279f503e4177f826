"""ONNX export (edgegcl.onnx.export, ``edgegcl export``): round trips, metadata, checks, INT8."""

from __future__ import annotations

import json
import os
import time
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from helpers import capture

from edgegcl import __version__
from edgegcl.training.checkpoint import Checkpoint, save_checkpoint
from edgegcl.cli.main import main
from edgegcl.config import TrainConfig
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.nn.model import GCNEncoder
from edgegcl.onnx.export import (
    FEATURE_PREPROCESSING,
    ExportCheckError,
    check_against_torch,
    config_digest,
    export_encoder,
)
from edgegcl_embed.runtime import EncoderSession

# Tiny synthetic training graphs; the configs rebuild them, as ``edgegcl export`` does.
CFG = TrainConfig(nodes=150, features=12, classes=3, hidden_dim=16, out_dim=8, proj_dim=8)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch ~/.cache or the working directory's runs/ from a test."""
    monkeypatch.setenv("EDGEGCL_DATA", str(tmp_path / "data-cache"))
    monkeypatch.chdir(tmp_path)


def _encoder(cfg: TrainConfig, seed: int = 0) -> GCNEncoder:
    torch.manual_seed(seed)
    return GCNEncoder(cfg.features, cfg.model_config()).eval()


def _graph(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A synthetic graph plus self-loops and a duplicate edge (both need care in GCN)."""
    data = synthetic_graph(SyntheticSpec(n, 3, CFG.features, avg_degree=6.0, seed=seed))
    extra = torch.tensor([[0, 1, 2, 2], [0, 2, 2, 5]])
    return data.x, torch.cat([data.edge_index, extra, data.edge_index[:, :3]], dim=1)


def _make_run(run_dir: Path, cfg: TrainConfig = CFG, seed: int = 0) -> Path:
    run_dir.mkdir(parents=True)
    save_checkpoint(run_dir / "checkpoint.pt", _encoder(cfg, seed).state_dict(), cfg,
                    cfg.features, seed, 0)
    return run_dir


_run_main = partial(capture, main)


def _usage_error(code: int, out: str, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, (code, out, err)
    assert lines[0].startswith("edgegcl: error:") and "Traceback" not in err
    return lines[0]


# --------------------------------------------------------------------------- library

@pytest.mark.parametrize("activation, slope", [("prelu", 0.25), ("prelu", 1.5), ("relu", None),
                                               ("elu", None), ("rrelu", None)])
def test_round_trip_on_two_graph_sizes(tmp_path: Path, activation: str,
                                       slope: float | None) -> None:
    cfg = TrainConfig(**{**CFG.to_dict(), "activation": activation})
    encoder = _encoder(cfg)
    if slope is not None:  # slopes above 1 take the plain PRelu path, below the max(z, a z) one
        with torch.no_grad():
            encoder.act1.weight.uniform_(-slope, slope)
            encoder.act2.weight.uniform_(-slope, slope)
    path = tmp_path / "m.onnx"
    export_encoder(Checkpoint(encoder, cfg, cfg.features, 0, 0), path)
    session = EncoderSession(path)
    for n, seed in ((150, 0), (37, 1)):
        x, edge_index = _graph(n, seed)
        with torch.no_grad():
            expected = encoder(x, edge_index).numpy()
        got = session.embed(x.numpy(), edge_index.numpy(), batch_size=0)
        assert got.shape == (n, cfg.out_dim)
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_graph_without_edges(tmp_path: Path) -> None:
    encoder, path = _encoder(CFG), tmp_path / "m.onnx"
    export_encoder(Checkpoint(encoder, CFG, CFG.features, 0, 0), path)
    x, edge_index = torch.randn(3, CFG.features), torch.zeros(2, 0, dtype=torch.long)
    with torch.no_grad():
        expected = encoder(x, edge_index).numpy()
    got = EncoderSession(path).embed(x.numpy(), edge_index.numpy())
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_metadata_read_back(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    export_encoder(Checkpoint(_encoder(CFG), CFG, CFG.features, 0, 0), path, opset=18)
    model = onnx.load(str(path))
    props = {p.key: p.value for p in model.metadata_props}
    assert props["edgegcl.version"] == __version__
    assert props["edgegcl.in_dim"] == "12" and props["edgegcl.out_dim"] == "8"
    assert props["edgegcl.num_layers"] == "2" and props["edgegcl.activation"] == "prelu"
    assert props["edgegcl.feature_preprocessing"] == FEATURE_PREPROCESSING
    assert props["edgegcl.config_sha256"] == config_digest(CFG) and len(config_digest(CFG)) == 64
    assert props["edgegcl.dataset"] == "synthetic" and props["edgegcl.precision"] == "fp32"
    assert config_digest(TrainConfig(**{**CFG.to_dict(), "tau": 0.5})) != config_digest(CFG)
    assert model.opset_import[0].version == 18
    assert props["edgegcl.interface"] == "3"
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in [*model.graph.input, *model.graph.output]}
    # 12 -> 16 widens: aggregate x first (no stage 0, no w1); 16 -> 8 narrows: aggregate
    # z1 = h W2
    assert dims == {"a1": ["rows", 12], "a2": ["rows", 8], "z1": ["rows", 8],
                    "embeddings": ["rows", 8]}
    meta = EncoderSession(path).metadata
    assert (meta.in_dim, meta.out_dim, meta.num_layers, meta.precision, meta.interface) == (
        12, 8, 2, "fp32", 3)
    ops = {n.op_type for n in model.graph.node}
    assert "MatMul" in ops and not ops & {"ScatterND", "Gather", "ScatterElements"}


@pytest.mark.parametrize("features", [12, 40])  # 40 -> 16 narrows: stage 0 computes x W1
def test_stage_model_matches_torch_in_both_orders(tmp_path: Path, features: int) -> None:
    cfg = TrainConfig(**{**CFG.to_dict(), "features": features})
    encoder, path = _encoder(cfg), tmp_path / "m.onnx"
    export_encoder(Checkpoint(encoder, cfg, features, 0, 0), path)
    model = onnx.load(str(path))
    names = {i.name for i in model.graph.input}
    narrows = features > cfg.hidden_dim
    assert names == ({"x", "a1", "a2"} if narrows else {"a1", "a2"})
    outputs = {o.name for o in model.graph.output}
    assert ("w1" in outputs) == narrows  # interface 3: W1 for the sparse first layer
    session = EncoderSession(path, threads=2)
    if narrows:
        np.testing.assert_array_equal(session.stage0_weight,
                                      encoder.conv1.lin.weight.detach().t().numpy())
    data = synthetic_graph(SyntheticSpec(300, 3, features, avg_degree=6.0, seed=5))
    with torch.no_grad():
        expected = encoder(data.x, data.edge_index).numpy()
    got = session.embed(data.x.numpy(), data.edge_index.numpy())
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_interface1_files_still_load(tmp_path: Path) -> None:
    """Files written before interface 2 (ScatterND, no edgegcl.interface key) still embed."""
    encoder, old, new = _encoder(CFG), tmp_path / "old.onnx", tmp_path / "new.onnx"
    export_encoder(Checkpoint(encoder, CFG, CFG.features, 0, 0), old, interface=1)
    export_encoder(Checkpoint(encoder, CFG, CFG.features, 0, 0), new)
    model = onnx.load(str(old))
    props = [p for p in model.metadata_props if p.key != "edgegcl.interface"]
    del model.metadata_props[:]
    model.metadata_props.extend(props)  # exactly what an older edgegcl wrote
    onnx.save(model, str(old))
    session = EncoderSession(old, threads=4)
    assert session.metadata.interface == 1 and session.threads == 1  # ScatterND: one thread
    x, edge_index = _graph(150, 0)
    with torch.no_grad():
        expected = encoder(x, edge_index).numpy()
    for batch_size in (0, 40):
        got = session.embed(x.numpy(), edge_index.numpy(), batch_size=batch_size)
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(EncoderSession(new).embed(x.numpy(), edge_index.numpy()),
                               expected, atol=1e-5, rtol=0)


def test_check_fails_loudly_with_the_number(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    export_encoder(Checkpoint(_encoder(CFG, seed=0), CFG, CFG.features, 0, 0), path)
    x, edge_index = _graph(150, 0)
    assert [c.graph for c in check_against_torch(path, _encoder(CFG, 0), x, edge_index)] == [
        "training graph", "random subgraph"]
    with pytest.raises(ExportCheckError, match=r"max abs difference [0-9.e+-]+ > 0\.0001"):
        check_against_torch(path, _encoder(CFG, seed=1), x, edge_index)


def test_check_covers_the_sparse_first_layer(tmp_path: Path) -> None:
    """A model exposing W1 is checked through the runtime's sparse first layer too, so a wrong
    w1 fails the export even when the model's own stages are right."""
    cfg = TrainConfig(**{**CFG.to_dict(), "features": 40})
    encoder, path = _encoder(cfg), tmp_path / "m.onnx"
    export_encoder(Checkpoint(encoder, cfg, 40, 0, 0), path)
    data = synthetic_graph(SyntheticSpec(150, 3, 40, avg_degree=6.0, seed=0))
    checks = check_against_torch(path, encoder, data.x, data.edge_index)
    assert [c.graph for c in checks] == ["training graph", "random subgraph",
                                         "training graph, sparse first layer"]
    model = onnx.load(str(path))
    node = next(n for n in model.graph.node if n.output[0] == "w1")
    node.input[0] = "weight1_scaled"
    model.graph.node.append(onnx.helper.make_node("Mul", ["weight1", "two"], ["weight1_scaled"]))
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.float32(2.0), "two"))
    onnx.save(model, str(path))
    with pytest.raises(ExportCheckError, match="sparse first layer"):
        check_against_torch(path, encoder, data.x, data.edge_index)


def test_int8_exposes_its_int8_w1(tmp_path: Path) -> None:
    """The INT8 file exposes what its stage 0 multiplies by, the int8 weight with its scale
    and zero point (the runtime dequantises it once); the fp32 W1 does not stay in the file."""
    from edgegcl.onnx.quantize import quantize_int8

    cfg = TrainConfig(**{**CFG.to_dict(), "features": 40})
    encoder, fp32, int8 = _encoder(cfg), tmp_path / "m.onnx", tmp_path / "m.int8.onnx"
    export_encoder(Checkpoint(encoder, cfg, 40, 0, 0), fp32)
    quantize_int8(fp32, int8)
    model = onnx.load(str(int8))
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    assert "weight1" not in inits and inits["weight1_quantized"].dtype == np.int8
    assert {o.name for o in model.graph.output} == {"z0", "z1", "embeddings", "w1_quantized",
                                                    "w1_scale", "w1_zero_point"}
    expected = ((inits["weight1_quantized"].astype(np.float32)
                 - inits["weight1_zero_point"].astype(np.float32)) * inits["weight1_scale"])
    session = EncoderSession(int8)
    assert session.metadata.interface == 3 and session.metadata.precision == "int8"
    np.testing.assert_array_equal(session.stage0_weight, expected)
    w1 = encoder.conv1.lin.weight.detach().t().numpy()
    assert np.abs(session.stage0_weight - w1).max() <= inits["weight1_scale"]  # within a step


# --------------------------------------------------------------------------- command line

def test_bare_export_takes_the_most_recent_run(tmp_path: Path) -> None:
    old = _make_run(tmp_path / "runs" / "synthetic-old", seed=1)
    _make_run(tmp_path / "runs" / "synthetic-new", seed=2)
    os.utime(old / "checkpoint.pt", (time.time() - 100, time.time() - 100))
    code, out, err = _run_main(["export", "model.onnx"])
    assert code == 0, err
    assert f"most recent run, {Path('runs') / 'synthetic-new'}" in err
    assert "wrote model.onnx (fp32)" in out and "random subgraph" in out
    x, edge_index = _graph(60, 3)
    with torch.no_grad():
        expected = _encoder(CFG, seed=2)(x, edge_index).numpy()
    got = EncoderSession("model.onnx").embed(x.numpy(), edge_index.numpy())
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left


def test_existing_output_is_never_overwritten_without_force(tmp_path: Path) -> None:
    run = _make_run(tmp_path / "run")
    target = tmp_path / "model.onnx"
    target.write_bytes(b"precious")
    line = _usage_error(*_run_main(["export", str(target), "--run", str(run)]))
    assert "--force" in line and target.read_bytes() == b"precious"
    code, _, err = _run_main(["export", str(target), "--run", str(run), "--force"])
    assert code == 0, err
    assert EncoderSession(target).metadata.in_dim == CFG.features


def test_quantize_int8_writes_model_and_report(tmp_path: Path) -> None:
    run = _make_run(tmp_path / "run")
    code, out, err = _run_main(["export", "m.onnx", "--checkpoint", str(run / "checkpoint.pt"),
                                "--quantize", "int8"])
    assert code == 0, err
    assert "m.int8.onnx (int8)" in out and "micro-F1" in out
    report = json.loads(Path("m.int8.json").read_text())
    assert report["int8_bytes"] == Path("m.int8.onnx").stat().st_size
    assert report["size_ratio"] == pytest.approx(report["int8_bytes"] / report["fp32_bytes"])
    assert 0.99 < report["mean_cosine"] <= 1.0 + 1e-9
    f1 = report["micro_f1"]
    assert f1["change"] == pytest.approx(f1["int8"] - f1["fp32"]) and f1["splits"] == 5
    assert EncoderSession("m.int8.onnx").metadata.precision == "int8"
    ops = {n.op_type for n in onnx.load("m.int8.onnx").graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeMatMul"}


def test_training_graph_that_cannot_be_rebuilt(tmp_path: Path) -> None:
    cfg = TrainConfig(**{**CFG.to_dict(), "dataset": str(tmp_path / "gone.npz")})
    run = _make_run(tmp_path / "run", cfg)
    line = _usage_error(*_run_main(["export", "m.onnx", "--run", str(run)]))
    assert "gone.npz" in line and "--graph" in line and not Path("m.onnx").exists()
    x, edge_index = _graph(40, 4)
    np.savez("g.npz", x=x.numpy(), edge_index=edge_index.numpy())
    code, out, err = _run_main(["export", "m.onnx", "--run", str(run), "--graph", "g.npz"])
    assert code == 0, err
    assert "training graph (40 nodes)" in out


@pytest.mark.parametrize("argv, needle", [
    (["export", "m.onnx"], "no run with a checkpoint.pt under runs"),
    (["export", "m.onnx", "--run", "nowhere"], "nowhere has no checkpoint.pt"),
    (["export", "m.onnx", "--checkpoint", "nothing.pt"], "nothing.pt does not exist"),
    (["export", "m.onnx", "--opset", "12"], "--opset must be in 13..20"),
    (["export", "no/such/dir/m.onnx"], "directory no/such/dir does not exist"),
    (["export", "m.onnx", "--quantize", "int4"], "int4"),
    (["export", "m.onnx", "--run", "a", "--checkpoint", "b"], "not allowed with"),
])
def test_usage_errors(argv: list[str], needle: str) -> None:
    assert needle in _usage_error(*_run_main(argv))
    assert not Path("m.onnx").exists()


def test_failed_check_exits_1_and_writes_nothing(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import edgegcl.onnx.module

    # a bad lowering: PReLU exported as the identity
    monkeypatch.setattr(edgegcl.onnx.module._SlopeMax, "forward", lambda self, z: z)
    run = _make_run(tmp_path / "run")
    code, out, err = _run_main(["export", "m.onnx", "--run", str(run), "--quantize", "int8"])
    lines = err.strip().splitlines()
    assert code == 1 and out == "" and "Traceback" not in err
    assert lines[-1].startswith("edgegcl: error: export check failed: onnxruntime and torch "
                                "disagree on the training graph")
    assert "nothing was written" in lines[-1]
    assert [p.name for p in tmp_path.iterdir() if p.name != "data-cache"] == ["run"]
