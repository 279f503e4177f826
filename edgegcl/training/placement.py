"""Where and how a run's steps run: the device, full-graph or mini-batch, the full-graph
memory check, and the mini-batch loader over the graph's structure.

Full-graph mode is one batch holding every node: the anchors are all N nodes; mini-batch
mode's anchors are a sampled subgraph's seed nodes. A step itself is
``edgegcl.training.engine.Trainer.train_step``; ``edgegcl.training.seeds`` runs seeds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader

from edgegcl.contrast.pairs import PAIRS_UP_TO
from edgegcl.data.sampling import make_loader
from edgegcl.memory import memory_limit
from edgegcl.nn.adjacency import carry_adjacency, grouped_adjacency
from edgegcl.errors import UsageError
from edgegcl.training.config import RunConfig, TrainConfig

__all__ = ["ModeChoice", "available_bytes", "check_full_graph_memory", "choose_mode",
           "full_graph_bytes", "on_disk", "resolve_device", "resolve_mode", "structure_loader"]

FULL_GRAPH_MAX_NODES = 10_000
"""``--mode auto`` trains graphs of more nodes in mini-batches even where a full-graph step
fits: on tolokers (11 758 nodes) full-graph training, one step an epoch, scored test ROC-AUC
76.13 +- 1.24 (3 seeds) against 78.46 +- 0.79 in mini-batches (docs/performance.md, "Memory of
a full-graph step")."""

FULL_GRAPH_SHARE = 0.5
"""``--mode auto`` trains full-graph only while a full-graph step's predicted peak is at most
this share of the memory available when the run starts; the rest is for what a run holds
beside its steps (a link split's training edges, the probes' embeddings) and for other
processes."""

NODE_FLOATS_PER_WIDTH = 6.5
"""Peak floats of a full-graph step per node and per unit of the model's widths (the
features, twice the hidden layer, the embeddings and the projection head): activations, their
gradients and the views' copies; 6.2 measured (docs/performance.md, "Memory of a full-graph
step")."""

PAIR_FLOATS = {"pairs": (0.0, 16.0), "dense": (9.0, 0.0)}
"""Peak floats of a full-graph step per node pair of the two views' contrast, (a, b): a + b x
theta_max, on each logits path (edgegcl.contrast.pairs), strata refresh included: 1.2 to 1.4
measured at theta_max 0.1 and 3.3 to 4.4 at 0.3 on the pairs path, 6.2 to 8.3 on the dense
one."""

EDGE_FLOATS_PER_WIDTH = 8.0
"""Peak floats of a full-graph step of the edge objective per directed edge and unit of the
embeddings' width: each masked edge's and non-edge's two gathered embeddings, their product
and gradients (7.3 to 8.2 measured); the nodes' share is NODE_FLOATS_PER_WIDTH's."""


def resolve_device(name: str) -> torch.device:
    """``auto`` is CUDA when present, else CPU; asking for CUDA without it is a usage error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {name} asked for CUDA but this torch has no CUDA device; "
                         "use --device cpu")
    return torch.device(name)


@dataclass(frozen=True)
class ModeChoice:
    """Full-graph or mini-batch, and why: ``need`` is a full-graph step's predicted peak in
    bytes and ``have`` the bytes available, both None when the user named the mode."""

    mode: str
    need: int | None = None
    have: int | None = None
    nodes: int = 0

    def line(self) -> str | None:
        """What the run says about ``--mode auto``'s choice, with the numbers; None when the
        user chose."""
        if self.need is None or self.have is None:
            return None
        need, have = _size(self.need), _size(self.have)
        if self.mode == "full":
            return (f"mode: full graph, one step per epoch (--mode auto: {self.nodes} nodes, "
                    f"and a full-graph step needs about {need} of the {have} available; "
                    "--mode minibatch bounds memory by the batch)")
        if self.nodes > FULL_GRAPH_MAX_NODES:
            why = f"{self.nodes} nodes, above the {FULL_GRAPH_MAX_NODES} it trains full-graph"
        else:
            why = (f"a full-graph step would need about {need}, more than "
                   f"{FULL_GRAPH_SHARE:.0%} of the {have} available")
        return (f"mode: mini-batches (--mode auto: {why}; --mode full trains the whole graph "
                "as one batch)")


def _size(nbytes: int) -> str:
    """Bytes as the run's lines say them: MiB below a GiB, else GiB."""
    return f"{nbytes / 2**20:.0f} MiB" if nbytes < 2**30 else f"{nbytes / 2**30:.1f} GiB"


def full_graph_bytes(cfg: TrainConfig, num_nodes: int, num_edges: int, in_dim: int) -> int:
    """A full-graph step's predicted peak memory in bytes: the nodes' activations
    (NODE_FLOATS_PER_WIDTH per unit of width), and the views' N x N contrast at the run's
    theta_max on its logits path (PAIR_FLOATS) or the edge objective's edges
    (EDGE_FLOATS_PER_WIDTH)."""
    model = cfg.model
    widths = in_dim + 2 * model.hidden_dim + model.out_dim + model.proj_dim
    floats = NODE_FLOATS_PER_WIDTH * widths * num_nodes
    if cfg.resolved_objective() == "edges":
        floats += EDGE_FLOATS_PER_WIDTH * model.out_dim * num_edges
    else:
        scheduler = cfg.schedule.scheduler
        theta = cfg.schedule.theta_max if scheduler != "none" else 1.0
        path = cfg.contrast.logits
        if path == "auto":  # the path a saturated step takes (edgegcl.contrast.pairs)
            stratify = cfg.contrast.resolved_stratify(scheduler)
            path = "pairs" if theta <= PAIRS_UP_TO[stratify] else "dense"
        a, b = PAIR_FLOATS[path]
        floats += (a + b * theta) * float(num_nodes) ** 2
    return int(4 * floats)


def available_bytes(device: torch.device) -> int:
    """Memory a run may still take on ``device``: the GPU's free memory, or the CPU's
    (edgegcl.memory.memory_limit: a cgroup's or address-space limit included)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return memory_limit()


def choose_mode(cfg: TrainConfig, data: Data, device: torch.device) -> ModeChoice:
    """``cfg.run.mode``, or for ``auto`` full-graph when the graph has at most
    FULL_GRAPH_MAX_NODES nodes and a full-graph step's predicted peak (``full_graph_bytes``)
    is at most FULL_GRAPH_SHARE of the memory available now, else mini-batches."""
    if cfg.run.mode != "auto":
        return ModeChoice(cfg.run.mode)
    nodes = int(data.num_nodes)
    need, have = _need_and_have(cfg, data, device)
    fits = nodes <= FULL_GRAPH_MAX_NODES and need <= FULL_GRAPH_SHARE * have
    return ModeChoice("full" if fits else "minibatch", need, have, nodes)


def _need_and_have(cfg: TrainConfig, data: Data, device: torch.device) -> tuple[int, int]:
    """A full-graph step's predicted bytes on ``data`` and the bytes ``device`` has now."""
    need = full_graph_bytes(cfg, int(data.num_nodes), int(data.edge_index.size(1)),
                            int(data.num_features))
    return need, available_bytes(device)


def resolve_mode(cfg: TrainConfig, data: Data, device: torch.device) -> str:
    """``choose_mode``'s mode: ``full`` or ``minibatch``."""
    return choose_mode(cfg, data, device).mode


def check_full_graph_memory(cfg: TrainConfig, data: Data, device: torch.device) -> None:
    """Refuse full-graph mode, before any allocation, when a full-graph step's predicted peak
    (``full_graph_bytes``) exceeds the memory available."""
    need, have = _need_and_have(cfg, data, device)
    if need > have:
        what = ("the edges and activations" if cfg.resolved_objective() == "edges" else
                "the N x N similarities and their gradients")
        raise UsageError(f"full-graph mode on {data.num_nodes} nodes needs about "
                         f"{need / 2**30:.1f} GiB for {what}, but {device.type} has "
                         f"{have / 2**30:.1f} GiB available; use --mode minibatch")


def on_disk(data: Data) -> Data:
    """``data`` as the steps read it: a graph folder's (edgegcl.data.folder) ``edge_index``
    made to carry the adjacency of its mapped index, so that every all-node embedding reads
    the index instead of sorting the edges in memory; any other graph as it is."""
    folder = getattr(data, "folder", None)
    if folder is not None:
        index, prefetch = folder.index, folder.prefetch
        carry_adjacency(data.edge_index, grouped_adjacency(
            index.in_ptr, index.in_src, index.out_ptr, index.out_dst,
            None if prefetch is None else (data.x, prefetch)))
    return data


def structure_loader(data: Data, cfg: RunConfig, seed: int,
                     shard: tuple[int, int] | None = None) -> NodeLoader:
    """The mini-batch loader of a run, over the graph's structure only.

    Its batches carry edges and node ids but no features: ``Trainer.project`` gathers a
    batch's feature rows itself (see there), and the labels are not needed to train.
    ``shard = (rank, world_size)`` under torchrun (edgegcl.data.sampling.ShardedIndices).
    """
    structure = Data(edge_index=data.edge_index, num_nodes=data.num_nodes)
    folder = getattr(data, "folder", None)  # a graph folder: its mapped index, not a new one
    return make_loader(structure, cfg.batch_size, cfg.fanout, sampler=cfg.sampler,
                       seed=seed, shard=shard, index=None if folder is None else folder.index,
                       prefetch=None if folder is None else folder.prefetch)
