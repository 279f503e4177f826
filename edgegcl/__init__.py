"""edgegcl: AdNGCL graph contrastive learning with the HANS negative scheduler.

What a user composes, importable from the top level (loaded on first use, so ``import
edgegcl`` stays light):

- ``HANS``, the scheduler (the family: edgegcl.contrast.scheduler), and
  ``ScheduledContrast``, the scheduled contrast for any encoder;
- ``AdNGCL`` (encoder + projection head), the built-in encoders ``GCNEncoder``,
  ``EgoEncoder``, ``PolyEncoder`` (``build_encoder`` by name), ``ModelConfig``;
- ``Trainer``, the engine ``edgegcl train`` runs (any encoder: ``Trainer(encoder=...)``), and
  ``TrainConfig``;
- ``load_graph``, ``synthetic_graph``, ``SyntheticSpec``, ``make_loader`` (neighbour-sampled
  mini-batches), the two views ``Views`` (with their ``AugmentConfig``) and their
  augmentations ``remove_edges``, ``mask_columns``;
- ``linear_probe`` / ``random_split`` (the honest evaluation), ``published_split`` (a graph's
  own), ``authors_probe``, and ``feature_agreement`` (how alike linked nodes' features are);
- ``train`` (a whole run as ``edgegcl train`` makes it: run directory, lock, profiler,
  resume, ``Hook`` objects called by every seed's loop; returns the ``Run``), ``profile``,
  ``bench_budgets``, ``export`` and ``convert`` (the other commands), ``train_seeds``
  (``train`` with a ``TrainConfig`` and a graph in hand, returning the metrics) and
  ``load_run`` (a finished run back: config, encoder, metrics, ``.embed(graph)``).
"""

from __future__ import annotations

import importlib
from typing import Any

from edgegcl.deprecation import RENAMED, warn_renamed
from edgegcl_embed import quiet_onnxruntime

__version__ = "0.1.0"

quiet_onnxruntime()  # before any module of edgegcl loads onnxruntime

_EXPORTS = {
    "HANS": "edgegcl.contrast.hans",
    "ScheduledContrast": "edgegcl.contrast.module",
    "AdNGCL": "edgegcl.nn.model",
    "GCNEncoder": "edgegcl.nn.model",
    "EgoEncoder": "edgegcl.nn.ego",
    "PolyEncoder": "edgegcl.nn.poly",
    "build_encoder": "edgegcl.nn.family",
    "ModelConfig": "edgegcl.nn.config",
    "Trainer": "edgegcl.training.engine",
    "TrainConfig": "edgegcl.training.config",
    "load_graph": "edgegcl.data",
    "synthetic_graph": "edgegcl.data",
    "SyntheticSpec": "edgegcl.data",
    "make_loader": "edgegcl.data.sampling",
    "Views": "edgegcl.nn.augment",
    "AugmentConfig": "edgegcl.nn.config",
    "remove_edges": "edgegcl.nn.augment",
    "mask_columns": "edgegcl.nn.augment",
    "linear_probe": "edgegcl.evaluation.probe",
    "random_split": "edgegcl.evaluation.probe",
    "published_split": "edgegcl.evaluation.probe",
    "feature_agreement": "edgegcl.data.homophily",
    "authors_probe": "edgegcl.evaluation.authors",
    "load_run": "edgegcl.training.runs",
    "Run": "edgegcl.training.runs",
    "train_seeds": "edgegcl.jobs.train",
    "Stopped": "edgegcl.errors",
    "UsageError": "edgegcl.errors",
    "train": "edgegcl.jobs.train",
    "profile": "edgegcl.jobs.profile",
    "bench_budgets": "edgegcl.jobs.budgets",
    "export": "edgegcl.jobs.export",
    "convert": "edgegcl.jobs.convert",
    "Hook": "edgegcl.training.hooks",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if name in RENAMED:  # an old name kept for one release: warn, then the new one
        warn_renamed(f"edgegcl.{name}", RENAMED[name])
        return __getattr__(RENAMED[name].new)
    raise AttributeError(f"module 'edgegcl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
