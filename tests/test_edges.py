"""The edge objective's parts: a hidden edge never reaches the encoder, the hidden share is
the mask's, non-edges are non-edges, and the decoder is a symmetric scorer."""

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
from helpers import capture


def _keys(edge_index: torch.Tensor, n: int) -> set[int]:
    lo, hi = torch.minimum(*edge_index), torch.maximum(*edge_index)
    return set((lo * n + hi).tolist())


def test_a_hidden_edge_is_gone_both_ways_and_non_edges_are_not_edges() -> None:
    data = synthetic_graph(SyntheticSpec(num_nodes=300, num_features=4, avg_degree=8))
    n = data.num_nodes
    edges = MaskedEdges(data.edge_index, n, 0.7, torch.Generator().manual_seed(0))
    m = edges.keys.numel()
    for _ in range(3):
        step = edges.draw()
        hidden = _keys(step.hidden, n)
        assert not hidden & _keys(step.kept, n)  # neither direction kept
        assert not _keys(step.non_edges, n) & set(edges.keys.tolist())
        assert bool((step.hidden[0] < step.hidden[1]).all())
        assert step.non_edges.size(1) == step.hidden.size(1)
        # the hidden count is Binomial(m, 0.7): within 5 standard deviations
        assert abs(len(hidden) - 0.7 * m) <= 5 * math.sqrt(m * 0.7 * 0.3)


def test_the_decoder_is_symmetric_and_the_loss_rewards_separation() -> None:
    torch.manual_seed(0)
    decoder = LinkDecoder(6).eval()
    a, b = torch.randn(10, 6), torch.randn(10, 6)
    assert torch.allclose(decoder(a, b), decoder(b, a))
    high, low = torch.full((4,), 5.0), torch.full((4,), -5.0)
    assert edge_loss(high, low) < edge_loss(low, high)
    assert math.isclose(float(edge_loss(torch.zeros(3), torch.zeros(3))), 2 * math.log(2),
                        rel_tol=1e-6)


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
    assert rows[1].split(",")[header.index("budget_used")] == ""  # no views, no schedule


@pytest.mark.parametrize(("flags", "needle"), [
    (["--task", "link", "--objective", "views", "--edge-mask", "0.5"], "--objective edges"),
    (["--edge-dropout", "0.5"], "--objective edges"),
    (["--task", "link", "--edge-hard", "0.3", "--mode", "minibatch"], "whole graph"),
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
    assert code == 2 and "drop --scorer" in err.splitlines()[-1]
    assert not (tmp_path / "v.onnx").exists() and not (tmp_path / "vs.onnx").exists()


def test_hard_non_edges_are_two_hops_away_and_never_edges() -> None:
    data = synthetic_graph(SyntheticSpec(num_nodes=400, num_features=4, avg_degree=6))
    n = data.num_nodes
    edges = MaskedEdges(data.edge_index, n, 0.5, torch.Generator().manual_seed(0), hard=1.0)
    step = edges.draw()
    near = edges.two_hop_non_edges(step.hidden, 1.0)
    assert near.size(1) > 0.5 * step.hidden.size(1)  # most walks end two hops away
    a = torch.zeros(n, n, dtype=torch.bool)
    a[data.edge_index[0], data.edge_index[1]] = True
    a |= a.t().clone()
    two = (a.float() @ a.float()) > 0
    assert bool(two[near[0], near[1]].all()) and not bool(a[near[0], near[1]].any())
    assert bool((near[0] < near[1]).all())
    assert step.non_edges.size(1) == step.hidden.size(1)
    assert not _keys(step.non_edges, n) & set(edges.keys.tolist())


def test_a_mini_batch_step_never_shows_its_targets_and_hides_edges_both_ways() -> None:
    from edgegcl.training.edges import EdgeBatches

    data = synthetic_graph(SyntheticSpec(num_nodes=500, num_features=4, avg_degree=8))
    n = data.num_nodes
    batches = EdgeBatches(data.edge_index, n, 0.7, torch.Generator().manual_seed(0))
    targets, non_edges = batches.draw(50)
    assert targets.size(1) == non_edges.size(1) == 50
    assert _keys(targets, n) <= set(batches.keys.tolist())
    assert not _keys(non_edges, n) & set(batches.keys.tolist())
    n_id = torch.randperm(n)  # any relabelling: visible reads global ids through n_id
    local = torch.argsort(n_id)[data.edge_index]
    seen = batches.visible(local, n_id, targets)
    shown = data.edge_index[:, seen]
    assert not _keys(shown, n) & _keys(targets, n)
    # both directions of an undirected edge share their coin
    hidden = _keys(data.edge_index[:, ~seen], n) - _keys(targets, n)
    assert not hidden & _keys(shown, n)
    m = len(batches.keys)
    assert abs(len(hidden) - 0.7 * m) <= 5 * math.sqrt(m * 0.7 * 0.3) + 50


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
