"""The ``[data]`` and ``[synthetic]`` sections and the names they accept: the benchmark
datasets, the graph file formats, the samplers. The standard library alone, so that the command
line builds its flags and answers ``--help`` before torch loads; the loaders that use these names
are ``edgegcl.data.datasets``, ``edgegcl.data.files`` and ``edgegcl.data.sampling``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from edgegcl.config import Section, choices, option
from edgegcl.errors import UsageError

PYG_SOURCES: dict[str, tuple[str, str | None, dict[str, Any]]] = {
    "Cora": ("Planetoid", None, {"name": "Cora"}),
    "CiteSeer": ("Planetoid", None, {"name": "CiteSeer"}),
    "PubMed": ("Planetoid", None, {"name": "PubMed"}),
    "DBLP": ("CitationFull", None, {"name": "DBLP"}),
    "WikiCS": ("WikiCS", "WikiCS", {"is_undirected": True}),
    "Amazon-Computers": ("Amazon", None, {"name": "Computers"}),
    "Amazon-Photo": ("Amazon", None, {"name": "Photo"}),
    "Coauthor-CS": ("Coauthor", None, {"name": "CS"}),
    "Actor": ("Actor", "Actor", {}),
}
"""The benchmark datasets: name -> (class in ``torch_geometric.datasets``, a folder of their
own under the root for classes that keep ``raw/`` directly under it, keyword arguments). The
one list to extend for another PyG dataset."""

DATASETS: tuple[str, ...] = (*PYG_SOURCES, "synthetic")
"""Every ``--dataset`` name besides a graph file: the benchmarks and the generated graph."""

GRAPH_FILES: tuple[str, ...] = (".pt", ".npz", ".csv", ".tsv", ".parquet")
"""The graph file suffixes ``--dataset`` takes (``edgegcl.data.files.READERS`` reads them)."""

SamplerName = Literal["auto", "builtin", "pyg"]
"""``--sampler``: auto (PyG's when pyg-lib or torch-sparse is installed, else the built-in),
builtin or pyg."""
SAMPLERS: tuple[str, ...] = choices(SamplerName)


def canonical_name(name: str) -> str | None:
    """The DATASETS spelling of a benchmark dataset's name or short name (``"citeseer"`` ->
    ``"CiteSeer"``), or None for anything else (a file, ``synthetic``)."""
    return _DATASET_KEYS.get(_normalise(name))


def _normalise(name: str) -> str:
    """Key for forgiving name matching: lower case, separators removed."""
    return "".join(ch for ch in name.lower() if ch not in "-_ ")


_DATASET_KEYS: dict[str, str] = {_normalise(d): d for d in DATASETS} | {
    "computers": "Amazon-Computers",
    "photo": "Amazon-Photo",
    "cs": "Coauthor-CS",
}


@dataclass(frozen=True)
class SyntheticSpec:
    """Parameters of the planted-class synthetic graph (a stochastic block model variant).

    ``homophily`` is the fraction of edges whose two ends share a class; the rest join
    nodes of different classes. The same spec always yields the same graph. With
    ``degree_exponent`` the degrees follow a power law (a degree-corrected block model: each
    node's expected degree is a Chung-Lu weight), as web, social and transaction graphs do;
    without it they are near-uniform (Poisson around ``avg_degree``).

    Args:
        num_nodes: nodes (at least 2).
        num_classes: planted classes.
        num_features: feature dimension.
        avg_degree: requested average degree.
        homophily: requested fraction of edges inside a class.
        seed: seed of every draw.
        degree_exponent: gamma of P(degree = k) ~ k^-gamma, above 2; 0 for near-uniform
            degrees.
        max_degree: the largest expected degree (the hubs') with ``degree_exponent``, at most
            a quarter of the nodes; 0 for the natural cutoff of a power law on ``num_nodes``
            nodes, avg_degree * num_nodes ** (1 / (gamma - 1)) / 2, at most num_nodes // 4.

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
    degree_exponent: float = 0.0
    max_degree: int = 0

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
        self._check_power_law()

    def _check_power_law(self) -> None:
        """A power law's exponent above 2 (a finite mean degree) and hubs the graph can hold."""
        if self.degree_exponent == 0.0:
            if self.max_degree:
                raise UsageError("synthetic max_degree sets the hubs of a power law: give "
                                 "degree_exponent too (e.g. 2.5), or drop max_degree")
            return
        if not (math.isfinite(self.degree_exponent) and 2.0 < self.degree_exponent <= 10.0):
            raise UsageError(f"synthetic degree_exponent must be in (2, 10] (a power law with a "
                             f"finite mean degree), or 0 for near-uniform degrees (got "
                             f"{self.degree_exponent}); pass e.g. 2.5")
        if self.max_degree and not self.avg_degree <= self.max_degree <= self.num_nodes // 4:
            raise UsageError(f"synthetic max_degree must be between avg_degree "
                             f"({self.avg_degree:g}) and a quarter of the nodes "
                             f"({self.num_nodes // 4}: hubs of more coalesce below the degree "
                             f"asked), got {self.max_degree}; pass a value in that range, or 0 "
                             "for the natural cutoff")
        if self.hub_degree() < self.avg_degree:
            raise UsageError(f"synthetic avg_degree {self.avg_degree:g} exceeds what "
                             f"{self.num_nodes} nodes can hold as a power law with hubs of degree "
                             f"{self.hub_degree():g}; ask for a smaller avg_degree or more nodes")

    def hub_degree(self) -> float:
        """The largest expected degree of a power-law graph (``max_degree``, or the natural
        cutoff when it is 0)."""
        if self.max_degree:
            return float(self.max_degree)
        natural = self.avg_degree * self.num_nodes ** (1.0 / (self.degree_exponent - 1.0)) / 2
        return float(min(self.num_nodes // 4, natural))


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
    nodes: int = option(_SPEC.num_nodes, "number of nodes", at_least=2, at_most=1 << 31,
                        why="node indices are int64 tensors, and 2^31 nodes outgrow any memory")
    classes: int = option(_SPEC.num_classes, "planted classes", at_least=1, at_most=1 << 20)
    features: int = option(_SPEC.num_features, "feature dimension", at_least=1,
                           at_most=1 << 20)
    avg_degree: float = option(_SPEC.avg_degree, "average degree", above=0.0)
    homophily: float = option(_SPEC.homophily, "fraction of edges inside a class",
                              at_least=0.0, at_most=1.0)
    graph_seed: int = option(_SPEC.seed, "seed of the generated graph", at_least=0,
                             at_most=(1 << 63) - 1, why="torch's generators take 64-bit seeds")
    degree_exponent: float = option(_SPEC.degree_exponent,
                                    "power-law degrees: gamma of P(k) ~ k^-gamma, in (2, 10] "
                                    "(hubs, as real graphs have); 0: near-uniform degrees",
                                    at_least=0.0, omit_default=True)
    max_degree: int = option(_SPEC.max_degree, "the hubs' expected degree with "
                             "--degree-exponent; 0: the natural cutoff", at_least=0,
                             at_most=1 << 31, omit_default=True,
                             why="node indices are int64 tensors, and 2^31 nodes outgrow any "
                                 "memory")

    def check(self) -> None:
        self.spec()

    def spec(self) -> SyntheticSpec:
        """The generated graph these values describe."""
        return SyntheticSpec(self.nodes, self.classes, self.features, self.avg_degree,
                             self.homophily, self.graph_seed, self.degree_exponent,
                             self.max_degree)


EdgeReading = Literal["auto", "undirected", "directed"]
"""``[data] edges``: how a graph's edges are read (the runtime's
``edgegcl_embed.graph.EDGE_READINGS``, which edgegcl-embed's ``--edges`` takes too)."""


@dataclass(frozen=True)
class DataConfig(Section):
    """Which graph a run trains on (the ``[data]`` section).

    Example:
        >>> DataConfig(dataset="Cora").dataset
        'Cora'
    """

    TITLE = "which graph"
    dataset: str = option("synthetic", f"{', '.join(DATASETS)}, a {' / '.join(GRAPH_FILES)} "
                          "graph file, or a graph folder read memory-mapped (edgegcl convert)")
    root: str = option("", "directory holding the datasets ('': $EDGEGCL_DATA or "
                       "~/.cache/edgegcl/datasets)")
    node_table: str = option("", "a CSV / TSV / Parquet --dataset edge list's node table: "
                             "id, feature columns, label ('': the nodes the edges name, structural "
                             "features)", omit_default=True)
    edges: EdgeReading = option("auto", "how a graph's edges are read: auto (as its format "
                                "says: an edge table and the heterophilous-graph benchmark's "
                                ".npz list each undirected edge once, so both ways; edgegcl's "
                                "edge_index, .pt files and graph folders as stored), undirected "
                                "(each edge both ways, once) or directed (as stored, one way); "
                                "a file's name never changes it", omit_default=True)

