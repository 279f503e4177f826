"""``encoder = "auto"`` (edgegcl.training.choice): a labelled graph's seeds each choose their
encoder by a short search on their validation nodes and then train it exactly as a run that
names it; an unlabelled graph's choose by how alike linked nodes' features are; the choice
is one line, recorded, kept on resume, and never taken from a file as code."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from helpers import EpochRows, capture

from edgegcl.cli.main import main
from edgegcl.data import synthetic_graph
from edgegcl.data.homophily import adjusted_homophily, feature_agreement
from edgegcl.errors import UsageError
from edgegcl.evaluation.metrics import standard_error
from edgegcl.evaluation.probe import random_split
from edgegcl.training.choice import pick, search_epochs
from edgegcl.training.config import TrainConfig
from edgegcl.training.results import EncoderChoice
from edgegcl.training.searchrecord import SearchRecord, read_search
from edgegcl import Stopped, train_seeds

CPU = torch.device("cpu")
SMALL = dict(nodes=150, features=12, hidden_dim=16, out_dim=8, proj_dim=8, epochs=8,
             eval_every=2, T_init=1, T_int=1, device="cpu", homophily=0.3)
"""A small labelled graph whose edges do not clearly keep to their class: auto searches."""


def _run(cfg: TrainConfig, data, run_dir: Path, **kw) -> dict:
    run_dir.mkdir(exist_ok=True)
    return train_seeds(cfg, data, run_dir, CPU, **kw)


def _curve(run_dir: Path, seed: int = 0) -> list[dict[str, str]]:
    with (run_dir / f"seed-{seed}" / "epochs.csv").open() as fh:
        return [{k: v for k, v in row.items() if k not in ("epoch_s", "peak_memory_bytes")}
                for row in csv.DictReader(fh)]


def test_another_encoder_must_beat_the_gcn_by_more_than_one_standard_error() -> None:
    names = ["gcn", "ego", "poly"]
    assert standard_error(86.0, 270) == pytest.approx(100 * (0.86 * 0.14 / 270) ** 0.5)
    assert pick({"gcn": 86.0, "ego": 87.9, "poly": 60.0}, names, 2.1) == "gcn"
    assert pick({"gcn": 86.0, "ego": 88.2, "poly": 60.0}, names, 2.1) == "ego"
    assert pick({"gcn": 30.0, "ego": 36.0, "poly": 36.0}, names, 1.7) == "ego"  # ties: earlier
    assert pick({"gcn": 30.0, "ego": 36.0, "poly": 36.0}, ["poly", "ego", "gcn"], 1.7) == "poly"


def test_search_epochs_end_on_a_probe_epoch() -> None:
    assert search_epochs(TrainConfig(epochs=300, eval_every=20)) == 80
    assert search_epochs(TrainConfig(epochs=100, eval_every=5)) == 25
    assert search_epochs(TrainConfig(epochs=6, eval_every=20)) == 6
    assert search_epochs(TrainConfig(epochs=300, search_epochs=7)) == 7


def test_an_auto_seed_is_the_run_of_the_encoder_it_chose(tmp_path: Path) -> None:
    cfg = TrainConfig(**SMALL, seeds=2)
    data = synthetic_graph(cfg.synthetic_spec())
    metrics = _run(cfg, data, tmp_path / "auto")
    for seed, part in enumerate(metrics["seeds"]):
        choice = part["encoder_choice"]
        assert choice["by"] == "search" and set(choice["scores"]) == {"gcn", "ego", "poly"}
        # 15 validation nodes (10 % of 150): one standard error of the GCN's figure
        assert choice["margin"] == pytest.approx(standard_error(choice["scores"]["gcn"], 15))
        assert part["encoder"] == pick(choice["scores"], ["gcn", "ego", "poly"],
                                       choice["margin"])
        assert choice["epochs"] == search_epochs(cfg) == 2
    chosen = metrics["seeds"][0]["encoder"]
    named = _run(cfg.with_encoder(chosen).replace(run={"seeds": 1}), data, tmp_path / "named")
    assert _curve(tmp_path / "auto") == _curve(tmp_path / "named")
    assert metrics["seeds"][0]["test_micro_f1"] == named["seeds"][0]["test_micro_f1"]
    auto_w = torch.load(tmp_path / "auto" / "seed-0" / "checkpoint.pt", weights_only=True)
    named_w = torch.load(tmp_path / "named" / "seed-0" / "checkpoint.pt", weights_only=True)
    assert auto_w["config"]["encoder"] == chosen
    assert all(torch.equal(auto_w["encoder"][k], named_w["encoder"][k]) for k in named_w["encoder"])


def test_the_choice_is_one_line_and_names_every_score(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EDGEGCL_DATA", str(tmp_path / "data"))
    flags = [f"--{k.replace('_', '-')}" if i == 0 else str(v) for k, v in SMALL.items()
             for i in range(2)]
    code, out, err = capture(main, ["train", *flags, "--out", "run"])
    assert code == 0, err
    lines = [line for line in err.splitlines() if "validation micro-F1 after" in line]
    assert len(lines) == 1 and all(f"{n} " in lines[0] for n in ("gcn", "ego", "poly"))
    assert "raw features" in out  # beside the embeddings' figure


def test_a_clearly_homophilous_graph_keeps_the_gcn_without_a_search(tmp_path: Path) -> None:
    """Planted classes with homophily 0.9: the seed's labelled edges keep to their class
    (adjusted homophily far above 0.5), so the GCN trains at once, said in one line; no
    candidate is trained. At 0.3 the same graph is searched."""
    cfg = TrainConfig(**{**SMALL, "nodes": 400, "homophily": 0.9})
    data = synthetic_graph(cfg.synthetic_spec())
    metrics = _run(cfg, data, tmp_path / "clear")
    choice = metrics["seeds"][0]["encoder_choice"]
    split = random_split(data.num_nodes, 0)
    found = adjusted_homophily(data.y, data.edge_index, torch.cat([split.train, split.val]))
    assert choice["by"] == "homophily" and choice["scores"] == {} and choice["seconds"] == 0
    assert choice["homophily"] == found.value and choice["margin"] == found.standard_error
    assert found.value - 2 * found.standard_error >= 0.5
    assert metrics["seeds"][0]["encoder"] == "gcn"
    line = EncoderChoice(**choice).line()
    assert "without a search" in line and f"{found.value:.2f}" in line
    low = TrainConfig(**{**SMALL, "nodes": 400})
    searched = _run(low, synthetic_graph(low.synthetic_spec()), tmp_path / "low")
    assert searched["seeds"][0]["encoder_choice"]["by"] == "search"


def test_adjusted_homophily_is_its_definition_and_ignores_class_balance() -> None:
    """Against the formula written out on a random graph, and about 0 for edges drawn at
    random between two classes of 80 % and 20 % (edge homophily about 0.68 there)."""
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 3, (60,), generator=g)
    edges = torch.randint(0, 60, (2, 500), generator=g)
    nodes = torch.arange(0, 60, 2)
    found = adjusted_homophily(y, edges, nodes)
    pairs = [(int(a), int(b)) for a, b in edges.t()
             if a % 2 == 0 and b % 2 == 0 and a != b]
    same = sum(int(y[a]) == int(y[b]) for a, b in pairs) / len(pairs)
    ends = [int(y[a]) for a, _ in pairs] + [int(y[b]) for _, b in pairs]
    expected = sum((ends.count(k) / len(ends)) ** 2 for k in range(3))
    assert found.edges == len(pairs)
    assert found.value == pytest.approx((same - expected) / (1 - expected), abs=1e-12)
    skewed = (torch.rand(20_000, generator=g) < 0.2).long()
    uniform = torch.randint(0, 20_000, (2, 200_000), generator=g)
    balanced = adjusted_homophily(skewed, uniform, torch.arange(20_000))
    assert abs(balanced.value) < 4 * balanced.standard_error
    assert adjusted_homophily(torch.zeros(5, dtype=torch.long), edges % 5, torch.arange(5)) is None


def test_an_unlabelled_graph_chooses_by_its_features(tmp_path: Path) -> None:
    cfg = TrainConfig(**SMALL)
    data = synthetic_graph(cfg.synthetic_spec())
    data.y = None
    metrics = _run(cfg, data, tmp_path / "run")
    choice = metrics["seeds"][0]["encoder_choice"]
    assert choice["by"] == "signal" and choice["agreement"] == pytest.approx(
        feature_agreement(data.x, data.edge_index))
    assert metrics["seeds"][0]["encoder"] == ("gcn" if choice["agreement"] >= 0.05 else "ego")


def test_feature_agreement_separates_agreeing_from_disagreeing_neighbours() -> None:
    x = torch.eye(3).repeat_interleave(4, dim=0) + 0.01  # 3 groups of 4 equal rows
    within = torch.tensor([[0, 1, 4, 5, 8, 9], [1, 2, 5, 6, 9, 10]])
    across = torch.tensor([[0, 1, 4, 5, 8, 9], [4, 8, 8, 0, 0, 4]])
    assert feature_agreement(x, within) > 0.9 and feature_agreement(x, across) < 0.0
    assert feature_agreement(x, within[:, :0]) == 0.0


def test_a_resumed_auto_seed_keeps_its_recorded_choice(tmp_path: Path) -> None:
    cfg = TrainConfig(**SMALL)
    data = synthetic_graph(cfg.synthetic_spec())
    rows = EpochRows()
    with pytest.raises(Stopped):
        _run(cfg, data, tmp_path / "run", stop=lambda: len(rows.seen) >= 3, hooks=[rows])
    state = torch.load(tmp_path / "run" / "seed-0" / "state.pt", weights_only=True)
    assert state["encoder"] in ("gcn", "ego", "poly") and state["choice"]["by"] == "search"
    straight = _run(cfg, data, tmp_path / "straight")
    resumed = _run(cfg, data, tmp_path / "run", resume=True)
    assert resumed["seeds"][0]["encoder"] == straight["seeds"][0]["encoder"] == state["encoder"]
    assert _curve(tmp_path / "run") == _curve(tmp_path / "straight")


def test_a_state_naming_another_encoder_or_code_is_refused(tmp_path: Path) -> None:
    cfg = TrainConfig(**SMALL)
    data = synthetic_graph(cfg.synthetic_spec())
    rows = EpochRows()
    with pytest.raises(Stopped):
        _run(cfg, data, tmp_path / "run", stop=lambda: len(rows.seen) >= 1, hooks=[rows])
    path = tmp_path / "run" / "seed-0" / "state.pt"
    for forged in ("evil.py:make", "gat"):
        state = torch.load(path, weights_only=True)
        state["encoder"] = forged
        torch.save(state, path)
        with pytest.raises(UsageError, match="names the encoder") as err:
            _run(cfg, data, tmp_path / "run", resume=True)
        assert "\n" not in str(err.value)


def test_a_stop_during_the_search_stops_before_the_seed(tmp_path: Path) -> None:
    cfg = TrainConfig(**SMALL)
    data = synthetic_graph(cfg.synthetic_spec())
    calls = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) > 1  # the first poll is the run's, before the seed

    with pytest.raises(Stopped, match="before seed 1 trained an epoch"):
        _run(cfg, data, tmp_path / "run", stop=stop)
    assert not (tmp_path / "run" / "seed-0" / "state.pt").exists()


def test_a_low_homophily_graph_whose_features_carry_the_classes(tmp_path: Path) -> None:
    """The generated heterophilous graph (homophily 0.1, the classes in the features): the
    GCN's averaging over other classes' nodes erases what the features know, which the
    search sees on validation (by 10-20 points on these graphs), so a seed does not pick it."""
    cfg = TrainConfig(**{**SMALL, "nodes": 600, "features": 8, "epochs": 40, "eval_every": 10,
                         "hidden_dim": 32, "out_dim": 16, "proj_dim": 16, "homophily": 0.1},
                      classes=3, avg_degree=8)
    data = synthetic_graph(cfg.synthetic_spec())
    metrics = _run(cfg, data, tmp_path / "run")
    scores = metrics["seeds"][0]["encoder_choice"]["scores"]
    assert max(scores["ego"], scores["poly"]) >= scores["gcn"] + 5  # 10-20 on graph seeds 0-3
    assert metrics["seeds"][0]["encoder"] != "gcn"  # more than the margin (~6 points) above
    assert "raw_features_test_micro_f1" in metrics["summary"]


def test_a_stop_before_the_first_epoch_names_nothing_to_resume(tmp_path: Path) -> None:
    """Stopped during the encoder search (before any epoch of the run): the new directory is
    removed and the stop names no directory to resume (the command line then says nothing
    was kept)."""
    import edgegcl

    polls = []
    with pytest.raises(Stopped, match="before seed 1 trained an epoch") as stopped:
        edgegcl.train(settings={**SMALL, "encoder": "auto"}, out=tmp_path / "r",
                      stop=lambda: bool(polls.append(1)) or len(polls) > 1)
    assert stopped.value.run_dir is None and not (tmp_path / "r").exists()


def test_a_stop_during_the_search_keeps_the_finished_candidates(tmp_path: Path,
                                                               capsys) -> None:
    """A stop after the search's first candidate: the run directory is kept with that
    candidate's figure in seed-0/search.json; --resume reads it back, trains the other
    candidates only, and chooses what an uninterrupted run chooses, on the same figures."""
    import edgegcl

    settings = {**SMALL, "encoder": "auto", "seeds": 1}
    record = tmp_path / "r" / "seed-0" / "search.json"
    with pytest.raises(Stopped, match="encoder search .* kept: gcn") as stopped:
        edgegcl.train(settings=settings, out=tmp_path / "r", stop=record.exists)
    assert stopped.value.run_dir == tmp_path / "r"
    assert list(read_search(record.parent).scores) == ["gcn"]
    capsys.readouterr()
    resumed = edgegcl.train(resume=tmp_path / "r")
    err = capsys.readouterr().err
    assert "goes on from its saved figures (gcn" in err
    assert "choosing the encoder, gcn" not in err and "choosing the encoder, ego" in err
    straight = edgegcl.train(settings=settings, out=tmp_path / "straight")
    got, want = (run.metrics["seeds"][0]["encoder_choice"] for run in (resumed, straight))
    assert got["scores"] == want["scores"] and got["encoder"] == want["encoder"]


def test_a_damaged_search_record_is_one_line(tmp_path: Path) -> None:
    seed_dir = tmp_path / "seed-0"
    seed_dir.mkdir()
    SearchRecord(["gcn", "ego"], 4, {"gcn": 50.0}, 4, 1.0, 2.0, "micro_f1").save(seed_dir)
    assert read_search(seed_dir).remaining() == ["ego"]
    for forged in ('{"candidates": ["gcn"]}', "not json", '{"candidates": ["gcn", "ego"], '
                   '"epochs": 4, "scores": {"ego": 50.0}, "trained": 4, "seconds": 1.0, '
                   '"margin": 2.0, "metric": "micro_f1"}'):
        (seed_dir / "search.json").write_text(forged)
        with pytest.raises(UsageError, match="is not a search record") as err:
            read_search(seed_dir)
        assert "\n" not in str(err.value)
