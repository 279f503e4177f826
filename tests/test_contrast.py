"""ScheduledContrast (edgegcl.contrast.module): the contrast module for any encoder."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from edgegcl.contrast.module import ScheduledContrast
from edgegcl.contrast.hans import HANS
from edgegcl.contrast.negatives import CATEGORIES
from edgegcl.contrast.dense import similarities
from edgegcl.contrast.loss import scheduled_info_nce
from edgegcl.contrast.selection import NegativeSelector


def _hans() -> HANS:
    return HANS(0.5, {"hard": 0.2, "inter": 0.25, "easy": 0.05}, T_init=1, T_int=1, e=1, b=1.0)


def test_same_loss_and_gradient_as_its_parts_composed() -> None:
    """The module is the similarities, the selector's negatives and the scheduled InfoNCE
    (Eq. 6), with the strata's ratios read from HANS's caps."""
    torch.manual_seed(0)
    h1, h2 = torch.randn(40, 8, requires_grad=True), torch.randn(40, 8)
    module = ScheduledContrast(_hans(), tau=0.5, seed=3, logits="dense")
    ref_selector = NegativeSelector({"hard": 0.4, "inter": 0.5, "easy": 0.1}, 1, seed=3)
    ours = module(h1, h2)
    (g_ours,) = torch.autograd.grad(ours.loss, h1)
    sims, hans = similarities(h1, h2, 0.5), _hans()
    ref = scheduled_info_nce(sims, ref_selector.get(sims, hans, 1), hans.category_loss)
    (g_ref,) = torch.autograd.grad(ref.loss, h1)
    assert ours.loss.item() == pytest.approx(ref.loss.item(), rel=1e-6)
    assert torch.allclose(g_ours, g_ref, atol=1e-6)
    assert module.selector.ratios == pytest.approx(ref_selector.ratios)


def test_step_feeds_hans_the_anchor_weighted_epoch_means() -> None:
    torch.manual_seed(1)
    module = ScheduledContrast(_hans())
    a = module(torch.randn(30, 8), torch.randn(30, 8))
    b = module(torch.randn(10, 8), torch.randn(10, 8))
    module.step()
    for c in CATEGORIES:
        expected = (30 * a.category[c] + 10 * b.category[c]) / 40
        assert module.scheduler.history[c] == [pytest.approx(expected)]
    with pytest.raises(RuntimeError, match="before any forward"):
        module.step()  # the sums were reset


def test_hans_grows_the_set_over_epochs() -> None:
    torch.manual_seed(2)
    module = ScheduledContrast(_hans())
    for _ in range(4):
        module(torch.randn(50, 8), torch.randn(50, 8))
        module.step()
    assert module.scheduler.used() > 0.05 * 0.5


def test_state_dict_round_trip() -> None:
    torch.manual_seed(3)
    module = ScheduledContrast(_hans())
    module(torch.randn(20, 8), torch.randn(20, 8))
    module.step()
    state = copy.deepcopy(module.state_dict())
    h1, h2 = torch.randn(20, 8), torch.randn(20, 8)
    expected = module(h1, h2).loss.item()
    other = ScheduledContrast(_hans(), seed=7)
    other.load_state_dict(state)
    assert other(h1, h2).loss.item() == pytest.approx(expected)
    assert other.scheduler.eta == module.scheduler.eta


@pytest.mark.parametrize("kwargs", [{"tau": 0.0}, {"refresh_every": 0}, {"stratify": "x"},
                                    {"logits": "sparse"}])
def test_bad_arguments_are_value_errors(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        ScheduledContrast(**kwargs)


def test_mismatched_views_are_a_value_error() -> None:
    with pytest.raises(ValueError, match="equal shape"):
        ScheduledContrast()(torch.randn(4, 8), torch.randn(5, 8))


def test_the_random_subset_baseline_draws_uniformly_as_many_as_hans_would() -> None:
    """``--scheduler random``: HANS's counts at its pace, each anchor's active set a uniform
    random subset of its candidates (no strata), its gate fed equal losses."""
    from edgegcl.training.config import TrainConfig
    from helpers import contrast as engine_contrast, selector_of

    from edgegcl.contrast.hans import EQUAL_LOSSES

    cfg = TrainConfig(encoder="gcn", scheduler="random", theta_max=0.3, T_init=2, T_int=2, e=1,
                      epochs=20)
    hans, selector = cfg.build_scheduler(), selector_of(cfg)
    assert selector.uniform and selector.stratify == "sampled"
    b = 400
    h1, h2 = torch.randn(b, 8), torch.randn(b, 8)
    from edgegcl.contrast.dense import similarities

    cand = similarities(h1, h2, cfg.contrast.tau).candidates(0)
    rows = torch.arange(b)
    cand[rows, rows] = cand[rows, rows + b] = -torch.inf
    top = torch.zeros_like(cand, dtype=torch.bool).scatter_(
        1, cand.topk(int(0.3 * (2 * b - 2)), 1).indices, True)  # each anchor's hardest 30 %
    shares = []
    for step in range(1, 9):
        hans.eta = dict.fromkeys(("hard", "inter", "easy"), 1.0)
        out = engine_contrast(h1, h2, cfg.contrast.tau, cfg.contrast.logits, selector, hans, step)
        assert torch.isfinite(out.loss)
        cols = selector._active[0].columns()
        assert cols.size(1) == sum(hans.counts(2 * b - 2).values())
        own = torch.stack([rows, rows + b], 1)
        assert not (cols.unsqueeze(2) == own.unsqueeze(1)).any()
        shares.append(float(top.gather(1, cols).float().mean()))
        # the kept active sets forgotten (the sample stream kept): the next step draws afresh
        selector.load_state_dict({**selector.state_dict(), "key": None, "active": None})
        hans.draw += 1
    # uniform over the candidates: as many in the hardest 30 % as anywhere (HANS's hardest
    # picks would put every hard and inter negative there)
    assert abs(sum(shares) / len(shares) - 0.3) < 0.02, shares
    trainer_losses = cfg.build_scheduler()
    for _ in range(19):
        trainer_losses.step(EQUAL_LOSSES)
    assert trainer_losses.saturated  # the pace alone brings it to theta_max


def test_the_random_baseline_grows_without_the_losses() -> None:
    from edgegcl.training.config import TrainConfig
    from edgegcl.data import SyntheticSpec, synthetic_graph
    from edgegcl.training.engine import Trainer

    data = synthetic_graph(SyntheticSpec(num_nodes=120, num_features=8))
    cfg = TrainConfig(encoder="gcn", scheduler="random", theta_max=0.4, hidden_dim=16, out_dim=8,
                      proj_dim=8,
                      T_init=2, T_int=2, e=1, epochs=12)
    trainer = Trainer(cfg, 8)
    for _ in range(12):
        result = trainer.fit_epoch(data.x, data.edge_index)
        assert all(math.isnan(v) for v in result.category.values())  # nothing labelled
    assert trainer.scheduler.saturated and not trainer.scheduler.reads_losses
    assert not hasattr(trainer.scheduler, "history")  # it keeps no losses it never reads
