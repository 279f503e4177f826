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
import scipy.sparse
import torch
from helpers import capture

from edgegcl import __version__
from edgegcl.training.checkpoint import Checkpoint, save_checkpoint
from edgegcl.cli.main import main
from edgegcl.training.config import TrainConfig
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.errors import UsageError
from edgegcl.nn.model import GCNEncoder
from edgegcl.onnx.export import (
    FEATURE_PREPROCESSING,
    ExportCheckError,
    check_against_torch,
    config_digest,
    export_encoder,
)
from edgegcl_embed.contract import INTERFACE
from edgegcl_embed.errors import InputError
from edgegcl_embed.runtime import EncoderSession

# Tiny synthetic training graphs; the configs rebuild them, as ``edgegcl export`` does.
CFG = TrainConfig(encoder="gcn", nodes=150, features=12, classes=3, hidden_dim=16, out_dim=8,
                  proj_dim=8)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch ~/.cache or the working directory's runs/ from a test."""
    monkeypatch.setenv("EDGEGCL_DATA", str(tmp_path / "data-cache"))
    monkeypatch.chdir(tmp_path)


def _encoder(cfg: TrainConfig, seed: int = 0) -> GCNEncoder:
    torch.manual_seed(seed)
    return GCNEncoder(cfg.synthetic.features, cfg.model).eval()


def _graph(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A synthetic graph plus self-loops and a duplicate edge (both need care in GCN)."""
    data = synthetic_graph(SyntheticSpec(n, 3, CFG.synthetic.features, avg_degree=6.0, seed=seed))
    extra = torch.tensor([[0, 1, 2, 2], [0, 2, 2, 5]])
    return data.x, torch.cat([data.edge_index, extra, data.edge_index[:, :3]], dim=1)


def _make_run(run_dir: Path, cfg: TrainConfig = CFG, seed: int = 0) -> Path:
    run_dir.mkdir(parents=True)
    save_checkpoint(run_dir / "checkpoint.pt", _encoder(cfg, seed).state_dict(), cfg,
                    cfg.synthetic.features, seed, 0)
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
    export_encoder(Checkpoint(encoder, cfg, cfg.synthetic.features, 0, 0), path)
    session = EncoderSession(path)
    for n, seed in ((150, 0), (37, 1)):
        x, edge_index = _graph(n, seed)
        with torch.no_grad():
            expected = encoder(x, edge_index).numpy()
        got = session.embed(x.numpy(), edge_index.numpy(), batch_size=0)
        assert got.shape == (n, cfg.model.out_dim)
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_graph_without_edges(tmp_path: Path) -> None:
    encoder, path = _encoder(CFG), tmp_path / "m.onnx"
    export_encoder(Checkpoint(encoder, CFG, CFG.synthetic.features, 0, 0), path)
    x, edge_index = torch.randn(3, CFG.synthetic.features), torch.zeros(2, 0, dtype=torch.long)
    with torch.no_grad():
        expected = encoder(x, edge_index).numpy()
    got = EncoderSession(path).embed(x.numpy(), edge_index.numpy())
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_metadata_read_back(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    export_encoder(Checkpoint(_encoder(CFG), CFG, CFG.synthetic.features, 0, 0), path, opset=18)
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
    assert props["edgegcl.interface"] == str(INTERFACE) and props["edgegcl.quantization"] == "none"
    assert props["edgegcl.features"] == '{"kind":"matrix","columns":[]}'

    def dims(values: list[onnx.ValueInfoProto]) -> dict[str, list]:
        return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
                for v in values}

    assert dims([*model.graph.input, *model.graph.output]) == {
        "x": ["num_nodes", 12], "edge_index": [2, "num_edges"], "embeddings": ["num_nodes", 8]}
    # inside, the stages' names: 12 -> 16 widens, so layer 1 aggregates x (no stage 0);
    # 16 -> 8 narrows, so layer 2 aggregates z1 = h W2
    assert dims(model.graph.value_info) == {"a1": ["num_nodes", 12], "a2": ["num_nodes", 8],
                                            "z1": ["num_nodes", 8]}
    meta = EncoderSession(path).metadata
    assert (meta.in_dim, meta.out_dim, meta.num_layers, meta.precision, meta.interface) == (
        12, 8, 2, "fp32", INTERFACE)


@pytest.mark.parametrize("features", [12, 40])  # 40 -> 16 narrows: stage 0 computes x W1
def test_stage_model_matches_torch_in_both_orders(tmp_path: Path, features: int) -> None:
    cfg = TrainConfig(**{**CFG.to_dict(), "features": features})
    encoder, path = _encoder(cfg), tmp_path / "m.onnx"
    export_encoder(Checkpoint(encoder, cfg, features, 0, 0), path)
    session = EncoderSession(path, threads=2)
    # the runtime cut the portable file into the stages: stage 0 (x W1) only when 40 -> 16
    narrows = features > cfg.model.hidden_dim
    assert {i.name for i in session.session.get_inputs()} == (
        {"x", "a1", "a2"} if narrows else {"a1", "a2"})
    assert ("w1" in {o.name for o in session.session.get_outputs()}) == narrows
    if narrows:
        np.testing.assert_array_equal(session.stage0_weight,
                                      encoder.conv1.lin.weight.detach().t().numpy())
    data = synthetic_graph(SyntheticSpec(300, 3, features, avg_degree=6.0, seed=5))
    with torch.no_grad():
        expected = encoder(data.x, data.edge_index).numpy()
    got = session.embed(data.x.numpy(), data.edge_index.numpy())
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("interface", [None, "5", "1", "7"])
def test_files_of_another_interface_are_refused_with_the_fix(tmp_path: Path,
                                                             interface: str | None) -> None:
    """A file whose edgegcl.interface is not this version's (or absent, as in the first files)
    is one line that says to re-export, whatever else it holds; the same checkpoint's export
    embeds."""
    encoder, old, new = _encoder(CFG), tmp_path / "old.onnx", tmp_path / "new.onnx"
    export_encoder(Checkpoint(encoder, CFG, CFG.synthetic.features, 0, 0), new)
    model = onnx.load(str(new))
    props = [p for p in model.metadata_props if p.key != "edgegcl.interface"]
    del model.metadata_props[:]
    model.metadata_props.extend(props)
    if interface is not None:
        onnx.helper.set_model_props(model, {**{p.key: p.value for p in props},
                                            "edgegcl.interface": interface})
    onnx.save(model, str(old))
    found = "no interface key" if interface is None else f"interface {interface}"
    with pytest.raises(InputError, match=f"written by an earlier edgegcl \\(it has {found}; this "
                       f"edgegcl reads interface {INTERFACE}\\); re-export it with edgegcl export"):
        EncoderSession(old, threads=4)
    x, edge_index = _graph(150, 0)
    with torch.no_grad():
        expected = encoder(x, edge_index).numpy()
    np.testing.assert_allclose(EncoderSession(new).embed(x.numpy(), edge_index.numpy()),
                               expected, atol=1e-5, rtol=0)


def test_check_fails_loudly_with_the_number(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    export_encoder(Checkpoint(_encoder(CFG, seed=0), CFG, CFG.synthetic.features, 0, 0), path)
    x, edge_index = _graph(150, 0)
    assert [c.graph for c in check_against_torch(path, _encoder(CFG, 0), x, edge_index)] == [
        "training graph", "random subgraph", "training graph, portable model alone",
        "random subgraph, portable model alone"]
    with pytest.raises(ExportCheckError, match=r"max abs difference [0-9.e+-]+ > 0\.0001"):
        check_against_torch(path, _encoder(CFG, seed=1), x, edge_index)


def test_check_covers_the_sparse_first_layer(tmp_path: Path) -> None:
    """A model exposing W1 is checked through the runtime's sparse first layer too, so a wrong
    w1 fails the export even when the model's own stages are right (here W1 is doubled and
    stage 0 halves its product again, so only the W1 the runtime exposes is wrong)."""
    cfg = TrainConfig(**{**CFG.to_dict(), "features": 40})
    encoder, path = _encoder(cfg), tmp_path / "m.onnx"
    export_encoder(Checkpoint(encoder, cfg, 40, 0, 0), path)
    data = synthetic_graph(SyntheticSpec(150, 3, 40, avg_degree=6.0, seed=0))
    checks = check_against_torch(path, encoder, data.x, data.edge_index)
    assert [c.graph for c in checks] == [
        "training graph", "random subgraph", "training graph, sparse first layer",
        "training graph, portable model alone", "random subgraph, portable model alone"]
    model = onnx.load(str(path))
    init = next(t for t in model.graph.initializer if t.name == "stage0_weight")
    init.CopyFrom(onnx.numpy_helper.from_array(2 * onnx.numpy_helper.to_array(init),
                                               "stage0_weight"))
    matmul = next(n for n in model.graph.node if "stage0_weight" in n.input)
    matmul.output[0], z0 = "z0_doubled", matmul.output[0]
    model.graph.node.insert(list(model.graph.node).index(matmul) + 1,
                            onnx.helper.make_node("Mul", ["z0_doubled", "half"], [z0]))
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.float32(0.5), "half"))
    onnx.save(model, str(path))
    with pytest.raises(ExportCheckError, match="sparse first layer"):
        check_against_torch(path, encoder, data.x, data.edge_index)


def test_int8_exposes_its_int8_w1(tmp_path: Path) -> None:
    """The INT8 portable file names stage 0's int8 weight, per-channel scale and zero point
    (STAGE0_INITIALIZERS), which the runtime exposes and dequantises once; the fp32 W1 does not
    stay in the file, and the weights are 7-bit (no uint8 x int8 pair sum exceeds int16)."""
    from edgegcl.onnx.quantize import quantize_int8

    cfg = TrainConfig(**{**CFG.to_dict(), "features": 40})
    encoder, fp32, int8 = _encoder(cfg), tmp_path / "m.onnx", tmp_path / "m.int8.onnx"
    export_encoder(Checkpoint(encoder, cfg, 40, 0, 0), fp32)
    quantize_int8(fp32, int8)
    model = onnx.load(str(int8))
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    assert "stage0_weight" not in inits and inits["stage0_weight_quantized"].dtype == np.int8
    weights = [v for v in inits.values() if v.dtype == np.int8 and v.ndim == 2]
    assert len(weights) == 2 and max(int(np.abs(w).max()) for w in weights) <= 64
    w_q, scale = inits["stage0_weight_quantized"], inits["stage0_weight_scale"]
    assert scale.shape == (16,)  # one scale per output channel
    session = EncoderSession(int8)
    assert {o.name for o in session.session.get_outputs()} == {
        "z0", "z1", "embeddings", "w1_quantized", "w1_scale", "w1_zero_point"}
    assert session.metadata.interface == INTERFACE and session.metadata.precision == "int8"
    assert "per output channel" in session.metadata.quantization
    np.testing.assert_array_equal(session.stage0_weight, (
        w_q.astype(np.float32) - inits["stage0_weight_zero_point"].astype(np.float32)) * scale)
    w1 = encoder.conv1.lin.weight.detach().t().numpy()
    # symmetric rounding: every weight within half a step of its column's scale
    assert (np.abs(session.stage0_weight - w1) <= scale / 2 * (1 + 1e-6)).all()


# --------------------------------------------------------------------------- command line

def test_bare_export_takes_the_most_recent_run(tmp_path: Path) -> None:
    old = _make_run(tmp_path / "runs" / "synthetic-old", seed=1)
    _make_run(tmp_path / "runs" / "synthetic-new", seed=2)
    os.utime(old / "checkpoint.pt", (time.time() - 100, time.time() - 100))
    code, out, err = _run_main(["export", "model.onnx"])
    assert code == 0, err
    assert f"most recent run, {Path('runs') / 'synthetic-new'}" in err
    assert "wrote model.onnx (fp32, portable)" in out and "random subgraph" in out
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
    assert EncoderSession(target).metadata.in_dim == CFG.synthetic.features


def test_quantize_int8_writes_model_and_report(tmp_path: Path) -> None:
    run = _make_run(tmp_path / "run")
    code, out, err = _run_main(["export", "m.onnx", "--checkpoint", str(run / "checkpoint.pt"),
                                "--quantize", "int8"])
    assert code == 0, err
    assert "m.int8.onnx (int8)" in out and "micro-F1" in out  # the run's own metric
    report = json.loads(Path("m.int8.json").read_text())
    assert report["int8_bytes"] == Path("m.int8.onnx").stat().st_size
    assert report["size_ratio"] == pytest.approx(report["int8_bytes"] / report["fp32_bytes"])
    assert 0.99 < report["mean_cosine"] <= 1.0 + 1e-9
    f1 = report["downstream"]
    assert f1["metric"] == "micro_f1" and f1["splits"] == 5
    assert f1["change"] == pytest.approx(f1["int8"] - f1["fp32"])
    assert EncoderSession("m.int8.onnx").metadata.precision == "int8"
    ops = {n.op_type for n in onnx.load("m.int8.onnx").graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeMatMul"}


@pytest.mark.parametrize("task, metric, shown", [("link", "auto", "AUC"),
                                                  ("link", "ap", "AP"),
                                                  ("node", "macro_f1", "macro-F1")])
def test_the_int8_check_reports_the_runs_own_metric(tmp_path: Path, task: str, metric: str,
                                                    shown: str) -> None:
    """A link run is judged by AUC (or its --metric) on held-out pairs, a node run by its own
    --metric: the INT8 report compares that figure, not micro-F1."""
    cfg = CFG.replace(run={"task": task, "metric": metric})
    run = _make_run(tmp_path / "run", cfg)
    code, out, err = _run_main(["export", "m.onnx", "--checkpoint", str(run / "checkpoint.pt"),
                                "--quantize", "int8"])
    assert code == 0, err
    judged = json.loads(Path("m.int8.json").read_text())["downstream"]
    assert judged["metric"] == (metric if metric != "auto" else "auc")
    assert f", {shown} {judged['fp32']:.2f} -> {judged['int8']:.2f}" in out
    assert "micro-F1" not in out


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


# --------------------------------------------------------------------------- reuse, graph file

def test_quantize_and_graph_out_reuse_an_existing_export(tmp_path: Path) -> None:
    """`--quantize int8` and `--graph-out` after a plain export keep the fp32 file (checked
    against the checkpoint, not rewritten); the graph file is what edgegcl-embed reads."""
    from edgegcl_embed.embed import main as embed_main

    run = _make_run(tmp_path / "run")
    assert _run_main(["export", "m.onnx", "--run", str(run)])[0] == 0
    before = (Path("m.onnx").read_bytes(), Path("m.onnx").stat().st_mtime_ns)
    code, out, err = _run_main(["export", "m.onnx", "--run", str(run), "--quantize", "int8",
                                "--graph-out", "graph.npz"])
    assert code == 0, err
    assert "reusing m.onnx (fp32, this checkpoint's encoder" in out and "wrote m.int8.onnx" in out
    assert (Path("m.onnx").read_bytes(), Path("m.onnx").stat().st_mtime_ns) == before
    assert json.loads(Path("m.int8.json").read_text())["fp32_model"] == "m.onnx"
    code, _, err = capture(embed_main, ["m.onnx", "--graph", "graph.npz", "--out", "emb.npy"])
    assert code == 0, err
    data = synthetic_graph(CFG.synthetic_spec())  # the training graph the config rebuilds
    with torch.no_grad():
        expected = _encoder(CFG)(data.x, data.edge_index).numpy()
    np.testing.assert_allclose(np.load("emb.npy"), expected, atol=1e-5, rtol=0)
    assert _files(tmp_path) == ["emb.npy", "graph.npz", "m.int8.json", "m.int8.onnx", "m.onnx",
                                "run"]


def _files(folder: Path) -> list[str]:
    """What a test's commands left in ``folder`` (the dataset cache aside)."""
    return sorted(p.name for p in folder.iterdir() if p.name != "data-cache")


def test_graph_out_writes_a_sparse_x_as_csr(tmp_path: Path) -> None:
    from edgegcl_embed.graph import load_npz

    cfg = TrainConfig(**{**CFG.to_dict(), "features": 40})
    run = _make_run(tmp_path / "run", cfg)
    data = synthetic_graph(SyntheticSpec(60, 3, 40, avg_degree=6.0, seed=6))
    x, edge_index = (data.x > 1.5).float(), data.edge_index  # ~7 % nonzero: CSR in training
    np.savez("g.npz", x=x.numpy(), edge_index=edge_index.numpy())
    code, out, err = _run_main(["export", "m.onnx", "--run", str(run), "--graph", "g.npz",
                                "--graph-out", "out.npz"])
    assert code == 0, err
    assert "x as CSR" in out
    got_x, got_edges = load_npz("out.npz")
    assert scipy.sparse.issparse(got_x)
    np.testing.assert_array_equal(got_x.toarray(), x.numpy())
    np.testing.assert_array_equal(got_edges, edge_index.numpy())


def _foreign_model(path: Path) -> None:
    node = onnx.helper.make_node("Relu", ["x"], ["y"])
    io_x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [None])
    io_y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [None])
    onnx.save(onnx.helper.make_model(onnx.helper.make_graph([node], "g", [io_x], [io_y])),
              str(path))


@pytest.mark.parametrize("existing, needle", [
    ("bytes", "is not an ONNX model"),
    ("foreign", "not an edgegcl encoder"),
    ("int8", "is an edgegcl int8 model, not an fp32 export"),
    ("other_encoder", "does not compute this checkpoint's encoder"),
    ("other_config", "exported from another training configuration"),
])
def test_an_existing_file_that_is_not_this_export_is_not_reused(
        tmp_path: Path, existing: str, needle: str) -> None:
    run = _make_run(tmp_path / "run")
    target = Path("m.onnx")
    if existing == "bytes":
        target.write_bytes(b"precious")
    elif existing == "foreign":
        _foreign_model(target)
    elif existing == "int8":
        from edgegcl.onnx.quantize import quantize_int8

        fp32 = tmp_path / "fp32.onnx"
        export_encoder(Checkpoint(_encoder(CFG), CFG, CFG.synthetic.features, 0, 0), fp32)
        quantize_int8(fp32, target)
        fp32.unlink()
    else:  # the same configuration with other weights, or other weights of another one
        cfg = CFG if existing == "other_encoder" else TrainConfig(**{**CFG.to_dict(),
                                                                     "tau": 0.3})
        export_encoder(Checkpoint(_encoder(cfg, seed=5), cfg, CFG.synthetic.features, 0, 0), target)
    before = target.read_bytes()
    line = _usage_error(*_run_main(["export", "m.onnx", "--run", str(run), "--quantize", "int8",
                                    "--graph-out", "g.npz"]))
    assert needle in line and "--force" in line
    assert target.read_bytes() == before
    assert _files(tmp_path) == ["m.onnx", "run"]
    code, out, err = _run_main(["export", "m.onnx", "--run", str(run), "--quantize", "int8",
                                "--force"])
    assert code == 0 and "wrote m.onnx (fp32, portable)" in out, err


@pytest.mark.parametrize("kind, needle", [
    ("feature_dim", "has 5 features but the encoder expects 12"),
    ("nan", "x holds NaN or inf (first in row 3)"),
    ("edge_range", "edge_index holds node 40 but the graph has 40 nodes"),
])
def test_bad_training_graph_is_one_line_and_writes_nothing(tmp_path: Path, kind: str,
                                                          needle: str) -> None:
    run = _make_run(tmp_path / "run")
    x, edge_index = _graph(40, 4)
    if kind == "feature_dim":
        x = x[:, :5]
    elif kind == "nan":
        x[3, 1] = float("nan")
    else:
        edge_index[1, 7] = 40
    np.savez("g.npz", x=x.numpy(), edge_index=edge_index.numpy())
    Path("m.onnx").write_bytes(b"precious")
    line = _usage_error(*_run_main(["export", "m.onnx", "--run", str(run), "--graph", "g.npz",
                                    "--quantize", "int8", "--graph-out", "out.npz"]))
    assert needle in line
    assert Path("m.onnx").read_bytes() == b"precious"
    assert _files(tmp_path) == ["g.npz", "m.onnx", "run"]


def test_graph_out_must_not_be_a_model_file(tmp_path: Path) -> None:
    line = _usage_error(*_run_main(["export", "m.onnx", "--quantize", "int8", "--graph-out",
                                    "m.int8.onnx"]))
    assert "--graph-out m.int8.onnx is one of the model files" in line


@pytest.mark.parametrize("quantize", ["int4", "INT8", 8])
def test_export_refuses_a_quantisation_it_does_not_write(tmp_path: Path, quantize) -> None:
    """Only int8 is written: anything else is one line before any work, nothing written."""
    import edgegcl

    with pytest.raises(UsageError, match="quantize must be None or 'int8'"):
        edgegcl.export(tmp_path / "m.onnx", run=tmp_path / "no-run", quantize=quantize)
    assert list(tmp_path.iterdir()) == []
