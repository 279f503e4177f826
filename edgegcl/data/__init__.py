"""Graphs in and mini-batches out.

Every loader returns a ``torch_geometric.data.Data`` that has been through ``validate_graph``,
so the rest of edgegcl relies on one shape contract: ``x`` float32 ``[N, F]``, ``edge_index``
int64 ``[2, E]`` with indices in ``[0, N)``, ``y`` int64 ``[N]`` or ``None``, and a ``name``
string used in messages and run records. Anything wrong with what the user handed us becomes a
one-line ``UsageError``. Modules: ``datasets`` (by name: PyG benchmarks, synthetic, files),
``synthetic``, ``files``, ``validation``, ``columns`` (what x's columns are, matched by
name), ``sampling`` (neighbour-sampled mini-batches).
"""

import importlib
from typing import Any

_EXPORTS = {"DATASETS": "edgegcl.data.config", "SyntheticSpec": "edgegcl.data.config",
            "default_data_root": "edgegcl.data.datasets", "load_graph": "edgegcl.data.datasets",
            "check_recorded_paths": "edgegcl.data.datasets",
            "load_recorded": "edgegcl.data.datasets",
            "synthetic_graph": "edgegcl.data.synthetic",
            "validate_graph": "edgegcl.data.validation"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:  # loaded on first use: edgegcl.data.config needs no torch
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'edgegcl.data' has no attribute {name!r}")
