"""The Python API's arguments of a wrong type or kind, and graph tensors that are no ordinary
CPU tensors: one UsageError line each, naming the argument, before any work."""

from __future__ import annotations

import copy
import re
import threading
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
import torch

import edgegcl
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.data.validation import validate_graph
from edgegcl.errors import UsageError
from edgegcl.training.config import TrainConfig


@pytest.mark.parametrize("kwargs, says", [
    ({"settings": "epochs=3"}, "settings must be a dict"),
    ({"settings": {3: 1}}, "settings must be a dict"),
    ({"hooks": None}, "hooks must be a list of edgegcl.Hook"),
    ({"hooks": [print]}, "hooks must be a list of edgegcl.Hook"),
    ({"stop": object()}, "stop must be a function"),
    ({"out": b"runs/x"}, "out must be a path (str or pathlib.Path), not bytes"),
    ({"out": "runs/a\0b"}, "without NUL bytes"),
    ({"resume": 3}, "resume must be a path"),
    ({"out": "runs/a", "settings": {"out": "runs/b"}},
     "out='runs/a' and settings['out']='runs/b' name two run directories; pass one"),
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


def test_a_stop_function_answers_true_or_false_or_is_named(tmp_path: Path) -> None:
    """``stop`` returning something other than a yes / no, or raising, is one UsageError
    line naming it, before anything of the run is kept; numpy's bool is a yes / no."""
    settings = {"epochs": 2, "nodes": 100, "encoder": "gcn", "hidden_dim": 8, "out_dim": 8,
                "proj_dim": 8}

    def boom() -> bool:
        raise ValueError("boom")

    for stop, said in ((lambda: np.array([False, True]), "stop must return True or False, "
                        "not ndarray"), (boom, "stop raised ValueError: boom")):
        with pytest.raises(UsageError, match=said) as err:
            edgegcl.train(settings=settings, out=tmp_path / "r", stop=stop)
        assert "\n" not in str(err.value) and not (tmp_path / "r").exists()
    edgegcl.train(settings=settings, out=tmp_path / "ok", stop=lambda: np.bool_(False))


@pytest.mark.parametrize("value", [Decimal("inf"), np.float32("inf"), np.float32(2.5),
                                   Decimal("NaN"), float("nan")])
def test_an_integer_option_that_is_not_a_whole_number_is_one_line(value: object) -> None:
    with pytest.raises(UsageError, match="config field 'epochs' .* must be int"):
        TrainConfig(epochs=value)
    assert TrainConfig(epochs=np.int64(5)).run.epochs == 5 == TrainConfig(epochs=5.0).run.epochs


def test_embed_out_of_the_wrong_kind_is_one_line(tmp_path: Path) -> None:
    run = edgegcl.train(settings={"epochs": 1, "nodes": 100, "encoder": "gcn", "hidden_dim": 8,
                                  "out_dim": 8, "proj_dim": 8}, out=tmp_path / "r")
    for out, said in ((np.zeros((100, 8), np.float32), "out must be a torch.Tensor"),
                      (torch.zeros(3, 3), r"not float32 \[3, 3\]"),
                      (torch.zeros(100, 8, dtype=torch.float64), r"not float64 \[100, 8\]")):
        with pytest.raises(UsageError, match=said) as err:
            run.embed(out=out)
        assert "\n" not in str(err.value)
    filled = torch.zeros(100, 8)
    assert run.embed(out=filled) is filled


def test_a_name_longer_than_a_file_name_may_be_is_one_line(tmp_path: Path) -> None:
    long = "x" * 300
    with pytest.raises(UsageError, match="out: the name x+\\.\\.\\. is 300 bytes, longer than a file name"):
        edgegcl.train(settings={"epochs": 1, "nodes": 60}, out=tmp_path / long)
    with pytest.raises(UsageError, match="cannot be used .*File name too long"):
        edgegcl.train(settings={"epochs": 1, "nodes": 60, "out": str(tmp_path / long)})
    assert list(tmp_path.iterdir()) == []
