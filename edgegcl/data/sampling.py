"""Neighbour-sampled mini-batches for graphs too big to train on whole.

Two interchangeable backends produce the same mini-batch contract:

* ``"pyg"``: :class:`torch_geometric.loader.NeighborLoader`, which needs the compiled
  ``pyg-lib`` or ``torch-sparse`` extension;
* ``"builtin"``: :class:`CSRNeighborSampler` driven by
  :class:`torch_geometric.loader.NodeLoader`, pure PyTorch, so it works wherever torch does
  (small devices, fresh virtual environments, new Python versions without extension wheels).

Each batch is a :class:`~torch_geometric.data.Data` holding ``x`` / ``y`` (and any other
node or edge attribute) of the sampled nodes and edges, ``edge_index`` in local indices with
messages flowing ``edge_index[0] -> edge_index[1]`` (sampled neighbour -> node that sampled
it), ``n_id`` (global node ids, the ``batch_size`` seed nodes first and in input order),
``e_id`` (global edge ids into the full graph's ``edge_index``), ``batch_size``,
``input_id``, ``num_sampled_nodes`` (per hop, hop 0 = seeds) and ``num_sampled_edges``
(per hop). A GNN run on the batch therefore has the seeds' embeddings in its first
``batch_size`` output rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import torch
import torch_geometric.typing
from torch import Tensor
from torch.utils.data import Sampler
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader, NodeLoader
from torch_geometric.sampler import BaseSampler, NodeSamplerInput, SamplerOutput

from edgegcl.data.config import SAMPLERS
from edgegcl.data.folder import FolderIndex
from edgegcl.errors import UsageError

# Marks "node not in the current batch" in the sampler's global-to-local id map.
_UNSEEN = -1


def pyg_sampler_available() -> bool:
    """Whether PyG's own ``NeighborSampler`` can run here.

    It needs ``pyg-lib`` or ``torch-sparse``; without either it constructs fine and then
    fails on the first batch, so we ask PyG's own import flags up front instead.
    """
    return bool(torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE)


def _check_num_neighbors(num_neighbors: Sequence[int]) -> list[int]:
    """Validate per-hop fanouts: a sequence of ints, each ``-1`` (all) or ``>= 0``."""
    if isinstance(num_neighbors, (str, bytes)) or not isinstance(num_neighbors, Sequence):
        raise UsageError(
            f"num_neighbors must be a list of per-hop fanouts such as [10, 10], "
            f"got {num_neighbors!r}"
        )
    fanouts: list[int] = []
    for f in num_neighbors:
        if isinstance(f, bool) or not isinstance(f, int) or f < -1:
            raise UsageError(
                f"num_neighbors entries must be integers >= 0 or -1 (all neighbours), "
                f"got {list(num_neighbors)!r}"
            )
        fanouts.append(int(f))
    return fanouts


class CSRNeighborSampler(BaseSampler):
    """Uniform neighbour sampling without replacement, pure PyTorch.

    Same direction as PyG's ``NeighborLoader``: a node samples its *in*-neighbours, i.e. for
    target ``v`` the candidates are the sources ``u`` of edges ``(u, v)`` in
    ``data.edge_index``, so messages flow from the sampled neighbours to the nodes that
    sampled them. At hop ``k`` every node first reached at hop ``k - 1`` (the seeds for
    ``k = 1``) draws ``min(fanout_k, in_degree)`` distinct incoming edges uniformly at random
    (fanout ``-1`` takes them all); sources not yet in the batch are appended to ``n_id``
    in order of first appearance. Parallel edges are distinct candidates, as in PyG.

    Every step is a vectorised tensor operation over the frontier's incoming edges: memory
    and time per hop are O(sum of the frontier's in-degrees), independent of the graph size
    except for one reusable global-to-local id map of ``num_nodes`` entries that is reset
    for just the batch's nodes after each batch.

    Randomness comes from a :class:`torch.Generator` owned by the sampler and seeded with
    ``seed`` (fresh entropy when ``None``). The generator advances with every batch, so a
    sampler built with the same seed and fed the same sequence of batches reproduces the
    same subgraphs, while repeated calls (epochs) draw fresh neighbourhoods; call
    :meth:`manual_seed` to restart the stream. Inside a ``DataLoader`` worker process the
    generator is re-seeded once from ``seed`` and the worker's own seed, so workers do not
    draw identical samples and runs stay reproducible when the loader has a seeded
    ``generator``. Not thread-safe: use one sampler per thread.
    """

    def __init__(self, data: Data, num_neighbors: Sequence[int], *, seed: int | None = None,
                 index: FolderIndex | None = None) -> None:
        if not isinstance(data, Data):
            raise UsageError(
                f"CSRNeighborSampler needs a torch_geometric Data object, got "
                f"{type(data).__name__}; convert HeteroData with to_homogeneous()"
            )
        self._num_neighbors = _check_num_neighbors(num_neighbors)
        num_nodes = data.num_nodes if index is None else index.num_nodes
        if num_nodes is None:
            raise UsageError("the graph has no node count; set data.num_nodes or data.x")
        self.num_nodes: int = int(num_nodes)
        if index is not None:  # a graph folder's index, mapped and checked when it was opened
            self._col, self._perm, self._rowptr = index.in_src, index.in_eid, index.in_ptr
        else:
            self._col, self._perm, self._rowptr = _in_index(data, self.num_nodes)
        self._local: Tensor = torch.full((self.num_nodes,), _UNSEEN, dtype=torch.long)
        self._generator = torch.Generator()
        self._seed = 0
        self._worker_seed: int | None = None
        if seed is None:
            self._seed = int(self._generator.seed())
        else:
            self.manual_seed(seed)

    # -- public API ---------------------------------------------------------------------

    @property
    def num_neighbors(self) -> list[int]:
        """Per-hop fanouts (``-1`` = all in-neighbours)."""
        return list(self._num_neighbors)

    @property
    def edge_permutation(self) -> None:
        """``None``: the edge ids this sampler returns already index ``data.edge_index``."""
        return None

    def manual_seed(self, seed: int) -> None:
        """Restart the sampler's random stream, as if it had been built with ``seed``."""
        self._seed = int(seed)
        self._generator.manual_seed(self._seed)
        self._worker_seed = None

    def sample_from_nodes(self, index: NodeSamplerInput, **kwargs: Any) -> SamplerOutput:
        """Sample the multi-hop in-neighbourhood of ``index.node`` (the seed nodes).

        Returns local ``row -> col`` edges (neighbour -> sampling node), ``node`` (= ``n_id``,
        seeds first in input order), ``edge`` (global edge ids) and per-hop counts, with
        ``metadata = (input_id, seed_time)`` as :class:`NodeLoader` expects. A seed listed
        twice keeps both of its ``n_id`` slots but is expanded (and indexed) once.
        """
        if index.input_type is not None:
            raise NotImplementedError("CSRNeighborSampler samples homogeneous graphs only")
        if index.time is not None:
            raise NotImplementedError("CSRNeighborSampler does not do temporal sampling")
        self._reseed_in_worker()
        seeds = index.node.to(torch.long).view(-1)
        if seeds.numel() and (int(seeds.min()) < 0 or int(seeds.max()) >= self.num_nodes):
            raise UsageError(f"seed nodes must lie in [0, {self.num_nodes}); check input_nodes")
        input_id = index.input_id if index.input_id is not None else torch.arange(seeds.numel())
        node, row, col, edge, num_nodes, num_edges = self._sample(seeds)
        return SamplerOutput(
            node=node,
            row=row,
            col=col,
            edge=edge,
            batch=None,
            num_sampled_nodes=num_nodes,
            num_sampled_edges=num_edges,
            metadata=(input_id, index.time),
        )

    def sample_from_edges(self, index: Any, neg_sampling: Any = None) -> SamplerOutput:
        """Not supported: edgegcl only needs node-level (seed node) mini-batches."""
        raise NotImplementedError("CSRNeighborSampler only samples from nodes; use NeighborLoader/LinkNeighborLoader for edges")

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_nodes={self.num_nodes}, num_edges={self._col.numel()}, "
            f"num_neighbors={self._num_neighbors})"
        )

    # -- internals ------------------------------------------------------------------------

    def _reseed_in_worker(self) -> None:
        """Give each DataLoader worker its own stream (its copy starts from the parent's)."""
        info = torch.utils.data.get_worker_info()
        if info is not None and self._worker_seed != info.seed:
            self._generator.manual_seed((self._seed * 1_000_003 + info.seed) % (1 << 63))
            self._worker_seed = info.seed

    def _sample(self, seeds: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, list[int], list[int]]:
        local = self._local
        num_seeds = seeds.numel()
        pos = torch.arange(num_seeds)
        nodes: list[Tensor] = [seeds]
        rows: list[Tensor] = []
        cols: list[Tensor] = []
        edges: list[Tensor] = []
        num_sampled_nodes = [num_seeds]
        num_sampled_edges: list[int] = []
        pending = seeds[:0]  # map entries tagged but not yet in `nodes`
        try:
            # Seeds: map each distinct seed to its first slot; only those slots expand.
            first = self._claim_first(seeds, pos)
            frontier = torch.masked_select(seeds, first)
            frontier_local = torch.masked_select(pos, first)
            local.index_copy_(0, frontier, frontier_local)
            total = num_seeds
            for fanout in self._num_neighbors:
                target, slot = self._draw(frontier, fanout)
                nbr = self._col.index_select(0, slot).long()
                src_local = local.index_select(0, nbr)
                unseen = src_local == _UNSEEN
                new_nodes = nbr[:0]
                if bool(unseen.any()):
                    cand = torch.masked_select(nbr, unseen)
                    pending = cand
                    first = self._claim_first(cand, torch.arange(cand.numel()))
                    new_nodes = torch.masked_select(cand, first)
                    local.index_copy_(0, new_nodes, torch.arange(total, total + new_nodes.numel()))
                    src_local = local.index_select(0, nbr)
                rows.append(src_local)
                cols.append(frontier_local.index_select(0, target))
                edges.append(self._perm.index_select(0, slot).long())
                nodes.append(new_nodes)
                num_sampled_nodes.append(new_nodes.numel())
                num_sampled_edges.append(slot.numel())
                frontier = new_nodes
                frontier_local = torch.arange(total, total + new_nodes.numel())
                total += new_nodes.numel()
        finally:
            # O(batch) reset, also after an error, so the map is clean for the next batch.
            for touched in (*nodes, pending):
                local.index_fill_(0, touched, _UNSEEN)
        node = torch.cat(nodes)
        empty = torch.empty(0, dtype=torch.long)
        row = torch.cat(rows) if rows else empty
        col = torch.cat(cols) if cols else empty
        edge = torch.cat(edges) if edges else empty
        return node, row, col, edge, num_sampled_nodes, num_sampled_edges

    def _claim_first(self, ids: Tensor, pos: Tensor) -> Tensor:
        """Mask of the first occurrence of each value of ``ids`` (all currently unseen).

        Writes ``-(pos + 2)`` (always below ``_UNSEEN``) with an ``amax`` scatter, so each
        unseen node's map entry ends up holding its smallest position; the caller then
        overwrites those entries with real local ids. No sort, O(len(ids)).
        """
        tag = -(pos + 2)
        self._local.scatter_reduce_(0, ids, tag, reduce="amax", include_self=False)
        return self._local.index_select(0, ids) == tag

    def _draw(self, frontier: Tensor, fanout: int) -> tuple[Tensor, Tensor]:
        """Pick incoming edges for every frontier node.

        Returns ``(target, slot)``: for each picked edge, the index of its target within
        ``frontier`` and its CSR slot (index into ``self._col`` / ``self._perm``). Edges are
        grouped by target in frontier order. Nodes with ``in_degree <= fanout`` keep all
        their edges; for the others every candidate slot gets a uniform random key and the
        ``fanout`` smallest keys per node win (one sort over ``(node_index, key)``), which is
        a uniform draw without replacement. A hub (in-degree of at least ``HUB_DEGREE`` and
        ``HUB_FANOUTS`` fanouts) draws its edges without listing them all
        (``_draw_at_hubs``): a power-law graph's hubs would otherwise expand a batch's last
        hop to millions of slots.
        """
        start = self._rowptr.index_select(0, frontier)
        deg = self._rowptr.index_select(0, frontier + 1) - start
        if fanout > 0:
            hub = deg >= max(HUB_DEGREE, HUB_FANOUTS * fanout)
            if bool(hub.any()):
                rest = (~hub).nonzero().view(-1)
                target, slot = self._draw_listed(rest, start.index_select(0, rest),
                                                 deg.index_select(0, rest), fanout)
                hubs = hub.nonzero().view(-1)
                hub_target, hub_slot = self._draw_at_hubs(hubs, start.index_select(0, hubs),
                                                          deg.index_select(0, hubs), fanout)
                target = torch.cat([rest.index_select(0, target), hub_target])
                order = torch.argsort(target, stable=True)  # grouped by target again
                return (target.index_select(0, order),
                        torch.cat([slot, hub_slot]).index_select(0, order))
        return self._draw_listed(torch.arange(frontier.numel()), start, deg, fanout)

    def _draw_listed(self, which: Tensor, start: Tensor, deg: Tensor, fanout: int
                     ) -> tuple[Tensor, Tensor]:
        """``_draw`` for the nodes whose slots start at ``start`` with ``deg`` slots each, by
        listing every slot; targets are positions in ``which``."""
        total = int(deg.sum())
        if total == 0 or fanout == 0:
            empty = torch.empty(0, dtype=torch.long)
            return empty, empty
        seg = torch.repeat_interleave(torch.arange(which.numel()), deg, output_size=total)
        seg_start = torch.cumsum(deg, 0) - deg  # first slot of each node in the expansion
        within = torch.arange(total) - seg_start.index_select(0, seg)  # rank among the node's edges
        slot = start.index_select(0, seg) + within
        if fanout < 0:
            return seg, slot
        big = deg > fanout
        if not bool(big.any()):
            return seg, slot
        idx = big.index_select(0, seg).nonzero().view(-1)
        # Key = (node index, 31 random bits): one integer sort orders every node's slots
        # randomly while keeping nodes grouped (an int64 sort beats a float64 one here).
        key = seg.index_select(0, idx) << 31
        key |= torch.randint(0, 1 << 31, (idx.numel(),), generator=self._generator)
        order = torch.argsort(key)
        # After sorting, idx[order] is still grouped by node, so `within[idx]` is each
        # slot's rank among its node's random keys.
        rank = within.clone()
        rank.index_copy_(0, idx.index_select(0, order), within.index_select(0, idx))
        keep = rank < fanout
        return torch.masked_select(seg, keep), torch.masked_select(slot, keep)

    def _draw_at_hubs(self, hubs: Tensor, start: Tensor, deg: Tensor, fanout: int
                      ) -> tuple[Tensor, Tensor]:
        """``fanout`` distinct slots of each hub, uniformly without replacement, from
        ``HUB_DRAWS * fanout`` uniform draws with replacement: the first ``fanout`` distinct
        values in draw order (sequential sampling without replacement). A hub whose draws
        hold fewer distinct values (probability below 1e-6 at ``HUB_FANOUTS`` fanouts) is
        drawn again by listing its slots. Targets are the hubs' positions in the frontier."""
        draws = HUB_DRAWS * fanout
        u = torch.rand(hubs.numel(), draws, generator=self._generator, dtype=torch.float64)
        pick = (u * deg.unsqueeze(1)).long().clamp_max_(deg.unsqueeze(1) - 1)
        ordered, position = torch.sort(pick, dim=1, stable=True)  # equal values: earliest first
        first = torch.ones_like(ordered, dtype=torch.bool)
        first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
        fresh = torch.zeros_like(first).scatter_(1, position, first)  # in draw order
        keep = fresh & (torch.cumsum(fresh, 1) <= fanout)
        short = keep.sum(1) < fanout
        keep &= ~short.unsqueeze(1)
        row = torch.arange(hubs.numel()).unsqueeze(1).expand_as(pick)
        target = torch.masked_select(row, keep)
        slot = torch.masked_select(pick + start.unsqueeze(1), keep)
        if bool(short.any()):  # too few distinct draws: list those hubs' slots instead
            again = short.nonzero().view(-1)
            listed_target, listed_slot = self._draw_listed(
                again, start.index_select(0, again), deg.index_select(0, again), fanout)
            target = torch.cat([target, again.index_select(0, listed_target)])
            slot = torch.cat([slot, listed_slot])
        return hubs.index_select(0, target), slot


def _in_index(data: Data, num_nodes: int) -> tuple[Tensor, Tensor, Tensor]:
    """The in-neighbour index of ``data``'s edges: (sources, edge ids, pointers)."""
    edge_index = data.edge_index
    if edge_index is None:
        raise UsageError("the graph has no edge_index; add one (adj_t / SparseTensor is not supported)")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise UsageError(f"edge_index must have shape [2, E], got {list(edge_index.shape)}")
    edge_index = edge_index.detach().to("cpu", torch.long)
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise UsageError(
            f"edge_index refers to nodes outside [0, {num_nodes}); fix the edges or num_nodes"
        )
    src, dst = edge_index[0], edge_index[1]
    # CSC of the graph = CSR over targets: the in-neighbours of node v are
    # col[rowptr[v]:rowptr[v + 1]], and perm maps those slots back to positions in
    # data.edge_index (stable sort: ties keep input order). Stored as int32 where the counts
    # allow (half the index's memory: 160 MiB at 20M edges); a batch's picks are widened to
    # int64 as they are read.
    perm = torch.argsort(dst, stable=True)
    col = src[perm].to(_index_dtype(num_nodes))
    perm = perm.to(_index_dtype(src.numel()))
    rowptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(dst, minlength=num_nodes), dim=0, out=rowptr[1:])
    return col, perm, rowptr


def _index_dtype(count: int) -> torch.dtype:
    """int32 for ids below ``count`` where they fit in it, else int64."""
    return torch.int32 if count <= torch.iinfo(torch.int32).max else torch.long


HUB_DEGREE = 256
"""In-degree from which a node's edges are drawn without listing them (``_draw_at_hubs``);
below it the draw is the listing sort's alone, which graphs without hubs (Cora's largest
in-degree is 168) never leave."""
HUB_FANOUTS = 8
"""... and from which the in-degree is also at least this many fanouts: 2 fanouts of draws
then hold fewer than a fanout of distinct slots with probability below 1e-6."""
HUB_DRAWS = 2
"""Draws with replacement per fanout at a hub."""


def _seed_order(num_seeds: int, batch_size: int, shuffle: bool, seed: int,
                shard: tuple[int, int] | None) -> dict[str, Any]:
    """The loader's ``sampler`` argument: this rank's share of a shuffled order under
    torchrun (``ShardedIndices``), a shuffled order, or none (the loader's own order)."""
    generator = torch.Generator().manual_seed(int(seed))
    if shard is None:
        return {"sampler": ShuffledIndices(num_seeds, generator)} if shuffle else {}
    rank, world = shard
    if not 0 <= rank < world:
        raise UsageError(f"shard rank must lie in [0, {world}), got {rank}")
    if num_seeds < world:
        raise UsageError(f"{world} processes need at least {world} seed nodes, the graph "
                         f"has {num_seeds}; start fewer processes (--nproc-per-node)")
    return {"sampler": ShardedIndices(num_seeds, generator, rank, world, batch_size, shuffle)}


def make_loader(data: Data, batch_size: int, num_neighbors: Sequence[int], *,
                sampler: str = "auto", shuffle: bool = True, seed: int = 0,
                input_nodes: Tensor | None = None,
                shard: tuple[int, int] | None = None,
                index: FolderIndex | None = None,
                prefetch: Callable[[Tensor], None] | None = None) -> NodeLoader:
    """Mini-batch loader over seed nodes of ``data`` with per-hop neighbour sampling
    (``num_neighbors`` per hop, -1: all).

    ``sampler`` picks the backend: ``"pyg"`` (PyG's ``NeighborLoader``; needs ``pyg-lib`` or
    ``torch-sparse``), ``"builtin"`` (:class:`CSRNeighborSampler`, pure PyTorch) or
    ``"auto"`` (``"pyg"`` when available, else ``"builtin"``). ``input_nodes`` are the seed
    nodes (index or boolean mask; default all nodes), visited once per epoch in batches of
    ``batch_size``. Shuffling (``shuffle``, :class:`ShuffledIndices`) uses a
    :class:`torch.Generator` seeded with ``seed``, so the seed order of every epoch is
    reproducible; the built-in sampler's neighbour draws are seeded with ``seed`` too, while
    ``"pyg"`` draws neighbours from pyg-lib / torch-sparse's own RNG (seed torch globally to
    pin those). ``shard = (rank, world_size)``: this process's share of every epoch's seeds
    under data-parallel training (:class:`ShardedIndices`); its neighbour draws are seeded
    apart from the other ranks' while the seed order is the one all ranks share. ``index``: a
    graph folder's mapped in-neighbour index (edgegcl.data.folder), which the built-in sampler
    reads instead of building its own from ``data.edge_index`` (``auto`` then picks it).
    ``prefetch``: called with each batch's node ids as it is made (a graph folder's feature
    rows read ahead, ``MappedRows.prefetch``).

    Example:
        >>> from edgegcl.data import SyntheticSpec, synthetic_graph
        >>> data = synthetic_graph(SyntheticSpec(num_nodes=300))
        >>> batch = next(iter(make_loader(data, 64, [5, 5], sampler="builtin")))
        >>> batch.batch_size, batch.x.size(0) >= 64
        (64, True)
    """
    if index is not None and sampler == "pyg":
        raise UsageError("sampler 'pyg' builds its index in memory, and a graph folder's is on "
                         "disk; use --sampler builtin (or auto)")
    fanouts, input_nodes, sampler = _checked_loader_args(
        data, batch_size, num_neighbors, "builtin" if index is not None else sampler, input_nodes)
    num_nodes = int(data.num_nodes or 0)
    num_seeds = num_nodes if input_nodes is None else (
        int(input_nodes.sum()) if input_nodes.dtype == torch.bool else input_nodes.numel())
    order = _seed_order(num_seeds, batch_size, shuffle, seed, shard)
    if shard is not None:
        seed = seed + SHARD_SEED_STRIDE * shard[0]  # own neighbour draws, same seed order
    if sampler == "pyg":
        return NeighborLoader(data, num_neighbors=fanouts, input_nodes=input_nodes,
                              batch_size=batch_size,
                              transform=partial(with_hop_counts, num_hops=len(fanouts)),
                              **order)
    transform = None if prefetch is None else partial(_prefetched, prefetch=prefetch)
    return NodeLoader(data, node_sampler=CSRNeighborSampler(data, fanouts, seed=int(seed),
                                                            index=index), transform=transform,
                      input_nodes=input_nodes, batch_size=batch_size, **order)


def _prefetched(batch: Data, prefetch: Callable[[Tensor], None]) -> Data:
    """``batch``, its nodes' rows asked for (``make_loader``'s ``prefetch``)."""
    prefetch(batch.n_id)
    return batch


def _checked_loader_args(data: Data, batch_size: int, num_neighbors: Sequence[int],
                         sampler: str, input_nodes: Tensor | None
                         ) -> tuple[list[int], Tensor | None, str]:
    """``make_loader``'s fanouts, seed nodes and backend ("auto" resolved), each checked (one
    UsageError line)."""
    if sampler not in SAMPLERS:
        raise UsageError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UsageError(f"batch_size must be a positive integer, got {batch_size!r}")
    fanouts = _check_num_neighbors(num_neighbors)
    if not isinstance(data, Data):
        raise UsageError(f"make_loader needs a torch_geometric Data object, got {type(data).__name__}")
    if input_nodes is not None:
        input_nodes = _check_input_nodes(input_nodes, int(data.num_nodes or 0))
    if sampler == "auto":
        sampler = "pyg" if pyg_sampler_available() else "builtin"
    if sampler == "pyg" and not pyg_sampler_available():
        raise UsageError("sampler 'pyg' needs pyg-lib or torch-sparse; run `pip install "
                         "torch-sparse` or use --sampler builtin")
    return fanouts, input_nodes, sampler


class ShuffledIndices(Sampler[int]):
    """0 .. n-1 in a new random order every epoch, kept as one int64 tensor.

    The ``DataLoader``'s own shuffling (``RandomSampler``) turns each epoch's permutation into
    a Python list, about 36 bytes a node (36 MiB at 1M nodes), memory that grows with the
    graph; this keeps 8 bytes a node and hands out Python ints a block at a time.
    """

    BLOCK = 1 << 16

    def __init__(self, n: int, generator: torch.Generator) -> None:
        self.n, self.generator = n, generator

    def __iter__(self) -> Iterator[int]:
        for block in torch.randperm(self.n, generator=self.generator).split(self.BLOCK):
            yield from block.tolist()

    def __len__(self) -> int:
        return self.n


SHARD_SEED_STRIDE = 1_000_003
"""Rank r's neighbour sampler is seeded ``seed + SHARD_SEED_STRIDE * r``: rank 0 draws as a
single process would."""


class ShardedIndices(Sampler[int]):
    """One rank's share of every epoch's seed order under data-parallel training.

    All ranks draw the same permutation (one generator seeded alike) and cut it into global
    batches of ``world * batch_size`` seeds; rank r takes the r-th ``batch_size`` of each, so
    global batch k holds exactly the seeds a single process with batch ``world * batch_size``
    would see at step k. The last, partial global batch is split evenly: each rank takes
    ceil(R / world) of its R seeds, the permutation wrapping around for at most world - 1 of
    them. Every rank so runs the same number of steps with equal batch sizes (collectives
    never wait on a rank that has run out), and an epoch visits every seed.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> shards = [list(ShardedIndices(10, torch.Generator().manual_seed(0), r, 2, 3))
        ...           for r in (0, 1)]
        >>> [len(s) for s in shards], sorted(set(shards[0] + shards[1])) == list(range(10))
        ([5, 5], True)
    """

    def __init__(self, n: int, generator: torch.Generator, rank: int, world: int,
                 batch_size: int, shuffle: bool = True) -> None:
        self.n, self.generator, self.shuffle = n, generator, shuffle
        self.rank, self.world, self.batch_size = rank, world, batch_size
        full, rest = divmod(n, world * batch_size)
        self.full_steps, self.last = full, -(-rest // world)

    def _mine(self, order: Tensor) -> Tensor:
        w, b = self.world, self.batch_size
        head = order[: self.full_steps * w * b].view(self.full_steps, w, b)[:, self.rank]
        tail = order[self.full_steps * w * b:]
        if self.last:
            tail = torch.cat([tail, order[: self.last * w - tail.numel()]])
            tail = tail.view(w, self.last)[self.rank]
        return torch.cat([head.reshape(-1), tail])

    def __iter__(self) -> Iterator[int]:
        order = (torch.randperm(self.n, generator=self.generator) if self.shuffle
                 else torch.arange(self.n))
        for block in self._mine(order).split(ShuffledIndices.BLOCK):
            yield from block.tolist()

    def __len__(self) -> int:
        return self.full_steps * self.batch_size + self.last


def _leading_true(mask: Tensor) -> int:
    """Length of the run of True values at the start of a 1-D boolean tensor."""
    false = (~mask).nonzero()
    return int(false[0]) if false.numel() else mask.numel()


def hop_counts(edge_index: Tensor, num_nodes: int, batch_size: int, num_hops: int
               ) -> tuple[list[int], list[int]] | None:
    """Per-hop node and edge counts of a sample laid out hop by hop, or None if it is not.

    A breadth-first sampler (torch-sparse's, which PyG uses without pyg-lib and which reports
    no counts) numbers the seeds first, then the nodes first reached at hop 1, and so on, and
    lists the edges into the seeds first, then those into the hop-1 nodes. Walking that
    layout: hop h's edges are the block whose targets lie in hop h - 1's node range, and the
    nodes they reach beyond it are hop h. The walk must use every node and edge, or the
    layout is not this one.
    """
    dst, src = edge_index[1], edge_index[0]
    nodes, edges, start, lo, hi = [batch_size], [], 0, 0, batch_size
    for _ in range(num_hops):
        block = _leading_true((dst[start:] >= lo) & (dst[start:] < hi))
        reached = int(src[start:start + block].max()) + 1 if block else 0
        new = max(0, reached - hi)
        nodes.append(new)
        edges.append(block)
        start, lo, hi = start + block, hi, hi + new
    if start != dst.numel() or hi != num_nodes:
        return None
    return nodes, edges


def with_hop_counts(batch: Data, num_hops: int) -> Data:
    """Give a PyG mini-batch ``num_sampled_nodes`` / ``num_sampled_edges`` when its sampler
    did not (torch-sparse), so the encoder can trim layers (edgegcl.nn.adjacency).

    When the batch is not laid out hop by hop, the counts say "seeds, then everything else",
    for which trimming computes the first layer on every node: still exact, only not lighter.
    """
    if getattr(batch, "num_sampled_nodes", None) is not None:
        return batch
    b, n = int(batch.batch_size), int(batch.num_nodes)
    counts = hop_counts(batch.edge_index, n, b, num_hops)
    if counts is None:
        counts = ([b, n - b], [int(batch.edge_index.size(1))])
    batch.num_sampled_nodes, batch.num_sampled_edges = counts
    return batch


def _check_input_nodes(input_nodes: Tensor, num_nodes: int) -> Tensor:
    """Validate seed nodes: a 1-D index tensor of distinct in-range ids or a [N] bool mask."""
    if not isinstance(input_nodes, Tensor) or input_nodes.dim() != 1:
        raise UsageError("input_nodes must be a 1-D tensor of node ids or a boolean node mask")
    if input_nodes.dtype == torch.bool:
        if input_nodes.numel() != num_nodes:
            raise UsageError(
                f"input_nodes mask has {input_nodes.numel()} entries but the graph has "
                f"{num_nodes} nodes; pass one flag per node"
            )
        return input_nodes
    if input_nodes.is_floating_point() or input_nodes.is_complex():
        raise UsageError("input_nodes must hold integer node ids (or be a boolean mask), not floats")
    input_nodes = input_nodes.to(torch.long)
    if input_nodes.numel() == 0:
        raise UsageError("input_nodes is empty; pass at least one seed node or None for all nodes")
    if int(input_nodes.min()) < 0 or int(input_nodes.max()) >= num_nodes:
        raise UsageError(f"input_nodes must lie in [0, {num_nodes}); drop out-of-range ids")
    if torch.unique(input_nodes).numel() != input_nodes.numel():
        raise UsageError("input_nodes contains duplicate node ids; pass each seed node once")
    return input_nodes
