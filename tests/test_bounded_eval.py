"""Evaluation within the memory bound (issue 11): chunked all-node embeddings equal the full
forward pass and never hold an N x hidden tensor; the streaming probe equals the one it
replaced; per-checkpoint probes on a labelled sample, the chosen checkpoint on the full split."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from edgegcl.evaluation import probe as evaluate
from edgegcl.nn.adjacency import chunked_adjacency
from edgegcl.training.checkpoint import load_checkpoint
from edgegcl.training.config import TrainConfig
from edgegcl.data import SyntheticSpec, load_graph, synthetic_graph
from edgegcl.evaluation.probe import (
    ProbeScores,
    Split,
    fit_logreg,
    _GroupCounts,
    checkpoint_probe_split,
    f1_scores,
    linear_probe,
    random_split,
)
from edgegcl.nn.model import AdNGCL, GCNEncoder, ModelConfig, npy_embeddings
from edgegcl import train_seeds

SHARED_DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"


def _graph(n: int, in_dim: int, density: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Features with ``density`` nonzeros and directed edges with duplicates and self-loops,
    in no particular order (both groupings of ``chunked_adjacency`` sort)."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, in_dim, generator=g) < density).float() * torch.rand(n, in_dim, generator=g)
    return x, torch.randint(0, n, (2, 5 * n), generator=g)


def _encoder(in_dim: int, activation: str, hidden: int = 32, out: int = 16) -> GCNEncoder:
    torch.manual_seed(1)
    enc = GCNEncoder(in_dim, ModelConfig(hidden, out, out, activation)).eval()
    if activation == "prelu":  # one slope per channel, away from the shared default
        for act in (enc.act1, enc.act2):
            act.weight.data.uniform_(-1.0, 1.0)
    return enc


# --- chunked all-node embeddings ---------------------------------------------------------------


@pytest.mark.parametrize("activation", ["prelu", "relu", "elu", "rrelu"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("in_dim", [40, 8])  # wider / narrower than hidden: both product orders
def test_embed_nodes_equals_the_full_forward(activation, sparse, in_dim):
    x, edge_index = _graph(300, in_dim, 0.05 if sparse else 0.3)
    assert bool((edge_index[0] == edge_index[1]).any())
    enc = _encoder(in_dim, activation)
    with torch.no_grad():
        expected = enc(x, edge_index)
    features = x.to_sparse_csr() if sparse else x
    for chunk_rows, edge_block in ((7, 13), (64, 1 << 15), (1000, 1 << 15)):
        got = enc.embed_nodes(features, edge_index, chunk_rows=chunk_rows, edge_block=edge_block)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_embed_nodes_on_sorted_graphs_keeps_their_order():
    """A coalesced graph (sorted by source) is pushed along its own edge list, and a sampler's
    batch (sorted by target) pulled along its own: no copy of the edges for either."""
    data = synthetic_graph(SyntheticSpec(num_nodes=400, num_features=12, avg_degree=8, seed=2))
    adj = chunked_adjacency(data.edge_index, 400)
    assert adj.out_dst.data_ptr() == data.edge_index[1].data_ptr()
    by_target = data.edge_index.flip(0)  # undirected: the same graph, sorted by target
    assert chunked_adjacency(by_target, 400).in_src.data_ptr() == by_target[0].data_ptr()
    enc = _encoder(12, "prelu")
    with torch.no_grad():
        expected = enc(data.x, data.edge_index)
    torch.testing.assert_close(enc.embed_nodes(data.x, data.edge_index, chunk_rows=50),
                               expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(enc.embed_nodes(data.x, by_target, chunk_rows=50), expected,
                               atol=1e-5, rtol=0)


def test_embed_fills_a_given_output_and_a_memory_mapped_npy(tmp_path):
    x, edge_index = _graph(120, 8, 0.3)
    torch.manual_seed(0)
    model = AdNGCL(8, ModelConfig(16, 8, 8, "rrelu"))  # RReLU is random in train mode only
    model.train()
    expected = model.embed(x, edge_index)
    assert model.training and not expected.requires_grad
    out = torch.full((120, 8), float("nan"))
    assert model.embed(x, edge_index, out=out, chunk_rows=11) is out
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    path = tmp_path / "embeddings.npy"
    written = model.embed(x, edge_index, out=npy_embeddings(path, 120, 8), chunk_rows=11)
    del written  # unmapped: the file holds the embeddings
    np.testing.assert_allclose(np.load(path), expected.numpy(), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"out must be \[120, 8\]"):
        model.embed(x, edge_index, out=torch.zeros(120, 9))


def _largest_allocation(fn: Callable[[], object]) -> int:
    """Bytes of the largest single allocation made while ``fn`` runs (torch profiler)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return max(event.self_cpu_memory_usage for event in prof.events())


@pytest.mark.parametrize("sparse", [False, True])
def test_chunked_embeddings_never_allocate_n_by_hidden(sparse):
    """With chunks smaller than the graph, the largest tensor is the N x out_dim output; the
    full forward pass, measured the same way, allocates N x hidden."""
    n, hidden, out_dim = 2000, 256, 16
    x, edge_index = _graph(n, 8, 0.05 if sparse else 0.3)
    enc = _encoder(8, "prelu", hidden, out_dim)
    features = x.to_sparse_csr() if sparse else x
    chunked = _largest_allocation(lambda: enc.embed_nodes(features, edge_index, chunk_rows=100))
    assert chunked <= n * out_dim * 4 < n * hidden * 4
    with torch.no_grad():
        assert _largest_allocation(lambda: enc(features, edge_index)) >= n * hidden * 4


# --- the streaming probe -----------------------------------------------------------------------


def _reference_linear_probe(embeddings: torch.Tensor, y: torch.Tensor, split: Split, *,
                            weight_decays: Sequence[float] = (0.0, 1e-4, 1e-3, 1e-2),
                            epochs: int = 300, lr: float = 0.01, seed: int = 0) -> tuple:
    """``linear_probe`` as it was before issue 11 (commit cb100dd): every row normalised and
    classified at once. Returns (val micro, val macro, test micro, test macro, weight decay)."""
    device = embeddings.device
    x = F.normalize(embeddings.detach().float(), dim=1)
    y = y.to(device=device, dtype=torch.long)
    train, val, test = (idx.to(device) for idx in (split.train, split.val, split.test))
    num_classes = int(y.max()) + 1
    dim = x.shape[1]
    generator = torch.Generator().manual_seed(seed)
    bound = 1.0 / math.sqrt(dim)
    weight = (torch.rand(num_classes, dim, generator=generator) * 2 - 1) * bound
    bias = (torch.rand(num_classes, generator=generator) * 2 - 1) * bound
    packed_w, packed_b = fit_logreg(x[train], y[train], num_classes, weight_decays, epochs, lr,
                                     weight.to(device), bias.to(device))
    with torch.no_grad():
        pred = torch.addmm(packed_b, x, packed_w).view(x.shape[0], -1, num_classes).argmax(-1)
    val_scores = [f1_scores(pred[val, g], y[val], num_classes) for g in range(len(weight_decays))]
    best = max(range(len(weight_decays)), key=lambda g: (val_scores[g][0], -g))
    test_micro, test_macro = f1_scores(pred[test, best], y[test], num_classes)
    return (*val_scores[best], test_micro, test_macro, float(weight_decays[best]))


def _numbers(scores: ProbeScores) -> tuple:
    return (scores.val_micro, scores.val_macro, scores.test_micro, scores.test_macro,
            scores.weight_decay)


@pytest.mark.parametrize("chunk_rows", [37, 1 << 15])
def test_probe_equals_the_reference_on_random_embeddings(chunk_rows, monkeypatch):
    monkeypatch.setattr(evaluate, "PROBE_CHUNK_ROWS", chunk_rows)
    g = torch.Generator().manual_seed(3)
    y = torch.randint(0, 6, (900,), generator=g)
    x = torch.randn(6, 24, generator=g)[y] + 2.0 * torch.randn(900, 24, generator=g)
    for seed in range(3):
        split = random_split(900, seed)
        for emb in (x, x.double() * 7.0):
            got = linear_probe(emb, y, split, epochs=60, seed=seed)
            assert _numbers(got) == _reference_linear_probe(emb, y, split, epochs=60, seed=seed)
            assert (got.num_train, got.num_val, got.num_test) == (90, 90, 720)


@pytest.mark.skipif(not (SHARED_DATASETS / "Cora" / "raw").is_dir(), reason="shared Cora copy absent")
def test_probe_equals_the_reference_on_cora(tmp_path, monkeypatch):
    """Same F1 numbers and weight decay as before on Cora: its raw features and the embeddings
    of an untrained encoder, two seeds, chunks smaller than the validation set."""
    monkeypatch.setenv("EDGEGCL_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr(evaluate, "PROBE_CHUNK_ROWS", 100)
    data = load_graph("Cora", SHARED_DATASETS)
    for seed in (0, 1):
        torch.manual_seed(seed)
        emb = AdNGCL(data.x.size(1), ModelConfig()).embed(data.x.to_sparse_csr(), data.edge_index)
        split = random_split(data.num_nodes, seed)
        for features in (emb, data.x):
            assert (_numbers(linear_probe(features, data.y, split, seed=seed))
                    == _reference_linear_probe(features, data.y, split, seed=seed))


def test_group_counts_give_f1_scores_per_group():
    g = torch.Generator().manual_seed(0)
    pred = torch.randint(0, 7, (500, 3), generator=g)
    pred[:, 1] = torch.randint(0, 4, (500,), generator=g)  # a group that never predicts 4..6
    target = torch.randint(0, 6, (500,), generator=g)
    counts = _GroupCounts(3, 7, torch.device("cpu"))
    for part in torch.arange(500).split(64):
        counts.add(pred[part], target[part])
    for group in range(3):
        assert counts.scores(group) == f1_scores(pred[:, group], target, 7)


# --- per-checkpoint probes on a labelled sample ------------------------------------------------


def test_checkpoint_probe_split_samples_train_and_validation_only():
    split = random_split(1000, seed=4)  # 100 train, 100 validation, 800 test
    assert checkpoint_probe_split(split) is split  # within CHECKPOINT_PROBE_MAX_LABELLED
    assert checkpoint_probe_split(split, 200) is split
    sample = checkpoint_probe_split(split, 51)
    assert (sample.train.numel(), sample.val.numel()) == (26, 25)
    assert torch.equal(sample.train, split.train[:26]) and torch.equal(sample.val, split.val[:25])
    assert sample.test is split.test
    uneven = random_split(1000, seed=4, train=0.3, val=0.1)
    sample = checkpoint_probe_split(uneven, 40)
    assert (sample.train.numel(), sample.val.numel()) == (30, 10)
    with pytest.raises(ValueError, match="at least 2"):
        checkpoint_probe_split(split, 1)


def _tiny_config(**overrides) -> TrainConfig:
    return TrainConfig(features=16, hidden_dim=16, out_dim=8, proj_dim=8, epochs=4, eval_every=2,
                       T_init=2, T_int=2, e=1, device="cpu", mode="full", **overrides)


def test_run_probes_checkpoints_on_a_sample_and_the_choice_on_the_full_split(tmp_path,
                                                                              monkeypatch):
    data = synthetic_graph(SyntheticSpec(num_nodes=300, num_features=16, seed=5))
    monkeypatch.setattr(evaluate, "CHECKPOINT_PROBE_MAX_LABELLED", 20)  # 30 + 30 labelled
    metrics = train_seeds(_tiny_config(), data, tmp_path, torch.device("cpu"))
    seed = metrics["seeds"][0]
    assert seed["checkpoint_probe"] == {"train_nodes": 10, "val_nodes": 10, "test_nodes": 240,
                                        "sampled": True}
    assert [h["epoch"] for h in seed["history"]] == [2, 4]
    assert all(round(h["val_micro"] / 10, 6).is_integer() for h in seed["history"])  # 10 nodes
    # the reported scores: the checkpoint chosen on the sample, probed on the full split
    saved = json.loads((tmp_path / "metrics.json").read_text())["seeds"][0]
    assert saved["checkpoint_probe"]["sampled"] is True
    encoder = load_checkpoint(tmp_path / "seed-0" / "checkpoint.pt").encoder
    full = linear_probe(encoder.embed_nodes(data.x, data.edge_index), data.y,
                        random_split(300, 0), seed=0)
    assert (seed["val_micro_f1"], seed["test_micro_f1"], seed["test_macro_f1"]) == (
        full.val_micro, full.test_micro, full.test_macro)


def test_run_without_sampling_records_the_full_split(tmp_path):
    data = synthetic_graph(SyntheticSpec(num_nodes=300, num_features=16, seed=5))
    seed = train_seeds(_tiny_config(), data, tmp_path, torch.device("cpu"))["seeds"][0]
    assert seed["checkpoint_probe"] == {"train_nodes": 30, "val_nodes": 30, "test_nodes": 240,
                                        "sampled": False}
    chosen = next(h for h in seed["history"] if h["epoch"] == seed["selected_epoch"])
    assert seed["val_micro_f1"] == chosen["val_micro"]
    assert set(chosen) == {"epoch", "val_micro", "val_macro", "test_micro", "test_macro",
                           "weight_decay", "majority"}
