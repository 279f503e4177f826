"""Commands that answer at once: ``--version``, ``--help`` of every command, ``profiles``, the
command line's own errors and a bad configuration value come before torch is imported (the
config sections need the standard library alone; edgegcl.cli.main adds a command's options
when it is named).

Checked by what a fresh interpreter has imported when the command returns, not by timing it
(bench/cli_latency.py times it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "torch_geometric", "onnx", "onnxruntime", "scipy", "numba")

PROBE = """
import os, sys
for name in filter(None, os.environ.get("BLOCK_MODULES", "").split(",")):
    sys.modules[name] = None  # as if not installed
from edgegcl.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = [m for m in {heavy!r} if m in sys.modules]
print(f"EXIT={{code}} HEAVY={{','.join(heavy)}}", file=sys.stderr)
""".format(heavy=HEAVY)


def _run(argv: list[str], cwd: Path, block: str = "") -> tuple[int, str, str, list[str]]:
    """The command in a fresh interpreter (``block``: modules it finds missing): exit code,
    stdout, stderr without the probe's line, and the heavy modules it imported."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "BLOCK_MODULES": block}
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)
    *err, probe = proc.stderr.strip().splitlines() or [""]
    assert probe.startswith("EXIT="), proc.stderr
    code, heavy = probe.removeprefix("EXIT=").split(" HEAVY=")
    return int(code), proc.stdout, "\n".join(err), [m for m in heavy.split(",") if m]


@pytest.mark.parametrize("argv, code, where, says", [
    (["--version"], 0, "out", "edgegcl "),
    (["--help"], 0, "out", "profiles"),
    (["profiles"], 0, "out", "raspberry-pi-5"),
    (["profiles", "no-such-board"], 2, "err", "unknown profile 'no-such-board'"),
    (["plot", "no-such-run"], 2, "err", "edgegcl: error:"),
    ([], 2, "err", "the following arguments are required"),
    (["trian"], 2, "err", "invalid choice: 'trian'"),
    (["--verbose"], 2, "err", "edgegcl: error:"),
    (["train", "--help"], 0, "out", "--theta-max"),
    (["profile", "--help"], 0, "out", "--remeasure"),
    (["export", "--help"], 0, "out", "--opset"),
    (["plot", "--help"], 0, "out", "RUN_DIR"),
    (["train", "--epochs", "many"], 2, "err", "--epochs"),
    (["train", "--theta-max", "2"], 2, "err", "--theta-max must be in [0, 1]"),
    (["train", "--ratios", "1,2,3"], 2, "err", "--ratios"),
    (["train", "--auto-budget"], 2, "err", "--auto-budget needs a device profile"),
    (["train", "--profile", "nope"], 2, "err", "unknown profile 'nope'"),
    (["profile", "--profile", "cpu", "--scheduler", "nope"], 2, "err", "--scheduler"),
    (["export", "m.onnx", "--opset", "3"], 2, "err", "--opset must be in"),
])
def test_answers_without_importing_torch(tmp_path: Path, argv: list[str], code: int, where: str,
                                         says: str) -> None:
    got, out, err, heavy = _run(argv, tmp_path)
    assert got == code, err
    assert says in (out if where == "out" else err)
    assert heavy == [], f"edgegcl {' '.join(argv)} imported {heavy}"
    if code == 2:
        assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_plot_without_matplotlib_says_so_without_importing_torch(tmp_path: Path) -> None:
    from edgegcl.training.curves import FIELDS, csv_text

    (tmp_path / "run" / "seed-0").mkdir(parents=True)
    row = dict.fromkeys(FIELDS, 1.0) | {"val_micro_f1": "", "test_micro_f1": "",
                                        "authors_test_micro_f1": ""}
    (tmp_path / "run" / "seed-0" / "epochs.csv").write_text(csv_text([row]))
    got, _, err, heavy = _run(["plot", "run"], tmp_path, block="matplotlib")
    assert got == 2 and heavy == []
    assert err == "edgegcl: error: edgegcl plot needs matplotlib: pip install matplotlib"


def test_a_subcommands_options_still_load_when_it_is_named(tmp_path: Path) -> None:
    """The lazily added options are there: ``train --help`` lists a config flag of every
    section, the budget flags and the logger."""
    got, out, err, heavy = _run(["train", "--help"], tmp_path)
    assert got == 0 and heavy == []
    for flag in ("--theta-max", "--target-epoch-s", "--logger", "--hidden-dim", "--p-edge-1",
                 "--tau", "--batch-size", "--negatives", "--nodes", "--dataset"):
        assert flag in out
