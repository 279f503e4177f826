"""The portable model (edgegcl.onnx.portable): onnxruntime alone runs it, exactly
at any thread count, in an environment without torch; the runtime cuts it into its stages; the
runtime installs on its own (edgegcl_embed/pyproject.toml)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from edgegcl.training.config import TrainConfig
from edgegcl.nn.model import GCNEncoder
from edgegcl.onnx.export import export_encoder
from edgegcl.onnx.quantize import quantize_int8
from edgegcl.training.checkpoint import Checkpoint
from edgegcl_embed.contract import INTERFACE
from edgegcl_embed.errors import InputError
from edgegcl_embed.graph import save_npz
from edgegcl_embed.runtime import EncoderSession, portable_session
from edgegcl_embed.stages import ModelFormatError, stage_model

REPO = Path(__file__).resolve().parents[1]

# What the portable graph may contain: standard ONNX ops (domain ai.onnx), none of them a
# scatter (whose CPU kernels race on rows that several edges add into, onnxruntime#18048).
PORTABLE_OPS = {"Add", "Cast", "Compress", "Concat", "Equal", "Gather", "GreaterOrEqual",
                "Identity", "Loop", "MatMul", "Max", "Mul", "Not", "NonZero", "Pad", "Pow",
                "PRelu", "Range", "Relu", "Elu", "Reshape", "Shape", "Slice", "Squeeze", "Sub",
                "TopK", "Unsqueeze", "Gemm", "Constant", "Transpose",
                "DynamicQuantizeLinear", "MatMulInteger"}


def _checkpoint(features: int, activation: str = "prelu") -> Checkpoint:
    torch.manual_seed(0)
    cfg = TrainConfig(hidden_dim=16, out_dim=8, features=features, activation=activation)
    return Checkpoint(GCNEncoder(features, cfg.model).eval(), cfg, features, 0, 0)


def _export(ckpt: Checkpoint, path: Path) -> Path:
    export_encoder(ckpt, path)
    return path


def _hub_graph(n: int, features: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Unsorted random edges, self-loops, a duplicate, isolated nodes, and a hub with many more
    in-edges than any other node (the Loop's slots and counts)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, features)).astype(np.float32)
    edges = rng.integers(0, n // 2, (2, 3 * n))  # nodes n/2.. have no in- or out-edges
    hub = np.stack([rng.integers(0, n, 200), np.full(200, 7)])
    extra = np.array([[0, 3, 3, 9, 9], [0, 3, 5, 4, 4]])  # loops, a duplicate
    edge_index = np.concatenate([edges, hub, extra], axis=1)
    return x, edge_index[:, rng.permutation(edge_index.shape[1])]


def _alone(path: Path, x: np.ndarray, edge_index: np.ndarray, threads: int) -> np.ndarray:
    """The portable file run as any consumer runs it: onnxruntime, no edgegcl code."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(["embeddings"], {"x": x, "edge_index": edge_index})[0]


@pytest.mark.parametrize("features, activation", [(12, "prelu"), (40, "prelu"), (40, "elu"),
                                                  (40, "relu"), (12, "rrelu")])
def test_onnxruntime_alone_matches_torch_at_any_thread_count(tmp_path: Path, features: int,
                                                             activation: str) -> None:
    """12 -> 16 aggregates x first, 40 -> 16 transforms first: both layer orders. Every thread
    count gives the same bits (each node's entries summed one after another by the Loop)."""
    ckpt = _checkpoint(features, activation)
    encoder, path = ckpt.encoder, _export(ckpt, tmp_path / "m.onnx")
    x, edge_index = _hub_graph(600, features, seed=features)
    with torch.no_grad():
        expected = encoder(torch.from_numpy(x), torch.from_numpy(edge_index)).numpy()
    one = _alone(path, x, edge_index, threads=1)
    np.testing.assert_allclose(one, expected, atol=1e-5, rtol=0)
    for threads in (2, 4):
        np.testing.assert_array_equal(_alone(path, x, edge_index, threads), one)
    # the runtime, which cuts the same file into its stages, agrees
    np.testing.assert_allclose(EncoderSession(path, threads=2).embed(x, edge_index), one,
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize("graph", ["no edges", "one node", "only self-loops", "a star"])
def test_onnxruntime_alone_on_degenerate_graphs(tmp_path: Path, graph: str) -> None:
    ckpt = _checkpoint(40)
    encoder, path = ckpt.encoder, _export(ckpt, tmp_path / "m.onnx")
    n = 1 if graph == "one node" else 30
    x = np.random.default_rng(3).standard_normal((n, 40)).astype(np.float32)
    edge_index = {"no edges": np.zeros((2, 0), dtype=np.int64),
                  "one node": np.array([[0], [0]]),
                  "only self-loops": np.stack([np.arange(n)] * 2),
                  "a star": np.stack([np.arange(1, n), np.zeros(n - 1, dtype=np.int64)])}[graph]
    with torch.no_grad():
        expected = encoder(torch.from_numpy(x), torch.from_numpy(edge_index)).numpy()
    np.testing.assert_allclose(_alone(path, x, edge_index, 1), expected, atol=1e-5, rtol=0)


def _all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    nodes = list(graph.node)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                nodes += _all_nodes(attr.g)
    return nodes


def test_the_portable_graph_is_standard_onnx(tmp_path: Path) -> None:
    fp32 = _export(_checkpoint(40), tmp_path / "m.onnx")
    int8 = tmp_path / "m.int8.onnx"
    quantize_int8(fp32, int8)
    for path in (fp32, int8):
        model = onnx.load(str(path))
        onnx.checker.check_model(model, full_check=True)
        nodes = _all_nodes(model.graph)
        assert {n.domain for n in nodes} <= {"", "ai.onnx"}
        assert {n.op_type for n in nodes} <= PORTABLE_OPS, {n.op_type for n in nodes}
        assert [i.name for i in model.graph.input] == ["x", "edge_index"]
        assert [o.name for o in model.graph.output] == ["embeddings"]
    assert {n.op_type for n in onnx.load(str(int8)).graph.node} >= {"MatMulInteger"}


def test_the_runtime_runs_the_stages_of_the_same_file(tmp_path: Path) -> None:
    """The runtime cuts the file into its dense stages: no Loop left (the aggregation is the
    runtime's), W1 exposed as trained, and the embeddings of the whole file run alone (within
    float32 rounding of sums taken in another order)."""
    ckpt = _checkpoint(40)
    path = _export(ckpt, tmp_path / "m.onnx")
    session = EncoderSession(path, threads=1)
    assert session.metadata.interface == INTERFACE
    x, edge_index = _hub_graph(300, 40, seed=1)
    alone = portable_session(path).run(["embeddings"], {"x": x, "edge_index": edge_index})[0]
    np.testing.assert_allclose(session.embed(x, edge_index), alone, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(session.stage0_weight,
                                  ckpt.encoder.conv1.lin.weight.detach().t().numpy())
    cut = onnx.load_from_string(stage_model((tmp_path / "m.onnx").read_bytes()))
    assert not {n.op_type for n in cut.graph.node} & {"Loop", "TopK", "NonZero"}
    assert [i.name for i in cut.graph.input] == ["x", "a1", "a2"]
    assert [o.name for o in cut.graph.output] == ["z0", "z1", "embeddings", "w1"]


@pytest.mark.parametrize("damage, needle", [
    ("no a2", "no node computes 'edge_index'|computed by a Loop node"),
    ("no types", "declares no type for"),
    ("no a1", "declares no aggregated tensor a1"),
])
def test_a_portable_file_that_cannot_be_cut_is_one_line(tmp_path: Path, damage: str,
                                                        needle: str) -> None:
    path = _export(_checkpoint(40), tmp_path / "m.onnx")
    model = onnx.load(str(path))
    keep = {"no a2": {"a1", "z0", "z1"}, "no types": {"a1", "a2"}, "no a1": set()}[damage]
    infos = [v for v in model.graph.value_info if v.name in keep]
    del model.graph.value_info[:]
    model.graph.value_info.extend(infos)
    onnx.save(model, str(path))
    _alone(path, *_hub_graph(50, 40, seed=2), threads=1)  # still a valid model for onnxruntime
    with pytest.raises(InputError, match=f"cannot be cut into its stages .*({needle})"):
        EncoderSession(path)


def test_the_cutter_refuses_bytes_that_are_no_model() -> None:
    rng = np.random.default_rng(0)
    for blob in (b"", b"\x08", b"\xff" * 20, rng.bytes(500), b"\x3a\x05abc"):
        with pytest.raises(ModelFormatError):
            stage_model(blob)


# --------------------------------------------------------------------------- without torch

def _site_dir(module: str) -> Path:
    """The folder a module was imported from (a package's parent)."""
    return Path(__import__(module).__file__).resolve().parent


def _venv_without_torch(root: Path, packages: list[str]) -> Path:
    """A fresh virtual environment that sees only ``packages`` (linked from this one, with
    their shared libraries and metadata): no torch, no edgegcl. Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")],
                   check=True, capture_output=True)
    libs = root / "libs"
    libs.mkdir()
    for package in packages:
        folder = _site_dir(package)
        for path in [folder, *folder.parent.glob(f"{package}.libs"),
                     *folder.parent.glob(f"{package}-*.dist-info")]:
            (libs / path.name).symlink_to(path)
    lines = [str(libs)]
    if "setuptools" in packages:  # setuptools replaces the standard library's distutils
        (libs / "_distutils_hack").symlink_to(_site_dir("_distutils_hack"))
        lines.append("import _distutils_hack; _distutils_hack.add_shim()")
    site = next((root / "venv" / "lib").glob("python3*/site-packages"))
    (site / "libs.pth").write_text("\n".join(lines) + "\n")
    return root / "venv" / "bin" / "python"


_PLAIN = """
import json, sys
import numpy as np, onnxruntime as ort
try:
    import torch
except ImportError:
    pass
else:
    sys.exit("torch is importable")
graph = np.load(sys.argv[2])
out = []
for threads in (1, 2):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(sys.argv[1], options)
    out.append(session.run(["embeddings"], {"x": graph["x"], "edge_index": graph["edge_index"]})[0])
np.save(sys.argv[3], np.stack(out))
"""


def test_plain_onnxruntime_runs_the_file_in_a_venv_without_torch(tmp_path: Path) -> None:
    ckpt = _checkpoint(40)
    encoder, path = ckpt.encoder, _export(ckpt, tmp_path / "m.onnx")
    x, edge_index = _hub_graph(400, 40, seed=5)
    np.savez(tmp_path / "g.npz", x=x, edge_index=edge_index)
    python = _venv_without_torch(tmp_path, ["numpy", "onnxruntime"])
    proc = subprocess.run([str(python), "-c", _PLAIN, str(path), str(tmp_path / "g.npz"),
                           str(tmp_path / "out.npy")], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    one, two = np.load(tmp_path / "out.npy")
    with torch.no_grad():
        expected = encoder(torch.from_numpy(x), torch.from_numpy(edge_index)).numpy()
    np.testing.assert_allclose(one, expected, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(one, two)


def test_pip_install_export_gives_a_working_command_without_torch(tmp_path: Path) -> None:
    """`pip install ./edgegcl_embed` (offline here: no index, its dependencies already in the venv)
    installs edgegcl_embed and the edgegcl-embed command into a venv without torch."""
    pytest.importorskip("setuptools", minversion="77")  # edgegcl_embed/pyproject.toml's build backend
    python = _venv_without_torch(tmp_path, ["numpy", "scipy", "onnxruntime", "setuptools"])
    source = tmp_path / "edgegcl_embed"  # a copy: the build writes into the folder it builds
    shutil.copytree(REPO / "edgegcl_embed", source,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
                           str(source)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    fp32 = _export(_checkpoint(40), tmp_path / "m.onnx")
    int8 = tmp_path / "m.int8.onnx"
    quantize_int8(fp32, int8)
    x, edge_index = _hub_graph(300, 40, seed=6)
    save_npz(tmp_path / "g.npz", x, edge_index)
    command = python.parent / "edgegcl-embed"
    for model in (fp32, int8):
        out = tmp_path / f"{model.stem}.npy"
        proc = subprocess.run([str(command), str(model), "--graph", str(tmp_path / "g.npz"),
                               "--out", str(out), "--threads", "2"], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        expected = EncoderSession(model, threads=2, kernel="scipy").embed(x, edge_index)
        np.testing.assert_array_equal(np.load(out), expected)  # the command's kernel, here
    where = subprocess.run([str(python), "-c", "import json, edgegcl_embed, sys; print(json.dumps("
                            "[edgegcl_embed.__file__, 'torch' in sys.modules]))"],
                           capture_output=True, text=True, check=True, cwd=python.parent,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    installed, torch_loaded = json.loads(where.stdout)
    assert Path(installed).is_relative_to(tmp_path / "venv") and not torch_loaded
    # bad input is one line, exit 2, nothing written
    x[3, 1] = np.nan
    save_npz(tmp_path / "bad.npz", x, edge_index)
    proc = subprocess.run([str(command), str(fp32), "--graph", str(tmp_path / "bad.npz"),
                           "--out", str(tmp_path / "bad.npy")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "row 3" in proc.stderr
    assert not (tmp_path / "bad.npy").exists()
