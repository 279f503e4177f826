"""A seeded planted-class synthetic graph (a stochastic block model variant)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch_geometric.data import Data

from edgegcl.config import Section, option
from edgegcl.data.validation import validate_graph
from edgegcl.errors import UsageError
from edgegcl.memory import check_allocation


# Norm of each class's mean feature vector, in units of the per-dimension noise std.
# Means point in random directions, so two classes sit about 1.5 * sqrt(2) apart:
# a linear probe on raw features lands far above chance yet far below 100 %, which
# leaves room for the graph (and contrastive pre-training) to matter.
_CLASS_SIGNAL = 1.5

# Rows per step when adding class means to the noise, so a million-node graph does
# not need a second full-size feature matrix.
_FEATURE_CHUNK_ROWS = 1 << 16


@dataclass(frozen=True)
class SyntheticSpec:
    """Parameters of the planted-class synthetic graph (a stochastic block model variant).

    ``homophily`` is the fraction of edges whose two ends share a class; the rest join
    nodes of different classes. The same spec always yields the same graph.

    Args:
        num_nodes: nodes (at least 2).
        num_classes: planted classes.
        num_features: feature dimension.
        avg_degree: requested average degree.
        homophily: requested fraction of edges inside a class.
        seed: seed of every draw.

    Example:
        >>> SyntheticSpec(num_nodes=500, homophily=0.9).num_classes
        5
    """

    num_nodes: int = 2000
    num_classes: int = 5
    num_features: int = 128
    avg_degree: float = 10.0
    homophily: float = 0.8
    seed: int = 0

    def __post_init__(self) -> None:
        """Reject specs that cannot produce a usable graph, before any work is done."""
        if self.num_nodes < 2:
            raise UsageError(f"synthetic num_nodes must be at least 2 (got {self.num_nodes}); ask for more nodes")
        if not 1 <= self.num_classes <= self.num_nodes:
            raise UsageError(
                f"synthetic num_classes must be between 1 and num_nodes={self.num_nodes} "
                f"(got {self.num_classes}); pick a class count in that range"
            )
        if self.num_features < 1:
            raise UsageError(
                f"synthetic num_features must be at least 1 (got {self.num_features}); ask for more features"
            )
        if not (math.isfinite(self.avg_degree) and self.avg_degree > 0):
            raise UsageError(f"synthetic avg_degree must be a positive number (got {self.avg_degree}); pass e.g. 10")
        if not 0.0 <= self.homophily <= 1.0:
            raise UsageError(f"synthetic homophily must be in [0, 1] (got {self.homophily}); pass e.g. 0.8")
        if self.num_classes == 1 and self.homophily < 1.0:
            raise UsageError(
                "synthetic homophily below 1 needs at least two classes for cross-class edges; "
                "raise num_classes or set homophily to 1"
            )


_SPEC = SyntheticSpec()


@dataclass(frozen=True)
class SyntheticConfig(Section):
    """The generated graph of a run with ``dataset = synthetic`` (the ``[synthetic]`` section):
    ``SyntheticSpec``'s parameters under their flag names, checked by it.

    Example:
        >>> SyntheticConfig(nodes=300, features=8).spec().num_features
        8
    """

    TITLE = "the generated graph (dataset = synthetic)"
    nodes: int = option(_SPEC.num_nodes, "number of nodes", at_least=2)
    classes: int = option(_SPEC.num_classes, "planted classes", at_least=1)
    features: int = option(_SPEC.num_features, "feature dimension", at_least=1)
    avg_degree: float = option(_SPEC.avg_degree, "average degree", above=0.0)
    homophily: float = option(_SPEC.homophily, "fraction of edges inside a class",
                              at_least=0.0, at_most=1.0)
    graph_seed: int = option(_SPEC.seed, "seed of the generated graph")

    def check(self) -> None:
        self.spec()

    def spec(self) -> SyntheticSpec:
        """The generated graph these values describe."""
        return SyntheticSpec(self.nodes, self.classes, self.features, self.avg_degree,
                             self.homophily, self.graph_seed)


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
