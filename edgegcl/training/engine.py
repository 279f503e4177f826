"""The training engine: one object that owns everything a seed's training updates.

``Trainer`` builds the model, the optimiser, HANS, the negative selection and the
augmentation stream from a configuration, and runs steps and epochs with them; ``edgegcl
train``, the resource profiler and the benchmarks all train through it, so there is one place
where a step is assembled. Its ``state_dict()`` holds every piece of that state (weights,
optimiser moments, HANS with its loss history, the selector's kept strata and stream, the augmentation
stream and the epoch count), in the manner of ``torch.optim.lr_scheduler``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch_geometric.loader import NodeLoader

from edgegcl.config import TrainConfig
from edgegcl.contrast.hans import HANS, HANSEvent
from edgegcl.contrast.loss import LossOutput
from edgegcl.nn.augment import unfixed_half
from edgegcl.nn.model import AdNGCL
from edgegcl.contrast.negatives import CATEGORIES
from edgegcl.phases import PhaseClock
from edgegcl.training.distributed import World
from edgegcl.training.step import (
    EQUAL_LOSSES,
    NegativeSelector,
    batch_inputs,
    make_hans,
    make_selector,
    training_step,
)

__all__ = ["EpochResult", "Trainer"]

AUGMENT_SEED_STRIDE = 7919
"""Rank r's augmentation stream is seeded ``seed + AUGMENT_SEED_STRIDE * r`` (rank 0 as a
single process)."""


@dataclass(frozen=True)
class EpochResult:
    """One epoch: the anchor-weighted mean loss, its per-category parts (what HANS read) and
    the HANS events the epoch's end produced."""

    loss: float
    category: dict[str, float]
    events: list[HANSEvent]


class Trainer:
    """Model, optimiser, HANS, negative selection and augmentation stream of one seed.

    The model is initialised from ``seed`` (a forked global RNG, so the caller's stream is
    left as it was), the augmentation stream and the selector's stream too.

    Args:
        cfg: the run's configuration (sizes, optimiser, HANS, strata and logits paths).
        in_dim: feature dimension of the graph.
        mode: ``"full"`` (the whole graph is one batch) or ``"minibatch"``.
        device: where the model and the steps run.
        seed: seed of the initialisation and of every random stream.
        world: this rank's place under torchrun (edgegcl.training.distributed): the model is
            wrapped in ``DistributedDataParallel``, the epoch's losses are averaged over the
            ranks before HANS reads them, and rank r's augmentation stream is seeded apart.

    Example:
        >>> from edgegcl.data import SyntheticSpec, synthetic_graph
        >>> data = synthetic_graph(SyntheticSpec(num_nodes=100, num_features=8))
        >>> cfg = TrainConfig(hidden_dim=16, out_dim=8, proj_dim=8, T_init=2, T_int=2, e=1)
        >>> trainer = Trainer(cfg, in_dim=8)
        >>> for _ in range(3):
        ...     result = trainer.fit_epoch(data.x, data.edge_index)
        >>> trainer.epoch
        3
    """

    def __init__(self, cfg: TrainConfig, in_dim: int, *, mode: str = "full",
                 device: torch.device | str = "cpu", seed: int = 0,
                 world: World | None = None) -> None:
        if mode not in ("full", "minibatch"):
            raise ValueError(f"mode must be 'full' or 'minibatch', got {mode!r}")
        if world is not None and mode == "full":
            raise ValueError("data-parallel training shards mini-batches; use mode='minibatch'")
        self.cfg, self.mode, self.device, self.world = cfg, mode, torch.device(device), world
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.model = AdNGCL(in_dim, cfg.model_config()).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr,
                                          weight_decay=cfg.weight_decay)
        self.hans: HANS = make_hans(cfg)
        self.selector: NegativeSelector = make_selector(cfg, mode, seed)
        rank = 0 if world is None else world.rank
        self.generator = torch.Generator(device=self.device).manual_seed(
            seed + AUGMENT_SEED_STRIDE * rank)
        # view 2's masked half drawn once per run (fixed_half = "run"), from the seed alone
        self.unfixed = None if cfg.fixed_half == "step" else unfixed_half(
            in_dim, torch.Generator().manual_seed(seed), self.device)
        self.net: torch.nn.Module = self.model
        if world is not None:
            from torch.nn.parallel import DistributedDataParallel

            # both views' encoder passes run through the wrapper; the head's gradients are
            # averaged by the same hooks
            self.net = DistributedDataParallel(
                self.model, device_ids=[self.device] if self.device.type == "cuda" else None)
        self.epoch = 0  # epochs completed

    def step(self, x: Tensor, edge_index: Tensor, num_sampled_nodes: Sequence[int] | None = None,
             rows: Tensor | None = None, *, step: int | None = None,
             clock: PhaseClock | None = None) -> LossOutput:
        """One optimisation step on a graph (full) or a sampled subgraph (mini-batch).

        ``step`` numbers the selector's refreshes (full graph: the epoch, 1-based, strata
        refreshed every T_int; mini-batch: the batch); default ``epoch + 1``. ``clock`` times
        the step's phases (edgegcl.phases).
        """
        self.model.train()
        return training_step(self.net, self.optimizer, x, edge_index, num_sampled_nodes,
                             self.cfg, self.generator, self.selector, self.hans,
                             self.epoch + 1 if step is None else step, rows, clock, self.world,
                             self.unfixed)

    def end_epoch(self, category: dict[str, float]) -> list[HANSEvent]:
        """Hand the epoch's per-category losses to HANS (Algorithm 1) and count the epoch; the
        random-subset baseline hands it equal losses (``EQUAL_LOSSES``)."""
        self.epoch += 1
        return self.hans.step(category if self.cfg.scheduler == "hans" else EQUAL_LOSSES)

    def fit_epoch(self, x: Tensor, edge_index: Tensor | None = None,
                  loader: NodeLoader | None = None,
                  on_batch: Callable[[int, int, float], None] | None = None) -> EpochResult:
        """One epoch: a full-graph step on ``x`` and ``edge_index``, or, with a ``loader``
        (``edgegcl.training.step.structure_loader``), a pass over its batches, gathering each batch's
        rows of ``x``. ``on_batch(done, total, mean loss)`` reports progress inside a
        mini-batch epoch. Ends with ``end_epoch``."""
        if loader is None:
            if edge_index is None:
                raise ValueError("a full-graph epoch needs edge_index (or pass a loader)")
            out = self.step(x, edge_index)
            return EpochResult(out.loss.item(), dict(out.category),
                               self.end_epoch(out.category))
        loss_sum, anchors = 0.0, 0
        cat_sum = dict.fromkeys(CATEGORIES, 0.0)
        for i, batch in enumerate(loader, start=1):
            b = int(batch.batch_size)
            edges, hops, rows = batch_inputs(batch, self.device)
            out = self.step(x, edges, hops, rows, step=i)
            loss_sum += out.loss.item() * b
            anchors += b
            for c in CATEGORIES:
                cat_sum[c] += out.category[c] * b
            if on_batch is not None:
                on_batch(i, len(loader), loss_sum / anchors)
        category = {c: v / anchors for c, v in cat_sum.items()}
        loss = loss_sum / anchors
        if self.world is not None:  # one decision for every rank: anchor-weighted means
            both = self.world.weighted_mean({**category, "_loss": loss}, anchors)
            loss = both.pop("_loss")
            category = both
        return EpochResult(loss, category, self.end_epoch(category))

    def state_dict(self) -> dict[str, Any]:
        """Everything training changes: weights, optimiser, HANS, the random streams, the
        epoch count. Tensors are references, as in ``nn.Module.state_dict()``: save (or
        ``copy.deepcopy``) it before training on."""
        return {"epoch": self.epoch, "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(), "hans": self.hans.state_dict(),
                "selector": self.selector.state_dict(),
                "generator": self.generator.get_state()}

    def streams(self) -> dict[str, Any]:
        """This rank's own random streams (augmentation, negative selection): what differs
        between ranks, saved per rank under torchrun."""
        return {"selector": self.selector.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict()``, the selector's kept strata included."""
        self.epoch = int(state["epoch"])
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.hans.load_state_dict(state["hans"])
        self.selector.load_state_dict(state["selector"], self.device)
        self.generator.set_state(state["generator"])
