"""Tests for edgegcl.data: synthetic generator, PyG dataset loading, user files, validation."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import urllib.error
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.datasets import Planetoid

from edgegcl.data import DATASETS, SyntheticSpec, load_graph, synthetic_graph, validate_graph
from edgegcl.errors import UsageError

SHARED_DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private writable cache, so tests never touch ~/.cache."""
    path = tmp_path / "cache"
    monkeypatch.setenv("EDGEGCL_DATA", str(path))
    return path


def _snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under root with its mode, size and mtime, to prove nothing was written."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for entry in [dirpath, *(os.path.join(dirpath, f) for f in filenames)]:
            st = os.stat(entry)
            out[entry] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def _usage_error(fn, *args) -> str:
    """Run fn, expect a UsageError, and return its (single-line) message."""
    with pytest.raises(UsageError) as info:
        fn(*args)
    message = str(info.value)
    assert message and "\n" not in message
    return message


def _check_contract(data: Data) -> None:
    n = data.x.size(0)
    assert data.x.dtype == torch.float32 and data.x.dim() == 2
    assert data.edge_index.dtype == torch.int64 and data.edge_index.size(0) == 2
    assert int(data.edge_index.min()) >= 0 and int(data.edge_index.max()) < n
    assert data.y is None or (data.y.dtype == torch.int64 and data.y.shape == (n,))
    assert isinstance(data.name, str)


# --------------------------------------------------------------------------- synthetic


def test_synthetic_is_deterministic_and_seeded() -> None:
    spec = SyntheticSpec(num_nodes=500, num_features=16, seed=3)
    a, b = load_graph(None, None, spec), load_graph("Synthetic", None, spec)
    assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index) and torch.equal(a.y, b.y)
    c = load_graph("synthetic", None, SyntheticSpec(num_nodes=500, num_features=16, seed=4))
    assert not torch.equal(a.x, c.x) and not torch.equal(a.y, c.y)
    assert a.edge_index.shape != c.edge_index.shape or not torch.equal(a.edge_index, c.edge_index)


def test_synthetic_does_not_touch_global_rng() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    load_graph(None, None, SyntheticSpec(num_nodes=200, num_features=4))
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("homophily", [0.0, 0.5, 0.9])
def test_synthetic_structure(homophily: float) -> None:
    spec = SyntheticSpec(num_nodes=4000, num_classes=4, num_features=8, avg_degree=8.0, homophily=homophily)
    data = load_graph(None, None, spec)
    _check_contract(data)
    assert data.name == "synthetic"
    assert data.x.shape == (4000, 8)
    assert torch.bincount(data.y).tolist() == [1000] * 4
    row, col = data.edge_index
    assert bool((row != col).all())
    # Undirected and coalesced: sorted by (row, col), no duplicates, every edge mirrored.
    keys = row * 4000 + col
    assert bool((keys[1:] > keys[:-1]).all())
    assert torch.equal(torch.sort(col * 4000 + row).values, keys)
    assert 7.5 <= data.edge_index.size(1) / 4000 <= 8.0
    same = (data.y[row] == data.y[col]).float().mean().item()
    assert abs(same - homophily) < 0.03


def test_synthetic_features_informative_but_not_trivial() -> None:
    data = load_graph(None, None, SyntheticSpec(num_nodes=3000, num_classes=5, num_features=64))
    perm = torch.randperm(3000, generator=torch.Generator().manual_seed(0))
    train, test = perm[:1500], perm[1500:]
    means = torch.stack([data.x[train][data.y[train] == c].mean(0) for c in range(5)])
    accuracy = (torch.cdist(data.x[test], means).argmin(1) == data.y[test]).float().mean().item()
    assert 0.4 < accuracy < 0.95  # chance is 0.2


@pytest.mark.parametrize(
    "kwargs",
    [{"num_nodes": 1}, {"num_classes": 0}, {"num_features": 0}, {"avg_degree": 0.0}, {"homophily": 1.5},
     {"num_classes": 1, "homophily": 0.5}, {"degree_exponent": 2.0}, {"degree_exponent": 11.0},
     {"degree_exponent": float("nan")}, {"max_degree": 50},
     {"degree_exponent": 2.5, "max_degree": 5}, {"degree_exponent": 2.5, "max_degree": 5000},
     {"num_nodes": 20, "avg_degree": 15.0, "degree_exponent": 9.0}],
)
def test_synthetic_spec_rejects_bad_values(kwargs: dict) -> None:
    _usage_error(lambda: SyntheticSpec(**kwargs))


def _tail_exponent(degree: torch.Tensor, d_min: int) -> float:
    """The power law's exponent fitted to the degrees from ``d_min`` on (the discrete
    maximum-likelihood estimate, Clauset, Shalizi and Newman 2009, eq. 3.7)."""
    tail = degree[degree >= d_min].double()
    return 1.0 + tail.numel() / float(torch.log(tail / (d_min - 0.5)).sum())


@pytest.mark.parametrize("gamma, max_degree, classes", [(2.5, 1000, 5), (3.0, 400, 1), (2.2, 0, 4)])
def test_power_law_degrees_have_the_tail_asked_for(gamma: float, max_degree: int,
                                                   classes: int) -> None:
    # The realised maximum is a sum of independent draws around the hub's expected degree
    # (standard deviation ~ its square root, 3 % at 1000), and the fitted exponent's standard
    # error is (gamma - 1) / sqrt(tail nodes) (~4 % here): 10 % is several of either.
    spec = SyntheticSpec(num_nodes=20000, num_classes=classes, num_features=4, avg_degree=10.0,
                         homophily=1.0 if classes == 1 else 0.8, degree_exponent=gamma,
                         max_degree=max_degree)
    data = synthetic_graph(spec)
    degree = torch.bincount(data.edge_index[0], minlength=spec.num_nodes)
    assert abs(int(degree.max()) - spec.hub_degree()) <= 0.1 * spec.hub_degree()
    assert abs(_tail_exponent(degree, 20) - gamma) <= 0.1 * gamma
    assert abs(float(degree.double().mean()) - spec.avg_degree) <= 0.05 * spec.avg_degree
    uniform = synthetic_graph(SyntheticSpec(num_nodes=20000, num_features=4))
    assert int(degree.max()) > 10 * int(torch.bincount(uniform.edge_index[0]).max())
    same = (data.y[data.edge_index[0]] == data.y[data.edge_index[1]]).double().mean()
    assert float(same) >= spec.homophily - 0.05  # coalescing hubs' repeats costs a little


def test_power_law_graph_is_seeded_and_undirected() -> None:
    spec = SyntheticSpec(num_nodes=3000, num_features=4, degree_exponent=2.5, seed=3)
    a, b = synthetic_graph(spec), synthetic_graph(spec)
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x)
    other = synthetic_graph(SyntheticSpec(num_nodes=3000, num_features=4, degree_exponent=2.5))
    assert not torch.equal(a.edge_index, other.edge_index)
    flipped = a.edge_index.flip(0)
    keys = a.edge_index[0] * 3000 + a.edge_index[1]
    assert torch.equal(torch.sort(keys).values, torch.sort(flipped[0] * 3000 + flipped[1]).values)
    assert bool((a.edge_index[0] != a.edge_index[1]).all())


# --------------------------------------------------------------------------- PyG datasets


def test_dataset_names() -> None:
    assert "Cora" in DATASETS and "synthetic" in DATASETS and len(DATASETS) == 10
    message = _usage_error(load_graph, "NotADataset", None)
    assert "Cora" in message and "Coauthor-CS" in message


@pytest.mark.skipif(not (SHARED_DATASETS / "Cora" / "raw").is_dir(), reason="shared Cora copy absent")
def test_cora_from_the_shared_root_writes_nothing_anywhere(cache: Path) -> None:
    """The raw files are parsed in memory: the root (whatever else it holds, e.g. PyG's own
    processed/ folder) and the cache stay as they were."""
    before = _snapshot(SHARED_DATASETS)
    data = load_graph("cora", SHARED_DATASETS)
    assert _snapshot(SHARED_DATASETS) == before and not cache.exists()
    _check_contract(data)
    assert data.name == "Cora"
    assert data.x.shape == (2708, 1433)
    assert int(data.y.max()) + 1 == 7
    assert data.edge_index.size(1) == 10556
    again = load_graph("Cora", SHARED_DATASETS)
    assert torch.equal(again.edge_index, data.edge_index) and torch.equal(again.x, data.x)


class _Payload:
    """Unpickling this runs code: it creates the file named in its argument."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: D105
        return (Path.touch, (self.marker,))


def _hostile_cora(root: Path, marker: Path, where: str) -> None:
    """Cora's raw files under ``root``, with a pickle that would create ``marker`` either as
    PyG's processed files (``processed``) or in place of a raw file (``raw``)."""
    shutil.copytree(SHARED_DATASETS / "Cora" / "raw", root / "Cora" / "raw")
    if where == "processed":
        processed = root / "Cora" / "processed"
        processed.mkdir()
        for name in ("data.pt", "pre_transform.pt", "pre_filter.pt"):
            torch.save(_Payload(marker), processed / name)
    else:
        import pickle

        (root / "Cora" / "raw" / "ind.cora.x").write_bytes(pickle.dumps(_Payload(marker)))


@pytest.mark.skipif(not (SHARED_DATASETS / "Cora" / "raw").is_dir(), reason="shared Cora copy absent")
def test_a_hostile_processed_folder_is_never_read(tmp_path: Path, cache: Path) -> None:
    marker = tmp_path / "owned"
    _hostile_cora(tmp_path / "root", marker, "processed")
    data = load_graph("Cora", tmp_path / "root")
    assert data.x.shape == (2708, 1433) and not marker.exists()


@pytest.mark.skipif(not (SHARED_DATASETS / "Cora" / "raw").is_dir(), reason="shared Cora copy absent")
def test_a_hostile_raw_pickle_is_one_line_and_runs_nothing(tmp_path: Path, cache: Path) -> None:
    marker = tmp_path / "owned"
    _hostile_cora(tmp_path / "root", marker, "raw")
    message = _usage_error(load_graph, "Cora", tmp_path / "root")
    assert "ind.cora" in message or "raw files" in message
    assert "pathlib" in message and "replace them" in message
    assert not marker.exists()


@pytest.mark.skipif(not (SHARED_DATASETS / "Cora" / "raw").is_dir(), reason="shared Cora copy absent")
@pytest.mark.parametrize("where", ["processed", "raw"])
def test_a_hostile_root_runs_no_code_through_the_command(tmp_path: Path, where: str) -> None:
    import subprocess
    import sys

    marker = tmp_path / "owned"
    _hostile_cora(tmp_path / "root", marker, where)
    proc = subprocess.run([sys.executable, "-m", "edgegcl", "train", "--dataset", "Cora",
                           "--root", str(tmp_path / "root"), "--epochs", "1", "--eval-every",
                           "1", "--hidden-dim", "16", "--out-dim", "8", "--proj-dim", "8",
                           "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, env={**os.environ,
                                                               "EDGEGCL_DATA": str(tmp_path / "c")})
    assert not marker.exists()
    if where == "processed":  # never read: the raw files train
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "Traceback" not in proc.stderr


def _fake_amazon_photo(root: Path) -> None:
    """A 6-node graph in the raw format PyG's Amazon class reads (scipy CSR parts in an npz)."""
    raw = root / "Photo" / "raw"
    raw.mkdir(parents=True)
    adj_indptr = np.array([0, 1, 2, 3, 4, 5, 5])
    adj_indices = np.array([1, 2, 0, 4, 5])
    attr = np.eye(6, 3, dtype=np.float32) + np.eye(6, 3, k=-3, dtype=np.float32)
    np.savez(
        raw / "amazon_electronics_photo.npz",
        adj_data=np.ones(5, dtype=np.float32), adj_indices=adj_indices, adj_indptr=adj_indptr, adj_shape=[6, 6],
        attr_data=attr[attr > 0], attr_indices=np.nonzero(attr)[1], attr_indptr=np.arange(7), attr_shape=[6, 3],
        labels=np.array([0, 1, 0, 1, 0, 1]),
    )


def _make_read_only(root: Path) -> None:
    for dirpath, _, filenames in os.walk(root):
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o444)
        os.chmod(dirpath, 0o555)


def _make_writable(root: Path) -> None:
    for dirpath, _, _ in os.walk(root):
        os.chmod(dirpath, stat.S_IRWXU)


def test_read_only_root_is_read_in_place(tmp_path: Path, cache: Path) -> None:
    root = tmp_path / "ro"
    _fake_amazon_photo(root)
    _make_read_only(root)
    try:
        before = _snapshot(root)
        data = load_graph("Photo", root)
        assert _snapshot(root) == before
    finally:
        _make_writable(root)
    _check_contract(data)
    assert data.name == "Amazon-Photo" and data.x.shape == (6, 3)
    assert data.edge_index.size(1) == 10  # 5 directed edges made undirected by PyG
    assert not cache.exists()


def test_writable_root_is_not_written_either(tmp_path: Path, cache: Path) -> None:
    _fake_amazon_photo(tmp_path / "rw")
    before = _snapshot(tmp_path / "rw")
    data = load_graph("amazon-photo", tmp_path / "rw")
    assert data.x.shape == (6, 3)
    assert _snapshot(tmp_path / "rw") == before and not cache.exists()


def test_missing_dataset_names_raw_dir(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(self: Planetoid) -> None:
        assert socket.getdefaulttimeout() is not None  # downloads are time-bounded
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(Planetoid, "download", offline)
    message = _usage_error(load_graph, "Cora", tmp_path / "empty")
    assert str(tmp_path / "empty" / "Cora" / "raw") in message
    assert "ind.cora.x" in message and "ind.cora.graph" in message and "no network" in message
    assert socket.getdefaulttimeout() is None


def test_missing_dataset_in_read_only_root_does_not_download(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def forbidden(self: Planetoid) -> None:
        raise AssertionError("must not download into a read-only root")

    monkeypatch.setattr(Planetoid, "download", forbidden)
    root = tmp_path / "ro"
    root.mkdir()
    _make_read_only(root)
    try:
        message = _usage_error(load_graph, "CiteSeer", root)
        assert not any(root.iterdir())
    finally:
        _make_writable(root)
    assert str(root / "CiteSeer" / "raw") in message and "ind.citeseer.x" in message


# --------------------------------------------------------------------------- user files


def _graph(n: int = 5) -> Data:
    return Data(
        x=torch.randn(n, 3),
        edge_index=torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]),
        y=torch.tensor([0, 1, 0, 1, 2]),
    )


def test_pt_round_trip(tmp_path: Path) -> None:
    graph = _graph()
    graph.train_mask = torch.ones(5, dtype=torch.bool)
    torch.save(graph, tmp_path / "g.pt")
    data = load_graph(str(tmp_path / "g.pt"), None)
    _check_contract(data)
    assert data.name == "g.pt"
    assert torch.equal(data.x, graph.x) and torch.equal(data.edge_index, graph.edge_index)
    assert torch.equal(data.y, graph.y)
    assert "train_mask" not in data


def test_malicious_pt_is_not_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    torch.save({"x": Payload()}, tmp_path / "evil.pt")
    message = _usage_error(load_graph, str(tmp_path / "evil.pt"), None)
    assert not marker.exists()
    assert "mkdir" in message
    torch.load(tmp_path / "evil.pt", weights_only=False)  # the payload is live when trusted
    assert marker.exists()


def test_pt_holding_something_else(tmp_path: Path) -> None:
    torch.save({"x": torch.zeros(3, 2)}, tmp_path / "d.pt")
    assert "dict" in _usage_error(load_graph, str(tmp_path / "d.pt"), None)


@pytest.mark.parametrize("suffix", [".pt", ".npz"])
def test_corrupt_and_missing_files(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"bad{suffix}"
    path.write_bytes(b"\x00garbage\x80not a real file" * 10)
    assert str(path) in _usage_error(load_graph, str(path), None)
    assert "does not exist" in _usage_error(load_graph, str(tmp_path / f"absent{suffix}"), None)


def test_npz_round_trip(tmp_path: Path) -> None:
    x = np.random.default_rng(0).normal(size=(5, 3))
    edge_index = np.array([[0, 1, 4], [1, 2, 0]], dtype=np.int32)
    np.savez(tmp_path / "g.npz", x=x, edge_index=edge_index, y=np.array([0, 1, 1, 0, 2], dtype=np.int16))
    data = load_graph(str(tmp_path / "g.npz"), None)
    _check_contract(data)
    assert torch.allclose(data.x, torch.from_numpy(x).float())
    assert data.edge_index.tolist() == edge_index.tolist() and data.y.tolist() == [0, 1, 1, 0, 2]
    np.savez(tmp_path / "noy.npz", x=x, edge_index=edge_index)
    assert load_graph(str(tmp_path / "noy.npz"), None).y is None


_GOOD = {"x": np.ones((5, 2), dtype=np.float32), "edge_index": np.array([[0, 1], [1, 2]]), "y": np.arange(5)}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"edge_index": None}, "lacks array(s) edge_index"),
        ({"x": None, "edge_index": None}, "lacks array(s) x, edge_index"),
        ({"edge_index": np.array([[0, 1], [1, 5012]])}, "holds node 5012 but the graph has 5 nodes"),
        ({"edge_index": np.array([[0, -1], [1, 2]])}, "negative node index -1"),
        ({"x": np.array([[1.0, 2.0]] * 4 + [[np.nan, 0.0]])}, "NaN or inf (first in row 4)"),
        ({"x": np.array([[1.0, np.inf]] * 5)}, "NaN or inf"),
        ({"x": np.ones((1, 2)), "edge_index": np.zeros((2, 0), dtype=np.int64), "y": None}, "at least two nodes"),
        ({"edge_index": np.array([[0.0, 1.0], [1.0, 2.0]])}, "must hold integers"),
        ({"edge_index": np.array([[0, 1], [1, 2], [2, 3]])}, "shape [2, num_edges]"),
        ({"x": np.ones(5)}, "x must be 2-D"),
        ({"x": np.array(["a"] * 5).reshape(5, 1)}, "non-numeric"),
        ({"y": np.arange(4)}, "one label per node"),
        ({"y": np.array([0, 1, 0, -1, 0])}, "negative label -1"),
        ({"y": np.linspace(0, 1, 5)}, "integer class ids"),
    ],
)
def test_npz_rejects_bad_graphs(tmp_path: Path, change: dict, expected: str) -> None:
    arrays = {k: v for k, v in {**_GOOD, **change}.items() if v is not None}
    np.savez(tmp_path / "graph.npz", **arrays)
    message = _usage_error(load_graph, str(tmp_path / "graph.npz"), None)
    assert expected in message
    assert "graph.npz" in message


def test_npz_with_pickled_object_is_rejected(tmp_path: Path) -> None:
    np.savez(tmp_path / "obj.npz", x=np.array([object()] * 4).reshape(2, 2), edge_index=np.array([[0], [1]]))
    assert "np.savez" in _usage_error(load_graph, str(tmp_path / "obj.npz"), None)


def test_validate_graph_normalises_dtypes() -> None:
    graph = Data(x=torch.ones(3, 2, dtype=torch.float64), edge_index=torch.tensor([[0], [2]], dtype=torch.int32))
    graph.extra = "dropped"
    data = validate_graph(graph)
    assert data.x.dtype == torch.float32 and data.edge_index.dtype == torch.int64
    assert data.y is None and data.name == "graph" and "extra" not in data
    assert "has no node features" in _usage_error(validate_graph, Data(edge_index=torch.zeros(2, 0, dtype=torch.long)))


def test_npy_renamed_to_npz_is_rejected(tmp_path: Path) -> None:
    np.save(tmp_path / "arr.npy", np.ones((3, 2)))
    (tmp_path / "arr.npy").rename(tmp_path / "arr.npz")
    assert "single array" in _usage_error(load_graph, str(tmp_path / "arr.npz"), None)


# --------------------------------------------------------------------------- hostile values (issue 23)


@pytest.mark.parametrize("label", [5, 10**9 - 3, 2**62])
def test_labels_beyond_the_node_count_are_one_line(tmp_path: Path, label: int) -> None:
    """max(y) + 1 classes size the probes' one-hot targets: a label near 1e9 used to allocate
    64 GB after training. More classes than nodes is refused when the graph is loaded."""
    np.savez(tmp_path / "g.npz", **{**_GOOD, "y": np.array([0, 1, label, 1, 0])})
    message = _usage_error(load_graph, str(tmp_path / "g.npz"), None)
    assert f"label {label}" in message and "5 nodes" in message and "g.npz" in message


def test_as_many_classes_as_nodes_is_accepted() -> None:
    data = validate_graph(Data(x=torch.ones(5, 2), edge_index=torch.zeros(2, 0, dtype=torch.long),
                               y=torch.arange(5)))
    assert data.y.tolist() == [0, 1, 2, 3, 4]


def test_overflow_bound_is_where_float32_squared_norms_overflow() -> None:
    from edgegcl.data.validation import overflow_bound

    for f in (1, 16, 1433):
        row = np.full(f, overflow_bound(f), dtype=np.float64)
        with np.errstate(over="ignore"):
            below = np.sum(np.square((row * 0.99).astype(np.float32)), dtype=np.float32)
            above = np.sum(np.square((row * 1.01).astype(np.float32)), dtype=np.float32)
        assert np.isfinite(below) and np.isinf(above)


def test_features_whose_products_overflow_warn_in_one_line(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    """Features near 1e37 used to train at a constant loss without a word."""
    from edgegcl.data.validation import overflow_bound

    x = np.ones((5, 2), dtype=np.float32)
    x[3, 1] = 1e37
    np.savez(tmp_path / "big.npz", **{**_GOOD, "x": x})
    assert load_graph(str(tmp_path / "big.npz"), None).x[3, 1] == np.float32(1e37)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "warning" in lines[0] and "big.npz" in lines[0]
    assert "1e+37" in lines[0] and f"{overflow_bound(2):.3g}" in lines[0]
    x[3, 1] = -0.5 * overflow_bound(2)  # large, but its products stay finite
    np.savez(tmp_path / "fine.npz", **{**_GOOD, "x": x})
    load_graph(str(tmp_path / "fine.npz"), None)
    assert capsys.readouterr().err == ""


def test_float64_features_beyond_float32_are_named(tmp_path: Path) -> None:
    x = np.ones((5, 2))
    x[2, 0] = 1e300
    np.savez(tmp_path / "wide.npz", **{**_GOOD, "x": x})
    message = _usage_error(load_graph, str(tmp_path / "wide.npz"), None)
    assert "row 2" in message and "as float32" in message


@pytest.mark.parametrize("kind, expected", [("directory", "is a directory"),
                                            ("loop", "is a symlink loop"),
                                            ("dangling", "symlink to a file that does not exist")])
def test_a_path_that_is_no_file_says_what_it_is(tmp_path: Path, kind: str, expected: str) -> None:
    """A directory or a symlink loop used to be reported as "does not exist"."""
    path = tmp_path / "g.npz"
    if kind == "directory":
        path.mkdir()
    else:
        path.symlink_to(path if kind == "loop" else tmp_path / "gone.npz")
    assert expected in _usage_error(load_graph, str(path), None)


def test_big_endian_arrays_load(tmp_path: Path) -> None:
    """torch holds native byte order only; a big-endian file used to raise a ValueError."""
    np.savez(tmp_path / "be.npz", x=np.ones((5, 2), ">f4"), edge_index=np.array([[0, 1], [1, 2]], ">i8"))
    data = load_graph(str(tmp_path / "be.npz"), None)
    assert data.x.tolist() == [[1.0, 1.0]] * 5 and data.edge_index.tolist() == [[0, 1], [1, 2]]


@pytest.mark.skipif(not (SHARED_DATASETS / "Cora" / "raw").is_dir(), reason="shared Cora copy absent")
def test_a_checkpoint_or_run_naming_a_hostile_root_runs_no_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A weights-only-safe checkpoint and a run directory reach the dataset through their
    config's root (named again by the user: a file's root alone is refused before anything is
    read): poisoned after training, ``export`` and ``--resume`` refuse in one line. In this
    process: a payload that ran would leave its marker all the same."""
    from helpers import capture

    from edgegcl.cli.main import main

    root, marker, run = tmp_path / "root", tmp_path / "owned", tmp_path / "run"
    shutil.copytree(SHARED_DATASETS / "Cora" / "raw", root / "Cora" / "raw")
    monkeypatch.setenv("EDGEGCL_DATA", str(tmp_path / "c"))

    def edgegcl(*argv: str) -> tuple[int, str]:  # what a terminal shows, warnings included
        code, _, err = capture(main, list(argv))
        return code, err
    code, err = edgegcl("train", "--dataset", "Cora", "--root", str(root), "--epochs", "1",
                        "--eval-every", "1", "--hidden-dim", "16", "--out-dim", "8",
                        "--proj-dim", "8", "--out", str(run))
    assert code == 0, err
    import pickle

    (root / "Cora" / "raw" / "ind.cora.x").write_bytes(pickle.dumps(_Payload(marker)))
    for code, err in (edgegcl("export", "--checkpoint", str(run / "checkpoint.pt"),
                              str(tmp_path / "model.onnx"), "--root", str(root)),
                      edgegcl("train", "--resume", str(run), "--epochs", "2", "--root",
                              str(root))):
        assert code == 2 and err.count("\n") == 1, err
        assert "raw files" in err and not marker.exists()
    assert not (tmp_path / "model.onnx").exists()


def test_the_flags_list_every_graph_file_reader() -> None:
    """``--help`` lists the suffixes from edgegcl.data.config (no torch); the readers are
    edgegcl.data.files's: one may not grow without the other."""
    from edgegcl.data.config import GRAPH_FILES
    from edgegcl.data.files import READERS
    from edgegcl_embed.tables import TABLE_SUFFIXES

    assert tuple(READERS) + TABLE_SUFFIXES == GRAPH_FILES


@pytest.mark.parametrize("layout", ["edgegcl", "benchmark"])
@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64])
def test_unsigned_edge_arrays_are_read_as_indices_that_fit(tmp_path: Path, layout: str,
                                                           dtype) -> None:
    """Edges of any unsigned integer type read as int64 by train and by edgegcl-embed alike; an
    index beyond int64 is one line."""
    from edgegcl_embed.errors import InputError
    from edgegcl_embed.graph import load_npz

    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 4)).astype(np.float32)
    pairs = rng.integers(0, 40, (120, 2))
    path = tmp_path / "g.npz"

    def save(edges: np.ndarray) -> None:
        if layout == "edgegcl":
            np.savez(path, x=x, edge_index=edges.T, y=np.arange(40) % 3)
        else:
            np.savez(path, node_features=x, edges=edges, node_labels=np.arange(40) % 3)

    save(pairs.astype(dtype))
    signed = load_graph(str(path), None)
    save(pairs.astype(np.int64))
    assert torch.equal(signed.edge_index, load_graph(str(path), None).edge_index)
    save(pairs.astype(dtype))
    assert load_npz(path)[1].dtype == np.int64
    if dtype == np.uint64:
        beyond = pairs.astype(np.uint64)
        beyond[0, 0] = 2**63
        save(beyond)
        with pytest.raises(UsageError, match="beyond 2\\^63 - 1"):
            load_graph(str(path), None)
        with pytest.raises(InputError, match="beyond 2\\^63 - 1"):
            load_npz(path)


def test_load_graph_reads_a_file_from_its_path_alone(tmp_path: Path) -> None:
    """``edgegcl.load_graph(path)``: a graph file needs no dataset root."""
    import edgegcl

    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.savez(tmp_path / "g.npz", x=x, edge_index=np.array([[0, 1, 2], [1, 2, 3]]))
    data = edgegcl.load_graph(tmp_path / "g.npz")
    assert data.num_nodes == 4 and torch.equal(data.x, torch.from_numpy(x))
