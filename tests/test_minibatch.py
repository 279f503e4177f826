"""Mini-batch training: the same loss as full-graph mode when the batch is the whole graph,
end-to-end training, mode selection and the full-graph memory guard."""

from __future__ import annotations

import json

import pytest
import torch

import edgegcl.training.placement as train_mod
from edgegcl.cli.main import main
from edgegcl.training.config import TrainConfig
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.contrast.hans import CATEGORIES
from edgegcl.data.sampling import make_loader
from edgegcl.contrast.selection import NegativeSelector
from edgegcl.training.engine import Trainer
from edgegcl.training.placement import resolve_mode
from helpers import contrast

TINY = ["--nodes", "150", "--features", "16", "--epochs", "4", "--eval-every", "2",
        "--hidden-dim", "16", "--out-dim", "8", "--proj-dim", "8", "--T-init", "1", "--T-int", "1", "--encoder", "gcn"]


@pytest.mark.parametrize("eta", [0.3, 1.0])
def test_whole_graph_batch_with_full_fanout_gives_the_full_graph_loss(eta):
    data = synthetic_graph(SyntheticSpec(num_nodes=60, num_features=12, avg_degree=6, seed=2))
    cfg = TrainConfig(encoder="gcn", hidden_dim=16, out_dim=8, proj_dim=8, p_edge_1=0.0,
                      p_edge_2=0.0,
                      p_feature_1=0.0, p_feature_2=0.0)  # views = the graph itself
    trainer = Trainer(cfg, 12, seed=0)
    hans = cfg.build_scheduler()
    hans.eta = {c: eta for c in CATEGORIES}
    batch = next(iter(make_loader(data, 60, [-1, -1], sampler="builtin", shuffle=False)))
    assert torch.equal(batch.n_id, torch.arange(60)) and batch.batch_size == 60
    assert sorted(map(tuple, batch.edge_index.t().tolist())) == sorted(map(tuple, data.edge_index.t().tolist()))

    def loss(ei, hops, rows):
        trainer.views.generator.manual_seed(0)
        h1, h2 = trainer.project(data.x, ei, hops, rows)
        return contrast(h1, h2, cfg.contrast.tau, cfg.contrast.logits, NegativeSelector(cfg.ratio_map(), 1), hans,
                        1)

    full = loss(data.edge_index, None, None)
    mini = loss(batch.edge_index, batch.num_sampled_nodes, batch.n_id)
    assert mini.loss.item() == pytest.approx(full.loss.item(), rel=1e-6)
    assert mini.category == pytest.approx(full.category, rel=1e-6, nan_ok=True)


def test_minibatch_training_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", *TINY, "--mode", "minibatch", "--batch-size", "32", "--fanout", "5,5",
                 "--sampler", "builtin", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["mode"] == "minibatch"
    seed = metrics["seeds"][0]
    assert 0.0 <= seed["test_micro_f1"] <= 100.0 and len(seed["history"]) == 2
    events = [json.loads(line) for line in (out / "seed-0" / "hans_events.jsonl").read_text().splitlines()]
    assert any(e["delta_eta"] > 0 and e["reason"] != "bootstrap" for e in events)  # HANS moved


def test_auto_mode_trains_full_graph_while_the_graph_is_small_and_its_step_fits(monkeypatch):
    data = synthetic_graph(SyntheticSpec(num_nodes=300, num_features=16, avg_degree=4, seed=0))
    cfg, cpu = TrainConfig(), torch.device("cpu")
    need = train_mod.full_graph_bytes(cfg, 300, int(data.edge_index.size(1)), 16)
    have = int(need / train_mod.FULL_GRAPH_SHARE)  # the step takes exactly the share it may
    monkeypatch.setattr(train_mod, "available_bytes", lambda device: have)
    choice = train_mod.choose_mode(cfg, data, cpu)
    assert choice.mode == "full" and (choice.need, choice.have) == (need, have)
    assert "full graph" in choice.line() and "MiB" in choice.line()
    monkeypatch.setattr(train_mod, "available_bytes", lambda device: have - 4)
    choice = train_mod.choose_mode(cfg, data, cpu)
    assert choice.mode == "minibatch" and "--mode full" in choice.line()
    # above FULL_GRAPH_MAX_NODES nodes: mini-batches, whatever the memory
    monkeypatch.setattr(train_mod, "available_bytes", lambda device: 1 << 50)
    monkeypatch.setattr(train_mod, "FULL_GRAPH_MAX_NODES", 299)
    choice = train_mod.choose_mode(cfg, data, cpu)
    assert choice.mode == "minibatch" and "above the 299" in choice.line()
    # a mode the user names is kept, whatever the memory, and says nothing
    named = train_mod.choose_mode(cfg.replace(run={"mode": "full"}), data, cpu)
    assert named.mode == "full" and named.line() is None
    assert resolve_mode(cfg.replace(run={"mode": "minibatch"}), data, cpu) == "minibatch"


def test_the_full_graph_model_grows_with_pairs_for_views_and_edges_for_links():
    cfg = TrainConfig()
    views = [train_mod.full_graph_bytes(cfg, n, 10 * n, 128) for n in (10_000, 20_000)]
    assert 3.0 < views[1] / views[0] <= 4.0  # the N x N contrast dominates
    cheaper = train_mod.full_graph_bytes(cfg.replace(schedule={"theta_max": 0.05}),
                                         20_000, 200_000, 128)
    assert cheaper < views[1]  # a smaller budget: a smaller step
    links = cfg.replace(run={"task": "link"})
    edges = [train_mod.full_graph_bytes(links, n, 10 * n, 128) for n in (10_000, 20_000)]
    assert abs(edges[1] - 2 * edges[0]) <= 4  # the edges, not the pairs


def test_a_minibatch_epoch_reports_progress_after_every_batch():
    from edgegcl.training.engine import Trainer

    data = synthetic_graph(SyntheticSpec(num_nodes=100, num_features=8, avg_degree=4, seed=0))
    cfg = TrainConfig(encoder="gcn", hidden_dim=8, out_dim=4, proj_dim=4)
    loader = make_loader(data, 30, [3, 3], sampler="builtin")
    seen = []
    result = Trainer(cfg, 8, mode="minibatch").fit_epoch(
        data.x, loader=loader, on_batch=lambda i, n, mean: seen.append((i, n, mean)))
    assert [(i, n) for i, n, _ in seen] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert seen[-1][2] == pytest.approx(result.loss)


def test_a_step_gathers_its_batch_features_and_frees_them_before_view_2():
    """Mini-batch steps read the graph's features through the batch's node ids; the gathered
    copy is gone by view 2's forward pass (view 1's mask lives in the first layer's weights),
    and the projections equal those of explicitly gathered, explicitly masked features."""
    import weakref

    from edgegcl.nn.augment import mask_columns, mask_half_rows_columns, remove_edges

    data = synthetic_graph(SyntheticSpec(num_nodes=300, num_features=12, avg_degree=6, seed=4))
    cfg = TrainConfig(encoder="gcn", hidden_dim=16, out_dim=8, proj_dim=8)
    trainer = Trainer(cfg, 12, seed=0)
    model = trainer.model
    batch = next(iter(make_loader(data, 40, [5, 5], sampler="builtin", seed=1)))
    hops = batch.num_sampled_nodes

    gathered, alive = [], []  # the gathered batch; whether it is alive at each first layer
    real_index_select = torch.Tensor.index_select

    def spy(self, dim, index):
        out = real_index_select(self, dim, index)
        if self is data.x:
            gathered.append(weakref.ref(out))
        return out

    handle = model.encoder.conv1.register_forward_pre_hook(
        lambda module, args: alive.append(gathered[0]() is not None))
    try:
        torch.Tensor.index_select = spy
        trainer.views.generator.manual_seed(7)
        h1, h2 = trainer.project(data.x, batch.edge_index, hops, batch.n_id)
    finally:
        torch.Tensor.index_select = real_index_select
        handle.remove()
    assert len(gathered) == 1 and alive == [True, False]  # view 1 reads it, view 2 does not

    g = torch.Generator().manual_seed(7)  # the same draws, in Views' order
    x = data.x[batch.n_id]
    x_1 = mask_columns(x, cfg.augment.p_feature_1, g)
    e_1 = remove_edges(batch.edge_index, cfg.augment.p_edge_1, g)
    x_2 = mask_half_rows_columns(x, cfg.augment.p_feature_2, g)
    e_2 = remove_edges(batch.edge_index, cfg.augment.p_edge_2, g)
    torch.testing.assert_close(h1, model.project(model(x_1, e_1, hops)))
    torch.testing.assert_close(h2, model.project(model(x_2, e_2, hops)))


def test_a_resumed_run_keeps_the_mode_auto_chose(tmp_path, monkeypatch):
    """The choice is made once, written to config.toml, and a resume continues in it even
    where the memory would now choose otherwise."""
    from edgegcl.errors import Stopped
    from edgegcl import train_seeds

    cfg = TrainConfig(nodes=120, features=8, hidden_dim=8, out_dim=4, proj_dim=4, epochs=4,
                      eval_every=2, encoder="gcn", device="cpu", batch_size=64,
                      sampler="builtin")
    data = synthetic_graph(cfg.synthetic_spec())
    run = tmp_path / "run"
    run.mkdir()
    epochs = iter(range(100))
    with pytest.raises(Stopped):
        train_seeds(cfg, data, run, torch.device("cpu"), stop=lambda: next(epochs) >= 1)
    assert 'mode = "full"' in (run / "config.toml").read_text()
    # memory the full graph fits in, but not within the share auto leaves it: batches now
    need = train_mod.full_graph_bytes(cfg, 120, int(data.edge_index.size(1)), 8)
    monkeypatch.setattr(train_mod, "available_bytes", lambda device: need)
    metrics = train_seeds(cfg, data, run, torch.device("cpu"), resume=True)
    assert metrics["mode"] == "full"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert train_seeds(cfg, data, fresh, torch.device("cpu"))["mode"] == "minibatch"
