"""Graphs in and mini-batches out.

Every loader returns a ``torch_geometric.data.Data`` that has been through ``validate_graph``,
so the rest of edgegcl relies on one shape contract: ``x`` float32 ``[N, F]``, ``edge_index``
int64 ``[2, E]`` with indices in ``[0, N)``, ``y`` int64 ``[N]`` or ``None``, and a ``name``
string used in messages and run records. Anything wrong with what the user handed us becomes a
one-line ``UsageError``. Modules: ``datasets`` (by name: PyG benchmarks, synthetic, files),
``synthetic``, ``files``, ``validation``, ``sampling`` (neighbour-sampled mini-batches).
"""

from edgegcl.data.datasets import DATASETS, default_data_root, load_graph
from edgegcl.data.synthetic import SyntheticSpec, synthetic_graph
from edgegcl.data.validation import validate_graph

__all__ = ["DATASETS", "SyntheticSpec", "default_data_root", "load_graph", "synthetic_graph",
           "validate_graph"]
