"""The resource profiler (edgegcl.budget.profiler) and ``--auto-budget``, on tiny graphs, CPU and CUDA."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from edgegcl.budget import profiler
from edgegcl.contrast import reach
from edgegcl.budget.search import OUT_OF_MEMORY, Cost
from edgegcl.cli.main import main
from edgegcl.training.config import TrainConfig
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.budget.profiles import DeviceProfile, load_profile

SMALL = TrainConfig(hidden_dim=16, out_dim=8, proj_dim=8, T_int=4)
TINY = ["--nodes", "120", "--features", "16", "--hidden-dim", "16", "--out-dim", "8",
        "--proj-dim", "8", "--epochs", "6", "--eval-every", "3", "--T-init", "2", "--T-int", "2", "--encoder", "gcn"]


@pytest.fixture(scope="module")
def graph():
    return synthetic_graph(SyntheticSpec(num_nodes=200, num_features=16, avg_degree=6, seed=1))


def _profile(**kw) -> DeviceProfile:
    base = dict(name="test", description="", device="cpu", memory_budget_gib="auto",
                headroom=0.1, target_epoch_s=10.0, batch_size_min=16, batch_size_max=1024)
    return DeviceProfile(**{**base, **kw})


@pytest.mark.parametrize("mode", ["full", "minibatch"])
def test_measure_theta_reports_latency_and_memory(graph, mode):
    cfg = replace(SMALL, mode=mode, batch_size=50, fanout="5,5", sampler="builtin")
    cost = profiler.measure_theta(graph, cfg, torch.device("cpu"), 0.5)
    assert not cost.oom and cost.epoch_s > 0 and cost.peak_bytes >= 0
    if mode == "minibatch":
        assert profiler.steps_per_epoch(200, cfg, mode) == 4


def test_out_of_memory_marks_the_theta_infeasible_and_other_errors_propagate(graph, monkeypatch):
    def oom(*_):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: "
                           "not enough memory: you tried to allocate 123 bytes.")
    monkeypatch.setattr(profiler, "_measure", oom)
    assert profiler.measure_theta(graph, SMALL, torch.device("cpu"), 1.0) is OUT_OF_MEMORY

    def shape(*_):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)")
    monkeypatch.setattr(profiler, "_measure", shape)
    with pytest.raises(RuntimeError, match="shapes"):
        profiler.measure_theta(graph, SMALL, torch.device("cpu"), 1.0)


def test_calibrate_halves_the_batch_until_a_theta_fits(graph, monkeypatch):
    seen = []

    def fake(data, cfg, device, theta):  # epoch time grows with batch size and theta
        seen.append((cfg.run.batch_size, theta))
        return Cost(cfg.run.batch_size * theta / 100, 1000)
    monkeypatch.setattr(profiler, "measure_theta", fake)
    cfg = replace(SMALL, mode="minibatch", batch_size=400)
    cal = profiler.calibrate(graph, cfg, _profile(target_epoch_s=1.0), torch.device("cpu"),
                             log=lambda _: None)
    # 400 x theta / 100 <= 0.9 never holds for theta >= 0.05 on the grid at 400 (0.05 -> 0.2
    # fits, in fact): check the actual rule instead of a constant.
    assert cal.chosen is not None
    assert cal.batch_size * cal.chosen / 100 <= 0.9
    assert all(b * t / 100 > 0.9 for b, t in seen if b == cal.batch_size and t > cal.chosen)

    monkeypatch.setattr(profiler, "measure_theta",
                        lambda data, cfg, device, theta: Cost(cfg.run.batch_size / 10, 1000))
    cal = profiler.calibrate(graph, cfg, _profile(target_epoch_s=3.0), torch.device("cpu"),
                             log=lambda _: None)
    assert cal.batch_size == 25 and cal.chosen == 1.0  # 400 -> 200 -> 100 -> 50 -> 25 fits
    assert len(cal.notes) == 4 and "halving the batch size to 25" in cal.notes[-1]


def test_calibrate_measures_both_logits_paths_and_trains_with_the_cheaper(graph, monkeypatch):
    """Pairs cheaper below theta 0.3 (a crossover), dense above: each theta keeps its cheaper."""
    def fake(data, cfg, device, theta):
        pairs = cfg.contrast.logits == "pairs"
        return Cost(theta * (1.0 if pairs else 0.5) + (0.0 if pairs else 0.15), 1000)
    monkeypatch.setattr(profiler, "measure_theta", fake)
    cal = profiler.calibrate(graph, SMALL, _profile(target_epoch_s=1.0), torch.device("cpu"),
                             log=lambda _: None)
    measured = {theta for theta, _ in cal.paths}
    assert {(t, c.label) for t, c in cal.paths} == {(t, p) for t in measured
                                                    for p in ("dense", "pairs")}
    for m in cal.result.measurements:
        assert m.label == ("pairs" if m.theta < 0.3 else "dense")
    assert cal.chosen == 1.0 and cal.logits == "dense"
    table = cal.to_json(load_profile("cpu"))
    assert table["logits"] == "dense" and len(table["paths"]) == 2 * len(measured)


@pytest.mark.parametrize("path", ["dense", "pairs"])
def test_calibrate_keeps_a_logits_path_the_user_named(graph, monkeypatch, path):
    """--logits dense / pairs with --auto-budget: only that path is measured and trained."""
    seen = set()

    def fake(data, cfg, device, theta):
        seen.add(cfg.contrast.logits)
        return Cost(theta * (0.1 if cfg.contrast.logits == "pairs" else 1.0), 1000)
    monkeypatch.setattr(profiler, "measure_theta", fake)
    cal = profiler.calibrate(graph, SMALL.replace(contrast={"logits": path}),
                             _profile(target_epoch_s=1.0), torch.device("cpu"),
                             log=lambda _: None)
    assert seen == {path} and cal.logits == path
    assert {c.label for _, c in cal.paths} == {path}


def test_calibrate_stops_at_the_profiles_smallest_batch(graph, monkeypatch):
    tried = []

    def fake(data, cfg, device, theta):
        tried.append(cfg.run.batch_size)
        return Cost(100.0, 1000)
    monkeypatch.setattr(profiler, "measure_theta", fake)
    cfg = replace(SMALL, mode="minibatch", batch_size=64)
    cal = profiler.calibrate(graph, cfg, _profile(batch_size_min=32), torch.device("cpu"),
                             log=lambda _: None)
    assert sorted(set(tried)) == [32, 64] and len(cal.notes) == 1
    # nothing meets the target anywhere: of equally fast settings, the largest theta
    assert not cal.meets_target and cal.chosen == 0.1


def test_train_auto_budget_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *TINY, "--profile", "cpu", "--auto-budget", "--out", str(out)]) == 0
    table = json.loads((out / "profile.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    report = metrics["auto_budget"]
    assert report["theta_max"] == table["chosen_theta_max"] and report["profile"] == "cpu"
    assert {"budgets", "predicted", "measured", "measured_over_predicted"} <= report.keys()
    assert report["measured"]["peak_memory_bytes"] >= 0 and report["measured"]["epoch_s"] > 0
    config = (out / "config.toml").read_text()
    assert f"theta_max = {table['chosen_theta_max']}" in config
    assert f'logits = "{table["logits"]}"' in config and report["logits"] == table["logits"]
    printed = capsys.readouterr().out
    assert "fits?" in printed and "auto-budget theta_max" in printed


def test_a_target_no_setting_meets_trains_the_closest_fit(graph, monkeypatch):
    """Latency grows with theta; memory fits up to 0.5: nothing meets a 0.01 s target, the
    fastest within memory (the smallest theta measured) is chosen, flagged as such."""
    def fake(data, cfg, device, theta):
        return Cost(0.1 + theta, 1000 if theta <= 0.5 else 10**15)
    monkeypatch.setattr(profiler, "measure_theta", fake)
    cal = profiler.calibrate(graph, SMALL, _profile(target_epoch_s=0.01), torch.device("cpu"),
                             log=lambda _: None)
    fastest = min(m.theta for m in cal.result.measurements)
    assert not cal.meets_target and cal.chosen == fastest
    assert cal.predicted().epoch_s == pytest.approx(0.1 + fastest)
    line = profiler.closest_fit_line(cal, _profile(target_epoch_s=0.01))
    assert "0.01 s" in line and f"theta_max = {fastest:.2f}" in line
    assert f"predicted {0.1 + fastest:.3f} s per epoch" in line and "\n" not in line

    # over memory everywhere: nothing to train with
    monkeypatch.setattr(profiler, "measure_theta", lambda *a: Cost(0.1, 10**15))
    cal = profiler.calibrate(graph, SMALL, _profile(target_epoch_s=0.01), torch.device("cpu"),
                             log=lambda _: None)
    assert cal.chosen is None


def test_the_closest_fit_is_the_fastest_over_every_batch_size_tried(graph, monkeypatch):
    """Epoch time lowest at batch 100 (of 400, 200, 100, 50): that batch is trained."""
    times = {400: 5.0, 200: 3.0, 100: 2.0, 50: 4.0}
    monkeypatch.setattr(profiler, "measure_theta",
                        lambda data, cfg, device, theta: Cost(times[cfg.run.batch_size] + theta,
                                                              1000))
    cfg = replace(SMALL, mode="minibatch", batch_size=400)
    cal = profiler.calibrate(graph, cfg, _profile(target_epoch_s=1.0, batch_size_min=50),
                             torch.device("cpu"), log=lambda _: None)
    assert not cal.meets_target and cal.batch_size == 100 and cal.chosen == 0.05
    assert len(cal.notes) == 3  # 400 -> 200 -> 100 -> 50, each halving said


def _one_line_error(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("edgegcl: error")]
    assert len(lines) == 1, err
    return lines[0]


def test_train_with_an_unmeetable_target_trains_and_says_so_in_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", *TINY, "--profile", "cpu", "--auto-budget", "--target-epoch-s",
                 "1e-6", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    said = [line for line in err.splitlines() if "closest fit" in line]
    assert len(said) == 1 and "1e-06 s" in said[0] and "predicted" in said[0], err
    assert said[0].endswith("s per epoch; training with it")
    report = json.loads((out / "metrics.json").read_text())["auto_budget"]
    assert report["meets_target"] is False and report["budgets"]["epoch_s"] == 1e-6
    assert report["predicted"]["epoch_s"] > 0 and report["measured"]["epoch_s"] > 0
    assert report["predicted"]["peak_memory_bytes"] >= 0
    assert report["measured"]["peak_memory_bytes"] >= 0
    assert not report["within_budgets"]


def test_a_memory_budget_nothing_fits_in_is_exit_2_one_line_and_leaves_nothing(tmp_path,
                                                                              capsys):
    out = tmp_path / "run"
    code = main(["train", *TINY, "--profile", "cpu", "--auto-budget", "--memory-gib", "1e-6",
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    line = _one_line_error(err)
    assert "nothing fits profile cpu's memory" in line and "--memory-gib" in line
    assert "--mode minibatch" in line and "--batch-size" not in line  # full-graph advice
    assert err.count("nothing fits") == 1  # said once
    assert not out.exists()  # a failed start writes nothing


def test_the_second_identical_run_reuses_the_measurements(tmp_path, capsys):
    argv = ["train", *TINY, "--profile", "cpu", "--auto-budget"]
    assert main([*argv, "--out", str(tmp_path / "first")]) == 0
    first = capsys.readouterr().err
    assert "profiling theta_max" in first and "from the profile cache" not in first
    assert main([*argv, "--out", str(tmp_path / "second")]) == 0
    second = capsys.readouterr().err
    assert "profiling theta_max" not in second  # nothing measured again
    assert "came from the profile cache" in second
    a, b = (json.loads((tmp_path / run / "profile.json").read_text())
            for run in ("first", "second"))
    assert a["paths"] == b["paths"] and a["chosen_theta_max"] == b["chosen_theta_max"]
    assert b["from_cache"] == len(b["paths"]) and a["from_cache"] == 0
    # another budget reuses what was measured and measures only the thetas it adds
    assert main([*argv, "--target-epoch-s", "1e-6", "--out", str(tmp_path / "third")]) == 0
    third = capsys.readouterr().err
    assert "profiling theta_max = 0.10" not in third and "profiling theta_max = 0.05" in third


def test_budget_flags_need_a_profile_and_positive_values(capsys):
    assert main(["train", *TINY, "--target-epoch-s", "2"]) == 2
    assert "add --profile" in _one_line_error(capsys.readouterr().err)
    assert main(["train", *TINY, "--profile", "cpu", "--memory-gib", "-1"]) == 2
    assert "--memory-gib must be a positive number" in _one_line_error(capsys.readouterr().err)
    assert main(["train", *TINY, "--profile", "cpu", "--target-epoch-s", "nan"]) == 2
    assert "--target-epoch-s must be" in _one_line_error(capsys.readouterr().err)


def test_profile_command_writes_its_table(tmp_path, capsys):
    out = tmp_path / "prof"
    assert main(["profile", "--profile", "cpu", *TINY, "--out", str(out)]) == 0
    table = json.loads((out / "profile.json").read_text())
    assert table["profile"] == "cpu" and table["measurements"]
    assert not (out / "metrics.json").exists()


def test_auto_budget_without_profile_and_contradicting_device_are_usage_errors(capsys):
    assert main(["train", *TINY, "--auto-budget"]) == 2
    assert main(["train", *TINY, "--profile", "cpu", "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "needs a device profile" in err[0] and "contradicts profile cpu" in err[1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_calibration_measures_allocator_peak(graph):
    cfg = replace(SMALL, device="cuda")
    cal = profiler.calibrate(graph, cfg, load_profile("rtx4090"), torch.device("cuda"),
                             log=lambda _: None)
    assert cal.chosen is not None
    assert all(m.peak_bytes > 0 for m in cal.result.measurements if not m.oom)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_out_of_memory_is_caught_and_flushed():
    from edgegcl.errors import is_out_of_memory
    with pytest.raises(Exception) as info:
        torch.empty(2**50, device="cuda")
    assert is_out_of_memory(info.value)


def test_reachable_eta_bounds_every_schedule_and_saturates_when_it_can():
    import random

    from edgegcl.contrast.hans import CATEGORIES

    cfg = TrainConfig(epochs=300, pace="fixed", T_init=60, T_int=20, e=10)  # the paper's
    bound = reach.reachable_eta(cfg.schedule, cfg.hans, cfg.run.epochs)
    hans = cfg.build_scheduler()
    assert hans.used() < sum(bound[c] * hans.theta_cat[c] for c in CATEGORIES) < cfg.schedule.theta_max
    rng = random.Random(0)
    for trial in range(20):  # random losses: plateaus, drops, skewed category shares
        run = cfg.build_scheduler()
        for _ in range(cfg.run.epochs - 1):
            run.step({c: rng.uniform(0.1, 5.0) * (1 + trial % 3) for c in CATEGORIES})
        assert all(run.eta[c] <= bound[c] + 1e-9 for c in CATEGORIES), (trial, run.eta, bound)
    fast = TrainConfig(epochs=400, theta_max=0.5, T_init=5, T_int=2, e=1, pace="fixed")
    assert reach.reachable_eta(fast.schedule, fast.hans, fast.run.epochs) == pytest.approx(
        dict.fromkeys(CATEGORIES, 1.0))
    # the deadline pace always gets there: the profiler measures what the run will use
    default = TrainConfig(epochs=300)
    assert reach.reachable_eta(default.schedule, default.hans, 300) == pytest.approx(
        dict.fromkeys(CATEGORIES, 1.0))
