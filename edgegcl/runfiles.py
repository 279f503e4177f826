"""The run directory's layout: the name of every file a run writes (docs/run-directory.md),
defined here and nowhere else, so that the modules that write them and those that read them
back (resume, load_run, export, plot) cannot disagree. The standard library alone: the jobs
name these files before torch loads."""

from __future__ import annotations

import re
from pathlib import Path

CONFIG = "config.toml"
"""The resolved configuration (loadable with --config)."""
GRAPH = "graph.json"
"""The record of the graph trained on (edgegcl.data.identity)."""
METRICS = "metrics.json"
"""The run's figures, written when every seed is done."""
CHECKPOINT = "checkpoint.pt"
"""The run's (and in a seed directory, the seed's) checkpoint chosen on validation."""
EMBEDDINGS = "embeddings.npy"
"""With --save-embeddings: the kept encoder's embeddings of the training graph."""
PROFILE = "profile.json"
"""With --auto-budget: the profiler's table and choice."""
NODE_IDS = "node_ids.txt"
"""An edge list's node ids, one per line, in the order of the embeddings' rows."""
LOCK = ".edgegcl.lock"
"""Held by the one process writing the run (edgegcl.training.lock.RunLock)."""
SEED_PREFIX = "seed-"
"""Seed K's files are in ``seed-K`` (``seed_dir``)."""
STATE = "state.pt"
"""A seed's whole training state, for --resume."""
RESULT = "result.pt"
"""A seed's finished result."""
EPOCHS = "epochs.csv"
"""A seed's curve, one row per epoch."""
EVENTS = "hans_events.jsonl"
"""A seed's HANS decisions, one JSON line each."""
SEARCH = "search.json"
"""A seed's encoder search so far (edgegcl.training.searchrecord)."""

WRITTEN = re.compile("|".join(re.escape(name) for name in (
    CONFIG, PROFILE, METRICS, CHECKPOINT, GRAPH, NODE_IDS, LOCK)) + "|"
    + re.escape(SEED_PREFIX) + r"\d+|\..+\.\d+\.[0-9a-f]+\.tmp")
"""The names a run writes at the top of its directory (and its temporaries): a failed start
removes these and nothing else."""


def seed_dir(run_dir: Path, seed: int) -> Path:
    """Seed ``seed``'s directory in ``run_dir`` (0-based, as the files name it)."""
    return Path(run_dir) / f"{SEED_PREFIX}{seed}"
