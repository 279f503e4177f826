"""The Python API's arguments of a wrong type or kind, and graph tensors that are no ordinary
CPU tensors: one UsageError line each, naming the argument, before any work."""

from __future__ import annotations

import copy
import re
import threading
from pathlib import Path

import pytest
import torch

import edgegcl
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.data.validation import validate_graph
from edgegcl.errors import UsageError


@pytest.mark.parametrize("kwargs, says", [
    ({"settings": "epochs=3"}, "settings must be a dict"),
    ({"settings": {3: 1}}, "settings must be a dict"),
    ({"hooks": None}, "hooks must be a list of edgegcl.Hook"),
    ({"hooks": [print]}, "hooks must be a list of edgegcl.Hook"),
    ({"stop": object()}, "stop must be a function"),
    ({"out": b"runs/x"}, "out must be a path (str or pathlib.Path), not bytes"),
    ({"out": "runs/a\0b"}, "without NUL bytes"),
    ({"resume": 3}, "resume must be a path"),
    ({"config": 3.5}, "config must be a path"),
    ({"auto_budget": "yes"}, "auto_budget must be True or False"),
    ({"profile": "cpu", "target_epoch_s": "1"}, "target_epoch_s must be a number"),
    ({"profile": "cpu", "memory_gib": float("inf")}, "--memory-gib must be a positive number"),
    ({"profile": "cpu", "memory_gib": 10**400}, "--memory-gib must be a positive number"),
])
def test_a_wrong_argument_is_one_line_naming_it(tmp_path: Path, monkeypatch, kwargs: dict,
                                                says: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=re.escape(says)) as refused:
        edgegcl.train(**kwargs)
    assert "\n" not in str(refused.value)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_handle_signals_from_another_thread_is_one_line(tmp_path: Path) -> None:
    caught: list[BaseException] = []

    def run() -> None:
        try:
            edgegcl.train(settings={"epochs": 1}, out=tmp_path / "r", handle_signals=True)
        except BaseException as exc:  # noqa: BLE001 - what the thread saw
            caught.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert len(caught) == 1 and isinstance(caught[0], UsageError), caught
    assert "main thread only" in str(caught[0]) and not (tmp_path / "r").exists()


@pytest.mark.parametrize("change, says", [
    (lambda g: setattr(g, "x", g.x.to("meta")), "x is on the meta device"),
    (lambda g: setattr(g, "edge_index", g.edge_index.to("meta")), "edge_index is on the meta"),
    (lambda g: setattr(g, "x", g.x.to_sparse()), "x must be a dense torch tensor"),
])
def test_graph_tensors_that_are_no_plain_cpu_tensors_are_one_line(change, says: str) -> None:
    graph = copy.copy(synthetic_graph(SyntheticSpec(num_nodes=60, num_features=8)))
    change(graph)
    with pytest.raises(UsageError, match=says):
        validate_graph(graph)


def test_a_graph_with_autograd_history_is_taken_without_it() -> None:
    graph = copy.copy(synthetic_graph(SyntheticSpec(num_nodes=60, num_features=8)))
    graph.x = graph.x.clone().requires_grad_() * 1.0
    checked = validate_graph(graph)
    assert not checked.x.requires_grad and torch.equal(checked.x, graph.x.detach())
