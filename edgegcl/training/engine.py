"""The training engine: one object that owns everything a seed's training updates.

``Trainer`` builds the model (the built-in GCN, or any encoder with the projection head:
edgegcl.nn.encoders), the optimiser, the contrast (``ScheduledContrast``: HANS and the negative
selection, the object a hand-written loop uses too) and the views (``Views``) from a
configuration, and runs steps and epochs with them; ``edgegcl train``, the resource profiler
and the benchmarks all train through it. Its ``state_dict()`` holds every piece of that state
(weights, optimiser moments, HANS with its loss history, the selector's kept strata and stream,
the augmentation stream and the epoch count), in the manner of ``torch.optim.lr_scheduler``;
``step()`` ends an epoch, as a scheduler's does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader

from edgegcl.contrast.hans import EQUAL_LOSSES
from edgegcl.contrast.scheduler import CATEGORIES, NegativeScheduler, ScheduleEvent
from edgegcl.contrast.loss import LossOutput
from edgegcl.contrast.module import ScheduledContrast
from edgegcl.contrast.selection import NegativeSelector
from edgegcl.nn.augment import Views, as_features, dropout_entries, unfixed_half
from edgegcl.nn.config import AUTO
from edgegcl.nn.encoders import make_model
from edgegcl.phases import PhaseClock
from edgegcl.training.config import TrainConfig
from edgegcl.training.distributed import World, require_minibatch
from edgegcl.training.edges import EdgeBatches, MaskedEdges, edge_loss, with_decoder
from edgegcl.training.nonedges import CandidatePools, candidate_pools, schedule_non_edges
from edgegcl.training.threads import ThreadPicker

__all__ = ["EpochResult", "Trainer", "batch_inputs"]

EDGES_SEED_STRIDE = 104_729
"""The edge objective's stream (masked edges, non-edges, input dropout) is seeded
``seed + EDGES_SEED_STRIDE``, apart from the views' and the selector's."""
AUGMENT_SEED_STRIDE = 7919
"""Rank r's augmentation stream is seeded ``seed + AUGMENT_SEED_STRIDE * r`` (rank 0 as a
single process)."""


@dataclass(frozen=True)
class EpochResult:
    """One epoch: the anchor-weighted mean loss, its per-category parts (what HANS read) and
    the HANS events the epoch's end produced."""

    loss: float
    category: dict[str, float]
    events: list[ScheduleEvent]


def batch_inputs(batch: Data, device: torch.device) -> tuple[Tensor, list[int], Tensor]:
    """A sampler's batch as ``Trainer.train_step`` takes it: edges, per-hop counts, node ids."""
    return batch.edge_index.to(device), list(batch.num_sampled_nodes), batch.n_id


class Trainer:
    """Model, optimiser, contrast (HANS and the negative selection) and views of one seed.

    The model is initialised from ``seed`` (a forked global RNG, so the caller's stream is
    left as it was), the views' stream and the selector's stream too.

    Args:
        cfg: the run's configuration (sizes, optimiser, HANS, strata and logits paths).
        in_dim: feature dimension of the graph.
        mode: ``"full"`` (the whole graph is one batch) or ``"minibatch"``.
        device: where the model and the steps run.
        seed: seed of the initialisation and of every random stream.
        world: this rank's place under torchrun (edgegcl.training.distributed): the model is
            wrapped in ``DistributedDataParallel``, the epoch's losses are averaged over the
            ranks before HANS reads them, and rank r's augmentation stream is seeded apart.
        encoder: any ``torch.nn.Module`` called as ``encoder(x, edge_index)`` (a PyG
            ``GraphSAGE``, ``GAT``, ...; mini-batch: on the sampled subgraph, seeds first, its
            first rows taken); default: the encoder ``cfg.model.encoder`` names (a built-in
            one, or a user's function), which must not be ``auto`` (a run's choice).

    Example:
        >>> from edgegcl.data import SyntheticSpec, synthetic_graph
        >>> data = synthetic_graph(SyntheticSpec(num_nodes=100, num_features=8))
        >>> cfg = TrainConfig(encoder="gcn", hidden_dim=16, out_dim=8, proj_dim=8, T_init=2,
        ...                   T_int=2, e=1)
        >>> trainer = Trainer(cfg, in_dim=8)
        >>> for _ in range(3):
        ...     result = trainer.fit_epoch(data.x, data.edge_index)
        >>> trainer.epoch
        3
    """

    def __init__(self, cfg: TrainConfig, in_dim: int, *, mode: str = "full",
                 device: torch.device | str = "cpu", seed: int = 0,
                 world: World | None = None, encoder: nn.Module | None = None) -> None:
        if mode not in ("full", "minibatch"):
            raise ValueError(f"mode must be 'full' or 'minibatch', got {mode!r}")
        if world is not None:
            require_minibatch(mode)
        if encoder is None and cfg.model.encoder == AUTO:
            raise ValueError("a Trainer trains one encoder, and this configuration says "
                             "encoder = 'auto', which a run chooses per seed (edgegcl.train_seeds, "
                             "edgegcl.training.choice); name one (cfg.with_encoder('gcn'), "
                             "'ego' or 'poly') or pass an encoder module")
        self.cfg, self.mode, self.device, self.world = cfg, mode, torch.device(device), world
        self.objective = cfg.resolved_objective()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            # the link decoder, for the edge objective, trains beside the encoder
            self.model = with_decoder(make_model(in_dim, cfg.model, encoder), cfg).to(self.device)
        if self.objective == "edges":  # no views to project: the head takes no part (and
            self.model.head.requires_grad_(False)  # DDP waits for no gradient of it)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.run.lr,
                                          weight_decay=cfg.run.weight_decay)
        # strata refreshed every T_int epochs on the full graph, every batch in mini-batches
        self.contrast = ScheduledContrast.from_config(
            cfg.schedule, cfg.contrast, epochs=cfg.run.epochs, hans=cfg.hans,
            refresh_every=cfg.schedule.T_int if mode == "full" else 1, seed=seed, world=world)
        self.contrast.strata_device = self.device
        rank = 0 if world is None else world.rank
        # view 2's masked half drawn once per run (fixed_half = "run"), from the seed alone
        unfixed = None if cfg.augment.fixed_half == "step" else unfixed_half(
            in_dim, torch.Generator().manual_seed(seed), self.device)
        self.views = Views(cfg.augment, seed=seed + AUGMENT_SEED_STRIDE * rank,
                           unfixed=unfixed, device=self.device)
        self.net: nn.Module = self.model
        if world is not None:
            from torch.nn.parallel import DistributedDataParallel  # torchrun only

            # both views' encoder passes run through the wrapper; the head's gradients are
            # averaged by the same hooks
            self.net = DistributedDataParallel(
                self.model, device_ids=[self.device] if self.device.type == "cuda" else None)
        self.edges_generator = torch.Generator().manual_seed(
            seed + EDGES_SEED_STRIDE + AUGMENT_SEED_STRIDE * rank)
        self._edges: tuple[Tensor, MaskedEdges | EdgeBatches] | None = None  # and its graph
        self._edge_losses: list[float] = []  # this epoch's edge-objective losses
        self._edge_categories: dict[str, Tensor] = {}  # and each category's [loss, weight] sums
        self.edge_active = 0
        """Non-edges per anchor at the edge objective's last step."""
        self.epoch = 0  # epochs completed
        self.threads: ThreadPicker | None = None
        """Times the first steps at its thread counts until it has chosen (``edgegcl.training.
        threads``); the run sets it, None leaves torch's threads alone."""

    @property
    def scheduler(self) -> NegativeScheduler:
        """The negative scheduler (the contrast's)."""
        return self.contrast.scheduler

    @property
    def selector(self) -> NegativeSelector:
        """The negative selection (the contrast's)."""
        return self.contrast.selector

    def project(self, x: Tensor, edge_index: Tensor,
                num_sampled_nodes: Sequence[int] | None = None,
                rows: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The projected anchors (H^1, H^2) of the two views of a (sub)graph (Eqs. 1-5).

        Full graph (``num_sampled_nodes`` None): every node is an anchor. Mini-batch: a
        sampler's per-hop node counts, the seeds (hop 0) are the anchors; ``rows`` are then
        the subgraph's node ids into the graph's features ``x`` (the sampler's ``n_id``),
        gathered here, so this holds the only copy and lets it go before view 2's forward
        pass: with view 1's column mask folded into the built-in encoder's weights
        (``Views.first_mask``), a step's feature-sized tensors are one copy at a time.
        """
        if rows is not None:
            x = as_features(x.index_select(0, rows.to(x.device)))
        head = self.model.project
        keep_1, edges_1 = self.views.first_mask(x, edge_index)  # Eqs. 1-2
        h1 = head(self.net(x, edges_1, num_sampled_nodes, keep_1))
        x_2, edges_2 = self.views.second(x, edge_index)  # Eqs. 1, 3
        del x  # a gathered batch is freed here (a layer that saved it for backward keeps it)
        return h1, head(self.net(x_2, edges_2, num_sampled_nodes))

    def train_step(self, x: Tensor, edge_index: Tensor,
                   num_sampled_nodes: Sequence[int] | None = None, rows: Tensor | None = None,
                   *, step: int | None = None, clock: PhaseClock | None = None) -> LossOutput:
        """One optimisation step on a graph (full) or a sampled subgraph (mini-batch): the
        views' projections (``project``), the contrast, backward and the optimiser's update.

        ``step`` numbers the selector's refreshes (full graph: the epoch, 1-based, strata
        refreshed every T_int; mini-batch: the batch); default ``epoch + 1``. With a ``clock``
        (edgegcl.phases) the backward runs in two parts, the loss's down to the projections
        and then the encoder's (same gradients), each phase timed. Under torchrun with global
        negatives every rank computes the same world-wide loss, and the all-gather's backward
        with DDP's averaging gives every rank that loss's gradient.
        """
        self.model.train()
        step = self.epoch + 1 if step is None else step
        picker = self.threads if self.threads is not None and not self.threads.done else None
        if picker is not None:
            picker.begin()
            t0 = time.perf_counter()
        if self.objective == "edges":
            out = self.edge_step(x, edge_index)
            if picker is not None:
                picker.end(time.perf_counter() - t0)
            return out
        h1, h2 = self.project(x, edge_index, num_sampled_nodes, rows)
        if clock is None:
            out = self.contrast(h1, h2, step=step)
            self.optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
        else:
            clock.mark("encoder forward")
            p1, p2 = (h.detach().requires_grad_() for h in (h1, h2))
            out = self.contrast(p1, p2, step=step, clock=clock)
            self.optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
            clock.mark("loss backward")
            torch.autograd.backward((h1, h2), (p1.grad, p2.grad))
            clock.mark("encoder backward")
        self._update()
        if clock is not None:
            clock.mark("optimiser")
            clock.steps += 1
        if picker is not None:
            picker.end(time.perf_counter() - t0)
        return out

    def edge_step(self, x: Tensor, edge_index: Tensor) -> LossOutput:
        """One step of the edge objective on the whole graph: each direction of its edges
        masked with probability ``edge_mask`` (an edge hidden from the encoder when both
        are), its input features dropped out (``edge_dropout``), and the decoder's binary
        cross-entropy of the masked edges against the non-edges the schedule picks
        (edgegcl.training.edges, .nonedges)."""
        masked = self._edge_source(edge_index, x.size(0), MaskedEdges)
        assert isinstance(masked, MaskedEdges)
        split = masked.draw()
        pools = candidate_pools(split.hidden, masked.keys, masked.num_nodes,
                                self.cfg.learning.edge_pool, self.edges_generator)
        features = dropout_entries(as_features(x), self.cfg.learning.edge_dropout,
                                   self.edges_generator)
        z = self.net(features, split.kept.to(self.device))
        return self._edge_update(z, pools)

    def _update(self) -> None:
        """The optimiser's step on the gradients just computed, their total norm first clipped
        to ``grad_clip`` when it is set."""
        if self.cfg.run.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.run.grad_clip)
        self.optimizer.step()

    def _edge_update(self, z: Tensor, pools: CandidatePools) -> LossOutput:
        """The decoder's loss of the anchors' edges against the non-edges the scheduler picks
        from their pools (``pools``' node ids are rows of ``z``), backward and the optimiser's
        update; the loss of each category's non-edges kept for the scheduler's epoch."""
        scheduler, device = self.scheduler, z.device
        picked = schedule_non_edges(pools, scheduler.fractions(), self.cfg.schedule.ratio_map(),
                                    type(scheduler).ranks_candidates, self.edges_generator, z)
        anchors = z[pools.anchors.to(device)]
        others = z[pools.candidates.gather(1, picked.columns).to(device)]  # [M, K, D]
        decoder = self.model.decoder
        negative = decoder(anchors.unsqueeze(1), others)  # [M, K]
        weights = picked.chosen.to(device, z.dtype)
        targets = pools.targets.to(device)
        loss = edge_loss(decoder(z[targets[0]], z[targets[1]]), negative, weights)
        alpha = self.cfg.learning.degree_weight
        if alpha > 0:  # MaskGAE's degree term: each row's count of the step's masked edges
            degree = torch.bincount(targets[1], minlength=z.size(0)).to(z.dtype)
            loss = loss + alpha * torch.nn.functional.mse_loss(self.model.degree_decoder(z),
                                                               degree)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self._update()
        self._edge_losses.append(float(loss.detach()))
        if picked.category is not None:  # each category's mean loss (what HANS reads)
            terms = torch.nn.functional.softplus(negative.detach()) * weights
            category = picked.category.to(device)
            for i, c in enumerate(CATEGORIES):  # summed on the device: no sync per step
                columns = category == i
                part = torch.stack([terms[:, columns].sum(), weights[:, columns].sum()])
                self._edge_categories[c] = self._edge_categories.get(c, 0) + part
        self.edge_active = picked.columns.size(1)
        return LossOutput(loss.detach(), {})

    def _edge_source(self, edge_index: Tensor, num_nodes: int,
                     kind: type[MaskedEdges] | type[EdgeBatches]) -> MaskedEdges | EdgeBatches:
        """The edge objective's draws for this graph (made at its first step)."""
        if self._edges is None or self._edges[0] is not edge_index:
            source = kind(edge_index, num_nodes, self.cfg.learning.edge_mask,
                          self.edges_generator)
            self._edges = (edge_index, source)
        return self._edges[1]

    def edge_batch_step(self, x: Tensor, loader: NodeLoader) -> LossOutput:
        """One mini-batch step of the edge objective (edgegcl.training.edges.EdgeBatches):
        batch_size / 4 target edges, as many anchors of non-edges and their tiles' pools of
        candidates (edgegcl.training.nonedges), those nodes
        the seeds of one subgraph the loader's sampler draws, the targets and this step's
        hidden edges taken out of it before the encoder runs; the decoder's loss on the seeds'
        embeddings."""
        graph = loader.data
        batches = self._edge_source(graph.edge_index, int(graph.num_nodes), EdgeBatches)
        assert isinstance(batches, EdgeBatches)
        targets = batches.draw(max(1, self.cfg.run.batch_size // 4))
        pools = candidate_pools(targets, batches.keys, batches.num_nodes,
                                self.cfg.learning.edge_pool, self.edges_generator)
        m = targets.size(1)
        seeds, where = torch.unique(torch.cat([targets.reshape(-1), pools.anchors,
                                               pools.pools.reshape(-1)]), return_inverse=True)
        out = loader.collate_fn(seeds)
        batch = out if isinstance(out, Data) else loader.filter_fn(out)
        edges, hops, rows = batch_inputs(batch, self.device)
        edges = edges[:, batches.visible(edges.cpu(), rows.cpu(), targets).to(self.device)]
        features = as_features(x.index_select(0, rows.to(x.device)).to(self.device))
        features = dropout_entries(features, self.cfg.learning.edge_dropout,
                                   self.edges_generator)
        z = self.net(features, edges, hops)  # the seeds' rows
        local = CandidatePools(where[:2 * m].view(2, m), where[2 * m:3 * m],
                               where[3 * m:].view_as(pools.pools), pools.valid)
        return self._edge_update(z, local)

    def edge_categories(self) -> dict[str, float]:
        """This epoch's mean loss of each category's non-edges so far (the edge objective's
        per-category losses; a category without non-edges this epoch is absent)."""
        sums = {c: part.tolist() for c, part in self._edge_categories.items()}
        return {c: total / count for c, (total, count) in sums.items() if count > 0}

    def step(self) -> EpochResult:
        """End of an epoch, as ``lr_scheduler.step()``: HANS steps on the epoch's
        anchor-weighted mean losses (``ScheduledContrast.step``) and the epoch is counted.
        Under the edge objective the epoch's loss is its steps' mean, and the scheduler steps
        on each category's mean loss of its non-edges (over every rank under torchrun)."""
        if self.objective == "edges":
            category = self.edge_categories()
            losses, self._edge_losses, self._edge_categories = self._edge_losses, [], {}
            reads = type(self.scheduler).reads_losses
            if reads and self.world is not None:  # one decision for every rank
                category = self.world.weighted_mean(
                    {c: category.get(c, 0.0) for c in CATEGORIES}, 1.0)
            events = self.scheduler.step(
                {c: category.get(c, 0.0) for c in CATEGORIES} if reads else EQUAL_LOSSES)
            self.epoch += 1
            return EpochResult(sum(losses) / max(len(losses), 1), category, events)
        events = self.contrast.step()
        self.epoch += 1
        epoch = self.contrast.last_epoch
        assert epoch is not None
        return EpochResult(epoch.loss, dict(epoch.category), events)

    def fit_epoch(self, x: Tensor, edge_index: Tensor | None = None,
                  loader: NodeLoader | None = None,
                  on_batch: Callable[[int, int, float], None] | None = None) -> EpochResult:
        """One epoch: a full-graph step on ``x`` and ``edge_index``, or, with a ``loader``
        (``edgegcl.training.placement.structure_loader``), a pass over its batches, gathering each
        batch's rows of ``x``. ``on_batch(done, total, mean loss)`` reports progress inside a
        mini-batch epoch. Ends with ``step()``."""
        if loader is None:
            if edge_index is None:
                raise ValueError("a full-graph epoch needs edge_index (or pass a loader)")
            self.train_step(x, edge_index)
            return self.step()
        if self.objective == "edges":  # as many steps as the loader has batches of seeds
            steps = len(loader)
            for i in range(1, steps + 1):
                self.edge_batch_step(x, loader)
                if on_batch is not None:
                    on_batch(i, steps, sum(self._edge_losses) / len(self._edge_losses))
            return self.step()
        loss_sum, anchors = 0.0, 0
        for i, batch in enumerate(loader, start=1):
            edges, hops, rows = batch_inputs(batch, self.device)
            out = self.train_step(x, edges, hops, rows, step=i)
            if on_batch is not None:  # progress only: HANS reads the contrast's means
                loss_sum += out.loss.item() * int(batch.batch_size)
                anchors += int(batch.batch_size)
                on_batch(i, len(loader), loss_sum / anchors)
        return self.step()

    def state_dict(self) -> dict[str, Any]:
        """Everything training changes: weights, optimiser, HANS, the random streams, the
        epoch count. Tensors are references, as in ``nn.Module.state_dict()``: save (or
        ``copy.deepcopy``) it before training on."""
        return {"epoch": self.epoch, "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(), **self.contrast.get_extra_state(),
                "generator": self.views.generator.get_state(),
                "edges_generator": self.edges_generator.get_state()}

    def streams(self) -> dict[str, Any]:
        """This rank's own random streams (augmentation, negative selection, the edge
        objective's draws): what differs between ranks, saved per rank under torchrun."""
        return {"selector": self.selector.state_dict(),
                "generator": self.views.generator.get_state(),
                "edges_generator": self.edges_generator.get_state()}

    def load_streams(self, state: dict[str, Any]) -> None:
        """Restore this rank's ``streams()``."""
        self.selector.load_state_dict(state["selector"], self.device)
        self.views.generator.set_state(state["generator"])
        self.edges_generator.set_state(state["edges_generator"])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict()``, the selector's kept strata included."""
        self.epoch = int(state["epoch"])
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:  # the moments must fit their weights
            for param in group["params"]:
                for name, value in self.optimizer.state.get(param, {}).items():
                    if isinstance(value, torch.Tensor) and value.dim() and (
                            value.shape != param.shape or not value.is_floating_point()):
                        raise ValueError(f"the optimiser's {name} is {value.dtype} "
                                         f"{list(value.shape)} for a weight of "
                                         f"{list(param.shape)}")
        self.contrast.set_extra_state(state)
        self.views.generator.set_state(state["generator"])
        self.edges_generator.set_state(state["edges_generator"])
