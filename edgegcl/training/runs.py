"""A finished run loaded back in Python: its configuration, its trained encoder (the checkpoint
validation chose) and its metrics, and the encoder's embeddings of any graph.

Everything is read as ``edgegcl export`` reads it: the checkpoint with
``torch.load(weights_only=True)`` (edgegcl.training.checkpoint), ``metrics.json`` as JSON with
its size checked, and an encoder the run names by code only when the caller names the same
(edgegcl.trust).

Example:
    >>> import edgegcl
    >>> run = edgegcl.load_run("runs/Cora-20261127-120000")  # doctest: +SKIP
    >>> run.config.schedule.theta_max, run.metrics["summary"]["test_micro_f1"]  # doctest: +SKIP
    >>> z = run.embed()            # the training graph, rebuilt from the config  # doctest: +SKIP
    >>> z = run.embed("my_graph.npz")  # or any graph with the same features  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from edgegcl import runfiles
from edgegcl.data import load_recorded
from edgegcl.data.columns import conform
from edgegcl.data.identity import PYTHON, check_identity, differs, read_identity
from edgegcl.data.validation import validate_graph
from edgegcl.errors import UsageError, first_line
from edgegcl.nn.augment import as_features
from edgegcl.nn.family import encoder_name
from edgegcl.scratch import mapped_scratch
from edgegcl.training.checkpoint import load_checkpoint
from edgegcl.training.config import TrainConfig
from edgegcl.training.placement import on_disk
from edgegcl.trust import allow_encoder
from edgegcl_embed.columns import FeatureColumns
from edgegcl_embed.files import read_regular, refuse_planted_links

METRICS_LIMIT = 64 << 20
"""The most bytes a metrics.json is read for."""


@dataclass(frozen=True)
class Run:
    """A run directory's results: ``config``, ``encoder`` (eval mode, CPU), ``in_dim`` (the
    features it takes) and what they are (``feature_columns``: a node table's columns by
    name, structural features, or a matrix; edgegcl_embed.columns), ``seed`` and ``epoch`` of
    the checkpoint kept, and ``metrics`` (None while the run has not finished).

    Example:
        >>> run = load_run("runs/Cora-20261127-120000")  # doctest: +SKIP
        >>> run.embed().shape  # doctest: +SKIP
        torch.Size([2708, 256])
    """

    path: Path
    config: TrainConfig
    encoder: nn.Module
    in_dim: int
    seed: int
    epoch: int
    metrics: dict[str, Any] | None
    feature_columns: FeatureColumns

    def graph(self, graph: Data | str | Path | None = None, *,
              root: str | Path | None = None, node_table: str | Path | None = None) -> Data:
        """``graph`` as a validated ``Data`` (a dataset name or graph file is loaded, under
        ``root`` when given), or the training graph rebuilt from the config when None. The
        run's files never choose a path: a graph file or dataset root they record is used
        only when passed here (edgegcl.data.datasets.check_recorded_paths). Its features are
        matched to the model's by column name (edgegcl.data.columns.conform: a node table's
        columns reordered, other columns one line). Rebuilt, it must
        be the graph the run trained on (RUN_DIR/graph.json, edgegcl.data.identity): a run
        trained on a graph given in Python, or one whose file has changed since, is one
        UsageError line asking for the graph."""
        if isinstance(graph, Data):
            return conform(validate_graph(graph), self.feature_columns)
        record = read_identity(self.path) if graph is None else None
        python = record is not None and record["source"] == PYTHON
        asked = (f"{self.path} trained on {PYTHON}" if graph is not None or record is not None
                 else f"{self.path} records no training graph") + (
                     ": pass the graph, run.embed(graph) (any graph with the same features)")
        if graph is None and record is None:
            raise UsageError(asked)
        data = self.config.data
        try:
            found = load_recorded(data.dataset, data.root, self.config.synthetic_spec(),
                                  self.path, graph=graph, user_root=root, node_table=node_table,
                                  recorded_node_table=data.node_table, edges=data.edges)
        except UsageError:
            if not python:
                raise
            raise UsageError(asked) from None  # its configuration does not rebuild it
        found = conform(found, self.feature_columns)
        if record is not None:
            if python and differs(record, found, labels=False) is not None:
                raise UsageError(asked)
            check_identity(self.path, found, "run.embed()", "pass the training graph: "
                           "run.embed(graph)", record, labels=False)  # the model's inputs
        return found

    def embed(self, graph: Data | str | Path | None = None, *, out: Tensor | None = None,
              root: str | Path | None = None, node_table: str | Path | None = None) -> Tensor:
        """The encoder's embeddings [N, out_dim] of every node of ``graph`` (``graph()``), in
        eval mode without autograd; a built-in encoder a chunk of nodes at a time (its
        ``embed_nodes``: memory a few N x out_dim, never N x hidden). ``out``: a
        preallocated tensor to fill (``edgegcl.nn.model.npy_embeddings`` maps one to a file);
        ``root``: where a named dataset is read, ``node_table``: a CSV edge list's node
        table (``graph()``)."""
        if out is not None and not isinstance(out, Tensor):
            raise UsageError(f"out must be a torch.Tensor to fill, not {type(out).__name__} (a "
                             "numpy array: torch.from_numpy(array); a file: "
                             "edgegcl.nn.model.npy_embeddings)")
        data = on_disk(self.graph(graph, root=root, node_table=node_table))
        if out is not None:
            _check_out(out, data.num_nodes, self.config.model.out_dim
                       if encoder_name(self.encoder) is not None else None)
        if data.x.size(1) != self.in_dim:
            raise UsageError(f"graph {data.name} has {data.x.size(1)} features but the encoder "
                             f"of {self.path} takes {self.in_dim}; pass a graph with the "
                             "training graph's features")
        # sparse CSR where training fed it so; a graph folder's features stay mapped, read a
        # chunk of rows at a time
        folder = getattr(data, "folder", None) is not None
        x = data.x if folder else as_features(data.x)
        # a graph on disk: the layers' N rows go to files in the run directory when it is
        # writable (edgegcl.scratch), else they are in memory
        scratch = mapped_scratch(self.path) if folder and os.access(self.path, os.W_OK) else None
        with torch.no_grad():
            if encoder_name(self.encoder) is not None:  # built in: a chunk of nodes at a time
                return self.encoder.embed_nodes(x, data.edge_index, out, scratch=scratch)
            z = self.encoder(data.x, data.edge_index)
            return z if out is None else out.copy_(z)


def _check_out(out: Tensor, rows: int, width: int | None) -> None:
    """One UsageError line unless ``out`` is a float32 CPU tensor of ``rows`` rows (and
    ``width`` columns, where the encoder's width is known before it runs)."""
    want = f"float32 [{rows}, {'out_dim' if width is None else width}] on the CPU"
    fits = (out.dtype == torch.float32 and out.device.type == "cpu" and out.dim() == 2
            and out.size(0) == rows and (width is None or out.size(1) == width))
    if not fits:
        raise UsageError(f"out must be {want} (one row per node of the graph), not "
                         f"{str(out.dtype).removeprefix('torch.')} {list(out.shape)} on "
                         f"{out.device}; pass torch.empty({rows}, "
                         f"{'out_dim' if width is None else width})")


def load_run(path: str | Path, encoder: str | None = None) -> Run:
    """The run in directory ``path`` (``edgegcl train --out``). ``encoder``: the code of an
    encoder the run was trained with (``--encoder``), named by the caller as edgegcl export
    asks; a run of the built-in GCN needs none. Anything unreadable is a one-line UsageError.

    Example:
        >>> run = load_run("runs/Cora-20261127-120000")  # doctest: +SKIP
        >>> run.metrics["summary"]["test_micro_f1"]["mean"]  # doctest: +SKIP
        83.9
    """
    run_dir = Path(path)
    refuse_planted_links(run_dir, UsageError)
    if not (run_dir / runfiles.CHECKPOINT).is_file():
        raise UsageError(f"{run_dir} has no checkpoint.pt; pass the directory of an edgegcl "
                         "train run (--out)")
    if encoder:
        allow_encoder(encoder)
    ckpt = load_checkpoint(run_dir / runfiles.CHECKPOINT)
    metrics = None
    if (run_dir / runfiles.METRICS).exists():
        fix = "restore it, or load the run without its metrics by removing it"
        try:
            metrics = json.loads(read_regular(run_dir / runfiles.METRICS, "metrics file", fix,
                                              METRICS_LIMIT, UsageError).decode())
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise UsageError(f"{run_dir / runfiles.METRICS} is not edgegcl's metrics "
                             f"({first_line(exc)[:120]}); {fix}") from None
        if not isinstance(metrics, dict):
            raise UsageError(f"{run_dir / runfiles.METRICS} is not edgegcl's metrics; {fix}")
    return Run(run_dir, ckpt.config, ckpt.encoder.eval(), ckpt.in_dim, ckpt.seed, ckpt.epoch,
               metrics, ckpt.feature_columns)
