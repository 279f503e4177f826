"""The runtime's CSR kernels (edgegcl_embed/kernels.py): numba's and scipy's agree, the choice of
kernel is explicit, and a session gives the same embeddings whichever it uses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse
import torch
from helpers import capture

from edgegcl.training.config import TrainConfig
from edgegcl.nn.model import GCNEncoder
from edgegcl.onnx.export import export_encoder
from edgegcl.training.checkpoint import Checkpoint
from edgegcl_embed import kernels
from edgegcl_embed.adjacency import NormalisedAdjacency
from edgegcl_embed.embed import main as embed_main
from edgegcl_embed.errors import InputError
from edgegcl_embed.kernels import (ONE_SHOT_NUMBA_MIN_WORK, csr_rows_product, one_shot_kernel,
                                   resolve_kernel)
from edgegcl_embed.runtime import EncoderSession

needs_numba = pytest.mark.skipif(kernels.numba_problem() is not None,
                                 reason=str(kernels.numba_problem()))


def _edges(n: int, e: int, seed: int) -> np.ndarray:
    """Random directed edges with self-loops, a duplicate and (likely) isolated nodes."""
    edge_index = np.random.default_rng(seed).integers(0, n, (2, e))
    edge_index[:, :4] = [[0, 1, 1, 3], [0, 2, 2, 3]]
    return edge_index


@needs_numba
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("width", [1, 7, 64])
def test_numba_product_matches_scipy(index_dtype: type, width: int) -> None:
    rng = np.random.default_rng(width)
    dense = (rng.random((300, 200)) < 0.03) * rng.standard_normal((300, 200))
    dense[::25] = 0
    m = scipy.sparse.csr_matrix(dense.astype(np.float32))
    m.indices, m.indptr = m.indices.astype(index_dtype), m.indptr.astype(index_dtype)
    assert (np.diff(m.indptr) == 0).any()  # empty rows too
    h = rng.standard_normal((200, width)).astype(np.float32)
    for lo, hi in ((0, 300), (17, 18), (40, 233)):
        expected = csr_rows_product("scipy", m.data, m.indices, m.indptr, lo, hi, h)
        out = np.full((hi - lo, width), np.nan, dtype=np.float32)  # every entry overwritten
        got = csr_rows_product("numba", m.data, m.indices, m.indptr, lo, hi, h, out)
        assert got is out
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@needs_numba
@pytest.mark.parametrize("given_degrees", [False, True])
def test_numba_adjacency_matches_numpy(given_degrees: bool) -> None:
    n, edge_index = 500, _edges(500, 4000, seed=3)
    deg = np.random.default_rng(0).integers(1, 30, n).astype(np.float32) if given_degrees else None
    a = NormalisedAdjacency(edge_index, n, deg, kernel="scipy")
    b = NormalisedAdjacency(edge_index, n, deg, kernel="numba")
    np.testing.assert_array_equal(a.indptr, b.indptr)
    assert b.indices.dtype == a.indices.dtype and b.data.dtype == np.float32
    # the same entries, each row's in another order (numba keeps edge order, numpy argsorts)
    diff = (a.rows(0, n) - b.rows(0, n)).tocsr()
    diff.eliminate_zeros()
    assert diff.nnz == 0
    assert (b.indices[b.indptr[:-1]] == np.arange(n)).all()  # each row starts with its loop


@pytest.fixture(scope="module")
def encoder_and_path(tmp_path_factory: pytest.TempPathFactory) -> tuple[GCNEncoder, Path]:
    """12 features -> 32 -> 8: layer 1 aggregates x (width 12), layer 2 x W2 (width 8)."""
    torch.manual_seed(0)
    cfg = TrainConfig(hidden_dim=32, out_dim=8, features=12)
    encoder = GCNEncoder(12, cfg.model).eval()
    path = tmp_path_factory.mktemp("kernels") / "model.onnx"
    export_encoder(Checkpoint(encoder, cfg, 12, 0, 0), path)
    return encoder, path


@needs_numba
def test_session_kernels_agree_with_torch_and_across_threads(
        encoder_and_path: tuple[GCNEncoder, Path]) -> None:
    encoder, path = encoder_and_path
    n, edge_index = 3000, _edges(3000, 24000, seed=4)
    x = np.random.default_rng(4).standard_normal((n, 12)).astype(np.float32)
    with torch.no_grad():
        expected = encoder(torch.from_numpy(x), torch.from_numpy(edge_index)).numpy()
    results = {}
    for kernel in ("numba", "scipy"):
        for threads in (1, 3):
            with EncoderSession(path, threads=threads, kernel=kernel) as session:
                assert session.kernel == kernel
                results[kernel, threads] = session.embed(x, edge_index)
            assert session._pool is None  # closed by the with block
            np.testing.assert_allclose(results[kernel, threads], expected, atol=1e-5, rtol=0)
    # fixed blocks, each row summed in a fixed order: identical across thread counts
    np.testing.assert_array_equal(results["numba", 1], results["numba", 3])
    np.testing.assert_array_equal(results["scipy", 1], results["scipy", 3])


def test_sparse_work_and_the_one_shot_choice(encoder_and_path: tuple[GCNEncoder, Path],
                                             tmp_path: Path) -> None:
    _, path = encoder_and_path
    n, edge_index = 300, _edges(300, 2000, seed=5)
    x = np.zeros((n, 12), dtype=np.float32)
    session = EncoderSession(path, kernel="scipy")
    assert session.sparse_work(x, edge_index) == (2000 + n) * (12 + 8)
    assert one_shot_kernel("auto", ONE_SHOT_NUMBA_MIN_WORK - 1) == "scipy"
    assert one_shot_kernel("scipy", 10 * ONE_SHOT_NUMBA_MIN_WORK) == "scipy"
    assert one_shot_kernel("auto", ONE_SHOT_NUMBA_MIN_WORK) == resolve_kernel("auto")
    # the command embeds once: on a small graph auto keeps scipy's kernel, numba installed or not
    graph = tmp_path / "g.npz"
    np.savez(graph, x=x, edge_index=edge_index)
    code, _, err = capture(embed_main, [str(path), "--graph", str(graph), "--out",
                                        str(tmp_path / "emb.npy")])
    assert code == 0 and "scipy kernel" in err, err
    with pytest.raises(InputError, match="kernel must be one of"):
        session.kernel = "fast"
    assert session.kernel == "scipy"


def test_kernel_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match="kernel must be one of auto, numba, scipy"):
        resolve_kernel("fast")
    assert resolve_kernel("scipy") == "scipy"
    assert resolve_kernel("auto") == ("scipy" if kernels.numba_problem() else
                                      kernels.faster_kernel())
    for problem in ("numba is not installed here", "numba does not import here (Numba needs "
                                                   "NumPy 2.3 or less)"):
        monkeypatch.setattr(kernels, "numba_problem", lambda problem=problem: problem)
        assert resolve_kernel("auto") == "scipy"
        with pytest.raises(InputError, match=r"kernel 'numba' cannot run: numba (is not|does)"):
            resolve_kernel("numba")


def test_cli_kernel_without_numba_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    monkeypatch.setattr(kernels, "numba_problem", lambda: "numba is not installed here")
    model = tmp_path / "model.onnx"
    model.write_bytes(b"")  # never opened: the kernel is checked first
    out = tmp_path / "emb.npy"
    code, _, err = capture(embed_main, [str(model), "--graph", str(tmp_path / "g.npz"),
                                        "--out", str(out), "--kernel", "numba"])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "pip install numba" in lines[0], err
    assert not out.exists()


@needs_numba
@pytest.mark.parametrize("numba_s,chosen", [(1.0, "numba"), (1.05, "numba"), (1.5, "scipy")])
def test_auto_takes_the_faster_kernel(monkeypatch: pytest.MonkeyPatch, numba_s: float,
                                      chosen: str) -> None:
    """numba unless scipy's loop is faster by more than the margin (timings replaced)."""
    monkeypatch.setattr(kernels, "_faster", [])
    monkeypatch.setattr(kernels, "_product_seconds",
                        lambda kernel, *shape: numba_s if kernel == "numba" else 1.0)
    assert resolve_kernel("auto") == chosen
    monkeypatch.setattr(kernels, "_product_seconds", lambda *a: 1 / 0)  # measured once
    assert resolve_kernel("auto") == chosen


def test_the_measurement_times_a_real_product() -> None:
    assert 0 < kernels._product_seconds("scipy", 64, 4, 256, 8) < 10
