"""The torch-free runtime (export/): input validation, k-hop batching, threads, running
without torch."""

from __future__ import annotations

import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from helpers import capture

from edgegcl.training.checkpoint import Checkpoint
from edgegcl.config import TrainConfig
from edgegcl.nn.model import GCNEncoder
from edgegcl.onnx.export import export_encoder
from edgegcl.onnx.quantize import quantize_int8
from edgegcl_embed.adjacency import NormalisedAdjacency
from edgegcl_embed.embed import main as embed_main
from edgegcl_embed.graph import InNeighbourhoods, gcn_degree
from edgegcl_embed.runtime import EncoderSession, default_block_rows

REPO = Path(__file__).resolve().parents[1]
IN_DIM = 12


def _graph(n: int, e: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random directed graph with duplicate edges, self-loops and (likely) isolated nodes."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, IN_DIM)).astype(np.float32)
    edge_index = rng.integers(0, n, (2, e))
    edge_index[:, :5] = [[0, 0, 1, 2, 2], [0, 3, 3, 2, 2]]  # loops and a duplicate
    return x, edge_index


@pytest.fixture(scope="module")
def encoder() -> GCNEncoder:
    torch.manual_seed(0)
    return GCNEncoder(IN_DIM, TrainConfig(hidden_dim=16, out_dim=8).model_config()).eval()


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory, encoder: GCNEncoder) -> Path:
    cfg = TrainConfig(hidden_dim=16, out_dim=8, features=IN_DIM)
    path = tmp_path_factory.mktemp("model") / "model.onnx"
    export_encoder(Checkpoint(encoder, cfg, IN_DIM, 0, 0), path)
    return path


@pytest.fixture(scope="module")
def int8_path(model_path: Path) -> Path:
    path = model_path.with_name("model.int8.onnx")
    quantize_int8(model_path, path)
    return path


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("graph") / "graph.npz"
    x, edge_index = _graph(90, 400, seed=1)
    np.savez(path, x=x, edge_index=edge_index)
    return path


_embed = partial(capture, embed_main)


def _one_line_error(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, err)
    assert lines[0].startswith("edgegcl-embed: error:") and "Traceback" not in err
    return lines[0]


# --------------------------------------------------------------------------- batching

@pytest.mark.parametrize("batch_size", [1, 7, 40, 89])
def test_batched_equals_full_graph(model_path: Path, batch_size: int) -> None:
    x, edge_index = _graph(90, 400, seed=2)
    session = EncoderSession(model_path)
    full = session.embed(x, edge_index, batch_size=0)
    seen = []
    batched = session.embed(x, edge_index, batch_size=batch_size,
                            progress=lambda done, total: seen.append((done, total)))
    np.testing.assert_allclose(batched, full, atol=1e-5, rtol=0)
    assert seen[-1] == (90, 90) and len(seen) == -(-90 // batch_size)


# --------------------------------------------------------------------------- threads, exactness

def test_large_graph_exact_against_torch_batched_and_threaded(model_path: Path,
                                                              encoder: GCNEncoder) -> None:
    """A graph of many row blocks and several k-hop batches agrees with torch however it runs."""
    x, edge_index = _graph(3000, 24000, seed=4)
    assert 3000 // default_block_rows(3000) >= 8
    with torch.no_grad():
        expected = encoder(torch.from_numpy(x), torch.from_numpy(edge_index)).numpy()
    for threads, batch_size in ((1, 0), (2, 0), (3, 0), (2, 1100)):
        got = EncoderSession(model_path, threads=threads).embed(x, edge_index, batch_size)
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_thread_count_does_not_change_the_result(model_path: Path, int8_path: Path,
                                                 precision: str) -> None:
    x, edge_index = _graph(3000, 24000, seed=5)
    path = model_path if precision == "fp32" else int8_path
    one = EncoderSession(path, threads=1).embed(x, edge_index)
    for threads in (2, 4):
        many = EncoderSession(path, threads=threads).embed(x, edge_index)
        np.testing.assert_allclose(many, one, atol=1e-5, rtol=0)


def test_adjacency_is_the_gcn_normalisation() -> None:
    edge_index = np.array([[0, 1, 1, 0, 1, 2], [1, 1, 2, 2, 2, 0]])  # loop 1 -> 1, 1 -> 2 twice
    adj = NormalisedAdjacency(edge_index, 4).rows(0, 4).toarray()
    deg = np.array([2.0, 2.0, 4.0, 1.0])  # 1 + in-edges that are not loops
    a = np.eye(4)
    for s, t in edge_index.T:
        if s != t:
            a[t, s] += 1
    np.testing.assert_allclose(adj, a / np.sqrt(np.outer(deg, deg)), rtol=1e-6)


def test_khop_keeps_targets_first_and_only_needed_edges() -> None:
    # path 0 -> 1 -> 2 -> 3 -> 4 (edges point at the target): node 4 depends on 2, 3 in 2 hops
    edge_index = np.array([[0, 1, 2, 3], [1, 2, 3, 4]])
    nodes, edges = InNeighbourhoods(edge_index, 5).khop(np.array([4]), 2)
    assert nodes.tolist() == [4, 3, 2]
    assert sorted(edges.tolist()) == [2, 3]  # 3 -> 4 and 2 -> 3; 1 -> 2 only feeds node 2's output


def test_degree_ignores_self_loops_and_counts_duplicates() -> None:
    edge_index = np.array([[0, 1, 1, 0, 1], [1, 1, 2, 2, 2]])  # 1 -> 1 loop, 1 -> 2 twice
    assert gcn_degree(edge_index, 4).tolist() == [1.0, 2.0, 4.0, 1.0]


# --------------------------------------------------------------------------- CLI and bad input

def test_cli_writes_embeddings(model_path: Path, graph_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "emb.npy"
    code, _, err = _embed([str(model_path), "--graph", str(graph_file), "--out", str(out),
                           "--batch-size", "16"])
    assert code == 0, err
    with np.load(graph_file) as g:
        full = EncoderSession(model_path).embed(g["x"], g["edge_index"], batch_size=0)
    np.testing.assert_allclose(np.load(out), full, atol=1e-5, rtol=0)
    # never overwritten without --force
    before = out.read_bytes()
    code, _, err = _embed([str(model_path), "--graph", str(graph_file), "--out", str(out)])
    assert "--force" in _one_line_error(code, err) and out.read_bytes() == before
    code, _, err = _embed([str(model_path), "--graph", str(graph_file), "--out", str(out),
                           "--force", "--threads", "3"])
    assert code == 0 and "3 threads" in err, err
    np.testing.assert_allclose(np.load(out), full, atol=1e-5, rtol=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb.npy"]  # no temporary left


@pytest.mark.parametrize("flag, value, needle", [("--threads", "0", "threads must be >= 1"),
                                                 ("--batch-size", "-1", "--batch-size must be")])
def test_bad_option_exit_2(model_path: Path, graph_file: Path, tmp_path: Path, flag: str,
                           value: str, needle: str) -> None:
    out = tmp_path / "emb.npy"
    code, _, err = _embed([str(model_path), "--graph", str(graph_file), "--out", str(out),
                           flag, value])
    assert needle in _one_line_error(code, err)
    assert list(tmp_path.iterdir()) == []


def _bad_graph(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.npz"
    x, edge_index = _graph(10, 30, seed=3)
    if kind == "feature_dim":
        x = x[:, :5]
    elif kind == "edge_range":
        edge_index[1, 4] = 10
    elif kind == "edge_dtype":
        edge_index = edge_index.astype(np.float32)
    elif kind == "nan":
        x[3, 1] = np.nan
    np.savez(path, **({"x": x} if kind == "no_edges" else {"x": x, "edge_index": edge_index}))
    return path


@pytest.mark.parametrize("kind, needle", [
    ("feature_dim", "5 features per node but the model expects 12"),
    ("edge_range", "holds node 10 but the graph has 10 nodes"),
    ("edge_dtype", "must hold integers"),
    ("nan", "row 3"),
    ("no_edges", "no edge_index"),
])
def test_bad_graph_exit_2(model_path: Path, tmp_path: Path, kind: str, needle: str) -> None:
    out = tmp_path / "emb.npy"
    code, _, err = _embed([str(model_path), "--graph", str(_bad_graph(tmp_path, kind)),
                           "--out", str(out)])
    assert needle in _one_line_error(code, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{kind}.npz"]  # no output, no temp


@pytest.mark.parametrize("kind", ["corrupt", "truncated", "foreign", "missing"])
def test_bad_model_exit_2(model_path: Path, graph_file: Path, tmp_path: Path, kind: str) -> None:
    bad = tmp_path / "bad.onnx"
    if kind == "corrupt":
        bad.write_bytes(b"\x08\x07 this is not a protobuf \xff\xfe" * 20)
    elif kind == "truncated":
        bad.write_bytes(model_path.read_bytes()[:300])
    elif kind == "foreign":  # a valid ONNX model that edgegcl did not write
        node = onnx.helper.make_node("Relu", ["x"], ["y"])
        io_x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [None])
        io_y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [None])
        onnx.save(onnx.helper.make_model(onnx.helper.make_graph([node], "g", [io_x], [io_y])),
                  str(bad))
    code, _, err = _embed([str(bad), "--graph", str(graph_file), "--out", str(tmp_path / "e.npy")])
    line = _one_line_error(code, err)
    assert "bad.onnx" in line
    assert ("not an edgegcl encoder" in line) == (kind == "foreign")


# --------------------------------------------------------------------------- without torch

_NO_TORCH = (
    "import runpy, sys\n"
    "for name in ('torch', 'torch_geometric', 'edgegcl', 'onnx'):\n"
    "    sys.modules[name] = None  # import raises ImportError\n"
    "sys.argv = ['edgegcl-embed', *sys.argv[1:]]\n"
    "runpy.run_module('export.embed', run_name='__main__')\n"
)


def test_runtime_runs_with_torch_unimportable(model_path: Path, graph_file: Path,
                                              tmp_path: Path) -> None:
    out = tmp_path / "emb.npy"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", _NO_TORCH, str(model_path), "--graph",
                           str(graph_file), "--out", str(out), "--batch-size", "32"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with np.load(graph_file) as g:
        full = EncoderSession(model_path).embed(g["x"], g["edge_index"], batch_size=0)
    np.testing.assert_allclose(np.load(out), full, atol=1e-5, rtol=0)
    # and a bad input is still one line, exit 2, without torch
    proc = subprocess.run([sys.executable, "-c", _NO_TORCH, str(model_path), "--graph",
                           str(_bad_graph(tmp_path, "edge_range")),
                           "--out", str(tmp_path / "x.npy")],
                          capture_output=True, text=True, env=env, timeout=120)
    _one_line_error(proc.returncode, proc.stderr)
