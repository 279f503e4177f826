"""A seed's checkpoints judged on links (``--task link``): the held-out edge split's
validation pairs choose the checkpoint, the test pairs are read for the chosen one.

``LinkProber`` is ``Prober``'s counterpart for the link task (the same calls from the seed
loop, the hooks, the encoder search and ``state.pt``): it holds the seed's ``LinkSplit``
(edgegcl.evaluation.links), made before training from the seed, so that the trainer sees the
training edges only. At every probe the embeddings of the training graph score the
validation and test pairs by every scorer; the checkpoint with the best validation figure of
the run's metric (AUC by default; its scorer chosen on validation too) is kept.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from edgegcl.data.columns import feature_columns
from edgegcl.data.validation import LINK_PAIRS, brings_link_pairs
from edgegcl.evaluation.links import LinkScores, LinkSplit, adamic_adar, link_scores, link_split
from edgegcl.evaluation.metrics import standard_error
from edgegcl.evaluation.probe import Selection
from edgegcl.errors import UsageError
from edgegcl.training.prober import Baselines
from edgegcl.training.task import metric_problem
from edgegcl_embed.columns import STRUCTURAL
from edgegcl_embed.tables import structural_features

__all__ = ["LinkProber", "resolve_link_metric", "training_graph"]


def resolve_link_metric(metric: str) -> str:
    """The figure that chooses on the link task: ``auto`` is AUC; node metrics are refused."""
    if metric == "auto":
        return "auc"
    problem = metric_problem(metric, "link")
    if problem is not None:
        raise UsageError(problem)
    return metric


def training_graph(data: Data, split: LinkSplit) -> Data:
    """``data`` with its training edges only: what the encoder, the views and the negatives
    of a link run see (no held-out edge reaches message passing); a graph whose features are
    its structural ones (an edge list without feature columns) gets them from the training
    edges too, so that no held-out edge reaches any input of the run."""
    edge_index = split.train_edge_index()
    x = data.x
    if feature_columns(data).kind == STRUCTURAL:
        x = torch.from_numpy(structural_features(edge_index.numpy(), data.num_nodes))
    return Data(x=x, edge_index=edge_index, name=getattr(data, "name", None))


class LinkProber:
    """The link probes of one seed's checkpoints on ``split``; the same interface as
    ``edgegcl.training.prober.Prober`` (``probe``, ``selection``, ``baselines``, the best
    checkpoint and its state dict). ``features`` are the raw features scored beside the
    embeddings."""

    def __init__(self, split: LinkSplit, features: Tensor, seed: int, device: torch.device,
                 metric: str = "auto") -> None:
        self.split, self.features, self.seed, self.device = split, features, seed, device
        self.metric = resolve_link_metric(metric)
        if self.metric.startswith("hits@"):  # every checkpoint would read 100: a first one wins
            k, have = int(self.metric.removeprefix("hits@")), int(split.val_neg.size(1))
            if have < k:
                raise UsageError(f"--metric {self.metric} ranks each validation edge among {k} "
                                 f"non-edges, and this split holds {have}: every checkpoint "
                                 "would score 100; use --metric auc or ap, or a larger graph")
        self.history: list[tuple[int, LinkScores]] = []
        self.best_val, self.best_epoch = -math.inf, 0
        self.best_state: dict[str, Tensor] | None = None
        self.best_decoder: dict[str, Tensor] | None = None
        """The link decoder of the best checkpoint (an edge-objective run's), else None."""
        self.authors: list[Any] = []  # the authors' protocol is a node-label protocol

    def probe(self, epoch: int, model: nn.Module, x: Tensor, edge_index: Tensor,
              last: bool) -> dict[str, float]:
        """Score ``model``'s embeddings of the training graph on the held-out pairs after
        ``epoch`` (its link decoder among the scorers, where it has one); keep its encoder
        and decoder when its validation figure is the best so far."""
        decoder: nn.Module | None = getattr(model, "decoder", None)
        z = model.embed(x, edge_index)  # (embed restores the model's mode, the decoder's too)
        was_training = None if decoder is None else decoder.training
        if decoder is not None:
            decoder.eval()
        try:
            with torch.no_grad():
                scores = link_scores(z, self.split, self.metric, self.seed, decoder)
        finally:
            if decoder is not None:
                decoder.train(bool(was_training))
        self.history.append((epoch, scores))
        value = scores.val_score if not math.isnan(scores.val_score) else -math.inf
        if len(self.history) == 1 or value > self.best_val:
            self.best_val, self.best_epoch = value, epoch
            self.best_state = copy.deepcopy(model.encoder.state_dict())
            self.best_decoder = (None if decoder is None
                                 else copy.deepcopy(decoder.state_dict()))
        return {"val_score": scores.val_score, "test_score": scores.test_score}

    def selection(self, model: nn.Module, x: Tensor, edge_index: Tensor) -> Selection | None:
        """The checkpoint chosen on validation and its scores."""
        if not self.history:
            return None
        epoch, scores = next((e, s) for e, s in self.history if e == self.best_epoch)
        return Selection(epoch, scores)  # type: ignore[arg-type]

    def baselines(self, model: nn.Module, x: Tensor, edge_index: Tensor) -> Baselines:
        """The raw features under the same scorers, and Adamic-Adar on the training edges."""
        raw = link_scores(self.features.to(self.device).to_dense()
                          if self.features.is_sparse else self.features.to(self.device),
                          self.split, self.metric, self.seed)
        return Baselines(raw, heuristic=adamic_adar(self.split))  # type: ignore[arg-type]

    def standard_error(self, value: float) -> float:
        """The spread of a validation AUC of ``value`` over validation sets of this size
        (Hanley and McNeil), what the encoder search's margin reads."""
        pairs = self.split.val.size(1)
        return standard_error(value, 2 * pairs, "auc", pairs)

    def state_dict(self) -> dict[str, Any]:
        return {"history": [[e, asdict(s)] for e, s in self.history],
                "best": {"val": self.best_val, "epoch": self.best_epoch,
                         "state": self.best_state, "decoder": self.best_decoder},
                "authors": []}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [(e, LinkScores(**s)) for e, s in state["history"]]
        best = state["best"]
        self.best_val, self.best_epoch, self.best_state = best["val"], best["epoch"], best["state"]
        self.best_decoder = best["decoder"]


def seed_link_split(data: Data, seed: int) -> LinkSplit:
    """The split the graph file brings (every seed trains on it), else seed ``seed``'s split
    of ``data``'s edges (85 / 5 / 10)."""
    if brings_link_pairs(data):
        return LinkSplit.given(data.edge_index, data.num_nodes,
                               *(getattr(data, key) for key in LINK_PAIRS))
    return link_split(data.edge_index, data.num_nodes, seed)
