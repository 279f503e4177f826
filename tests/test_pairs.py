"""The scheduled-pairs path against the dense similarity blocks it replaces."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from helpers import contrast, views

from edgegcl.training.config import TrainConfig, validate
from edgegcl.errors import UsageError
from edgegcl.contrast.hans import CATEGORIES
from edgegcl.contrast.dense import similarities
from edgegcl.contrast.loss import scheduled_info_nce
from edgegcl.contrast.negatives import num_candidates, pool_sizes, schedule_negatives
from edgegcl.contrast.pairs import ScheduledLogits, pair_similarities
from edgegcl.contrast.selection import NegativeSelector
from edgegcl.training.engine import Trainer

RATIOS = {"hard": 0.3, "inter": 0.5, "easy": 0.2}
TAU = 0.5


def assert_same(out_d, out_p, leaves, atol=1e-12):
    """Same loss, per-category losses and gradients on the dense and the pairs path."""
    assert out_p.loss.item() == pytest.approx(out_d.loss.item(), rel=1e-12)
    assert out_p.category == pytest.approx(out_d.category, rel=1e-12)
    for a, b in zip(torch.autograd.grad(out_d.loss, leaves),
                    torch.autograd.grad(out_p.loss, leaves)):
        assert torch.allclose(a, b, atol=atol)


def scheduled(sims, counts, draw=3):
    return tuple(schedule_negatives(sims.candidate_rows(d), sims.num_anchors, sims.device,
                                    RATIOS, counts, draw, keep_values=sims.keeps_values)
                 for d in (0, 1))


@pytest.mark.parametrize("keep_values", [True, False])
@pytest.mark.parametrize("complete", [False, True])
def test_pairs_loss_and_gradients_equal_the_dense_path(keep_values, complete):
    h1, h2 = views(b=17, d=6)
    c = num_candidates(h1.size(0))
    counts = pool_sizes(c, RATIOS) if complete else {"hard": 3, "inter": 4, "easy": 2}
    dense = similarities(h1, h2, TAU)
    pairs = pair_similarities(h1, h2, TAU)
    active_dense = scheduled(dense, counts)
    active_pairs = scheduled(pairs, counts)
    for a, b in zip(active_dense, active_pairs):
        assert torch.equal(a.cols, b.cols)  # same candidates, same strata, same draw
        assert b.values is not None and a.values is None
    if not keep_values:  # a kept active set: values recomputed from this step's projections
        active_pairs = tuple(replace(a, values=None) for a in active_pairs)
    assert_same(scheduled_info_nce(dense, active_dense), scheduled_info_nce(pairs, active_pairs),
                (h1, h2))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pairs_equal_the_dense_path_on_cuda():
    h1, h2 = (t.detach().cuda().requires_grad_() for t in views(b=300, d=32, seed=5))
    counts = {"hard": 20, "inter": 30, "easy": 10}
    dense, pairs = similarities(h1, h2, TAU), pair_similarities(h1, h2, TAU)
    assert_same(scheduled_info_nce(dense, scheduled(dense, counts)),
                scheduled_info_nce(pairs, scheduled(pairs, counts)), (h1, h2))


def test_scheduled_logits_pass_gradcheck_with_repeated_candidates():
    """Columns shared by several anchors (and each anchor's own row in z) sum their terms."""
    g = torch.Generator().manual_seed(1)
    u = torch.randn(5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    z = torch.randn(10, 3, generator=g, dtype=torch.float64, requires_grad=True)
    cols = torch.tensor([[0, 3, 9], [3, 9, 1], [9, 0, 2], [4, 3, 5], [8, 7, 3]])

    def logits(u, z):
        with torch.no_grad():
            values = (u @ z.t()).gather(1, cols)
        return ScheduledLogits.apply(u, z, cols, values)

    assert torch.equal(logits(u, z), (u @ z.t()).gather(1, cols))
    assert torch.autograd.gradcheck(logits, (u, z))


def test_selector_hands_out_values_only_in_the_step_that_drew_them():
    h1, h2 = views(seed=2)
    cfg = TrainConfig(encoder="gcn", theta_max=0.5, T_int=3)
    hans = cfg.build_scheduler()
    hans.eta = dict.fromkeys(CATEGORIES, 1.0)
    selector = NegativeSelector(RATIOS, refresh_every=3)
    first = selector.get(pair_similarities(h1, h2, TAU), hans, 1)
    assert all(a.values is not None for a in first)
    kept = selector.get(pair_similarities(h1 * 2, h2, TAU), hans, 2)  # not stale yet: same cols
    assert all(a.values is None for a in kept)
    assert all(torch.equal(a.cols, b.cols) for a, b in zip(first, kept))


@pytest.mark.parametrize("theta_max", [0.3, 1.0])
def test_a_training_step_on_pairs_equals_the_dense_step(theta_max):
    """Same graph, views, model and draws: the two paths give the same loss and gradients."""
    from torch_geometric.utils import erdos_renyi_graph

    torch.manual_seed(0)
    n, f = 60, 12
    x, edges = torch.randn(n, f), erdos_renyi_graph(n, 0.1)
    cfg = TrainConfig(encoder="gcn", theta_max=theta_max, hidden_dim=16, out_dim=8, proj_dim=8)
    results = []
    for logits in ("dense", "pairs"):
        trainer = Trainer(replace(cfg, logits=logits), f, seed=1)
        trainer.scheduler.eta = dict.fromkeys(CATEGORIES, 1.0)
        out = trainer.contrast(*trainer.project(x, edges), step=1)
        out.loss.backward()
        results.append((out.loss.item(), [p.grad.clone() for p in trainer.model.parameters()]))
    (loss_d, grads_d), (loss_p, grads_p) = results
    assert loss_p == pytest.approx(loss_d, rel=1e-5)  # float32: sums in another order
    for a, b in zip(grads_d, grads_p):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-6)


def test_unknown_logits_path_is_a_usage_error():
    with pytest.raises(UsageError, match="--logits must be one of auto, dense, pairs"):
        validate(TrainConfig(encoder="gcn", logits="sparse"))


def test_train_on_the_pairs_path_end_to_end(tmp_path):
    """``edgegcl train --logits pairs`` in mini-batches below saturation: runs and says so."""
    import json

    from edgegcl.cli.main import main

    out = tmp_path / "run"
    assert main(["train", "--nodes", "150", "--features", "16", "--hidden-dim", "16",
                 "--out-dim", "8", "--proj-dim", "8", "--epochs", "4", "--eval-every", "2",
                 "--T-init", "1", "--T-int", "1", "--mode", "minibatch",
                 "--batch-size", "64", "--theta-max", "0.5", "--logits", "pairs",
                 "--out", str(out)]) == 0
    assert 'logits = "pairs"' in (out / "config.toml").read_text()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["mode"] == "minibatch" and metrics["summary"]["epoch_time_s"]["mean"] > 0


# ---- sampled strata on both paths --------------------------------------------------------

from edgegcl.contrast.sampled import draw_sample, schedule_sampled  # noqa: E402
from edgegcl.contrast.pairs import BlockSampledLogits, block_values, choose_logits  # noqa: E402


def sampled(sims, counts, size, seed=0, block=32):
    g = torch.Generator().manual_seed(seed)
    return tuple(schedule_sampled(sims.candidate_values(d), sims.num_anchors, sims.device,
                                  RATIOS, counts, 3, draw_sample(sims.num_anchors, size, g,
                                                                 sims.device, block=block),
                                  keep_values=sims.keeps_values)
                 for d in (0, 1))


@pytest.mark.parametrize("keep_values", [True, False])
def test_sampled_strata_give_the_same_loss_and_gradients_on_both_paths(keep_values):
    h1, h2 = views(b=90, d=6)
    counts = {"hard": 6, "inter": 9, "easy": 3}
    dense, pairs = similarities(h1, h2, TAU), pair_similarities(h1, h2, TAU)
    active_dense, active_pairs = sampled(dense, counts, 40), sampled(pairs, counts, 40)
    for a, b in zip(active_dense, active_pairs):
        assert torch.equal(a.cols, b.cols) and b.values is not None and a.sample is None
    if not keep_values:
        active_pairs = tuple(replace(a, values=None) for a in active_pairs)
    assert_same(scheduled_info_nce(dense, active_dense), scheduled_info_nce(pairs, active_pairs),
                (h1, h2))


@pytest.mark.parametrize("anchors", [7, 6, 2])
@pytest.mark.parametrize("every_column", [False, True])
def test_block_sampled_logits_pass_gradcheck(anchors, every_column):
    """Several blocks, columns repeated across blocks and anchors; the last block short (7),
    every block whole (6), no whole block (2); a position per pair, or every sampled column."""
    g = torch.Generator().manual_seed(3)
    u = torch.randn(anchors, 3, generator=g, dtype=torch.float64, requires_grad=True)
    z = torch.randn(2 * anchors, 3, generator=g, dtype=torch.float64, requires_grad=True)
    sample = draw_sample(anchors, 2 * anchors - 2, g, torch.device("cpu"), block=3)
    width = sample.cols.size(1)
    positions = None if every_column else torch.randint(width, (anchors, 4), generator=g)

    def logits(u, z):
        cols = sample.row_cols(0, anchors)
        if positions is not None:
            cols = cols.gather(1, positions)
        with torch.no_grad():
            values = (u @ z.t()).gather(1, cols)
        return BlockSampledLogits.apply(u, z, sample, positions, values)

    assert torch.autograd.gradcheck(logits, (u, z))


@pytest.mark.parametrize("anchors", [7, 6, 2])
def test_block_values_are_each_anchors_sampled_similarities(anchors):
    """The blockwise products (a partial last block, or none whole) equal u z^T at each
    anchor's sampled columns, within twice the rounding bound of a 3-term dot product
    (3 eps sum |u_k z_k|), as both are computed in some order."""
    g = torch.Generator().manual_seed(4)
    u, z = (torch.randn(n, 3, generator=g, dtype=torch.float64) for n in (anchors, 2 * anchors))
    sample = draw_sample(anchors, 2 * anchors - 2, g, torch.device("cpu"), block=3)
    got = block_values(u, z)(0, anchors, sample)
    want = (u @ z.t()).gather(1, sample.row_cols(0, anchors))
    assert got.shape == want.shape
    bound = 2 * 3 * torch.finfo(torch.float64).eps * (u.abs() @ z.abs().t()).max()
    torch.testing.assert_close(got, want, rtol=0, atol=float(bound))


def test_auto_logits_switch_at_the_measured_crossover():
    assert choose_logits("dense", "sampled", 10, 1000) == "dense"
    assert choose_logits("pairs", "exact", 1000, 1000) == "pairs"
    assert choose_logits("auto", "sampled", 300, 1000) == "pairs"
    assert choose_logits("auto", "sampled", 400, 1000) == "dense"
    assert choose_logits("auto", "exact", 50, 1000) == "pairs"
    assert choose_logits("auto", "exact", 300, 1000) == "dense"


def test_a_plain_run_takes_the_pairs_path_while_few_negatives_are_active(monkeypatch):
    """``--logits auto`` (the default) picks from HANS's state, and moves as eta grows."""
    import edgegcl.contrast.module as train

    taken = []
    real = train.pair_similarities

    def spy(*args):
        taken.append("pairs")
        return real(*args)
    monkeypatch.setattr(train, "pair_similarities", spy)
    h1, h2 = views(b=600, d=8)
    cfg = TrainConfig(encoder="gcn", pick="random", scheduler="hans", theta_max=1.0)
    assert cfg.contrast.logits == "auto" and cfg.contrast.stratify == "auto"  # sampled with random members
    hans = cfg.build_scheduler()  # bootstrap: eta_0 = 0.05
    selector = NegativeSelector(cfg.ratio_map(), 1)
    contrast(h1, h2, cfg.contrast.tau, cfg.contrast.logits, selector, hans, 1)
    assert taken == ["pairs"]
    hans.eta = dict.fromkeys(CATEGORIES, 1.0)  # theta_max = 1 saturated: every negative
    out = contrast(h1, h2, cfg.contrast.tau, cfg.contrast.logits, selector, hans, 2)
    assert taken == ["pairs"] and out.loss.requires_grad


def test_exact_strata_remain_available():
    h1, h2 = views(b=300, d=8)
    cfg = TrainConfig(encoder="gcn", stratify="exact")
    hans = cfg.build_scheduler()
    sims = pair_similarities(h1, h2, TAU)
    active = NegativeSelector(cfg.ratio_map(), 1, "exact").get(sims, hans, 1)
    assert all(a.sample is None for a in active)
    assert all(a.sample is not None for a in NegativeSelector(cfg.ratio_map(), 1).get(
        sims, hans, 1))


def test_stratify_options_are_validated():
    with pytest.raises(UsageError, match="--stratify must be one of auto, sampled, exact"):
        validate(TrainConfig(encoder="gcn", stratify="approx"))
    with pytest.raises(UsageError, match=r"--stratify-sample must be in \[16, 1048576\]"):
        validate(TrainConfig(encoder="gcn", stratify_sample=4))


def test_after_saturation_sampled_strata_take_a_uniform_sample_without_ranking(monkeypatch):
    """Every category at its whole share: the active set is theta_max |N_i| sampled
    candidates, nothing is ranked, and the per-category losses are NaN (HANS reads none)."""
    import math

    import edgegcl.contrast.negatives as negatives
    import edgegcl.contrast.sampled as sampled

    def no_ranking(*args, **kwargs):
        raise AssertionError("ranked")
    monkeypatch.setattr(negatives, "cut_pools", no_ranking)
    monkeypatch.setattr(sampled, "cut_pools", no_ranking)
    h1, h2 = views(b=500, d=8)
    cfg = TrainConfig(encoder="gcn", theta_max=0.2)
    hans = cfg.build_scheduler()
    hans.eta = dict.fromkeys(CATEGORIES, 1.0)
    assert hans.saturated
    selector = NegativeSelector(cfg.ratio_map(), 1)
    counts, size, labels = selector.plan(500, hans)
    assert size == sum(counts.values()) == 197 and not labels  # 59 + 99 + 39 of 998
    out = contrast(h1, h2, cfg.contrast.tau, cfg.contrast.logits, selector, hans, 1)
    assert out.loss.requires_grad and math.isfinite(out.loss.item())
    assert all(math.isnan(v) for v in out.category.values())
    hans.eta["easy"] = 0.5  # not saturated: ranked again, categories read
    with pytest.raises(AssertionError, match="ranked"):
        contrast(h1, h2, cfg.contrast.tau, cfg.contrast.logits, NegativeSelector(cfg.ratio_map(), 1), hans, 1)
