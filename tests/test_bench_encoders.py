"""The encoder table made from a real run's metrics (what bench/results/encoders.md is
written from); every bench script's --help is in test_bench_scripts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench import encoders, encoder_speed
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.training.config import TrainConfig
from edgegcl import train_seeds

def test_the_table_holds_each_cell_beside_the_raw_features(tmp_path: Path) -> None:
    cfg = TrainConfig(nodes=150, features=12, hidden_dim=16, out_dim=8, proj_dim=8, epochs=4,
                      eval_every=2, seeds=2, device="cpu")
    (tmp_path / "run").mkdir()
    metrics = train_seeds(cfg, synthetic_graph(cfg.synthetic_spec()), tmp_path / "run",
                  torch.device("cpu"))
    cell = encoders.cell(metrics, wall_s=12.0)
    raw = [s["raw_features"]["test_micro_f1"] for s in metrics["seeds"]]
    assert cell["raw"]["mean"] == pytest.approx(sum(raw) / 2)
    assert set(cell["encoders"]) <= {"gcn", "ego", "poly"} and len(cell["search_s"]) == 2
    text = encoders.report({"started": "now", "machine": "here", "command": "python -m x",
                            "cells": {"synthetic / auto": {**cell, "command": "edgegcl train"}}})
    row = next(line for line in text.splitlines() if line.startswith("| synthetic"))
    assert f"{cell['test']['mean']:.2f}" in row and f"{cell['raw']['mean']:.2f}" in row
    assert "gcn x" in row or "ego x" in row or "poly x" in row
    text = encoders.report({"started": "now", "machine": "here", "command": "python -m x",
                            "cells": {"synthetic / gcn / --scheduler none":
                                      {**cell, "command": "edgegcl train"}}})
    row = next(line for line in text.splitlines() if line.startswith("| synthetic"))
    assert row.startswith("| synthetic | gcn `--scheduler none` |")


def test_encoder_speed_times_every_encoder_side_by_side() -> None:
    data = synthetic_graph(SyntheticSpec(num_nodes=120, num_features=8, seed=0))
    out = encoder_speed.measure(data, rounds=2, threads=1)
    assert set(out["ratio_to_gcn"]) == {"gcn", "ego", "poly"} and out["ratio_to_gcn"]["gcn"] == 1
    assert all(t > 0 for t in out["median_s"].values())
