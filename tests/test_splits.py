"""Graphs that carry their own splits: masks read from .npz (both layouts) and .pt files and
checked, the heterophilous-graph benchmark's layout, and a run probing each seed on its split
with the raw features beside the embeddings on every split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from edgegcl.data import SyntheticSpec, load_graph, synthetic_graph, validate_graph
from edgegcl.errors import UsageError
from edgegcl.evaluation.probe import linear_probe, published_split, random_split
from edgegcl.training.config import TrainConfig
from edgegcl import train_seeds

N = 60


def _masks(splits: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``splits`` random 50/25/25 splits of N nodes as [splits, N] booleans."""
    rng = np.random.default_rng(seed)
    train, val, test = (np.zeros((splits, N), dtype=bool) for _ in range(3))
    for s in range(splits):
        perm = rng.permutation(N)
        train[s, perm[:30]], val[s, perm[30:45]], test[s, perm[45:]] = True, True, True
    return train, val, test


def _graph() -> Data:
    return synthetic_graph(SyntheticSpec(num_nodes=N, num_features=6, num_classes=3, seed=2))


def test_the_benchmark_layout_with_ten_splits(tmp_path: Path) -> None:
    g = _graph()
    half = g.edge_index[:, g.edge_index[0] < g.edge_index[1]]  # each undirected edge once
    train, val, test = _masks(10)
    np.savez(tmp_path / "bench.npz", node_features=g.x.numpy(), node_labels=g.y.numpy(),
             edges=half.t().numpy(), train_masks=train, val_masks=val, test_masks=test)
    loaded = load_graph(str(tmp_path / "bench.npz"), None)
    assert loaded.train_mask.shape == (10, N) and torch.equal(loaded.val_mask,
                                                              torch.from_numpy(val))
    got = {tuple(e) for e in loaded.edge_index.t().tolist()}
    assert got == {tuple(e) for e in g.edge_index.t().tolist()}  # both directions, once each
    one_way = load_graph(str(tmp_path / "bench.npz"), None, edges="directed")
    assert one_way.edge_index.size(1) == half.size(1)
    number, split = published_split(loaded, 13)
    assert number == 3 and torch.equal(split.train, torch.from_numpy(train[3]).nonzero().flatten())


@pytest.mark.parametrize("layout", ["one", "pyg", "rows"])
def test_edgegcls_layout_reads_one_or_several_splits(tmp_path: Path, layout: str) -> None:
    g = _graph()
    train, val, test = _masks(3)
    masks = {"one": (train[0], val[0], test[0]), "pyg": (train.T, val.T, test.T),
             "rows": (train, val, test)}[layout]
    np.savez(tmp_path / "g.npz", x=g.x.numpy(), edge_index=g.edge_index.numpy(), y=g.y.numpy(),
             train_mask=masks[0], val_mask=masks[1].astype(np.uint8), test_mask=masks[2])
    loaded = load_graph(str(tmp_path / "g.npz"), None)
    assert loaded.test_mask.shape == ((1, N) if layout == "one" else (3, N))
    assert loaded.val_mask.dtype == torch.bool and torch.equal(loaded.train_mask[0],
                                                               torch.from_numpy(train[0]))
    torch.save(Data(x=g.x, edge_index=g.edge_index, y=g.y, train_mask=torch.from_numpy(masks[0]),
                    val_mask=torch.from_numpy(masks[1]), test_mask=torch.from_numpy(masks[2])),
               tmp_path / "g.pt")
    assert torch.equal(load_graph(str(tmp_path / "g.pt"), None).test_mask, loaded.test_mask)


@pytest.mark.parametrize("change, expected", [
    ({"y": None}, "no labels y"),
    ({"train_mask": torch.ones(N) * 0.5}, "must hold booleans"),
    ({"train_mask": torch.zeros(5, 7, dtype=torch.bool)}, "has shape (5, 7)"),
    ({"test_mask": torch.zeros(2, N, dtype=torch.bool)}, "hold 3, 3, 2 splits"),
    ({"test_mask": "train"}, "in both its train and test sets"),
    ({"val_mask": torch.zeros(3, N, dtype=torch.bool)}, "val_mask selects no node"),
    ({"train_mask": torch.zeros(0, N, dtype=torch.bool),
      "val_mask": torch.zeros(0, N, dtype=torch.bool),
      "test_mask": torch.zeros(0, N, dtype=torch.bool)}, "hold no split"),
])
def test_masks_that_cannot_be_a_split_are_one_line(change: dict, expected: str) -> None:
    g = _graph()
    train, val, test = (torch.from_numpy(m) for m in _masks(3))
    fields = {"x": g.x, "edge_index": g.edge_index, "y": g.y, "train_mask": train,
              "val_mask": val, "test_mask": test, "name": "g"}
    for key, value in change.items():
        fields[key] = train if value == "train" else value
    with pytest.raises(UsageError, match=expected.replace("(", r"\(").replace(")", r"\)")) as err:
        validate_graph(Data(**{k: v for k, v in fields.items() if v is not None}))
    assert "\n" not in str(err.value)


def test_an_incomplete_split_is_not_used_and_said(capsys: pytest.CaptureFixture) -> None:
    g = _graph()
    g.train_mask = torch.ones(N, dtype=torch.bool)
    g.name = "g"
    assert "train_mask" not in validate_graph(g)
    assert "has train_mask but no val_mask, test_mask" in capsys.readouterr().err


def test_a_run_reports_the_raw_features_and_each_seeds_published_split(tmp_path: Path) -> None:
    g = synthetic_graph(SyntheticSpec(num_nodes=200, num_features=8, seed=3))
    rng = np.random.default_rng(1)
    masks = np.zeros((3, 4, 200), dtype=bool)  # train / val / test x 4 splits
    for s in range(4):
        perm = rng.permutation(200)
        masks[0, s, perm[:100]], masks[1, s, perm[100:150]], masks[2, s, perm[150:]] = (
            True, True, True)
    g.train_mask, g.val_mask, g.test_mask = (torch.from_numpy(m) for m in masks)
    g = validate_graph(g)
    cfg = TrainConfig(encoder="gcn", hidden_dim=16, out_dim=8, proj_dim=8, epochs=4,
                      eval_every=2, seeds=2, device="cpu")
    (tmp_path / "run").mkdir()
    metrics = train_seeds(cfg, g, tmp_path / "run", torch.device("cpu"))
    for seed, part in enumerate(metrics["seeds"]):
        raw = linear_probe(g.x, g.y, random_split(200, seed), seed=seed)
        assert part["raw_features"]["test_micro_f1"] == raw.test_micro  # the same probe, split
        published = part["published_split"]
        assert (published["split"], published["splits"]) == (seed, 4)
        _, split = published_split(g, seed)
        raw_pub = linear_probe(g.x, g.y, split, seed=seed)
        assert published["raw_features"]["test_micro_f1"] == raw_pub.test_micro
        assert published["selected_epoch"] in (2, 4)
    assert metrics["summary"]["published_splits"] == [0, 1]
    assert "published_split_test_micro_f1" in metrics["summary"]
