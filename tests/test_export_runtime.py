"""The torch-free runtime (edgegcl_embed/): input validation, k-hop batching, threads, the sparse
first layer, running without torch."""

from __future__ import annotations

import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import pytest
import scipy.sparse
import torch
from helpers import capture

from edgegcl.training.checkpoint import Checkpoint
from edgegcl.training.config import TrainConfig
from edgegcl.nn.augment import as_features
from edgegcl.nn.model import GCNEncoder
from edgegcl.onnx.export import export_encoder
from edgegcl.onnx.quantize import quantize_int8
from edgegcl_embed.adjacency import NormalisedAdjacency
from edgegcl_embed.contract import INTERFACE
from edgegcl_embed.embed import main as embed_main
from edgegcl_embed.errors import InputError
from edgegcl_embed.features import dense_rows_to_csr, sparse_product, use_sparse_product
from edgegcl_embed.graph import InNeighbourhoods, gcn_degree, save_npz
from edgegcl_embed.runtime import EncoderSession, block_bounds, default_block_rows

REPO = Path(__file__).resolve().parents[1]
IN_DIM = 12
SPARSE_IN_DIM = 60  # 60 -> 16 narrows: stage 0 computes x W1, which a sparse x can skip


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
    return GCNEncoder(IN_DIM, TrainConfig(hidden_dim=16, out_dim=8).model).eval()


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


def _sparse_graph(n: int, e: int, seed: int, binary: bool = True,
                  density: float = 0.05) -> tuple[scipy.sparse.csr_matrix, np.ndarray]:
    """Bag-of-words-like features (binary, or real values) with some empty rows, and edges."""
    rng = np.random.default_rng(seed)
    x = (rng.random((n, SPARSE_IN_DIM)) < density).astype(np.float32)
    if not binary:
        x *= rng.standard_normal(x.shape).astype(np.float32)
    x[:3] = 0  # nodes without features
    return scipy.sparse.csr_matrix(x), _graph(n, e, seed)[1]


@pytest.fixture(scope="module")
def sparse_encoder() -> GCNEncoder:
    torch.manual_seed(1)
    cfg = TrainConfig(hidden_dim=16, out_dim=8).model
    return GCNEncoder(SPARSE_IN_DIM, cfg).eval()


@pytest.fixture(scope="module")
def sparse_paths(tmp_path_factory: pytest.TempPathFactory,
                 sparse_encoder: GCNEncoder) -> dict[str, Path]:
    """fp32 and int8 files of a model whose first layer transforms first (it exposes W1)."""
    cfg = TrainConfig(hidden_dim=16, out_dim=8, features=SPARSE_IN_DIM)
    folder = tmp_path_factory.mktemp("sparse-model")
    paths = {"fp32": folder / "model.onnx", "int8": folder / "model.int8.onnx"}
    export_encoder(Checkpoint(sparse_encoder, cfg, SPARSE_IN_DIM, 0, 0), paths["fp32"])
    quantize_int8(paths["fp32"], paths["int8"])
    return paths


@pytest.fixture(scope="module")
def sparse_graph_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sparse-graph") / "graph.npz"
    save_npz(path, *_sparse_graph(90, 400, seed=11))
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
    for threads in (2, 4):  # fixed blocks, each summed in a fixed order: identical
        np.testing.assert_array_equal(EncoderSession(path, threads=threads).embed(x, edge_index),
                                      one)


# --------------------------------------------------------------------------- sparse first layer

def test_sparse_x_gives_the_dense_x_embeddings(sparse_paths: dict[str, Path],
                                               sparse_encoder: GCNEncoder) -> None:
    """fp32, binary features, a graph of many row blocks: the CSR product x W1 gives the
    embeddings of the model's MatMul, and of torch's dense and CSR first layers."""
    x, edge_index = _sparse_graph(3000, 24000, seed=6)
    assert 3000 // default_block_rows(3000) >= 8
    sparse = EncoderSession(sparse_paths["fp32"], first_layer="sparse")
    assert sparse.stage0_weight is not None and sparse.stage0_weight.shape == (SPARSE_IN_DIM, 16)
    dense = EncoderSession(sparse_paths["fp32"], first_layer="dense").embed(x.toarray(),
                                                                           edge_index)
    got = sparse.embed(x, edge_index)
    np.testing.assert_allclose(got, dense, atol=1e-5, rtol=0)
    # the dense x converted block by block takes the same path; any scipy sparse format works
    np.testing.assert_array_equal(sparse.embed(x.toarray(), edge_index), got)
    np.testing.assert_array_equal(sparse.embed(x.tocoo(), edge_index), got)
    with torch.no_grad():
        xt, et = torch.from_numpy(x.toarray()), torch.from_numpy(edge_index)
        for features in (xt, as_features(xt)):
            np.testing.assert_allclose(got, sparse_encoder(features, et).numpy(), atol=1e-5,
                                       rtol=0)


# INT8. onnxruntime quantises a product's float input h per run (DynamicQuantizeLinear: uint8,
# scale = (max(h, 0) - min(h, 0)) / 255, zero point round(-min / scale), round half to even)
# and multiplies the integers exactly. _exact_int8 computes that in numpy with int64 sums, so
# an INT8 stage must equal it up to float32 rounding (of the sum's conversion and the scales,
# a few ulps) and up to a rounding of h / scale that another instruction sequence may take the
# other way, one step of h's scale times |w|, where h / scale lies within 1e-4 of a tie. These
# bounds hold on every CPU whose integer products are exact; ``saturate`` computes instead what
# the uint8 x int8 kernel of x86 CPUs without VNNI computes: pairs of consecutive products
# added with int16 saturation (vpmaddubsw), the integers then summed exactly.
FLOAT_ULPS = 8 * 2.0**-24


def _exact_int8(h: np.ndarray, weight: np.ndarray, scale: np.ndarray,
                saturate: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(h quantised) x (int8 weight) x scales, float64, and the tolerance per element."""
    lo, hi = np.float32(min(h.min(), 0)), np.float32(max(h.max(), 0))
    step = np.float32((hi - lo) / np.float32(255))
    zero = np.clip(np.rint(-lo / step), 0, 255)
    ratio = h / step
    q = np.clip(np.rint(ratio) + zero, 0, 255).astype(np.int64)
    w = weight.astype(np.int64)
    if saturate:
        pairs = q[:, 0::2, None] * w[None, 0::2] + q[:, 1::2, None] * w[None, 1::2]
        ints = np.clip(pairs, -2**15, 2**15 - 1).sum(axis=1) - int(zero) * w.sum(axis=0)
    else:
        ints = (q - int(zero)) @ w
    w_real = np.abs(w * scale.astype(np.float64))
    exact = ints * (np.float64(step) * scale.astype(np.float64))
    ties = (np.abs(ratio - np.floor(ratio) - 0.5) < 1e-4).astype(np.float64)
    return exact, np.float64(step) * (ties @ w_real) + FLOAT_ULPS * np.abs(exact) + 1e-30


def _int8_weights(path: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """(int8 weight, scale) of every quantised product of an INT8 file, in graph order."""
    from edgegcl.onnx.quantize import int8_matmuls

    model = onnx.load(str(path))
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    return [(inits[w], inits[s]) for _, w, s, _ in int8_matmuls(model)]


def test_int8_stages_compute_exact_integer_products(sparse_paths: dict[str, Path],
                                                    sparse_encoder: GCNEncoder,
                                                    tmp_path: Path) -> None:
    """Stage 0 (x W1: binary and real-valued x) and stage 1 (act(a1 + b1) W2) of the shipped
    INT8 file equal their exact integer arithmetic on this CPU. Its weights are 7-bit, so no
    product pair can reach int16's limit and a CPU without VNNI computes the same integers; the
    8-bit weights written before issue 24 would differ there on these very inputs."""
    rng = np.random.default_rng(12)
    binary = (rng.random((512, SPARSE_IN_DIM)) < 0.05).astype(np.float32)
    real = binary * rng.standard_normal(binary.shape).astype(np.float32)
    a1 = rng.standard_normal((512, 16)).astype(np.float32)
    z = a1 + sparse_encoder.conv1.bias.detach().numpy()
    h1 = np.maximum(z, z * sparse_encoder.act1.weight.detach().numpy())  # PReLU, slopes <= 1
    old = tmp_path / "tensor8.onnx"
    quantize_int8(sparse_paths["fp32"], old, "tensor8")
    cases = [(0, binary, binary), (0, real, real), (1, a1, h1)]  # (stage, its rows, h)
    for path, shipped in ((sparse_paths["int8"], True), (old, False)):
        session = EncoderSession(path, threads=1)
        weights = _int8_weights(path)
        assert max(int(np.abs(w).max()) for w, _ in weights) == (64 if shipped else 127)
        for j, rows, h in cases:
            exact, tolerance = _exact_int8(h, *weights[j])
            without_vnni = _exact_int8(h, *weights[j], saturate=True)[0]
            clipped = np.abs(without_vnni - exact) > tolerance
            if shipped:  # on any CPU
                assert (np.abs(session.stage(j, rows) - exact) <= tolerance).all(), j
                assert not clipped.any(), j
            else:  # what this test would catch on a CPU without VNNI
                assert clipped.any(), j


def test_int8_sparse_and_dense_first_layer_agree(sparse_paths: dict[str, Path],
                                                 sparse_encoder: GCNEncoder) -> None:
    """Binary x, a graph of many row blocks. Stage 0: the INT8 MatMul quantises binary x
    exactly, so it and the sparse path's x (dequantised W1) agree to float32 rounding of sums
    of a row's nonzeros. Embeddings: stage 1 quantises act(a1 + b1) per block, and inputs that
    differ by rounding may flip an element by one step of its scale; through W2, A_hat
    (its largest row sum) and the 1-Lipschitz PReLU that bounds the difference."""
    x, edge_index = _sparse_graph(3000, 24000, seed=6)
    dense_x = x.toarray()
    path = sparse_paths["int8"]
    dense, sparse = (EncoderSession(path, first_layer=mode) for mode in ("dense", "sparse"))
    w1 = sparse.stage0_weight
    magnitude = np.abs(dense_x) @ np.abs(w1)
    bound = (np.diff(x.indptr).max() + 4) * FLOAT_ULPS * magnitude + 1e-30
    z0 = np.concatenate([dense.stage(0, dense_x[lo:hi])
                         for lo, hi in block_bounds(3000, default_block_rows(3000))])
    assert (np.abs(z0 - sparse_product(x, 0, 3000, w1)) <= 2 * bound).all()
    adj = NormalisedAdjacency(edge_index, 3000).rows(0, 3000)
    z = adj @ z0 + sparse_encoder.conv1.bias.detach().numpy()
    h1 = np.maximum(z, z * sparse_encoder.act1.weight.detach().numpy())
    (_, _), (w2, s2) = _int8_weights(path)
    step = (max(h1.max(), 0) - min(h1.min(), 0)) / 255
    flips = abs(adj).sum(axis=1).max() * step * np.abs(w2 * s2).sum(axis=0).max()
    got = sparse.embed(x, edge_index)
    assert np.abs(got - dense.embed(dense_x, edge_index)).max() <= flips + 1e-5
    # the dense x converted block by block takes the same path; any scipy sparse format works
    np.testing.assert_array_equal(sparse.embed(dense_x, edge_index), got)
    np.testing.assert_array_equal(sparse.embed(x.tocoo(), edge_index), got)


def test_sparse_int8_skips_quantising_x(sparse_paths: dict[str, Path]) -> None:
    """Real-valued features: INT8's sparse first layer multiplies the unquantised x by the
    dequantised W1 (to float32 rounding), where the MatMul quantises x too, within half a step
    of x's scale times |W1|."""
    x, edge_index = _sparse_graph(500, 3000, seed=7, binary=False)
    dense_x = x.toarray()
    sparse = EncoderSession(sparse_paths["int8"], first_layer="sparse")
    w1 = sparse.stage0_weight.astype(np.float64)
    exact = dense_x @ w1
    rounding = (np.diff(x.indptr).max() + 4) * FLOAT_ULPS * (np.abs(dense_x) @ np.abs(w1))
    got = sparse_product(x, 0, 500, sparse.stage0_weight)  # the sparse path's stage 0
    assert (np.abs(got - exact) <= rounding + 1e-30).all()
    dense = EncoderSession(sparse_paths["int8"], threads=1, first_layer="dense").stage(0, dense_x)
    step = (max(dense_x.max(), 0) - min(dense_x.min(), 0)) / 255
    assert (np.abs(dense - exact) <= step / 2 * np.abs(w1).sum(axis=0) + 2 * rounding).all()
    assert np.abs(dense - exact).max() > rounding.max()  # x quantised: it shows


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_sparse_first_layer_is_thread_count_invariant(sparse_paths: dict[str, Path],
                                                      precision: str) -> None:
    x, edge_index = _sparse_graph(3000, 24000, seed=8)
    path = sparse_paths[precision]
    one = EncoderSession(path, threads=1, first_layer="sparse").embed(x, edge_index)
    for threads in (2, 4):
        session = EncoderSession(path, threads=threads, first_layer="sparse")
        np.testing.assert_array_equal(session.embed(x, edge_index), one)
        np.testing.assert_array_equal(session.embed(x.toarray(), edge_index), one)
    batched = EncoderSession(path, threads=2, first_layer="sparse").embed(x, edge_index, 1100)
    if precision == "fp32":  # INT8 quantises per run: k-hop batches see other blocks
        np.testing.assert_allclose(batched, one, atol=1e-5, rtol=0)


def test_auto_first_layer_follows_density_and_precision(sparse_paths: dict[str, Path]) -> None:
    """A CSR product where it is the cheaper way (export.features), the MatMul elsewhere:
    auto gives exactly what the mode it picks gives."""
    x, edge_index = _sparse_graph(300, 2000, seed=9, density=0.01)
    dense_x = x.toarray()
    assert use_sparse_product(x, "fp32") and use_sparse_product(dense_x, "fp32")
    assert use_sparse_product(x, "int8") and not use_sparse_product(dense_x, "int8")
    full = np.ones((300, SPARSE_IN_DIM), dtype=np.float32)
    assert not use_sparse_product(full, "fp32")
    assert not use_sparse_product(scipy.sparse.csr_matrix(full), "fp32")
    for precision, path in sparse_paths.items():
        auto = EncoderSession(path)
        for features in (x, dense_x):
            mode = "sparse" if use_sparse_product(features, precision) else "dense"
            np.testing.assert_array_equal(auto.embed(features, edge_index), EncoderSession(
                path, first_layer=mode).embed(features, edge_index))


def test_dense_rows_to_csr_round_trip() -> None:
    rng = np.random.default_rng(0)
    rows = (rng.random((7, 30)) < 0.2) * rng.standard_normal((7, 30)).astype(np.float32)
    rows[2] = 0
    csr = dense_rows_to_csr(rows.astype(np.float32))
    assert csr.nnz == np.count_nonzero(rows)
    np.testing.assert_array_equal(csr.toarray(), rows)


def test_models_without_w1_densify_a_sparse_x(tmp_path: Path) -> None:
    """A model whose layer 1 aggregates first (60 -> 64 widens: no stage 0, so no W1) takes a
    sparse x too, densified block by block; only the sparse first layer is missing."""
    torch.manual_seed(2)
    cfg = TrainConfig(hidden_dim=64, out_dim=8, features=SPARSE_IN_DIM)
    widening = GCNEncoder(SPARSE_IN_DIM, cfg.model).eval()
    old = tmp_path / "widening.onnx"
    export_encoder(Checkpoint(widening, cfg, SPARSE_IN_DIM, 0, 0), old)
    session = EncoderSession(old, threads=2)
    assert session.stage0_weight is None
    x, edge_index = _sparse_graph(400, 2000, seed=10)
    with torch.no_grad():
        expected = widening(torch.from_numpy(x.toarray()), torch.from_numpy(edge_index)).numpy()
    for batch_size in (0, 150):
        np.testing.assert_allclose(session.embed(x, edge_index, batch_size), expected,
                                   atol=1e-5, rtol=0)
    with pytest.raises(InputError, match="does not expose W1"):
        EncoderSession(old, first_layer="sparse")


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
    nodes, edges = InNeighbourhoods.of(edge_index, 5).khop(np.array([4]), 2)
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


def test_cli_reads_a_sparse_x(sparse_paths: dict[str, Path], sparse_graph_file: Path,
                              tmp_path: Path) -> None:
    out = tmp_path / "emb.npy"
    for precision, path in sparse_paths.items():
        code, _, err = _embed([str(path), "--graph", str(sparse_graph_file), "--out", str(out),
                               "--force"])
        assert code == 0, err
        x, edge_index = _sparse_graph(90, 400, seed=11)
        dense = EncoderSession(path, first_layer="dense").embed(x.toarray(), edge_index)
        np.testing.assert_allclose(np.load(out), dense, atol=1e-5, rtol=0)


@pytest.mark.parametrize("flag, value, needle", [("--threads", "0", "threads must be in 1..1024"),
                                                 ("--threads", "100000", "threads must be in"),
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
    if kind.startswith("sparse"):
        csr = scipy.sparse.csr_matrix(x)
        if kind == "sparse_nan":
            csr.data[csr.indptr[4] + 1] = np.inf
        indices = csr.indices.copy()
        if kind == "sparse_index":
            indices[7] = IN_DIM + 3
        np.savez(path, x_data=csr.data, x_indices=indices, x_indptr=csr.indptr,
                 x_shape=np.array([10, IN_DIM]) if kind != "sparse_shape" else np.array([10]),
                 edge_index=edge_index)
        return path
    np.savez(path, **({"x": x} if kind == "no_edges" else {"x": x, "edge_index": edge_index}))
    return path


@pytest.mark.parametrize("kind, needle", [
    ("feature_dim", "5 features per node but the model expects 12"),
    ("edge_range", "holds node 10 but the graph has 10 nodes"),
    ("edge_dtype", "must hold integers"),
    ("nan", "row 3"),
    ("no_edges", "no edge_index"),
    ("sparse_nan", "row 4"),
    ("sparse_index", "malformed CSR"),
    ("sparse_shape", "not [num_nodes, in_dim]"),
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
    "runpy.run_module('edgegcl_embed.embed', run_name='__main__')\n"
)


def test_runtime_runs_with_torch_unimportable(model_path: Path, graph_file: Path,
                                              sparse_paths: dict[str, Path],
                                              sparse_graph_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "emb.npy"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", _NO_TORCH, str(model_path), "--graph",
                           str(graph_file), "--out", str(out), "--batch-size", "32"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with np.load(graph_file) as g:
        full = EncoderSession(model_path).embed(g["x"], g["edge_index"], batch_size=0)
    np.testing.assert_allclose(np.load(out), full, atol=1e-5, rtol=0)
    # a sparse x through the sparse first layer of a model that exposes W1, fp32 and INT8
    x, edge_index = _sparse_graph(90, 400, seed=11)
    for path in sparse_paths.values():
        proc = subprocess.run([sys.executable, "-c", _NO_TORCH, str(path), "--graph",
                               str(sparse_graph_file), "--out", str(out), "--force",
                               "--threads", "2"],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        dense = EncoderSession(path, first_layer="dense").embed(x.toarray(), edge_index)
        np.testing.assert_allclose(np.load(out), dense, atol=1e-5, rtol=0)
    # and a bad input is still one line, exit 2, without torch
    proc = subprocess.run([sys.executable, "-c", _NO_TORCH, str(model_path), "--graph",
                           str(_bad_graph(tmp_path, "edge_range")),
                           "--out", str(tmp_path / "x.npy")],
                          capture_output=True, text=True, env=env, timeout=120)
    _one_line_error(proc.returncode, proc.stderr)


# --------------------------------------------------------------------------- hostile models (issue 23)

def _forged(model_path: Path, tmp_path: Path, props: dict[str, str],
            width: str | None = None) -> Path:
    """model_path with its edgegcl.* metadata overridden, and optionally its first input's
    width made symbolic (``width``)."""
    proto = onnx.load(str(model_path))
    for prop in proto.metadata_props:
        prop.value = props.get(prop.key.removeprefix("edgegcl."), prop.value)
    if width is not None:
        proto.graph.input[0].type.tensor_type.shape.dim[1].dim_param = width
    path = tmp_path / "forged.onnx"
    onnx.save(proto, str(path))
    return path


@pytest.mark.parametrize("props, width, needle", [
    ({"num_layers": "99999999999"}, None, "num_layers=99999999999 but a "),
    ({"num_layers": "0"}, None, "num_layers=0"),
    ({"num_layers": "3"}, None, "num_layers=3 but the graph has 2 aggregated inputs"),
    ({"interface": "9"}, None, f"(it has interface 9; this edgegcl reads interface {INTERFACE})"),
    ({"interface": "-1"}, None, "(it has interface -1;"),
    ({"interface": "4"}, None, "written by an earlier edgegcl (it has interface 4;"),
    ({"in_dim": "13"}, None, f"x is {IN_DIM} wide but the metadata says 13"),
    ({"out_dim": "99999999999"}, None, "embeddings is 8 wide but the metadata says 99999999999"),
    ({}, "w", "x has shape ['num_nodes', 'w'], not [rows, width]"),
])
def test_metadata_numbers_are_bounded_by_the_graph(model_path: Path, graph_file: Path,
                                                   tmp_path: Path, props: dict[str, str],
                                                   width: str | None, needle: str) -> None:
    """Every metadata number is checked against the model's inputs and outputs before the
    runtime sizes anything by it (num_layers = 99999999999 used to hang, growing to 21 GB),
    and a file of another interface is refused before anything is read by it."""
    bad = _forged(model_path, tmp_path, props, width)
    out = tmp_path / "emb.npy"
    code, _, err = _embed([str(bad), "--graph", str(graph_file), "--out", str(out)])
    line = _one_line_error(code, err)
    assert needle in line and "forged.onnx" in line and "re-export" in line
    assert not out.exists()


def test_a_model_path_that_is_no_file_says_what_it_is(tmp_path: Path) -> None:
    (tmp_path / "dir.onnx").mkdir()
    (tmp_path / "loop.onnx").symlink_to("loop.onnx")
    for name, expected in (("dir.onnx", "is a directory"), ("loop.onnx", "is a symlink loop")):
        with pytest.raises(InputError, match=expected):
            EncoderSession(tmp_path / name)


def test_khop_stops_when_nothing_is_further_away() -> None:
    """khop must not cost one step per hop asked for once the neighbourhood is complete (a
    caller's hop count is not bounded by any graph)."""
    x, edge_index = _graph(30, 60, seed=4)
    hoods = InNeighbourhoods.of(edge_index, 30)
    targets = np.arange(3)
    far_nodes, far_edges = hoods.khop(targets, 10**12)
    nodes, edges = hoods.khop(targets, 30)  # 30 hops reach every node that can be reached
    assert np.array_equal(far_nodes, nodes) and np.array_equal(far_edges, edges)
