"""Training curves: seed-K/epochs.csv and ``edgegcl plot`` (edgegcl.training.curves)."""

from __future__ import annotations

import csv
import json
from functools import partial
from pathlib import Path

import pytest
from helpers import capture

from edgegcl.cli.main import main
from edgegcl.training.curves import FIELDS

TINY = ["--theta-max", "0.5", "--nodes", "120", "--features", "16", "--hidden-dim", "16", "--out-dim", "8",
        "--proj-dim", "8", "--epochs", "6", "--eval-every", "3", "--T-init", "1", "--T-int", "1",
        "--b", "0.5", "--device", "cpu", "--seeds", "2", "--encoder", "gcn"]
_run = partial(capture, main)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("curves")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGEGCL_DATA", str(base / "data"))
        code, _, err = _run(["train", *TINY, "--out", str(base / "run")])
    assert code == 0, err
    return base / "run"


def test_one_row_per_epoch_with_the_probes_where_they_ran(run_dir: Path) -> None:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for k in (0, 1):
        rows = list(csv.DictReader((run_dir / f"seed-{k}" / "epochs.csv").open()))
        assert tuple(rows[0]) == FIELDS
        assert [int(r["epoch"]) for r in rows] == list(range(1, 7))
        probes = {int(r["epoch"]): float(r["test_micro_f1"]) for r in rows if r["test_micro_f1"]}
        assert probes == {h["epoch"]: h["test_micro"] for h in metrics["seeds"][k]["history"]}
        assert all(float(r["epoch_s"]) > 0 and int(r["active_per_anchor"]) > 0 for r in rows)
        etas = [float(r["eta_hard"]) for r in rows]
        assert etas[-1] == metrics["seeds"][k]["final_eta"]["hard"] and etas[-1] > etas[0]


def test_plot_writes_a_png_for_a_finished_and_for_an_interrupted_run(run_dir: Path,
                                                                     tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    code, out, err = _run(["plot", str(run_dir)])
    assert code == 0, err
    png = run_dir / "curves.png"
    assert out.strip().endswith("curves.png") and png.read_bytes()[:4] == b"\x89PNG"
    # an interrupted run: no metrics.json, and a half-written last row
    stopped = tmp_path / "stopped" / "seed-0"
    stopped.mkdir(parents=True)
    text = (run_dir / "seed-0" / "epochs.csv").read_text()
    (stopped / "epochs.csv").write_text(text[: len(text) - 20])
    code, _, err = _run(["plot", str(stopped.parent), "--out", str(tmp_path / "c.png")])
    assert code == 0, err
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_of_a_folder_without_a_run_is_one_line(tmp_path: Path) -> None:
    code, _, err = _run(["plot", str(tmp_path)])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "epochs.csv" in lines[0]


def test_plot_of_extreme_values_is_a_picture_or_one_line(run_dir: Path, tmp_path: Path) -> None:
    """What a run can write (float32 values, an inf loss of a diverged epoch) is drawn; a value
    no run writes (beyond float32) is one line, never a traceback from the plotting library."""
    pytest.importorskip("matplotlib")
    import csv

    seed = tmp_path / "run" / "seed-0"
    seed.mkdir(parents=True)
    rows = list(csv.reader((run_dir / "seed-0" / "epochs.csv").read_text().splitlines()))
    column = rows[0].index("loss")
    for values, drawn in ((("3.4e38", "-3.4e38"), True), (("inf", "-inf"), True),
                          (("1e308", "-1e308"), False)):
        rows[1][column], rows[2][column] = values
        with (seed / "epochs.csv").open("w", newline="") as fh:
            csv.writer(fh).writerows(rows)
        code, _, err = _run(["plot", str(seed.parent), "--out", str(tmp_path / "c.png"),
                             "--force"])
        lines = err.strip().splitlines()
        if drawn:
            assert code == 0 and (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG", err
        else:
            assert code == 2 and len(lines) == 1 and "beyond what a run writes" in lines[0], err
