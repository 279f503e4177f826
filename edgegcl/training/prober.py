"""A seed's checkpoints probed: the honest linear probe (and the authors' protocol), and the
encoder kept at the best validation micro-F1, with its state for ``--resume``.

``Prober`` holds everything the probes of one seed change (the probe history, the authors'
evaluations and their random stream, the best checkpoint so far) and saves it as a state dict,
in the manner of ``torch.optim``: the seed loop's probe hook (edgegcl.training.hooks.Probe)
probes through it every ``eval_every`` epochs, and the seed's ``state.pt`` holds its
``state_dict()``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from edgegcl.evaluation.authors import AuthorsScore, authors_probe
from edgegcl.evaluation.links import LinkScores
from edgegcl.evaluation.metrics import label_kind, resolve_metric, standard_error
from edgegcl.evaluation.probe import (
    ProbeScores,
    Selection,
    checkpoint_probe_split,
    Split,
    labelled_nodes,
    labelled_split,
    linear_probe,
    published_split,
    select_checkpoint,
)
from edgegcl.scratch import Scratch, mapped_scratch

__all__ = ["MIN_LABELLED_NODES", "Baselines", "Prober", "embedded"]

MIN_LABELLED_NODES = 3
"""The fewest nodes whose labels can be probed: one each to train on, validate and test.
A smaller labelled graph trains as an unlabelled one (its last epoch kept)."""


def embedded(model: nn.Module, x: Tensor, edge_index: Tensor,
             scratch: Scratch | None = None) -> Tensor:
    """Every node's frozen embeddings (``model.embed``): in memory, or, with a ``scratch``
    (a graph on disk: edgegcl.scratch.mapped_scratch), in a mapped file, their whole layers
    too, so their N x width floats are file-backed pages, not the process's memory."""
    if scratch is None:
        return model.embed(x, edge_index)
    return model.embed(x, edge_index, scratch=scratch,
                       out=scratch(x.size(0), model.head.fc1.in_features))


class _Track:
    """One split's checkpoint probes: the split, the (possibly sampled) nodes each checkpoint
    is probed on, their history and the best checkpoint's validation micro-F1, epoch and
    encoder state (kept only where the chosen checkpoint must be probed again on the whole
    split, or is the run's). ``scratch`` / ``rows``: where all-node layers and the probe's
    training rows go on a graph on disk (edgegcl.scratch)."""

    def __init__(self, split: Split, keep_state: bool, scratch: Scratch | None = None,
                 rows: Scratch | None = None) -> None:
        self.split, self.scratch, self.rows = split, scratch, rows
        self.probe_split = checkpoint_probe_split(split)
        self.keep_state = keep_state or self.probe_split is not split
        self.history: list[tuple[int, ProbeScores]] = []
        self.best_val, self.best_epoch = -1.0, 0
        self.best_state: dict[str, Tensor] | None = None

    def add(self, epoch: int, scores: ProbeScores, model: nn.Module) -> bool:
        """Record a checkpoint's probe; whether it is the best so far (by its metric's
        validation figure; the first checkpoint is the best of one)."""
        self.history.append((epoch, scores))
        value = scores.val_score if not math.isnan(scores.val_score) else -math.inf
        better = len(self.history) == 1 or value > self.best_val
        if better:
            self.best_val, self.best_epoch = value, epoch
            if self.keep_state:
                self.best_state = copy.deepcopy(model.encoder.state_dict())
        return better

    def selection(self, model: nn.Module, x: Tensor, edge_index: Tensor, y: Tensor,
                  seed: int, metric: str, kept: tuple[int, Tensor] | None = None
                  ) -> Selection | None:
        """The checkpoint chosen on validation, scored on the whole split (re-probed when the
        checkpoints were probed on a sample; ``model``'s encoder is then left at it).
        ``kept``: (epoch, embeddings) of a checkpoint probed before, read instead of embedding
        the graph again when it is the one chosen."""
        selection = select_checkpoint(self.history) if self.history else None
        if selection is not None and self.probe_split is not self.split:
            assert self.best_state is not None
            model.encoder.load_state_dict(self.best_state)
            z = kept[1] if kept is not None and kept[0] == self.best_epoch else embedded(
                model, x, edge_index, self.scratch)
            selection = replace(selection, scores=linear_probe(
                z, y, self.split, seed=seed, metric=metric, scratch=self.rows))
        return selection

    def state_dict(self) -> dict[str, Any]:
        return {"history": [[e, asdict(sc)] for e, sc in self.history],
                "best": {"val": self.best_val, "epoch": self.best_epoch,
                         "state": self.best_state}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [(e, ProbeScores(**sc)) for e, sc in state["history"]]
        best = state["best"]
        self.best_val, self.best_epoch, self.best_state = best["val"], best["epoch"], best["state"]


@dataclass(frozen=True)
class Baselines:
    """What a seed's embeddings are compared with and on: the raw features scored as the
    embeddings are on the seed's split (``raw``; links: also ``heuristic``), and, for a graph
    with published splits, the split used (``published_number`` of ``published_count``), the
    checkpoint its own validation set chose and the raw features' probe on it."""

    raw: ProbeScores | LinkScores
    published_number: int | None = None
    published_count: int = 0
    published: Selection | None = None
    published_raw: ProbeScores | None = None
    heuristic: dict[str, dict[str, float]] | None = None
    """The link task's structural heuristic (Adamic-Adar): its val / test figures."""


class Prober:
    """The probes of one seed's checkpoints on ``data`` (its own split, from ``seed``).

    Checkpoints are probed on at most CHECKPOINT_PROBE_MAX_LABELLED train + val nodes
    (edgegcl.evaluation.probe.checkpoint_probe_split); with ``protocol = "both"`` each is also
    evaluated by the authors' protocol. A graph that carries published splits
    (edgegcl.evaluation.probe.published_split) is probed on split ``seed mod S`` too, with its
    own checkpoint chosen on that split's validation set: a figure to compare with published
    tables, beside the headline random split (whose choice is the checkpoint kept). The raw
    features are probed on the same splits (``baselines``). An unlabelled graph (or one of
    fewer than ``MIN_LABELLED_NODES`` nodes) has nothing to select on: the last epoch's
    encoder is kept.

    Example:
        >>> from edgegcl.data import SyntheticSpec, synthetic_graph
        >>> from edgegcl.nn.model import AdNGCL, ModelConfig
        >>> data = synthetic_graph(SyntheticSpec(num_nodes=100, num_features=8))
        >>> model = AdNGCL(8, ModelConfig(16, 8, 8, "relu"))
        >>> prober = Prober(data, seed=0, device=torch.device("cpu"), protocol="honest")
        >>> sorted(prober.probe(4, model, data.x, data.edge_index, last=False))
        ['test_micro_f1', 'val_micro_f1']
        >>> prober.best_epoch
        4
    """

    def __init__(self, data: Data, seed: int, device: torch.device, protocol: str,
                 metric: str = "auto", scratch: Path | None = None) -> None:
        self.y = getattr(data, "y", None)
        # the nodes with a label, where a node table left some without one (in no split)
        self.labelled = None if self.y is None else labelled_nodes(self.y)
        if (data.num_nodes if self.labelled is None else self.labelled.numel()) < \
                MIN_LABELLED_NODES:  # no train, validation and test nodes to probe
            self.y = None
        self.seed, self.device, self.protocol = seed, device, protocol
        # a graph on disk: all-node layers and the probes' training rows in files there
        self.scratch = None if scratch is None else mapped_scratch(scratch)
        self.rows = None if scratch is None else mapped_scratch(scratch, scattered=False)
        # the last checkpoint's embeddings on disk: read again if it is the one chosen
        self.kept: tuple[int, Tensor] | None = None
        self.metric = "micro_f1" if self.y is None else resolve_metric(metric, label_kind(self.y))
        if self.y is not None and label_kind(self.y) == "multilabel":
            self.protocol = "honest"  # the authors' protocol is single-label micro-F1
        self.features = data.x  # the raw features' baseline is probed on the same splits
        self.split = labelled_split(self.y, seed) if self.y is not None else None
        self.track = None if self.split is None else _Track(self.split, True, self.scratch,
                                                                self.rows)
        self.probe_split = None if self.track is None else self.track.probe_split
        found = published_split(data, seed) if self.y is not None else None
        self.published_count = 0 if found is None else int(data.train_mask.size(0))
        self.published_number = None if found is None else found[0]
        self.published = None if found is None else _Track(found[1], False, self.scratch,
                                                                 self.rows)
        self.authors: list[tuple[int, AuthorsScore]] = []
        self.authors_stream = torch.Generator().manual_seed(seed)  # its splits and classifiers
        self.best_state: dict[str, Tensor] | None = None
        self._last_epoch = 0

    @property
    def history(self) -> list[tuple[int, ProbeScores]]:
        """The random split's probes, one per checkpoint."""
        return [] if self.track is None else self.track.history

    @property
    def best_val(self) -> float:
        return -1.0 if self.track is None else self.track.best_val

    @property
    def best_epoch(self) -> int:
        return self._last_epoch if self.track is None else self.track.best_epoch

    def probe(self, epoch: int, model: nn.Module, x: Tensor, edge_index: Tensor,
              last: bool) -> dict[str, float]:
        """Probe ``model``'s frozen embeddings after ``epoch`` and keep its encoder when its
        validation micro-F1 is the best so far (the ``last`` epoch's on an unlabelled graph);
        returns the epoch row's probe columns."""
        row: dict[str, float] = {}
        if self.track is None:
            if last:
                self.best_state = copy.deepcopy(model.encoder.state_dict())
                self._last_epoch = epoch
            return row
        y = self.y.to(self.device)
        self.kept = None  # its file goes before the next is written
        embeddings = embedded(model, x, edge_index, self.scratch)
        if self.scratch is not None:
            self.kept = (epoch, embeddings)
        return self._probed(epoch, model, embeddings, y, row)

    def _probed(self, epoch: int, model: nn.Module, embeddings: Tensor, y: Tensor,
                row: dict[str, float]) -> dict[str, float]:
        """``probe``'s scores of a checkpoint's ``embeddings``."""
        assert self.track is not None
        scores = linear_probe(embeddings, y, self.track.probe_split, seed=self.seed,
                              metric=self.metric, scratch=self.rows)
        row.update(val_micro_f1=scores.val_micro, test_micro_f1=scores.test_micro,
                   val_score=scores.val_score, test_score=scores.test_score)
        if self.published is not None:
            self.published.add(epoch, linear_probe(embeddings, y, self.published.probe_split,
                                                   seed=self.seed, metric=self.metric,
                                                   scratch=self.rows), model)
        if self.protocol == "both":
            z, labels = ((embeddings, self.y) if self.labelled is None else  # labelled nodes
                         (embeddings[self.labelled.to(embeddings.device)], self.y[self.labelled]))
            self.authors.append((epoch, authors_probe(z, labels, self.authors_stream)))
            row["authors_test_micro_f1"] = self.authors[-1][1].test_micro
        del embeddings
        if self.track.add(epoch, scores, model):
            self.best_state = self.track.best_state
        return row

    def standard_error(self, value: float) -> float:
        """The spread of a validation figure of ``value`` over validation sets of this size
        (edgegcl.evaluation.metrics.standard_error), what the encoder search's margin reads."""
        assert self.probe_split is not None and self.y is not None
        val = self.probe_split.val
        positives = int(self.y[val].sum()) if self.metric == "roc_auc" else 0
        return standard_error(value, int(val.numel()), self.metric, positives)

    def selection(self, model: nn.Module, x: Tensor, edge_index: Tensor) -> Selection | None:
        """The checkpoint chosen on validation, its scores on the full split (the checkpoint
        probes may have used a sample of it); ``model``'s encoder is left at that checkpoint
        when it was re-probed. None without labels."""
        if self.track is None:
            return None
        return self.track.selection(model, x, edge_index, self.y.to(self.device), self.seed,
                                    self.metric, self.kept)

    def baselines(self, model: nn.Module, x: Tensor, edge_index: Tensor) -> Baselines | None:
        """The raw features' probe on this seed's splits and the published split's choice;
        None without labels. (``model``'s encoder may be left at the published choice: call
        after the checkpoint kept is saved.)"""
        if self.track is None or self.split is None:
            return None
        y, features = self.y.to(self.device), self.features.to(self.device)
        raw = linear_probe(features, y, self.split, seed=self.seed, metric=self.metric,
                           scratch=self.rows)
        if self.published is None:
            return Baselines(raw)
        return Baselines(raw, self.published_number, self.published_count,
                         self.published.selection(model, x, edge_index, y, self.seed,
                                                  self.metric, self.kept),
                         linear_probe(features, y, self.published.split, seed=self.seed,
                                      metric=self.metric, scratch=self.rows))

    def state_dict(self) -> dict[str, Any]:
        """The probes so far, the authors' stream and the best checkpoint, as plain values."""
        track = self.track.state_dict() if self.track is not None else {
            "history": [], "best": {"val": -1.0, "epoch": self._last_epoch,
                                    "state": self.best_state}}
        return {**track, "authors": [[e, asdict(a)] for e, a in self.authors],
                "authors_stream": self.authors_stream.get_state(),
                **({} if self.published is None else {"published": self.published.state_dict()})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a ``state_dict()``."""
        if self.track is not None:
            self.track.load_state_dict(state)
            self.best_state = self.track.best_state
        else:
            self.best_state, self._last_epoch = state["best"]["state"], state["best"]["epoch"]
        if self.published is not None and "published" in state:
            self.published.load_state_dict(state["published"])
        self.authors = [(e, AuthorsScore(**a)) for e, a in state["authors"]]
        self.authors_stream.set_state(state["authors_stream"])
