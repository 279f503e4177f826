"""The validation figures each task is scored with, by name: the standard library alone, so
that a configuration refuses a figure its task has none of before anything loads or trains
(edgegcl.training.task)."""

from __future__ import annotations

NODE_METRICS: tuple[str, ...] = ("micro_f1", "macro_f1", "roc_auc")
"""What chooses on a node task: the probe's micro- or macro-F1, or ROC-AUC (binary labels)."""
HITS_K: tuple[int, ...] = (20, 50, 100)
"""Hits@K's K, as OGB's link tasks report them."""
LINK_METRICS: tuple[str, ...] = ("auc", "ap", *(f"hits@{k}" for k in HITS_K))
"""What chooses on the link task: the validation pairs' ROC-AUC, AP or Hits@K."""
METRICS: tuple[str, ...] = ("auto", *NODE_METRICS, *LINK_METRICS)

