"""Negative schedulers as one family: the registry, what each member declares, and a member
added from outside running through the config, the contrast and the trainer."""

from __future__ import annotations

import math

import pytest
import torch

from edgegcl.contrast import scheduler as family
from edgegcl.contrast.baselines import AllNegatives, RandomSubset
from edgegcl.contrast.constant import ConstantSubset
from edgegcl.contrast.hans import CATEGORIES, HANS, HANSConfig
from edgegcl.contrast.scheduler import ScheduleConfig
from edgegcl.contrast.module import ScheduledContrast
from edgegcl.contrast.reach import pace_line
from edgegcl.errors import UsageError
from edgegcl.training.config import TrainConfig, unused_settings


def test_every_member_is_registered_under_its_name() -> None:
    names = family.scheduler_names()
    assert {"hans", "random", "none", "constant"} <= set(names)
    for name in names:
        cls = family.scheduler_class(name)
        assert cls.name == name and issubclass(cls, family.NegativeScheduler)
    with pytest.raises(ValueError, match="scheduler must be one of"):
        family.scheduler_class("oracle")
    with pytest.raises(UsageError, match="--scheduler must be one of"):
        ScheduleConfig(scheduler="oracle")


@pytest.mark.parametrize("name, cls, ranks, reads", [
    ("hans", HANS, True, True), ("random", RandomSubset, False, False),
    ("none", AllNegatives, False, False), ("constant", ConstantSubset, False, False)])
def test_a_config_builds_its_member(name: str, cls: type, ranks: bool, reads: bool) -> None:
    built = ScheduleConfig(scheduler=name, theta_max=0.3).build(epochs=100)
    assert type(built) is cls
    assert built.ranks_candidates is ranks and built.reads_losses is reads
    contrast = ScheduledContrast.from_config(ScheduleConfig(scheduler=name, theta_max=0.3),
                                        TrainConfig().contrast, epochs=100)
    assert contrast.selector.uniform is (not ranks)


def test_hans_from_config_is_the_runs_scheduler() -> None:
    cfg = ScheduleConfig(scheduler="hans", theta_max=0.6, ratios="easy=10,hard=40,inter=50")
    gate = HANSConfig(e=2, gate="any")
    a, b = HANS.from_config(cfg, 100, gate), cfg.build(100, gate)
    assert a.state_dict() == b.state_dict() and a.T_reach == 40 and (a.e, a.gate) == (2, "any")
    assert TrainConfig(scheduler="hans", e=2).build_scheduler().e == 2


def test_the_baselines_read_no_losses() -> None:
    cfg = ScheduleConfig(scheduler="random", theta_max=0.3, T_init=2, T_int=2)
    a, b = cfg.build(20), cfg.build(20)
    for epoch in range(19):
        a.step({"hard": 9.0, "inter": 0.1 * epoch, "easy": 3.0})
        b.step({"hard": 1.0, "inter": 1.0, "easy": 1.0})
    assert a.state_dict() == b.state_dict() and a.saturated
    none = ScheduleConfig(scheduler="none").build(20)
    assert none.saturated and none.counts(100) == {"hard": 30, "inter": 50, "easy": 20}


def test_constant_uses_theta_max_from_the_first_epoch() -> None:
    s = ScheduleConfig(scheduler="constant", theta_max=0.2).build(100)
    assert s.saturated and math.isclose(s.used(), 0.2)
    assert sum(s.counts(1000).values()) == 200
    assert "T_init" in unused_settings(TrainConfig(encoder="gcn", scheduler="constant"))
    assert "T_int" not in unused_settings(TrainConfig(encoder="gcn",
                                                      scheduler="constant"))  # its swaps


def test_unused_settings_come_from_the_member() -> None:
    from edgegcl.training.config import LearningConfig

    # a run of the views reads every schedule option, and none of the edge objective's
    assert unused_settings(TrainConfig(scheduler="hans", negative_weight="progcl-mix")
                           ) == LearningConfig.EDGES_ONLY
    random = unused_settings(TrainConfig(scheduler="random"))
    assert "gamma" in random and "pick" in random and "theta_max" not in random
    none = unused_settings(TrainConfig(scheduler="none"))
    assert "theta_max" in none and "scheduler" not in none


class _Doubling(RandomSubset):
    """A member defined outside the package: twice the random subset's eta, capped."""

    name = "test-doubling"
    who = "the doubling subset has"

    def step(self, losses):  # type: ignore[no-untyped-def]
        events = super().step(losses)
        self.eta = {c: min(1.0, 2 * self.eta[c]) for c in CATEGORIES}
        return events


@pytest.fixture
def doubling(monkeypatch: pytest.MonkeyPatch) -> type:
    registry = dict(family._REGISTRY)
    monkeypatch.setattr(family, "_REGISTRY", registry)
    return family.register(_Doubling)


def test_a_member_registered_from_outside_trains(doubling: type, tmp_path) -> None:
    from edgegcl.data import SyntheticSpec, synthetic_graph
    from edgegcl.training.engine import Trainer

    cfg = TrainConfig(encoder="gcn", scheduler="test-doubling", theta_max=0.4, epochs=6,
                      T_init=1, T_int=1,
                      hidden_dim=8, out_dim=4, proj_dim=4)
    data = synthetic_graph(SyntheticSpec(num_nodes=60, num_features=6))
    trainer = Trainer(cfg, 6)
    assert type(trainer.scheduler) is _Doubling and trainer.contrast.selector.uniform
    for _ in range(cfg.run.epochs):
        result = trainer.fit_epoch(data.x, data.edge_index)
        assert torch.isfinite(torch.tensor(result.loss))
    assert trainer.scheduler.saturated
    assert (_pace(cfg) or "").startswith("the doubling subset has")


def _members() -> list[str]:
    return list(family.scheduler_names())


@pytest.mark.parametrize("name", _members())
def test_every_member_keeps_the_familys_promises(name: str) -> None:
    """Whatever a member does with eta: its counts stay within theta_max of the candidates,
    eta only grows, theta_max is in use by the run's end, and a state_dict taken mid-run
    continues exactly (checked for every registered member, a new one included)."""
    import doctest
    import random

    cls = family.scheduler_class(name)
    assert not issubclass(cls, HANS) or cls is HANS  # the baselines are not HANS in disguise
    cfg = ScheduleConfig(scheduler=name, theta_max=0.3, T_init=2, T_int=2)
    rng = random.Random(0)
    losses = [{c: rng.uniform(0.5, 2.0) for c in CATEGORIES} for _ in range(40)]
    s = cfg.build(40, HANSConfig(e=1))
    before = dict(s.eta)
    for epoch, loss in enumerate(losses):
        s.step(loss)
        assert all(s.eta[c] >= before[c] for c in CATEGORIES) and 0 <= s.budget_share() <= 1
        # floor(eta theta_cat N) per category: their sum never exceeds theta_max N (float
        # rounding of the caps is ~1e-16 relative, far below the 1e-6 allowed)
        assert sum(s.counts(1000).values()) <= math.floor(1000 * s.theta_max + 1e-6), name
        before = dict(s.eta)
        if epoch == 12:
            copy = cfg.build(40, HANSConfig(e=1))
            copy.load_state_dict(s.state_dict())
    for loss in losses[13:]:
        copy.step(loss)
    assert copy.state_dict() == s.state_dict()
    assert s.saturated and math.isclose(s.used(), 0.3 if name != "none" else 1.0)
    finder, runner = doctest.DocTestFinder(recurse=False), doctest.DocTestRunner()
    for test in finder.find(cls, name, globs=dict(vars(__import__(cls.__module__,
                                                                  fromlist=["_"])))):
        assert runner.run(test).failed == 0, f"{name}'s example"


def test_a_state_of_the_first_layout_loads_into_the_baseline() -> None:
    """Seed files written when the random subset was a HANS carry HANS's fields (loss history,
    gate): they are left aside, the rest continues."""
    cfg = ScheduleConfig(scheduler="random", theta_max=0.3, T_init=2, T_int=2)
    s = cfg.build(40)
    for _ in range(5):
        s.step(dict.fromkeys(CATEGORIES, 1.0))
    old = {**s.state_dict(), "history": {c: [1.0] * 5 for c in CATEGORIES}, "e": 5,
           "gamma": 0.99, "gate": "total", "category_loss": "mean"}
    again = cfg.build(40)
    again.load_state_dict(old)
    assert again.state_dict() == s.state_dict() and not hasattr(again, "history")


def test_the_linear_ramp_reads_no_pace() -> None:
    """--pace is among the settings linear leaves unread, so a file's pace changes nothing."""
    runs = []
    for pace in ("deadline", "fixed"):
        s = ScheduleConfig(scheduler="linear", theta_max=0.2, T_init=2, pace=pace).build(20)
        for _ in range(20):
            s.step({})
        runs.append(s.state_dict())
    assert runs[0] == runs[1] and runs[0]["saturated_at"] == 8  # ceil(0.4 x 20)


def _pace(cfg):  # the start line of a run of ``cfg``, as the job asks for it
    return pace_line(cfg.schedule, cfg.hans, cfg.run.epochs, bool(cfg.run.time_budget))
