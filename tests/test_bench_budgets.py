"""``edgegcl bench budgets``: what each theta_max costs, as a table, CSV and plot where told
(edgegcl.budget.bench, edgegcl.budget.table)."""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

import pytest

from edgegcl.budget.table import (BUSY_CORES, BudgetTable, Cell, choose, table_csv,
                                  table_markdown)
from edgegcl.budget.cache import cpu_model
from edgegcl.cli.main import main

TINY = ["--dataset", "synthetic", "--nodes", "300", "--features", "8", "--hidden-dim", "8",
        "--out-dim", "4", "--proj-dim", "4", "--threads", "1", "--encoder", "gcn"]


def _table(cells: list[Cell], auto: dict[float, str] | None = None) -> BudgetTable:
    auto = auto if auto is not None else {c.theta: "dense" for c in cells}
    return BudgetTable("g", 10, 20, "full", 64, "cpu", 1, 3, cells, (0.1, 0.2), "now", 1.0,
                       auto)


def test_cells_report_median_spread_and_busy_marks() -> None:
    quiet = Cell(0.5, "dense", [0.3, 0.1, 0.2], [10, 30, 20], [0.0, 0.0, 0.0])
    busy = Cell(1.0, "dense", [0.5, 0.4, 0.6], [40, 40, 40], [0.0, BUSY_CORES * 2, 0.0])
    assert quiet.median_s() == 0.2 and quiet.spread_s() == (0.1, 0.3)
    assert quiet.median_peak() == 20 and not quiet.busy and busy.busy
    text = table_markdown(_table([quiet, busy]))
    assert "| 0.50 | dense | 0.2000 | 0.1000 - 0.3000 |" in text
    assert "yes *" in text and "1 cell(s) ran while other processes" in text
    # 0.2 / 0.5 s, 20 / 40 bytes; 0.2 s within 1.0's slowest 0.6 s, 20 within its 40 bytes
    assert "| 0.50 | dense | 0.40 | 0.50 | yes, yes | dense |" in text
    assert "time grows with theta_max" in text
    assert "**Choice: `--theta-max 0.5 --logits dense`**" in text  # 1 costs 2.5x: not free
    rows = list(csv.DictReader(table_csv(_table([quiet, busy])).splitlines()))
    assert len(rows) == 6 and [r["busy"] for r in rows] == ["0", "0", "0", "0", "1", "0"]


def test_auto_takes_the_path_that_measured_cheaper() -> None:
    """At 0.5 pairs measured slower than dense: auto is dense there, judged against theta_max
    = 1; the run's rule (pairs there) is said beside it, with how to get the cheaper path."""
    cells = [Cell(0.5, "pairs", [0.9, 0.9, 0.9], [80] * 3, [0.0] * 3),
             Cell(0.5, "dense", [0.55] * 3, [30] * 3, [0.0] * 3),
             Cell(0.75, "dense", [0.5] * 3, [30] * 3, [0.0] * 3),
             Cell(1.0, "dense", [0.4, 0.5, 0.6], [40] * 3, [0.0] * 3)]
    text = table_markdown(_table(cells, {0.5: "pairs", 0.75: "dense", 1.0: "dense"}))
    assert "| 0.50 | dense | 1.10 | 0.75 | yes, yes | pairs |" in text
    assert "| 0.75 | dense | 1.00 | 0.75 | yes, yes | dense |" in text
    assert "does not grow with theta_max" in text  # 0.5's 0.55 s above 0.75's 0.5 s
    assert "At theta_max 0.5 a run's `--logits auto` rule" in text


def _curve(times: dict[float, float], peak: int = 10, scheduler: str = "hans") -> BudgetTable:
    table = _table([Cell(t, "pairs", [s] * 3, [peak] * 3, [0.0] * 3) for t, s in times.items()])
    table.scheduler = scheduler
    return table


def test_the_choice_is_the_knee_of_the_cost_curve() -> None:
    # HANS (accuracy grows with theta_max): flat up to 0.25, then steep: the knee is the
    # last budget before the climb
    table = _curve({0.05: 0.10, 0.1: 0.11, 0.25: 0.12, 0.5: 0.30, 0.75: 0.50, 1.0: 0.70})
    choice = choose(table)
    assert choice is not None and (choice.theta, choice.logits) == (0.25, "pairs")
    assert "knee" in choice.why and "theta_max 0.5 costs 0.300 s" in choice.why
    text = table_markdown(table)
    assert "**Choice: `--theta-max 0.25 --logits pairs`**" in text
    assert "Accuracy: with HANS's hardest picks" in text and "docs/hans.md" in text
    # a flat curve (within FLAT): the largest budget costs nothing measurable
    flat = choose(_curve({0.1: 0.100, 0.5: 0.102, 1.0: 0.104}))
    assert flat is not None and flat.theta == 1.0 and "within 5 %" in flat.why
    # the curve flattens (it rises fastest first): the largest budget costs little more
    concave = choose(_curve({0.1: 0.1, 0.25: 0.3, 0.5: 0.36, 0.75: 0.38, 1.0: 0.37}))
    assert concave is not None and concave.theta == 1.0 and "flattens from theta_max 0.25" in \
        concave.why
    # two budgets far apart: the larger one is not chosen for free
    two = choose(_curve({0.1: 0.1, 1.0: 0.4}))
    assert two is not None and two.theta == 0.1


def test_with_the_random_subset_the_choice_is_the_cheapest_budget_measured_for_accuracy(
        ) -> None:
    # accuracy flat in theta_max from 0.1 to 1: the cheapest there, not 0.05 (unmeasured),
    # the largest of those within FLAT of it
    table = _curve({0.05: 0.09, 0.1: 0.10, 0.25: 0.104, 0.5: 0.3, 1.0: 0.37}, scheduler="random")
    choice = choose(table)
    assert choice is not None and choice.theta == 0.25 and "accuracy stayed flat" in choice.why
    assert "Accuracy: with the random subset" in table_markdown(table)


def test_the_choice_meets_the_targets_given() -> None:
    table = _curve({0.1: 0.1, 0.5: 0.3, 1.0: 0.7})
    table.target_epoch_s = 0.35
    choice = choose(table)
    assert choice is not None and choice.theta == 0.5 and "within 0.35 s an epoch" in choice.why
    table.memory_bytes = 5  # every cell peaks at 10 bytes: none fits, the fastest is said
    choice = choose(table)
    assert choice is not None and choice.theta == 0.1
    assert choice.why.startswith("no theta_max meets 0.35 s an epoch")
    table.target_epoch_s, table.memory_bytes = 0.01, None  # too fast for every budget
    choice = choose(table)
    assert choice is not None and choice.theta == 0.1 and "no theta_max meets" in choice.why
    assert choose(_table([Cell(1.0, "dense", [None], [None], [0.0])])) is None


def test_out_of_memory_cells_are_said_and_left_out_of_the_ratios() -> None:
    oom = Cell(1.0, "dense", [None], [None], [0.0])
    fits = Cell(1.0, "pairs", [0.2], [5], [0.0])
    table = _table([oom, fits])
    assert table.fastest(1.0) is fits
    assert "| 1.00 | dense | out of memory |" in table_markdown(table)


def test_the_command_writes_where_told_from_any_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    before = set(os.listdir(tmp_path))
    code = main(["bench", "budgets", *TINY, "--thetas", "0.5,1", "--repeats", "3",
                 "--out", "res"])
    out = capsys.readouterr().out
    assert code == 0
    assert set(os.listdir(tmp_path)) - before == {"res"}  # nothing else written here
    assert sorted(os.listdir(tmp_path / "res")) == ["budgets.csv", "budgets.md", "budgets.png"]
    rows = list(csv.DictReader((tmp_path / "res" / "budgets.csv").open()))
    assert len(rows) == 2 * 2 * 3  # thetas x paths x repeats
    assert {r["repeat"] for r in rows} == {"1", "2", "3"}
    assert all(float(r["epoch_s"]) > 0 and int(r["peak_bytes"]) >= 0 for r in rows)
    assert "median of 3 interleaved repeats" in out
    assert (tmp_path / "res" / "budgets.png").read_bytes()[:4] == b"\x89PNG"
    # a second run refuses to overwrite, unless --force
    assert main(["bench", "budgets", *TINY, "--thetas", "1", "--repeats", "1",
                 "--out", "res"]) == 2
    assert "--force" in capsys.readouterr().err


def test_a_named_logits_path_is_the_only_one_measured(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``--logits dense`` sets the run measured, as every config flag does: its cells only,
    and the table judges that path."""
    pytest.importorskip("matplotlib")
    assert main(["bench", "budgets", *TINY, "--thetas", "0.5,1", "--repeats", "1",
                 "--logits", "dense", "--out", str(tmp_path / "res")]) == 0
    captured = capsys.readouterr()
    rows = list(csv.DictReader((tmp_path / "res" / "budgets.csv").open()))
    assert [(r["theta_max"], r["logits"]) for r in rows] == [("0.5", "dense"), ("1.0", "dense")]
    assert "x 1 logits path x 1 repeats" in captured.err
    assert re.search(r"\*\*Choice: `--theta-max (0\.5|1) --logits dense`\*\*", captured.out)
    assert "| 0.50 | dense |" in captured.out and "| 0.50 | pairs |" not in captured.out
    # whose figures they are: the command and the machine
    assert "    edgegcl bench budgets --dataset synthetic" in captured.out
    assert f"{cpu_model()}, {os.cpu_count()} cores" in captured.out


@pytest.mark.parametrize("argv, says", [
    (["--thetas", "0.5"], "--out DIR"),
    (["--thetas", "0,1", "--out", "r"], "--thetas must be"),
    (["--repeats", "0", "--out", "r"], "--repeats must be in [1, 1000]"),
    (["--out", "no/such/dir/r"], "does not exist"),
    (["--out", "/proc/edgegcl-r"], "cannot write into /proc"),  # no file there, root or not
])
def test_bad_requests_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture, argv: list[str],
                                   says: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "budgets", *TINY, *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
    assert os.listdir(tmp_path) == []
