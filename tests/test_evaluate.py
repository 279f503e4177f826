"""Tests for edgegcl.evaluation.probe: splits, F1 scores, the linear probe and checkpoint selection."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from edgegcl.evaluation.probe import (
    ProbeScores,
    Split,
    fit_logreg,
    f1_scores,
    linear_probe,
    random_split,
    select_checkpoint,
)

# --- random_split ---------------------------------------------------------------------------


def test_random_split_sizes_disjoint_and_covering() -> None:
    split = random_split(2708, seed=3)
    assert (split.train.numel(), split.val.numel(), split.test.numel()) == (270, 270, 2168)
    assert all(idx.dtype == torch.int64 for idx in (split.train, split.val, split.test))
    everything = torch.cat([split.train, split.val, split.test])
    assert torch.equal(everything.sort().values, torch.arange(2708))


def test_random_split_custom_fractions_floor() -> None:
    split = random_split(101, seed=0, train=0.5, val=0.25)
    assert (split.train.numel(), split.val.numel(), split.test.numel()) == (50, 25, 26)


def test_random_split_deterministic_and_seed_dependent() -> None:
    a, b, c = random_split(500, seed=1), random_split(500, seed=1), random_split(500, seed=2)
    for x, y in ((a.train, b.train), (a.val, b.val), (a.test, b.test)):
        assert torch.equal(x, y)
    assert not torch.equal(a.train, c.train)


def test_random_split_leaves_global_rng_alone() -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    random_split(100, seed=5)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("train,val", [(-0.1, 0.1), (0.1, -0.1), (0.6, 0.5)])
def test_random_split_rejects_bad_fractions(train: float, val: float) -> None:
    with pytest.raises(ValueError):
        random_split(10, seed=0, train=train, val=val)


# --- f1_scores ------------------------------------------------------------------------------


def test_f1_hand_computed_with_unpredicted_and_absent_class() -> None:
    # class 0: TP 1, 2 predicted, 2 true -> F1 1/2; class 1: TP 2, 3 predicted, 2 true -> 4/5;
    # class 2: 1 true member, never predicted -> 0; class 3: absent from both -> left out.
    target = torch.tensor([0, 0, 1, 1, 2])
    pred = torch.tensor([0, 1, 1, 1, 0])
    micro, macro = f1_scores(pred, target, num_classes=4)
    assert micro == pytest.approx(60.0)
    assert macro == pytest.approx(100.0 * (0.5 + 0.8 + 0.0) / 3)


def test_f1_counts_predicted_class_without_members() -> None:
    # class 0: TP 1, 1 predicted, 2 true -> 2/3; class 1: predicted once, no members -> 0.
    micro, macro = f1_scores(torch.tensor([0, 1]), torch.tensor([0, 0]), num_classes=2)
    assert micro == pytest.approx(50.0)
    assert macro == pytest.approx(100.0 * (2 / 3) / 2)


def test_f1_perfect() -> None:
    labels = torch.tensor([2, 0, 1, 2])
    assert f1_scores(labels, labels, num_classes=5) == pytest.approx((100.0, 100.0))


def _reference_f1(pred: list[int], target: list[int], num_classes: int) -> tuple[float, float]:
    """Textbook precision/recall definition, one class at a time, over classes present anywhere."""
    micro = 100.0 * sum(p == t for p, t in zip(pred, target)) / len(target)
    per_class = []
    for c in range(num_classes):
        tp = sum(p == c and t == c for p, t in zip(pred, target))
        n_pred = sum(p == c for p in pred)
        n_true = sum(t == c for t in target)
        if n_pred == 0 and n_true == 0:
            continue
        precision = tp / n_pred if n_pred else 0.0
        recall = tp / n_true if n_true else 0.0
        denominator = precision + recall
        per_class.append(0.0 if denominator == 0 else 2 * precision * recall / denominator)
    return micro, 100.0 * sum(per_class) / len(per_class)


@pytest.mark.parametrize("seed", range(20))
def test_f1_matches_reference_on_random_data(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    num_classes = 8
    n = int(torch.randint(1, 40, (1,), generator=gen))
    # draw from a subset of the classes so some are absent from preds, targets or both
    target = torch.randint(0, 5, (n,), generator=gen)
    pred = torch.randint(2, 7, (n,), generator=gen)
    expected = _reference_f1(pred.tolist(), target.tolist(), num_classes)
    assert f1_scores(pred, target, num_classes) == pytest.approx(expected)


@pytest.mark.parametrize(
    "pred,target",
    [
        (torch.tensor([0, 1]), torch.tensor([0])),
        (torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long)),
        (torch.tensor([0, 3]), torch.tensor([0, 1])),
        (torch.tensor([0, -1]), torch.tensor([0, 1])),
    ],
)
def test_f1_rejects_bad_input(pred: torch.Tensor, target: torch.Tensor) -> None:
    with pytest.raises(ValueError):
        f1_scores(pred, target, num_classes=3)


# --- linear_probe ---------------------------------------------------------------------------


def _blobs(
    n: int, dim: int, classes: int, spread: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dim, generator=gen) * 3
    y = torch.randint(0, classes, (n,), generator=gen)
    x = centers[y] + spread * torch.randn(n, dim, generator=gen)
    return x, y


def test_fit_logreg_equals_nn_linear_with_adam_per_weight_decay() -> None:
    gen = torch.Generator().manual_seed(0)
    x = F.normalize(torch.randn(60, 5, generator=gen), dim=1)
    y = torch.randint(0, 3, (60,), generator=gen)
    weight, bias = torch.randn(3, 5, generator=gen) * 0.3, torch.randn(3, generator=gen) * 0.3
    decays = (0.0, 0.05, 0.5)
    packed_w, packed_b = fit_logreg(x, y, 3, decays, epochs=40, lr=0.05, weight=weight, bias=bias)
    for g, wd in enumerate(decays):
        ref = torch.nn.Linear(5, 3)
        with torch.no_grad():
            ref.weight.copy_(weight)
            ref.bias.copy_(bias)
        opt = torch.optim.Adam(ref.parameters(), lr=0.05, weight_decay=wd)
        for _ in range(40):
            opt.zero_grad()
            F.cross_entropy(ref(x), y).backward()
            opt.step()
        cols = slice(3 * g, 3 * (g + 1))
        torch.testing.assert_close(packed_w[:, cols], ref.weight.detach().t(), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(packed_b[cols], ref.bias.detach(), atol=1e-5, rtol=1e-4)


def test_linear_probe_separable_blobs_scores_high() -> None:
    x, y = _blobs(600, 16, 4, spread=0.5, seed=0)
    scores = linear_probe(x, y, random_split(600, seed=0))
    assert scores.test_micro > 95 and scores.test_macro > 95
    assert scores.val_micro > 95 and scores.val_macro > 95
    assert scores.weight_decay in (0.0, 1e-4, 1e-3, 1e-2)


def test_linear_probe_random_labels_near_chance() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1000, 16, generator=gen)
    y = torch.randint(0, 5, (1000,), generator=gen)
    scores = linear_probe(x, y, random_split(1000, seed=1))
    assert abs(scores.test_micro - 20.0) < 8


def test_linear_probe_choice_ignores_test_labels() -> None:
    # noisy blobs so that the weight-decay grid gives different validation scores
    x, y = _blobs(800, 8, 5, spread=3.0, seed=2)
    split = random_split(800, seed=2, train=0.2, val=0.2)
    grid = (0.0, 1e-2, 1e-1, 1.0, 10.0)
    base = linear_probe(x, y, split, weight_decays=grid)
    gen = torch.Generator().manual_seed(3)
    variants = []
    for _ in range(4):
        y_shuffled = y.clone()
        y_shuffled[split.test] = y[split.test][torch.randperm(split.test.numel(), generator=gen)]
        variants.append(y_shuffled)
    constant = y.clone()
    constant[split.test] = int(y.max())
    variants.append(constant)
    for y_variant in variants:
        other = linear_probe(x, y_variant, split, weight_decays=grid)
        assert other.weight_decay == base.weight_decay
        assert (other.val_micro, other.val_macro) == (base.val_micro, base.val_macro)


def test_linear_probe_deterministic_normalises_rows_and_keeps_global_rng() -> None:
    x, y = _blobs(300, 8, 3, spread=2.0, seed=4)
    split = random_split(300, seed=4)
    torch.manual_seed(0)
    expected_draw = torch.rand(2)
    torch.manual_seed(0)
    first = linear_probe(x, y, split, epochs=50)
    assert torch.equal(torch.rand(2), expected_draw)
    assert linear_probe(x, y, split, epochs=50) == first
    # a power-of-two rescale is exact, so L2 normalisation makes the result identical;
    # float64 input with grad is accepted (detached, cast to float32)
    scaled = (8.0 * x).double().requires_grad_()
    assert linear_probe(scaled, y, split, epochs=50) == first


@pytest.mark.parametrize(
    "kwargs",
    [{"weight_decays": ()}, {"weight_decays": (-1.0,)}, {"epochs": 0}, {"lr": 0.0}],
)
def test_linear_probe_rejects_bad_arguments(kwargs: dict) -> None:
    x, y = _blobs(50, 4, 2, spread=1.0, seed=0)
    with pytest.raises(ValueError):
        linear_probe(x, y, random_split(50, seed=0), **kwargs)


def test_linear_probe_rejects_empty_split_part() -> None:
    x, y = _blobs(50, 4, 2, spread=1.0, seed=0)
    split = random_split(50, seed=0)
    with pytest.raises(ValueError):
        linear_probe(x, y, Split(train=split.train[:0], val=split.val, test=split.test))


# --- select_checkpoint ----------------------------------------------------------------------


def _scores(val: float, test: float) -> ProbeScores:
    return ProbeScores(
        val_micro=val, val_macro=val - 1, test_micro=test, test_macro=test - 2, weight_decay=0.0,
        num_train=10, num_val=10, num_test=80,
    )


def test_select_checkpoint_uses_val_only() -> None:
    history = [
        (10, _scores(70, 80)),
        (20, _scores(75, 78)),
        (30, _scores(72, 84)),  # best test: not chosen
        (40, _scores(60, 81)),
    ]
    sel = select_checkpoint(history)
    assert sel.epoch == 20 and sel.scores == history[1][1]


def test_select_checkpoint_ties_go_to_earliest_epoch() -> None:
    history = [(30, _scores(75, 80)), (10, _scores(75, 80)), (20, _scores(70, 80))]
    sel = select_checkpoint(history)
    assert sel.epoch == 10


def test_select_checkpoint_empty_history() -> None:
    with pytest.raises(ValueError):
        select_checkpoint([])


def test_split_is_frozen() -> None:
    split = Split(train=torch.tensor([0]), val=torch.tensor([1]), test=torch.tensor([2]))
    with pytest.raises(AttributeError):
        split.train = torch.tensor([1])  # type: ignore[misc]
