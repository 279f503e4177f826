"""Downstream evaluation of frozen node embeddings: splits, F1, linear probe, checkpoint choice.

The protocol is the usual one for graph contrastive learning: the encoder is frozen, a
logistic-regression classifier is trained on the embeddings of the training nodes, and the
classifier's hyper-parameter (weight decay) and the encoder checkpoint are chosen on the
validation nodes only. The test nodes are touched once, to report the chosen model. The
protocol behind the paper's tables, which selects on re-drawn test splits, is in
edgegcl.evaluation.authors, reported beside this one and never used to choose anything.
"""

from __future__ import annotations

import math
from functools import partial
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from edgegcl.evaluation.metrics import label_kind, majority_rate, resolve_metric, roc_auc
from edgegcl.scratch import Scratch

__all__ = [
    "CHECKPOINT_PROBE_MAX_LABELLED",
    "ProbeScores",
    "Selection",
    "Split",
    "checkpoint_probe_split",
    "published_split",
    "f1_scores",
    "fit_logreg",
    "linear_probe",
    "random_split",
    "select_checkpoint",
]


CHECKPOINT_PROBE_MAX_LABELLED = 20_000
"""Labelled nodes (train + validation) a per-checkpoint probe fits and selects on at most
(``checkpoint_probe_split``); the chosen checkpoint is then probed on the full split."""

PROBE_CHUNK_ROWS = 1 << 15
"""Rows of embeddings ``linear_probe`` normalises and classifies at a time (32 MiB at 256 wide)."""


@dataclass(frozen=True)
class Split:
    """Node indices (int64) of the train, validation and test sets: disjoint, covering all nodes."""

    train: Tensor
    val: Tensor
    test: Tensor


def random_split(num_nodes: int, seed: int, train: float = 0.1, val: float = 0.1) -> Split:
    """Split ``num_nodes`` nodes at random into train/val/test.

    The first ``floor(train * N)`` nodes of a seeded permutation are the training set, the next
    ``floor(val * N)`` the validation set, the rest the test set. A local generator makes the
    split depend on ``seed`` only, never on (or disturbing) the global RNG state.

    Args:
        num_nodes: nodes to split.
        seed: seed of the permutation.
        train: fraction of the nodes in the training set.
        val: fraction in the validation set (the rest is the test set).

    Example:
        >>> s = random_split(100, seed=0)
        >>> s.train.numel(), s.val.numel(), s.test.numel()
        (10, 10, 80)
    """
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be positive, got {num_nodes}")
    if train < 0 or val < 0 or train + val > 1:
        raise ValueError(f"need train >= 0, val >= 0 and train + val <= 1, got {train=}, {val=}")
    n_train = math.floor(train * num_nodes)
    n_val = math.floor(val * num_nodes)
    if num_nodes >= 3 and train > 0 and val > 0 and train + val < 1:
        # a small graph: one node at least in each set (the same split from N = 1 / train on)
        n_train, n_val = max(1, n_train), max(1, n_val)
        n_val = min(n_val, num_nodes - n_train - 1)
    generator = torch.Generator().manual_seed(seed)
    perm = torch.randperm(num_nodes, generator=generator)
    return Split(
        train=perm[:n_train],
        val=perm[n_train : n_train + n_val],
        test=perm[n_train + n_val :],
    )


def labelled_nodes(y: Tensor) -> Tensor | None:
    """The nodes that have a label, where some have none (class ids of -1: a node table's
    empty label cells, edgegcl.data.validation's ``partly_labelled``); None when every node
    has one (a multi-label target always does)."""
    if y.dim() != 1 or y.numel() == 0 or int(y.min()) >= 0:
        return None
    return (y >= 0).nonzero().flatten()


def labelled_split(y: Tensor, seed: int) -> Split:
    """``random_split`` of the nodes that have a label (``labelled_nodes``): a node without
    one is in no set, so that no probe trains, validates or tests on it.

    Example:
        >>> s = labelled_split(torch.tensor([0, -1, 1, 0, -1, 1, 0, 1, 1, 0]), seed=0)
        >>> sorted(torch.cat([s.train, s.val, s.test]).tolist())
        [0, 2, 3, 5, 6, 7, 8, 9]
    """
    ids = labelled_nodes(y)
    if ids is None:
        return random_split(y.size(0), seed)
    split = random_split(ids.numel(), seed)
    return Split(ids[split.train], ids[split.val], ids[split.test])


def published_split(data: Any, index: int) -> tuple[int, Split] | None:
    """Published split ``index`` of a graph that carries split masks (``train_mask``,
    ``val_mask``, ``test_mask``, bool ``[S, N]``; edgegcl.data.validation), taken modulo their
    number S, as (the split's number, its node indices); None when the graph carries none.
    A run's seed s is evaluated on split s mod S, as published tables average over theirs.

    Example:
        >>> from torch_geometric.data import Data
        >>> masks = torch.tensor([[True, False, False, False]])
        >>> g = Data(train_mask=masks, val_mask=masks.roll(1, 1), test_mask=masks.roll(2, 1))
        >>> number, split = published_split(g, 3)
        >>> number, split.train.tolist(), split.val.tolist(), split.test.tolist()
        (0, [0], [1], [2])
    """
    masks = [getattr(data, key, None) for key in ("train_mask", "val_mask", "test_mask")]
    if any(mask is None for mask in masks):
        return None
    number = index % masks[0].size(0)
    train, val, test = (mask[number].nonzero().flatten() for mask in masks)
    return number, Split(train=train, val=val, test=test)


def checkpoint_probe_split(split: Split, max_labelled: int | None = None) -> Split:
    """The split a per-checkpoint probe uses: ``split`` itself when its train and validation
    sets hold at most ``max_labelled`` nodes (default CHECKPOINT_PROBE_MAX_LABELLED), else the
    first nodes of each (a uniform sample: ``random_split`` orders them at random), shared
    in proportion to the two sets' sizes. The test set is kept whole.

    A probe fits its classifier for hundreds of full-batch epochs over the training nodes, at
    every checkpoint: 100 000 of them on a million-node graph. The sample depends on the split
    only, so it is the same at every checkpoint of a seed.
    """
    cap = CHECKPOINT_PROBE_MAX_LABELLED if max_labelled is None else max_labelled
    n_train, n_val = split.train.numel(), split.val.numel()
    if cap < 2:
        raise ValueError(f"max_labelled must be at least 2, got {cap}")
    if n_train + n_val <= cap:
        return split
    k_train = min(n_train, max(1, round(cap * n_train / (n_train + n_val))))
    k_val = min(n_val, cap - k_train)
    return Split(train=split.train[:k_train], val=split.val[:k_val], test=split.test)


def _f1_from_counts(true_positives: Tensor, support: Tensor, correct: int,
                    total: int) -> tuple[float, float]:
    """``f1_scores`` from its counts: per-class true positives, per-class predicted + true
    counts, and the number of correct predictions out of ``total``."""
    present = support > 0
    per_class = 2.0 * true_positives[present].double() / support[present].double()
    return 100.0 * (correct / total), 100.0 * per_class.mean().item()


def f1_scores(pred: Tensor, target: Tensor, num_classes: int) -> tuple[float, float]:
    """Return ``(micro-F1, macro-F1)`` in percent for single-label multi-class predictions.

    Micro-F1 equals accuracy in this setting. Macro-F1 is the unweighted mean of per-class F1
    ``2 TP / (predicted + true)``, taken over the classes that occur in ``pred`` or ``target``
    (sklearn's behaviour with ``labels`` = present classes): a class absent from both says
    nothing about the classifier and is left out, while a class with members that is never
    predicted counts with F1 = 0.
    """
    if pred.dim() != 1 or pred.shape != target.shape or pred.numel() == 0:
        raise ValueError(
            f"pred and target must be non-empty 1-D tensors of equal length, "
            f"got {tuple(pred.shape)} and {tuple(target.shape)}"
        )
    if int(torch.minimum(pred.min(), target.min())) < 0 or int(
        torch.maximum(pred.max(), target.max())
    ) >= num_classes:
        raise ValueError(f"labels must lie in [0, {num_classes})")
    correct = pred == target
    true_positives = torch.bincount(target[correct], minlength=num_classes)
    support = torch.bincount(target, minlength=num_classes) + torch.bincount(
        pred, minlength=num_classes
    )
    return _f1_from_counts(true_positives, support, int(correct.sum()), pred.numel())


@dataclass(frozen=True)
class ProbeScores:
    """Scores (percent) of the linear probe chosen on validation by ``metric``, its weight
    decay, and the number of labelled nodes it was fitted, chosen and tested on. Micro- and
    macro-F1 always (over the labels of a multi-label target); ROC-AUC for binary labels (NaN
    otherwise); ``majority``: the test nodes' majority-class rate, what micro-F1 must beat
    (NaN for multi-label targets)."""

    val_micro: float
    val_macro: float
    test_micro: float
    test_macro: float
    weight_decay: float
    num_train: int
    num_val: int
    num_test: int
    metric: str = "micro_f1"
    val_roc_auc: float = math.nan
    test_roc_auc: float = math.nan
    majority: float = math.nan

    @property
    def val_score(self) -> float:
        """The validation figure that chose: ``metric``'s."""
        return self.score("val")

    @property
    def test_score(self) -> float:
        """The test figure of ``metric``."""
        return self.score("test")

    def figures(self) -> dict[str, float]:
        """The figures metrics.json holds for the probe: ``val_`` / ``test_`` micro- and
        macro-F1, ROC-AUC where the labels are binary, the majority-class rate where they are
        single-label (JSON has no NaN: an absent figure is an absent key)."""
        out = {"val_micro_f1": self.val_micro, "val_macro_f1": self.val_macro,
               "test_micro_f1": self.test_micro, "test_macro_f1": self.test_macro,
               "val_roc_auc": self.val_roc_auc, "test_roc_auc": self.test_roc_auc,
               "majority_rate": self.majority}
        return {k: v for k, v in out.items() if not math.isnan(v)}

    def extras(self) -> dict[str, float]:
        """What else a seed records of its chosen probe."""
        return {"probe_weight_decay": self.weight_decay}

    def score(self, part: str, metric: str | None = None) -> float:
        """``part`` (val / test)'s figure of ``metric`` (default: the one that chose)."""
        field = {"micro_f1": "micro", "macro_f1": "macro", "roc_auc": "roc_auc"}[
            metric or self.metric]
        return float(getattr(self, f"{part}_{field}"))


def fit_logreg(
    x: Tensor,
    y: Tensor,
    num_classes: int,
    weight_decays: Sequence[float],
    epochs: int,
    lr: float,
    weight: Tensor,
    bias: Tensor,
    *,
    multilabel: bool = False,
) -> tuple[Tensor, Tensor]:
    """Train one softmax regression per weight decay, all at once, from a shared initialisation
    (``multilabel``: one logistic regression per label, y [n, C] 0/1, with mean binary
    cross-entropy over nodes, summed over labels: the residual is ``sigmoid - y``).

    Equivalent to training ``nn.Linear(D, C)`` (initial ``weight`` [C, D] and ``bias`` [C]) with
    mean cross-entropy and ``torch.optim.Adam(lr=lr, weight_decay=wd)`` for each ``wd``, full
    batch. The G classifiers are packed side by side into one [D, G*C] matrix and the gradient
    is written out analytically (``X^T (softmax - onehot) / n + wd * W``): because Adam is
    elementwise, one optimiser over the packed tensor is exactly G independent optimisers, and
    skipping autograd makes the grid about as cheap as a single model.
    Returns the packed weight [D, G*C] and bias [G*C]; logits of group g are columns g*C:(g+1)*C.
    """
    n = x.shape[0]
    groups = len(weight_decays)
    packed_w = weight.t().repeat(1, groups).contiguous()
    packed_b = bias.repeat(groups)
    decay = torch.tensor(weight_decays, dtype=x.dtype, device=x.device).repeat_interleave(
        num_classes
    )
    target = (y if multilabel else F.one_hot(y, num_classes)).to(x.dtype).repeat(1, groups)
    x_t = x.t()  # a view: BLAS reads it transposed, no second copy of the training rows
    optimizer = torch.optim.Adam([packed_w, packed_b], lr=lr)
    for _ in range(epochs):
        logits = torch.addmm(packed_b, x, packed_w)
        prob = logits.sigmoid() if multilabel else \
            logits.view(n, groups, num_classes).softmax(dim=-1).view(n, -1)
        residual = (prob - target) / n
        packed_w.grad = torch.addmm(decay * packed_w, x_t, residual)
        packed_b.grad = residual.sum(dim=0) + decay * packed_b
        optimizer.step()
    return packed_w, packed_b


def _normalised_rows(embeddings: Tensor, index: Tensor) -> Tensor:
    """Rows ``index`` of the embeddings, L2-normalised: exactly those rows of
    ``F.normalize(embeddings.float(), dim=1)``, without normalising every row."""
    rows = embeddings.index_select(0, index).float()
    return rows.div_(rows.norm(p=2, dim=1, keepdim=True).clamp_min(1e-12))


def _training_rows(embeddings: Tensor, train: Tensor, scratch: Scratch | None) -> Tensor:
    """The probe's training rows, L2-normalised: in memory, or written PROBE_CHUNK_ROWS at a
    time into a ``scratch`` buffer."""
    if scratch is None:
        return _normalised_rows(embeddings, train)
    rows = scratch(train.numel(), embeddings.size(1))
    for lo in range(0, train.numel(), PROBE_CHUNK_ROWS):
        part = train[lo: lo + PROBE_CHUNK_ROWS]
        rows[lo: lo + part.numel()] = _normalised_rows(embeddings, part)
    return rows


class _GroupCounts:
    """``f1_scores``'s counts for G classifiers at once, accumulated over chunks of nodes."""

    def __init__(self, groups: int, num_classes: int, device: torch.device) -> None:
        self.groups, self.num_classes = groups, num_classes
        self.offset = torch.arange(groups, device=device) * num_classes
        self.true_positives = torch.zeros(groups * num_classes, dtype=torch.long, device=device)
        self.predicted = torch.zeros_like(self.true_positives)
        self.targets = torch.zeros(num_classes, dtype=torch.long, device=device)
        self.correct = torch.zeros(groups, dtype=torch.long, device=device)
        self.total = 0

    def add(self, pred: Tensor, target: Tensor) -> None:
        """``pred`` [n, G] (each group's class per node), ``target`` [n]."""
        size = self.groups * self.num_classes
        hit = pred == target.unsqueeze(1)
        self.true_positives += torch.bincount((target.unsqueeze(1) + self.offset)[hit],
                                              minlength=size)
        self.predicted += torch.bincount((pred + self.offset).flatten(), minlength=size)
        self.targets += torch.bincount(target, minlength=self.num_classes)
        self.correct += hit.sum(dim=0)
        self.total += target.numel()

    def scores(self, group: int) -> tuple[float, float]:
        """(micro-F1, macro-F1) of one group, as ``f1_scores`` on all nodes added."""
        cls = slice(group * self.num_classes, (group + 1) * self.num_classes)
        return _f1_from_counts(self.true_positives[cls], self.predicted[cls] + self.targets,
                               int(self.correct[group]), self.total)


class _LabelCounts:
    """Per-label true positives, predicted and true counts of G multi-label classifiers
    (each label decided at logit > 0), accumulated over chunks of nodes."""

    def __init__(self, groups: int, num_labels: int, device: torch.device) -> None:
        self.true_positives = torch.zeros(groups, num_labels, dtype=torch.long, device=device)
        self.predicted = torch.zeros_like(self.true_positives)
        self.targets = torch.zeros(num_labels, dtype=torch.long, device=device)

    def add(self, logits: Tensor, target: Tensor) -> None:
        """``logits`` [n, G, C], ``target`` [n, C] 0/1."""
        pred = logits > 0
        truth = target.bool().unsqueeze(1)
        self.true_positives += (pred & truth).sum(dim=0)
        self.predicted += pred.sum(dim=0)
        self.targets += target.long().sum(dim=0)

    def scores(self, group: int) -> tuple[float, float]:
        """(micro-F1, macro-F1) over the labels: 2 TP / (predicted + true), pooled over every
        (node, label) decision or averaged over the labels present in either."""
        tp, support = self.true_positives[group], self.predicted[group] + self.targets
        micro = 100.0 * 2.0 * int(tp.sum()) / max(1, int(support.sum()))
        present = support > 0
        macro = 100.0 * (2.0 * tp[present].double() / support[present].double()).mean().item()
        return micro, macro if bool(present.any()) else math.nan


class _Evaluated:
    """What the probe's G classifiers scored on a set of nodes, added chunk by chunk: F1
    counts, and for binary labels each node's score (logit of class 1 minus class 0) for
    ROC-AUC, [n, G] floats."""

    def __init__(self, groups: int, num_classes: int, device: torch.device,
                 multilabel: bool) -> None:
        self.counts = (_LabelCounts(groups, num_classes, device) if multilabel
                       else _GroupCounts(groups, num_classes, device))
        self.multilabel, self.binary = multilabel, num_classes == 2 and not multilabel
        self.margins: list[Tensor] = []
        self.labels: list[Tensor] = []

    def add(self, logits: Tensor, target: Tensor) -> None:
        """``logits`` [n, G, C]; ``target`` [n] class ids or [n, C] 0/1."""
        self.counts.add(logits if self.multilabel else logits.argmax(-1), target)
        if self.binary:
            self.margins.append(logits[..., 1] - logits[..., 0])
            self.labels.append(target)

    def scores(self, group: int) -> tuple[float, float, float]:
        """(micro-F1, macro-F1, ROC-AUC) of one classifier; ROC-AUC NaN unless binary."""
        micro, macro = self.counts.scores(group)
        if not self.binary:
            return micro, macro, math.nan
        margins = torch.cat(self.margins)[:, group]
        return micro, macro, roc_auc(margins, torch.cat(self.labels))


def linear_probe(embeddings: Tensor, y: Tensor, split: Split, *,
                 weight_decays: Sequence[float] = (0.0, 1e-4, 1e-3, 1e-2), epochs: int = 300,
                 lr: float = 0.01, seed: int = 0, metric: str = "auto",
                 scratch: Scratch | None = None) -> ProbeScores:
    """Score frozen [N, D] ``embeddings`` by logistic regression, with weight decay chosen on
    validation.

    ``y`` is [N] class ids (multi-class, or binary: two classes) or an [N, C] 0/1 multi-label
    target (then one logistic regression per label, one-vs-rest, each label decided at
    probability 0.5). ``metric`` (``edgegcl.evaluation.metrics.NODE_METRICS``, or ``auto``:
    ROC-AUC for binary labels, micro-F1 otherwise) is what chooses among ``weight_decays``.

    Rows are L2-normalised (so the scale of the encoder output does not interact with the
    weight-decay grid), then one classifier per weight decay is trained with Adam (``epochs``
    steps at ``lr``) on ``split.train`` only. The classifier with the best validation
    ``metric`` (ties: the first in the grid) is kept and its validation and test scores are
    reported; test labels influence nothing but the reported test numbers. Initialisation is
    ``nn.Linear``'s uniform ``U(-1/sqrt(D), 1/sqrt(D))`` from a local generator seeded with
    ``seed``: the result is deterministic and the global RNG is left alone. Runs on
    ``embeddings.device``. Memory beyond the embeddings (which may be memory-mapped,
    ``model.npy_embeddings``): the training rows (in a ``scratch`` buffer when one is given,
    ``edgegcl.scratch.mapped_scratch``: a file, for a graph on disk, where they grow with
    N); validation and test rows are normalised and classified PROBE_CHUNK_ROWS at a time
    and only their counts are kept.

    Example:
        >>> y = torch.arange(200) % 4
        >>> z = torch.nn.functional.one_hot(y, 4).float() + 0.1 * torch.randn(200, 4)
        >>> linear_probe(z, y, random_split(200, seed=0)).test_micro > 90
        True
    """
    _check_probe(embeddings, y, split, weight_decays, epochs, lr)
    kind = label_kind(y)
    chosen = resolve_metric(metric, kind)
    embeddings = embeddings.detach()
    device, multilabel = embeddings.device, kind == "multilabel"
    y = y.to(device=device, dtype=torch.long)
    train, val, test = (idx.to(device) for idx in (split.train, split.val, split.test))
    num_classes = y.shape[1] if multilabel else max(2, int(y.max()) + 1)
    weight, bias = _initial_classifier(num_classes, embeddings.shape[1], seed)
    packed = fit_logreg(_training_rows(embeddings, train, scratch), y[train], num_classes,
                        weight_decays, epochs, lr, weight.to(device), bias.to(device),
                        multilabel=multilabel)
    classify = partial(_classified, embeddings, y, packed, len(weight_decays), multilabel)
    on_val, on_test = classify(val), classify(test)
    val_scores = [on_val.scores(g) for g in range(len(weight_decays))]
    pick = {"micro_f1": 0, "macro_f1": 1, "roc_auc": 2}[chosen]
    best = max(range(len(weight_decays)), key=lambda g: (_finite(val_scores[g][pick]), -g))
    test_scores = on_test.scores(best)
    return ProbeScores(val_micro=val_scores[best][0], val_macro=val_scores[best][1],
                       test_micro=test_scores[0], test_macro=test_scores[1],
                       weight_decay=float(weight_decays[best]), num_train=train.numel(),
                       num_val=val.numel(), num_test=test.numel(), metric=chosen,
                       val_roc_auc=val_scores[best][2], test_roc_auc=test_scores[2],
                       majority=math.nan if multilabel else majority_rate(y[test]))


def _initial_classifier(num_classes: int, dim: int, seed: int) -> tuple[Tensor, Tensor]:
    """``nn.Linear(dim, num_classes)``'s weight and bias, U(-1/sqrt(D), 1/sqrt(D)), from a
    generator seeded with ``seed`` (weight first)."""
    generator = torch.Generator().manual_seed(seed)
    bound = 1.0 / math.sqrt(dim)
    weight = (torch.rand(num_classes, dim, generator=generator) * 2 - 1) * bound
    bias = (torch.rand(num_classes, generator=generator) * 2 - 1) * bound
    return weight, bias


def _classified(embeddings: Tensor, y: Tensor, packed: tuple[Tensor, Tensor], groups: int,
                multilabel: bool, index: Tensor) -> _Evaluated:
    """The counts of every weight decay's classifier (``packed``: weights [D, groups x C] and
    biases) on the nodes ``index``, classified PROBE_CHUNK_ROWS at a time in node order: what
    is counted does not depend on the order, and embeddings on disk (a mapped file) are then
    read front to back instead of a row here and there."""
    packed_w, packed_b = packed
    num_classes = packed_b.numel() // groups
    out = _Evaluated(groups, num_classes, embeddings.device, multilabel)
    with torch.no_grad():
        for part in torch.sort(index).values.split(PROBE_CHUNK_ROWS):
            logits = torch.addmm(packed_b, _normalised_rows(embeddings, part), packed_w)
            out.add(logits.view(part.numel(), groups, num_classes), y[part])
    return out


def _finite(value: float) -> float:
    """A score to maximise: NaN (one class absent from validation) ranks last."""
    return -math.inf if math.isnan(value) else value


def _check_probe(embeddings: Tensor, y: Tensor, split: Split, weight_decays: Sequence[float],
                 epochs: int, lr: float) -> None:
    """``linear_probe``'s arguments, or a ValueError saying which is wrong."""
    if embeddings.dim() != 2 or y.dim() not in (1, 2) or y.shape[0] != embeddings.shape[0]:
        raise ValueError(f"need embeddings [N, D] and labels [N] (or [N, C] 0/1), "
                         f"got {tuple(embeddings.shape)} and {tuple(y.shape)}")
    if not weight_decays or min(weight_decays) < 0:
        raise ValueError(
            f"weight_decays must be non-empty and non-negative, got {tuple(weight_decays)}")
    if epochs < 1 or lr <= 0:
        raise ValueError(f"need epochs >= 1 and lr > 0, got {epochs=}, {lr=}")
    if split.train.numel() == 0 or split.val.numel() == 0 or split.test.numel() == 0:
        raise ValueError("train, validation and test sets must all be non-empty")


@dataclass(frozen=True)
class Selection:
    """The checkpoint chosen on validation (argmax of its metric's validation figure) and its
    scores."""

    epoch: int
    scores: ProbeScores


def select_checkpoint(history: Sequence[tuple[int, ProbeScores]]) -> Selection:
    """Choose among ``(epoch, scores)`` checkpoints by the validation figure of their metric
    (``ProbeScores.val_score``; ties: earliest epoch); test scores play no part."""
    if not history:
        raise ValueError("history is empty: evaluate at least one checkpoint")
    epoch, scores = max(history, key=lambda item: (_finite(item[1].val_score), -item[0]))
    return Selection(epoch=epoch, scores=scores)
