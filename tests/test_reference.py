"""The built-in GCN trains as the recorded reference runs did, on any CPU.

``tests/fixtures/reference-runs.json`` holds three small fixed-seed runs (weights, HANS events,
epochs.csv, metrics) recorded on one machine (tests/reference_runs.py). Another CPU, or
another build of torch, rounds float32 sums in another order, so its floats differ in the last
bits and nothing recorded there is compared bitwise here. What is compared follows from the
maths:

- **in one process, bitwise**: the same run twice gives the same bits (same kernels, same
  inputs): weights, events, curves, metrics;
- **against the recording, exactly**: what no rounding reaches: the schedule's integers
  (epochs, event kinds and reasons) and the shapes of every tensor;
- **against the recording, within a rounding bound**: weights, losses, eta and the
  loss-proportional steps within ``rounding_bound`` (below); micro-F1 scores within one node
  of their test set (the score's own quantisation step);
- **decisions taken from those floats, by what they were taken from**: the active negatives
  per anchor are floors of eta x |N_i|: equal where the row's etas are the recorded bits, else
  each eta that moved (by less than 1 / |N_i|) moves its floor by at most one; a chosen
  epoch, seed or classifier epoch is an argmax over micro-F1s: equal where every F1 it was
  chosen from is the recorded one, else one whose recorded figure is within one node of the
  recorded best (the recordings hold ties, which one flipped node can break either way).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from reference_runs import COMMON, RUNS, train

FIXTURE = Path(__file__).parent / "fixtures" / "reference-runs.json"
SAVED = json.loads(FIXTURE.read_text())
UNIT_ROUNDOFF = 2.0 ** -24
"""float32's unit roundoff u: one correctly rounded operation errs by at most u, relatively."""
EXACT_COLUMNS = ("epoch",)
ETA_COLUMNS = ("eta_hard", "eta_inter", "eta_easy")
DECISIONS = (".selected_epoch", ".checkpoint_seed", ".classifier_epoch",
             "authors_protocol.epoch")
"""metrics.json's integers chosen by an argmax over micro-F1s (see the module)."""
FLOAT_COLUMNS = ("loss", "loss_hard", "loss_inter", "loss_easy", "eta_hard", "eta_inter",
                 "eta_easy", "budget_used")
"""eta moves by loss-proportional steps (Eq. 9's b w_cat), so it is a float of the losses too;
the active negatives per anchor are integers (floors of eta theta |N_i|)."""
F1_KEYS = ("val_micro_f1", "test_micro_f1", "val_micro", "test_micro")


def _flag(args: list[str], name: str) -> int:
    return int(args[args.index(name) + 1])


def steps_and_width(name: str) -> tuple[int, int]:
    """The optimiser steps of reference ``name`` and the longest sum one step computes (the
    B x 2B similarity rows are summed over the anchors' candidates, the layers over nodes x
    width): both read from its command line."""
    args = [*COMMON, *RUNS[name]]
    nodes, epochs = _flag(args, "--nodes"), _flag(args, "--epochs")
    batch = _flag(args, "--batch-size") if "--batch-size" in args else nodes
    width = max(_flag(args, f) for f in ("--features", "--hidden-dim", "--out-dim"))
    return epochs * math.ceil(nodes / batch), 2 * batch * width


def rounding_bound(name: str) -> float:
    """Relative bound on how far one float32 run of ``name`` can drift from another that
    rounds its sums in another order: each step's sums err by about sqrt(n) u (the
    probabilistic bound of Higham and Mary, n the longest sum), and S steps carry at most S
    such errors forward: S sqrt(n) u. The recordings differ from a second CPU's by far less
    (a few units of u); a changed operation (a dropped term, another normalisation) moves
    weights by orders of magnitude more."""
    steps, width = steps_and_width(name)
    return steps * math.sqrt(width) * UNIT_ROUNDOFF


def _close(a: float, b: float, rel: float) -> bool:
    if math.isnan(a) or math.isnan(b):  # a category without negatives has no loss: both
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def _events(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines]


def _check_events(now: list[str], saved: list[str], rel: float, where: str) -> None:
    ours, theirs = _events(now), _events(saved)
    assert len(ours) == len(theirs), where
    for a, b in zip(ours, theirs):
        assert a.keys() == b.keys(), where
        for key in a:
            if isinstance(a[key], float) and isinstance(b[key], float):
                assert _close(a[key], b[key], rel), f"{where} {key}: {a[key]} vs {b[key]}"
            else:
                assert a[key] == b[key], f"{where} {key}"


def _f1_step(metrics: dict[str, Any], seed: dict[str, Any]) -> float:
    """One node's worth of micro-F1 (percent) on the smallest set a score is read on."""
    probe = seed.get("checkpoint_probe", {})
    smallest = min(v for k, v in probe.items() if k.endswith("_nodes") and v) if probe else 1
    authors = max(1, math.floor(0.1 * metrics["num_nodes"]))  # the authors' re-drawn 10 %
    return 100.0 / min(smallest, authors) + 1e-9


def _floats(a: Any) -> list[float]:
    """Every float in a metrics tree, in order."""
    if isinstance(a, dict):
        return [f for v in a.values() for f in _floats(v)]
    if isinstance(a, list):
        return [f for v in a for f in _floats(v)]
    return [a] if isinstance(a, float) else []


def _check_metrics(now: dict[str, Any], saved: dict[str, Any], where: str) -> None:
    """Every number of metrics.json: integers and strings exactly, F1 within one node; the
    integers chosen from F1s (``DECISIONS``) exactly where every float is the recorded one."""
    step = max(_f1_step(saved, s) for s in saved["seeds"])
    same_floats = _floats(now) == _floats(saved)

    def walk(a: Any, b: Any, path: str) -> None:
        assert type(a) is type(b) or {type(a), type(b)} <= {int, float}, path
        if isinstance(a, dict):
            assert a.keys() == b.keys(), path
            for k in a:
                walk(a[k], b[k], f"{path}.{k}")
        elif isinstance(a, list):
            assert len(a) == len(b), path
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{path}[{i}]")
        elif isinstance(a, float):
            assert abs(a - b) <= step, f"{path}: {a} vs {b} (one node = {step:.3g})"
        elif path.endswith(DECISIONS) and not same_floats:
            assert type(a) is type(b), path  # chosen from F1s that moved: checked above
        else:
            assert a == b, path

    walk(now, saved, where)


@pytest.fixture(scope="module", params=list(RUNS))
def reference(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[str, dict[str, Any]]:
    name = request.param
    return name, train(name, tmp_path_factory.mktemp(name) / "run")


def test_the_same_run_twice_in_one_process_is_bitwise_equal(
        reference: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    name, first = reference
    again = train(name, tmp_path / "again")
    assert again["metrics"] == first["metrics"]
    for seed, now in first["seeds"].items():
        other = again["seeds"][seed]
        assert other["events"] == now["events"] and other["curve"] == now["curve"], seed
        for part in ("final", "chosen"):
            for key, value in now[part].items():
                assert torch.equal(torch.tensor(other[part][key]), torch.tensor(value)), key


def test_the_schedule_and_choice_are_the_recorded_ones(
        reference: tuple[str, dict[str, Any]]) -> None:
    name, ours = reference
    theirs = SAVED["runs"][name]
    rel = rounding_bound(name)
    assert ours["seeds"].keys() == theirs["seeds"].keys()
    for seed, saved in theirs["seeds"].items():
        now = ours["seeds"][seed]
        _check_events(now["events"], saved["events"], rel, f"{name} {seed}")
        assert len(now["curve"]) == len(saved["curve"]), seed
        _check_chosen_epoch(now, saved, ours["metrics"], f"{name} {seed}")
        for a, b in zip(now["curve"], saved["curve"]):
            for column in EXACT_COLUMNS:
                assert a[column] == b[column], f"{seed} epoch {b['epoch']} {column}"
            moved = sum(a[c] != b[c] for c in ETA_COLUMNS)  # as written: bits, not values
            assert abs(int(a["active_per_anchor"]) - int(b["active_per_anchor"])) <= moved, \
                f"{seed} epoch {b['epoch']}: {a['active_per_anchor']} negatives per anchor " \
                f"vs {b['active_per_anchor']} with {moved} eta(s) moved"
            for column in FLOAT_COLUMNS:
                assert _close(float(a[column]), float(b[column]), rel), \
                    f"{seed} epoch {b['epoch']} {column}: {a[column]} vs {b[column]}"
    _check_metrics(ours["metrics"], theirs["metrics"], name)


def _check_chosen_epoch(now: dict[str, Any], saved: dict[str, Any], metrics: dict[str, Any],
                       where: str) -> None:
    """The kept checkpoint's epoch: the recorded one where every validation F1 it was chosen
    from is, else one whose recorded validation F1 is within one node of the recorded best."""
    val = {b["epoch"]: float(b["val_micro_f1"]) for b in saved["curve"] if b["val_micro_f1"]}
    ours = [a["val_micro_f1"] for a in now["curve"] if a["val_micro_f1"]]
    if ours == [b["val_micro_f1"] for b in saved["curve"] if b["val_micro_f1"]]:
        assert now["chosen_epoch"] == saved["chosen_epoch"], where
        return
    step = max(_f1_step(metrics, s) for s in metrics["seeds"])
    assert val[str(now["chosen_epoch"])] >= max(val.values()) - step, where


def test_the_active_negatives_follow_eta_at_less_than_one_per_anchor() -> None:
    """The premise of the active-negative check: an eta within the rounding bound moves
    eta x |N_i| by less than one negative, so its floor by at most one."""
    for name in RUNS:
        args = [*COMMON, *RUNS[name]]
        anchors = _flag(args, "--batch-size") if "--batch-size" in args else _flag(args, "--nodes")
        assert rounding_bound(name) * 2 * anchors < 1, name


def test_weights_are_the_recorded_ones_within_the_rounding_bound(
        reference: tuple[str, dict[str, Any]]) -> None:
    name, ours = reference
    rel = rounding_bound(name)
    for seed, saved in SAVED["runs"][name]["seeds"].items():
        for part in ("final", "chosen"):
            now = ours["seeds"][seed][part]
            assert now.keys() == saved[part].keys(), part
            for key, values in saved[part].items():
                a, b = torch.tensor(now[key]), torch.tensor(values)
                assert a.shape == b.shape, f"{seed} {part} {key}"
                scale = max(1.0, float(b.abs().max())) if b.numel() else 1.0
                worst = float((a - b).abs().max()) if b.numel() else 0.0
                assert worst <= rel * scale, \
                    f"{seed} {part} {key}: {worst:.3g} > {rel * scale:.3g}"


def test_the_bound_is_tight_enough_to_see_a_changed_run() -> None:
    """The bound must fail a run that trained otherwise: Adam moves every weight by about the
    learning rate at each step whatever its gradient's size, so one step taken in another
    direction already differs by about lr, above the bound."""
    lr = 5e-4  # the runs' learning rate (the default)
    assert "--lr" not in COMMON
    for name in RUNS:
        assert rounding_bound(name) < lr / 2, name
