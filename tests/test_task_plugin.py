"""A task is a plug-in (edgegcl.training.task): a task defined here, in this one module, is
registered, checked by the configuration and trained through the public API like the built-in
ones, with its own held-out part, prober, encoder choice and start line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch_geometric.data import Data

import edgegcl
from edgegcl.errors import UsageError
from edgegcl.evaluation.names import NODE_METRICS
from edgegcl.training.config import build
from edgegcl.training.prober import Prober
from edgegcl.training.results import EncoderChoice
from edgegcl.training.task import Task, TaskProber, metric_problem, register, task_names

SMALL = dict(nodes=150, features=12, hidden_dim=16, out_dim=8, proj_dim=8, epochs=6,
             eval_every=2, T_init=1, T_int=1, device="cpu", homophily=0.3)


@register
class BusyTask(Task):
    """A toy task: whether a node has more links than the median node, judged by the linear
    probe (binary labels: ROC-AUC chooses). Its seeds hold out the nodes' own labels (the
    graph's ``y`` is never read) and it never searches for an encoder."""

    name = "busy"
    judges = "busy nodes"
    metrics = NODE_METRICS
    search_share = 0.5
    calls: list[str] = []

    def held_out(self, data: Data, seed: int) -> Any:
        self.calls.append(f"held_out {seed}")
        return seed

    def training_graph(self, data: Data, held: Any) -> Data:
        degree = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
        busy = (degree > degree.median()).long()
        return Data(x=data.x, edge_index=data.edge_index, y=busy, name=data.name)

    def prober(self, data: Data, held: Any, seed: int, device: torch.device, metric: str,
               protocol: str, scratch: Path | None) -> TaskProber:
        self.calls.append(f"prober {held}")
        return Prober(data, seed, device, protocol, metric, scratch=scratch)

    def start_line(self, data: Data, metric: str) -> str | None:
        return f"task: busy nodes of {data.name}"

    def clear_choice(self, data: Data, candidates: Sequence[str], seed: int
                     ) -> EncoderChoice | None:
        return EncoderChoice("ego", "signal", agreement=0.0)


def test_a_task_defined_in_one_module_trains(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert "busy" in task_names()
    BusyTask.calls.clear()
    run = edgegcl.train(settings={**SMALL, "task": "busy", "encoder": "auto", "seeds": 2},
                        out=tmp_path / "r")
    assert run is not None and run.metrics is not None
    err = capsys.readouterr().err
    assert "task: busy nodes of synthetic" in err
    assert BusyTask.calls == ["held_out 0", "prober 0", "held_out 1", "prober 1"]
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    # its labels are binary, so the node prober's auto metric is ROC-AUC; its own choice held
    assert metrics["summary"]["metric"] == "roc_auc"
    assert [s["encoder"] for s in metrics["seeds"]] == ["ego", "ego"]
    assert 0.0 <= metrics["summary"]["test_roc_auc"]["mean"] <= 100.0
    assert "task = \"busy\"" in (tmp_path / "r" / "config.toml").read_text()


def test_a_plugged_task_is_checked_as_the_built_in_ones() -> None:
    assert metric_problem("auc", "busy") is not None  # a link figure on a node-label task
    with pytest.raises(UsageError, match="--metric auc scores links, but this run's task is "
                                         "busy nodes"):
        build({}, {"task": "busy", "metric": "auc"})
    with pytest.raises(UsageError, match="no busy counterpart"):
        build({}, {"task": "busy", "protocol": "both"})
    with pytest.raises(UsageError, match="--task must be one of node, link"):
        build({}, {"task": "nodes"})


def test_a_task_needs_a_new_name() -> None:
    class Again(Task):
        name = "link"

    with pytest.raises(ValueError, match="a new name"):
        register(Again)
