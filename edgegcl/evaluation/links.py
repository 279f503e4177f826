"""Link prediction: which pairs of nodes connect, judged as GAE and OGB judge it.

Before training, the graph's undirected edges are split, seeded, into train / validation /
test pairs (85 / 5 / 10 by default, as GAE), and as many non-edges of the whole graph are
drawn for validation and for test (``link_split``). The encoder trains on the training edges
alone: no validation or test edge reaches message passing, the views or the negatives'
candidates. A checkpoint's embeddings then score the held-out pairs three ways
(``SCORERS``): their cosine similarity (what InfoNCE trains), their inner product (GAE's
decoder; both computable on a device from ``edgegcl-embed``'s output), and a link probe, a
logistic regression on the Hadamard product z_u * z_v fitted on training edges against
non-edges of the training graph, with its weight decay chosen on validation. Each is scored
by ROC-AUC, average precision and Hits@K (edgegcl.evaluation.metrics). Beside them stand the
raw features under the same scorers and a structural heuristic of the training edges
(Adamic-Adar). Every pass over pairs is chunked: memory grows with the pairs, never with
N x N.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.sparse import csr_matrix
from torch import Tensor

from edgegcl.errors import UsageError
from edgegcl.evaluation.metrics import HITS_K, average_precision, hits_at_k, roc_auc
from edgegcl.evaluation.probe import fit_logreg

__all__ = ["LINK_PROBE_MAX_PAIRS", "PAIR_CHUNK", "SCORERS", "LinkScores", "LinkSplit",
           "adamic_adar", "link_scores", "link_split", "pair_figures", "sample_non_edges"]

SCORERS: tuple[str, ...] = ("cosine", "inner", "probe", "decoder")
"""How a pair is scored from its two embeddings (``decoder``: the link decoder an
edge-objective run trained, edgegcl.nn.decoder, where there is one)."""
PAIR_CHUNK = 1 << 12
"""Pairs gathered and scored at a time: two [chunk, D] blocks and the scorer's temporaries,
8 MiB at 256 wide, so the pairs' scoring stays small beside the graph (at 1 << 16 its peak,
325 MiB at 256 wide, was most of a 200k-node link run's growth over the node task's)."""
LINK_PROBE_MAX_PAIRS = 5_000
"""Training edges (and as many non-edges) the link probe is fitted on at most."""
LINK_PROBE_DECAYS = (0.0, 1e-4, 1e-3, 1e-2)
"""The link probe's weight decays, chosen on the validation pairs' AUC."""
LINK_PROBE_EPOCHS = 200
"""Adam steps of the link probe (full batch, lr 0.01)."""


@dataclass(frozen=True)
class LinkSplit:
    """A split of a graph's undirected edges, each pair [2, n] with row 0 < row 1: training
    edges, validation and test edges with non-edges each: seeded (``link_split``: as many
    non-edges of the whole graph, disjoint from every edge and from each other), or the
    graph file's own (``given``, ``seed`` -1)."""

    num_nodes: int
    train: Tensor
    val: Tensor
    val_neg: Tensor
    test: Tensor
    test_neg: Tensor
    seed: int = 0

    @classmethod
    def given(cls, edge_index: Tensor, num_nodes: int, val: Tensor, val_neg: Tensor,
              test: Tensor, test_neg: Tensor) -> LinkSplit:
        """The split a graph file brings (its held-out pairs checked by
        edgegcl.data.validation.link_pairs: no pair is a training edge): ``edge_index`` as
        given is the training graph, the pairs [2, K] (row 0 < row 1) the held-out sets."""
        return cls(num_nodes, _pairs(_pair_keys(edge_index, num_nodes), num_nodes), val,
                   val_neg, test, test_neg, seed=-1)

    def train_edge_index(self) -> Tensor:
        """The training edges in both directions: the graph the encoder trains on."""
        return torch.cat([self.train, self.train.flip(0)], dim=1)

    def counts(self) -> dict[str, int]:
        return {"train_edges": self.train.size(1), "val_edges": self.val.size(1),
                "val_non_edges": self.val_neg.size(1), "test_edges": self.test.size(1),
                "test_non_edges": self.test_neg.size(1)}


def _pair_keys(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Each undirected edge once, as the sorted keys lo * N + hi (self-loops dropped)."""
    lo = torch.minimum(edge_index[0], edge_index[1]).long()
    hi = torch.maximum(edge_index[0], edge_index[1]).long()
    keep = lo != hi
    return torch.unique(lo[keep] * num_nodes + hi[keep])


def _pairs(keys: Tensor, num_nodes: int) -> Tensor:
    return torch.stack([keys // num_nodes, keys % num_nodes])


def sample_non_edges(edge_keys: Tensor, num_nodes: int, count: int,
                     generator: torch.Generator) -> Tensor:
    """``count`` distinct unordered pairs of distinct nodes that are not in ``edge_keys``
    (sorted keys lo * N + hi), drawn uniformly, as [2, count] with row 0 < row 1; a graph with
    fewer non-edges is one UsageError line."""
    available = num_nodes * (num_nodes - 1) // 2 - edge_keys.numel()
    if count > available:
        raise UsageError(f"the link task needs {count} non-edges for validation and test but "
                         f"the graph has {available}; it is too dense for a held-out edge "
                         "split (use --task node)")
    found = torch.empty(0, dtype=torch.long)
    while found.numel() < count:
        need = count - found.numel()
        draw = int(need * 1.2) + 64
        a = torch.randint(0, num_nodes, (draw,), generator=generator)
        b = torch.randint(0, num_nodes, (draw,), generator=generator)
        keys = torch.minimum(a, b) * num_nodes + torch.maximum(a, b)
        keys = keys[a != b]
        at = torch.searchsorted(edge_keys, keys).clamp_max(max(edge_keys.numel() - 1, 0))
        if edge_keys.numel():
            keys = keys[edge_keys[at] != keys]
        found = torch.unique(torch.cat([found, keys]))  # distinct pairs
    # a uniform subset of distinct uniform draws, in random order
    found = found[torch.randperm(found.numel(), generator=generator)[:count]]
    return _pairs(found, num_nodes)


def link_split(edge_index: Tensor, num_nodes: int, seed: int, val: float = 0.05,
               test: float = 0.1) -> LinkSplit:
    """Split the undirected edges of a graph at random (seeded) into train / validation /
    test, ``floor(val * m)`` and ``floor(test * m)`` of its m edges held out (at least one
    each, and one left to train on), with as many non-edges drawn for each held-out set.

    Example:
        >>> ring = torch.stack([torch.arange(40), (torch.arange(40) + 1) % 40])
        >>> s = link_split(ring, 40, seed=0)
        >>> s.train.size(1), s.val.size(1), s.test.size(1), s.test_neg.size(1)
        (34, 2, 4, 4)
    """
    if not (0 < val and 0 < test and val + test < 1):
        raise UsageError(f"the link split needs validation and test shares in (0, 1) with "
                         f"room to train, got {val} and {test}")
    keys = _pair_keys(edge_index, num_nodes)
    m = keys.numel()
    if m < 3:
        raise UsageError(f"the link task holds out edges for validation and test, but the "
                         f"graph has {m} undirected edge(s); it needs at least 3 (or --task "
                         "node)")
    n_test = min(m - 2, max(1, math.floor(test * m)))
    n_val = min(m - 1 - n_test, max(1, math.floor(val * m)))
    generator = torch.Generator().manual_seed(seed)
    shuffled = keys[torch.randperm(m, generator=generator)]
    held_test, held_val = shuffled[:n_test], shuffled[n_test:n_test + n_val]
    train = shuffled[n_test + n_val:].sort().values
    negatives = sample_non_edges(keys, num_nodes, n_val + n_test, generator)
    return LinkSplit(num_nodes, _pairs(train, num_nodes), _pairs(held_val.sort().values,
                                                                  num_nodes),
                     negatives[:, :n_val], _pairs(held_test.sort().values, num_nodes),
                     negatives[:, n_val:], seed)


def pair_figures(positive: Tensor, negative: Tensor) -> dict[str, float]:
    """AUC, AP and Hits@K of positive against negative pairs' scores, in percent; Hits@K only
    where there are K negative pairs at least (with fewer, every positive counts as a hit:
    100 whatever the scores, a figure that says nothing)."""
    scores = torch.cat([positive, negative])
    labels = torch.cat([torch.ones_like(positive), torch.zeros_like(negative)])
    out = {"auc": roc_auc(scores, labels), "ap": average_precision(scores, labels)}
    out.update({f"hits@{k}": hits_at_k(positive, negative, k) for k in HITS_K
                if negative.numel() >= k})
    return out


def _rows(z: Tensor, index: Tensor) -> Tensor:
    return z.index_select(0, index).float()


def _pair_scores(z: Tensor, pairs: Tensor, score: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
    """``score(z[u], z[v])`` of each pair, PAIR_CHUNK pairs at a time."""
    out = [score(_rows(z, u), _rows(z, v)) for u, v in zip(pairs[0].split(PAIR_CHUNK),
                                                          pairs[1].split(PAIR_CHUNK))]
    return torch.cat(out) if out else torch.empty(0)


def _cosine(a: Tensor, b: Tensor) -> Tensor:
    return torch.nn.functional.cosine_similarity(a, b, dim=1, eps=1e-12)


def _inner(a: Tensor, b: Tensor) -> Tensor:
    return (a * b).sum(dim=1)


def _hadamard(a: Tensor, b: Tensor) -> Tensor:
    """The link probe's input: the Hadamard product of the L2-normalised embeddings."""
    a = a / a.norm(dim=1, keepdim=True).clamp_min(1e-12)
    b = b / b.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return a * b


@dataclass(frozen=True)
class LinkScores:
    """A checkpoint's link figures (percent): ``val`` and ``test`` by scorer and figure
    (auc, ap, hits@K); ``metric`` the figure that chooses and ``scorer`` the scorer chosen on
    its validation value (ties: the first of SCORERS)."""

    metric: str
    scorer: str
    val: dict[str, dict[str, float]] = field(default_factory=dict)
    test: dict[str, dict[str, float]] = field(default_factory=dict)
    weight_decay: float = 0.0

    @property
    def val_score(self) -> float:
        return self.val[self.scorer][self.metric]

    @property
    def test_score(self) -> float:
        return self.test[self.scorer][self.metric]

    def figures(self) -> dict[str, float]:
        """The flat figures metrics.json holds: the chosen scorer's ``val_<figure>`` and
        ``test_<figure>``, and every scorer's ``test_<figure>_<scorer>``."""
        out = {f"val_{k}": v for k, v in self.val[self.scorer].items()}
        out.update({f"test_{k}": v for k, v in self.test[self.scorer].items()})
        for name, figures in self.test.items():
            out.update({f"test_{k}_{name}": v for k, v in figures.items()})
        return {k: v for k, v in out.items() if not math.isnan(v)}

    def extras(self) -> dict[str, object]:
        """What else a seed records: the scorer chosen on validation, the probe's decay."""
        return {"scorer": self.scorer, "link_probe_weight_decay": self.weight_decay}


def _link_probe(z: Tensor, split: LinkSplit, seed: int) -> tuple[Tensor, float]:
    """The link probe's weight and bias fitted on at most LINK_PROBE_MAX_PAIRS training edges
    and as many non-edges of the training graph, one per weight decay; returns the chosen
    [D + 1] vector (weight, then bias) and its decay, chosen on the validation pairs' AUC."""
    generator = torch.Generator().manual_seed(seed)
    count = min(LINK_PROBE_MAX_PAIRS, split.train.size(1))
    positive = split.train[:, torch.randperm(split.train.size(1), generator=generator)[:count]]
    train_keys = _pair_keys(split.train, split.num_nodes)
    negative = sample_non_edges(train_keys, split.num_nodes, count, generator)
    features = torch.cat([_pair_scores(z, positive, _hadamard),
                          _pair_scores(z, negative, _hadamard)])
    target = torch.cat([torch.ones(count, 1), torch.zeros(count, 1)]).long()
    dim = features.size(1)
    bound = 1.0 / math.sqrt(dim)
    weight = (torch.rand(1, dim, generator=generator) * 2 - 1) * bound
    bias = (torch.rand(1, generator=generator) * 2 - 1) * bound
    packed_w, packed_b = fit_logreg(features, target, 1, LINK_PROBE_DECAYS, LINK_PROBE_EPOCHS,
                                     0.01, weight, bias, multilabel=True)
    best, best_auc = 0, -math.inf
    for g in range(len(LINK_PROBE_DECAYS)):
        w = torch.cat([packed_w[:, g], packed_b[g:g + 1]])
        auc = pair_figures(_probe_scores(z, split.val, w), _probe_scores(z, split.val_neg, w))[
            "auc"]
        if auc > best_auc:
            best, best_auc = g, auc
    return torch.cat([packed_w[:, best], packed_b[best:best + 1]]), LINK_PROBE_DECAYS[best]


def _probe_scores(z: Tensor, pairs: Tensor, w: Tensor) -> Tensor:
    return _pair_scores(z, pairs, lambda a, b: _hadamard(a, b) @ w[:-1] + w[-1])


def link_scores(z: Tensor, split: LinkSplit, metric: str = "auc", seed: int = 0,
                decoder: Callable[[Tensor, Tensor], Tensor] | None = None) -> LinkScores:
    """Score embeddings (or raw features) ``z`` [N, D] on a link split: every scorer's
    validation and test figures (``decoder``: the run's trained link decoder, in eval mode,
    scores them too); the scorer chosen on validation ``metric``.

    Example:
        >>> ring = torch.stack([torch.arange(60), (torch.arange(60) + 1) % 60])
        >>> z = torch.stack([torch.cos(torch.arange(60) / 9.5), torch.sin(torch.arange(60) / 9.5)], 1)
        >>> link_scores(z, link_split(ring, 60, seed=0)).test["cosine"]["auc"] > 90
        True
    """
    z = z.detach()
    probe_w, decay = _link_probe(z, split, seed)
    scorers: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
        "cosine": lambda zz, p: _pair_scores(zz, p, _cosine),
        "inner": lambda zz, p: _pair_scores(zz, p, _inner),
        "probe": lambda zz, p: _probe_scores(zz, p, probe_w)}
    if decoder is not None:
        scorers["decoder"] = lambda zz, p: _pair_scores(zz, p, decoder)
    val = {name: pair_figures(s(z, split.val), s(z, split.val_neg)) for name, s in scorers.items()}
    test = {name: pair_figures(s(z, split.test), s(z, split.test_neg))
            for name, s in scorers.items()}
    chosen = max(val, key=lambda n: (_finite(val[n][metric]), -SCORERS.index(n)))
    return LinkScores(metric, chosen, val, test, decay)


def _finite(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def adamic_adar(split: LinkSplit) -> dict[str, dict[str, float]]:
    """The structural heuristic of the training edges on the validation and test pairs:
    Adamic-Adar, sum over common neighbours w of 1 / log(deg w) (Adamic and Adar 2003);
    ``{"val": figures, "test": figures}``. Row products of a CSR matrix, chunked."""
    n = split.num_nodes
    edges = split.train_edge_index().numpy()
    adjacency = csr_matrix((np.ones(edges.shape[1], np.float64), (edges[0], edges[1])),
                           shape=(n, n))
    degree = np.asarray(adjacency.sum(axis=1)).ravel()
    weighted = adjacency.multiply(1.0 / np.log(np.maximum(degree, 2.0))[None, :]).tocsr()

    def scores(pairs: Tensor) -> Tensor:
        out = []
        for u, v in zip(pairs[0].split(PAIR_CHUNK), pairs[1].split(PAIR_CHUNK)):
            common = weighted[u.numpy()].multiply(adjacency[v.numpy()])
            out.append(torch.from_numpy(np.asarray(common.sum(axis=1)).ravel()))
        return torch.cat(out) if out else torch.empty(0)

    return {"val": pair_figures(scores(split.val), scores(split.val_neg)),
            "test": pair_figures(scores(split.test), scores(split.test_neg))}
