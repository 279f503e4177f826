"""The validation figures each task is scored with, by name: the standard library alone, so
that a configuration refuses a figure its task has none of before anything loads or trains."""

from __future__ import annotations

NODE_METRICS: tuple[str, ...] = ("micro_f1", "macro_f1", "roc_auc")
"""What chooses on a node task: the probe's micro- or macro-F1, or ROC-AUC (binary labels)."""
HITS_K: tuple[int, ...] = (20, 50, 100)
"""Hits@K's K, as OGB's link tasks report them."""
LINK_METRICS: tuple[str, ...] = ("auc", "ap", *(f"hits@{k}" for k in HITS_K))
"""What chooses on the link task: the validation pairs' ROC-AUC, AP or Hits@K."""
METRICS: tuple[str, ...] = ("auto", *NODE_METRICS, *LINK_METRICS)


def task_metric_problem(metric: str, task: str) -> str | None:
    """Why ``metric`` cannot choose on ``task`` (``node`` or ``link``), in one line with the
    fix; None when it can (``auto`` always can).

    Example:
        >>> task_metric_problem("ap", "node")[:45]
        '--metric ap scores links, but this run\\'s task'
        >>> task_metric_problem("auc", "link") is None
        True
    """
    if task == "link" and metric in NODE_METRICS:
        return (f"--metric {metric} scores node labels, but --task link scores pairs; use one "
                f"of {', '.join(LINK_METRICS)} (or auto)")
    if task == "node" and metric in LINK_METRICS:
        return (f"--metric {metric} scores links, but this run's task is node labels; use one "
                f"of {', '.join(NODE_METRICS)} (or auto), or --task link")
    return None
