"""What identifies the graph a run trained on, kept in its directory as ``graph.json``: where
it came from (a named dataset, a graph file, or a graph given in Python), its size, what its
feature columns are (``feature_columns``: a node table's by name and width, the structural
features, or a matrix; edgegcl_embed.columns), and two SHA-256s of its content: of what the model reads (``inputs_sha256``: x as float32, edge_index
as int64) and of what judges it (``labels_sha256``: y and the split masks). Whatever later
reads the run's training graph again rebuilds it only from the user's own arguments and
refuses, in one line that says which part differs, a graph that is not this one, or a graph
given in Python that is not given again: ``--resume`` checks both parts (it trains and
evaluates on), ``Run.embed()`` and ``export`` the model's inputs alone (a graph saved without
its labels, as edgegcl-embed reads one, is the same graph to them).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from edgegcl import runfiles
from edgegcl.data.columns import feature_columns
from edgegcl.data.files import EDGE_READS, edge_reading
from edgegcl.errors import Asking, UsageError
from edgegcl.jsonfile import read_record
from edgegcl_embed.columns import MAX_RECORD_FILE_BYTES, FeatureColumns
from edgegcl_embed.errors import shown
from edgegcl_embed.files import replacing

"""The file in a run directory that identifies its training graph."""
PYTHON = "a graph given in Python"
"""The source of a graph handed to ``edgegcl.train`` / ``train_seeds`` as a ``Data``."""
IDENTITY_LIMIT = (1 << 16) + MAX_RECORD_FILE_BYTES
"""The most bytes a graph.json is read for: its keys and its feature columns' record."""
_CHUNK = 1 << 24
"""Bytes of a tensor hashed at a time (a view of its storage, never a copy of all of it)."""


def feed(hasher: Any, tensor: Tensor | None, dtype: torch.dtype | None = None) -> None:
    """Feed ``tensor``'s layout, dtype, shape and bytes to ``hasher`` (a sparse one by its
    index and value parts), a chunk at a time, never a copy of the whole; None as a marker.
    ``dtype``: a dense tensor's bytes as that type, each chunk converted (a graph folder's
    float16 features or int32 edges hash as the same graph in float32 / int64 does). The
    graph record's hash and the profile cache's key (edgegcl.budget.cache) are made by it."""
    if tensor is None:
        hasher.update(b"none")
        return
    if tensor.layout == torch.sparse_csr:
        parts = [tensor.crow_indices(), tensor.col_indices(), tensor.values()]
    elif tensor.is_sparse:
        coalesced = tensor.coalesce()
        parts = [coalesced.indices(), coalesced.values()]
    else:
        parts = [tensor]
    converted = dtype if dtype is not None and tensor.layout == torch.strided else tensor.dtype
    hasher.update(f"{tensor.layout}{converted}{tuple(tensor.shape)};".encode())
    for part in parts:
        flat = part.detach().cpu().contiguous().reshape(-1)
        step = max(1, _CHUNK // max(flat.element_size(), 1))
        for start in range(0, flat.numel(), step):
            chunk = flat[start:start + step]
            hasher.update(chunk.to(converted if part is tensor else chunk.dtype).numpy().tobytes())


LABELS = ("y", "train_mask", "val_mask", "test_mask")
"""What judges a model and never reaches it: the labels and the split masks."""


def inputs_hash(data: Data) -> str:
    """SHA-256 over what the model reads of ``data``: x (float32) and edge_index (int64)."""
    hasher = hashlib.sha256()
    folder = getattr(data, "folder", None)  # a graph folder's features: read in order
    with (folder.features.scanned() if folder is not None and folder.features is not None
          else contextlib.nullcontext()):
        feed(hasher, data.x, torch.float32)
    feed(hasher, data.edge_index, torch.int64)
    return hasher.hexdigest()


def labels_hash(data: Data) -> str:
    """SHA-256 over what judges a model on ``data``: y and the split masks (``LABELS``)."""
    hasher = hashlib.sha256()
    for name in LABELS:
        feed(hasher, getattr(data, name, None))
    return hasher.hexdigest()


def identity(data: Data, source: str, config: str = "") -> dict[str, Any]:
    """The record of ``data``: ``source`` (a dataset's name, a graph file as the user named it,
    or ``PYTHON``), its nodes, edges, how they were read (edgegcl.data.files.edge_reading)
    and feature width, the hashes of its inputs and labels, and ``config``: the hash of the
    run's configuration (edgegcl.training.state.config_hash), which ties the record to its
    run."""
    return {"source": source, "nodes": int(data.num_nodes), "edges": int(data.edge_index.size(1)),
            "read": edge_reading(data), "features": int(data.x.size(1)),
            "feature_columns": json.loads(feature_columns(data).to_text()),
            "inputs_sha256": inputs_hash(data), "labels_sha256": labels_hash(data),
            "config_sha256": config}


def write_identity(run_dir: Path, data: Data, source: str, config: str) -> None:
    """RUN_DIR/graph.json, written atomically (``config``: the run's configuration hash)."""
    fix = "free space or pick a writable --out (the previous files are intact)"
    with replacing([Path(run_dir) / runfiles.GRAPH], UsageError, fix) as (tmp,):
        tmp.write_text(json.dumps(identity(data, source, config), indent=2) + "\n")


def read_identity(run_dir: Path) -> dict[str, Any] | None:
    """RUN_DIR/graph.json, or None when the run has none; one UsageError line for a file
    that is not one (it came from a directory: every value is checked, none is used as a
    path)."""
    path = Path(run_dir) / runfiles.GRAPH
    fix = ("restore it from a copy of the run directory, or train a new run: without it no "
           "graph can be checked against the one the run trained on")
    record = read_record(path, "graph record", fix, IDENTITY_LIMIT)
    if record is None and not path.exists():
        return None
    keys = {"source": str, "nodes": int, "edges": int, "read": str, "features": int,
            "feature_columns": dict, "inputs_sha256": str, "labels_sha256": str,
            "config_sha256": str}
    if not (isinstance(record, dict) and set(record) == set(keys)
            and all(type(record[k]) is kind for k, kind in keys.items())
            and record["read"] in EDGE_READS):
        raise UsageError(f"{path} is not a graph record written by edgegcl; {fix}")
    try:
        columns = FeatureColumns.from_value(record["feature_columns"])
    except ValueError as exc:
        raise UsageError(f"{path} is not a graph record written by edgegcl ({exc}); "
                         f"{fix}") from None
    if columns.width not in (None, record["features"]):
        raise UsageError(f"{path} is not a graph record written by edgegcl (its feature "
                         f"columns are not its {record['features']} features); {fix}")
    return record


def recorded_columns(record: dict[str, Any]) -> FeatureColumns:
    """The feature columns a record read by ``read_identity`` names (checked there)."""
    return FeatureColumns.from_value(record["feature_columns"])


def differs(record: dict[str, Any], data: Data, labels: bool = True) -> str | None:
    """What sets ``data`` apart from the graph ``record`` names (how its edges were read, its
    size, its features and edges, its labels and split masks), or None when it is that graph;
    ``labels``: whether its labels count (what evaluates a model), else only what the model
    reads."""
    if edge_reading(data) != record["read"]:
        return f"how its edges were read: {edge_reading(data)}, not {record['read']}"
    if (int(data.num_nodes), int(data.edge_index.size(1)), int(data.x.size(1))) != (
            record["nodes"], record["edges"], record["features"]):
        return "its size differs"
    if inputs_hash(data) != record["inputs_sha256"]:
        return "its features or edges differ (what the model reads)"
    if labels and labels_hash(data) != record["labels_sha256"]:
        return "its labels or split masks differ (what evaluates the model)"
    return None


def check_identity(run_dir: Path, data: Data, what: str, fix: str,
                   record: dict[str, Any] | None = None,
                   asked: list[tuple[str, str | bool | None]] | None = None,
                   labels: bool = True, config: str | None = None) -> None:
    """One UsageError line when ``data`` is not the graph RUN_DIR trained on (its record, read
    here unless given, names another size or content), or when the run has no record (no
    graph can be checked then); ``config``: the run's configuration hash, which a record
    copied from another run does not carry. ``what`` says what the caller was about to do
    with it, ``fix`` how to get the right graph, followed by the arguments ``asked`` for (an
    ``Asking``: in the words of the interface used); ``labels``: whether the labels must be
    the run's too (``differs``)."""
    record = read_identity(run_dir) if record is None else record
    restore = "restore it from a copy of the run directory, or train a new run"
    if record is None:
        raise UsageError(f"{what}: {run_dir} has no {runfiles.GRAPH}, the record of the graph "
                         f"it trained on, so no graph can be checked against it; {restore}")
    if config is not None and record["config_sha256"] != config:
        raise UsageError(f"{what}: {run_dir / runfiles.GRAPH} records another run's graph (its "
                         f"configuration is not this run's); {restore}")
    differing = differs(record, data, labels)
    if differing is not None:
        line = (f"{what}: the graph is not the one {run_dir} trained on "
                f"({shown(record['source'], 80)}: {record['nodes']} nodes, {record['edges']} "
                f"edges): {differing}; {fix}")
        raise UsageError(line) if asked is None else Asking(line, asked)
