"""The edge objective's non-edges, scheduled by the run's negative scheduler: theta_max, the
pace and HANS's hardness strata act on links as they act on the views' negatives.

Each step scores its M masked edges against non-edges (u, w) anchored at M nodes u drawn
uniformly, as the held-out non-edges are uniform pairs. The anchors are cut into tiles of
``TILE`` that share a pool of ``pool`` candidate nodes w, also uniform; a candidate is a
non-edge of its anchor when w != u and (u, w) is no training edge. The pool is |N_i| of
Algorithm 1: the scheduler's fractions eta^cat theta^cat give how many of each hardness
category every anchor is scored against (``negative_counts``, Algorithm 1, l. 4, at least
one). A scheduler that ranks its candidates (``hans``) cuts each anchor's pool by hardness,
the inner product z_u . z_w of the embeddings (one [TILE, D] x [D, pool] product per tile,
without gradient), into hard / intermediate / easy strata of the ``ratios``' sizes, and draws
each category's count at random within its stratum; the others (``random``, ``constant``,
...) draw the counts' sum as a uniform subset of the pool, and ``none`` takes every
candidate. The decoder's loss is read by category, so HANS's gate sees how each stratum's loss
moves (Eq. 7).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from edgegcl.contrast.negatives import CATEGORIES, negative_counts, pool_sizes
from edgegcl.contrast.scheduler import scheduler_class
from edgegcl.training.config import TrainConfig

__all__ = ["TILE", "CandidatePools", "ScheduledNonEdges", "candidate_pools", "edges_line",
           "saturated_count", "schedule_non_edges"]

TILE = 64
"""Anchors that share one pool of candidates (one matrix product ranks a tile's pools)."""


@dataclass(frozen=True)
class CandidatePools:
    """One step's pairs: its masked edges ``targets`` [2, M], the non-edges' ``anchors`` [M],
    each tile's ``pools`` [ceil(M / TILE), pool] of candidate nodes (node ids, or rows of a
    subgraph), and which candidates are non-edges of their anchor (``valid`` [M, pool])."""

    targets: Tensor
    anchors: Tensor
    pools: Tensor
    valid: Tensor

    @property
    def candidates(self) -> Tensor:
        """[M, pool]: anchor i's candidates, its tile's pool."""
        return self.pools[torch.arange(self.anchors.numel()) // TILE]


def candidate_pools(targets: Tensor, edge_keys: Tensor, num_nodes: int, pool: int,
                    generator: torch.Generator) -> CandidatePools:
    """Uniform anchors, one per edge of ``targets`` [2, M], and their tiles' uniform pools;
    ``edge_keys`` the graph's sorted undirected keys lo * N + hi, which no candidate pair may
    be."""
    m = targets.size(1)
    anchors = torch.randint(0, num_nodes, (m,), generator=generator)
    pools = torch.randint(0, num_nodes, ((m + TILE - 1) // TILE, pool), generator=generator)
    w = pools[torch.arange(m) // TILE]
    u = anchors.unsqueeze(1)
    key = torch.minimum(u, w) * num_nodes + torch.maximum(u, w)
    where = torch.searchsorted(edge_keys, key).clamp_max(max(edge_keys.numel() - 1, 0))
    linked = edge_keys[where] == key if edge_keys.numel() else torch.zeros_like(key).bool()
    return CandidatePools(targets, anchors, pools, (w != u) & ~linked)


def tile_similarities(z: Tensor, anchors: Tensor, pools: Tensor) -> Tensor:
    """z_u . z_w of every anchor (rows ``anchors`` of ``z``) and its tile's pool (rows
    ``pools``), [M, pool]: one batched product of [TILE, D] and [D, pool] per tile."""
    m, (tiles, size) = anchors.numel(), pools.shape
    za = torch.zeros(tiles * TILE, z.size(1), dtype=z.dtype, device=z.device)
    za[:m] = z[anchors]
    zp = z[pools.reshape(-1)].view(tiles, size, -1)
    return torch.bmm(za.view(tiles, TILE, -1), zp.transpose(1, 2)).view(tiles * TILE, size)[:m]


@dataclass(frozen=True)
class ScheduledNonEdges:
    """The non-edges each anchor is scored against: ``columns`` [M, K] into its candidates,
    ``chosen`` [M, K] (False where a drawn candidate is no non-edge: left out of the loss), and
    ``category`` [K], each column's index into CATEGORIES (None for a uniform subset)."""

    columns: Tensor
    chosen: Tensor
    category: Tensor | None


def schedule_non_edges(pools: CandidatePools, fractions: Mapping[str, float],
                       ratios: Mapping[str, float], ranked: bool,
                       generator: torch.Generator, z: Tensor | None = None) -> ScheduledNonEdges:
    """Each anchor's non-edges under the schedule's ``fractions`` (eta^cat theta^cat of the
    pool, ``NegativeScheduler.fractions``): by hardness strata of ``ratios``' sizes when
    ``ranked`` (then ``z`` [N or subgraph, D] ranks the candidates, rows as the pools' ids),
    else a uniform subset of the pool of the counts' sum."""
    valid, (m, size) = pools.valid, pools.valid.shape
    counts = negative_counts(fractions, size, ratios)  # Algorithm 1, l. 4
    keys = torch.rand(m, size, generator=generator).to(valid.device)
    if not ranked:
        k = sum(counts.values())
        columns = keys.masked_fill(~valid, -1.0).topk(k, dim=1).indices
        return ScheduledNonEdges(columns, valid.gather(1, columns), None)
    assert z is not None, "a ranked schedule needs the embeddings"
    sims = tile_similarities(z.detach(), pools.anchors.to(z.device), pools.pools.to(z.device))
    order = sims.masked_fill(~valid.to(sims.device), float("-inf")).argsort(
        dim=1, descending=True).cpu()  # hardest first; candidates that are edges last
    sizes, start = pool_sizes(size, ratios), 0
    columns, category = [], []
    for i, c in enumerate(CATEGORIES):
        stratum = order[:, start:start + sizes[c]]
        picks = keys[:, start:start + sizes[c]].topk(counts[c], dim=1).indices
        columns.append(stratum.gather(1, picks))
        category.append(torch.full((counts[c],), i, dtype=torch.long))
        start += sizes[c]
    cols = torch.cat(columns, 1)
    return ScheduledNonEdges(cols, valid.gather(1, cols), torch.cat(category))


def saturated_count(cfg: TrainConfig) -> int:
    """Non-edges per masked edge once the schedule has theta_max in use (``--scheduler none``:
    the whole pool)."""
    scheduler = cfg.schedule.build(cfg.run.epochs)
    caps = scheduler.theta_cat if scheduler.theta_max else scheduler.fractions()
    return sum(negative_counts(caps, cfg.learning.edge_pool, cfg.schedule.ratio_map()).values())


def edges_line(cfg: TrainConfig) -> str:
    """What an edge-objective run learns from, in one line: the masking, and the non-edges
    the schedule scores each masked edge against."""
    learning, schedule = cfg.learning, cfg.schedule
    how = ("by hardness (HANS's strata of the embeddings' inner product)"
           if scheduler_class(schedule.scheduler).ranks_candidates else "uniformly")
    budget = ("every one" if not scheduler_class(schedule.scheduler).who else
              f"up to {saturated_count(cfg)} (theta_max = {schedule.theta_max:g})")
    return (f"objective: edges; at each step each direction of the training edges is masked "
            f"with probability {learning.edge_mask:g} (an edge is hidden from the encoder when "
            f"both are: {learning.edge_mask ** 2:.0%}) and a link decoder learns to score the "
            f"masked edges above non-edges: {budget} of each one's {learning.edge_pool} "
            f"candidates (--edge-pool), picked {how} (--objective views contrasts two augmented "
            f"views instead)")
