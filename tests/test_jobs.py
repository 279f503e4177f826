"""The Python entries of whole jobs (edgegcl.jobs) do what the commands do: the same
configuration through ``edgegcl train`` and ``edgegcl.train`` writes the same metrics.json,
with the auto-budget and on resume; the same refusals; the other jobs the same files."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import edgegcl
from edgegcl.cli.main import main
from edgegcl.errors import UsageError

SETTINGS: dict[str, object] = {
    "dataset": "synthetic", "nodes": 120, "features": 16, "hidden_dim": 16, "out_dim": 8,
    "proj_dim": 8, "epochs": 4, "eval_every": 2, "T_init": 2, "T_int": 2, "device": "cpu",
    "encoder": "gcn", "threads": 1}
"""A run small enough to train in well under a second, on one thread (no thread search)."""

MEASURED = {"epoch_time_s", "train_time_s", "final_epoch_time_s", "peak_memory_bytes",
            "measured", "measured_over_predicted", "measurements_from_cache", "memory_bytes"}
"""What a clock or the allocator measures (the memory budget is what is left beside what the
process holds at the time): the rest of metrics.json is determined by the run."""


def _flags(settings: dict[str, object]) -> list[str]:
    return [text for name, value in settings.items()
            for text in ("--" + name.replace("_", "-"), str(value))]


def _determined(value: Any) -> Any:
    """metrics.json without what was measured by a clock or the allocator."""
    if isinstance(value, dict):
        return {k: _determined(v) for k, v in value.items() if k not in MEASURED}
    if isinstance(value, list):
        return [_determined(v) for v in value]
    return value


def _metrics(run_dir: Path) -> Any:
    return _determined(json.loads((run_dir / "metrics.json").read_text()))


def test_train_from_python_writes_what_the_command_writes(tmp_path: Path) -> None:
    assert main(["train", *_flags(SETTINGS), "--out", str(tmp_path / "cli")]) == 0
    run = edgegcl.train(settings=SETTINGS, out=tmp_path / "py")
    assert run is not None and run.path == tmp_path / "py"
    assert _metrics(tmp_path / "py") == _metrics(tmp_path / "cli")
    config = [(tmp_path / name / "config.toml").read_text().replace(str(tmp_path / name), "OUT")
              for name in ("py", "cli")]
    assert config[0] == config[1]
    assert run.metrics is not None and run.embed().shape == (120, 8)


def test_auto_budget_and_resume_from_python_match_the_command(tmp_path: Path) -> None:
    """The profiler's choice (the second run reads the measurements the first cached, so
    both choose from the same numbers) and a resumed run give the same metrics either way."""
    argv = ["train", *_flags(SETTINGS), "--profile", "cpu", "--auto-budget", "--memory-gib", "4"]
    assert main([*argv, "--out", str(tmp_path / "cli")]) == 0
    run = edgegcl.train(settings=SETTINGS, out=tmp_path / "py", profile="cpu",
                        auto_budget=True, memory_gib=4)  # (the profile's: what is free now)
    assert run is not None and run.metrics is not None
    cli = _metrics(tmp_path / "cli")
    assert run.metrics["auto_budget"]["measurements_from_cache"] > 0
    assert _metrics(tmp_path / "py") == cli and "auto_budget" in cli

    assert main(["train", "--resume", str(tmp_path / "cli"), "--epochs", "6"]) == 0
    edgegcl.train(resume=tmp_path / "py", settings={"epochs": 6})
    resumed = _metrics(tmp_path / "cli")
    assert resumed["seeds"][0]["epochs_trained"] == 6
    assert _metrics(tmp_path / "py") == resumed


def test_train_from_python_refuses_what_the_command_refuses(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="already exists and is not empty"):
        edgegcl.train(settings=SETTINGS, out=taken)
    assert [p.name for p in taken.iterdir()] == ["notes.txt"]
    with pytest.raises(UsageError, match="--auto-budget needs a device profile"):
        edgegcl.train(settings=SETTINGS, auto_budget=True)
    with pytest.raises(UsageError, match="is not an option"):
        edgegcl.train(settings={"theta": 0.3})
    with pytest.raises(UsageError, match="--theta-max must be in"):
        edgegcl.train(settings={**SETTINGS, "theta_max": 2.0}, out=tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_train_takes_a_graph_and_a_config_object(tmp_path: Path) -> None:
    cfg = edgegcl.TrainConfig(**{k: v for k, v in SETTINGS.items() if k != "dataset"})
    graph = edgegcl.synthetic_graph(cfg.synthetic_spec())
    seen: list[int] = []

    class Count(edgegcl.Hook):
        def epoch_end(self, seed: object, row: dict[str, object], events: object) -> None:
            seen.append(int(row["epoch"]))  # type: ignore[call-overload]

    run = edgegcl.train(cfg.replace(schedule={"theta_max": 0.3}), graph,
                        out=tmp_path / "run", hooks=[Count()])
    assert run is not None and seen == [1, 2, 3, 4]
    assert run.config.schedule.theta_max == 0.3  # every section of the config given is kept
    assert run.metrics is not None and run.metrics["num_nodes"] == graph.num_nodes
    with pytest.raises(UsageError, match="edge_index"):
        edgegcl.train(cfg, graph.__class__(x=graph.x, edge_index=torch.zeros(3, 2)),
                      out=tmp_path / "broken")


def test_a_stopped_python_run_names_its_directory_and_resumes(tmp_path: Path) -> None:
    epochs: list[int] = []

    class Count(edgegcl.Hook):
        def epoch_end(self, seed: object, row: dict[str, object], events: object) -> None:
            epochs.append(1)

    with pytest.raises(edgegcl.Stopped) as stopped:
        edgegcl.train(settings=SETTINGS, out=tmp_path / "run", hooks=[Count()],
                      stop=lambda: len(epochs) >= 2)
    assert stopped.value.run_dir == tmp_path / "run" and stopped.value.epoch == len(epochs) < 4
    run = edgegcl.train(resume=stopped.value.run_dir)
    assert run is not None and run.metrics is not None
    assert run.metrics["seeds"][0]["epochs_trained"] == 4


def test_a_renamed_name_warns_with_its_replacement_for_one_release(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The one deprecation path: an old top-level name in RENAMED gives the new object and a
    DeprecationWarning naming the replacement and the release that removes it; a name in
    neither table is an AttributeError."""
    from edgegcl import deprecation

    monkeypatch.setitem(deprecation.RENAMED, "run", deprecation.Renamed("train_seeds", "0.2"))
    monkeypatch.delitem(vars(edgegcl), "run", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert edgegcl.run is edgegcl.train_seeds
    assert [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)
            and "edgegcl.run" in str(w.message)] == [
        "edgegcl.run is now train_seeds; the name edgegcl.run goes in edgegcl 0.2 "
        "(CHANGELOG.md)"]
    assert "run" not in edgegcl.__all__
    with pytest.raises(AttributeError):
        edgegcl.no_such_name


def test_export_and_profile_from_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    run = edgegcl.train(settings=SETTINGS, out=tmp_path / "run")
    assert run is not None
    lines = edgegcl.export(tmp_path / "m.onnx", run=run.path)
    assert (tmp_path / "m.onnx").is_file() and any("m.onnx" in line for line in lines)
    with pytest.raises(UsageError, match="--opset must be in"):
        edgegcl.export(tmp_path / "n.onnx", run=run.path, opset=3)
    cal = edgegcl.profile(settings=SETTINGS, profile="cpu", out=tmp_path / "profile")
    assert cal.chosen is not None
    assert json.loads((tmp_path / "profile" / "profile.json").read_text())["chosen_theta_max"] == \
        cal.chosen
