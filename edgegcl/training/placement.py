"""Where and how a run's steps run: the device, full-graph or mini-batch, the full-graph
memory check, and the mini-batch loader over the graph's structure.

Full-graph mode is one batch holding every node: the anchors are all N nodes; mini-batch
mode's anchors are a sampled subgraph's seed nodes. A step itself is
``edgegcl.training.engine.Trainer.train_step``; ``edgegcl.training.seeds`` runs seeds.
"""

from __future__ import annotations

import psutil
import torch
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader

from edgegcl.data.sampling import make_loader
from edgegcl.nn.adjacency import carry_adjacency, grouped_adjacency
from edgegcl.errors import UsageError
from edgegcl.training.config import RunConfig

__all__ = ["check_full_graph_memory", "full_graph_bytes", "on_disk", "resolve_device",
           "resolve_mode", "structure_loader"]

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
