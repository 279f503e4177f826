"""Inter-view-only candidates (``--candidates inter``, Eq. 6 as printed) against both views'.

With ``inter`` each anchor's candidates are the B - 1 other anchors of the other view: no
active or sampled column is ever an intra-view one (columns >= B), the loss with every
candidate active is a plain inter-view InfoNCE, and every path (exact and sampled strata,
dense and pairs logits, the all-candidates fast path, ``--scheduler none``, mini-batches)
takes it. ``both`` is unchanged: the other test modules pin it.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F
from helpers import views
from test_loss import loop_loss, one_direction_loop  # columns below B are inter-view in both layouts

from edgegcl.cli.main import main
from edgegcl.training.config import TrainConfig, load_toml, to_toml, validate
from edgegcl.contrast.hans import CATEGORIES, HANS
from edgegcl.contrast.dense import similarities
from edgegcl.contrast.loss import scheduled_info_nce
from edgegcl.contrast.module import ScheduledContrast
from edgegcl.contrast.negatives import (
    num_candidates,
    pool_sizes,
    schedule_negatives,
    stratify,
)
from edgegcl.contrast.negatives import CandidateSample
from edgegcl.contrast.sampled import (
    _sample_exclusions,
    draw_sample,
    schedule_sampled,
)
from bench.purity import stratum_purity
from helpers import select_active
from edgegcl.contrast.pairs import pair_similarities
from edgegcl.contrast.selection import NegativeSelector
from edgegcl.errors import UsageError
from helpers import contrast, selector_of

RATIOS = {"hard": 0.3, "inter": 0.5, "easy": 0.2}
TAU = 0.5
CPU = torch.device("cpu")


def inter_view_loss(h1: torch.Tensor, h2: torch.Tensor, tau: float) -> torch.Tensor:
    """Symmetric InfoNCE with the other view's anchors as the only negatives, the plain dense
    way (positive kept in the denominator, as edgegcl does): a test-only reference."""
    def one(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        between = torch.exp(F.normalize(a) @ F.normalize(b).t() / tau)
        return -torch.log(between.diag() / between.sum(1))
    return 0.5 * (one(h1, h2).mean() + one(h2, h1).mean())


def assert_inter_only(cols: torch.Tensor, b: int) -> None:
    """Every column an other-view anchor (< B), never the positive, none twice in a row."""
    assert cols.numel() == 0 or int(cols.max()) < b
    assert not (cols == torch.arange(b).unsqueeze(1)).any()
    if cols.size(1) > 1:
        assert (cols.sort(1).values.diff(dim=1) > 0).all()


# ---- the layout --------------------------------------------------------------------------

def test_inter_candidates_are_the_other_views_b_minus_1():
    assert num_candidates(10) == 18 and num_candidates(10, "both") == 18
    assert num_candidates(10, "inter") == 9
    with pytest.raises(ValueError, match="candidates"):
        num_candidates(10, "intra")
    h1, h2 = views(b=12)
    sims = similarities(h1, h2, TAU, "inter")
    assert not sims.intra and sims.s11 is None and sims.s22 is None
    assert torch.equal(sims.candidates(0), sims.s12)
    assert torch.equal(sims.candidates(1), sims.s12.t())
    assert similarities(h1, h2, TAU).intra
    pairs = pair_similarities(h1, h2, TAU, "inter")
    assert not pairs.intra and pair_similarities(h1, h2, TAU).intra
    for d in (0, 1):
        rows = pairs.candidate_rows(d)(0, 12)
        assert torch.allclose(rows, sims.candidate_rows(d)(0, 12), atol=1e-12)


def test_exact_strata_cover_the_other_views_anchors_but_the_positive():
    b = 37
    sims = torch.randn(b, b, generator=torch.Generator().manual_seed(0))
    strata = stratify(sims, RATIOS, candidates="inter")
    assert strata.num_cand == b - 1
    for pool, (cat, size) in zip(strata.pools, pool_sizes(b - 1, RATIOS).items()):
        assert pool.shape == (b, size), cat
    every = torch.cat(strata.pools, dim=1).sort(1).values
    rows = torch.arange(b).unsqueeze(1)
    expected = torch.arange(b - 1).unsqueeze(0) + (torch.arange(b - 1).unsqueeze(0) >= rows).long()
    assert torch.equal(every, expected)  # the pools partition {0..B-1} \ {i}
    masked = sims.clone()
    masked[rows.squeeze(1), rows.squeeze(1)] = -torch.inf
    hardest = masked.topk(strata.pools[0].size(1), dim=1).indices.sort(1).values
    assert torch.equal(strata.pools[0].sort(1).values, hardest)


def test_blocked_exact_schedule_equals_the_whole_one_and_stays_inter_view():
    from edgegcl.contrast import negatives

    b = 90
    sims = torch.randn(b, b, generator=torch.Generator().manual_seed(1))
    counts = {"hard": 5, "inter": 9, "easy": 2}
    old = negatives.STRATIFY_BLOCK_ELEMENTS
    negatives.STRATIFY_BLOCK_ELEMENTS = {"cpu": 7 * b, "cuda": 7 * b}  # blocks of 7 anchors
    try:
        for draw in (0, 3):
            whole = select_active(stratify(sims, RATIOS, candidates="inter"), counts, draw)
            blocked = schedule_negatives(lambda s, e: sims[s:e], b, CPU, RATIOS, counts, draw,
                                         keep_values=True, candidates="inter")
            assert blocked.num_cand == b - 1 and blocked.sizes == (5, 9, 2)
            assert torch.equal(blocked.cols, whole.cols)
            assert torch.equal(blocked.values, sims.gather(1, whole.cols))
            assert_inter_only(blocked.cols, b)
    finally:
        negatives.STRATIFY_BLOCK_ELEMENTS = old


def test_sample_exclusions_leave_out_the_positive_alone():
    b = 10
    sample = CandidateSample(torch.tensor([[3, 7, 0, 5, 9], [2, 9, 4, 0, 1]]), 5, 4)
    assert sample.own == 1
    out = _sample_exclusions(sample, 0, b, b)
    assert out.shape == (b, 1)
    assert out[3].tolist() == [0]  # anchor 3's positive at position 0
    assert out[0].tolist() == [2]
    assert out[1].tolist() == [4]  # 1 is not in the first block's sample: the last position
    assert out[9].tolist() == [1]  # the second block: positive 9 at position 1
    assert out[8].tolist() == [4]  # 8 in neither: the last position


@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("size", [20, 40, 89])
def test_sampled_strata_sample_and_draw_inter_view_columns_only(size, grouped):
    b = 90
    sims = torch.randn(b, b, generator=torch.Generator().manual_seed(2))
    sample = draw_sample(b, size, torch.Generator().manual_seed(size), CPU, block=32,
                         candidates="inter")
    assert sample.own == 1 and sample.cols.shape == (3, size + 1)
    assert int(sample.cols.max()) < b
    whole = pool_sizes(size, RATIOS)
    for counts in ({"hard": 2, "inter": 3, "easy": 1}, whole):
        active = schedule_sampled(
            lambda s, e, smp: sims[s:e].gather(1, smp.row_cols(s, e)), b, CPU, RATIOS,
            counts, 0, sample, keep_values=True, grouped=grouped or counts != whole)
        assert active.num_cand == b - 1
        assert active.cols.shape == (b, sum(counts.values()))
        assert_inter_only(active.cols, b)
        assert torch.equal(active.values, sims.gather(1, active.cols))
        assert torch.equal(sample.row_cols(0, b).gather(1, active.positions), active.cols)
    if size == b - 1:  # every candidate sampled: the exact strata
        exact = schedule_sampled(lambda s, e, smp: sims[s:e].gather(1, smp.row_cols(s, e)), b,
                                 CPU, RATIOS, {"hard": 5, "inter": 9, "easy": 2}, 0, sample)
        assert stratum_purity(exact, sims, RATIOS, "inter") == dict.fromkeys(CATEGORIES, 1.0)


# ---- the selector and the loss, every path -----------------------------------------------

PATHS = [(s, lg) for s in ("sampled", "exact") for lg in ("dense", "pairs")]


def pick_for(stratify_: str) -> str:
    """Sampled strata draw random pool members; exact strata take the hardest counts."""
    return "random" if stratify_ == "sampled" else "hardest"


@pytest.mark.parametrize("stratify_, logits", PATHS)
@pytest.mark.parametrize("eta", [0.05, 0.5, 1.0])  # 1.0: saturated at theta_max = 0.5
def test_active_negatives_are_never_intra_view(stratify_, logits, eta):
    b = 300  # two sample blocks
    h1, h2 = views(b=b, d=8, seed=4)
    cfg = TrainConfig(candidates="inter", stratify=stratify_, logits=logits, tau=TAU,
                      stratify_sample=32, theta_max=0.5, pick=pick_for(stratify_))
    hans, selector = cfg.build_scheduler(), selector_of(cfg)
    hans.eta = {c: eta for c in CATEGORIES}
    assert hans.saturated == (eta == 1.0)
    for step in (1, 2):
        out = contrast(h1, h2, cfg.contrast.tau, cfg.contrast.logits, selector, hans, step)
        assert torch.isfinite(out.loss)
        for a in selector._active:
            assert a.num_cand == b - 1
            assert a.columns().size(1) == sum(hans.counts(b - 1).values())  # theta of B - 1
            assert_inter_only(a.columns(), b)
            if a.sample is not None:
                assert int(a.sample.cols.max()) < b


@pytest.mark.parametrize("stratify_, logits", PATHS)
def test_partial_selection_equals_a_per_anchor_inter_view_loop(stratify_, logits):
    h1, h2 = views(b=40, d=6, seed=5)
    selector = NegativeSelector(RATIOS, 1, stratify_, 16, candidates="inter")
    hans = HANS(0.5, {c: r * 0.5 for c, r in RATIOS.items()}, eta_0=0.3)
    out = contrast(h1, h2, TAU, logits, selector, hans, 1)
    active = selector._active
    ref = loop_loss(h1, h2, TAU, [a.columns().tolist() for a in active])
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-10)
    for a, b in zip(torch.autograd.grad(out.loss, (h1, h2)),
                    torch.autograd.grad(ref, (h1, h2))):
        assert torch.allclose(a, b, atol=1e-10)


@pytest.mark.parametrize("logits", ["dense", "pairs"])
def test_every_candidate_active_is_the_plain_inter_view_info_nce(logits):
    """Both logits paths, the dense fast path included, with every inter-view candidate."""
    h1, h2 = views(b=33, d=7, seed=6)
    sims = (similarities if logits == "dense" else pair_similarities)(h1, h2, TAU, "inter")
    c = num_candidates(33, "inter")
    active = tuple(schedule_negatives(sims.candidate_rows(d), 33, CPU, RATIOS,
                                      pool_sizes(c, RATIOS), 0, keep_values=sims.keeps_values,
                                      candidates="inter") for d in (0, 1))
    assert all(a.complete and a.cols.shape == (33, 32) for a in active)
    out = scheduled_info_nce(sims, active)
    ref = inter_view_loss(h1, h2, TAU)
    assert out.loss.item() == pytest.approx(ref.item(), abs=1e-5, rel=1e-10)
    for a, b in zip(torch.autograd.grad(out.loss, (h1, h2)), torch.autograd.grad(ref, (h1, h2))):
        assert torch.allclose(a, b, atol=1e-10)
    # the category losses split the view-1 anchors' inter-view negatives
    for cat, seg in active[0].segments().items():
        assert out.category[cat] == pytest.approx(
            one_direction_loop(h1, h2, TAU, seg.tolist()).item(), rel=1e-9)


@pytest.mark.parametrize("logits", ["auto", "dense", "pairs"])
@pytest.mark.parametrize("stratify_", ["sampled", "exact"])
@pytest.mark.parametrize("scheduler", ["none", "hans"])
def test_a_full_budget_and_the_baseline_contrast_every_inter_view_candidate(
        scheduler, stratify_, logits):
    """``--scheduler none``, and HANS saturated at theta_max = 1: all B - 1 inter-view
    negatives, equal to the plain inter-view InfoNCE; unequal to both views' loss."""
    torch.manual_seed(0)
    h1, h2 = torch.randn(50, 8), torch.randn(50, 8)
    cfg = TrainConfig(candidates="inter", scheduler=scheduler, stratify=stratify_,
                      logits=logits, tau=TAU, pick=pick_for(stratify_), theta_max=1.0)
    hans = cfg.build_scheduler()
    hans.eta = dict.fromkeys(CATEGORIES, 1.0)
    out = contrast(h1, h2, cfg.contrast.tau, cfg.contrast.logits, selector_of(cfg), hans, step=1)
    assert out.loss.item() == pytest.approx(inter_view_loss(h1, h2, TAU).item(), abs=1e-5)
    both = dataclasses.replace(cfg, candidates="both")
    other = contrast(h1, h2, both.contrast.tau, both.contrast.logits, selector_of(both), hans, step=1)
    assert abs(other.loss.item() - out.loss.item()) > 0.1


def test_selector_refuses_similarities_of_the_other_layout():
    h1, h2 = views(b=12)
    hans = HANS()
    with pytest.raises(ValueError, match="intra-view"):
        NegativeSelector(RATIOS, 1, candidates="inter").get(similarities(h1, h2, TAU), hans, 1)
    with pytest.raises(ValueError, match="intra-view"):
        NegativeSelector(RATIOS, 1).get(pair_similarities(h1, h2, TAU, "inter"), hans, 1)
    with pytest.raises(ValueError, match="candidates"):
        NegativeSelector(RATIOS, 1, candidates="intra")


def test_hans_contrast_module_takes_the_option():
    torch.manual_seed(1)
    h1, h2 = torch.randn(40, 8, requires_grad=True), torch.randn(40, 8)
    module = ScheduledContrast(HANS(theta_max=1.0, eta_0=1.0), tau=TAU, candidates="inter")
    out = module(h1, h2)
    assert out.loss.item() == pytest.approx(inter_view_loss(h1, h2, TAU).item(), abs=1e-5)
    out.loss.backward()
    with pytest.raises(ValueError, match="candidates"):
        ScheduledContrast(candidates="intra")


# ---- configuration and the command line --------------------------------------------------

def test_config_field_defaults_to_both_validates_and_round_trips(tmp_path):
    assert TrainConfig().contrast.candidates == "both"
    validate(TrainConfig(candidates="inter"))
    with pytest.raises(UsageError, match="--candidates must be one of both, inter"):
        validate(TrainConfig(candidates="intra"))
    path = tmp_path / "c.toml"
    path.write_text(to_toml(TrainConfig(candidates="inter")))
    assert "[contrast]" in path.read_text()
    assert load_toml(path)["candidates"] == "inter"
    path.write_text('[contrast]\ncandidates = "inter"\n')
    assert load_toml(path) == {"candidates": "inter"}


def test_minibatch_training_with_inter_view_candidates(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EDGEGCL_DATA", str(tmp_path / "data"))
    out = tmp_path / "run"
    code = main(["train", "--nodes", "150", "--features", "16", "--epochs", "4",
                 "--eval-every", "2", "--hidden-dim", "16", "--out-dim", "8", "--proj-dim", "8",
                 "--T-init", "1", "--T-int", "1", "--mode", "minibatch",
                 "--batch-size", "32", "--fanout", "5,5", "--sampler", "builtin",
                 "--device", "cpu", "--candidates", "inter", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert load_toml(out / "config.toml")["candidates"] == "inter"
    seed = json.loads((out / "metrics.json").read_text())["seeds"][0]
    assert 0.0 <= seed["test_micro_f1"] <= 100.0
