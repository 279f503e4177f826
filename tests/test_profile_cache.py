"""The profile cache (edgegcl.budget.cache): keyed by device, graph and settings, JSON only,
corrupt or foreign files ignored with a warning."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch

from edgegcl.budget.cache import ProfileCache, cache_root, graph_digest, settings_key
from edgegcl.budget.search import OUT_OF_MEMORY, Cost
from edgegcl.training.config import TrainConfig
from edgegcl.data import SyntheticSpec, synthetic_graph

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def graph():
    return synthetic_graph(SyntheticSpec(num_nodes=60, num_features=8, avg_degree=4, seed=1))


def _cache(graph, cfg: TrainConfig = TrainConfig()) -> tuple[ProfileCache, list[str]]:
    warnings: list[str] = []
    return ProfileCache.for_run(graph, cfg, CPU, warnings.append), warnings


def test_the_cache_folder_follows_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGEGCL_CACHE", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    monkeypatch.delenv("EDGEGCL_CACHE")
    assert cache_root() == Path.home() / ".cache" / "edgegcl"


def test_a_measurement_survives_to_the_next_run(graph) -> None:
    cache, warnings = _cache(graph)
    assert len(cache) == 0 and cache.get(1024, 0.4, "dense") is None
    cost = Cost(0.25, 12345, phases=(("loss", 0.1),))
    cache.put(1024, 0.4, "dense", cost)
    cache.put(1024, 0.8, "pairs", OUT_OF_MEMORY)  # not kept: free memory changes
    again, more = _cache(graph)
    assert again.path == cache.path and len(again) == 1
    assert again.get(1024, 0.4, "dense") == cost and again.hits == 1
    assert again.get(1024, 0.4, "pairs") is None and again.get(512, 0.4, "dense") is None
    assert again.get(1024, 0.8, "pairs") is None
    assert warnings == more == []
    raw = json.loads(cache.path.read_text())
    assert raw["format"] == "edgegcl-profile-cache" and raw["key"]["device"]["kind"] == "cpu"


def test_another_graph_or_setting_is_another_entry(graph) -> None:
    cache, _ = _cache(graph)
    other_graph = synthetic_graph(SyntheticSpec(num_nodes=60, num_features=8, avg_degree=4,
                                                seed=2))
    assert graph_digest(other_graph) != graph_digest(graph)
    assert _cache(other_graph)[0].path != cache.path
    assert _cache(graph, TrainConfig(tau=0.9))[0].path != cache.path
    assert _cache(graph, TrainConfig(epochs=10))[0].path != cache.path  # reachable eta
    # what the search sets itself, and what the profiler never reads, share the entry
    same = TrainConfig(theta_max=0.7, batch_size=64, logits="pairs", seeds=5, out="x", lr=0.1)
    assert _cache(graph, same)[0].path == cache.path
    assert "theta_max" not in settings_key(same) and "tau" in settings_key(same)


@pytest.mark.parametrize("content", [
    b"{ not json", pickle.dumps({"format": "edgegcl-profile-cache"}), b"\xff\xfe",
    json.dumps({"format": "something-else", "costs": []}).encode(),
    json.dumps({"format": "edgegcl-profile-cache", "version": 99}).encode(),
    json.dumps([1, 2, 3]).encode(),
])
def test_a_corrupt_or_foreign_file_is_ignored_with_one_warning(graph, content: bytes) -> None:
    cache, _ = _cache(graph)
    cache.path.parent.mkdir(parents=True, exist_ok=True)
    cache.path.write_bytes(content)
    again, warnings = _cache(graph)
    assert len(again) == 0 and len(warnings) == 1
    assert str(again.path) in warnings[0] and "ignoring" in warnings[0]
    again.put(256, 0.2, "dense", Cost(1.0, 10))  # rewritten, readable again
    assert _cache(graph)[0].get(256, 0.2, "dense") == Cost(1.0, 10)


def test_a_file_written_for_another_key_or_with_bad_entries_is_ignored(graph) -> None:
    cache, _ = _cache(graph)
    cache.put(256, 0.2, "dense", Cost(1.0, 10))
    raw = json.loads(cache.path.read_text())
    for broken in ({**raw, "key": {**raw["key"], "graph": "0" * 32}},
                   {**raw, "costs": [{**raw["costs"][0], "epoch_s": "fast"}]},
                   {**raw, "costs": [{**raw["costs"][0], "epoch_s": -1.0}]},
                   {**raw, "costs": [{"theta": 0.2}]}):
        cache.path.write_text(json.dumps(broken))
        again, warnings = _cache(graph)
        assert len(again) == 0 and len(warnings) == 1, broken


def test_an_unwritable_cache_warns_once_and_the_run_goes_on(graph, tmp_path,
                                                            monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("EDGEGCL_CACHE", str(blocker))  # a file where the folder should be
    cache, warnings = _cache(graph)
    cache.put(256, 0.2, "dense", Cost(1.0, 10))
    cache.put(256, 0.4, "dense", Cost(2.0, 10))
    assert len(warnings) == 1 and "cannot write the profile cache" in warnings[0]
    assert cache.get(256, 0.4, "dense") == Cost(2.0, 10)  # kept for this run


def test_the_digest_reads_values_not_names(graph) -> None:
    copy = replace_x(graph, graph.x.clone())
    assert graph_digest(copy) == graph_digest(graph)
    changed = graph.x.clone()
    changed[0, 0] += 1
    assert graph_digest(replace_x(graph, changed)) != graph_digest(graph)
    assert graph_digest(replace_x(graph, graph.x.to_sparse_csr())) != graph_digest(graph)


def replace_x(graph, x):
    out = graph.clone()
    out.x = x
    return out

