"""The edge objective of a link run: the training edges as the signal (masked graph
autoencoding, as MaskGAE trains).

At each step each direction of the training graph's edges is masked with probability ``mask``
and scored back; an edge stays visible to the encoder while either of its directions is
unmasked, so no message crosses an edge both of whose directions are masked (MaskGAE's
``MaskEdge``). A link scorer (edgegcl.nn.decoder.LinkDecoder) trained beside the encoder
learns to tell the masked edges from non-edges of the training graph, by binary cross-entropy;
which non-edges, and how many, the run's negative scheduler decides
(edgegcl.training.nonedges). The held-out validation and test edges are never among either:
the objective sees the training graph only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from edgegcl.errors import UsageError
from edgegcl.nn.decoder import DegreeDecoder, LinkDecoder
from edgegcl.training.config import TrainConfig

__all__ = ["EdgeBatches", "EdgeSplit", "MaskedEdges", "edge_loss", "with_decoder"]


NO_EDGES = ("the edge objective learns from the graph's edges, and this graph has none besides "
            "self-loops; use --objective views")


@dataclass(frozen=True)
class EdgeSplit:
    """One step's edges: ``kept`` [2, E'] for the encoder and the ``hidden`` edges [2, M] to
    score back (the masked directions; an undirected edge both of whose directions were
    masked appears twice)."""

    kept: Tensor
    hidden: Tensor


class MaskedEdges:
    """Draws each step's ``EdgeSplit`` of a training graph (on the CPU, from ``generator``),
    as MaskGAE masks: each direction of an edge is masked with probability ``mask`` and
    scored back, and an edge stays visible to the encoder, both ways, while either of its
    directions is unmasked (1 - mask^2 of an undirected graph's edges). ``keys`` are its
    sorted undirected edge keys lo * N + hi (what no non-edge may be).

    Example:
        >>> ring = torch.stack([torch.arange(10), (torch.arange(10) + 1) % 10])
        >>> both = torch.cat([ring, ring.flip(0)], 1)
        >>> step = MaskedEdges(both, 10, 0.5, torch.Generator().manual_seed(0)).draw()
        >>> int(step.hidden.size(1)) <= both.size(1) and step.kept.size(1) % 2 == 0
        True
    """

    def __init__(self, edge_index: Tensor, num_nodes: int, mask: float,
                 generator: torch.Generator) -> None:
        if not 0.0 < mask < 1.0:
            raise ValueError(f"mask must be in (0, 1), got {mask}")
        edge_index = edge_index.cpu()
        lo = torch.minimum(edge_index[0], edge_index[1])
        hi = torch.maximum(edge_index[0], edge_index[1])
        keys = lo * num_nodes + hi
        keep = lo != hi
        self.keys, self.edge_of = torch.unique(keys[keep], return_inverse=True)
        self.edge_index, self.num_nodes, self.mask = edge_index[:, keep], num_nodes, mask
        self.generator = generator
        if self.keys.numel() == 0:
            raise UsageError(NO_EDGES)

    def draw(self) -> EdgeSplit:
        """A fresh split: each direction masked with probability ``mask``; the edges of
        which some direction is unmasked kept (every direction the graph has of them)."""
        masked = torch.rand(self.edge_of.numel(), generator=self.generator) < self.mask
        seen = torch.zeros(self.keys.numel(), dtype=torch.bool)
        seen[self.edge_of[~masked]] = True
        return EdgeSplit(self.edge_index[:, seen[self.edge_of]], self.edge_index[:, masked])


HASH_PRIME, HASH_MULTIPLIER = 2_147_483_647, 48_271
"""The step's coin of a direction u -> v: ((u N + v) mod p) a + salt mod p over p (the Lehmer
generator's constants; products stay below 2^62)."""


class EdgeBatches:
    """The edge objective in neighbour-sampled mini-batches (memory bounded by the batch).

    Each step draws ``pairs`` of the graph's undirected edges at random (the step's targets),
    the non-edges' anchors and their tiles' pools of candidates (edgegcl.training.nonedges),
    and takes those nodes as the seeds of one sampled subgraph. Before the encoder sees it, the
    subgraph loses every target edge (both ways: a target never carries a message to either
    endpoint) and, as the whole-graph objective masks, each other edge both of whose
    directions are masked, each with probability ``mask`` (one coin per direction and step,
    read alike from either end). Holds the graph's
    undirected edge keys (8 bytes an edge), nothing per node.
    """

    def __init__(self, edge_index: Tensor, num_nodes: int, mask: float,
                 generator: torch.Generator) -> None:
        edge_index = edge_index.cpu()
        lo = torch.minimum(edge_index[0], edge_index[1]).long()
        hi = torch.maximum(edge_index[0], edge_index[1]).long()
        keep = lo != hi
        self.keys = torch.unique(lo[keep] * num_nodes + hi[keep])
        self.num_nodes, self.mask, self.generator = num_nodes, mask, generator
        if self.keys.numel() == 0:
            raise UsageError(NO_EDGES)

    def draw(self, pairs: int) -> Tensor:
        """A step's target edges, [2, pairs] (row 0 < row 1), distinct."""
        g, n = self.generator, self.num_nodes
        m = self.keys.numel()
        count = min(pairs, m)
        if count * 4 > m:  # most of the edges: a permutation
            picked = torch.randperm(m, generator=g)[:count]
        else:  # a few: distinct draws, without touching every edge
            picked = torch.empty(0, dtype=torch.long)
            while picked.numel() < count:
                more = torch.randint(0, m, (count + count // 8 + 8,), generator=g)
                picked = torch.unique(torch.cat([picked, more]))
            picked = picked[torch.randperm(picked.numel(), generator=g)[:count]]
        keys = self.keys[picked]
        return torch.stack([keys // n, keys % n])

    def visible(self, edge_index: Tensor, n_id: Tensor, targets: Tensor) -> Tensor:
        """Which of a sampled subgraph's edges (local ids into ``n_id``) the encoder may
        see: not a target, and not hidden by this step's coin (bool [E])."""
        n = self.num_nodes
        u, v = n_id[edge_index[0]].long(), n_id[edge_index[1]].long()
        key = torch.minimum(u, v) * n + torch.maximum(u, v)
        target_keys = (targets[0] * n + targets[1]).sort().values
        at = torch.searchsorted(target_keys, key).clamp_max(max(target_keys.numel() - 1, 0))
        hit = target_keys[at] == key if target_keys.numel() else torch.zeros_like(u).bool()
        salt = int(torch.randint(0, HASH_PRIME, (1,), generator=self.generator))

        def unmasked(a: Tensor, b: Tensor) -> Tensor:  # the direction a -> b's coin
            coin = (((a * n + b) % HASH_PRIME) * HASH_MULTIPLIER + salt) % HASH_PRIME
            return coin / HASH_PRIME >= self.mask

        return ~hit & (unmasked(u, v) | unmasked(v, u)) | (u == v)


def with_decoder(model: nn.Module, cfg: TrainConfig) -> nn.Module:
    """``model`` with the link decoder the edge objective trains beside the encoder
    (``model.decoder``, at the embeddings' width) when ``cfg`` learns from the edges: the
    model a run trains, saves and resumes."""
    if cfg.resolved_objective() == "edges":
        width = model.head.fc1.in_features
        model.decoder = LinkDecoder(width, cfg.learning.decoder_dim,
                                    cfg.learning.decoder_dropout)
        if cfg.learning.degree_weight > 0:
            model.degree_decoder = DegreeDecoder(width, cfg.learning.decoder_dim,
                                                 cfg.learning.decoder_dropout)
    return model


def edge_loss(logits_hidden: Tensor, logits_non_edges: Tensor,
              weights: Tensor | None = None) -> Tensor:
    """Binary cross-entropy of the masked edges (label 1) and the non-edges (label 0), each
    set's mean (the non-edges' weighted by ``weights``, 0 leaving one out), summed (MaskGAE's
    ``ce_loss``)."""
    if weights is None:
        weights = torch.ones_like(logits_non_edges)
    negative = (F.softplus(logits_non_edges) * weights).sum() / weights.sum().clamp_min(1.0)
    return F.softplus(-logits_hidden).mean() + negative
