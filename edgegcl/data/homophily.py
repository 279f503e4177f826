"""How much a graph's edges join nodes that are alike: by their labels, and without labels.

``adjusted_homophily`` is the share of edges joining nodes of one class, corrected for what
the class sizes alone would give (Platonov et al. 2023): 0 for edges that ignore the classes,
1 when every edge stays within its class, whatever the classes' balance (a graph 80 % of one
class has edge homophily about 0.68 with edges drawn at random, adjusted 0). An ``auto`` run
reads it on the seed's training and validation nodes to settle clear cases without a search
(edgegcl.training.choice). ``feature_agreement`` compares the cosine similarity of the features of linked nodes with
that of random pairs of nodes: about 0 when edges join nodes no more alike than chance (a
graph whose neighbours disagree), up to 1 when linked nodes have the same features. The GCN's
averaging over neighbours helps where they agree and erases a node's own signal where they do
not; an ``auto`` run on an unlabelled graph reads this number to choose its encoder
(edgegcl.training.choice).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["Homophily", "adjusted_homophily", "feature_agreement"]

PAIRS = 1 << 17
"""Linked and random pairs compared, at most (a sample: its mean's error is far below the
differences between graphs, ~1e-3)."""
CHUNK_FLOATS = 1 << 22
"""Feature values of the pairs compared at a time (16 MiB per side)."""


def feature_agreement(x: Tensor, edge_index: Tensor, seed: int = 0,
                      pairs: int = PAIRS) -> float:
    """(s_linked - s_random) / (1 - s_random): s the mean cosine similarity of the feature
    rows of linked nodes (a sample of ``pairs`` edges) and of uniformly random pairs of
    distinct rows, so 0 means linked nodes are as alike as random ones, 1 that they are equal.
    The draws come from a local generator seeded with ``seed``.

    Example:
        >>> x = torch.eye(4).repeat_interleave(2, dim=0)  # nodes 2k and 2k+1 alike
        >>> edges = torch.tensor([[0, 2, 4, 6], [1, 3, 5, 7]])
        >>> feature_agreement(x, edges) > 0.9
        True
    """
    n = x.size(0)
    generator = torch.Generator().manual_seed(seed)
    if edge_index.size(1) == 0 or n < 2:
        return 0.0
    picked = torch.randint(edge_index.size(1), (min(pairs, edge_index.size(1)),),
                           generator=generator)
    src, dst = edge_index[0, picked], edge_index[1, picked]
    a = torch.randint(n, (pairs,), generator=generator)
    b = (a + torch.randint(1, n, (pairs,), generator=generator)) % n  # another node than a

    step = max(1, CHUNK_FLOATS // x.size(1))

    def similarity(u: Tensor, v: Tensor) -> float:
        total = 0.0
        for lo in range(0, u.numel(), step):  # chunks of pairs: memory bounded by the chunk
            rows_u = x.index_select(0, u[lo:lo + step]).float()
            rows_v = x.index_select(0, v[lo:lo + step]).float()
            total += float(torch.nn.functional.cosine_similarity(rows_u, rows_v, dim=1).sum())
        return total / u.numel()

    linked, random = similarity(src, dst), similarity(a, b)
    return (linked - random) / max(1.0 - random, 1e-6)


@dataclass(frozen=True)
class Homophily:
    """Adjusted homophily ``value`` on ``edges`` directed edges, and its standard error (the
    binomial one of the same-class share, scaled as the adjustment scales it)."""

    value: float
    edges: int
    standard_error: float


def adjusted_homophily(y: Tensor, edge_index: Tensor, nodes: Tensor) -> Homophily | None:
    """(h - sum_k p_k^2) / (1 - sum_k p_k^2) over the edges between ``nodes`` (self-loops left
    out): h the share of those edges whose ends share a class of ``y`` (class ids, one per
    node), p_k the share of the edges' ends in class k (Platonov et al. 2023, adjusted
    homophily). Nodes labelled -1 (no label) are left out. None when no such edge exists or
    their ends all have one class.

    Example:
        >>> y = torch.tensor([0, 0, 1, 1])
        >>> within = torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]])
        >>> adjusted_homophily(y, within, torch.arange(4)).value
        1.0
    """
    chosen = torch.zeros(y.size(0), dtype=torch.bool, device=y.device)
    chosen[nodes.to(y.device)] = True
    chosen &= y >= 0  # a node without a label (-1) has no class to share
    src, dst = edge_index.to(y.device)
    keep = chosen[src] & chosen[dst] & (src != dst)
    a, b = y[src[keep]], y[dst[keep]]
    m = int(a.numel())
    if m == 0:
        return None
    same = float((a == b).double().mean())
    ends = torch.cat([a, b])
    p = torch.bincount(ends).double() / ends.numel()
    expected = float((p * p).sum())
    if expected >= 1.0 - 1e-12:
        return None
    scale = 1.0 - expected
    return Homophily((same - expected) / scale, m,
                     math.sqrt(max(same * (1.0 - same), 0.0) / m) / scale)
