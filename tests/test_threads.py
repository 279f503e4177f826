"""Threads: the picker's search, where a run's count comes from, and what metrics.json says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import capture

from edgegcl.budget.profiles import _parse
from edgegcl.cli.main import main
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.errors import UsageError
from edgegcl.training.config import TrainConfig
from edgegcl.training.engine import Trainer
from edgegcl.training.threads import (
    ThreadPicker,
    available_cores,
    resolve_threads,
    thread_candidates,
)

TINY = ["--nodes", "120", "--features", "16", "--hidden-dim", "16", "--out-dim", "8",
        "--proj-dim", "8", "--epochs", "8", "--eval-every", "4", "--T-init", "2", "--T-int", "2",
        "--device", "cpu", "--encoder", "gcn"]


def _feed(picker: ThreadPicker, seconds_at: dict[int, float]) -> list[int]:
    """Step ``picker`` until it chooses, each step taking ``seconds_at[threads]``; the counts
    the steps ran at (torch's setting at each step)."""
    ran = []
    for _ in range(100):
        if picker.done:
            break
        picker.begin()
        ran.append(torch.get_num_threads())
        picker.end(seconds_at[ran[-1]])
    return ran


def test_candidates_halve_down_to_one() -> None:
    assert thread_candidates(1) == [1]
    assert thread_candidates(2) == [2, 1]
    assert thread_candidates(16) == [16, 8, 4, 2, 1]
    assert thread_candidates(6) == [6, 3, 1]


def test_idle_machine_stops_after_the_first_slower_count() -> None:
    picker = ThreadPicker(cores=8, steps=2)
    ran = _feed(picker, {8: 1.0, 4: 1.5, 2: 2.5, 1: 4.0})
    assert ran == [8, 8, 8, 4, 4]  # warm-up, two at 8, two at 4: fewer did not pay
    assert picker.chosen == 8 and torch.get_num_threads() == 8


def test_busy_machine_goes_down_while_fewer_are_faster() -> None:
    picker = ThreadPicker(cores=8, steps=2)
    ran = _feed(picker, {8: 5.0, 4: 2.0, 2: 1.0, 1: 1.2})
    assert ran == [8, 8, 8, 4, 4, 2, 2, 1, 1]
    assert picker.chosen == 2 and torch.get_num_threads() == 2
    assert set(picker.medians()) == {8, 4, 2, 1}


def test_the_last_count_can_win() -> None:
    picker = ThreadPicker(cores=2, steps=1)
    _feed(picker, {2: 3.0, 1: 1.0})
    assert picker.chosen == 1


def test_a_near_tie_keeps_more_threads() -> None:
    picker = ThreadPicker(cores=2, steps=1)
    _feed(picker, {2: 1.0, 1: 0.95})  # one thread saved 5 %: not worth the rest of the run's
    assert picker.chosen == 2
    picker = ThreadPicker(cores=2, steps=1)
    _feed(picker, {2: 1.0, 1: 0.85})
    assert picker.chosen == 1


def test_median_of_a_count_resists_one_slow_step() -> None:
    picker = ThreadPicker(cores=2, steps=3)
    times = iter([9.0, 1.0, 8.0, 1.0, 2.0, 2.0, 2.0])  # warm-up, 2 threads (one slow), 1 thread
    for _ in range(7):
        picker.begin()
        picker.end(next(times))
    assert picker.done and picker.chosen == 2


def test_after_choosing_nothing_changes() -> None:
    picker = ThreadPicker(cores=2, steps=1)
    _feed(picker, {2: 1.0, 1: 2.0})
    torch.set_num_threads(1)
    picker.begin()
    picker.end(0.001)
    assert torch.get_num_threads() == 1 and picker.chosen == 2


def test_state_dict_continues_the_search() -> None:
    a = ThreadPicker(cores=4, steps=2)
    for seconds in (9.0, 3.0):  # warm-up, one step at 4
        a.begin()
        a.end(seconds)
    b = ThreadPicker(cores=1)
    b.load_state_dict(a.state_dict())
    ran = _feed(b, {4: 3.0, 2: 1.0, 1: 2.0})
    assert ran == [4, 2, 2, 1, 1] and b.chosen == 2


def test_bad_steps_are_refused() -> None:
    with pytest.raises(ValueError):
        ThreadPicker(cores=2, steps=0)


def test_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_threads(1, torch.device("cpu")).source == "--threads"
    assert torch.get_num_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert resolve_threads(0, torch.device("cpu")).source == "OMP_NUM_THREADS"
    monkeypatch.delenv("OMP_NUM_THREADS")
    choice = resolve_threads(0, torch.device("cpu"))
    assert choice.source == "measured" and choice.picker is not None
    assert choice.picker.order == thread_candidates(available_cores())
    assert resolve_threads(0, torch.device("meta")).picker is None  # not a CPU: left alone


def test_the_trainer_feeds_its_picker() -> None:
    data = synthetic_graph(SyntheticSpec(num_nodes=60, num_features=8))
    cfg = TrainConfig(encoder="gcn", hidden_dim=8, out_dim=4, proj_dim=4, T_init=2, T_int=2)
    trainer = Trainer(cfg, in_dim=8)
    trainer.threads = picker = ThreadPicker(cores=2, steps=1)
    for _ in range(3):
        trainer.fit_epoch(data.x, data.edge_index)
    assert picker.done and picker.chosen in (1, 2) and set(picker.medians()) <= {1, 2}
    assert all(s > 0 for s in picker.medians().values())


def test_a_default_run_measures_and_records(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EDGEGCL_DATA", str(tmp_path / "data"))
    code, _, err = capture(main, ["train", *TINY, "--out", str(tmp_path / "run")])
    assert code == 0, err
    entry = json.loads((tmp_path / "run" / "metrics.json").read_text())["threads"]
    assert entry["source"] == "measured" and entry["cores"] == available_cores()
    assert entry["threads"] in thread_candidates(available_cores())
    assert str(entry["threads"]) in entry["step_s"]
    assert sum("threads:" in line for line in err.splitlines()) == 1
    assert f"threads: {entry['threads']}, the fastest" in err


def test_threads_flag_is_kept_and_may_change_on_resume(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EDGEGCL_DATA", str(tmp_path / "data"))
    run_dir = tmp_path / "run"
    code, _, err = capture(main, ["train", *TINY, "--threads", "1", "--out", str(run_dir)])
    assert code == 0, err
    assert "threads: 1 (--threads)" in err
    entry = json.loads((run_dir / "metrics.json").read_text())["threads"]
    assert entry == {"threads": 1, "source": "--threads", "cores": available_cores()}
    code, _, err = capture(main, ["train", "--resume", str(run_dir), "--epochs", "10",
                                  "--threads", "2"])
    assert code == 0, err
    assert json.loads((run_dir / "metrics.json").read_text())["threads"]["threads"] == 2


def test_profile_threads_field() -> None:
    base = {"name": "p", "device": "cpu", "memory_budget_gib": "auto", "headroom": 0.1,
            "target_epoch_s": 1.0, "batch_size_min": 8, "batch_size_max": 64}
    assert _parse(base, "p.toml").threads == 0
    assert _parse({**base, "threads": 3}, "p.toml").threads == 3
    for bad in (-1, 1.5, True, "4"):
        with pytest.raises(UsageError, match="threads must be an integer"):
            _parse({**base, "threads": bad}, "p.toml")


def test_auto_budget_chooses_threads_before_profiling(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EDGEGCL_DATA", str(tmp_path / "data"))
    code, _, err = capture(main, ["train", *TINY, "--profile", "cpu", "--auto-budget",
                                  "--out", str(tmp_path / "run")])
    assert code == 0, err
    chosen = err.index(", the fastest of the first steps")
    assert chosen < err.index("profiling on cpu")
    assert err.count(", the fastest of the first steps") == 1  # training keeps the choice
    entry = json.loads((tmp_path / "run" / "metrics.json").read_text())["threads"]
    assert entry["source"] == "measured" and entry["threads"] in thread_candidates(
        available_cores())


def test_a_resumed_run_keeps_the_measured_count(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The count measured before the stop is in state.pt and used again, not re-measured, so
    the resumed epochs run as the uninterrupted ones would have."""
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EDGEGCL_DATA", str(tmp_path / "data"))
    run_dir = tmp_path / "run"
    code, _, err = capture(main, ["train", *TINY, "--out", str(run_dir)])
    assert code == 0, err
    first = json.loads((run_dir / "metrics.json").read_text())["threads"]
    code, _, err = capture(main, ["train", "--resume", str(run_dir), "--epochs", "12"])
    assert code == 0, err
    assert "fastest of the first steps" not in err  # nothing measured again
    assert json.loads((run_dir / "metrics.json").read_text())["threads"] == first


def test_a_hostile_thread_record_is_refused() -> None:
    picker = ThreadPicker(cores=2)
    state = {**picker.state_dict(), "chosen": 10**9}
    with pytest.raises(ValueError, match="out of range"):
        picker.load_state_dict(state)
