"""The embeddings judged on the tasks users bring them to: binary labels by ROC-AUC, multi-
class labels by micro- and macro-F1 beside the majority-class rate, multi-label targets one-vs-
rest, and links (a held-out edge split scored by AUC, AP and Hits@K against non-edges)."""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from edgegcl.cli.main import main
from edgegcl.data.synthetic import SyntheticSpec, synthetic_graph
import edgegcl
from edgegcl.errors import UsageError
from edgegcl.evaluation.links import adamic_adar, link_scores, link_split, sample_non_edges
from edgegcl.evaluation.metrics import (average_precision, hits_at_k, label_kind, majority_rate,
                                        resolve_metric, roc_auc)
from edgegcl.evaluation.probe import linear_probe, random_split
from edgegcl_embed.columns import STRUCTURAL, FeatureColumns
from helpers import capture

SMALL = ["--epochs", "4", "--eval-every", "2", "--hidden-dim", "16", "--out-dim", "8",
         "--proj-dim", "8"]


# ------------------------------------------------------------------------------------------
# the figures, against their definitions
# ------------------------------------------------------------------------------------------


def _brute_auc(scores: list[float], labels: list[int]) -> float:
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return 100.0 * wins / (len(pos) * len(neg))


def _brute_ap(scores: list[float], labels: list[int]) -> float:
    """sklearn's definition: over each distinct threshold t (descending), (R_t - R_prev) P_t."""
    total, previous, out = sum(labels), 0.0, 0.0
    for t in sorted(set(scores), reverse=True):
        chosen = [y for s, y in zip(scores, labels) if s >= t]
        recall = sum(chosen) / total
        out += (recall - previous) * sum(chosen) / len(chosen)
        previous = recall
    return 100.0 * out


@pytest.mark.parametrize("seed", range(5))
def test_roc_auc_and_ap_are_their_definitions_ties_included(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 6, (40,), generator=g).double() / 5  # many ties
    labels = (torch.rand(40, generator=g) < 0.4).long()
    labels[0], labels[1] = 0, 1
    s, y = scores.tolist(), labels.tolist()
    assert roc_auc(scores, labels) == pytest.approx(_brute_auc(s, y), abs=1e-9)
    assert average_precision(scores, labels) == pytest.approx(_brute_ap(s, y), abs=1e-9)


def test_one_class_has_no_auc_and_hits_count_positives_above_the_kth_negative() -> None:
    assert math.isnan(roc_auc(torch.ones(4), torch.ones(4)))
    assert math.isnan(average_precision(torch.ones(4), torch.zeros(4)))
    negatives = torch.tensor([0.9, 0.5, 0.1])
    assert hits_at_k(torch.tensor([1.0, 0.6, 0.2]), negatives, 2) == pytest.approx(200 / 3)
    assert hits_at_k(torch.tensor([0.5]), negatives, 2) == 0.0  # equal to the K-th: not above
    assert hits_at_k(torch.tensor([0.0]), negatives, 4) == 100.0  # fewer negatives than K
    assert majority_rate(torch.tensor([2, 2, 1, 0])) == 50.0


def test_the_metric_follows_the_labels_and_refuses_what_they_cannot_have() -> None:
    assert label_kind(torch.tensor([0, 1, 0])) == "binary"
    assert label_kind(torch.tensor([0, 3, 1])) == "multiclass"
    assert label_kind(torch.zeros(3, 4, dtype=torch.long)) == "multilabel"
    assert resolve_metric("auto", "binary") == "roc_auc"
    assert resolve_metric("auto", "multiclass") == "micro_f1"
    with pytest.raises(UsageError, match="needs binary labels"):
        resolve_metric("roc_auc", "multiclass")
    with pytest.raises(UsageError, match="scores links"):
        resolve_metric("auc", "binary")


# ------------------------------------------------------------------------------------------
# the probe on binary and multi-label targets
# ------------------------------------------------------------------------------------------


def _binary(n: int = 600, positive: float = 0.2, signal: float = 1.5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    y = (torch.rand(n, generator=g) < positive).long()
    z = torch.randn(n, 8, generator=g)
    z[:, 0] += signal * y
    return z, y


def test_a_binary_probe_is_chosen_and_scored_by_roc_auc() -> None:
    z, y = _binary(signal=4.0)
    split = random_split(600, 0, train=0.5, val=0.25)
    scores = linear_probe(z, y, split)
    assert scores.metric == "roc_auc" and scores.val_score == scores.val_roc_auc
    # classes 4 standard deviations apart on one axis: Phi(4 / sqrt 2) = 99.8 % of pairs
    # ranked right in the raw features; the normalised rows keep most of it
    assert scores.test_roc_auc > 90
    assert scores.majority == pytest.approx(majority_rate(y[split.test]))
    # micro-F1 can sit at the majority rate while ROC-AUC reads the ranking
    weak = linear_probe(*_binary(signal=0.7, seed=1), split)
    assert weak.test_roc_auc > 65 and weak.test_micro <= weak.majority + 3


def test_a_multilabel_probe_scores_each_label_one_vs_rest() -> None:
    g = torch.Generator().manual_seed(0)
    y = (torch.rand(500, 3, generator=g) < 0.3).long()
    z = torch.cat([3.0 * y.float() + 0.3 * torch.randn(500, 3, generator=g),
                   torch.ones(500, 1)], 1)  # a constant column: rows keep their scale
    scores = linear_probe(z, y, random_split(500, 0, train=0.5, val=0.2))
    assert scores.metric == "micro_f1" and math.isnan(scores.test_roc_auc)
    assert scores.test_micro > 90 and scores.test_macro > 90
    noise = linear_probe(torch.randn(500, 4, generator=g), y,
                         random_split(500, 0, train=0.5, val=0.2))
    assert noise.test_micro < 60


def test_a_binary_graph_trains_reports_roc_auc_and_the_majority_rate(tmp_path: Path) -> None:
    data = synthetic_graph(SyntheticSpec(num_nodes=300, num_features=16))
    np.savez(tmp_path / "binary.npz", x=data.x.numpy(), edge_index=data.edge_index.numpy(),
             y=(data.y == 0).long().numpy())
    code, out, err = capture(main, ["train", "--dataset", str(tmp_path / "binary.npz"), *SMALL,
                                    "--out", str(tmp_path / "run")])
    assert code == 0, err
    assert "labels: binary" in err and "validation ROC-AUC" in err
    assert "test ROC-AUC" in out and "the majority class alone" in out
    summary = json.loads((tmp_path / "run" / "metrics.json").read_text())["summary"]
    assert summary["metric"] == "roc_auc"
    for key in ("test_roc_auc", "raw_features_test_roc_auc", "majority_rate", "test_micro_f1"):
        assert 0 <= summary[key]["mean"] <= 100, key


def test_a_metric_the_labels_cannot_have_is_one_line_and_no_run_directory(tmp_path: Path) -> None:
    code, _, err = capture(main, ["train", "--nodes", "120", *SMALL, "--metric", "roc_auc",
                                  "--out", str(tmp_path / "run")])
    assert code == 2 and err.count("\n") <= 4, err
    assert err.splitlines()[-1].startswith("edgegcl: error: --metric roc_auc needs binary")
    assert not (tmp_path / "run").exists()


def test_a_multilabel_file_is_read_and_probed(tmp_path: Path) -> None:
    data = synthetic_graph(SyntheticSpec(num_nodes=300, num_features=16))
    y = torch.stack([data.y == 0, data.y == 1, data.y >= 3], 1).long()
    np.savez(tmp_path / "ml.npz", x=data.x.numpy(), edge_index=data.edge_index.numpy(),
             y=y.numpy())
    code, out, err = capture(main, ["train", "--dataset", str(tmp_path / "ml.npz"), *SMALL,
                                    "--encoder", "gcn", "--out", str(tmp_path / "run")])
    assert code == 0, err
    assert "3 labels per node (multi-label)" in err and "test micro-F1" in out
    np.savez(tmp_path / "bad.npz", x=data.x.numpy(), edge_index=data.edge_index.numpy(),
             y=(y * 2).numpy())
    code, _, err = capture(main, ["train", "--dataset", str(tmp_path / "bad.npz"), *SMALL])
    assert code == 2 and "must hold only 0 and 1" in err


# ------------------------------------------------------------------------------------------
# links
# ------------------------------------------------------------------------------------------


def _keys(pairs: torch.Tensor, n: int) -> set[int]:
    return set((torch.minimum(pairs[0], pairs[1]) * n + torch.maximum(pairs[0], pairs[1]))
               .tolist())


def test_the_edge_split_holds_out_pairs_and_draws_true_non_edges() -> None:
    data = synthetic_graph(SyntheticSpec(num_nodes=500, num_features=8))
    n = data.num_nodes
    split = link_split(data.edge_index, n, seed=3)
    edges = _keys(data.edge_index, n)
    train, val, test = (_keys(p, n) for p in (split.train, split.val, split.test))
    assert train | val | test == edges and not (train & val or train & test or val & test)
    m = len(edges)
    assert (len(val), len(test)) == (math.floor(0.05 * m), math.floor(0.1 * m))
    negatives = _keys(torch.cat([split.val_neg, split.test_neg], 1), n)
    assert len(negatives) == len(val) + len(test) and not negatives & edges
    assert bool((split.val_neg[0] < split.val_neg[1]).all())
    # the training graph holds the training edges only, both ways
    assert _keys(split.train_edge_index(), n) == train
    assert split.train_edge_index().size(1) == 2 * len(train)
    again = link_split(data.edge_index, n, seed=3)
    assert torch.equal(again.test, split.test) and torch.equal(again.test_neg, split.test_neg)
    assert not torch.equal(link_split(data.edge_index, n, seed=4).test, split.test)


def test_non_edges_of_a_nearly_full_graph_and_a_full_one() -> None:
    n = 6
    full = torch.tensor([(a, b) for a in range(n) for b in range(a + 1, n)]).t()
    keys = torch.tensor(sorted(_keys(full[:, 1:], n)))  # every pair but (0, 1)
    got = sample_non_edges(keys, n, 1, torch.Generator().manual_seed(0))
    assert got.tolist() == [[0], [1]]
    with pytest.raises(UsageError, match="too dense"):
        sample_non_edges(keys, n, 2, torch.Generator().manual_seed(0))


def test_link_scores_read_the_geometry_and_adamic_adar_the_triangles() -> None:
    n = 80  # a ring with chords two apart: neighbours share neighbours
    ring = torch.cat([torch.stack([torch.arange(n), (torch.arange(n) + k) % n]) for k in (1, 2)],
                     1)
    split = link_split(ring, n, seed=0)
    angle = 2 * math.pi * torch.arange(n) / n
    z = torch.stack([torch.cos(angle), torch.sin(angle)], 1)
    scores = link_scores(z, split)
    assert scores.test["cosine"]["auc"] > 95 and scores.scorer in ("cosine", "inner", "probe")
    assert link_scores(torch.randn(n, 2), split).test["cosine"]["auc"] < 80
    assert adamic_adar(split)["test"]["auc"] > 90


def test_a_link_run_trains_on_the_training_edges_and_reports_every_scorer(
        tmp_path: Path) -> None:
    code, out, err = capture(main, ["train", "--task", "link", "--nodes", "300", *SMALL,
                                    "--seeds", "2", "--out", str(tmp_path / "run")])
    assert code == 0, err
    assert "task: link" in err and "validation AUC" in err
    assert "test AUC" in out and "Adamic-Adar AUC" in out and "scorer " in out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    summary = metrics["summary"]
    assert summary["metric"] == "auc"
    for key in ("test_auc", "test_ap", "test_hits@20", "test_hits@50", "test_hits@100",
                "test_auc_cosine", "test_auc_inner", "test_auc_probe",
                "raw_features_test_auc", "adamic_adar_test_auc"):
        assert 0 <= summary[key]["mean"] <= 100, key
    seed = metrics["seeds"][0]
    assert seed["scorer"] in ("cosine", "inner", "probe", "decoder")
    assert seed["test_auc"] == seed[f"test_auc_{seed['scorer']}"]
    rows = (tmp_path / "run" / "seed-0" / "epochs.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert "val_score" in header and rows[2].split(",")[header.index("val_score")] != ""


def test_a_link_run_resumes_as_it_would_have_ended(tmp_path: Path) -> None:
    args = ["train", "--task", "link", "--nodes", "200", "--encoder", "gcn", *SMALL]
    assert capture(main, [*args, "--out", str(tmp_path / "whole")])[0] == 0
    assert capture(main, [*args, "--epochs", "2", "--out", str(tmp_path / "part")])[0] == 0
    code, _, err = capture(main, ["train", "--resume", str(tmp_path / "part"), "--epochs", "4"])
    assert code == 0, err
    whole, part = (json.loads((tmp_path / d / "metrics.json").read_text())["seeds"][0]
                   for d in ("whole", "part"))
    assert part["selected_epoch"] == whole["selected_epoch"]
    assert part["test_auc"] == pytest.approx(whole["test_auc"], abs=1e-9)


@pytest.mark.parametrize(("flags", "needle"), [(["--metric", "micro_f1"], "scores node labels"),
                                              (["--protocol", "both"], "no link counterpart")])
def test_what_the_link_task_cannot_do_is_one_line(flags: list[str], needle: str,
                                                  tmp_path: Path) -> None:
    code, _, err = capture(main, ["train", "--task", "link", "--nodes", "120", *SMALL, *flags,
                                  "--out", str(tmp_path / "run")])
    assert code == 2 and needle in err.splitlines()[-1], err
    assert not (tmp_path / "run").exists()


def _split_file(tmp_path: Path, **change: np.ndarray) -> tuple[Path, dict[str, np.ndarray]]:
    """A graph file that brings its own link split, as PyG's RandomLinkSplit(split_labels=True)
    gives one: the training edges both ways, the held-out edges once, the non-edges beside."""
    data = synthetic_graph(SyntheticSpec(num_nodes=200, num_features=8))
    split = link_split(data.edge_index, 200, seed=3)
    arrays = {"x": data.x.numpy(), "edge_index": split.train_edge_index().numpy(),
              "val_pos": split.val.flip(0).numpy(), "val_neg": split.val_neg.numpy(),
              "test_pos": split.test.numpy(), "test_neg": split.test_neg.numpy(), **change}
    path = tmp_path / "split.npz"
    np.savez(path, **arrays)
    return path, arrays


def test_a_link_run_reads_the_split_its_file_brings(tmp_path: Path) -> None:
    """--task link on a file with val_pos / val_neg / test_pos / test_neg trains on its
    edge_index as given and scores those very pairs, the same for every seed."""
    from edgegcl.data.files import load_file
    from edgegcl.training.linkprober import seed_link_split

    path, arrays = _split_file(tmp_path)
    data = load_file(path)
    for seed in (0, 1):
        split = seed_link_split(data, seed)
        assert torch.equal(split.train, link_split(synthetic_graph(SyntheticSpec(
            num_nodes=200, num_features=8)).edge_index, 200, seed=3).train)
        assert torch.equal(split.val, torch.from_numpy(arrays["val_pos"]).sort(0).values)
        assert torch.equal(split.test_neg, torch.from_numpy(arrays["test_neg"]))
    code, out, err = capture(main, ["train", "--dataset", str(path), "--task", "link", *SMALL,
                                    "--encoder", "gcn", "--seeds", "2",
                                    "--out", str(tmp_path / "run")])
    assert code == 0, err
    assert "the graph file's own held-out pairs" in err
    seeds = json.loads((tmp_path / "run" / "metrics.json").read_text())["seeds"]
    assert len(seeds) == 2 and all(0 <= s["test_auc"] <= 100 for s in seeds)
    code, _, err = capture(main, ["train", "--dataset", str(path), *SMALL, "--encoder", "gcn",
                                  "--out", str(tmp_path / "node")])
    assert "--task node does not read" in err


@pytest.mark.parametrize(("change", "needle"), [
    ("train edge", "is also an edge of edge_index"),
    ("out of range", "holds node 200 but the graph has 200 nodes"),
    ("one missing", "give all four held-out pair sets"),
    ("rows", "not [2, pairs]"),
    ("loop", "with itself")])
def test_a_split_that_does_not_hold_is_one_line(tmp_path: Path, change: str, needle: str
                                                ) -> None:
    """A held-out pair that is a training edge (either way), a node out of range, a missing
    set, pairs as rows or a node paired with itself: one line, exit 2, no run directory."""
    _, arrays = _split_file(tmp_path)
    edges = arrays["edge_index"]
    bad = {"train edge": {"test_neg": np.concatenate([arrays["test_neg"], edges[::-1, :1]], 1)},
           "out of range": {"val_neg": np.concatenate([arrays["val_neg"], [[0], [200]]], 1)},
           "one missing": {},
           "rows": {"val_pos": arrays["val_pos"].T},
           "loop": {"test_pos": np.concatenate([arrays["test_pos"], [[5], [5]]], 1)}}[change]
    path, _ = _split_file(tmp_path, **bad)
    if change == "one missing":
        np.savez(path, **{k: v for k, v in arrays.items() if k != "test_neg"})
    code, _, err = capture(main, ["train", "--dataset", str(path), "--task", "link", *SMALL,
                                  "--out", str(tmp_path / "run")])
    assert code == 2 and needle in err.strip().splitlines()[-1], err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_the_split_file_block_trains(tmp_path: Path) -> None:
    """docs/tasks.md's block writes a RandomLinkSplit as a file that --task link reads."""
    import subprocess
    import sys

    from docblocks import block

    proc = subprocess.run([sys.executable, "-c", block("link-split-file").text],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    code, _, err = capture(main, ["train", "--dataset", str(tmp_path / "my_split.npz"),
                                  "--task", "link", *SMALL, "--encoder", "gcn",
                                  "--out", str(tmp_path / "run")])
    assert code == 0 and "the graph file's own held-out pairs" in err, err


def test_edgegcl_embed_reads_a_benchmark_file_as_train_does(tmp_path: Path) -> None:
    """The heterophilous-graph layout (each undirected edge once, [E, 2]) embeds on the device
    as the trained model embeds it in torch: the same edges, both ways."""
    from edgegcl.training.runs import load_run
    from edgegcl_embed.embed import main as embed_main

    data = synthetic_graph(SyntheticSpec(num_nodes=150, num_features=8))
    keys = torch.unique(torch.minimum(*data.edge_index) * 150 + torch.maximum(*data.edge_index))
    edges = torch.stack([keys // 150, keys % 150], 1)  # one row per undirected edge
    graph = tmp_path / "bench.npz"
    np.savez(graph, node_features=data.x.numpy(), edges=edges.numpy(),
             node_labels=data.y.numpy())
    run = tmp_path / "run"
    assert capture(main, ["train", "--dataset", str(graph), *SMALL, "--encoder", "gcn",
                          "--out", str(run)])[0] == 0
    model = tmp_path / "m.onnx"
    code, _, err = capture(main, ["export", str(model), "--run", str(run), "--graph", str(graph)])
    assert code == 0, err
    code, _, err = capture(embed_main, [str(model), "--graph", str(graph), "--out",
                                        str(tmp_path / "z.npy")])
    assert code == 0, err
    torch_z = load_run(run).embed(graph).numpy()
    assert np.abs(np.load(tmp_path / "z.npy") - torch_z).max() <= 1e-5


def _tables(folder: Path, nodes: int = 200) -> tuple[Path, Path, list[str]]:
    """An edge list and a node table with string ids (not in sorted order) and string
    labels, of a planted-class graph."""
    import csv

    data = synthetic_graph(SyntheticSpec(num_nodes=nodes, num_features=6))
    names = [f"user-{(i * 7919) % 1000:03d}x" for i in range(nodes)]
    with (folder / "edges.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["source", "target", "weight"])
        w.writerows([names[a], names[b], 1.0] for a, b in data.edge_index.t().tolist() if a < b)
    with (folder / "nodes.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", *(f"f{i}" for i in range(6)), "label"])
        w.writerows([names[i], *data.x[i].tolist(), "abcde"[int(data.y[i])]]
                    for i in range(nodes))
    return folder / "edges.csv", folder / "nodes.csv", names


def test_a_csv_edge_list_trains_exports_and_embeds_with_the_users_ids(tmp_path: Path) -> None:
    from edgegcl.training.runs import load_run
    from edgegcl_embed.embed import main as embed_main

    edges, nodes, names = _tables(tmp_path)
    run = tmp_path / "run"
    code, out, err = capture(main, ["train", "--dataset", str(edges), "--node-table", str(nodes),
                                    *SMALL, "--encoder", "gcn", "--out", str(run)])
    assert code == 0, err
    assert "labels: 5 classes" in err and "test micro-F1" in out
    assert (run / "node_ids.txt").read_text().split() == names  # the node table's order
    model = tmp_path / "m.onnx"
    # everything the run needs, in one answer, in the words of the interface used
    code, _, err = capture(main, ["export", str(model), "--run", str(run)])
    assert code == 2 and err.splitlines()[-1].endswith(
        f"pass --graph {edges} --node-table {nodes}"), err
    with pytest.raises(UsageError) as asked:
        edgegcl.export(model, run=run)
    assert str(asked.value).endswith(f"pass graph={str(edges)!r}, node_table={str(nodes)!r}")
    with pytest.raises(UsageError) as asked:
        load_run(run).embed()
    assert str(asked.value).endswith(f"pass graph={str(edges)!r}, node_table={str(nodes)!r}")
    code, _, err = capture(main, ["export", str(model), "--run", str(run), "--graph", str(edges)])
    assert code == 2 and err.splitlines()[-1].endswith(f"pass --node-table {nodes}"), err
    code, _, err = capture(main, ["export", str(model), "--run", str(run), "--graph", str(edges),
                                  "--node-table", str(nodes)])
    assert code == 0, err
    code, _, err = capture(embed_main, [str(model), "--graph", str(edges), "--node-table",
                                        str(nodes), "--out", str(tmp_path / "z.npy")])
    assert code == 0, err
    assert (tmp_path / "z.ids.txt").read_text().split() == names
    z = np.load(tmp_path / "z.npy")
    torch_z = load_run(run).embed(edges, node_table=nodes).numpy()
    assert z.shape == (200, 8) and np.abs(z - torch_z).max() <= 1e-5


def test_an_edge_list_alone_trains_on_structural_features(tmp_path: Path) -> None:
    edges, _, names = _tables(tmp_path)
    code, _, err = capture(main, ["train", "--dataset", str(edges), "--task", "link", *SMALL,
                                  "--encoder", "gcn", "--out", str(tmp_path / "run")])
    assert code == 0, err
    assert "its structural ones (one, log_degree" in err
    assert (tmp_path / "run" / "node_ids.txt").read_text().split() == sorted(names)


def test_a_parquet_table_reads_as_its_csv_twin(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The same graph as Parquet (typed columns; features as one list column, as pandas and
    polars write embeddings) reads to the same arrays as the CSV tables; without pyarrow it is
    one line naming the install."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from edgegcl_embed.errors import InputError
    from edgegcl_embed.tables import read_tables

    edges, nodes, names = _tables(tmp_path)
    csv_graph = read_tables(edges, nodes)
    data = synthetic_graph(SyntheticSpec(num_nodes=200, num_features=6))
    pairs = [(a, b) for a, b in data.edge_index.t().tolist() if a < b]
    pq.write_table(pa.table({"src": [names[a] for a, _ in pairs],
                             "dst": [names[b] for _, b in pairs]}), tmp_path / "e.parquet")
    pq.write_table(pa.table({"id": names, "features": data.x.tolist(),
                             "label": ["abcde"[int(c)] for c in data.y]}),
                   tmp_path / "n.parquet")
    got = read_tables(tmp_path / "e.parquet", tmp_path / "n.parquet")
    assert np.array_equal(got.edge_index, csv_graph.edge_index)
    assert np.array_equal(got.ids, csv_graph.ids) and np.array_equal(got.y, csv_graph.y)
    assert np.abs(got.x - csv_graph.x).max() <= 1e-6 * np.abs(csv_graph.x).max()  # CSV's text
    # integer ids: the same ids as their decimal text
    pq.write_table(pa.table({"a": np.arange(10), "b": (np.arange(10) + 1) % 10}),
                   tmp_path / "ring.parquet")
    ring = read_tables(tmp_path / "ring.parquet")
    assert sorted(ring.ids.tolist()) == sorted(str(i) for i in range(10))
    assert ring.edge_index.shape == (2, 20) and ring.feature_columns.kind == STRUCTURAL
    pq.write_table(pa.table({"id": ["a", "b"], "features": [[1.0, 2.0], [3.0]]}),
                   tmp_path / "ragged.parquet")
    pq.write_table(pa.table({"a": ["a", None], "b": ["b", "a"]}), tmp_path / "holes.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 not really")
    for edge_file, node_file, needle in (
            ("ring.parquet", "ragged.parquet", "another length"),
            ("holes.parquet", None, "missing values"),
            ("junk.parquet", None, "cannot be read as Parquet")):
        with pytest.raises(InputError, match=needle):
            read_tables(tmp_path / edge_file, node_file and tmp_path / node_file)
    monkeypatch.setitem(__import__("sys").modules, "pyarrow", None)
    with pytest.raises(InputError, match="needs pyarrow: pip install pyarrow"):
        read_tables(tmp_path / "ring.parquet")


def test_table_refusals_are_one_line(tmp_path: Path) -> None:
    edges, nodes, names = _tables(tmp_path)
    lines = nodes.read_text().splitlines()
    short = tmp_path / "short.csv"
    short.write_text("\n".join(lines[:-1]) + "\n")  # the last node lost
    bad = tmp_path / "bad.csv"
    bad.write_text(lines[0] + "\n" + lines[1].replace(lines[1].split(",")[1], "nan", 1) + "\n")
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)  # a reader would block on it
    for argv, needle in (
            (["--dataset", str(fifo)], "not a regular file"),
            (["--dataset", str(edges), "--node-table", str(fifo)], "not a regular file"),
            (["--dataset", str(edges), "--node-table", str(short)], "does not list"),
            (["--dataset", str(edges), "--node-table", str(bad)], "NaN or infinite"),
            (["--nodes", "100", "--node-table", str(nodes)], "goes with a CSV / TSV / Parquet")):
        code, _, err = capture(main, ["train", *argv, *SMALL, "--out", str(tmp_path / "r")])
        assert code == 2 and needle in err.splitlines()[-1], err
        assert not (tmp_path / "r").exists()


def test_held_out_nodes_leave_with_every_edge_they_touch() -> None:
    from bench.inductive import hold_out_nodes, inductive_scores

    data = synthetic_graph(SyntheticSpec(num_nodes=400, num_features=16))
    holdout = hold_out_nodes(400, seed=1)
    assert holdout.held.numel() == 40
    assert set(holdout.seen.tolist()) | set(holdout.held.tolist()) == set(range(400))
    seen = holdout.seen_graph(data)
    kept = holdout.seen[seen.edge_index]  # back to the whole graph's ids
    assert not torch.isin(kept, holdout.held).any()
    inside = ~torch.isin(data.edge_index, holdout.held).any(0)
    assert kept.size(1) == int(inside.sum())
    assert torch.equal(seen.x, data.x[holdout.seen]) and torch.equal(seen.y, data.y[holdout.seen])
    # embeddings that are the class: held-out nodes are told apart, and their own edges (90 %
    # within a class) score above pairs to random nodes (20 % within) by cosine:
    # AUC = (1 + 0.9 - 0.2) / 2 = 85 for exact class vectors
    z = torch.nn.functional.one_hot(data.y, 5).float() + 0.01 * torch.randn(400, 5)
    scores = inductive_scores(z, data, holdout)
    assert scores["test_micro_f1"] > 95 and scores["link_auc"] > 75
    noise = inductive_scores(torch.randn(400, 16), data, holdout)
    assert abs(noise["link_auc"] - 50) < 15


def test_a_vector_column_of_768_values_trains_and_embeds(tmp_path: Path) -> None:
    """Text-encoder embeddings as one column: a Parquet list<float32> of 768 values, or a CSV
    column of bracketed vectors (as pandas writes a list column), trains, exports and embeds
    on the runtime as the same features; a column that is not one names itself."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from edgegcl_embed.embed import main as embed_main
    from edgegcl_embed.errors import InputError
    from edgegcl_embed.tables import read_node_table

    edges, _, names = _tables(tmp_path)
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(len(names), 768)).astype(np.float32)
    labels = rng.integers(0, 3, len(names))
    nodes = tmp_path / "n.parquet"
    pq.write_table(pa.table({"id": names, "emb": pa.array(list(emb), pa.list_(pa.float32())),
                             "label": labels}), nodes)
    run = tmp_path / "run"
    code, _, err = capture(main, ["train", "--dataset", str(edges), "--node-table", str(nodes),
                                  *SMALL, "--encoder", "gcn", "--out", str(run)])
    assert code == 0, err
    code, _, err = capture(main, ["export", str(tmp_path / "m.onnx"), "--run", str(run),
                                  "--graph", str(edges), "--node-table", str(nodes)])
    assert code == 0, err
    code, _, err = capture(embed_main, [str(tmp_path / "m.onnx"), "--graph", str(edges),
                                        "--node-table", str(nodes), "--out",
                                        str(tmp_path / "z.npy")])
    assert code == 0, err
    torch_z = edgegcl.load_run(run).embed(edges, node_table=nodes).numpy()
    assert np.abs(np.load(tmp_path / "z.npy") - torch_z).max() <= 1e-5
    assert np.array_equal(read_node_table(nodes).x, emb)
    # the same vectors in a CSV column, comma- or space-separated as pandas and numpy print them
    table = tmp_path / "n.csv"
    rows = [f'{n},"[{", ".join(map(repr, map(float, v[:4])))}]",{c}'
            for n, v, c in zip(names, emb, labels)]
    table.write_text("id,emb,label\n" + "\n".join(rows) + "\n")
    assert np.array_equal(read_node_table(table).x, emb[:, :4])
    table.write_text("id,emb,label\n" + "\n".join(r.replace(", ", " ") for r in rows) + "\n")
    assert np.array_equal(read_node_table(table).x, emb[:, :4])
    for cell, needle in (('"[1, 2, 3]"', "column emb holds vectors of different lengths"),
                         ("word", "feature column emb must hold numbers"),
                         ('"[1, 2, 3, x]"', "column emb holds vectors of something other")):
        bad = [rows[0].split(",", 1)[0] + f",{cell},0", *rows[1:]]
        table.write_text("id,emb,label\n" + "\n".join(bad) + "\n")
        with pytest.raises(InputError, match=needle):
            read_node_table(table)


def test_table_labels_are_read_as_the_user_meant_them(tmp_path: Path) -> None:
    """"1" and "1.0" are one class; an empty cell is a node without a label (-1); a column
    without any label, a negative or fractional label and classes with a gap are each one
    line; names map in sorted order, counted over the nodes that have one."""
    from edgegcl_embed.errors import InputError
    from edgegcl_embed.tables import read_node_table

    table = tmp_path / "n.csv"

    def labels(*cells: str) -> tuple[list[int], list[str]]:
        rows = [f"n{i},{i % 3}.5,{c}" for i, c in enumerate(cells)]
        table.write_text("id,f,label\n" + "\n".join(rows) + "\n")
        read = read_node_table(table)
        return read.y.tolist(), read.classes

    assert labels("1", "1.0", "0", "2") == ([1, 1, 0, 2], ["0", "1", "2"])
    assert labels("b", "a", "b") == ([1, 0, 1], ["a", "b"])
    assert labels("1", "", "0", " ") == ([1, -1, 0, -1], ["0", "1"])
    assert labels("b", "", "c") == ([0, -1, 1], ["b", "c"])
    for cells, needle in ((("", " "), "its label column holds no label"),
                          (("1", "-1", "0"), "label -1 is negative"),
                          (("1", "0.5", "0"), "label 0.5 is not a class number"),
                          (("0", "2", "0"), "no node has class 1")):
        with pytest.raises(InputError, match=needle):
            labels(*cells)


def test_an_edge_list_without_a_header_keeps_its_first_edge(tmp_path: Path) -> None:
    """A CSV edge list written without a header row: its first row is an edge, read as one;
    a node table without its header (which names the label column) is one line."""
    from edgegcl_embed.errors import InputError
    from edgegcl_embed.tables import read_node_table, read_tables

    (tmp_path / "e.csv").write_text("0,1\n1,2\n2,0\n")
    graph = read_tables(tmp_path / "e.csv")
    assert graph.edge_index.shape == (2, 6) and graph.ids.tolist() == ["0", "1", "2"]
    (tmp_path / "n.csv").write_text("0,0.5,1\n1,0.25,0\n2,0.75,1\n")
    with pytest.raises(InputError, match="has no header row"):
        read_node_table(tmp_path / "n.csv")


@pytest.mark.parametrize("flags, needle", [
    (["--dataset", "{edges}", "--nodes", "50"], "--nodes: it shapes the generated graph"),
    (["--mode", "full", "--batch-size", "64"], "--mode full trains the whole graph"),
    (["--pace", "fixed", "--reach", "0.5"], "--reach: --pace fixed grows eta by b and c_cat"),
    (["--task", "link", "--nodes", "40", "--metric", "hits@100", "--epochs", "1"],
     "--metric hits@100 ranks each validation edge among 100 non-edges"),
])
def test_an_option_the_run_would_not_read_is_one_line(tmp_path: Path, flags: list[str],
                                                       needle: str) -> None:
    """Options the chosen graph, mode or pace does not read, and a Hits@K that every
    checkpoint would max out, are refused in one line, with no run directory left."""
    edges, _, _ = _tables(tmp_path)
    argv = [f.format(edges=edges) for f in flags]
    code, _, err = capture(main, ["train", *argv, "--out", str(tmp_path / "run")])
    assert code == 2 and needle in err.splitlines()[-1], err
    assert not (tmp_path / "run").exists()


def test_no_held_out_edge_reaches_any_input_of_a_link_run(tmp_path: Path) -> None:
    """On an edge list without feature columns, a link run's structural features come from
    the training edges: the same whether or not the held-out edges are in the file's graph
    (they are removed before any feature is computed); its embeddings.npy is of the graph
    its kept seed trained on."""
    from torch_geometric.data import Data

    from edgegcl.data import load_graph
    from edgegcl.training.linkprober import seed_link_split, training_graph
    from edgegcl_embed.tables import structural_features

    edges, _, _ = _tables(tmp_path)
    full = load_graph(str(edges))
    assert full.feature_columns.kind == STRUCTURAL
    split = seed_link_split(full, 0)
    kept = split.train_edge_index()
    without = Data(x=torch.from_numpy(structural_features(kept.numpy(), full.num_nodes)),
                   edge_index=kept)
    without.feature_columns = FeatureColumns(STRUCTURAL)  # written without its held-out edges
    seen = training_graph(full, split)
    assert torch.equal(seen.x, training_graph(without, split).x)
    assert not torch.equal(seen.x, full.x)  # the held-out edges did move the degrees
    run = tmp_path / "run"
    code, _, err = capture(main, ["train", "--dataset", str(edges), "--task", "link", *SMALL,
                                  "--encoder", "gcn", "--save-embeddings", "--out", str(run)])
    assert code == 0, err
    loaded = edgegcl.load_run(run)
    expected = loaded.embed(training_graph(full, seed_link_split(full, loaded.seed)))
    assert np.allclose(np.load(run / "embeddings.npy"), expected.numpy(), atol=1e-6)


def test_nodes_without_a_label_are_in_no_split(tmp_path: Path) -> None:
    """A node table's empty label cells (a Parquet column's nulls too) are nodes without a
    label: every split, probe and baseline leaves them out, the start line says how many,
    they are embedded all the same, and a graph folder keeps them apart; a graph in Python
    says so with ``partly_labelled``, whose masks may not hold such a node."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from torch_geometric.data import Data

    from edgegcl.data import load_graph, validate_graph
    from edgegcl.evaluation.probe import labelled_split
    from edgegcl.training.prober import Prober

    edges, nodes, names = _tables(tmp_path)
    n = len(names)
    rows = nodes.read_text().splitlines()
    cut = [r if i % 3 else r.rsplit(",", 1)[0] + "," for i, r in enumerate(rows[1:])]
    nodes.write_text("\n".join([rows[0], *cut]) + "\n")
    graph = load_graph(str(edges), node_table=nodes)
    unlabelled = (graph.y == -1).nonzero().flatten()
    assert graph.partly_labelled and unlabelled.tolist() == list(range(0, n, 3))
    for seed in range(3):
        split = labelled_split(graph.y, seed)
        held = torch.cat([split.train, split.val, split.test])
        assert held.numel() == n - unlabelled.numel()
        assert not bool(torch.isin(unlabelled, held).any())
    prober = Prober(graph, 0, torch.device("cpu"), "both")
    assert torch.equal(prober.split.test, labelled_split(graph.y, 0).test)
    run = tmp_path / "run"
    code, _, err = capture(main, ["train", "--dataset", str(edges), "--node-table", str(nodes),
                                  *SMALL, "--protocol", "both", "--save-embeddings",
                                  "--out", str(run)])
    assert code == 0, err
    assert (f"on {n - unlabelled.numel()} of {n} nodes (the {unlabelled.numel()} without a "
            "label are in no split)") in err
    assert np.load(run / "embeddings.npy").shape[0] == n
    code, _, err = capture(main, ["convert", str(edges), "--node-table", str(nodes), "--out",
                                  str(tmp_path / "folder")])
    assert code == 0, err
    folder = load_graph(str(tmp_path / "folder"))
    assert folder.partly_labelled and torch.equal(folder.y, graph.y)
    meta_path = tmp_path / "folder" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    for unlabelled, needle in (("yes", "has unlabelled 'yes', not true or false"),
                               (None, "negative label -1")):  # a -1 the folder does not declare
        meta_path.write_text(json.dumps({**{k: v for k, v in meta.items() if k != "unlabelled"},
                                         **({} if unlabelled is None else
                                            {"unlabelled": unlabelled})}))
        with pytest.raises(UsageError, match=needle):
            load_graph(str(tmp_path / "folder"))
    pq.write_table(pa.table({"id": names, "label": [None if i % 3 == 0 else r.rsplit(",", 1)[1]
                                                    for i, r in enumerate(rows[1:])]}),
                   tmp_path / "n.parquet")
    assert torch.equal(load_graph(str(edges), node_table=tmp_path / "n.parquet").y == -1,
                       graph.y == -1)
    given = Data(x=torch.ones(4, 2), edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]),
                 y=torch.tensor([0, -1, 1, 0]))
    with pytest.raises(UsageError, match="negative label -1"):
        validate_graph(given)
    given.partly_labelled = True
    assert validate_graph(given).partly_labelled
    given.train_mask, given.val_mask = torch.tensor([1, 1, 0, 0]), torch.tensor([0, 0, 1, 0])
    given.test_mask = torch.tensor([0, 0, 0, 1])
    with pytest.raises(UsageError, match="a split mask holds a node without a label"):
        validate_graph(given)


def test_hits_at_k_with_fewer_than_k_non_edges_is_not_reported(tmp_path: Path) -> None:
    """Hits@K over fewer than K non-edges counts every edge a hit (100 whatever the scores):
    such a figure is left out of metrics.json, and the result line says why."""
    from edgegcl.evaluation.links import pair_figures

    figures = pair_figures(torch.tensor([0.1, 0.2]), torch.rand(30))
    assert "hits@20" in figures and "hits@50" not in figures and "hits@100" not in figures
    code, out, err = capture(main, ["train", "--task", "link", "--nodes", "40", "--epochs", "2",
                                    "--out", str(tmp_path / "run")])
    assert code == 0, err
    assert "Hits@50 not measured (fewer than 50 test non-edges)" in out
    summary = json.loads((tmp_path / "run" / "metrics.json").read_text())["summary"]
    assert not any(key.endswith(("hits@50", "hits@100")) for key in summary)
