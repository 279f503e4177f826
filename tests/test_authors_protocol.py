"""The authors' evaluation protocol (edgegcl.evaluation.authors) against PyGCL's definition."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from edgegcl.evaluation.authors import AuthorsScore, authors_figure, authors_probe, authors_split
from edgegcl.evaluation.probe import Split, f1_scores


@pytest.mark.parametrize("n", [2708, 3327, 11, 100])
def test_split_sizes_follow_get_split(n: int) -> None:
    s = authors_split(n, torch.Generator().manual_seed(0))
    assert s.train.numel() == int(n * 0.1)
    assert s.val.numel() == int(n * 0.8)  # PyGCL's 'valid' slice: 80 %
    assert s.test.numel() == n - int(n * 0.1) - int(n * 0.8)  # the rest: about 10 %
    everything = torch.cat([s.train, s.val, s.test])
    assert torch.equal(everything.sort().values, torch.arange(n))


def test_each_call_draws_a_new_split() -> None:
    g = torch.Generator().manual_seed(0)
    a, b = authors_split(500, g), authors_split(500, g)
    assert not torch.equal(a.test, b.test)
    assert torch.equal(authors_split(500, torch.Generator().manual_seed(0)).test, a.test)


def _reference(x: torch.Tensor, y: torch.Tensor, split: Split, seed: int, epochs: int,
               test_interval: int = 20) -> AuthorsScore:
    """PyGCL's LREvaluator, written with nn.Linear and autograd, same initial weights."""
    g = torch.Generator().manual_seed(seed)
    classes, dim = int(y.max()) + 1, x.shape[1]
    model = nn.Linear(dim, classes)
    with torch.no_grad():
        model.weight.copy_((torch.rand(classes, dim, generator=g) * 2 - 1)
                           * math.sqrt(6.0 / (dim + classes)))
        model.bias.copy_((torch.rand(classes, generator=g) * 2 - 1) / math.sqrt(dim))
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.0)
    best_val, best = 0.0, AuthorsScore(0.0, 0.0, 0.0, 0)
    for epoch in range(epochs):
        opt.zero_grad()
        loss = nn.NLLLoss()(nn.LogSoftmax(dim=-1)(model(x[split.train])), y[split.train])
        loss.backward()
        opt.step()
        if (epoch + 1) % test_interval == 0:
            with torch.no_grad():
                test = f1_scores(model(x[split.test]).argmax(-1), y[split.test], classes)
                val = f1_scores(model(x[split.val]).argmax(-1), y[split.val], classes)[0]
            if val > best_val:
                best_val, best = val, AuthorsScore(test[0], test[1], val, epoch + 1)
    return best


def test_probe_equals_an_autograd_lr_evaluator() -> None:
    torch.manual_seed(0)
    y = torch.randint(0, 4, (400,))
    x = torch.randn(400, 16) + 0.8 * nn.functional.one_hot(y, 16).float()
    split = authors_split(400, torch.Generator().manual_seed(3))
    ours = authors_probe(x, y, torch.Generator().manual_seed(7), epochs=400, split=split)
    ref = _reference(x, y, split, 7, epochs=400)
    assert ours.classifier_epoch == ref.classifier_epoch
    assert ours.test_micro == pytest.approx(ref.test_micro)
    assert ours.test_macro == pytest.approx(ref.test_macro)
    assert ours.val_micro == pytest.approx(ref.val_micro)
    assert 0 < ours.classifier_epoch <= 400 and ours.classifier_epoch % 20 == 0


def test_classifier_epoch_is_the_first_strictly_best_validation() -> None:
    """Separable data: validation becomes perfect at some check and stays so; a tie never
    replaces the kept epoch, so a long run keeps the first perfect check (found by shorter
    runs of the same classifier)."""
    y = torch.arange(200) % 4
    x = 10.0 * nn.functional.one_hot(y, 4).float()
    score = authors_probe(x, y, torch.Generator().manual_seed(0), epochs=400)
    assert score.val_micro == 100.0 and score.test_micro == 100.0
    first = next(k for k in range(20, 401, 20) if authors_probe(
        x, y, torch.Generator().manual_seed(0), epochs=k).val_micro == 100.0)
    assert score.classifier_epoch == first < 400


def test_classifier_sees_test_labels_only_through_the_score() -> None:
    torch.manual_seed(1)
    y = torch.randint(0, 3, (300,))
    x = torch.randn(300, 8) + nn.functional.one_hot(y, 8).float()
    split = authors_split(300, torch.Generator().manual_seed(0))
    flipped = y.clone()
    flipped[split.test] = (flipped[split.test] + 1) % 3
    a = authors_probe(x, y, torch.Generator().manual_seed(5), epochs=200, split=split)
    b = authors_probe(x, flipped, torch.Generator().manual_seed(5), epochs=200, split=split)
    assert a.classifier_epoch == b.classifier_epoch and a.val_micro == b.val_micro
    assert a.test_micro != b.test_micro


def test_figure_is_the_max_over_evaluations() -> None:
    history = [(50, AuthorsScore(80.0, 70.0, 90.0, 20)), (100, AuthorsScore(86.0, 75.0, 70.0, 40)),
               (150, AuthorsScore(86.0, 74.0, 95.0, 60)), (200, AuthorsScore(84.0, 79.0, 99.0, 80))]
    epoch, best = authors_figure(history)
    assert epoch == 100 and best.test_micro == 86.0  # highest test; ties: earliest
    with pytest.raises(ValueError):
        authors_figure([])


def test_bad_input_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        authors_probe(torch.randn(5, 2), torch.zeros(4, dtype=torch.long), torch.Generator())
    with pytest.raises(ValueError, match="too few nodes"):  # three sets need three nodes
        authors_probe(torch.randn(2, 2), torch.zeros(2, dtype=torch.long), torch.Generator())


def test_its_adam_is_torch_adam() -> None:
    """The probe's one-tensor Adam against torch.optim.Adam on the same gradients: the same
    element-wise arithmetic, so equal within float32 rounding (a few ulps per step)."""
    from edgegcl.evaluation.authors import _Adam

    torch.manual_seed(0)
    start = torch.randn(9, 4)
    ours, ref = start.clone(), start.clone().requires_grad_()
    adam, opt = _Adam(ours, lr=0.01), torch.optim.Adam([ref], lr=0.01)
    steps = 60
    for _ in range(steps):
        grad = torch.randn(9, 4)
        adam.step(grad)
        ref.grad = grad.clone()
        opt.step()
    assert not torch.equal(ours, start)
    ulp = torch.finfo(torch.float32).eps * ref.detach().abs().clamp_min(1.0)
    assert (ours - ref.detach()).abs().le(8 * steps * ulp).all()
