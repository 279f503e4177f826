"""The figures each task's users read, computed as their benchmarks compute them.

- node labels: micro- and macro-F1 (multi-class, ``edgegcl.evaluation.probe.f1_scores``),
  ROC-AUC for binary labels (the heterophilous-graph benchmark's tolokers and minesweeper,
  where a majority class of 78-80 % makes micro-F1 meaningless), the majority-class rate beside
  micro-F1, micro- and macro-F1 over the labels of a multi-label target;
- links: ROC-AUC, average precision (GAE's pair) and Hits@K against sampled non-edges (OGB's
  link evaluators).

``METRICS`` names what can choose a checkpoint and an encoder (``--metric``); ``auto`` takes
ROC-AUC for binary labels and micro-F1 otherwise (``resolve_metric``). Every figure is a
percentage. All functions are vectorised over nodes or pairs.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from edgegcl.errors import UsageError
from edgegcl.evaluation.names import HITS_K, LINK_METRICS, METRICS, NODE_METRICS

__all__ = ["LABEL_KINDS", "LINK_METRICS", "METRICS", "NODE_METRICS", "LabelKind",
           "average_precision", "hits_at_k", "label_kind", "labels_line", "majority_rate",
           "metric_name", "resolve_metric", "roc_auc", "standard_error"]

LabelKind = Literal["multiclass", "binary", "multilabel"]
LABEL_KINDS: tuple[str, ...] = ("multiclass", "binary", "multilabel")
_NAMES = {"micro_f1": "micro-F1", "macro_f1": "macro-F1", "roc_auc": "ROC-AUC", "auc": "AUC",
          "ap": "AP", **{f"hits@{k}": f"Hits@{k}" for k in HITS_K}}


def metric_name(metric: str) -> str:
    """How a metric is printed: ``roc_auc`` -> ``ROC-AUC``."""
    return _NAMES.get(metric, metric)


def label_kind(y: Tensor) -> LabelKind:
    """``multilabel`` for an [N, C] 0/1 target, ``binary`` for [N] labels of at most two
    classes (0 and 1), ``multiclass`` otherwise.

    Example:
        >>> label_kind(torch.tensor([0, 1, 1])), label_kind(torch.tensor([0, 2, 1]))
        ('binary', 'multiclass')
    """
    if y.dim() == 2:
        return "multilabel"
    return "binary" if y.numel() == 0 or int(y.max()) <= 1 else "multiclass"


def resolve_metric(metric: str, kind: LabelKind) -> str:
    """The node metric that chooses for labels of ``kind``: ``auto`` is ROC-AUC for binary
    labels and micro-F1 otherwise; ROC-AUC for other labels, or a link metric, is refused."""
    if metric == "auto":
        return "roc_auc" if kind == "binary" else "micro_f1"
    if metric == "roc_auc" and kind != "binary":
        raise UsageError(f"--metric roc_auc needs binary labels, but these are {kind}; use "
                         "--metric micro_f1 or macro_f1 (or auto)")
    if metric not in NODE_METRICS:
        raise UsageError(f"--metric {metric} scores links, not node labels; use one of "
                         f"{', '.join(NODE_METRICS)} (or auto), or --task link")
    return metric


def _average_ranks(scores: Tensor) -> Tensor:
    """Each score's 1-based rank in ascending order, tied scores sharing their mean rank."""
    order = torch.argsort(scores)
    _, inverse, counts = torch.unique_consecutive(scores[order], return_inverse=True,
                                                  return_counts=True)
    last = counts.cumsum(0).double()
    mean_rank = last - (counts.double() - 1.0) / 2.0
    ranks = torch.empty(scores.numel(), dtype=torch.float64, device=scores.device)
    ranks[order] = mean_rank[inverse]
    return ranks


def roc_auc(scores: Tensor, labels: Tensor) -> float:
    """ROC-AUC in percent: P(s+ > s-) + P(s+ = s-) / 2 over positive / negative pairs, as the
    Mann-Whitney U of the average ranks (sklearn's roc_auc_score, ties included); NaN when
    one class is absent.

    Example:
        >>> roc_auc(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([0, 0, 1, 1]))
        75.0
    """
    positive = labels.bool().flatten()
    n_pos = int(positive.sum())
    n_neg = positive.numel() - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    ranks = _average_ranks(scores.detach().flatten().double())
    u = float(ranks[positive].sum()) - n_pos * (n_pos + 1) / 2.0
    return 100.0 * u / (n_pos * n_neg)


def average_precision(scores: Tensor, labels: Tensor) -> float:
    """Average precision in percent: sum over thresholds of (R_k - R_{k-1}) P_k, tied scores
    one threshold (sklearn's average_precision_score); NaN without positives.

    Example:
        >>> round(average_precision(torch.tensor([0.1, 0.4, 0.35, 0.8]),
        ...                         torch.tensor([0, 0, 1, 1])), 2)
        83.33
    """
    y = labels.bool().flatten()
    n_pos = int(y.sum())
    if n_pos == 0:
        return math.nan
    s = scores.detach().flatten().double()
    order = torch.argsort(s, descending=True)
    s, y = s[order], y[order]
    last = torch.ones_like(y)
    last[:-1] = s[1:] != s[:-1]  # the last pair of each run of tied scores
    hits = torch.cumsum(y.double(), 0)[last]
    seen = (torch.nonzero(last).flatten() + 1).double()
    precision, recall = hits / seen, hits / n_pos
    gained = torch.diff(recall, prepend=recall.new_zeros(1))
    return 100.0 * float((gained * precision).sum())


def hits_at_k(positive: Tensor, negative: Tensor, k: int) -> float:
    """Hits@K in percent, as OGB's link evaluators: the share of positive pairs scored above
    the K-th best negative pair (every positive when there are fewer than K negatives).

    Example:
        >>> hits_at_k(torch.tensor([0.9, 0.5]), torch.tensor([0.8, 0.1, 0.0]), k=1)
        50.0
    """
    if positive.numel() == 0:
        return math.nan
    if negative.numel() < k:
        return 100.0
    kth = torch.topk(negative.detach().flatten(), k).values[-1]
    return 100.0 * float((positive.detach() > kth).double().mean())


def majority_rate(y: Tensor) -> float:
    """The micro-F1 (accuracy) of always predicting the most frequent class of ``y`` [n], in
    percent: what a micro-F1 must beat to say anything.

    Example:
        >>> majority_rate(torch.tensor([0, 0, 0, 1]))
        75.0
    """
    if y.numel() == 0:
        return math.nan
    return 100.0 * int(torch.bincount(y.flatten().long()).max()) / y.numel()


def labels_line(y: Tensor, metric: str) -> str:
    """What the labels are and which validation figure chooses, in one line (a refusal of a
    metric they cannot have is a UsageError); class ids of -1 are nodes without a label,
    counted apart.

    Example:
        >>> labels_line(torch.tensor([0, 1, 1, 1]), "auto")
        'labels: binary, 75.0 % positive; checkpoints and the encoder chosen on validation ROC-AUC (--metric)'
    """
    given = y if y.dim() != 1 else y[y >= 0]  # class ids of -1: nodes without a label
    kind = label_kind(given)
    chosen = metric_name(resolve_metric(metric, kind))
    if kind == "binary":
        what = f"binary, {100.0 * float(given.double().mean()):.1f} % positive"
    elif kind == "multiclass":
        what = f"{int(given.max()) + 1} classes"
    else:
        what = f"{y.shape[1]} labels per node (multi-label)"
    if given.size(0) < y.size(0):
        what += (f", on {given.size(0)} of {y.size(0)} nodes (the {y.size(0) - given.size(0)} "
                 "without a label are in no split)")
    return f"labels: {what}; checkpoints and the encoder chosen on validation {chosen} (--metric)"


def standard_error(percent: float, nodes: int, metric: str = "micro_f1",
                   positives: int = 0) -> float:
    """The standard error, in points, of a validation figure of ``percent`` measured on
    ``nodes`` nodes, its spread from one validation set to another: sqrt(p (1 - p) / n) for
    an F1 (a proportion's), Hanley and McNeil's for a ROC-AUC A with n1 = ``positives`` and
    n2 = the others: sqrt((A (1 - A) + (n1 - 1)(Q1 - A^2) + (n2 - 1)(Q2 - A^2)) / (n1 n2)),
    Q1 = A / (2 - A), Q2 = 2 A^2 / (1 + A)."""
    p = min(max(percent / 100.0, 0.0), 1.0) if math.isfinite(percent) else 0.0
    if metric in ("roc_auc", "auc"):
        n1, n2 = max(positives, 1), max(nodes - positives, 1)
        q1, q2 = p / (2.0 - p), 2.0 * p * p / (1.0 + p)
        var = (p * (1 - p) + (n1 - 1) * (q1 - p * p) + (n2 - 1) * (q2 - p * p)) / (n1 * n2)
        return 100.0 * math.sqrt(max(var, 0.0))
    return 100.0 * math.sqrt(p * (1.0 - p) / max(nodes, 1))
