"""The all-negatives baseline (``--scheduler none``) and the schedule's pace line."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from edgegcl.training.config import TrainConfig
from edgegcl.contrast.negatives import CATEGORIES
from edgegcl.contrast.reach import pace_line
from helpers import contrast, selector_of


def _grace_loss(h1: torch.Tensor, h2: torch.Tensor, tau: float) -> torch.Tensor:
    """GRACE's symmetric InfoNCE: every other node of both views a negative (2B - 2)."""
    def one(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = F.normalize(a), F.normalize(b)
        between, within = torch.exp(a @ b.t() / tau), torch.exp(a @ a.t() / tau)
        denominator = between.sum(1) + within.sum(1) - within.diag()
        return -torch.log(between.diag() / denominator)
    return 0.5 * (one(h1, h2) + one(h2, h1)).mean()


def test_no_scheduler_starts_saturated_with_every_candidate_and_stays() -> None:
    cfg = TrainConfig(scheduler="none", theta_max=0.3, T_init=2, T_int=2, e=1)
    hans = cfg.build_scheduler()
    assert hans.theta_max == 1.0 and hans.saturated
    assert sum(hans.fractions().values()) == pytest.approx(1.0)
    assert all(v == 1.0 for v in hans.eta.values())
    before = dict(hans.eta)
    for epoch in range(40):
        hans.step(dict.fromkeys(CATEGORIES, 1.0 + epoch))  # loss rising: a gate would open
    assert hans.eta == before and all(v == 1.0 for v in before.values())
    assert [ev.reason for ev in hans.events] == ["bootstrap"] * 3


@pytest.mark.parametrize("logits", ["auto", "dense", "pairs"])
@pytest.mark.parametrize("stratify", ["sampled", "exact"])
def test_no_scheduler_contrasts_every_candidate_from_the_first_step(logits: str,
                                                                    stratify: str) -> None:
    torch.manual_seed(0)
    h1, h2 = torch.randn(50, 8), torch.randn(50, 8)
    cfg = TrainConfig(scheduler="none", logits=logits, stratify=stratify, tau=0.5)
    out = contrast(h1, h2, cfg.contrast.tau, cfg.contrast.logits, selector_of(cfg), cfg.build_scheduler(), step=1)
    assert out.loss.item() == pytest.approx(_grace_loss(h1, h2, 0.5).item(), rel=1e-5)


def test_hans_at_its_bootstrap_uses_a_few_negatives_not_all() -> None:
    torch.manual_seed(0)
    h1, h2 = torch.randn(50, 8), torch.randn(50, 8)
    cfg = TrainConfig(tau=0.5)
    out = contrast(h1, h2, cfg.contrast.tau, cfg.contrast.logits, selector_of(cfg), cfg.build_scheduler(), step=1)
    assert out.loss.item() != pytest.approx(_grace_loss(h1, h2, 0.5).item(), rel=1e-3)


def test_pace_line_says_what_share_of_theta_max_a_run_can_reach() -> None:
    def shares(line: str) -> tuple[float, float]:
        return (float(line.split("about ")[1].split(" %")[0]),
                float(line.split("at most ")[1].split(" %")[0]))

    paper = dict(pace="fixed", T_init=60, T_int=20, e=10, theta_max=1.0)
    line = _pace(TrainConfig(epochs=300, **paper))
    assert line is not None and "theta_max = 1" in line
    typical, most = shares(line)
    assert 0 < typical <= most < 100
    longer = _pace(TrainConfig(epochs=900, **paper))
    assert longer is not None and shares(longer)[0] > typical
    reached = _pace(TrainConfig(epochs=2000, b=1.0, **paper))
    assert reached is not None and "in use from epoch" in reached
    assert _pace(TrainConfig(epochs=10, scheduler="none")) is None


def test_pace_line_of_the_deadline_pace_names_the_epoch_and_the_share() -> None:
    line = _pace(TrainConfig(epochs=300, reach=0.4, T_init=20, T_int=10))
    assert line is not None
    assert "in use from epoch 121 of 300 (60 % of the epochs" in line, line
    assert "--reach 0.4" in line
    zero = _pace(TrainConfig(theta_max=0.0))
    assert zero is not None and "bootstrap share" in zero


def test_pace_line_of_a_run_too_short_to_decide_says_so() -> None:
    line = _pace(TrainConfig(epochs=25))  # first decision at 30
    assert line is not None and "never decides" in line and "--T-init" in line


def _pace(cfg):  # the start line of a run of ``cfg``, as the job asks for it
    return pace_line(cfg.schedule, cfg.hans, cfg.run.epochs, bool(cfg.run.time_budget))
