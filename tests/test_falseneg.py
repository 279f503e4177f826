"""ProGCL's Beta mixture and ``--hardness progcl``: the estimate, the key, and every path."""

from __future__ import annotations

import math

import pytest
import torch

from edgegcl.contrast.falseneg import BetaMixture, true_negative_hardness
from edgegcl.contrast.hans import HANS
from edgegcl.contrast.dense import similarities
from edgegcl.contrast.weighting import ProGCLMix, ProGCLWeight
from edgegcl.contrast.negatives import _cut_hardest, schedule_negatives
from edgegcl.contrast.selection import NegativeSelector
from edgegcl.training.config import TrainConfig, unused_settings


def _mixture_sample(n_low: int, n_high: int, seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    low = torch.distributions.Beta(3.0, 7.0).sample((n_low,))
    high = torch.distributions.Beta(12.0, 2.0).sample((n_high,))
    return torch.cat([low, high])


def test_the_mixture_recovers_two_planted_components() -> None:
    mix = BetaMixture().fit(_mixture_sample(8000, 2000))
    means = (mix.alphas / (mix.alphas + mix.betas)).flatten()
    assert abs(float(means[0]) - 0.3) < 0.03 and abs(float(means[1]) - 12 / 14) < 0.03
    assert abs(float(mix.weights[1]) - 0.2) < 0.03  # the upper component's share
    p = mix.true_negative(torch.tensor([0.2, 0.5, 0.95]))
    assert float(p[0]) > 0.99 and float(p[2]) < 0.01 and bool(p[0] >= p[1] >= p[2])


def test_component_zero_is_the_lower_whatever_the_start() -> None:
    mix = BetaMixture(alphas=torch.tensor([[5.0], [1.0]], dtype=torch.float64),
                      betas=torch.tensor([[1.0], [5.0]], dtype=torch.float64))
    mix.fit(_mixture_sample(3000, 1000, seed=1))
    means = (mix.alphas / (mix.alphas + mix.betas)).flatten()
    assert float(means[0]) < float(means[1])


def test_the_key_is_p_true_negative_times_similarity() -> None:
    tau = 0.5
    cos = _mixture_sample(5000, 1000) * 2 - 1
    key = true_negative_hardness(cos / tau, tau)
    block = torch.tensor([[-0.5, 0.2, 0.9, math.inf]]) / tau
    out = key(block)
    s = (block[0, :3] * tau + 1) / 2
    expected = key.mixture.true_negative(s) * s  # type: ignore[attr-defined]
    torch.testing.assert_close(out[0, :3], expected.float(), rtol=1e-6, atol=1e-7)
    assert out[0, 3] == math.inf  # a marked column keeps its mark
    # a likely false negative (cos 0.9) is less hard than a true one of moderate similarity
    assert float(out[0, 2]) < float(out[0, 1])


def test_progcl_hard_picks_leave_out_planted_false_negatives() -> None:
    """Anchors whose most similar candidates are (by construction) of their own class: ranked
    by similarity the hard picks are those; ranked by the key, true negatives, and the easy
    picks stay the least similar either way."""
    b, torch_gen = 60, torch.Generator().manual_seed(0)
    classes = torch.arange(b) % 3
    same = classes.unsqueeze(1) == classes.repeat(2).unsqueeze(0)
    cos = torch.where(same, 0.85 + 0.1 * torch.rand(b, 2 * b, generator=torch_gen),
                      -0.2 + 0.8 * torch.rand(b, 2 * b, generator=torch_gen))
    tau = 0.5
    block = cos / tau
    own = torch.stack([torch.arange(b), torch.arange(b) + b], dim=1)
    counts = {"hard": 10, "inter": 10, "easy": 10}
    key = true_negative_hardness(block, tau)
    by_sim = _cut_hardest(block, own, counts)
    by_key = _cut_hardest(block, own, counts, key(block))
    assert float(same.gather(1, by_sim[0]).float().mean()) > 0.9
    assert float(same.gather(1, by_key[0]).float().mean()) < 0.05
    assert torch.equal(by_sim[2].sort(1).values, by_key[2].sort(1).values)  # easy unchanged
    # the hard picks are still the hardest true negatives: more similar than the inter ones
    assert float(cos.gather(1, by_key[0]).mean()) > float(cos.gather(1, by_key[1]).mean())


@pytest.mark.parametrize("stratify, pick", [("exact", "hardest"), ("exact", "random"),
                                            ("sampled", "random")])
@pytest.mark.parametrize("logits", ["dense", "pairs"])
def test_progcl_strata_on_every_path(stratify: str, pick: str, logits: str) -> None:
    from edgegcl.contrast.module import ScheduledContrast

    torch.manual_seed(0)
    h1, h2 = torch.randn(80, 8, requires_grad=True), torch.randn(80, 8, requires_grad=True)
    contrast = ScheduledContrast(HANS(theta_max=0.3, T_init=1, T_int=1, e=1), tau=0.5,
                            stratify=stratify, pick=pick, logits=logits, hardness="progcl",
                            stratify_sample=16)
    out = contrast(h1, h2)
    out.loss.backward()
    assert math.isfinite(float(out.loss.detach())) and h1.grad is not None
    plain = ScheduledContrast(HANS(theta_max=0.3, T_init=1, T_int=1, e=1), tau=0.5,
                         stratify=stratify, pick=pick, logits=logits, stratify_sample=16)
    assert plain.selector.hardness == "similarity" and contrast.selector.hardness == "progcl"


def test_progcl_changes_the_hard_picks_of_a_selector() -> None:
    torch.manual_seed(0)
    h1, h2 = torch.randn(100, 8), torch.randn(100, 8)
    sims = similarities(h1, h2, 0.5)
    hans = HANS(theta_max=0.3)
    hans.eta = {"hard": 0.999, "inter": 0.999, "easy": 0.999}
    picks = {}
    for hardness in ("similarity", "progcl"):
        selector = NegativeSelector({"hard": 0.3, "inter": 0.5, "easy": 0.2}, 1, "exact",
                                    pick="hardest", hardness=hardness)
        picks[hardness] = selector.get(sims, hans, 1)[0].segments()
    assert not torch.equal(picks["similarity"]["hard"], picks["progcl"]["hard"])
    assert torch.equal(picks["similarity"]["easy"].sort(1).values,
                       picks["progcl"]["easy"].sort(1).values)


def test_the_option_is_refused_where_nothing_is_ranked() -> None:
    assert "hardness" in unused_settings(TrainConfig(scheduler="random", hardness="progcl"))
    assert "hardness" not in unused_settings(TrainConfig(scheduler="hans", hardness="progcl"))
    with pytest.raises(ValueError):
        NegativeSelector({"hard": 0.3, "inter": 0.5, "easy": 0.2}, 1, hardness="oracle")


def test_blocked_progcl_schedule_equals_one_block() -> None:
    """The key is fitted once per refresh and applied block by block: blocks change nothing."""
    import edgegcl.contrast.negatives as negatives

    torch.manual_seed(0)
    sims = similarities(torch.randn(64, 8), torch.randn(64, 8), 0.5)
    key = true_negative_hardness(sims.candidates(0), 0.5)
    counts = {"hard": 5, "inter": 5, "easy": 5}
    ratios = {"hard": 0.3, "inter": 0.5, "easy": 0.2}
    whole = schedule_negatives(sims.candidate_rows(0), 64, torch.device("cpu"), ratios, counts,
                               0, pick="hardest", key=key)
    before = dict(negatives.STRATIFY_BLOCK_ELEMENTS)
    negatives.STRATIFY_BLOCK_ELEMENTS["cpu"] = 128 * 10
    try:
        blocked = schedule_negatives(sims.candidate_rows(0), 64, torch.device("cpu"), ratios,
                                     counts, 0, pick="hardest", key=key)
    finally:
        negatives.STRATIFY_BLOCK_ELEMENTS.update(before)
    assert torch.equal(whole.cols, blocked.cols)


# --------------------------------------------------------------------------- ProGCL-weight

def _every(b: int, intra: bool):
    from edgegcl.contrast.negatives import ActiveNegatives, num_candidates

    c = num_candidates(b, "both" if intra else "inter")
    every = ActiveNegatives(torch.empty(b, 0, dtype=torch.long), (0, c, 0), c, grouped=False)
    return every, every


@pytest.mark.parametrize("candidates", ["both", "inter"])
def test_weighted_loss_is_progcl_weight_by_brute_force(candidates: str) -> None:
    from edgegcl.contrast.loss import scheduled_info_nce

    torch.manual_seed(0)
    b, tau = 12, 0.5
    h1, h2 = torch.randn(b, 4), torch.randn(b, 4)
    sims = similarities(h1, h2, tau, candidates)
    weigh = torch.sigmoid  # any non-negative weighting of the similarities
    got = scheduled_info_nce(sims, _every(b, candidates == "both"), "sum",
                             ProGCLWeight(weigh)).loss
    z1, z2 = torch.nn.functional.normalize(h1), torch.nn.functional.normalize(h2)
    s12, s11, s22 = z1 @ z2.t() / tau, z1 @ z1.t() / tau, z2 @ z2.t() / tau
    losses = []
    for rows_a, rows_b in ((s12, s11), (s12.t(), s22)):
        for i in range(b):
            neg = [rows_a[i, j] for j in range(b) if j != i]
            if candidates == "both":
                neg += [rows_b[i, j] for j in range(b) if j != i]
            neg_t = torch.stack(neg)
            w = torch.sigmoid(neg_t)
            denom = (w * torch.exp(neg_t)).sum() / w.mean()
            losses.append(torch.log(torch.exp(rows_a[i, i]) + denom) - rows_a[i, i])
    want = 0.5 * (torch.stack(losses[:b]).mean() + torch.stack(losses[b:]).mean())
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    plain = scheduled_info_nce(sims, _every(b, candidates == "both"), "sum").loss
    ones = scheduled_info_nce(sims, _every(b, candidates == "both"), "sum",
                              ProGCLWeight(lambda s: torch.ones_like(s))).loss
    torch.testing.assert_close(ones, plain, rtol=1e-6, atol=1e-6)  # equal weights: unweighted


def test_weighted_loss_is_the_same_on_dense_and_pairs_logits() -> None:
    from edgegcl.contrast.module import ScheduledContrast

    torch.manual_seed(0)
    h1, h2 = torch.randn(50, 8), torch.randn(50, 8)
    out = {}
    for logits in ("dense", "pairs"):
        contrast = ScheduledContrast(HANS(theta_max=1.0, eta_0=1.0), tau=0.5, logits=logits,
                                uniform=True, negative_weight="progcl")
        out[logits] = contrast(h1, h2).loss
    torch.testing.assert_close(out["dense"], out["pairs"], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        ScheduledContrast(HANS(), negative_weight="oracle")


# --------------------------------------------------------------------------- ProGCL-mix

@pytest.mark.parametrize("candidates", ["both", "inter"])
def test_mixed_loss_is_progcl_mix_by_brute_force(candidates: str) -> None:
    """Every candidate active: the plain denominators plus, per anchor, exp of the B-weighted
    mixes of its ``count`` inter-view negatives of highest B, paired by one permutation."""
    from edgegcl.contrast.loss import scheduled_info_nce

    torch.manual_seed(0)
    b, tau, count = 10, 0.5, 4
    h1, h2 = torch.randn(b, 4), torch.randn(b, 4)
    sims = similarities(h1, h2, tau, candidates)
    weigh = torch.sigmoid
    torch.manual_seed(7)
    got = scheduled_info_nce(sims, _every(b, candidates == "both"), "sum",
                             ProGCLMix(weigh, count)).loss
    torch.manual_seed(7)
    perms = [torch.randperm(count), torch.randperm(count)]  # the two directions' draws
    z1, z2 = torch.nn.functional.normalize(h1), torch.nn.functional.normalize(h2)
    s12, s11, s22 = z1 @ z2.t() / tau, z1 @ z1.t() / tau, z2 @ z2.t() / tau
    losses = []
    for d, (rows_a, rows_b) in enumerate(((s12, s11), (s12.t(), s22))):
        for i in range(b):
            inter = [(float(torch.sigmoid(rows_a[i, j])), rows_a[i, j]) for j in range(b)
                     if j != i]
            top = sorted(inter, key=lambda t: -t[0])[:count]
            mixed = []
            for k in range(count):
                (wa, sa), (wb, sb) = top[k], top[int(perms[d][k])]
                mixed.append(torch.exp((wa * sa + wb * sb) / (wa + wb)))
            neg = [rows_a[i, j] for j in range(b) if j != i]
            if candidates == "both":
                neg += [rows_b[i, j] for j in range(b) if j != i]
            denom = torch.exp(torch.stack(neg)).sum() + torch.stack(mixed).sum()
            losses.append(torch.log(torch.exp(rows_a[i, i]) + denom) - rows_a[i, i])
    want = 0.5 * (torch.stack(losses[:b]).mean() + torch.stack(losses[b:]).mean())
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_mix_acts_on_dense_and_pairs_logits_and_keeps_the_categories() -> None:
    """On an active subset (the logits path, dense or pairs) the mix draws from each anchor's
    active negatives: more denominator than without, the same on both logits, and the
    categories HANS reads are the unmixed ones; a count above the candidates takes them all."""
    from edgegcl.contrast.module import ScheduledContrast

    torch.manual_seed(0)
    h1, h2 = torch.randn(40, 8), torch.randn(40, 8)
    out = {}
    for logits in ("dense", "pairs"):
        for weight in ("none", "progcl-mix"):
            torch.manual_seed(3)
            contrast = ScheduledContrast(HANS(theta_max=0.5, eta_0=1.0), tau=0.5, logits=logits,
                                    negative_weight=weight, mix_negatives=10 ** 6)
            out[logits, weight] = contrast(h1, h2)
    torch.testing.assert_close(out["dense", "progcl-mix"].loss, out["pairs", "progcl-mix"].loss,
                               rtol=1e-5, atol=1e-6)
    assert float(out["dense", "progcl-mix"].loss) > float(out["dense", "none"].loss) + 0.05
    assert out["dense", "progcl-mix"].category == out["dense", "none"].category
    with pytest.raises(ValueError):
        ScheduledContrast(HANS(), negative_weight="progcl-mix", mix_negatives=0)


def test_the_estimate_waits_for_its_epoch() -> None:
    """``false_negatives_from``: plain InfoNCE and similarity strata before the epoch, the
    weights and the key from it on; a run that ends before it is refused in one line."""
    from edgegcl.contrast.module import ScheduledContrast
    from edgegcl.errors import UsageError

    torch.manual_seed(0)
    h1, h2 = torch.randn(30, 8), torch.randn(30, 8)
    plain = ScheduledContrast(HANS(theta_max=1.0, eta_0=1.0), tau=0.5, uniform=True)
    late = ScheduledContrast(HANS(theta_max=1.0, eta_0=1.0), tau=0.5, uniform=True,
                        negative_weight="progcl", false_negatives_from=2)
    losses = []
    for _ in range(3):
        a, b = plain(h1, h2).loss, late(h1, h2).loss
        losses.append((float(a), float(b)))
        plain.step(), late.step()
    assert losses[0][0] == losses[0][1] and losses[1][0] == losses[1][1]
    assert abs(losses[2][0] - losses[2][1]) > 1e-4  # epoch 3 (two stepped): weighted
    selector = NegativeSelector({"hard": 0.3, "inter": 0.5, "easy": 0.2}, 1, stratify="exact",
                                pick="hardest", hardness="progcl")
    sims = similarities(h1, h2, 0.5, "both")
    hans = HANS(theta_max=0.3, eta_0=1.0)
    before = selector.get(sims, hans, 1, estimate=False)[0].segments()["hard"]
    after = selector.get(sims, hans, 1, estimate=True)[0].segments()["hard"]
    by_similarity = NegativeSelector({"hard": 0.3, "inter": 0.5, "easy": 0.2}, 1,
                                     stratify="exact", pick="hardest").get(sims, hans, 1)
    assert torch.equal(before, by_similarity[0].segments()["hard"])
    assert not torch.equal(before, after)  # the key re-ranks once it acts
    with pytest.raises(UsageError, match="false-negatives-from"):
        TrainConfig(negative_weight="progcl", false_negatives_from=50, epochs=50)
    TrainConfig(false_negatives_from=50, epochs=50)  # no estimate: nothing to wait for
    assert "false_negatives_from" in unused_settings(TrainConfig(false_negatives_from=5))
    assert "mix_negatives" in unused_settings(TrainConfig(negative_weight="progcl"))
    assert "mix_negatives" not in unused_settings(TrainConfig(negative_weight="progcl-mix"))
