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
from dataclasses import asdict, replace
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from edgegcl.evaluation.authors import AuthorsScore, authors_probe
from edgegcl.evaluation.probe import (
    ProbeScores,
    Selection,
    checkpoint_probe_split,
    linear_probe,
    random_split,
    select_checkpoint,
)

__all__ = ["MIN_LABELLED_NODES", "Prober"]

MIN_LABELLED_NODES = 3
"""The fewest nodes whose labels can be probed: one each to train on, validate and test.
A smaller labelled graph trains as an unlabelled one (its last epoch kept)."""


class Prober:
    """The probes of one seed's checkpoints on ``data`` (its own split, from ``seed``).

    Checkpoints are probed on at most CHECKPOINT_PROBE_MAX_LABELLED train + val nodes
    (edgegcl.evaluation.probe.checkpoint_probe_split); with ``protocol = "both"`` each is also
    evaluated by the authors' protocol. An unlabelled graph (or one of fewer than
    ``MIN_LABELLED_NODES`` nodes) has nothing to select on: the last epoch's encoder is kept.

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

    def __init__(self, data: Data, seed: int, device: torch.device, protocol: str) -> None:
        self.y = getattr(data, "y", None)
        if data.num_nodes < MIN_LABELLED_NODES:  # no train, validation and test nodes to probe
            self.y = None
        self.seed, self.device, self.protocol = seed, device, protocol
        self.split = random_split(data.num_nodes, seed) if self.y is not None else None
        self.probe_split = None if self.split is None else checkpoint_probe_split(self.split)
        self.history: list[tuple[int, ProbeScores]] = []
        self.authors: list[tuple[int, AuthorsScore]] = []
        self.authors_stream = torch.Generator().manual_seed(seed)  # its splits and classifiers
        self.best_val, self.best_epoch = -1.0, 0
        self.best_state: dict[str, Tensor] | None = None

    def probe(self, epoch: int, model: nn.Module, x: Tensor, edge_index: Tensor,
              last: bool) -> dict[str, float]:
        """Probe ``model``'s frozen embeddings after ``epoch`` and keep its encoder when its
        validation micro-F1 is the best so far (the ``last`` epoch's on an unlabelled graph);
        returns the epoch row's probe columns."""
        row: dict[str, float] = {}
        if self.split is None:
            keep = last
        else:
            embeddings = model.embed(x, edge_index)
            scores = linear_probe(embeddings, self.y.to(self.device), self.probe_split,
                                  seed=self.seed)
            self.history.append((epoch, scores))
            row.update(val_micro_f1=scores.val_micro, test_micro_f1=scores.test_micro)
            if self.protocol == "both":
                self.authors.append((epoch, authors_probe(embeddings, self.y,
                                                          self.authors_stream)))
                row["authors_test_micro_f1"] = self.authors[-1][1].test_micro
            del embeddings
            keep = scores.val_micro > self.best_val
            self.best_val = max(self.best_val, scores.val_micro)
        if keep:
            self.best_state = copy.deepcopy(model.encoder.state_dict())
            self.best_epoch = epoch
        return row

    def selection(self, model: nn.Module, x: Tensor, edge_index: Tensor) -> Selection | None:
        """The checkpoint chosen on validation, its scores on the full split (the checkpoint
        probes may have used a sample of it); ``model``'s encoder is left at that checkpoint
        when it was re-probed. None without labels."""
        selection = select_checkpoint(self.history) if self.history else None
        if selection is not None and self.probe_split is not self.split:
            assert self.best_state is not None and self.split is not None
            model.encoder.load_state_dict(self.best_state)
            selection = replace(selection, scores=linear_probe(
                model.embed(x, edge_index), self.y.to(self.device), self.split, seed=self.seed))
        return selection

    def state_dict(self) -> dict[str, Any]:
        """The probes so far, the authors' stream and the best checkpoint, as plain values."""
        return {"history": [[e, asdict(sc)] for e, sc in self.history],
                "authors": [[e, asdict(a)] for e, a in self.authors],
                "authors_stream": self.authors_stream.get_state(),
                "best": {"val": self.best_val, "epoch": self.best_epoch,
                         "state": self.best_state}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a ``state_dict()``."""
        self.history = [(e, ProbeScores(**sc)) for e, sc in state["history"]]
        self.authors = [(e, AuthorsScore(**a)) for e, a in state["authors"]]
        self.authors_stream.set_state(state["authors_stream"])
        best = state["best"]
        self.best_val, self.best_epoch, self.best_state = best["val"], best["epoch"], best["state"]
