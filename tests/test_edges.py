"""The edge objective's parts: an edge both of whose directions are masked never reaches the
encoder, the masked share is the mask's, non-edges are non-edges drawn as the schedule says,
and the decoder is a symmetric scorer."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from edgegcl.cli.main import main
from edgegcl.data.synthetic import SyntheticSpec, synthetic_graph
from edgegcl.nn.decoder import LinkDecoder
from edgegcl.training.edges import MaskedEdges, edge_loss
from edgegcl.training.nonedges import CandidatePools, candidate_pools
from helpers import capture


def _keys(edge_index: torch.Tensor, n: int) -> set[int]:
    lo, hi = torch.minimum(*edge_index), torch.maximum(*edge_index)
    return set((lo * n + hi).tolist())


def test_an_edge_is_hidden_when_both_its_directions_are_masked() -> None:
    """MaskGAE's masking: each direction masked with probability p and scored back; an edge
    reaches the encoder, both ways, while either direction is unmasked."""
    data = synthetic_graph(SyntheticSpec(num_nodes=300, num_features=4, avg_degree=8))
    n = data.num_nodes
    edges = MaskedEdges(data.edge_index, n, 0.7, torch.Generator().manual_seed(0))
    m = edges.keys.numel()
    directed = {tuple(e) for e in edges.edge_index.t().tolist()}
    for _ in range(3):
        step = edges.draw()
        masked = {tuple(e) for e in step.hidden.t().tolist()}
        assert masked <= directed and len(masked) == step.hidden.size(1)
        kept = {tuple(e) for e in step.kept.t().tolist()}
        for u, v in directed:  # kept exactly when some direction is unmasked, both ways
            assert ((u, v) in kept) == ((u, v) not in masked or (v, u) not in masked)
        # masked directions ~ Binomial(2m, 0.7); hidden edges ~ Binomial(m, 0.49)
        assert abs(len(masked) - 0.7 * 2 * m) <= 5 * math.sqrt(2 * m * 0.7 * 0.3)
        hidden = m - len(_keys(step.kept, n))
        assert abs(hidden - 0.49 * m) <= 5 * math.sqrt(m * 0.49 * 0.51)


def test_the_decoder_is_symmetric_and_the_loss_rewards_separation() -> None:
    torch.manual_seed(0)
    decoder = LinkDecoder(6).eval()
    a, b = torch.randn(10, 6), torch.randn(10, 6)
    assert torch.allclose(decoder(a, b), decoder(b, a))
    high, low = torch.full((4,), 5.0), torch.full((4,), -5.0)
    assert edge_loss(high, low) < edge_loss(low, high)
    assert math.isclose(float(edge_loss(torch.zeros(3), torch.zeros(3))), 2 * math.log(2),
                        rel_tol=1e-6)
    # a non-edge of weight 0 is left out of the mean
    weights = torch.tensor([[1.0, 0.0]])
    assert math.isclose(float(edge_loss(torch.zeros(1), torch.tensor([[0.0, 50.0]]), weights)),
                        2 * math.log(2), rel_tol=1e-6)


# ------------------------------------------------------------------------------------------
# the non-edges under the schedule
# ------------------------------------------------------------------------------------------

def _pools(n: int = 400, pool: int = 50) -> tuple[MaskedEdges, CandidatePools, torch.Tensor]:

    data = synthetic_graph(SyntheticSpec(num_nodes=n, num_features=4, avg_degree=8))
    edges = MaskedEdges(data.edge_index, n, 0.7, torch.Generator().manual_seed(0))
    step = edges.draw()
    return edges, candidate_pools(step.hidden, edges.keys, n, pool,
                                  torch.Generator().manual_seed(1)), step.hidden


def test_candidates_are_their_tiles_pool_and_valid_says_which_are_non_edges() -> None:
    from edgegcl.training.nonedges import TILE

    edges, pools, hidden = _pools()
    n, m = edges.num_nodes, hidden.size(1)
    assert m > 2 * TILE  # several tiles
    assert torch.equal(pools.targets, hidden) and pools.anchors.numel() == m
    assert len(set(pools.anchors.tolist())) > 0.5 * min(m, n)  # uniform nodes, not the edges'
    cands = pools.candidates
    assert torch.equal(cands[TILE + 3], pools.pools[1])  # a tile shares its pool
    u = pools.anchors.unsqueeze(1).expand_as(cands)
    linked = torch.tensor([[k in set(edges.keys.tolist()) for k in row] for row in
                           (torch.minimum(u, cands) * n + torch.maximum(u, cands)).tolist()])
    assert torch.equal(pools.valid, ~linked & (u != cands))


def test_the_schedule_sets_how_many_non_edges_and_hans_which() -> None:
    from edgegcl.contrast.scheduler import ScheduleConfig
    from edgegcl.training.nonedges import schedule_non_edges, tile_similarities

    edges, pools, _ = _pools(pool=50)
    ratios = ScheduleConfig().ratio_map()  # hard 30, inter 50, easy 20
    g = torch.Generator().manual_seed(2)
    small = schedule_non_edges(pools, {"hard": 0.06, "inter": 0.1, "easy": 0.04}, ratios,
                               False, g)
    large = schedule_non_edges(pools, {"hard": 0.3, "inter": 0.5, "easy": 0.2}, ratios, False, g)
    assert small.columns.size(1) == 3 + 5 + 2 and large.columns.size(1) == 50  # floor(f x 50)
    assert small.category is None
    assert torch.equal(small.chosen, pools.valid.gather(1, small.columns))
    assert bool((large.columns.sort(1).values == torch.arange(50)).all())  # every candidate
    # nothing in the bootstrap floors to a whole non-edge: one is still scored
    assert schedule_non_edges(pools, dict.fromkeys(ratios, 1e-4), ratios, False,
                              g).columns.size(1) == 1
    # HANS's strata: every hard pick is at least as close to its anchor as every easy one
    z = torch.randn(edges.num_nodes, 8, generator=g)
    hans = schedule_non_edges(pools, {"hard": 0.06, "inter": 0.1, "easy": 0.04}, ratios, True,
                              g, z)
    assert hans.category is not None and hans.category.tolist() == [0] * 3 + [1] * 5 + [2] * 2
    sims = tile_similarities(z, pools.anchors, pools.pools).gather(1, hans.columns)
    sims = sims.masked_fill(~hans.chosen, float("nan"))
    hard, easy = sims[:, :3], sims[:, 8:]
    both = ~hard.isnan().any(1) & ~easy.isnan().any(1)
    assert bool((hard[both].min(1).values >= easy[both].max(1).values).all())
    assert torch.equal(hans.chosen, pools.valid.gather(1, hans.columns))


def test_a_smaller_theta_max_scores_fewer_non_edges_and_hans_steps_on_their_losses() -> None:
    """The budget is the knob for links too: at saturation theta_max x edge_pool non-edges
    per masked edge (by category, floored); HANS reads each category's loss and grows its
    eta."""
    from edgegcl.training.config import TrainConfig
    from edgegcl.training.engine import Trainer

    x, edges = _planted()
    active = {}
    for theta in (0.1, 0.3):
        cfg = TrainConfig(objective="edges", encoder="gcn", hidden_dim=16, out_dim=16,
                          num_layers=1, epochs=8, T_init=1, T_int=1, theta_max=theta,
                          scheduler="hans", e=1, edge_pool=100)
        trainer = Trainer(cfg, x.size(1), seed=0)
        results = [trainer.fit_epoch(x, edges) for _ in range(8)]
        assert set(results[-1].category) == {"hard", "inter", "easy"}
        assert trainer.scheduler.saturated
        active[theta] = trainer.edge_active
    assert active == {0.1: 10, 0.3: 30}


# ------------------------------------------------------------------------------------------
# the objective in the engine and in a run
# ------------------------------------------------------------------------------------------

SMALL = ["--epochs", "6", "--eval-every", "2", "--hidden-dim", "16", "--out-dim", "8",
         "--proj-dim", "8"]


def _planted(n: int = 240) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense features that say each node's community, and edges mostly inside them."""
    g = torch.Generator().manual_seed(1)
    block = torch.arange(n) % 4
    x = torch.nn.functional.one_hot(block, 4).float() + 0.3 * torch.randn(n, 4, generator=g)
    x = torch.cat([x, torch.randn(n, 12, generator=g)], 1)
    a, b = torch.randint(0, n, (2, 6 * n), generator=g)
    keep = (a != b) & ((block[a] == block[b]) | (torch.rand(6 * n, generator=g) < 0.05))
    edges = torch.stack([a[keep], b[keep]])
    return x, torch.cat([edges, edges.flip(0)], 1)


def test_the_edge_objective_trains_the_decoder_beside_the_encoder_and_resumes() -> None:
    from edgegcl.training.config import TrainConfig
    from edgegcl.training.engine import Trainer

    x, edges = _planted()
    cfg = TrainConfig(objective="edges", encoder="gcn", hidden_dim=16, out_dim=16,
                      num_layers=1, lr=0.05, epochs=60, edge_dropout=0.0)
    trainer = Trainer(cfg, x.size(1), seed=0)
    assert any(k.startswith("decoder.") for k in trainer.model.state_dict())
    losses = [trainer.fit_epoch(x, edges).loss for _ in range(60)]
    # 2 log 2 is the loss of a decoder that cannot tell edges from non-edges
    assert losses[0] > 1.3 and sum(losses[-10:]) / 10 < 0.85 * 2 * math.log(2)
    import copy
    saved = copy.deepcopy(trainer.state_dict())
    rng = torch.get_rng_state()  # the dropout layers' stream
    ahead = [trainer.fit_epoch(x, edges).loss for _ in range(3)]
    again = Trainer(cfg, x.size(1), seed=0)
    again.load_state_dict(saved)
    torch.set_rng_state(rng)
    assert [again.fit_epoch(x, edges).loss for _ in range(3)] == ahead


def test_the_degree_decoder_learns_the_masked_degrees_and_resumes() -> None:
    from edgegcl.training.config import TrainConfig
    from edgegcl.training.engine import Trainer

    x, edges = _planted()
    cfg = TrainConfig(objective="edges", encoder="gcn", hidden_dim=16, out_dim=16,
                      num_layers=1, lr=0.05, edge_dropout=0.0, degree_weight=1.0)
    trainer = Trainer(cfg, x.size(1), seed=0)
    decoder = trainer.model.degree_decoder
    start = [p.detach().clone() for p in decoder.parameters()]
    for _ in range(30):
        trainer.fit_epoch(x, edges)
    assert all(not torch.equal(a, b) for a, b in zip(start, decoder.parameters()))
    # each node's masked directed edges: about edge_mask x its degree, as regressed
    degree = torch.bincount(edges[1], minlength=x.size(0)).float() * cfg.learning.edge_mask
    with torch.no_grad():
        trainer.model.eval()
        guess = decoder(trainer.model(x, edges))
    assert float((guess - degree).abs().mean()) < float((degree - degree.mean()).abs().mean())
    again = Trainer(cfg, x.size(1), seed=0)
    again.load_state_dict(trainer.state_dict())
    assert torch.equal(again.model.degree_decoder.net[0].weight, decoder.net[0].weight)
    plain = Trainer(TrainConfig(objective="edges", encoder="gcn", hidden_dim=16, out_dim=16,
                                num_layers=1), x.size(1), seed=0)
    assert not hasattr(plain.model, "degree_decoder")


@pytest.mark.parametrize("objective", ["edges", "views"])
def test_grad_clip_bounds_the_gradients_total_norm(objective: str) -> None:
    from edgegcl.training.config import TrainConfig
    from edgegcl.training.engine import Trainer

    x, edges = _planted()

    def norm(clip: float) -> float:
        cfg = TrainConfig(objective=objective, encoder="gcn", hidden_dim=16, out_dim=16,
                          num_layers=1, grad_clip=clip)
        trainer = Trainer(cfg, x.size(1), seed=0)
        trainer.fit_epoch(x, edges)  # the gradients stay on the weights after the update
        grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
        return float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))

    free = norm(0.0)
    assert free > 1e-3  # clipping at 1e-3 below has something to clip
    assert norm(1e-3) <= 1e-3 * (1 + 1e-4)  # clip_grad_norm_ scales by clip / (norm + 1e-6)


def test_a_link_run_keeps_the_decoder_that_scored_its_checkpoint(tmp_path: Path) -> None:
    """The default link run learns from the edges: the checkpoint holds the decoder chosen on
    validation, and its encoder and decoder score the test pairs exactly as the run did."""
    from edgegcl.training.checkpoint import load_checkpoint
    from edgegcl.data.files import load_file
    from edgegcl.evaluation.links import link_scores
    from edgegcl.training.linkprober import seed_link_split
    from edgegcl_embed.graph import save_npz

    x, edges = _planted()
    path = tmp_path / "g.npz"
    save_npz(path, x.numpy(), edges.numpy())
    code, out, err = capture(main, ["train", "--dataset", str(path), "--task", "link", *SMALL,
                                    "--encoder", "gcn", "--out", str(tmp_path / "run")])
    assert code == 0, err
    assert "objective: edges" in err and "link.toml" in err
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    seed = metrics["seeds"][0]
    assert "test_auc_decoder" in seed
    ckpt = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert ckpt.decoder is not None and not ckpt.decoder.training
    data = load_file(path)
    split = seed_link_split(data, ckpt.seed)
    with torch.no_grad():
        z = ckpt.encoder.embed_nodes(data.x, split.train_edge_index())
        again = link_scores(z, split, "auc", ckpt.seed, ckpt.decoder)
    assert again.test["decoder"]["auc"] == pytest.approx(seed["test_auc_decoder"], abs=1e-9)
    rows = (tmp_path / "run" / "seed-0" / "epochs.csv").read_text().splitlines()
    header = rows[0].split(",")
    first, last = rows[1].split(","), rows[-1].split(",")
    assert first[header.index("active_per_anchor")] == "1"  # the bootstrap: one non-edge
    assert 0.0 < float(last[header.index("budget_used")]) <= 1.0  # the schedule's share


@pytest.mark.parametrize(("flags", "needle"), [
    (["--task", "link", "--objective", "views", "--edge-mask", "0.5"], "--objective edges"),
    (["--edge-dropout", "0.5"], "--objective edges"),
    (["--task", "link", "--edge-pool", "0"], "--edge-pool"),
    (["--edge-mask", "1.0", "--objective", "edges"], "--edge-mask")])
def test_what_the_edge_objective_cannot_do_is_one_line(flags: list[str], needle: str,
                                                       tmp_path: Path) -> None:
    code, _, err = capture(main, ["train", "--nodes", "120", *SMALL, *flags,
                                  "--out", str(tmp_path / "run")])
    assert code == 2 and needle in err.splitlines()[-1], err
    assert not (tmp_path / "run").exists()


def test_the_link_scorer_exports_and_scores_pairs_as_the_run_did(tmp_path: Path) -> None:
    """edgegcl export --scorer writes the run's link decoder as an ONNX model that onnxruntime
    runs alone on the exported encoder's embeddings, agreeing with torch; a run without a
    decoder refuses --scorer in one line."""
    import numpy as np
    import onnxruntime

    from edgegcl.training.checkpoint import load_checkpoint
    from edgegcl_embed.graph import save_npz

    x, edges = _planted()
    path = tmp_path / "g.npz"
    save_npz(path, x.numpy(), edges.numpy())
    run = tmp_path / "run"
    assert capture(main, ["train", "--dataset", str(path), "--task", "link", *SMALL,
                          "--encoder", "gcn", "--out", str(run)])[0] == 0
    code, out, err = capture(main, ["export", str(tmp_path / "m.onnx"), "--run", str(run),
                                    "--graph", str(path), "--scorer", str(tmp_path / "s.onnx")])
    assert code == 0, err
    assert "link scorer" in out
    encoder = onnxruntime.InferenceSession(str(tmp_path / "m.onnx"))
    scorer = onnxruntime.InferenceSession(str(tmp_path / "s.onnx"))
    z = encoder.run(None, {"x": x.numpy(), "edge_index": edges.numpy()})[0]
    u, v = np.arange(0, 40), np.arange(40, 80)
    logits = scorer.run(None, {"z_u": z[u], "z_v": z[v]})[0]
    ckpt = load_checkpoint(run / "checkpoint.pt")
    assert ckpt.decoder is not None
    with torch.no_grad():
        expected = ckpt.decoder(torch.from_numpy(z[u]), torch.from_numpy(z[v])).numpy()
    assert logits.shape == (40,) and np.abs(logits - expected).max() <= 1e-4
    # a run of the views' objective has no decoder to export
    views = tmp_path / "views"
    assert capture(main, ["train", "--dataset", str(path), "--task", "link", *SMALL,
                          "--encoder", "gcn", "--objective", "views", "--out", str(views)])[0] == 0
    code, _, err = capture(main, ["export", str(tmp_path / "v.onnx"), "--run", str(views),
                                  "--graph", str(path), "--scorer", str(tmp_path / "vs.onnx")])
    assert code == 2 and "export without one" in err.splitlines()[-1]
    assert not (tmp_path / "v.onnx").exists() and not (tmp_path / "vs.onnx").exists()


def test_a_mini_batch_step_never_shows_its_targets_and_hides_edges_both_ways() -> None:
    from edgegcl.training.edges import EdgeBatches

    data = synthetic_graph(SyntheticSpec(num_nodes=500, num_features=4, avg_degree=8))
    n = data.num_nodes
    batches = EdgeBatches(data.edge_index, n, 0.7, torch.Generator().manual_seed(0))
    targets = batches.draw(50)
    assert targets.size(1) == len(_keys(targets, n)) == 50
    assert _keys(targets, n) <= set(batches.keys.tolist())
    n_id = torch.randperm(n)  # any relabelling: visible reads global ids through n_id
    local = torch.argsort(n_id)[data.edge_index]
    seen = batches.visible(local, n_id, targets)
    shown = data.edge_index[:, seen]
    assert not _keys(shown, n) & _keys(targets, n)
    # both directions of an undirected edge are read alike; hidden when both are masked
    hidden = _keys(data.edge_index[:, ~seen], n) - _keys(targets, n)
    assert not hidden & _keys(shown, n)
    m = len(batches.keys)
    assert abs(len(hidden) - 0.49 * m) <= 5 * math.sqrt(m * 0.49 * 0.51) + 50


def test_a_mini_batch_link_run_learns_from_the_edges(tmp_path: Path) -> None:
    x, edges = _planted()
    from edgegcl_embed.graph import save_npz

    path = tmp_path / "g.npz"
    save_npz(path, x.numpy(), edges.numpy())
    code, out, err = capture(main, ["train", "--dataset", str(path), "--task", "link", *SMALL,
                                    "--encoder", "gcn", "--mode", "minibatch", "--batch-size",
                                    "64", "--out", str(tmp_path / "run")])
    assert code == 0, err
    assert "objective: edges" in err
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["mode"] == "minibatch" and "test_auc_decoder" in metrics["seeds"][0]


def test_the_link_scorer_block_runs_as_written(tmp_path: Path) -> None:
    """docs/tasks.md's block scores pairs with the exported encoder and scorer alone."""
    import subprocess
    import sys

    import numpy as np
    from docblocks import block
    from edgegcl_embed.graph import save_npz

    x, edges = _planted()
    save_npz(tmp_path / "graph.npz", x.numpy(), edges.numpy())
    assert capture(main, ["train", "--dataset", str(tmp_path / "graph.npz"), "--task", "link",
                          *SMALL, "--encoder", "gcn", "--out", str(tmp_path / "run")])[0] == 0
    assert capture(main, ["export", str(tmp_path / "model.onnx"), "--run", str(tmp_path / "run"),
                          "--graph", str(tmp_path / "graph.npz"), "--scorer",
                          str(tmp_path / "scorer.onnx")])[0] == 0
    code = block("link-scorer").text + "\nnp.save('logits.npy', logits)\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    logits = np.load(tmp_path / "logits.npy")
    assert logits.shape == (3,) and np.isfinite(logits).all()
