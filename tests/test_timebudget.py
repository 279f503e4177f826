"""How long a run trains (edgegcl.training.timebudget): ``--max-steps`` cuts a mini-batch seed's
epochs to fit, ``--time-budget`` plans each seed's epochs to what fits in its part of the
budget and bounds the encoder search's share; a cut seed still probes, chooses a checkpoint
and has theta_max in use; a cut seed is finished on ``--resume``."""

from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import capture

from edgegcl.cli.main import main
from edgegcl.contrast.scheduler import ScheduleConfig
from edgegcl.data import synthetic_graph
from edgegcl.errors import UsageError
from edgegcl.training.choice import choose_encoder, search_epochs
from edgegcl.training.config import TrainConfig
from edgegcl.training.hooks import Deadline
from edgegcl import train_seeds
from edgegcl.training.timebudget import (MINIBATCH_STEPS, RESERVE_SHARE, SEARCH_SHARE, RunClock,
                                         bounded_epochs, duration_seconds, epochs_that_fit,
                                         probe_interval)

CPU = torch.device("cpu")
SMALL = dict(nodes=200, features=12, hidden_dim=16, out_dim=8, proj_dim=8, device="cpu",
             encoder="gcn")


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "seed-0" / "epochs.csv").open() as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("text, seconds", [("10m", 600.0), ("90s", 90.0), ("1h30m", 5400.0),
                                           ("600", 600.0), ("2.5h", 9000.0), (" 1m 30s ", 90.0),
                                           ("", 0.0)])
def test_a_duration_is_read_in_hours_minutes_and_seconds(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["1h30", "10x", "m", "0", "-5m", "1e3", "2y"])
def test_a_duration_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match="--time-budget"):
        duration_seconds(text)


def test_a_bad_budget_or_step_bound_is_one_line_before_any_work(tmp_path: Path) -> None:
    for flags in (["--time-budget", "ten minutes"], ["--max-steps", "-2"]):
        code, out, err = capture(main, ["train", "--dataset", "synthetic", *flags,
                                        "--out", str(tmp_path / "run")])
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert flags[0] in err
        assert not (tmp_path / "run").exists()


def test_the_step_bound_cuts_minibatch_epochs_and_leaves_the_whole_graph_alone() -> None:
    assert bounded_epochs(300, 977, -1, True) == MINIBATCH_STEPS // 977
    assert bounded_epochs(300, 12, -1, True) == 300  # 3600 steps: within the default
    assert bounded_epochs(300, 1, -1, False) == 300
    assert bounded_epochs(300, 1, 50, False) == 50
    assert bounded_epochs(300, 977, 0, True) == 300
    assert bounded_epochs(300, 5000, -1, True) == 1  # one epoch at least


def test_the_epochs_that_fit_keep_the_final_probe_aside() -> None:
    # 100 s: the final probe's 10 s aside, then 9 s an epoch and a 10 s probe every 10 epochs
    assert epochs_that_fit(100.0, 9.0, 10.0, 10) == 9
    assert epochs_that_fit(100.0, 0.5, 0.0, 1) == 200
    assert epochs_that_fit(5.0, 1.0, 6.0, 1) == 0  # not even the final probe fits
    assert probe_interval(20, 300) == 20 and probe_interval(20, 50) == 5
    assert probe_interval(20, 4) == 1


def test_the_plan_after_an_epoch_fits_the_seeds_part(monkeypatch: pytest.MonkeyPatch) -> None:
    """After epoch 3 with 10 s left, 1 s epochs and a 2 s probe: probing every 10 of up to
    100 epochs would fit 6 more, but 9 epochs probe every epoch, which fits 2: it plans 5."""
    now = 1000.0
    monkeypatch.setattr(time, "monotonic", lambda: now)
    planned: list[int] = []
    seed = SimpleNamespace(deadline=now + 10.0, times=[1.0, 1.0, 1.0], probe_s=2.0, most=100,
                           main=False,
                           epochs=100, world=None, cfg=SimpleNamespace(
                               run=SimpleNamespace(eval_every=20)),
                           replan=planned.append)
    Deadline().epoch_end(seed, {"epoch": 3}, [])  # type: ignore[arg-type]
    assert planned == [5]
    seed.deadline = now - 1.0  # out of time: this epoch is the last (and is probed)
    Deadline().epoch_end(seed, {"epoch": 3}, [])  # type: ignore[arg-type]
    assert planned == [5, 3]


def test_the_clock_shares_what_is_left_among_the_seeds(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    now = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    clock = RunClock.started(1000.0)
    first = clock.seed_end(2)
    assert first == pytest.approx((1 - RESERVE_SHARE) * 1000.0 / 2)
    now[0] = 600.0  # the first seed overran: the second has what is left
    assert clock.seed_end(1) == pytest.approx((1 - RESERVE_SHARE) * 1000.0)
    assert RunClock.search_end(700.0) == pytest.approx(600.0 + SEARCH_SHARE * 100.0)
    assert RunClock.started(0.0).seed_end(1) is None and RunClock.search_end(None) is None


def test_a_seed_too_short_for_a_decision_has_theta_max_in_use_from_the_start() -> None:
    schedule = ScheduleConfig(scheduler="random", theta_max=0.3)
    short = schedule.build(300)
    short.aim(schedule.reach_epoch(5), 5)  # T_init 20: no decision within 5 epochs
    assert short.saturated and short.saturated_at == 0
    longer = schedule.build(300)
    longer.aim(schedule.reach_epoch(100), 100)
    assert not longer.saturated and longer.T_reach == 40
    fixed = ScheduleConfig(scheduler="random", theta_max=0.3, pace="fixed").build(300)
    fixed.aim(None, 5)  # the paper's fixed pace is left as it is
    assert not fixed.saturated


def test_a_minibatch_seed_trains_within_its_step_bound(tmp_path: Path) -> None:
    cfg = TrainConfig(**SMALL, mode="minibatch", batch_size=50, max_steps=10, eval_every=20,
                      theta_max=0.2)
    metrics = train_seeds(cfg, synthetic_graph(cfg.synthetic_spec()), tmp_path, CPU)
    seed = metrics["seeds"][0]
    assert seed["epochs_trained"] == 10 // 4  # 200 nodes in batches of 50: 4 steps an epoch
    assert seed["cut"] == "max_steps"
    assert all(v == pytest.approx(1.0) for v in seed["final_eta"].values())  # theta_max used
    assert seed["selected_epoch"] >= 1  # probed (every epoch: a cut seed probes often)
    rows = _rows(tmp_path)
    assert len(rows) == 2 and all(row["val_micro_f1"] != "" for row in rows)


def test_a_spent_budget_trains_one_probed_epoch_a_seed_and_resume_keeps_it(
        tmp_path: Path) -> None:
    """A budget already spent: each seed still trains (one epoch, probed, its checkpoint
    chosen) and says why it stopped; a resume finds the seeds finished."""
    cfg = TrainConfig(**SMALL, epochs=1000, seeds=2, time_budget="0.001s")
    data = synthetic_graph(cfg.synthetic_spec())
    metrics = train_seeds(cfg, data, tmp_path, CPU)
    for seed in metrics["seeds"]:
        assert seed["epochs_trained"] == 1 and seed["cut"] == "time_budget"
        assert seed["selected_epoch"] == 1
    with pytest.raises(UsageError, match="is a finished run"):
        train_seeds(cfg, data, tmp_path, CPU, resume=True)
    (tmp_path / "metrics.json").unlink()  # as if stopped once its seeds were saved
    again = train_seeds(cfg.replace(run={"time_budget": "1h"}), data, tmp_path, CPU,
                        resume=True)
    assert [s["epochs_trained"] for s in again["seeds"]] == [1, 1]
    (tmp_path / "metrics.json").unlink()
    result = tmp_path / "seed-1" / "result.pt"  # a reason no run records is refused
    saved = torch.load(result, weights_only=True)
    torch.save({**saved, "cut": "forever"}, result)
    with pytest.raises(UsageError, match="incomplete.*cut 'forever'"):
        train_seeds(cfg, data, tmp_path, CPU, resume=True)


def test_a_budget_ends_a_long_run_before_its_epochs(tmp_path: Path) -> None:
    """100 000 epochs cannot fit in 2 s (each takes well over 20 microseconds): the budget,
    not --epochs, ends the seed, after a probed last epoch."""
    cfg = TrainConfig(**SMALL, epochs=100_000, time_budget="2s")
    metrics = train_seeds(cfg, synthetic_graph(cfg.synthetic_spec()), tmp_path, CPU)
    seed = metrics["seeds"][0]
    assert 1 <= seed["epochs_trained"] < 100_000 and seed["cut"] == "time_budget"
    assert _rows(tmp_path)[-1]["val_micro_f1"] != ""  # the last epoch was probed


def test_a_search_out_of_time_trains_each_candidate_one_epoch(tmp_path: Path) -> None:
    """The search's share already spent: every candidate still trains and is probed once, and
    the choice records the epochs they trained."""
    cfg = TrainConfig(**{**SMALL, "encoder": "auto"}, homophily=0.3, epochs=40, eval_every=5)
    data = synthetic_graph(cfg.synthetic_spec())
    choice = choose_encoder(data, cfg, 0, CPU, tmp_path, "seed 1/1", end=time.monotonic())
    assert choice is not None and choice.by == "search"
    assert set(choice.scores) == {"gcn", "ego", "poly"} and choice.epochs == 1
    assert "after 1 epoch each" in choice.line()
    assert search_epochs(cfg) == 10 and search_epochs(cfg, 4) == 1


def test_the_cli_says_the_budget_and_how_each_seed_ended(tmp_path: Path) -> None:
    code, out, err = capture(main, ["train", "--dataset", "synthetic", "--nodes", "200",
                                    "--epochs", "100000", "--seeds", "2", "--time-budget", "4s",
                                    "--encoder", "gcn", "--out", str(tmp_path / "run")])
    assert code == 0, err
    assert "time budget 4s: 2 seed(s) of about 2s each" in err
    assert err.count("fitted in its part of the time budget") == 2
    assert re.search(r"\| the run ends by \d\d:\d\d:\d\d", err)  # the progress line's
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert all(s["cut"] == "time_budget" for s in metrics["seeds"])


def test_the_run_says_its_plan_and_when_it_will_end(tmp_path: Path) -> None:
    """Before training: the seeds, the encoder search's candidates and epochs, and the epochs
    in all; while training, the search included, when the whole run ends (no budget: at the
    pace so far)."""
    code, _, err = capture(main, ["train", "--nodes", "200", "--homophily", "0.3",
                                  "--epochs", "8", "--eval-every", "2", "--seeds", "2",
                                  "--out", str(tmp_path / "run")])
    assert code == 0, err
    each = search_epochs(TrainConfig(epochs=8, eval_every=2))
    assert (f"plan: 2 seed(s), each choosing its encoder first (gcn, ego, poly, {each} epochs "
            f"each, unless a measured signal settles it: docs/encoders.md), then training 8 "
            f"epochs: at most {2 * (3 * each + 8)} epochs in all") in err
    ends = re.findall(r"choosing the encoder, \w+ \[.*\| the run ends about \d\d:\d\d:\d\d", err)
    assert ends and re.search(r"seed 2/2 \[.*\| the run ends about \d\d:\d\d:\d\d", err)
