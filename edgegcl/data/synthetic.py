"""A seeded planted-class synthetic graph (a stochastic block model variant), with near-uniform
or power-law degrees."""

from __future__ import annotations

import torch
from torch_geometric.data import Data

from edgegcl.data.config import SyntheticSpec
from edgegcl.data.validation import validate_graph
from edgegcl.memory import check_allocation


# Norm of each class's mean feature vector, in units of the per-dimension noise std.
# Means point in random directions, so two classes sit about 1.5 * sqrt(2) apart:
# a linear probe on raw features lands far above chance yet far below 100 %, which
# leaves room for the graph (and contrastive pre-training) to matter.
_CLASS_SIGNAL = 1.5

# Rows per step when adding class means to the noise, so a million-node graph does
# not need a second full-size feature matrix.
_FEATURE_CHUNK_ROWS = 1 << 16


def synthetic_graph(spec: SyntheticSpec) -> Data:
    """Generate the planted-class graph described by ``spec``, fully vectorised and seeded.

    Classes are balanced and randomly placed. For each of ``N * avg_degree / 2`` edges a
    source is drawn; with probability ``homophily`` the target is drawn from the source's
    class, otherwise from all other classes. Draws are uniform, or, with
    ``degree_exponent``, proportional to each node's Chung-Lu weight (``power_law_weights``),
    so that a node's expected degree is its weight. Self-loops are dropped and the edge set is
    made undirected and coalesced, so the realised degree and homophily sit slightly below
    the requested values. Features are a per-class random mean of norm ``_CLASS_SIGNAL`` plus
    unit Gaussian noise.

    Args:
        spec: size, classes, features, degree, homophily and seed of the graph.

    Example:
        >>> data = synthetic_graph(SyntheticSpec(num_nodes=100, num_classes=4, num_features=8))
        >>> data.x.shape, int(data.y.max()) + 1
        (torch.Size([100, 8]), 4)
    """
    edges = spec.num_nodes * spec.avg_degree
    check_allocation(4.0 * spec.num_nodes * spec.num_features + 8 * 6 * edges,
                     f"a synthetic graph of {spec.num_nodes} nodes x {spec.num_features} "
                     f"features, average degree {spec.avg_degree:g}",
                     "pass smaller --nodes, --features or --avg-degree")
    gen = torch.Generator().manual_seed(spec.seed)
    n, c = spec.num_nodes, spec.num_classes
    y = torch.randperm(n, generator=gen) % c

    # Nodes sorted by class: class k occupies positions [start[k], start[k] + count[k]).
    order = torch.argsort(y, stable=True)
    count = torch.bincount(y, minlength=c)
    start = torch.cumsum(count, 0) - count

    num_edges = max(1, round(n * spec.avg_degree / 2))
    if spec.degree_exponent:
        src, dst = _weighted_ends(spec, y, order, count, gen)
    else:
        src = torch.randint(n, (num_edges,), generator=gen)
        src_class = y[src]
        same = torch.rand(num_edges, generator=gen) < spec.homophily
        u = torch.rand(num_edges, generator=gen, dtype=torch.float64)
        own_size = count[src_class]
        in_class = start[src_class] + (u * own_size).long().clamp_max(own_size - 1)
        # Index into the sorted order with the source's own class block cut out.
        other_size = (n - own_size).clamp_min(1)
        k = (u * other_size).long().clamp_max(other_size - 1)
        cross_class = k + own_size * (k >= start[src_class])
        dst = order[torch.where(same, in_class, cross_class)]

    edge_index = _undirected_coalesced(src, dst, n)

    means = torch.randn(c, spec.num_features, generator=gen)
    means = means / means.norm(dim=1, keepdim=True).clamp_min(1e-12) * _CLASS_SIGNAL
    x = torch.randn(n, spec.num_features, generator=gen)
    for lo in range(0, n, _FEATURE_CHUNK_ROWS):
        hi = min(lo + _FEATURE_CHUNK_ROWS, n)
        x[lo:hi] += means[y[lo:hi]]

    return validate_graph(Data(x=x, edge_index=edge_index, y=y, name="synthetic"))


def power_law_weights(spec: SyntheticSpec) -> torch.Tensor:
    """The weights edge ends are drawn by in a power-law graph, largest first (float64 [N]).

    The expected degrees are the Chung-Lu sequence t_i = t_max (1 + i / i0)^(-1 / (gamma - 1)),
    whose values are distributed as P(t) ~ t^-gamma, with t_max = ``spec.hub_degree()`` and
    i0 chosen by bisection so that their mean is ``avg_degree``. Drawing ends in proportion to
    t itself would fall short at the hubs: the edges coalesce. With W / 2 edges drawn
    (W = sum of weights), a node of weight w_i meets node j in expectation r w_i w_j / W times
    (r = homophily * C for j in its class, (1 - homophily) C / (C - 1) for j in another of the
    C classes), so it keeps D(w_i) = sum_j (1 - exp(-r w_i w_j / W)) distinct neighbours. The
    weights are corrected until D(w_i) = t_i (``_distinct_neighbours``); their sum, and so the
    edges drawn, grows by the share of the draws that coalesce.
    """
    n, alpha = spec.num_nodes, 1.0 / (spec.degree_exponent - 1.0)
    rank = torch.arange(n, dtype=torch.float64)
    top = spec.hub_degree()

    def chung_lu(i0: float) -> torch.Tensor:
        return top * (1.0 + rank / i0).pow(-alpha)

    lo, hi = 1e-9, float(n) * 1e9  # the mean grows with i0 from ~0 to top
    for _ in range(200):
        mid = (lo * hi) ** 0.5
        if float(chung_lu(mid).mean()) < spec.avg_degree:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-12:
            break
    target = chung_lu(hi)
    w = target.clone()
    c = spec.num_classes
    mix = ((1.0 / c, spec.homophily * c),) + (
        (((c - 1.0) / c, (1.0 - spec.homophily) * c / (c - 1.0)),) if c > 1 else ())
    for _ in range(_CORRECTIONS):
        w = w * target / _distinct_neighbours(w, mix)
    return w


# Rounds of the weights' correction for coalesced edges; each moves the hubs' expected
# degree closer by about the share of their draws that repeat a neighbour.
_CORRECTIONS = 30
# Points of the log-spaced grids (weights binned; D evaluated) the correction works on.
_GRID = 512


def _distinct_neighbours(w: torch.Tensor, mix: tuple[tuple[float, float], ...]
                         ) -> torch.Tensor:
    """D(w_i) = sum_j (1 - exp(-r w_i w_j / W)): the expected distinct neighbours of each node
    when ends are drawn by the weights ``w`` (float64, sorted largest first), ``mix`` giving
    (share of the nodes, r) for its own class and the others; from the weights binned on a
    log grid and D interpolated in log-log between grid points."""
    total = float(w.sum())
    edges = torch.logspace(float(w[-1].log10()), float(w[0].log10()) + 1e-9, _GRID + 1,
                           dtype=torch.float64)
    bins = torch.bucketize(w, edges).clamp(1, _GRID) - 1
    count = torch.bincount(bins, minlength=_GRID).double()
    mean = torch.zeros(_GRID, dtype=torch.float64).index_add_(0, bins, w) / count.clamp_min(1)
    grid = torch.sqrt(edges[:-1] * edges[1:])
    d = sum((share * count * -torch.expm1(-r * grid[:, None] * mean[None, :] / total)).sum(1)
            for share, r in mix)
    pos = torch.searchsorted(grid, w).clamp(1, _GRID - 1)
    x0, x1 = grid[pos - 1].log(), grid[pos].log()
    y0, y1 = d[pos - 1].log(), d[pos].log()
    return torch.exp(y0 + (w.log() - x0) * (y1 - y0) / (x1 - x0))


def _weighted_ends(spec: SyntheticSpec, y: torch.Tensor, order: torch.Tensor,
                   count: torch.Tensor, gen: torch.Generator
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Half the weights' sum in edges (each node meets ``w_i`` edge ends in expectation), their
    ends drawn in proportion to the nodes' power-law weights (placed on the nodes at random):
    the source over all nodes, the target over the source's class with probability
    ``homophily``, else over the other classes; by inverting the weights' cumulative sum over
    the nodes sorted by class (each class a contiguous interval of it)."""
    n = spec.num_nodes
    w = power_law_weights(spec)[torch.randperm(n, generator=gen)]
    cum = torch.cumsum(w[order], 0)
    total = float(cum[-1])
    num_edges = max(1, round(total / 2))
    per_class = torch.zeros(count.numel(), dtype=torch.float64).index_add_(0, y, w)
    begin = torch.cumsum(per_class, 0) - per_class

    def at(mass: torch.Tensor) -> torch.Tensor:  # the sorted position holding that mass
        return torch.searchsorted(cum, mass, right=True).clamp_max(n - 1)

    src = order[at(torch.rand(num_edges, generator=gen, dtype=torch.float64) * total)]
    src_class = y[src]
    same = torch.rand(num_edges, generator=gen) < spec.homophily
    u = torch.rand(num_edges, generator=gen, dtype=torch.float64)
    own = per_class[src_class]
    in_class = begin[src_class] + u * own
    other = u * (total - own)  # the other classes' mass, the source's class cut out
    cross_class = other + own * (other >= begin[src_class])
    return src, order[at(torch.where(same, in_class, cross_class))]


def _undirected_coalesced(src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Both directions of every non-loop pair, sorted by (row, col) and deduplicated.

    Same result as ``remove_self_loops`` + ``to_undirected``, but with a single sort of
    ``row * N + col`` keys, which is several times faster on million-node graphs.
    """
    keep = src != dst
    src, dst = src[keep], dst[keep]
    keys = torch.sort(torch.cat([src * num_nodes + dst, dst * num_nodes + src])).values
    first = torch.ones_like(keys, dtype=torch.bool)
    first[1:] = keys[1:] != keys[:-1]
    keys = keys[first]
    return torch.stack([keys // num_nodes, keys % num_nodes])
