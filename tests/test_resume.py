"""Resumable, crash-safe runs: ``edgegcl train --resume`` after SIGTERM, SIGINT or SIGKILL ends
exactly as the uninterrupted run (timings aside), and bad resumes are one line, exit code 2."""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ARGS = ["--nodes", "200", "--features", "16", "--hidden-dim", "16", "--out-dim", "8",
        "--proj-dim", "8", "--epochs", "16", "--eval-every", "8", "--checkpoint-every", "2",
        "--T-init", "2", "--T-int", "3", "--b", "0.5", "--theta-max", "0.6",
        "--seeds", "2", "--device", "cpu", "--sampler", "builtin", "--protocol", "both", "--encoder", "gcn"]
MODES = {"full": ["--mode", "full"],
         "minibatch": ["--mode", "minibatch", "--batch-size", "64", "--fanout", "4,4"]}


def _with_epochs(n: int) -> list[str]:
    args = list(ARGS)
    args[args.index("--epochs") + 1] = str(n)
    return args


TIMINGS = {"epoch_time_s", "train_time_s", "final_epoch_time_s", "peak_memory_bytes"}


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "EDGEGCL_DATA": str(tmp / "data"), "OMP_NUM_THREADS": "1"}


def _train(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgegcl", "train", *args], env=_env(tmp),
                          capture_output=True, text=True, timeout=300)


def _start(tmp: Path, run_dir: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "edgegcl", "train", *ARGS, *MODES[mode],
                             "--out", str(run_dir)], env=_env(tmp), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)


def _comparable(run_dir: Path) -> dict:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for seed in metrics["seeds"]:
        for key in TIMINGS:
            seed.pop(key)
        seed.get("encoder_choice", {}).pop("seconds", None)  # the search's wall time
    for key in TIMINGS:
        metrics["summary"].pop(key, None)
    events = [(run_dir / f"seed-{k}" / "hans_events.jsonl").read_text() for k in (0, 1)]
    weights = [torch.load(run_dir / f"seed-{k}" / "checkpoint.pt", weights_only=True)["encoder"]
               for k in (0, 1)]
    curves = [[{k: v for k, v in row.items() if k not in ("epoch_s", "peak_memory_bytes")}
               for row in csv.DictReader((run_dir / f"seed-{k}" / "epochs.csv").open())]
              for k in (0, 1)]
    return {"metrics": metrics, "events": events, "weights": weights, "curves": curves}


def _assert_same(a: dict, b: dict) -> None:
    assert a["metrics"] == b["metrics"]
    assert a["events"] == b["events"]
    assert a["curves"] == b["curves"] and len(a["curves"][0]) == 16
    for wa, wb in zip(a["weights"], b["weights"]):
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def _main(tmp: Path, *args: str) -> int:
    """``edgegcl train ARGS`` in this process (no interpreter and torch start-up to pay), with
    the subprocesses' environment and one thread."""
    from edgegcl.cli.main import main

    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        for key, value in _env(tmp).items():
            mp.setenv(key, value)
        torch.set_num_threads(1)
        try:
            return main(["train", *args])
        finally:
            torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """The uninterrupted runs, one per mode (in this process: the interrupted runs are
    separate processes, so equal results also show no state leaks between the two)."""
    out = {}
    for mode in MODES:
        tmp = tmp_path_factory.mktemp(f"straight-{mode}")
        assert _main(tmp, *ARGS, *MODES[mode], "--out", str(tmp / "run")) == 0
        out[mode] = _comparable(tmp / "run")
    return out


@pytest.mark.parametrize("mode, sig", [("full", signal.SIGTERM), ("minibatch", signal.SIGTERM),
                                       ("full", signal.SIGINT)])
def test_a_signal_saves_and_resume_ends_as_the_uninterrupted_run(tmp_path: Path, straight,
                                                                 mode: str, sig: int) -> None:
    run_dir = tmp_path / "run"
    proc = _start(tmp_path, run_dir, mode)
    _wait_for(run_dir / "seed-0" / "state.pt", proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    last = err.strip().splitlines()[-1]
    assert "state saved" in last and f"edgegcl train --resume {run_dir}" in last
    assert "Traceback" not in err and not (run_dir / "metrics.json").exists()
    assert _main(tmp_path, "--resume", str(run_dir)) == 0  # a new process: the SIGKILL test
    _assert_same(_comparable(run_dir), straight[mode])


@pytest.mark.parametrize("mode", list(MODES))
def test_sigkill_at_a_random_moment_then_resume(tmp_path: Path, straight, mode: str) -> None:
    run_dir = tmp_path / "run"
    proc = _start(tmp_path, run_dir, mode)
    _wait_for(run_dir / "seed-0" / "state.pt", proc)
    time.sleep(random.Random().uniform(0.0, 1.5))
    proc.kill()
    proc.communicate(timeout=60)
    if not (run_dir / "metrics.json").exists():  # the kill can land after the run's end
        resumed = _train(tmp_path, "--resume", str(run_dir))
        assert resumed.returncode == 0, resumed.stderr
    _assert_same(_comparable(run_dir), straight[mode])


def _one_line_exit_2(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert all(n in lines[0] for n in needles), lines[0]


def test_resume_refuses_what_it_cannot_continue(tmp_path: Path, in_process) -> None:
    _refused(in_process("--resume", str(tmp_path)), "not an edgegcl run directory")
    run_dir = tmp_path / "run"
    small = _with_epochs(6)
    assert in_process(*small, "--out", str(run_dir))[0] == 0
    _refused(in_process("--resume", str(run_dir)), "finished run", "--epochs")
    _refused(in_process("--resume", str(run_dir), "--lr", "0.1"), "--lr 0.1 contradicts",
             "--epochs")
    state = run_dir / "seed-1" / "state.pt"
    (run_dir / "metrics.json").unlink()
    (run_dir / "seed-1" / "result.pt").unlink()
    state.write_bytes(state.read_bytes()[:100])  # truncated
    before = (run_dir / "seed-0" / "checkpoint.pt").read_bytes()
    _refused(in_process("--resume", str(run_dir)), "truncated", "state.pt")
    assert (run_dir / "seed-0" / "checkpoint.pt").read_bytes() == before  # nothing lost
    torch.save({"something": "else"}, state)  # foreign
    _refused(in_process("--resume", str(run_dir)), "not an edgegcl seed state")


def test_more_epochs_continue_a_finished_run(tmp_path: Path, in_process) -> None:
    run_dir = tmp_path / "run"
    small = _with_epochs(6)
    assert in_process(*small, "--out", str(run_dir))[0] == 0
    code, err = in_process("--resume", str(run_dir), "--epochs", "10")
    assert code == 0, err
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert [h["epoch"] for h in metrics["seeds"][0]["history"]] == [6, 8, 10]
    assert "epochs = 10" in (run_dir / "config.toml").read_text()


def test_an_unwritable_run_directory_is_one_line(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories")
    run_dir = tmp_path / "run"
    small = _with_epochs(6)
    assert _train(tmp_path, *small, "--out", str(run_dir)).returncode == 0
    (run_dir / "metrics.json").unlink()
    (run_dir / "seed-1" / "result.pt").unlink()
    (run_dir / "seed-1").chmod(0o500)
    try:
        _one_line_exit_2(_train(tmp_path, "--resume", str(run_dir), "--epochs", "8"),
                         "cannot write")
    finally:
        (run_dir / "seed-1").chmod(0o700)


def test_a_full_disk_is_one_line_and_the_last_state_stays(tmp_path: Path, monkeypatch,
                                                           capsys) -> None:
    """Runs as any user (root included): the disk fills up while the second state is
    written."""
    import errno

    from edgegcl.cli.main import main
    from edgegcl.training.state import STATE_FORMAT, read_state

    real_save, states = torch.save, []

    def filling_save(obj, f, *args, **kwargs):
        if isinstance(obj, dict) and obj.get("format") == STATE_FORMAT:
            states.append(obj["epoch"])
            if len(states) == 2:
                f.write(b"partial")
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", filling_save)
    run_dir = tmp_path / "run"
    code = main(["train", *ARGS, *MODES["full"], "--out", str(run_dir)])
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if "error" in line.lower() or "Traceback" in line]
    assert code == 2 and errors == [err[-1]], err
    assert "cannot write" in err[-1] and "No space left" in err[-1]
    state = read_state(run_dir / "seed-0" / "state.pt")  # the first state, whole
    assert state["epoch"] == states[0] == 2
    assert not list(run_dir.rglob("*.tmp"))


# --------------------------------------------------------------------------- what resume refuses

SMALL = [*_with_epochs(4), *MODES["full"], "--seeds", "1"]


@pytest.fixture
def in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    """``edgegcl ARGS`` in this process: (exit code, stderr lines)."""
    from edgegcl.cli.main import main

    monkeypatch.setenv("EDGEGCL_DATA", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)

    def call(*args: str) -> tuple[int, list[str]]:
        capsys.readouterr()
        code = main(["train", *args])
        return code, capsys.readouterr().err.strip().splitlines()
    return call


def _refused(result: tuple[int, list[str]], *needles: str) -> str:
    code, err = result
    assert code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert all(n in err[0] for n in needles), err[0]
    return err[0]


def _stopped_run(call, run_dir: Path, *args: str) -> None:
    """A finished 4-epoch run made resumable again: metrics and results gone, states kept."""
    assert call(*SMALL, *args, "--out", str(run_dir))[0] == 0
    (run_dir / "metrics.json").unlink()
    for result in run_dir.glob("seed-*/result.pt"):
        result.unlink()


def _with_hash(path: Path, config_hash: str | None) -> None:
    """A seed file claiming another configuration hash (None: carrying none)."""
    raw = torch.load(path, weights_only=True)
    assert "config_hash" in raw
    if config_hash is None:
        del raw["config_hash"]
    else:
        raw["config_hash"] = config_hash
    torch.save(raw, path)


@pytest.mark.parametrize("flag, value", [("--tau", "0.5"), ("--theta-max", "0.3"),
                                         ("--graph-seed", "7")])
def test_a_seed_file_from_another_configuration_is_refused(tmp_path: Path, in_process, flag,
                                                            value) -> None:
    run_dir, other = tmp_path / "run", tmp_path / "other"
    _stopped_run(in_process, run_dir)
    assert in_process(*SMALL, flag, value, "--out", str(other))[0] == 0
    config = (run_dir / "config.toml").read_bytes()
    state = run_dir / "seed-0" / "state.pt"
    state.write_bytes((other / "seed-0" / "state.pt").read_bytes())
    line = _refused(in_process("--resume", str(run_dir)), str(state),
                    "another configuration", flag[2:].replace("-", "_"))
    assert "remove it" in line
    state.unlink()  # a copied result.pt (no state to name the fields) is refused as well
    (run_dir / "seed-0" / "result.pt").write_bytes((other / "seed-0" / "result.pt").read_bytes())
    _refused(in_process("--resume", str(run_dir), "--epochs", "6"), "result.pt",
             "another configuration")
    assert (run_dir / "config.toml").read_bytes() == config  # nothing rewritten


def test_a_seed_file_without_a_hash_or_with_a_misfit_is_one_line(tmp_path: Path,
                                                                 in_process) -> None:
    """A state.pt that names no configuration is refused (no version writes one); one whose
    hash claims this run's configuration but whose tensors are another model's is refused
    by its tensors."""
    run_dir, wide = tmp_path / "run", tmp_path / "wide"
    _stopped_run(in_process, run_dir)
    state = run_dir / "seed-0" / "state.pt"
    ours = torch.load(state, weights_only=True)["config_hash"]
    kept = state.read_bytes()
    _with_hash(state, None)
    _refused(in_process("--resume", str(run_dir), "--epochs", "6"), str(state),
             "carries no configuration hash", "remove it")
    state.write_bytes(kept)
    assert in_process(*SMALL, "--hidden-dim", "24", "--out", str(wide))[0] == 0
    state.write_bytes((wide / "seed-0" / "state.pt").read_bytes())
    _with_hash(state, ours)  # a forged hash: only its tensors can tell
    _refused(in_process("--resume", str(run_dir), "--epochs", "8"), str(state),
             "does not fit this run's model", "is [24], the model's [16]")


def test_a_truncated_config_toml_is_refused(tmp_path: Path, in_process) -> None:
    run_dir = tmp_path / "run"
    _stopped_run(in_process, run_dir)
    config = run_dir / "config.toml"
    whole = config.read_text()
    config.write_text(whole[:whole.index("[schedule]")])  # valid TOML, cut at a table
    _refused(in_process("--resume", str(run_dir)), str(config), "lacks", "theta_max",
             "truncated")


def test_resume_refuses_flags_it_cannot_honour(tmp_path: Path, in_process) -> None:
    run_dir = tmp_path / "run"
    _stopped_run(in_process, run_dir)
    config = (run_dir / "config.toml").read_bytes()
    elsewhere = tmp_path / "elsewhere"
    _refused(in_process("--resume", str(run_dir), "--out", str(elsewhere)),
             "drop --out", "--epochs, --device, --threads, --time-budget may change")
    assert not elsewhere.exists()
    _refused(in_process("--resume", str(run_dir), "--epochs", "3"),
             "--epochs 3 is below the 4 epochs seed 0", "may only grow")
    assert (run_dir / "config.toml").read_bytes() == config
    assert in_process("--resume", str(run_dir), "--out", str(run_dir))[0] == 0  # the same place


def test_a_second_writer_of_a_run_directory_exits_2_at_once(tmp_path: Path, in_process) -> None:
    """A resume of a run that is training, and a new run into a directory another process
    holds, stop at once with one line; after the holder is killed, resume goes on."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "edgegcl", "train", *_with_epochs(2000),
                             *MODES["full"], "--out", str(run_dir)], env=_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(run_dir / "seed-0" / "state.pt", proc)
        start = time.monotonic()
        _refused(in_process("--resume", str(run_dir)), str(run_dir),
                 f"another edgegcl process (pid {proc.pid})")
        assert time.monotonic() - start < 30
        empty = tmp_path / "empty"
        empty.mkdir()
        holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                                   "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
                                   "fcntl.flock(fd, fcntl.LOCK_EX)\nprint(flush=True)\n"
                                   "time.sleep(120)", str(empty / ".edgegcl.lock")],
                                  stdout=subprocess.PIPE, text=True)
        holder.stdout.readline()
        _refused(in_process(*SMALL, "--out", str(empty)), str(empty), "another edgegcl process")
        holder.kill()
        holder.wait(timeout=30)
        assert not (empty / "config.toml").exists()
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    reached = torch.load(run_dir / "seed-0" / "state.pt", weights_only=True)["epoch"]
    code, err = in_process("--resume", str(run_dir), "--epochs", str(reached + 2))
    assert code == 0, err  # the lock died with its holder
    assert not (run_dir / ".edgegcl.lock").exists()


def test_a_refused_append_is_one_line(tmp_path: Path, in_process, monkeypatch) -> None:
    """epochs.csv is appended to between saved states: a full disk there is one line too."""
    import errno

    real_open = Path.open

    class Full:
        def __init__(self, fh) -> None:
            self.fh = fh

        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self) -> None:
            self.fh.flush()

        def close(self) -> None:
            self.fh.close()

    def opening(self, mode="r", *args, **kwargs):
        fh = real_open(self, mode, *args, **kwargs)
        return Full(fh) if self.name == "epochs.csv" and mode == "a" else fh

    monkeypatch.setattr(Path, "open", opening)
    code, err = in_process(*SMALL, "--out", "run")
    errors = [line for line in err if "error" in line.lower() or "Traceback" in line]
    assert code == 2 and errors == [err[-1]], err
    assert "cannot write" in err[-1] and "epochs.csv (No space left on device)" in err[-1]
