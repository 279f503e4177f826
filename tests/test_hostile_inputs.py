"""Hostile input files (issue 23): every failure is one line, nothing runs, nothing big is
allocated. A seeded fuzz feeds a few hundred small bad graph files to both readers of user
graphs (``edgegcl.data.load_graph`` and the runtime's ``load_npz`` + ``check_graph``), then a
few end-to-end runs check the commands' exit code 2 and single stderr line.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from helpers import capture
from torch_geometric.data import Data

from edgegcl.cli.main import main as edgegcl_main
from edgegcl.training.config import TrainConfig
from edgegcl.data import load_graph
from edgegcl.errors import UsageError
from edgegcl.nn.model import GCNEncoder
from edgegcl.onnx.export import export_encoder
from edgegcl.training.checkpoint import Checkpoint
from edgegcl.training.curves import FIELDS, csv_text
from edgegcl_embed.errors import InputError
from edgegcl_embed.graph import check_graph, load_npz

# One entry per probe category: (name, what is tried). The fuzz below draws every case from
# one of these, so a report can count the categories tried and those that failed cleanly.
PROBES: list[tuple[str, str]] = [
    ("npz-dtype", "x, edge_index or y of strings, complex, bool or float (edges, labels)"),
    ("npz-shape", "x 1-D / 3-D / without rows or columns, edge_index not [2, E], y too short"),
    ("npz-nonfinite", "NaN, inf or -inf somewhere in a dense x"),
    ("npz-edge-range", "an edge index of -1, -2**63, num_nodes, num_nodes + k or 2**62"),
    ("npz-labels", "a label of -1, -2**62, num_nodes, 10**9 or 2**62"),
    ("npz-missing", "x or edge_index absent, or an empty archive"),
    ("npz-pickle", "an object-dtype (pickled) member for x, edge_index or y"),
    ("npz-huge-header", "a member whose .npy header declares 1e12 rows, a row more or less "
                        "than its data, or a negative shape"),
    ("npz-bad-member", "a member that is no .npy (random bytes), or .npy format 3.0"),
    ("npz-forged-zip", "a zip entry claiming 4 GB uncompressed, or bzip2/lzma compressed"),
    ("npz-bytes", "random bytes, an empty file, a valid file truncated anywhere"),
    ("npz-bitflip", "a valid file with random bytes flipped (a clean load is also fine)"),
    ("npz-single-array", "a bare .npy renamed to .npz"),
    ("npz-sparse-x", "a CSR x with NaN, an out-of-range column, a bad indptr or x_shape"),
    ("pt-arrays", "a Data whose tensors have the npz-dtype/shape/nonfinite/edge/label faults"),
    ("pt-pickle", "a pickle that calls os.system, builtins.eval or holds numpy arrays"),
    ("pt-other", "a .pt holding a dict, a list or a bare tensor instead of a Data"),
    ("pt-bytes", "random bytes, a valid file truncated or with bytes flipped"),
    ("path", "a directory, a symlink loop, a dangling symlink, a FIFO, a missing file"),
    ("onnx-metadata", "edgegcl.num_layers = 99999999999 (end to end)"),
    ("epochs-csv", "binary, headerless, non-numeric or NUL-holding epochs.csv for edgegcl plot"),
]



# --------------------------------------------------------------------------- file builders

def _good(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A small valid graph: 3..12 nodes, 1..5 features, labels below the node count."""
    n, f = int(rng.integers(3, 13)), int(rng.integers(1, 6))
    e = int(rng.integers(1, 3 * n))
    return {"x": rng.standard_normal((n, f)).astype(np.float32),
            "edge_index": rng.integers(0, n, (2, e)),
            "y": rng.integers(0, min(n, 4), n)}


def _npz_bytes(arrays: dict[str, np.ndarray], compressed: bool = False) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    return buf.getvalue()


def _npy(shape: tuple[int, ...], descr: str, body: bytes, version: int = 1) -> bytes:
    """An .npy member with a hand-written header, so it can declare what its body is not
    (format 1.0, or 3.0: the same header in UTF-8 behind a 4-byte length)."""
    header = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode() + b"\n"
    size = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + size + header + body


def _zip(members: dict[str, bytes], method: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buf.getvalue()


def _claim_size(data: bytes, size: int) -> bytes:
    """A zip whose first central-directory entry claims ``size`` uncompressed bytes."""
    at = data.index(b"PK\x01\x02") + 24
    return data[:at] + struct.pack("<I", size) + data[at + 4:]


def _members(arrays: dict[str, np.ndarray]) -> dict[str, bytes]:
    out = {}
    for key, value in arrays.items():
        buf = io.BytesIO()
        np.lib.format.write_array(buf, value, allow_pickle=True)
        out[f"{key}.npy"] = buf.getvalue()
    return out


class _Case:
    """One generated bad file: its bytes (or a builder for paths) and who must reject it."""

    def __init__(self, probe: str, suffix: str, data: bytes | None,
                 runtime_rejects: bool = True, may_load: bool = False,
                 make: Callable[[Path], None] | None = None) -> None:
        assert probe in {name for name, _ in PROBES}
        self.probe, self.suffix, self.data = probe, suffix, data
        self.runtime_rejects, self.may_load, self.make = runtime_rejects, may_load, make


def _array_fault(rng: np.random.Generator, kind: str) -> tuple[dict[str, np.ndarray], bool]:
    """A graph with one fault of ``kind``; True when the runtime (which ignores y) rejects it."""
    g = _good(rng)
    n, f = g["x"].shape
    pick = int(rng.integers(0, 1 << 30))
    if kind == "npz-dtype":
        faults = [("x", g["x"].astype("U3"), True), ("x", g["x"].astype(np.complex64), True),
                  ("x", g["x"] > 0, True), ("edge_index", g["edge_index"].astype(np.float64), True),
                  ("edge_index", g["edge_index"].astype(bool), True),
                  ("edge_index", g["edge_index"].astype(np.complex128), True),
                  ("y", g["y"].astype(np.float32) + 0.5, False), ("y", g["y"] > 0, False),
                  ("y", g["y"].astype("U2"), False)]
    elif kind == "npz-shape":
        faults = [("x", g["x"].reshape(-1), True), ("x", g["x"][None], True),
                  ("x", g["x"][:, :0], True), ("x", g["x"][:0], True),
                  ("edge_index", g["edge_index"].reshape(-1), True),
                  ("edge_index", np.vstack([g["edge_index"]] * 2)[:3], True),
                  ("y", g["y"][:-1], False), ("y", g["y"][:, None], False)]
    elif kind == "npz-nonfinite":
        x = g["x"].copy()
        x[pick % n, pick % f] = (np.nan, np.inf, -np.inf)[pick % 3]
        faults = [("x", x, True)]
    elif kind == "npz-edge-range":
        ei = g["edge_index"].copy()
        ei[pick % 2, pick % ei.shape[1]] = (-1, -2**63, n, n + 1 + pick % 50, 2**62)[pick % 5]
        faults = [("edge_index", ei, True)]
    else:  # npz-labels
        y = g["y"].copy()
        y[pick % n] = (-1, -2**62, n, 10**9, 2**62)[pick % 5]
        faults = [("y", y, False)]
    key, value, runtime = faults[pick % len(faults)]
    return {**g, key: value}, runtime


def _npz_case(rng: np.random.Generator, probe: str) -> _Case:
    """A bad .npz of category ``probe``."""
    g = _good(rng)
    pick = int(rng.integers(0, 1 << 30))
    if probe in ("npz-dtype", "npz-shape", "npz-nonfinite", "npz-edge-range", "npz-labels"):
        arrays, runtime = _array_fault(rng, probe)
        return _Case(probe, ".npz", _npz_bytes(arrays, compressed=bool(pick % 2)), runtime)
    if probe == "npz-missing":
        options = [{"x": g["x"]}, {"edge_index": g["edge_index"], "y": g["y"]}, {}]
        return _Case(probe, ".npz", _npz_bytes(options[pick % 3]))
    if probe == "npz-pickle":
        key = ("x", "edge_index", "y")[pick % 3]
        obj = np.empty(g[key].shape, dtype=object)
        obj[...] = 1
        return _Case(probe, ".npz", _zip(_members({**g, key: obj})), key != "y")
    if probe == "npz-huge-header":
        key = ("x", "edge_index")[pick % 2]
        value = g[key]
        rows = (10**12, value.shape[0] + 1, value.shape[0] - 1, -value.shape[0])[pick % 4]
        forged = _npy((rows, *value.shape[1:]), value.dtype.str, value.tobytes())
        return _Case(probe, ".npz", _zip({**_members(g), f"{key}.npy": forged}))
    if probe == "npz-bad-member":
        key = ("x", "edge_index")[pick % 2]
        member = (rng.bytes(int(rng.integers(0, 200))) if pick % 3 else
                  _npy(g[key].shape, g[key].dtype.str, g[key].tobytes(), version=3))
        return _Case(probe, ".npz", _zip({**_members(g), f"{key}.npy": member}))
    if probe == "npz-forged-zip":
        if pick % 2:
            return _Case(probe, ".npz", _claim_size(_npz_bytes(g), 0xFFFFFFF0))
        method = (zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)[pick % 4 // 2]
        return _Case(probe, ".npz", _zip(_members(g), method))
    if probe == "npz-bytes":
        valid = _npz_bytes(g, compressed=bool(pick % 2))
        options = [rng.bytes(int(rng.integers(1, 400))), b"",
                   valid[:int(rng.integers(0, len(valid)))]]
        return _Case(probe, ".npz", options[pick % 3])
    if probe == "npz-bitflip":
        data = bytearray(_npz_bytes(g, compressed=bool(pick % 2)))
        for at in rng.integers(0, len(data), int(rng.integers(1, 6))):
            data[at] ^= int(rng.integers(1, 256))
        return _Case(probe, ".npz", bytes(data), may_load=True)
    if probe == "npz-single-array":
        buf = io.BytesIO()
        np.save(buf, g["x"])
        return _Case(probe, ".npz", buf.getvalue())
    # npz-sparse-x
    dense = g["x"] * (rng.random(g["x"].shape) < 0.5)
    rows, cols = np.nonzero(dense)
    data, indices = dense[rows, cols], cols.astype(np.int32)
    indptr = np.searchsorted(rows, np.arange(dense.shape[0] + 1)).astype(np.int32)
    shape = np.array(dense.shape, dtype=np.int64)
    fault = pick % 4
    if fault == 0:
        data, indices, indptr = np.append(data, np.nan), np.append(indices, 0), indptr.copy()
        indptr[-1] += 1
    elif fault == 1:
        data, indices = np.append(data, 1.0), np.append(indices, dense.shape[1] + pick % 9)
        indptr = indptr.copy()
        indptr[-1] += 1
    elif fault == 2:
        indptr = indptr[::-1].copy()
    else:
        shape = (np.array([10**12, 10**12]), np.array([shape[0]]), shape.astype(float))[pick % 3]
    arrays = {"x_data": data.astype(np.float32), "x_indices": indices, "x_indptr": indptr,
              "x_shape": shape, "edge_index": g["edge_index"]}
    return _Case(probe, ".npz", _npz_bytes(arrays))


class _Reduce:
    """A pickled object that calls ``func(*args)`` when unpickled (it must not be)."""

    def __init__(self, func: Callable, args: tuple) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple:
        return self.func, self.args


def _torch_bytes(obj: object) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _pt_case(rng: np.random.Generator, probe: str, marker: Path) -> _Case:
    """A bad .pt of category ``probe``; a payload that ran would create ``marker``."""
    pick = int(rng.integers(0, 1 << 30))
    if probe == "pt-arrays":
        kind = ("npz-dtype", "npz-shape", "npz-nonfinite", "npz-edge-range", "npz-labels")[pick % 5]
        arrays, _ = _array_fault(rng, kind)
        for key, value in arrays.items():  # torch holds no strings: complex is as wrong
            if value.dtype.kind == "U":
                arrays[key] = np.zeros(value.shape, np.complex64)
        return _Case(probe, ".pt", _torch_bytes(Data(**{k: torch.from_numpy(np.asarray(v))
                                                         for k, v in arrays.items()})))
    if probe == "pt-pickle":
        payloads = [_Reduce(os.system, (f"touch {marker}",)),
                    _Reduce(eval, (f"open({str(marker)!r}, 'w')",)),
                    Data(x=np.ones((3, 2), np.float32), edge_index=np.zeros((2, 1), np.int64))]
        return _Case(probe, ".pt", _torch_bytes(payloads[pick % 3]))
    if probe == "pt-other":
        g = _good(rng)
        options = [{k: torch.from_numpy(v) for k, v in g.items()}, [torch.from_numpy(g["x"])],
                   torch.from_numpy(g["x"])]
        return _Case(probe, ".pt", _torch_bytes(options[pick % 3]))
    g = _good(rng)  # pt-bytes
    valid = _torch_bytes(Data(**{k: torch.from_numpy(v) for k, v in g.items()}))
    if pick % 3 == 0:
        return _Case(probe, ".pt", rng.bytes(int(rng.integers(0, 400))))
    if pick % 3 == 1:
        return _Case(probe, ".pt", valid[:int(rng.integers(0, len(valid)))])
    data = bytearray(valid)
    for at in rng.integers(0, len(data), int(rng.integers(1, 6))):
        data[at] ^= int(rng.integers(1, 256))
    return _Case(probe, ".pt", bytes(data), may_load=True)


def _path_case(pick: int) -> _Case:
    def make(path: Path) -> None:
        kind = pick % 4
        if kind == 0:
            path.mkdir()
        elif kind == 1:
            path.symlink_to(path.name)  # itself: a loop
        elif kind == 2:
            path.symlink_to(path.with_name("absent-target"))
        else:
            os.mkfifo(path)  # reading one would block forever

    return _Case("path", (".npz", ".pt")[pick // 4 % 2], None, make=make)


FUZZ_PROBES = [name for name, _ in PROBES if name.split("-")[0] in ("npz", "pt")] + ["path"]
FUZZ_CASES = 20 * len(FUZZ_PROBES)  # generated bad graphs, each a few hundred bytes


def _case(i: int, marker: Path) -> _Case:
    """The i-th generated bad file, seeded by i."""
    rng = np.random.default_rng(i)
    probe = FUZZ_PROBES[i % len(FUZZ_PROBES)]
    if probe == "path":
        return _path_case(i // len(FUZZ_PROBES))
    return (_pt_case(rng, probe, marker) if probe.startswith("pt") else _npz_case(rng, probe))


def _one_line(fn: Callable[[], object], errors: tuple[type[BaseException], ...],
              may_load: bool) -> str | None:
    """Run ``fn``: it must raise one of ``errors`` with a single-line message (or, when
    ``may_load``, return). Returns the message, None when it loaded."""
    try:
        fn()
    except errors as exc:
        message = str(exc)
        assert message and "\n" not in message and "\r" not in message, repr(message)
        return message
    assert may_load, "a bad file was accepted"
    return None


# --------------------------------------------------------------------------- the fuzz

def test_fuzzed_bad_graphs_fail_in_one_line(tmp_path: Path) -> None:
    """A few hundred bad files: both readers raise their one-line error type and nothing
    else (any other exception fails the test with its traceback); no payload runs."""
    marker = tmp_path / "owned"
    tried: dict[str, int] = {}
    for i in range(FUZZ_CASES):
        case = _case(i, marker)
        path = tmp_path / f"case{i}{case.suffix}"
        if case.make is not None:
            case.make(path)
        else:
            path.write_bytes(case.data)
        message = _one_line(lambda: load_graph(str(path), None), (UsageError,), case.may_load)
        assert message is None or path.name in message, (case.probe, message)
        if case.suffix == ".npz":
            def runtime() -> None:  # for the model x fits: the faults are not its width
                x, edge_index = load_npz(path)
                check_graph(x, edge_index, max(1, x.shape[1]) if x.ndim == 2 else 1)

            _one_line(runtime, (InputError,), case.may_load or not case.runtime_rejects)
        tried[case.probe] = tried.get(case.probe, 0) + 1
    assert not marker.exists()
    assert set(tried) == set(FUZZ_PROBES)  # every fuzzed category was tried


def test_forged_header_allocates_nothing_it_declares(tmp_path: Path) -> None:
    """A 64-byte member declaring 1e12 x 16 float32 (64 TB): refused from its header, in one
    line naming the member and both sizes, by both readers."""
    body = np.zeros(16, dtype=np.float32).tobytes()
    path = tmp_path / "huge.npz"
    path.write_bytes(_zip({"x.npy": _npy((10**12, 16), "<f4", body),
                           "edge_index.npy": _npy((2, 1), "<i8", bytes(16))}))
    for fn, error in ((lambda: load_graph(str(path), None), UsageError),
                      (lambda: load_npz(path), InputError)):
        with pytest.raises(error) as info:
            fn()
        message = str(info.value)
        assert "x.npy" in message and str(10**12 * 16 * 4) in message and "64 bytes" in message


def test_random_bytes_are_not_a_zip_not_a_pickle(tmp_path: Path) -> None:
    path = tmp_path / "noise.npz"
    path.write_bytes(np.random.default_rng(5).bytes(256))
    for fn, error in ((lambda: load_graph(str(path), None), UsageError),
                      (lambda: load_npz(path), InputError)):
        with pytest.raises(error, match=r"not a valid \.npz \(zip\) file"):
            fn()


def test_pickled_member_is_refused_unread(tmp_path: Path) -> None:
    """An object member is refused from its header: nothing in it is unpickled."""
    marker = tmp_path / "owned"
    payload = np.empty(1, dtype=object)
    payload[0] = _Reduce(os.mkdir, (str(marker),))
    path = tmp_path / "evil.npz"
    path.write_bytes(_zip(_members({"x": payload, "edge_index": np.zeros((2, 1), np.int64)})))
    for fn, error in ((lambda: load_graph(str(path), None), UsageError),
                      (lambda: load_npz(path), InputError)):
        with pytest.raises(error, match="pickled data"):
            fn()
    assert not marker.exists()
    pickle.loads(pickle.dumps(payload[0]))  # the payload is live when unpickled
    assert marker.exists()


def test_probe_list_is_complete() -> None:
    names = [name for name, _ in PROBES]
    assert len(names) == len(set(names)) and all(what for _, what in PROBES)
    assert set(FUZZ_PROBES) <= set(names)


# --------------------------------------------------------------------------- end to end

def _one_stderr_line(proc: subprocess.CompletedProcess, prefix: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr)
    assert lines[0].startswith(prefix) and "Traceback" not in proc.stderr
    return lines[0]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "EDGEGCL_DATA": str(cwd / "data")}
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


@pytest.mark.parametrize("kind", ["huge-header", "huge-label", "random-pt"])
def test_train_on_a_hostile_graph_exits_2_in_one_line(tmp_path: Path, kind: str) -> None:
    rng = np.random.default_rng(0)
    g = _good(rng)
    bad = tmp_path / ("bad.pt" if kind == "random-pt" else "bad.npz")
    if kind == "huge-header":
        bad.write_bytes(_zip({**_members(g), "x.npy": _npy((10**12, 16), "<f4", bytes(64))}))
    elif kind == "huge-label":
        g["y"][0] = 10**9 - 7
        np.savez(bad, **g)
    else:
        bad.write_bytes(rng.bytes(300))
    before = sorted(tmp_path.iterdir())
    proc = _run(["edgegcl", "train", "--dataset", str(bad), "--epochs", "1",
                 "--device", "cpu", "--out", str(tmp_path / "run")], tmp_path)
    line = _one_stderr_line(proc, "edgegcl: error:")
    assert "bad." in line and (kind != "huge-label" or str(10**9 - 7) in line)
    assert sorted(tmp_path.iterdir()) == before  # no run directory, nothing written


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    cfg = TrainConfig(hidden_dim=8, out_dim=4, features=3)
    path = tmp_path_factory.mktemp("model") / "model.onnx"
    export_encoder(Checkpoint(GCNEncoder(3, cfg.model).eval(), cfg, 3, 0, 0), path)
    return path


@pytest.mark.parametrize("kind", ["num-layers", "huge-header"])
def test_embed_with_a_hostile_file_exits_2_in_one_line(tmp_path: Path, model_file: Path,
                                                       kind: str) -> None:
    """edgegcl.num_layers = 99999999999 used to hang growing a set of input names to 21 GB."""
    model, graph = model_file, tmp_path / "g.npz"
    g = _good(np.random.default_rng(1))
    g["x"] = np.ones((g["x"].shape[0], 3), np.float32)
    np.savez(graph, x=g["x"], edge_index=g["edge_index"])
    if kind == "num-layers":
        proto = onnx.load(str(model_file))
        for prop in proto.metadata_props:
            if prop.key == "edgegcl.num_layers":
                prop.value = "99999999999"
        model = tmp_path / "forged.onnx"
        onnx.save(proto, str(model))
    else:
        graph.write_bytes(_zip({**_members(g), "edge_index.npy":
                                _npy((2, 10**12), "<i8", g["edge_index"].tobytes())}))
    out = tmp_path / "emb.npy"
    proc = _run(["edgegcl_embed.embed", str(model), "--graph", str(graph), "--out", str(out)],
                tmp_path)
    line = _one_stderr_line(proc, "edgegcl-embed: error:")
    assert ("99999999999" in line) if kind == "num-layers" else ("edge_index.npy" in line)
    assert not out.exists()


# --------------------------------------------------------------------------- edgegcl plot

_plot = partial(capture, edgegcl_main)


def _row(epoch: int) -> dict[str, object]:
    return {f: (epoch if f == "epoch" else "" if f.endswith("micro_f1") else 0.5) for f in FIELDS}


@pytest.mark.parametrize("kind, needle", [
    ("binary", "cannot be read"),
    ("headerless", "header lacks epoch"),
    ("not-a-number", "line 3: loss = abc is not a number"),
    ("short-row", "line 2 has no"),
    ("nul", r"loss = '0\x005' is not a number"),
    ("directory", "is a directory"),
])
def test_plot_refuses_a_garbage_epochs_csv(tmp_path: Path, kind: str, needle: str) -> None:
    """Garbage epochs.csv used to plot silently: now one line naming the file, no PNG."""
    seed = tmp_path / "run" / "seed-0"
    seed.mkdir(parents=True)
    csv_file = seed / "epochs.csv"
    good = csv_text([_row(1), _row(2), _row(3)])
    if kind == "binary":
        csv_file.write_bytes(b"\xff\xfe\x00\x81" + np.random.default_rng(2).bytes(200))
    elif kind == "headerless":
        csv_file.write_text(good.split("\n", 1)[1])
    elif kind == "not-a-number":
        lines = good.splitlines(keepends=True)
        csv_file.write_text(lines[0] + lines[1] + lines[2].replace("0.5", "abc", 1) + lines[3])
    elif kind == "short-row":
        lines = good.splitlines(keepends=True)
        csv_file.write_text(lines[0] + "1,0.5\n" + lines[2])
    elif kind == "nul":
        csv_file.write_text(good.replace("0.5", "0\x005", 1))
    else:
        csv_file.mkdir()
    code, _, err = _plot(["plot", str(tmp_path / "run")])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "epochs.csv" in lines[0] and needle in lines[0], lines[0]
    assert not (tmp_path / "run" / "curves.png").exists()


NUMPY_OOM = ("Unable to allocate 7.10 GiB for an array with shape (953000000,) and data type "
             "float64")
"""What numpy's MemoryError says: the size it asked for."""


def test_out_of_memory_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Running out of memory anywhere in a command (numpy's MemoryError, torch's allocator's
    RuntimeError) is one line naming what the allocator asked for and the fix, exit 2."""
    import edgegcl.jobs.start as start
    from edgegcl.errors import is_out_of_memory

    def numpy_fails(*_: object, **__: object) -> None:
        raise MemoryError(NUMPY_OOM)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(start, "load_graph", numpy_fails)
    code, _, err = capture(edgegcl_main, ["train", "--epochs", "1", "--out", "r"])
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"edgegcl: error: out of memory ({NUMPY_OOM}); free memory")
    assert "--mode minibatch" in err and not (tmp_path / "r").exists()

    def torch_fails(*_: object, **__: object) -> None:
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: "
                           "not enough memory: you tried to allocate 7623000000 bytes.")

    monkeypatch.setattr(start, "load_graph", torch_fails)
    code, _, err = capture(edgegcl_main, ["train", "--epochs", "1", "--out", "r"])
    assert code == 2 and "out of memory ([enforce fail" in err and err.count("\n") == 1
    assert not is_out_of_memory(RuntimeError("an illegal memory access was encountered"))


def test_edgegcl_embed_out_of_memory_is_one_line(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import edgegcl_embed.embed as embed

    def fails(*_: object, **__: object) -> None:
        raise MemoryError(NUMPY_OOM)

    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    graph = tmp_path / "g.npz"
    np.savez(graph, x=np.ones((3, 2), np.float32), edge_index=np.zeros((2, 1), np.int64))
    monkeypatch.setattr(embed, "_embed", fails)
    code, _, err = capture(embed.main, [str(model), "--graph", str(graph), "--out",
                                        str(tmp_path / "e.npy")])
    assert code == 2 and err == (f"edgegcl-embed: error: out of memory ({NUMPY_OOM}); free "
                                 "memory, or embed in batches (--batch-size) or from a graph "
                                 "folder (edgegcl convert), read a batch at a time\n")


def test_a_table_label_beyond_the_node_count_is_refused_before_allocating(
        tmp_path: Path) -> None:
    """A label of 10^12 in a node table would name a class per integer up to it: refused in
    one line, as a graph file's labels must be below the node count."""
    (tmp_path / "e.csv").write_text("src,dst\na,b\nb,c\n")
    (tmp_path / "n.csv").write_text("id,f,label\na,1,0\nb,2,1000000000000\nc,3,1\n")
    with pytest.raises(UsageError, match=r"label 1000000000000 is not below the number of "
                                         r"labelled nodes \(3\)"):
        load_graph(str(tmp_path / "e.csv"), None, node_table=tmp_path / "n.csv")


def test_a_table_with_holes_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A CSV made with truncate (2 GiB of holes, which read as NUL bytes) is one line before a
    byte is read or parsed, where the file system tells holes apart."""
    import os

    from edgegcl_embed.errors import InputError
    from edgegcl_embed.tables import edge_id_chunks, read_tables

    path = tmp_path / "sparse.csv"
    path.write_text("source,target\n0,1\n")
    os.truncate(path, 1 << 31)
    with open(path, "rb") as fh:
        if not hasattr(os, "SEEK_HOLE") or os.lseek(fh.fileno(), 0, os.SEEK_HOLE) >= (1 << 31):
            pytest.skip("this file system does not report holes")
    for read in (lambda: read_tables(path), lambda: next(edge_id_chunks(path, 1000))):
        with pytest.raises(InputError, match="has unwritten regions"):
            read()
