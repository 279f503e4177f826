"""The edge objective of a link run: the training edges as the signal (masked graph
autoencoding, as MaskGAE trains).

At each step a share ``mask`` of the training graph's undirected edges is hidden from the
encoder (both directions, so no message crosses a hidden edge); the encoder embeds the rest,
and a link scorer (edgegcl.nn.decoder.LinkDecoder) is trained to tell the hidden edges from as
many non-edges of the training graph, by binary cross-entropy. The held-out validation and
test edges are never among either: the objective sees the training graph only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from edgegcl.errors import UsageError
from edgegcl.evaluation.links import sample_non_edges
from edgegcl.nn.decoder import LinkDecoder
from edgegcl.training.config import TrainConfig

__all__ = ["EdgeBatches", "EdgeSplit", "MaskedEdges", "edge_loss", "with_decoder"]


@dataclass(frozen=True)
class EdgeSplit:
    """One step's edges: ``kept`` [2, E'] (both directions) for the encoder, the ``hidden``
    undirected edges [2, M] (row 0 < row 1) to score back, and ``non_edges`` [2, M]."""

    kept: Tensor
    hidden: Tensor
    non_edges: Tensor


class MaskedEdges:
    """Draws each step's ``EdgeSplit`` of a training graph (on the CPU, from ``generator``).

    Example:
        >>> ring = torch.stack([torch.arange(10), (torch.arange(10) + 1) % 10])
        >>> both = torch.cat([ring, ring.flip(0)], 1)
        >>> step = MaskedEdges(both, 10, 0.5, torch.Generator().manual_seed(0)).draw()
        >>> step.kept.size(1) + 2 * step.hidden.size(1) == both.size(1)
        True
    """

    def __init__(self, edge_index: Tensor, num_nodes: int, mask: float,
                 generator: torch.Generator, hard: float = 0.0) -> None:
        if not 0.0 < mask < 1.0:
            raise ValueError(f"mask must be in (0, 1), got {mask}")
        if not 0.0 <= hard <= 1.0:
            raise ValueError(f"hard must be in [0, 1], got {hard}")
        edge_index = edge_index.cpu()
        lo = torch.minimum(edge_index[0], edge_index[1])
        hi = torch.maximum(edge_index[0], edge_index[1])
        keys = lo * num_nodes + hi
        keep = lo != hi
        self.keys, self.edge_of = torch.unique(keys[keep], return_inverse=True)
        self.edge_index, self.num_nodes, self.mask = edge_index[:, keep], num_nodes, mask
        self.generator, self.hard = generator, hard
        self._walks: tuple[Tensor, Tensor] | None = None  # (rowptr, neighbours), when walked

    def _csr(self) -> tuple[Tensor, Tensor]:
        """The graph's neighbours by node (CSR, both ways), what the two-hop walks step along;
        built at the first walk (a run without two-hop non-edges never needs it)."""
        if self._walks is None:
            n = self.num_nodes
            both = torch.cat([self.edge_index, self.edge_index.flip(0)], 1)
            order = torch.argsort(both[0] * n + both[1])
            rowptr = torch.zeros(n + 1, dtype=torch.long)
            rowptr[1:] = torch.bincount(both[0], minlength=n).cumsum(0)
            self._walks = (rowptr, both[1, order])
        return self._walks

    def draw(self) -> EdgeSplit:
        """A fresh split: each undirected edge hidden with probability ``mask``; as many
        non-edges, a share ``hard`` of them two hops from a hidden edge's endpoint
        (``two_hop_non_edges``), the rest uniform."""
        hidden = torch.rand(self.keys.numel(), generator=self.generator) < self.mask
        kept = self.edge_index[:, ~hidden[self.edge_of]]
        keys = self.keys[hidden]
        pairs = torch.stack([keys // self.num_nodes, keys % self.num_nodes])
        near = (torch.empty(2, 0, dtype=torch.long) if self.hard == 0.0 else
                self.two_hop_non_edges(pairs, self.hard))
        rest = sample_non_edges(self.keys, self.num_nodes, keys.numel() - near.size(1),
                                self.generator)
        return EdgeSplit(kept, pairs, torch.cat([near, rest], 1))

    def two_hop_non_edges(self, pairs: Tensor, share: float) -> Tensor:
        """Hard non-edges: for a random ``share`` of the hidden ``pairs``, one of its
        endpoints u and a node w two steps of a random walk from u (a neighbour's neighbour)
        that is neither u nor linked to u; walks that end elsewhere are dropped (their
        non-edges are then drawn uniformly). [2, K] with row 0 < row 1."""
        g, n = self.generator, self.num_nodes
        chosen = pairs[:, torch.rand(pairs.size(1), generator=g) < share]
        side = torch.randint(0, 2, (chosen.size(1),), generator=g)
        u = chosen[side, torch.arange(chosen.size(1))]
        a = self._step(u)
        w = self._step(a)
        lo, hi = torch.minimum(u, w), torch.maximum(u, w)
        key = lo * n + hi
        at = torch.searchsorted(self.keys, key).clamp_max(max(self.keys.numel() - 1, 0))
        linked = (self.keys[at] == key) if self.keys.numel() else torch.zeros_like(u).bool()
        ok = (a >= 0) & (w >= 0) & (u != w) & ~linked
        return torch.stack([lo[ok], hi[ok]])

    def _step(self, nodes: Tensor) -> Tensor:
        """One random-walk step from each of ``nodes`` (-1 stays -1, as does a node without
        neighbours)."""
        rowptr, neighbours = self._csr()
        safe = nodes.clamp_min(0)
        start, degree = rowptr[safe], rowptr[safe + 1] - rowptr[safe]
        pick = (torch.rand(nodes.numel(), generator=self.generator) * degree).long()
        has = (nodes >= 0) & (degree > 0)
        index = (start + pick.clamp_max((degree - 1).clamp_min(0))).clamp_max(
            max(neighbours.numel() - 1, 0))
        out = neighbours[index] if neighbours.numel() else torch.zeros_like(nodes)
        return torch.where(has, out, torch.full_like(nodes, -1))


HASH_PRIME, HASH_MULTIPLIER = 2_147_483_647, 48_271
"""The step's coin of an undirected edge: (key mod p) a + salt mod p over p (the Lehmer
generator's constants; products stay below 2^62), the same for both directions."""


class EdgeBatches:
    """The edge objective in neighbour-sampled mini-batches (memory bounded by the batch).

    Each step draws ``pairs`` of the graph's undirected edges at random (the step's targets)
    and as many non-edges, and takes their endpoints as the seed nodes of one sampled
    subgraph. Before the encoder sees it, the subgraph loses every target edge (both ways: a
    target never carries a message to either endpoint) and, as the whole-graph objective
    hides ``mask`` of the edges, each other undirected edge with probability ``mask`` (one
    coin per undirected edge and step, so both directions go together). Holds the graph's
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
            raise UsageError("the edge objective learns from the graph's edges, and this graph "
                             "has none besides self-loops; use --objective views")

    def draw(self, pairs: int) -> tuple[Tensor, Tensor]:
        """A step's target edges and non-edges, [2, pairs] each (row 0 < row 1)."""
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
        targets = torch.stack([keys // n, keys % n])
        return targets, sample_non_edges(self.keys, n, targets.size(1), g)

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
        coin = ((key % HASH_PRIME) * HASH_MULTIPLIER + salt) % HASH_PRIME / HASH_PRIME
        return ~hit & (coin >= self.mask) | (u == v)


def with_decoder(model: nn.Module, cfg: TrainConfig) -> nn.Module:
    """``model`` with the link decoder the edge objective trains beside the encoder
    (``model.decoder``, at the embeddings' width) when ``cfg`` learns from the edges: the
    model a run trains, saves and resumes."""
    if cfg.resolved_objective() == "edges":
        width = model.head.fc1.in_features
        model.decoder = LinkDecoder(width, cfg.learning.decoder_dim,
                                    cfg.learning.decoder_dropout)
    return model


def edge_loss(logits_hidden: Tensor, logits_non_edges: Tensor) -> Tensor:
    """Binary cross-entropy of the hidden edges (label 1) and the non-edges (label 0), each
    set's mean, summed (MaskGAE's ``ce_loss``)."""
    return F.softplus(-logits_hidden).mean() + F.softplus(logits_non_edges).mean()
