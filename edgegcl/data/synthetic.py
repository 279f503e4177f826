"""A seeded planted-class synthetic graph (a stochastic block model variant)."""

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
    uniform source is drawn; with probability ``homophily`` the target is uniform over
    the source's class, otherwise uniform over all other classes. Self-loops are dropped
    and the edge set is made undirected and coalesced, so the realised degree and
    homophily sit slightly below the requested values. Features are a per-class random
    mean of norm ``_CLASS_SIGNAL`` plus unit Gaussian noise.

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
