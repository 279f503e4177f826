"""The seed loop (edgegcl.training.seeds): a hook passed from Python sees every epoch."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from helpers import EpochRows

from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.training.config import TrainConfig
from edgegcl import train_seeds


def test_a_python_hook_receives_every_epochs_row(tmp_path: Path) -> None:
    data = synthetic_graph(SyntheticSpec(num_nodes=80, num_features=8))
    cfg = TrainConfig(dataset="synthetic", hidden_dim=8, out_dim=4, proj_dim=4, epochs=5,
                      eval_every=2, T_init=1, T_int=1, seeds=2)
    rows = EpochRows()
    train_seeds(cfg, data, tmp_path, torch.device("cpu"), hooks=[rows])
    seen = rows.seen
    assert [(name, row["epoch"]) for name, row, _ in seen] == [
        (f"seed-{s}", e) for s in range(2) for e in range(1, 6)]
    for seed in range(2):  # the rows the hook saw are the ones epochs.csv holds
        with (tmp_path / f"seed-{seed}" / "epochs.csv").open() as fh:
            written = list(csv.DictReader(fh))
        hooked = [row for name, row, _ in seen if name == f"seed-{seed}"]
        assert [float(w["loss"]) for w in written] == [r["loss"] for r in hooked]
        probed = [r["epoch"] for r in hooked if r["val_micro_f1"] != ""]
        assert probed == [2, 4, 5]  # every eval_every epochs and the last
    assert all(isinstance(events, list) for _, _, events in seen)


def test_a_hook_object_is_told_of_starts_batches_epochs_and_ends(tmp_path: Path) -> None:
    from edgegcl.training.hooks import Hook

    data = synthetic_graph(SyntheticSpec(num_nodes=120, num_features=8))
    cfg = TrainConfig(dataset="synthetic", hidden_dim=8, out_dim=4, proj_dim=4, epochs=3,
                      eval_every=3, T_init=1, T_int=1, mode="minibatch", batch_size=40)
    calls: list[tuple] = []

    class Watch(Hook):
        def seed_start(self, seed):
            calls.append(("start", seed.seed, seed.trainer.epoch))

        def batch_end(self, seed, epoch, batch, batches, mean_loss):
            calls.append(("batch", epoch, batch, batches))

        def epoch_end(self, seed, row, events):  # after the probe: the F1 is filled in
            calls.append(("epoch", row["epoch"], row["val_micro_f1"] != ""))

        def seed_end(self, seed):
            calls.append(("end", seed.seed))

    train_seeds(cfg, data, tmp_path, torch.device("cpu"), hooks=[Watch()])
    assert calls[0] == ("start", 0, 0) and calls[-1] == ("end", 0)
    assert [c for c in calls if c[0] == "epoch"] == [
        ("epoch", 1, False), ("epoch", 2, False), ("epoch", 3, True)]
    batches = [c for c in calls if c[0] == "batch"]
    assert batches and {c[3] for c in batches} == {3}  # 120 anchors in batches of 40
    assert [c[2] for c in batches if c[1] == 1] == [1, 2, 3]


def _expected_stop(history: list[dict], patience: int, epochs: int) -> tuple[int, int]:
    """The epoch early stopping ends at and the epoch it keeps, from a seed's probe history:
    the first probe that is ``patience`` probes after the best so far (strictly raised)."""
    best_i, best_val = 0, -1.0
    for i, h in enumerate(history):
        if h["val_micro"] > best_val:
            best_i, best_val = i, h["val_micro"]
        if i - best_i >= patience:
            return h["epoch"], history[best_i]["epoch"]
    return epochs, history[best_i]["epoch"]


def test_early_stopping_ends_a_seed_after_patience_probes_and_keeps_the_best(
        tmp_path: Path) -> None:
    import json

    from edgegcl.cli.main import main

    args = ["train", "--dataset", "synthetic", "--nodes", "200", "--features", "8",
            "--hidden-dim", "16", "--out-dim", "8", "--proj-dim", "8", "--epochs", "80",
            "--eval-every", "2", "--patience", "2", "--seeds", "2", "--threads", "1"]
    assert main([*args, "--out", str(tmp_path / "run")]) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    stopped = 0
    for seed in metrics["seeds"]:
        end, kept = _expected_stop(seed["history"], 2, 80)
        assert seed["epochs_trained"] == end and seed["selected_epoch"] == kept
        assert seed["history"][-1]["epoch"] == end  # no probe after the stop
        stopped += end < 80
        rows = (tmp_path / "run" / f"seed-{seed['seed']}" / "epochs.csv").read_text()
        assert len(rows.strip().splitlines()) == 1 + end
    assert stopped  # on this graph validation levels off well before 80 epochs
    # a resumed seed that had stopped stays stopped: the same epochs, the same checkpoint
    (tmp_path / "run" / "metrics.json").unlink()
    for seed in metrics["seeds"]:
        (tmp_path / "run" / f"seed-{seed['seed']}" / "result.pt").unlink()
    assert main(["train", "--resume", str(tmp_path / "run")]) == 0
    again = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert [(s["epochs_trained"], s["selected_epoch"], s["test_micro_f1"])
            for s in again["seeds"]] == [(s["epochs_trained"], s["selected_epoch"],
                                          s["test_micro_f1"]) for s in metrics["seeds"]]


SHARED_DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"


@pytest.mark.skipif(not (SHARED_DATASETS / "Cora" / "raw").is_dir(),
                    reason="shared Cora copy absent")
def test_early_stopping_stops_a_cora_run_and_keeps_its_best_checkpoint(tmp_path: Path) -> None:
    import json

    from edgegcl.cli.main import main

    assert main(["train", "--dataset", "Cora", "--root", str(SHARED_DATASETS), "--epochs", "60",
                 "--eval-every", "2", "--patience", "1", "--hidden-dim", "64", "--out-dim",
                 "32", "--proj-dim", "32", "--threads", "1",
                 "--out", str(tmp_path / "run")]) == 0
    seed = json.loads((tmp_path / "run" / "metrics.json").read_text())["seeds"][0]
    end, kept = _expected_stop(seed["history"], 1, 60)
    assert end < 60 and seed["epochs_trained"] == end and seed["selected_epoch"] == kept
