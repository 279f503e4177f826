"""A training step: views -> encoder -> HANS-scheduled InfoNCE -> backward -> update.

Full-graph mode is one batch holding every node: the anchors are all N nodes; mini-batch
mode's anchors are a sampled subgraph's seed nodes. The parts a step is made of (the
scheduler, the negative selection, the views, the contrast) are built and composed here;
``edgegcl.engine.Trainer`` owns them for a seed, ``edgegcl.run`` runs seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import psutil
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader

from edgegcl.augment import (
    as_features,
    column_keep,
    mask_half_rows_columns,
    remove_edges,
)
from edgegcl.config import TrainConfig
from edgegcl.errors import UsageError
from edgegcl.hans import HANS
from edgegcl.loss import (
    AnchorSimilarities,
    LossOutput,
    scheduled_info_nce,
    similarities,
)
from edgegcl.model import AdNGCL
from edgegcl.negatives import (
    SAMPLE_MIN,
    ActiveNegatives,
    draw_sample,
    negative_counts,
    num_candidates,
    pool_sizes,
    sample_size,
    schedule_negatives,
    schedule_sampled,
)
from edgegcl.pairs import choose_logits, pair_similarities
from edgegcl.phases import PhaseClock
from edgegcl.sampling import make_loader

FULL_GRAPH_MAX_NODES = 10_000
"""``--mode auto`` trains full-graph up to this many nodes (Cora, CiteSeer, Amazon-Photo,
Actor) and in mini-batches above (PubMed, DBLP, WikiCS, ...): the N x N terms of a
10 000-node graph already take about 12 GiB (FULL_GRAPH_FLOATS_PER_PAIR)."""

FULL_GRAPH_FLOATS_PER_PAIR = 32
"""Peak bytes / 4 per node pair of a full-graph step (similarity blocks, exponentials,
gradients, the stratification's sort): 28 measured on Cora with every negative active, plus
a margin (docs/performance.md)."""


def resolve_device(name: str) -> torch.device:
    """``auto`` is CUDA when present, else CPU; asking for CUDA without it is a usage error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {name} asked for CUDA but this torch has no CUDA device; "
                         "use --device cpu")
    return torch.device(name)


def make_hans(cfg: TrainConfig) -> HANS:
    """The scheduler of a run: caps theta_cat = ratio x theta_max, paper names throughout.

    ``scheduler = "none"`` is the all-negatives baseline (GRACE's contrast): theta_max = 1 and
    every eta = 1 from the first epoch, so HANS starts saturated and never changes the set.
    """
    ratios = cfg.ratio_map()
    if cfg.scheduler == "none":
        return HANS(1.0, ratios, T_init=cfg.T_init, T_int=cfg.T_int, e=cfg.e, gamma=cfg.gamma,
                    b=cfg.b, c_cat=cfg.c_cat_map(), eta_0=1.0, floor=cfg.floor)
    return HANS(cfg.theta_max, {c: r * cfg.theta_max for c, r in ratios.items()},
                T_init=cfg.T_init, T_int=cfg.T_int, e=cfg.e, gamma=cfg.gamma, b=cfg.b,
                c_cat=cfg.c_cat_map(), eta_0=cfg.eta_0, floor=cfg.floor,
                swap_every=cfg.swap_every or None)


def make_selector(cfg: TrainConfig, mode: str, seed: int = 0) -> NegativeSelector:
    """The negative selection of a run in ``mode`` (full or minibatch): strata refreshed every
    T_int epochs on the full graph, every batch in mini-batches (new candidates each time).
    Without a scheduler every candidate is active and nothing is ranked, whatever ``stratify``
    says (sampled strata at a full, saturated budget take no sample)."""
    stratify = "sampled" if cfg.scheduler == "none" else cfg.stratify
    return NegativeSelector(cfg.ratio_map(), cfg.T_int if mode == "full" else 1, stratify,
                            cfg.stratify_sample, seed)


class NegativeSelector:
    """Keeps the active negatives between refreshes, and chooses how they are found.

    Stratification is the costliest step of HANS, so it runs when the schedule changes (new
    counts or a swap) and otherwise every ``refresh_every`` steps: T_int epochs in full-graph
    mode, as the paper's complexity analysis assumes (strata recomputed at the T_int
    checkpoints), and every batch in mini-batch mode, where candidates change. ``stratify``
    is ``"sampled"`` (each anchor ranks a random sample of about as many candidates as it
    uses, at least ``sample_min``, drawn with this selector's own generator, seeded with
    ``seed``: edgegcl.negatives.schedule_sampled) or ``"exact"`` (all 2B - 2); sampled strata
    whose sample would be every candidate are exact. Once every candidate is active
    (theta_max = 1 at saturation) the loss no longer depends on the strata and a swap cannot
    change the active set, so the strata stay as they were; they then only label the
    per-category losses that are logged. On the scheduled-pairs path the drawn columns'
    similarities come along only in the step that drew them; a kept active set is handed out
    without them, and the loss recomputes them from that step's projections.
    """

    def __init__(self, ratios: dict[str, float], refresh_every: int, stratify: str = "sampled",
                 sample_min: int = SAMPLE_MIN, seed: int = 0) -> None:
        self.ratios, self.refresh_every = ratios, refresh_every
        self.stratify, self.sample_min = stratify, sample_min
        self.generator = torch.Generator().manual_seed(seed)
        self._key: tuple[Any, ...] | None = None
        self._active: tuple[ActiveNegatives, ActiveNegatives] | None = None

    def reset(self) -> None:
        """Forget the kept active sets: the next step stratifies afresh."""
        self._key, self._active = None, None

    def plan(self, num_anchors: int, hans: HANS) -> tuple[dict[str, int], int, bool]:
        """(counts per category, candidates per anchor the strata rank or sample, whether the
        per-category losses are wanted) for a batch of ``num_anchors`` in HANS's state.

        Sampled strata rank ``sample_size`` candidates while HANS is still growing. Once it
        is saturated every category uses its whole share, so the active set is the same
        fraction of every pool: it is drawn as a uniform random sample of that many
        candidates, each pool's share holding in expectation, with nothing ranked, and the
        per-category losses, which HANS no longer reads, are not computed (docs/hans.md).
        """
        c = num_candidates(num_anchors)
        counts = negative_counts(hans.fractions(), c, self.ratios)
        if self.stratify != "sampled":
            return counts, c, True
        if hans.saturated:
            size = sum(counts.values())
            return (pool_sizes(size, self.ratios) if size < c else counts), size, False
        return counts, sample_size(c, self.ratios, counts, self.sample_min), True

    def touched(self, num_anchors: int, hans: HANS) -> int:
        """Candidates per anchor a step's strata rank (sampled) or its loss uses (exact): what
        the pairs path's cost follows (edgegcl.pairs.choose_logits)."""
        counts, size, _ = self.plan(num_anchors, hans)
        return size if self.stratify == "sampled" else sum(counts.values())

    def get(self, sims: AnchorSimilarities, hans: HANS, epoch: int
            ) -> tuple[ActiveNegatives, ActiveNegatives]:
        counts, size, labels = self.plan(sims.num_anchors, hans)
        c = num_candidates(sims.num_anchors)
        if size == c and not labels and not sims.keeps_values:  # every candidate, no labels
            every = ActiveNegatives(torch.empty(sims.num_anchors, 0, dtype=torch.long,
                                                device=sims.device),
                                    tuple(counts.values()), c, grouped=False)  # type: ignore[arg-type]
            return every, every
        key = (tuple(counts.values()), hans.draw, sims.num_anchors, labels)
        if self._active is not None and self._active[0].complete and key[0] == self._key[0]:
            return self._active  # type: ignore[return-value]
        stale = (epoch - 1) % self.refresh_every == 0
        if self._active is None or key != self._key or stale:
            fresh = tuple(self._schedule(sims, d, counts, size, labels, hans.draw)
                          for d in (0, 1))
            # similarities of this step only: a later step recomputes its own
            self._active = tuple(replace(a, values=None) for a in fresh)  # type: ignore[assignment]
            self._key = key
            return fresh  # type: ignore[return-value]
        return self._active  # type: ignore[return-value]

    def _schedule(self, sims: AnchorSimilarities, direction: int, counts: dict[str, int],
                  size: int, labels: bool, draw: int) -> ActiveNegatives:
        b, c = sims.num_anchors, num_candidates(sims.num_anchors)
        if self.stratify == "sampled" and size < c:
            sample = draw_sample(b, size, self.generator, sims.device)
            return schedule_sampled(sims.candidate_values(direction), b, sims.device, self.ratios,
                                    counts, draw, sample, keep_values=sims.keeps_values,
                                    grouped=labels and direction == 0)  # the loss reads d 0's
        return schedule_negatives(sims.candidate_rows(direction), b, sims.device, self.ratios,
                                  counts, draw, keep_values=sims.keeps_values)


def project_views(model: AdNGCL, x: Tensor, edge_index: Tensor,
                  num_sampled_nodes: Sequence[int] | None, cfg: TrainConfig,
                  generator: torch.Generator, rows: Tensor | None = None
                  ) -> tuple[Tensor, Tensor]:
    """The projected anchors (H^1, H^2) of the two views of a (sub)graph (Eqs. 1-5).

    Full graph (``num_sampled_nodes`` None): every node is an anchor. Mini-batch: a
    sampler's per-hop node counts, the seeds (hop 0) are the anchors and the encoder runs
    layer-trimmed (edgegcl.adjacency); ``rows`` are then the subgraph's node ids into the
    graph's features ``x`` (the sampler's ``n_id``). The step gathers those rows itself, so it
    holds the only copy and lets it go before view 2's forward pass: with the view-1 mask
    folded into the encoder (edgegcl.augment), a step's feature-sized tensors are one copy at
    a time. Draws from ``generator`` in the order nu_1, A_1, X_2, A_2.
    """
    if rows is not None:
        x = as_features(x.index_select(0, rows.to(x.device)))
    keep_1 = column_keep(x.size(1), cfg.p_feature_1, generator, x.device)  # Eq. 2
    edges_1 = remove_edges(edge_index, cfg.p_edge_1, generator)  # Eq. 1
    h1 = model.project(model(x, edges_1, num_sampled_nodes, keep_1))
    x_2 = mask_half_rows_columns(x, cfg.p_feature_2, generator)  # Eq. 3
    del x  # a gathered batch is freed here (a layer that saved it for backward keeps it)
    edges_2 = remove_edges(edge_index, cfg.p_edge_2, generator)
    return h1, model.project(model(x_2, edges_2, num_sampled_nodes))


def contrast(h1: Tensor, h2: Tensor, tau: float, logits: str, selector: NegativeSelector,
             hans: HANS, step: int, clock: PhaseClock | None = None) -> LossOutput:
    """The HANS-scheduled symmetric InfoNCE (Eq. 6) between the projected anchors of the two
    views at temperature ``tau``, over the dense similarity blocks or the scheduled pairs only
    (``logits``; ``auto`` picks per step from HANS's current state,
    edgegcl.pairs.choose_logits). ``step`` numbers the selector's refreshes."""
    num_anchors = h1.size(0)
    path = choose_logits(logits, selector.stratify, selector.touched(num_anchors, hans),
                         num_candidates(num_anchors))
    sims = (pair_similarities if path == "pairs" else similarities)(h1, h2, tau)
    if clock is not None:
        clock.mark("similarities")
    active = selector.get(sims, hans, step)
    if clock is not None:
        clock.mark("strata")
    out = scheduled_info_nce(sims, active)
    if clock is not None:
        clock.mark("loss forward")
    return out


def contrastive_step(model: AdNGCL, x: Tensor, edge_index: Tensor,
                     num_sampled_nodes: Sequence[int] | None, cfg: TrainConfig,
                     generator: torch.Generator, selector: NegativeSelector, hans: HANS,
                     step: int, rows: Tensor | None = None) -> LossOutput:
    """One step's loss, ready for backward: ``project_views``, then ``contrast``."""
    h1, h2 = project_views(model, x, edge_index, num_sampled_nodes, cfg, generator, rows)
    return contrast(h1, h2, cfg.tau, cfg.logits, selector, hans, step)


def training_step(model: AdNGCL, opt: torch.optim.Optimizer, x: Tensor, edge_index: Tensor,
                  num_sampled_nodes: Sequence[int] | None, cfg: TrainConfig,
                  generator: torch.Generator, selector: NegativeSelector, hans: HANS, step: int,
                  rows: Tensor | None = None, clock: PhaseClock | None = None) -> LossOutput:
    """``contrastive_step``, backward and the optimiser's update: one optimisation step.

    With a ``clock`` the backward runs in two parts, the loss's down to the projections and
    then the encoder's (same gradients, PhaseClock has the phases).
    """
    h1, h2 = project_views(model, x, edge_index, num_sampled_nodes, cfg, generator, rows)
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


def structure_loader(data: Data, cfg: TrainConfig, seed: int) -> NodeLoader:
    """The mini-batch loader of a run, over the graph's structure only.

    Its batches carry edges and node ids but no features: ``project_views`` gathers a
    batch's feature rows itself (see there), and the labels are not needed to train.
    """
    structure = Data(edge_index=data.edge_index, num_nodes=data.num_nodes)
    return make_loader(structure, cfg.batch_size, cfg.fanout_list(), sampler=cfg.sampler,
                       seed=seed)
