"""Received run directories, checkpoints, configs and model files, as an attacker would send
them: nothing runs, nothing outside the target is touched, no reader blocks or reads without
bound, and every refusal is one line with exit code 2.

Each test draws its cases from ``PROBES`` (class, what is tried); ``test_probe_list_is_complete``
checks that every class has a test, so the suite's parametrisation is the count of probes.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import ExitStack
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from helpers import capture

from edgegcl.cli.main import main as edgegcl_main
from edgegcl_embed.embed import main as embed_main
from edgegcl_embed.errors import InputError
from edgegcl_embed.runtime import EncoderSession

PROBES: list[tuple[str, str]] = [
    ("code", "a checkpoint, a run's config.toml or a --config file naming evil.py:make, "
             "time:sleep or os:_exit, on export, resume and --config"),
    ("links", "a planted .edgegcl.lock, seed-0, config.toml, curves.png or temporary name "
              "that is a symlink to a victim file or folder"),
    ("outputs", "plot --out over an existing file, export --graph-out aliasing the model, a "
                "failed start beside another process's file"),
    ("onnx-external", "an initializer stored as external data: absolute, ../, beside the "
                      "model, in the current directory"),
    ("onnx-run", "NaN weights, INT8 scales of NaN, an input onnxruntime refuses at run time"),
    ("onnx-bounds", "an endless Loop, a ConstantOfShape of 2^26, a broadcast of two constants "
                    "to 2^24, a node of another domain; a file of another interface"),
    ("interrupt", "Ctrl-C while the worker threads embed"),
    ("environment", "RANK / WORLD_SIZE / MASTER_* left in a shell without torchrun (rank 0 and "
                    "1), SIGTERM while waiting for ranks, WORLD_SIZE=abc, a rank out of range"),
    ("api", "train_seeds on a locked or finished folder, with a label of 10^9, NaN features, "
            "bad edges; a NaN loss"),
    ("inner-values", "a checkpoint weight that is sparse, quantised, meta or integer; a "
                     "state.pt whose random state, optimiser moments or entries are wrong, or "
                     "holding a sparse or NaN tensor"),
    ("blocking", "a FIFO or /dev/zero as --config, profile, epochs.csv, state.pt, checkpoint, "
                 "profile cache"),
    ("names", "a 300-character name for --out, --resume, export, plot --out, --config, "
              "edgegcl-embed --out"),
    ("nesting", "TOML and JSON nested 100 000 deep"),
    ("numbers", "inf or NaN for lr, tau, gamma, weight_decay; budgets of 1e300; epochs 1e9; "
                "100 000 hops; a poisoned profile cache"),
    ("sizes", "synthetic graphs and widths larger than memory; a checkpoint's in_dim of 1e12"),
    ("planetoid", "Planetoid raw files declaring 150 000 columns or a forged numpy dtype"),
    ("graphs", "labelled graphs of 2 to 9 nodes, a quantized x, a damaged Data in a .pt"),
    ("signals", "SIGTERM between seeds of a 200-seed run, SIGTERM while profiling, RANK "
                "without a process group"),
    ("paths", "a checkpoint, run or config naming a dataset root, a graph file or a run "
              "directory, on export, load_run, --resume and --config"),
]

_cli = partial(capture, edgegcl_main)
MARKER_CODE = "import pathlib; pathlib.Path({marker!r}).write_text('ran')\n"


def one_line(code: int, err: str, prefix: str = "edgegcl: error:") -> str:
    """The single stderr line of a refused command (exit 2)."""
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, err)
    assert lines[0].startswith(prefix) and "Traceback" not in err
    return lines[0]


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail (TimeoutError) a block that takes longer than ``seconds``: a reader blocked on a
    FIFO is interrupted instead of hanging the suite."""
    def fire(signum: int, frame: object) -> None:
        raise TimeoutError(f"blocked for more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


TINY = ["--nodes", "60", "--features", "6", "--hidden-dim", "8", "--out-dim", "4",
        "--proj-dim", "4", "--epochs", "2", "--eval-every", "1", "--device", "cpu", "--encoder", "gcn"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run directory, copied by each test that plants something in it."""
    run = tmp_path_factory.mktemp("received") / "run"
    torch.set_num_threads(1)
    code, _, err = _cli(["train", *TINY, "--out", str(run)])
    assert code == 0, err
    return run


@pytest.fixture
def received(finished_run: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    return run


# --------------------------------------------------------------------------- code

SPECS = ["evil.py:make", "time:sleep", "os:_exit"]


def _plant_encoder(run: Path, spec: str) -> None:
    """Name ``spec`` as the encoder in the run's config.toml and its checkpoints."""
    text = re.sub(r'\nencoder = "[^"]*"', "", (run / "config.toml").read_text())
    (run / "config.toml").write_text(text.replace("[model]", f'[model]\nencoder = "{spec}"', 1))
    for ckpt in run.rglob("checkpoint.pt"):
        raw = torch.load(ckpt, weights_only=True)
        raw["config"]["encoder"] = spec
        torch.save(raw, ckpt)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("how", ["export", "resume", "config"])
def test_a_received_file_naming_code_runs_nothing(received: Path, tmp_path: Path, spec: str,
                                                  how: str) -> None:
    marker = tmp_path / "MARKER"
    (received / "evil.py").write_text(MARKER_CODE.format(marker=str(marker))
                                      + "def make(d):\n    raise SystemExit(7)\n")
    _plant_encoder(received, spec)
    before = {p: p.read_bytes() for p in received.rglob("*") if p.is_file()}
    args = {"export": ["export", str(tmp_path / "m.onnx"), "--run", str(received)],
            "resume": ["train", "--resume", str(received), "--epochs", "3"],
            "config": ["train", "--config", str(received / "config.toml"), "--out",
                       str(tmp_path / "new")]}[how]
    with deadline(60):
        code, _, err = _cli(args)
    line = one_line(code, err)
    assert "names the encoder" in line and "--encoder" in line and "nothing was run" in line
    assert not marker.exists() and not (tmp_path / "m.onnx").exists()
    assert not (tmp_path / "new").exists()
    assert _files(received) == before


def test_the_encoder_named_on_the_command_line_is_allowed(received: Path, tmp_path: Path
                                                          ) -> None:
    """Naming the recorded encoder lets it run: the refusal is about consent, not a ban."""
    marker = tmp_path / "MARKER"
    (received / "enc.py").write_text(
        MARKER_CODE.format(marker=str(marker))
        + "from edgegcl.nn.model import GCNEncoder, ModelConfig\n"
          "def make(d):\n    return GCNEncoder(d, ModelConfig(8, 4, 4))\n")
    _plant_encoder(received, "enc.py:make")
    code, _, err = _cli(["export", str(tmp_path / "m.onnx"), "--run", str(received),
                         "--encoder", str(received / "enc.py") + ":make"])
    assert marker.exists()  # the user's own code ran, as asked
    assert "names the encoder" not in err


# --------------------------------------------------------------------------- links

@pytest.mark.parametrize("planted", ["checkpoint.pt", "metrics.json", "config.toml",
                                     "seed-0/state.pt", "seed-0/epochs.csv", "seed-0"])
def test_a_received_run_is_never_read_through_a_planted_link(received: Path, tmp_path: Path,
                                                             planted: str) -> None:
    """A run whose file (or seed folder) is a link to a file elsewhere: export, load_run,
    plot and --resume refuse in one line naming the link (they read through it before)."""
    import edgegcl
    from edgegcl.errors import UsageError

    link = received / planted
    elsewhere = tmp_path / "elsewhere" / link.name
    elsewhere.parent.mkdir()
    shutil.move(str(link), str(elsewhere))
    link.symlink_to(elsewhere)
    if planted != "metrics.json":  # so that --resume would train on
        (received / "metrics.json").unlink()
    for argv in (["export", str(tmp_path / "m.onnx"), "--run", str(received)],
                 ["plot", str(received), "--out", str(tmp_path / "p.png")],
                 ["train", "--resume", str(received), "--epochs", "3"]):
        code, _, err = _cli(argv)
        assert "is a symbolic link" in one_line(code, err) and planted in err, argv
    with pytest.raises(UsageError, match="is a symbolic link"):
        edgegcl.load_run(received)
    assert not (tmp_path / "m.onnx").exists() and not (tmp_path / "p.png").exists()


def _victim(tmp_path: Path) -> tuple[Path, bytes]:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"the user's precious file\n")
    return victim, victim.read_bytes()


@pytest.mark.parametrize("how", ["resume", "new-run"])
def test_a_planted_lock_link_is_not_followed(received: Path, tmp_path: Path, how: str) -> None:
    victim, content = _victim(tmp_path)
    if how == "resume":
        (received / ".edgegcl.lock").symlink_to(victim)
        code, _, err = _cli(["train", "--resume", str(received), "--epochs", "3"])
    else:
        target = tmp_path / "empty"
        target.mkdir()
        (target / ".edgegcl.lock").symlink_to(victim)
        code, _, err = _cli(["train", *TINY, "--out", str(target)])
    assert "symbolic link" in one_line(code, err)
    assert victim.read_bytes() == content


@pytest.mark.parametrize("name", ["seed-0", "config.toml", "seed-0/epochs.csv",
                                  "seed-0/state.pt"])
def test_a_resumed_run_never_writes_through_a_planted_link(received: Path, tmp_path: Path,
                                                           name: str) -> None:
    victim, content = _victim(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    if name == "seed-0":
        shutil.copytree(received / "seed-0", elsewhere)
        shutil.rmtree(received / "seed-0")
        (received / "seed-0").symlink_to(elsewhere)
        (received / "metrics.json").unlink()
    else:
        (received / name).unlink()
        (received / name).symlink_to(victim)
        (received / "metrics.json").unlink()
    before = {p: p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()}
    code, _, err = _cli(["train", "--resume", str(received), "--epochs", "3"])
    assert code == 2 and "Traceback" not in err
    assert victim.read_bytes() == content
    assert {p: p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()} == before


def test_plot_never_writes_through_a_planted_link(received: Path, tmp_path: Path) -> None:
    victim, content = _victim(tmp_path)
    (received / "curves.png").symlink_to(victim)
    code, _, err = _cli(["plot", str(received)])
    assert "symbolic link" in one_line(code, err)
    assert victim.read_bytes() == content


def test_temporary_files_are_created_exclusively(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A link planted at the next temporary name is skipped, never opened."""
    import secrets

    from edgegcl.training.state import write_atomic

    victim, content = _victim(tmp_path)
    target = tmp_path / "config.toml"
    names = iter(["aaaaaaaa", "bbbbbbbb"])
    monkeypatch.setattr(secrets, "token_hex", lambda n: next(names))
    (tmp_path / f".config.toml.{os.getpid()}.aaaaaaaa.tmp").symlink_to(victim)
    write_atomic(target, "x = 1\n")
    assert target.read_text() == "x = 1\n" and victim.read_bytes() == content
    assert not (tmp_path / f".config.toml.{os.getpid()}.bbbbbbbb.tmp").exists()


def test_orphan_temporaries_of_a_killed_writer_are_cleaned(tmp_path: Path) -> None:
    from edgegcl.training.state import write_atomic

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    orphan = tmp_path / f".metrics.json.{dead}.0123abcd.tmp"
    orphan.write_text("half")
    write_atomic(tmp_path / "metrics.json", "{}\n")
    assert not orphan.exists() and (tmp_path / "metrics.json").read_text() == "{}\n"


# --------------------------------------------------------------------------- outputs

def test_plot_out_keeps_an_existing_file_without_force(received: Path, tmp_path: Path) -> None:
    victim, content = _victim(tmp_path)
    code, _, err = _cli(["plot", str(received), "--out", str(victim)])
    assert "--force" in one_line(code, err) and victim.read_bytes() == content
    pytest.importorskip("matplotlib")
    code, _, err = _cli(["plot", str(received), "--out", str(victim), "--force"])
    assert code == 0 and victim.read_bytes().startswith(b"\x89PNG")


def test_export_graph_out_aliasing_the_model_is_refused(received: Path, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    code, _, err = _cli(["export", str(tmp_path / "m.onnx"), "--run", str(received),
                         "--graph-out", str(tmp_path / "sub" / ".." / "m.onnx")])
    assert "one of the model files" in one_line(code, err)
    assert not (tmp_path / "m.onnx").exists()


def test_no_output_replaces_an_input_even_with_force(received: Path, tmp_path: Path) -> None:
    """--force replaces an earlier output, never what the command reads: the run's checkpoint
    (export), its epochs.csv or metrics (plot), the model or graph being embedded."""
    for name in ("checkpoint.pt", "config.toml", "metrics.json", "seed-0/checkpoint.pt",
                 "seed-0/state.pt"):  # every file of the run it exports
        target = received / name
        before = target.read_bytes()
        code, _, err = _cli(["export", str(target), "--run", str(received), "--force"])
        assert "which this command reads" in one_line(code, err) and target.read_bytes() == before
    code, _, err = _cli(["export", str(received / "m.onnx"), "--run", str(received)])
    assert code == 0, err  # an earlier export in the run's folder is replaced with --force
    code, _, err = _cli(["export", str(received / "m.onnx"), "--run", str(received), "--force"])
    assert code == 0, err
    curve = received / "seed-0" / "epochs.csv"
    text = curve.read_bytes()
    for target in (curve, received / "metrics.json"):
        kept = target.read_bytes()
        code, _, err = _cli(["plot", str(received), "--out", str(target), "--force"])
        assert "which this command reads" in one_line(code, err)
        assert target.read_bytes() == kept
    assert curve.read_bytes() == text


def test_embed_never_writes_over_its_model_or_graph(model_and_graph: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    model, graph = (Path(shutil.copy(p, tmp_path)) for p in model_and_graph)
    for target in (model, graph):
        kept = target.read_bytes()
        code, _, err = capture(embed_main, [str(model), "--graph", str(graph), "--out",
                                            str(target), "--force"])
        assert code == 2 and "which this command reads" in err, err
        assert target.read_bytes() == kept


def test_weights_that_are_not_numbers_are_one_line(received: Path, tmp_path: Path) -> None:
    """A checkpoint whose run diverged is refused where it is read (export, load_run), not
    exported or embedded as NaN."""
    import edgegcl
    from edgegcl.errors import UsageError

    ckpt = received / "checkpoint.pt"
    raw = torch.load(ckpt, weights_only=True)
    name = next(k for k, v in raw["encoder"].items() if v.is_floating_point())
    raw["encoder"][name] = torch.full_like(raw["encoder"][name], float("nan"))
    torch.save(raw, ckpt)
    code, _, err = _cli(["export", str(tmp_path / "m.onnx"), "--run", str(received)])
    assert "not numbers" in one_line(code, err) and name in err
    with pytest.raises(UsageError, match="the run diverged"):
        edgegcl.load_run(received)
    assert not (tmp_path / "m.onnx").exists()


def test_an_address_space_limit_is_honoured(model_and_graph: tuple[Path, Path]) -> None:
    """Under ``ulimit -v`` (RLIMIT_AS) 1 GiB above what is mapped: a model is read for its
    size (it reserved 2 GiB up front: a MemoryError traceback), and the memory checks take
    the limit as what is available."""
    script = (
        "import resource, sys, psutil, numpy as np\n"
        "from edgegcl_embed.runtime import EncoderSession\n"
        "from edgegcl.memory import memory_limit\n"
        "EncoderSession(sys.argv[1], threads=1)\n"
        "vms = psutil.Process().memory_info().vms\n"
        "resource.setrlimit(resource.RLIMIT_AS, (vms + (1 << 30), resource.RLIM_INFINITY))\n"
        "z = EncoderSession(sys.argv[1], threads=1).embed(np.ones((5, 3), np.float32),\n"
        "                                                 np.array([[0], [1]]))\n"
        "print(z.shape, memory_limit() <= (1 << 30))\n")
    proc = subprocess.run([sys.executable, "-c", script, str(model_and_graph[0])],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["(5,", "4)", "True"], proc.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    """``edgegcl profiles | head -0``: exit 141 (SIGPIPE), nothing on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "edgegcl", "profiles"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path)
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before the command writes
    err = proc.stderr.read().decode() if proc.stderr is not None else ""
    assert proc.wait(timeout=60) == 141 and err == "", err


def test_a_failed_start_removes_only_what_it_made(tmp_path: Path) -> None:
    from edgegcl.jobs.rundir import new_run_dir

    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(RuntimeError), ExitStack() as hold:
        run_dir, _ = new_run_dir(hold, str(out), "synthetic")
        (run_dir / "config.toml").write_text("mine")
        (run_dir / "seed-0").mkdir()
        (run_dir / "theirs.txt").write_text("another process's")
        raise RuntimeError("the start failed")
    assert sorted(p.name for p in out.iterdir()) == ["theirs.txt"]


# --------------------------------------------------------------------------- onnx

@pytest.fixture(scope="module")
def model_and_graph(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from edgegcl.nn.model import GCNEncoder, ModelConfig
    from edgegcl.onnx.export import export_encoder
    from edgegcl.training.checkpoint import Checkpoint
    from edgegcl.training.config import TrainConfig

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("onnx")
    cfg = TrainConfig(hidden_dim=8, out_dim=4, features=3)
    model = folder / "model.onnx"
    export_encoder(Checkpoint(GCNEncoder(3, ModelConfig(8, 4, 4)).eval(), cfg, 3, 0, 0), model)
    graph = folder / "g.npz"
    np.savez(graph, x=np.ones((5, 3), np.float32), edge_index=np.array([[0, 1, 2], [1, 2, 3]]))
    return model, graph


def _externalised(model: Path, target: Path, location: str) -> Path:
    """``model`` with its largest initializer moved to external data at ``location``."""
    from onnx.external_data_helper import set_external_data

    proto = onnx.load(str(model))
    tensor = max(proto.graph.initializer, key=lambda t: len(t.raw_data))
    Path(location if os.path.isabs(location) else target.parent / location).write_bytes(
        tensor.raw_data)
    set_external_data(tensor, location=location)
    tensor.ClearField("raw_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    onnx.save(proto, str(target))
    return target


@pytest.mark.parametrize("where", ["absolute", "parent", "beside", "cwd"])
def test_onnx_external_data_is_refused(model_and_graph: tuple[Path, Path], tmp_path: Path,
                                       where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model, graph = model_and_graph
    folder = tmp_path / "models"
    folder.mkdir()
    location = {"absolute": str(tmp_path / "w.bin"), "parent": "../w.bin",
                "beside": "w.bin", "cwd": "w.bin"}[where]
    forged = _externalised(model, folder / "forged.onnx", location)
    if where == "cwd":  # the data lies in the current directory only
        monkeypatch.chdir(tmp_path)
        shutil.move(str(folder / "w.bin"), str(tmp_path / "w.bin"))
    out = tmp_path / "emb.npy"
    code, _, err = capture(embed_main, [str(forged), "--graph", str(graph), "--out", str(out)])
    assert "external data" in one_line(code, err, "edgegcl-embed: error:")
    assert not out.exists()


def _with_initializer(model: Path, target: Path, pick: str, value: float) -> Path:
    proto = onnx.load(str(model))
    for tensor in proto.graph.initializer:
        if pick in tensor.name:
            array = onnx.numpy_helper.to_array(tensor).copy()
            array.fill(value)
            tensor.CopyFrom(onnx.numpy_helper.from_array(array, tensor.name))
            break
    else:
        raise AssertionError(f"no initializer named like {pick}")
    onnx.save(proto, str(target))
    return target


def test_nan_weights_are_an_error_not_exit_0(model_and_graph: tuple[Path, Path],
                                             tmp_path: Path) -> None:
    model, graph = model_and_graph
    first = onnx.load(str(model)).graph.initializer[0].name
    forged = _with_initializer(model, tmp_path / "nan.onnx", first, float("nan"))
    out = tmp_path / "emb.npy"
    code, _, err = capture(embed_main, [str(forged), "--graph", str(graph), "--out", str(out)])
    assert "not finite" in one_line(code, err, "edgegcl-embed: error:")
    assert not out.exists()


def test_int8_scales_of_nan_are_an_error(model_and_graph: tuple[Path, Path],
                                         tmp_path: Path) -> None:
    from edgegcl.onnx.quantize import quantize_int8

    model, graph = model_and_graph
    int8 = tmp_path / "m.int8.onnx"
    quantize_int8(model, int8)
    forged = _with_initializer(int8, tmp_path / "nan-scale.onnx", "scale", float("nan"))
    out = tmp_path / "emb.npy"
    code, _, err = capture(embed_main, [str(forged), "--graph", str(graph), "--out", str(out)])
    assert "finite" in one_line(code, err, "edgegcl-embed: error:")
    assert not out.exists()


def test_an_onnxruntime_run_time_error_is_one_line(model_and_graph: tuple[Path, Path]) -> None:
    session = EncoderSession(model_and_graph[0], threads=1)
    with pytest.raises(InputError, match="onnxruntime failed while running"):
        session.stage(1, np.ones((2, 99), np.float32))  # a width the model does not take


def _unbounded(model: Path, target: Path, kind: str) -> Path:
    """``model`` whose embeddings also add a scalar computed by ``kind``'s nodes: an endless
    Loop, a 2^26-element ConstantOfShape, two small constants broadcast to 2^24 elements, or
    an Add of a custom domain (whose function the file could define)."""
    from onnx import TensorProto, helper, numpy_helper

    proto = onnx.load(str(model))
    graph = proto.graph
    final = graph.output[-1].name
    producer = next(n for n in graph.node if final in n.output)
    producer.output[list(producer.output).index(final)] = "pre"
    nodes, inits = [], []
    if kind == "loop":
        body = helper.make_graph(
            [helper.make_node("Identity", ["cond"], ["cond_out"]),
             helper.make_node("Identity", ["v"], ["v_out"])], "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
             helper.make_tensor_value_info("v", TensorProto.FLOAT, [])],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
             helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [])])
        inits += [numpy_helper.from_array(np.array(2**62, np.int64), "trips"),
                  numpy_helper.from_array(np.array(True), "go"),
                  numpy_helper.from_array(np.array(0, np.float32), "v0")]
        nodes.append(helper.make_node("Loop", ["trips", "go", "v0"], ["scalar"], body=body))
    elif kind == "alloc":
        inits.append(numpy_helper.from_array(np.array([2**26], np.int64), "size"))
        nodes += [helper.make_node("ConstantOfShape", ["size"], ["big"]),
                  helper.make_node("ReduceMax", ["big"], ["scalar"], keepdims=0)]
    elif kind == "broadcast":
        inits += [numpy_helper.from_array(np.zeros((4096, 1), np.float32), "column"),
                  numpy_helper.from_array(np.zeros((1, 4096), np.float32), "row")]
        nodes += [helper.make_node("Add", ["column", "row"], ["big"]),
                  helper.make_node("ReduceMax", ["big"], ["scalar"], keepdims=0)]
    else:
        inits.append(numpy_helper.from_array(np.array(0, np.float32), "zero"))
        nodes.append(helper.make_node("Add", ["zero", "zero"], ["scalar"], domain="evil"))
        proto.functions.append(helper.make_function(  # the file defines evil.Add itself
            "evil", "Add", ["a", "b"], ["c"], [helper.make_node("Add", ["a", "b"], ["c"])],
            [helper.make_opsetid("", proto.opset_import[0].version)]))
        proto.opset_import.append(helper.make_opsetid("evil", 1))
    nodes.append(helper.make_node("Add", ["pre", "scalar"], [final]))
    graph.initializer.extend(inits)
    graph.node.extend(nodes)
    onnx.save(proto, str(target))
    return target


@pytest.mark.parametrize("kind", ["loop", "alloc", "broadcast", "domain"])
def test_an_unbounded_stage_is_refused_before_it_runs(model_and_graph: tuple[Path, Path],
                                                      tmp_path: Path, kind: str) -> None:
    """What onnxruntime would loop in or allocate by (at load: its constant folding) is
    refused from the file's bytes, in one line, within seconds."""
    model, graph = model_and_graph
    forged = _unbounded(model, tmp_path / f"{kind}.onnx", kind)
    out = tmp_path / "emb.npy"
    with deadline(30):
        code, _, err = capture(embed_main, [str(forged), "--graph", str(graph), "--out",
                                            str(out)])
    line = one_line(code, err, "edgegcl-embed: error:")
    assert re.search("not bounded|computed by a Loop node", line), line
    assert not out.exists()


def test_a_stage_returning_another_shape_is_one_line(model_and_graph: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    """A stage that computes [rows, 1] where its file declares [rows, out_dim]: one line (such
    an output used to be broadcast into every column), nothing written. Shapes are known from
    the file (edgegcl_embed.bounds), so the metadata check meets it before any run; the
    runtime checks every stage's output shape again as it runs."""
    from onnx import numpy_helper

    model, graph = model_and_graph
    proto = onnx.load(str(model))
    final = proto.graph.output[-1].name
    producer = next(n for n in proto.graph.node if final in n.output)
    producer.output[list(producer.output).index(final)] = "pre"
    proto.graph.initializer.append(numpy_helper.from_array(np.ones((4, 1), np.float32), "one"))
    proto.graph.node.append(onnx.helper.make_node("MatMul", ["pre", "one"], [final]))
    onnx.save(proto, str(tmp_path / "narrow.onnx"))
    out = tmp_path / "emb.npy"
    code, _, err = capture(embed_main, [str(tmp_path / "narrow.onnx"), "--graph", str(graph),
                                        "--out", str(out)])
    line = one_line(code, err, "edgegcl-embed: error:")
    assert "not [rows, width]" in line or "not [5, 4]" in line, line
    assert not out.exists()
    session = EncoderSession(model, threads=1)
    real = session.session.run
    session.session.run = lambda names, feeds, options=None: [  # type: ignore[method-assign]
        a[:, :1] for a in real(names, feeds, options)]
    with pytest.raises(InputError, match=r"returned .* of shape \[5, 1\] for 5 rows"):
        session.embed(np.ones((5, 3), np.float32), np.array([[0, 1, 2], [1, 2, 3]]))


def test_a_model_of_too_many_nodes_is_refused_at_once(model_and_graph: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    """20 000 Identity nodes (onnxruntime alone takes seconds to load such a graph, and a
    file of millions held the runtime for minutes): one line, counted from the bytes."""
    from onnx import helper

    model, graph = model_and_graph
    proto = onnx.load(str(model))
    final = proto.graph.output[-1].name
    producer = next(n for n in proto.graph.node if final in n.output)
    producer.output[list(producer.output).index(final)] = "t0"
    proto.graph.node.extend(helper.make_node("Identity", [f"t{i}"], [f"t{i + 1}"])
                            for i in range(20_000))
    proto.graph.node.append(helper.make_node("Identity", ["t20000"], [final]))
    onnx.save(proto, str(tmp_path / "many.onnx"))
    start = time.monotonic()
    with pytest.raises(InputError, match="holds more than 10000 nodes"):
        EncoderSession(tmp_path / "many.onnx")
    assert time.monotonic() - start < 10


def test_ctrl_c_stops_a_running_embedding(model_and_graph: tuple[Path, Path]) -> None:
    """Ctrl-C while the worker threads run a stage's blocks: the blocks not started are
    cancelled (the embedding ends at once, not after every block), and the session embeds
    again afterwards (onnxruntime's terminate flag is reset)."""
    import threading

    session = EncoderSession(model_and_graph[0], threads=2)
    real, calls = session.stage_outputs, []
    main = threading.main_thread().ident
    assert threading.get_ident() == main  # where Python runs a Ctrl-C's handler

    def slow(j: int, h: np.ndarray, carried: np.ndarray | None = None) -> tuple:
        calls.append(j)
        if len(calls) == 2:  # while the blocks run, whatever setup took: Ctrl-C
            signal.pthread_kill(main, signal.SIGINT)  # type: ignore[arg-type]
        time.sleep(0.05)
        return real(j, h, carried)

    session.stage_outputs = slow  # type: ignore[method-assign]
    rng = np.random.default_rng(0)
    x = rng.random((8192, 3), dtype=np.float32)  # 16 blocks a stage, 0.4 s on 2 threads
    edges = rng.integers(0, 8192, (2, 20000))
    # Python's own Ctrl-C (KeyboardInterrupt), whatever handler an earlier test of this
    # process left installed (a run remembers a Ctrl-C instead of raising it)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            session.embed(x, edges)
    finally:
        signal.signal(signal.SIGINT, before)
    session.close()  # waits for the workers: what was queued must not run now
    assert len(calls) < 12, calls
    session.stage_outputs = real  # type: ignore[method-assign]
    assert np.isfinite(session.embed(x[:300], edges[:, :50] % 300)).all()


def _odd(tensor: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "sparse":
        return tensor.to_sparse()
    if kind == "quantised":
        with warnings.catch_warnings():  # torch's TypedStorage note
            warnings.simplefilter("ignore", UserWarning)
            return torch.quantize_per_tensor(tensor.float(), 0.1, 0, torch.qint8)
    if kind == "meta":
        return torch.empty_like(tensor, device="meta")
    return tensor.to(torch.int64)


@pytest.mark.parametrize("kind", ["sparse", "quantised", "meta", "integer"])
def test_checkpoint_inner_values_are_one_line(received: Path, tmp_path: Path,
                                              kind: str) -> None:
    """A weight of the right shape that is not a dense float tensor: export and load_run
    refuse in one line (load_state_dict's traceback, or an integer encoder, before)."""
    import edgegcl
    from edgegcl.errors import UsageError

    ckpt = received / "checkpoint.pt"
    raw = torch.load(ckpt, weights_only=True)
    name = next(k for k, v in raw["encoder"].items() if v.dim() == 2)
    raw["encoder"][name] = _odd(raw["encoder"][name], kind)
    torch.save(raw, ckpt)
    code, _, err = _cli(["export", str(tmp_path / "m.onnx"), "--run", str(received)])
    assert name in one_line(code, err) and "does not fit" in err
    with pytest.raises(UsageError, match="does not fit"):
        edgegcl.load_run(received)


def _state_with(state: dict, kind: str) -> dict:
    trainer = state["trainer"]
    moments = trainer["optimizer"]["state"][0]
    if kind == "rng size":
        state["global_rng"] = state["global_rng"][:100]
    elif kind == "generator dtype":
        trainer["generator"] = trainer["generator"].float()
    elif kind == "moments shape":
        moments["exp_avg"] = torch.zeros(moments["exp_avg"].numel() + 3)
    elif kind == "missing":
        del trainer["optimizer"]
    elif kind == "sparse":
        moments["exp_avg_sq"] = moments["exp_avg_sq"].to_sparse()
    elif kind == "epoch negative":
        state["epoch"] = -5
    elif kind == "times text":
        state["times"] = "abc"
    elif kind in ("kept columns", "kept sample"):  # the selector's kept draw, out of range
        active = trainer["selector"]["active"][0]
        name = "left_out" if active.get("left_out") is not None else "cols"
        if kind == "kept columns":
            active[name] = torch.full_like(active[name], 10**9)
        else:
            active["sample"] = {"cols": torch.zeros(1, 3, dtype=torch.long), "block": 0,
                                "size": 1}
    else:
        moments["exp_avg"] = torch.full_like(moments["exp_avg"], float("nan"))
    return state


@pytest.mark.parametrize("kind", ["rng size", "generator dtype", "moments shape", "missing",
                                  "sparse", "nan", "epoch negative", "times text",
                                  "kept columns", "kept sample"])
def test_state_inner_values_are_one_line(received: Path, kind: str) -> None:
    """``--resume`` of a seed state whose values do not fit the seed: one line naming
    state.pt and the fix, before an epoch trains (torch's traceback, at once or at the
    first optimiser step, before)."""
    path = received / "seed-0" / "state.pt"
    torch.save(_state_with(torch.load(path, weights_only=True), kind), path)
    code, _, err = _cli(["train", "--resume", str(received), "--epochs", "3"])
    line = err.strip().splitlines()[-1]  # after the run's start lines
    assert code == 2 and line.startswith("edgegcl: error:") and "Traceback" not in err, err
    assert "state.pt" in line and ("restart that seed" in line or "afresh" in line), line
    assert "3/3" not in err  # no epoch trained


# --------------------------------------------------------------------------- blocking readers

def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


BLOCKING = ["config", "profile", "epochs.csv", "state.pt", "checkpoint"]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("what", BLOCKING)
def test_a_fifo_or_device_is_refused_at_once(received: Path, tmp_path: Path, what: str,
                                             kind: str) -> None:
    def plant(path: Path) -> Path:
        if path.exists():
            path.unlink()
        if kind == "fifo":
            return _fifo(path)
        path.symlink_to("/dev/zero")
        return path

    if what == "config":
        args = ["train", "--config", str(plant(tmp_path / "c.toml"))]
    elif what == "profile":
        args = ["profile", "--profile", str(plant(tmp_path / "p.toml")), *TINY]
    elif what == "epochs.csv":
        plant(received / "seed-0" / "epochs.csv")
        args = ["plot", str(received)]
    elif what == "state.pt":
        plant(received / "seed-0" / "state.pt")
        (received / "metrics.json").unlink()
        (received / "seed-0" / "result.pt").unlink()
        args = ["train", "--resume", str(received), "--epochs", "3"]
    else:
        args = ["export", str(tmp_path / "m.onnx"), "--checkpoint",
                str(plant(tmp_path / "c.pt"))]
    start = time.monotonic()
    with deadline(5):
        code, _, err = _cli(args)
    assert time.monotonic() - start < 5
    line = one_line(code, err)  # a link planted in a run is refused as a link, before it is read
    assert "not a regular file" in line or ("is a symbolic link" in line
                                            and kind == "dev-zero" and str(received) in line)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "poisoned", "nested"])
def test_a_hostile_profile_cache_is_ignored_with_a_warning(tmp_path: Path, kind: str) -> None:
    from edgegcl.budget.cache import FORMAT, VERSION, ProfileCache

    key = {"device": "d", "graph": "g", "settings": {}}
    cache = ProfileCache(tmp_path, key, lambda w: None)
    if kind == "fifo":
        _fifo(cache.path)
    elif kind == "dev-zero":
        cache.path.symlink_to("/dev/zero")
    elif kind == "poisoned":  # an epoch of a nanosecond, no memory: never measured
        cache.path.write_text(json.dumps({"format": FORMAT, "version": VERSION, "key": key,
                                          "costs": [{"batch_size": 64, "theta": 0.1,
                                                     "logits": "dense", "epoch_s": 1e-9,
                                                     "peak_bytes": 0, "phases": []}]}))
    else:
        cache.path.write_text("[" * 100_000 + "]" * 100_000)
    warnings: list[str] = []
    with deadline(5):
        again = ProfileCache(tmp_path, key, warnings.append)
    assert len(again) == 0 and len(warnings) == 1 and "ignoring" in warnings[0]
    fresh = ProfileCache(tmp_path, key, warnings.append, remeasure=True)
    assert len(fresh) == 0 and len(warnings) == 1  # --remeasure does not read it at all


# --------------------------------------------------------------------------- names, nesting

LONG = "a" * 300


@pytest.mark.parametrize("what", ["out", "resume", "export", "plot", "config", "embed"])
def test_a_name_too_long_is_one_line(received: Path, tmp_path: Path, what: str,
                                     model_and_graph: tuple[Path, Path]) -> None:
    if what == "embed":
        model, graph = model_and_graph
        code, _, err = capture(embed_main, [str(model), "--graph", str(graph), "--out",
                                            str(tmp_path / f"{LONG}.npy")])
        assert "too long" in one_line(code, err, "edgegcl-embed: error:")
        return
    args = {"out": ["train", *TINY, "--out", str(tmp_path / LONG)],
            "resume": ["train", "--resume", str(tmp_path / LONG)],
            "export": ["export", str(tmp_path / f"{LONG}.onnx"), "--run", str(received)],
            "plot": ["plot", str(received), "--out", str(tmp_path / f"{LONG}.png")],
            "config": ["train", "--config", str(tmp_path / f"{LONG}.toml")]}[what]
    code, _, err = _cli(args)
    one_line(code, err)


@pytest.mark.parametrize("argv", [
    ["train", "--dataset", "x" * 900_000], ["train", "--dataset", "evil\n\x1b[31mred\u202e.npz"],
    ["train", "--config", "a\nb.toml"], ["train", "--theta-max", "\x1b[2J" + "9" * 5000]])
def test_every_error_line_is_one_escaped_bounded_line(tmp_path: Path, argv: list[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A value the user or a file gives is shown escaped (no newline splits the line, no
    terminal escape or right-to-left mark acts) and cut: the line stays under 1100
    characters (it printed 900 000)."""
    monkeypatch.chdir(tmp_path)
    code, _, err = _cli(argv)
    line = one_line(code, err)
    assert len(line) < 1100 and "\x1b" not in line and "\u202e" not in line, line[:300]
    embed = capture(embed_main, ["m" * 900_000 + ".onnx", "--graph", "\x1b.npz", "--out", "o.npy"])
    assert len(one_line(embed[0], embed[2], "edgegcl-embed: error:")) < 1100


def test_deeply_nested_toml_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "deep.toml"
    config.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    code, _, err = _cli(["train", "--config", str(config)])
    assert "nested too deeply" in one_line(code, err)


# --------------------------------------------------------------------------- numbers, sizes

@pytest.mark.parametrize("flags", [
    ["--lr", "inf"], ["--lr", "1e38"], ["--tau", "inf"], ["--tau", "nan"], ["--weight-decay", "inf"],
    ["--scheduler", "hans", "--gamma", "inf"], ["--theta-max", "nan"],
    ["--epochs", "1000000000"], ["--mode", "minibatch", "--fanout", ",".join(["2"] * 100_000)],
    ["--nodes", "100000000000"], ["--features", "10000000000"],
    ["--hidden-dim", "1000000000"]])
def test_nonsense_numbers_are_one_line(tmp_path: Path, flags: list[str]) -> None:
    start = time.monotonic()
    with deadline(60):
        code, _, err = _cli(["train", "--device", "cpu", *flags, "--out", str(tmp_path / "r")])
    one_line(code, err)
    assert time.monotonic() - start < 30 and not (tmp_path / "r").exists()


@pytest.mark.parametrize("field, value", [("memory_budget_gib", "1e300"),
                                          ("target_epoch_s", "1e300")])
def test_impossible_budgets_are_one_line(tmp_path: Path, field: str, value: str) -> None:
    profile = tmp_path / "p.toml"
    body = {"name": '"p"', "device": '"cpu"', "memory_budget_gib": "8", "headroom": "0.1",
            "target_epoch_s": "2.0", "batch_size_min": "64", "batch_size_max": "1024",
            field: value}
    profile.write_text("".join(f"{k} = {v}\n" for k, v in body.items()))
    code, _, err = _cli(["profile", "--profile", str(profile), *TINY])
    assert field in one_line(code, err)
    code, _, err = _cli(["profile", "--profile", "cpu", "--memory-gib", "1e300", *TINY])
    assert "--memory-gib" in one_line(code, err)


def test_a_checkpoint_declaring_a_huge_in_dim_allocates_nothing(received: Path,
                                                                tmp_path: Path) -> None:
    ckpt = received / "checkpoint.pt"
    raw = torch.load(ckpt, weights_only=True)
    raw["in_dim"] = 10**12
    torch.save(raw, ckpt)
    with deadline(30):
        code, _, err = _cli(["export", str(tmp_path / "m.onnx"), "--checkpoint", str(ckpt)])
    assert "does not fit" in one_line(code, err)


# --------------------------------------------------------------------------- planetoid

def _cora_copy(tmp_path: Path) -> Path:
    raw = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "Cora" / "raw"
    if not raw.is_dir():
        pytest.skip("the Cora raw files are not beside the repository")
    root = tmp_path / "root"
    shutil.copytree(raw, root / "Cora" / "raw")
    return root


class _ForgedDtype:
    """Pickles as numpy.dtype('f8') with a state numpy would trust."""

    def __reduce__(self) -> tuple:
        return (np.dtype, ("f8", False, True), (3, "<", None, None, None, 2**40, 1, 0))


@pytest.mark.parametrize("kind", ["columns", "dtype", "test-index"])
def test_forged_planetoid_raw_files_are_one_line(tmp_path: Path, kind: str) -> None:
    import scipy.sparse

    root = _cora_copy(tmp_path)
    raw = root / "Cora" / "raw"
    if kind == "columns":  # 20 KB declaring a dense 140 x 150 000 matrix
        forged = scipy.sparse.csr_matrix((140, 150_000), dtype=np.float32)
        (raw / "ind.cora.x").write_bytes(pickle.dumps(forged, protocol=2))
    elif kind == "dtype":
        (raw / "ind.cora.x").write_bytes(pickle.dumps(_ForgedDtype(), protocol=2))
    else:
        (raw / "ind.cora.test.index").write_text("0\n4000000000\n")
    with deadline(60):
        code, _, err = _cli(["train", "--dataset", "Cora", "--root", str(root), "--epochs",
                             "1", "--out", str(tmp_path / "r")])
    assert "raw files" in one_line(code, err)


# --------------------------------------------------------------------------- graphs

@pytest.mark.parametrize("nodes", range(2, 10))
def test_a_labelled_graph_of_two_to_nine_nodes_trains(tmp_path: Path, nodes: int) -> None:
    graph = tmp_path / "g.npz"
    np.savez(graph, x=np.random.default_rng(nodes).random((nodes, 3), np.float32),
             edge_index=np.array([[0, 1], [1, 0]]), y=np.arange(nodes) % 2)
    encoder = ["--encoder", "gcn"] if nodes > 3 else []  # the search: on the smallest graphs
    code, _, err = _cli(["train", "--dataset", str(graph), "--epochs", "2", "--eval-every",
                         "1", "--protocol", "both", *encoder, "--out", str(tmp_path / "r")])
    assert code == 0, err


@pytest.mark.parametrize("kind", ["quantized", "damaged"])
def test_a_hostile_pt_graph_is_one_line(tmp_path: Path, kind: str) -> None:
    from torch_geometric.data import Data

    edges = torch.tensor([[0, 1], [1, 0]])
    if kind == "quantized":
        with warnings.catch_warnings():  # torch's TypedStorage note, once per process
            warnings.simplefilter("ignore", UserWarning)
            x = torch.quantize_per_tensor(torch.rand(20, 4), 0.1, 0, torch.qint8)
        data = Data(x=x, edge_index=edges)
    else:
        data = Data(x=torch.rand(20, 4), edge_index=edges)
        del data.__dict__["_store"]
    torch.save(data, tmp_path / "g.pt")
    with warnings.catch_warnings(record=True) as shown:  # what a terminal would print
        warnings.simplefilter("always")
        code, _, err = _cli(["train", "--dataset", str(tmp_path / "g.pt"), "--epochs", "1",
                             "--out", str(tmp_path / "r")])
    one_line(code, err)
    assert [str(w.message) for w in shown] == []  # no library's note before the line
    assert not (tmp_path / "r").exists()


# --------------------------------------------------------------------------- signals, env

def _start(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "edgegcl", *args], cwd=cwd, text=True,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def _wait_for(proc: subprocess.Popen, needle: str, limit: float = 120) -> str:
    seen, start = "", time.monotonic()
    while needle not in seen:
        assert time.monotonic() - start < limit, seen[-2000:]
        line = proc.stderr.readline()
        assert line or proc.poll() is None, seen[-2000:]
        seen += line
    return seen


def test_sigterm_between_seeds_stops_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _start(["train", "--nodes", "30", "--features", "4", "--hidden-dim", "4",
                   "--out-dim", "4", "--proj-dim", "4", "--epochs", "1", "--seeds", "200",
                   "--out", str(run)], tmp_path)
    _wait_for(proc, "seed 3/200")
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "stopped" in err and "--resume" in err and "Traceback" not in err
    assert len(list(run.glob("seed-*"))) < 20  # seconds, not 175 seeds more


def test_sigterm_while_profiling_leaves_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _start(["train", "--profile", "cpu", "--auto-budget", "--nodes", "3000",
                   "--out", str(run)], tmp_path)
    _wait_for(proc, "profiling on")
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1] == "edgegcl: terminated" and "Traceback" not in err
    assert not run.exists()


def test_rank_without_a_process_group_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "edgegcl", "train", "--epochs", "1", "--out",
                           str(tmp_path / "r")], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "RANK": "1"}, timeout=120)
    line = one_line(proc.returncode, proc.stderr)
    assert "RANK=1" in line and "torchrun" in line and not (tmp_path / "r").exists()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_lone_process_with_stale_rank_variables_stops_soon(tmp_path: Path) -> None:
    """RANK / WORLD_SIZE / MASTER_* left in a shell, no torchrun, as rank 0 and as rank 1
    (each alone, side by side): the process waits --dist-join-timeout (it waited
    dist_timeout, 15 minutes, then a traceback), then one line from the rank itself;
    nothing written."""
    procs = {rank: subprocess.Popen(
        [sys.executable, "-m", "edgegcl", "train", *TINY, "--dist-join-timeout", "2", "--out",
         str(tmp_path / f"r{rank}")], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
        text=True, env={**os.environ, "RANK": rank, "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())})
        for rank in ("0", "1")}
    start = time.monotonic()
    for rank, proc in procs.items():
        err = proc.communicate(timeout=120)[1]
        line = err.strip().splitlines()[-1]
        assert proc.returncode == 2 and line.startswith(f"edgegcl: error (rank {rank}")
        assert "within 2 s" in line and "unset RANK" in line and "Traceback" not in err
        assert len(err.strip().splitlines()) <= 2, err  # the waiting line
        assert not (tmp_path / f"r{rank}").exists()
    assert time.monotonic() - start < 60


def test_sigterm_stops_a_process_waiting_for_its_ranks(tmp_path: Path) -> None:
    """While rank 0 waits for ranks that never come, SIGTERM ends it within seconds (the
    wait was in C++, deaf to signals)."""
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(_free_port())}
    proc = _start(["train", *TINY, "--out", str(tmp_path / "r")], tmp_path, env)
    _wait_for(proc, "waiting up to 60 s for 2 ranks")
    proc.send_signal(signal.SIGTERM)
    start = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - start < 10 and proc.returncode == 128 + signal.SIGTERM
    assert "Traceback" not in err and not (tmp_path / "r").exists()


@pytest.mark.parametrize("env, says", [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE=abc is not a whole number"),
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE=2 is set without RANK"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "-1", "MASTER_ADDR": "x",
      "MASTER_PORT": "1"}, "LOCAL_RANK=-1 is not a whole number"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "5", "MASTER_ADDR": "x",
      "MASTER_PORT": "1"}, "does not fit WORLD_SIZE=2"),
    ({"WORLD_SIZE": "1\n2"}, "WORLD_SIZE='1\\n2' is not a whole number"),
])
def test_torchrun_variables_are_checked_whole(env: dict[str, str], says: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture) -> None:
    """A stray torchrun variable is one line before anything runs, from the command line and
    from Python alike (no traceback, no waiting for ranks that never come, nothing written)."""
    import edgegcl
    from edgegcl.cli.main import main
    from edgegcl.errors import UsageError

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(UsageError, match=re.escape(says)):
        edgegcl.train(settings={"epochs": 1}, out=tmp_path / "py")
    assert main(["train", "--epochs", "1", "--out", str(tmp_path / "cli")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and "torchrun" in err[0], err
    assert not (tmp_path / "cli").exists() and not (tmp_path / "py").exists()


# --------------------------------------------------------------------------- paths

def _plant_paths(run: Path, dataset: str, root: str) -> None:
    """Name ``dataset`` and ``root`` in the run's config.toml and its checkpoints."""
    text = (run / "config.toml").read_text()
    text = text.replace('dataset = "synthetic"', f"dataset = {json.dumps(dataset)}")
    (run / "config.toml").write_text(text.replace('root = ""', f"root = {json.dumps(root)}"))
    for ckpt in run.rglob("checkpoint.pt"):
        raw = torch.load(ckpt, weights_only=True)
        raw["config"].update(dataset=dataset, root=root)
        torch.save(raw, ckpt)


def _files(run: Path) -> dict[Path, bytes]:
    """Every file of ``run`` but its lock, by content."""
    return {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".edgegcl.lock"}


@pytest.mark.parametrize("kind", ["root", "graph file"])
def test_a_received_file_chooses_no_path(received: Path, tmp_path: Path, kind: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose files name a dataset root (a folder to create and download into) or a
    graph file: export, load_run().embed(), --resume and --config each refuse in one line
    naming the flag that would use it; nothing is created or read there."""
    import edgegcl
    from edgegcl.errors import PathNotNamed

    monkeypatch.setenv("EDGEGCL_DATA", str(tmp_path / "cache"))
    elsewhere = tmp_path / "elsewhere"
    graph = tmp_path / "g.npz"
    np.savez(graph, x=np.ones((60, 6), np.float32), edge_index=np.array([[0, 1], [1, 0]]))
    if kind == "root":
        _plant_paths(received, "Cora", str(elsewhere))
        flag = f"--root {elsewhere}"
    else:
        _plant_paths(received, str(graph), "")
        flag = str(graph)
    before = _files(received)
    for argv in (["export", str(tmp_path / "m.onnx"), "--run", str(received)],
                 ["train", "--resume", str(received), "--epochs", "3"],
                 ["train", "--config", str(received / "config.toml"), "--out",
                  str(tmp_path / "new")]):
        code, _, err = _cli(argv)
        assert "a file cannot choose" in one_line(code, err) and flag in err, argv
    with pytest.raises(PathNotNamed, match="a file cannot choose"):
        edgegcl.load_run(received).embed()
    assert not elsewhere.exists() and not (tmp_path / "m.onnx").exists()
    assert not (tmp_path / "new").exists() and _files(received) == before
    if kind == "graph file":  # named by the user, it is used
        assert edgegcl.load_run(received).embed(graph=str(graph)).shape[0] == 60


def test_a_config_file_does_not_choose_the_run_directory(received: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """``--config RUN/config.toml`` names ``out = RUN``: the new run gets its own directory
    under runs/ (one warning line says so), RUN is untouched; ``--out`` chooses."""
    monkeypatch.chdir(tmp_path)
    before = _files(received)
    text = (received / "config.toml").read_text()
    (tmp_path / "c.toml").write_text(re.sub(r'\nout = "[^"]*"', f"\nout = {json.dumps(str(received))}",
                                            text))
    code, _, err = _cli(["train", "--config", "c.toml", "--epochs", "1"])
    assert code == 0, err
    assert "names the run directory" in err and f"--out {received}" in err
    assert _files(received) == before
    assert len(list((tmp_path / "runs").glob("synthetic-*/metrics.json"))) == 1


def test_probe_list_is_complete() -> None:
    """Every class of PROBES is named by a test section above (its marker comment)."""
    source = Path(__file__).read_text()
    tested = {"code": "naming_code", "links": "planted", "outputs": "plot_out_keeps",
              "onnx-external": "external_data_is_refused", "onnx-run": "nan_weights",
              "onnx-bounds": "unbounded_stage", "interrupt": "ctrl_c_stops",
              "inner-values": "inner_values", "environment": "stale_rank_variables",
              "api": "train_seeds_keeps_the_commands_promises",
              "blocking": "fifo_or_device", "names": "name_too_long",
              "nesting": "nested_toml", "numbers": "nonsense_numbers",
              "sizes": "huge_in_dim", "planetoid": "forged_planetoid",
              "graphs": "two_to_nine", "signals": "sigterm_between_seeds",
              "paths": "chooses_no_path"}
    assert set(tested) == {name for name, _ in PROBES}
    for name, needle in tested.items():
        assert f"def test_{needle}" in source or needle in source, name


# --------------------------------------------------------------------------- the Python API

def _api_run(tmp_path: Path, **over: object) -> tuple[object, object]:
    import edgegcl

    cfg = edgegcl.TrainConfig(nodes=120, features=16, hidden_dim=16, out_dim=8, proj_dim=8,
                              epochs=4, eval_every=2, encoder="gcn", threads=1, device="cpu",
                              **over)
    return cfg, edgegcl.synthetic_graph(cfg.synthetic_spec())


def test_train_seeds_keeps_the_commands_promises(tmp_path: Path) -> None:
    """edgegcl.train_seeds refuses a folder that holds a run or that another
    process writes, and a graph the command line would refuse, before writing anything."""
    import edgegcl
    from edgegcl.errors import UsageError

    cfg, graph = _api_run(tmp_path)
    cpu = torch.device("cpu")
    done = tmp_path / "done"
    done.mkdir()
    edgegcl.train_seeds(cfg, graph, done, cpu)
    before = {p: p.read_bytes() for p in done.rglob("*") if p.is_file()}
    with pytest.raises(UsageError, match="already exists and is not empty"):
        edgegcl.train_seeds(cfg, graph, done, cpu)
    assert {p: p.read_bytes() for p in done.rglob("*") if p.is_file()} == before
    broken = graph.clone()
    broken.edge_index = broken.edge_index.clone()
    broken.edge_index[0, 0] = 10 ** 6
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with pytest.raises(UsageError, match="edge_index holds node"):
        edgegcl.train_seeds(cfg, broken, fresh, cpu)
    assert list(fresh.iterdir()) == []
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from edgegcl.training.lock import RunLock; "
         f"lock = RunLock({str(fresh)!r}); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match="being written by another edgegcl process"):
            edgegcl.train_seeds(cfg, graph, fresh, cpu)
    finally:
        holder.kill()
        holder.wait()
    assert not (fresh / "config.toml").exists()


def test_a_loss_that_is_not_a_number_stops_the_seed_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from edgegcl.cli.main import main

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)  # finite features near float32's largest: x W overflows
    np.savez(tmp_path / "huge.npz", x=(rng.random((120, 16)) * 3e38).astype(np.float32),
             edge_index=rng.integers(0, 120, (2, 600)), y=rng.integers(0, 3, 120))
    code = main(["train", "--dataset", "huge.npz", "--hidden-dim", "16",
                 "--out-dim", "8", "--proj-dim", "8", "--epochs", "6", "--eval-every", "2",
                 "--encoder", "gcn", "--threads", "1", "--out", "r"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "the loss became nan at epoch" in err[-1] and "--lr" in err[-1], err
    assert "Traceback" not in "\n".join(err) and not (tmp_path / "r" / "metrics.json").exists()


def test_runs_started_in_the_same_second_get_their_own_directories(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --out the name is runs/NAME-TIMESTAMP; one taken (another run of the same
    second) gives NAME-TIMESTAMP-2, made exclusively, and the other run is left alone."""
    from edgegcl.jobs import rundir

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(rundir.time, "strftime", lambda fmt, *a: "20260101-000000")
    taken = tmp_path / "runs" / "synthetic-20260101-000000"
    taken.mkdir(parents=True)
    (taken / "config.toml").write_text("another run's")
    code, _, err = _cli(["train", *TINY])
    assert code == 0, err
    assert (taken / "config.toml").read_text() == "another run's"
    assert (tmp_path / "runs" / "synthetic-20260101-000000-2" / "metrics.json").is_file()
    with ExitStack() as hold:  # and the next one, -3, while -2 exists
        path, _ = rundir.new_run_dir(hold, "", "synthetic")
        assert path.name == "synthetic-20260101-000000-3"
