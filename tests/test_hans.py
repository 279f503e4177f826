"""HANS against hand-computed values of the paper's equations (Algorithm 1, Eqs. 7-10)."""

from __future__ import annotations

import json
import math
import random

import pytest

from edgegcl.contrast.hans import CATEGORIES, HANS
from edgegcl.contrast.negatives import pool_sizes, stratify
from helpers import select_active
import torch

FLAT = {"hard": 2.0, "inter": 1.0, "easy": 1.0}  # never improves: the gate always opens
PAPER = dict(T_init=60, T_int=20, e=10, gate="any", category_loss="sum")
"""Algorithm 1's settings (the paper presets'); HANS() starts from the flags' defaults."""


def fast(**kw) -> HANS:
    """A scheduler that decides every epoch from now on: no bootstrap, interval 1, window 1.

    One epoch is already recorded, since the gate compares two windows of e epochs.
    """
    base = dict(T_init=0, T_int=1, e=1, gate="any")
    base.update(kw)
    theta = base.pop("theta_max", 1.0)
    h = HANS(theta, **base)
    h.step(FLAT)
    assert "gate skipped" in h.events[-1].reason and h.eta == {c: 0.05 for c in CATEGORIES}
    return h


def test_bootstrap_holds_eta_0_for_T_init_epochs():
    h = HANS(0.6, **PAPER)
    for _ in range(60):
        assert h.step(FLAT) == []
    assert h.eta == {c: 0.05 for c in CATEGORIES}
    for _ in range(20):
        h.step(FLAT)
    assert h.eta["hard"] > 0.05  # epoch 80: first update, hard first


def test_u1_loss_proportional_step_is_hand_computed():
    h = HANS(1.0, **PAPER)  # b = 0.05
    for _ in range(80):
        h.step(FLAT)
    # w_hard = 2 / (2 + 1 + 1) = 0.5 -> u1 = 0.025 < c_hard 0.05 < u3 0.95 < u4 (1-0.05)/0.3
    assert h.eta["hard"] == pytest.approx(0.05 + 0.025)
    assert "u1" in h.events[-1].reason and h.events[-1].epoch == 80
    assert h.eta["inter"] == h.eta["easy"] == 0.05


def test_u2_per_step_cap_binds():
    h = fast(c_cat={"hard": 0.01, "inter": 0.05, "easy": 0.025})
    h.step(FLAT)
    assert h.eta["hard"] == pytest.approx(0.06)
    assert "u2" in h.events[-1].reason


def test_u3_category_budget_left_binds():
    h = fast(b=1.0, c_cat={c: 1.0 for c in CATEGORIES})
    h.eta["hard"] = 0.99
    h.step(FLAT)
    assert h.eta["hard"] == pytest.approx(1.0)
    assert "u3" in h.events[-1].reason


def test_u4_global_budget_left_binds_when_caps_overcommit_theta_max():
    h = fast(theta_max=0.5, theta_cat={c: 0.5 for c in CATEGORIES}, b=1.0,
             c_cat={c: 1.0 for c in CATEGORIES})
    h.eta.update(hard=0.05, inter=0.7, easy=0.1)  # used = 0.025 + 0.35 + 0.05 = 0.425
    h.step(FLAT)
    # u1 = 0.5, u2 = 1, u3 = 0.95, u4 = (0.5 - 0.425) / 0.5 = 0.15
    assert h.eta["hard"] == pytest.approx(0.2)
    assert "u4" in [e.reason for e in h.events if e.category == "hard"][-1]
    assert h.saturated and h.used() == pytest.approx(0.5)


def test_python_and_the_flag_start_from_the_same_defaults():
    """HANS() and the random subset from Python are what --scheduler hans / random builds for
    the same run length, every setting; ScheduledContrast's are the [contrast] section's."""
    from edgegcl.contrast.baselines import RandomSubset
    from edgegcl.contrast.config import ContrastConfig
    from edgegcl.contrast.hans import HANSConfig
    from edgegcl.contrast.module import ScheduledContrast
    from edgegcl.contrast.scheduler import ScheduleConfig

    keys = ("theta_max", "theta_cat", "T_init", "T_int", "b", "c_cat", "eta_0", "floor",
            "swap_every", "T_reach", "e", "gamma", "gate", "category_loss")
    for name, made in (("hans", HANS(epochs=300)), ("random", RandomSubset(epochs=300))):
        built = ScheduleConfig(scheduler=name).build(300, HANSConfig())
        assert {k: getattr(made, k, None) for k in keys} == {k: getattr(built, k, None)
                                                             for k in keys}, name
    assert HANS().T_reach is None  # without the run's length: the fixed pace
    contrast, config = ScheduledContrast(), ContrastConfig()
    assert (contrast.tau, contrast.logits, contrast.selector.candidates,
            contrast.negative_weight, contrast.mix_negatives) == (
        config.tau, config.logits, config.candidates, config.negative_weight,
        config.mix_negatives)


def test_nominal_weights_when_a_category_loss_is_not_positive():
    assert HANS.loss_weights({"hard": 1.0, "inter": 0.0, "easy": 1.0}) == pytest.approx(
        {"hard": 0.4, "inter": 0.4, "easy": 0.2})
    h = fast()
    h.step({"hard": 3.0, "inter": -1.0, "easy": 1.0})
    assert h.eta["hard"] == pytest.approx(0.05 + 0.05 * 0.4)


def _gate_run(curr_factor_by_cat: dict[str, float]) -> HANS:
    h = HANS(1.0, T_init=0, T_int=20, e=10, gate="any")
    for t in range(1, 21):
        h.step({c: 1.0 if t <= 10 else curr_factor_by_cat[c] for c in CATEGORIES})
    return h


def test_gate_fires_only_when_the_loss_did_not_improve_by_one_percent():
    improved = _gate_run({c: 0.98 for c in CATEGORIES})  # 2 % better everywhere
    assert improved.eta == {c: 0.05 for c in CATEGORIES}
    assert "gate closed" in improved.events[-1].reason
    barely = _gate_run({"hard": 0.98, "inter": 0.995, "easy": 0.98})  # inter only 0.5 %
    assert barely.eta["hard"] > 0.05
    assert "inter" in barely.events[-1].reason
    exactly = _gate_run({c: 0.99 for c in CATEGORIES})  # L_t = gamma L_{t-e}: fires (>=)
    assert exactly.eta["hard"] > 0.05


@pytest.mark.parametrize("theta_max,caps", [
    (1.0, None), (0.3, None), (0.5, {c: 0.5 for c in CATEGORIES}),
    (0.8, {"hard": 0.1, "inter": 0.6, "easy": 0.4}),
])
def test_no_cap_and_no_global_budget_is_ever_exceeded(theta_max, caps):
    rng = random.Random(0)
    h = fast(theta_max=theta_max, theta_cat=caps, b=0.3, c_cat={c: 0.2 for c in CATEGORIES})
    for _ in range(400):
        h.step({c: rng.uniform(-0.5, 3.0) for c in CATEGORIES})
        assert all(0.0 <= h.eta[c] <= 1.0 for c in CATEGORIES)
        assert h.used() <= theta_max + 1e-9
    assert h.saturated


def test_hard_reaches_its_cap_before_easy_with_default_ratios_even_if_easy_loss_dominates():
    rng = random.Random(1)
    h = fast()
    first_full = {}
    for t in range(1, 3000):
        h.step({"hard": rng.uniform(0.1, 1), "inter": rng.uniform(0.1, 1), "easy": rng.uniform(5, 9)})
        for c in CATEGORIES:
            if h.eta[c] >= 1.0 - 1e-12 and c not in first_full:
                first_full[c] = t
        if h.saturated:
            break
    assert first_full["hard"] < first_full["easy"]


def test_round_robin_order_hard_inter_easy():
    h = fast()
    for _ in range(3):
        h.step(FLAT)
    moved = [e.category for e in h.events if e.delta_eta > 0 and e.reason != "bootstrap"]
    assert moved == ["hard", "inter", "easy"]


def test_counts_are_floor_eta_theta_cat_candidates():
    h = HANS(0.6)  # theta_cat = 0.18 / 0.30 / 0.12
    c = 2 * 2708 - 2
    assert h.counts(c) == {"hard": math.floor(0.05 * 0.18 * c), "inter": math.floor(0.05 * 0.3 * c),
                           "easy": math.floor(0.05 * 0.12 * c)}
    h.eta.update(hard=0.5, inter=1.0, easy=0.25)
    assert h.counts(c) == {"hard": 487, "inter": 1624, "easy": 162}
    sims = torch.randn(2708, 2 * 2708)
    active = select_active(stratify(sims, {"hard": .3, "inter": .5, "easy": .2}), h.counts(c), 0)
    assert active.sizes == (487, 1624, 162)


def test_swapping_after_saturation_keeps_counts_and_changes_members():
    h = fast(theta_max=0.5, swap_every=3)
    while not h.saturated:
        h.step(FLAT)
    counts, draw, t0 = h.counts(198), h.draw, h.epoch
    for _ in range(3):
        h.step(FLAT)
    assert h.draw == draw + 1 and h.counts(198) == counts and h.epoch == t0 + 3
    assert "swap" in h.events[-1].reason
    strata = stratify(torch.randn(100, 200), {"hard": .3, "inter": .5, "easy": .2})
    before = select_active(strata, counts, draw).segments()
    after = select_active(strata, counts, h.draw).segments()
    for c in CATEGORIES:
        assert before[c].shape == after[c].shape
        assert not torch.equal(before[c].sort(1).values, after[c].sort(1).values)


def test_state_dict_round_trips_and_resumes_identically():
    rng = random.Random(2)
    a = fast(theta_max=0.7, swap_every=2)
    for _ in range(30):
        a.step({c: rng.uniform(0.5, 2) for c in CATEGORIES})
    state = json.loads(json.dumps(a.state_dict()))  # plain data, JSON-serialisable
    b = HANS(1.0)
    b.load_state_dict(state)
    for _ in range(60):
        losses = {c: rng.uniform(0.5, 2) for c in CATEGORIES}
        a.step(losses), b.step(losses)
        assert a.eta == b.eta and a.draw == b.draw
    assert a.events == b.events and b.theta_max == 0.7


def test_invalid_budgets_are_rejected():
    with pytest.raises(ValueError):
        HANS(-0.1)
    with pytest.raises(ValueError):
        HANS(1.5)
    with pytest.raises(ValueError, match="category_loss"):
        HANS(0.5, category_loss="max")
    with pytest.raises(ValueError):
        HANS(0.9, {"hard": 0.1, "inter": 0.1, "easy": 0.1})
    assert sum(pool_sizes(10, {"hard": .3, "inter": .5, "easy": .2}).values()) == 10


# ---- the deadline pace (T_reach), theta_max = 0 ---------------------------------------------

def _share_by_epoch(h: HANS, losses, epochs: int) -> list[float]:
    """sum eta theta_cat / theta_max in effect at each epoch 1..epochs (HANS steps at an
    epoch's end, so epoch t trains with the state after t - 1 steps)."""
    shares = []
    for t in range(epochs):
        shares.append(h.budget_share())
        h.step(losses(t))
    return shares


@pytest.mark.parametrize("losses", [
    lambda t: FLAT,  # every gate opens
    lambda t: dict.fromkeys(CATEGORIES, 10.0 * 0.9 ** t),  # always improving: gates close
    lambda t: {"hard": 5.0, "inter": 0.1, "easy": 0.01},  # one category holds the loss
])
def test_the_deadline_pace_has_theta_max_in_use_by_T_reach(losses) -> None:
    h = HANS(0.5, T_init=20, T_int=10, e=5, T_reach=120)
    shares = _share_by_epoch(h, losses, 300)
    assert h.saturated_at == 120 and all(eta == pytest.approx(1.0) for eta in h.eta.values())
    assert shares[120] == pytest.approx(1.0) and shares[119] < 1.0  # epoch 121 on
    assert sum(s >= 0.9 for s in shares) >= 150  # the bar: half the epochs at 90 %


def test_deadline_steps_spread_the_budget_over_the_decisions_left() -> None:
    h = HANS(1.0, T_init=20, T_int=10, e=5, T_reach=120)
    _share_by_epoch(h, lambda t: FLAT, 31)  # one decision, at epoch 30
    grown = [ev for ev in h.events if ev.epoch == 30 and ev.delta_eta > 0]
    assert [ev.category for ev in grown] == ["hard"]
    # decisions 30..120: 10, the last fills everything; hard's even share of 9 + 3 turns
    even = 0.95 * 3 / (10 - 1 + 3)
    w = FLAT["hard"] / sum(FLAT.values())  # 0.5 against a mean share of 1/3: 1.5 x even
    assert grown[0].delta_eta == pytest.approx(even * w * 3)
    assert "u1" in grown[0].reason


def test_a_closed_gate_only_delays_the_deadline_pace() -> None:
    improving = lambda t: dict.fromkeys(CATEGORIES, 10.0 * 0.9 ** t)  # noqa: E731
    h = HANS(0.6, T_init=20, T_int=10, e=5, T_reach=100)
    _share_by_epoch(h, improving, 101)
    assert any("gate closed" in ev.reason for ev in h.events)
    assert not any(ev.delta_eta > 0 for ev in h.events if 0 < ev.epoch < 100)
    assert all("deadline" in ev.reason for ev in h.events if ev.epoch == 100 and ev.delta_eta)
    assert h.saturated_at == 100


def test_a_deadline_before_the_bootstrap_ends_saturates_at_the_first_decision() -> None:
    h = HANS(0.3, T_init=60, T_int=20, e=10, T_reach=40)
    _share_by_epoch(h, lambda t: FLAT, 100)
    assert h.saturated_at == 80


def test_the_fixed_pace_is_the_paper_step_unchanged() -> None:
    a, b = HANS(0.6), HANS(0.6, T_reach=None)
    for _ in range(300):
        a.step(FLAT), b.step(FLAT)
    assert a.eta == b.eta and not a.saturated


def test_theta_max_zero_holds_the_bootstrap_share_and_never_moves() -> None:
    h = HANS(0.0, T_init=2, T_int=2, e=1, T_reach=10)
    for t in range(40):
        assert h.step(FLAT) == []
    assert h.eta == dict.fromkeys(CATEGORIES, 0.05) and h.saturated and h.draw == 0
    assert h.theta_cat == pytest.approx({"hard": 0.3, "inter": 0.5, "easy": 0.2})
    assert h.counts(1000) == {"hard": 15, "inter": 25, "easy": 10}  # 5 % of the candidates
    assert h.budget_share() == 1.0 and "theta_max = 0" in h.events[-1].reason


def test_the_deadline_survives_a_state_dict_round_trip() -> None:
    rng = random.Random(3)
    a = HANS(0.5, T_init=4, T_int=2, e=1, T_reach=30, category_loss="mean")
    for _ in range(11):
        a.step({c: rng.uniform(0.5, 2) for c in CATEGORIES})
    b = HANS(0.5)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.T_reach == 30 and b.category_loss == "mean"
    for _ in range(30):
        losses = {c: rng.uniform(0.5, 2) for c in CATEGORIES}
        a.step(losses), b.step(losses)
    assert a.events == b.events and a.saturated_at == b.saturated_at == 30
