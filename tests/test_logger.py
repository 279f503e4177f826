"""``edgegcl train --logger tensorboard`` (edgegcl.training.logger): event files TensorBoard
reads back, holding every epochs.csv row and HANS event; one line when the package is
missing."""

from __future__ import annotations

import csv
import importlib.util
import json
from functools import partial
from pathlib import Path

import pytest
from helpers import capture

from edgegcl.cli.main import main

TINY = ["--theta-max", "0.5", "--nodes", "120", "--features", "16", "--hidden-dim", "16",
        "--out-dim", "8", "--proj-dim", "8", "--epochs", "6", "--eval-every", "3", "--T-init",
        "1", "--T-int", "1", "--b", "0.5", "--device", "cpu", "--seeds", "2", "--encoder", "gcn"]
_run = partial(capture, main)


def _read_back(seed_dir: Path):
    """What TensorBoard itself shows for one seed: its event accumulator over the folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(seed_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_tensorboard_reads_back_every_row_and_event(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    run_dir = tmp_path / "run"
    code, _, err = _run(["train", *TINY, "--logger", "tensorboard", "--out", str(run_dir)])
    assert code == 0, err
    for k in (0, 1):
        seed_dir = run_dir / f"seed-{k}"
        assert list(seed_dir.glob("events.out.tfevents.*")), list(seed_dir.iterdir())
        acc = _read_back(seed_dir)
        rows = list(csv.DictReader((seed_dir / "epochs.csv").open()))
        tags = set(acc.Tags()["scalars"])
        for column in rows[0]:
            if column == "epoch":
                continue
            written = {int(r["epoch"]): float(r[column]) for r in rows if r[column] != ""}
            if not written:  # a column never filled (the authors' protocol did not run)
                assert f"epochs/{column}" not in tags
                continue
            read = {e.step: e.value for e in acc.Scalars(f"epochs/{column}")}
            # float32 in the file: half an ulp, 2**-24 relative; NaN where a category is unused
            assert read == pytest.approx(written, rel=2**-23, nan_ok=True), column
        events = [json.loads(line) for line in (seed_dir / "hans_events.jsonl").open()]
        assert events, "the tiny run makes HANS decisions"
        text = acc.Tensors("hans/events/text_summary")  # add_text's tag
        logged = [json.loads(t.tensor_proto.string_val[0].decode()) for t in text]
        assert logged == events and [t.step for t in text] == [e["epoch"] for e in events]


def test_a_resumed_seed_logs_on_from_where_it_resumes(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    run_dir = tmp_path / "run"
    argv = ["train", *TINY, "--seeds", "1", "--logger", "tensorboard", "--out", str(run_dir)]
    assert _run([*argv[:-2], "--epochs", "3"] + argv[-2:])[0] == 0
    code, _, err = _run(["train", "--resume", str(run_dir), "--epochs", "6",
                         "--logger", "tensorboard"])
    assert code == 0, err
    steps = [e.step for e in _read_back(run_dir / "seed-0").Scalars("epochs/loss")]
    assert steps == list(range(1, 7))


def test_without_the_package_it_is_one_line_and_nothing_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorboard" else real(name, *a))
    code, out, err = _run(["train", *TINY, "--logger", "tensorboard",
                           "--out", str(tmp_path / "run")])
    assert code == 2 and out == ""
    assert err.strip() == ("edgegcl: error: --logger tensorboard needs the tensorboard "
                           "package: pip install tensorboard (or drop --logger)")
    assert not (tmp_path / "run").exists()
