"""A training step: views -> encoder -> HANS-scheduled InfoNCE -> backward -> update.

Full-graph mode is one batch holding every node: the anchors are all N nodes; mini-batch
mode's anchors are a sampled subgraph's seed nodes. The parts a step is made of (the
scheduler, the negative selection, the views, the contrast) are built and composed here;
``edgegcl.training.engine.Trainer`` owns them for a seed, ``edgegcl.training.run`` runs seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import math

import psutil
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader

from edgegcl.config import TrainConfig
from edgegcl.contrast.hans import CATEGORIES, HANS
from edgegcl.contrast.loss import LossOutput
from edgegcl.contrast.module import contrast
from edgegcl.contrast.selection import NegativeSelector
from edgegcl.data.sampling import make_loader
from edgegcl.errors import UsageError
from edgegcl.nn.augment import (
    as_features,
    column_keep,
    mask_half_rows_columns,
    remove_edges,
)
from edgegcl.nn.model import AdNGCL
from edgegcl.phases import PhaseClock

if TYPE_CHECKING:
    from edgegcl.training.distributed import World

__all__ = ["EQUAL_LOSSES", "NegativeSelector", "contrast", "contrastive_step", "make_hans",
           "make_selector", "project_views", "reach_epoch", "training_step"]

FULL_GRAPH_MAX_NODES = 10_000
"""``--mode auto`` trains full-graph up to this many nodes (Cora, CiteSeer, Amazon-Photo,
Actor) and in mini-batches above (PubMed, DBLP, WikiCS, ...): the N x N terms of a
10 000-node graph already take about 12 GiB (FULL_GRAPH_FLOATS_PER_PAIR)."""

FULL_GRAPH_FLOATS_PER_PAIR = 32
"""Peak bytes / 4 per node pair of a full-graph step (similarity blocks, exponentials,
gradients, the stratification's sort), measured on Cora with every negative active, plus a
margin (docs/performance.md, "Memory of a full-graph step")."""


def resolve_device(name: str) -> torch.device:
    """``auto`` is CUDA when present, else CPU; asking for CUDA without it is a usage error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {name} asked for CUDA but this torch has no CUDA device; "
                         "use --device cpu")
    return torch.device(name)


def reach_epoch(cfg: TrainConfig) -> int | None:
    """T_reach: the epoch by which the deadline pace has theta_max in use (ceil(reach x
    epochs)); None with the fixed pace."""
    return math.ceil(cfg.reach * cfg.epochs - 1e-9) if cfg.pace == "deadline" else None


def make_hans(cfg: TrainConfig) -> HANS:
    """The scheduler of a run: caps theta_cat = ratio x theta_max, paper names throughout;
    with theta_max = 0 the caps of a full budget, held at eta_0 (edgegcl.contrast.hans).

    ``scheduler = "none"`` is the all-negatives baseline (GRACE's contrast): theta_max = 1 and
    every eta = 1 from the first epoch, so HANS starts saturated and never changes the set.
    ``scheduler = "random"`` schedules as HANS does; the trainer hands it equal losses
    (``equal_losses``), so it follows the pace with every gate open.
    """
    ratios = cfg.ratio_map()
    if cfg.scheduler == "none":
        return HANS(1.0, ratios, T_init=cfg.T_init, T_int=cfg.T_int, e=cfg.e, gamma=cfg.gamma,
                    b=cfg.b, c_cat=cfg.c_cat_map(), eta_0=1.0, floor=cfg.floor)
    return HANS(cfg.theta_max, {c: r * (cfg.theta_max or 1.0) for c, r in ratios.items()},
                T_init=cfg.T_init, T_int=cfg.T_int, e=cfg.e, gamma=cfg.gamma, b=cfg.b,
                c_cat=cfg.c_cat_map(), eta_0=cfg.eta_0, floor=cfg.floor,
                swap_every=cfg.swap_every or None, T_reach=reach_epoch(cfg),
                category_loss=cfg.category_loss, gate=cfg.gate)


EQUAL_LOSSES = dict.fromkeys(CATEGORIES, 1.0)
"""What the random-subset baseline's HANS reads every epoch: its gate always opens (Eq. 7)
and every category has the same loss share (Eq. 8), so its counts follow the pace alone."""


def resolved_stratify(cfg: TrainConfig) -> str:
    """``stratify`` with ``auto`` resolved: exact for ``pick = hardest``, sampled otherwise;
    sampled (nothing ranked) for the baselines, whatever it says."""
    if cfg.scheduler != "hans":
        return "sampled"
    if cfg.stratify == "auto":
        return "exact" if cfg.pick == "hardest" else "sampled"
    return cfg.stratify


def make_selector(cfg: TrainConfig, mode: str, seed: int = 0) -> NegativeSelector:
    """The negative selection of a run in ``mode`` (full or minibatch): strata refreshed every
    T_int epochs on the full graph, every batch in mini-batches (new candidates each time).
    Without a scheduler every candidate (of ``candidates``: both views' 2B - 2, or the other
    view's B - 1) is active and nothing is ranked, whatever ``stratify`` says (sampled strata
    at a full, saturated budget take no sample); the random-subset baseline draws a uniform
    random subset of the candidates, nothing ranked either."""
    return NegativeSelector(cfg.ratio_map(), cfg.T_int if mode == "full" else 1,
                            resolved_stratify(cfg), cfg.stratify_sample, seed,
                            cfg.pick if cfg.scheduler == "hans" else "random", cfg.candidates,
                            uniform=cfg.scheduler == "random")


def _unwrapped(model: torch.nn.Module) -> AdNGCL:
    """The AdNGCL inside a ``DistributedDataParallel`` wrapper (or the model itself)."""
    return getattr(model, "module", model)  # type: ignore[return-value]


def project_views(model: torch.nn.Module, x: Tensor, edge_index: Tensor,
                  num_sampled_nodes: Sequence[int] | None, cfg: TrainConfig,
                  generator: torch.Generator, rows: Tensor | None = None,
                  unfixed: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The projected anchors (H^1, H^2) of the two views of a (sub)graph (Eqs. 1-5).

    Full graph (``num_sampled_nodes`` None): every node is an anchor. Mini-batch: a
    sampler's per-hop node counts, the seeds (hop 0) are the anchors and the encoder runs
    layer-trimmed (edgegcl.nn.adjacency); ``rows`` are then the subgraph's node ids into the
    graph's features ``x`` (the sampler's ``n_id``). The step gathers those rows itself, so it
    holds the only copy and lets it go before view 2's forward pass: with the view-1 mask
    folded into the encoder (edgegcl.nn.augment), a step's feature-sized tensors are one copy at
    a time. Draws from ``generator`` in the order nu_1, A_1, X_2, A_2. ``model`` may be an
    AdNGCL inside ``DistributedDataParallel``: the encoder then runs through the wrapper.
    ``unfixed``: view 2's masked columns when they are drawn once per run (``fixed_half =
    "run"``); by default Eq. 3's halves are redrawn at every step.
    """
    if rows is not None:
        x = as_features(x.index_select(0, rows.to(x.device)))
    keep_1 = column_keep(x.size(1), cfg.p_feature_1, generator, x.device)  # Eq. 2
    edges_1 = remove_edges(edge_index, cfg.p_edge_1, generator)  # Eq. 1
    head = _unwrapped(model).project
    h1 = head(model(x, edges_1, num_sampled_nodes, keep_1))
    x_2 = mask_half_rows_columns(x, cfg.p_feature_2, generator, unfixed)  # Eq. 3
    del x  # a gathered batch is freed here (a layer that saved it for backward keeps it)
    edges_2 = remove_edges(edge_index, cfg.p_edge_2, generator)
    return h1, head(model(x_2, edges_2, num_sampled_nodes))


def contrastive_step(model: torch.nn.Module, x: Tensor, edge_index: Tensor,
                     num_sampled_nodes: Sequence[int] | None, cfg: TrainConfig,
                     generator: torch.Generator, selector: NegativeSelector, hans: HANS,
                     step: int, rows: Tensor | None = None, world: World | None = None,
                     unfixed: Tensor | None = None) -> LossOutput:
    """One step's loss, ready for backward: ``project_views``, the world's anchors with global
    negatives (``training_step``), then ``contrast``."""
    h1, h2 = project_views(model, x, edge_index, num_sampled_nodes, cfg, generator, rows,
                           unfixed)
    if world is not None:
        h1, h2 = world.gather_views(h1, h2)
    return contrast(h1, h2, cfg.tau, cfg.logits, selector, hans, step)


def training_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: Tensor,
                  edge_index: Tensor, num_sampled_nodes: Sequence[int] | None, cfg: TrainConfig,
                  generator: torch.Generator, selector: NegativeSelector, hans: HANS, step: int,
                  rows: Tensor | None = None, clock: PhaseClock | None = None,
                  world: World | None = None, unfixed: Tensor | None = None) -> LossOutput:
    """``contrastive_step``, backward and the optimiser's update: one optimisation step.

    With a ``clock`` the backward runs in two parts, the loss's down to the projections and
    then the encoder's (same gradients, PhaseClock has the phases). With a ``world`` of global
    negatives the anchors are every rank's (edgegcl.training.distributed.World.gather_views):
    each rank computes the same world-wide loss, and the all-gather's backward with DDP's
    averaging gives every rank that loss's gradient. ``unfixed``: see ``project_views``.
    """
    h1, h2 = project_views(model, x, edge_index, num_sampled_nodes, cfg, generator, rows,
                           unfixed)
    if world is not None:
        h1, h2 = world.gather_views(h1, h2)
    if clock is None:
        out = contrast(h1, h2, cfg.tau, cfg.logits, selector, hans, step)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
    else:
        clock.mark("encoder forward")
        p1, p2 = (h.detach().requires_grad_() for h in (h1, h2))
        out = contrast(p1, p2, cfg.tau, cfg.logits, selector, hans, step, clock)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        clock.mark("loss backward")
        torch.autograd.backward((h1, h2), (p1.grad, p2.grad))
        clock.mark("encoder backward")
    opt.step()
    if clock is not None:
        clock.mark("optimiser")
        clock.steps += 1
    return out


def resolve_mode(mode: str, num_nodes: int) -> str:
    """``auto``: full-graph up to FULL_GRAPH_MAX_NODES nodes, mini-batch above."""
    if mode != "auto":
        return mode
    return "full" if num_nodes <= FULL_GRAPH_MAX_NODES else "minibatch"


def full_graph_bytes(num_nodes: int) -> int:
    """Memory the full-graph contrast needs: FULL_GRAPH_FLOATS_PER_PAIR floats per node pair."""
    return FULL_GRAPH_FLOATS_PER_PAIR * 4 * num_nodes * num_nodes


def check_full_graph_memory(num_nodes: int, device: torch.device) -> None:
    """Refuse full-graph mode, before any allocation, when its N x N terms cannot fit."""
    need = full_graph_bytes(num_nodes)
    if device.type == "cuda":
        have = torch.cuda.mem_get_info(device)[0]
    else:
        have = psutil.virtual_memory().available
    if need > have:
        raise UsageError(f"full-graph mode on {num_nodes} nodes needs about {need / 2**30:.1f} GiB "
                         f"for the N x N similarities and their gradients, but {device.type} has "
                         f"{have / 2**30:.1f} GiB available; use --mode minibatch")


def batch_inputs(batch: Data, device: torch.device) -> tuple[Tensor, list[int], Tensor]:
    """A sampler's batch as ``contrastive_step`` takes it: edges, per-hop counts, node ids."""
    return batch.edge_index.to(device), list(batch.num_sampled_nodes), batch.n_id


def structure_loader(data: Data, cfg: TrainConfig, seed: int,
                     shard: tuple[int, int] | None = None) -> NodeLoader:
    """The mini-batch loader of a run, over the graph's structure only.

    Its batches carry edges and node ids but no features: ``project_views`` gathers a
    batch's feature rows itself (see there), and the labels are not needed to train.
    ``shard = (rank, world_size)`` under torchrun (edgegcl.data.sampling.ShardedIndices).
    """
    structure = Data(edge_index=data.edge_index, num_nodes=data.num_nodes)
    return make_loader(structure, cfg.batch_size, cfg.fanout, sampler=cfg.sampler,
                       seed=seed, shard=shard)
