"""The GCN's normalised adjacency D^-1/2 (A + I) D^-1/2 (Eq. 4) as sparse CSR, trimmed per layer.

A mini-batch from a neighbour sampler lists its nodes hop by hop (seeds, then the nodes first
reached at hop 1, then hop 2) and its edges the same way (first the edges into the seeds, then
those into the hop-1 nodes). Only the seeds' final embeddings enter the loss, so layer 1 needs
outputs for the seeds and hop-1 nodes only and layer 2 for the seeds only: the adjacency of
layer l keeps just the rows of its targets (PyG's ``trim_to_layer`` idea). The layer widths
then scale with the nodes of the first hops, not with the whole sampled subgraph, which is
what keeps a mini-batch's memory independent of the graph's size.

Degrees are those of the whole (sampled, augmented) subgraph, with one self-loop per node and
counted at the target as PyG's ``gcn_norm`` does; trimming drops rows, never re-normalises,
so the seeds' embeddings are exactly those of the untrimmed 2-layer GCN on the subgraph.
Full-graph mode is the special case where every layer's targets are all N nodes.
Embeddings of every node for evaluation read the whole graph's adjacency a chunk of rows
(and of columns) at a time instead (``ChunkedAdjacency``), so no N x hidden layer exists.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from edgegcl.nn.linear import HALF_FLOATS
from edgegcl.nn.sparse import TransposeCache, row_sums
from edgegcl.scratch import prefetch

# CSR products are the point of this module; torch's "beta" notice would print on every run.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")


@dataclass(frozen=True)
class LayerAdjacency:
    """Rows 0..T-1 of the normalised adjacency: what one layer propagates over.

    ``matrix`` is the T x S CSR matrix A_hat[:T] (row = target, column = source), each row's
    diagonal entry 1 / deg stored last; S is the number of nodes the layer reads (its input
    rows). ``transpose`` keeps the pattern of its transpose for the backward
    (edgegcl.nn.sparse), built at the first product that needs it and shared by the layers of
    one graph that have the same rows (the full graph's two layers).
    """

    matrix: Tensor
    transpose: TransposeCache = field(default_factory=TransposeCache)

    @property
    def num_targets(self) -> int:
        return int(self.matrix.size(0))

    def propagate(self, h: Tensor) -> Tensor:
        """A_hat[:T] @ h for dense h with S rows: the aggregation step of Eq. 4, one weighted
        sum of h's rows per target (``edgegcl.nn.sparse.row_sums``)."""
        t = self.transpose.get(self.matrix) if h.requires_grad else None
        return row_sums(self.matrix, h, t)


def gcn_adjacency(edge_index: Tensor, num_nodes: int,
                  targets_per_layer: Sequence[int]) -> list[LayerAdjacency]:
    """One ``LayerAdjacency`` per layer; layer l's outputs are nodes 0..targets_per_layer[l]-1.

    Requires (as samplers guarantee) that the sources of the edges into the first T_{l+1}
    nodes lie among the first T_l nodes. Edges need not be sorted: they are ordered by
    target here, with a stable sort skipped when they already are (a sampler's output).
    Weights are 1/sqrt(deg_i deg_j) with deg = in-degree + 1 (Eq. 4); duplicate edges count
    as often as they appear. Equal to PyG's ``GCNConv`` normalisation. The layers' matrices
    are prefixes of one CSR of the first max(T_l) rows, self-loops included.
    """
    src, dst = edge_index[0], edge_index[1]
    loops = src == dst
    if bool(loops.any()):  # Eq. 4 adds I; an input self-loop is replaced, as in PyG's gcn_norm
        src, dst = src[~loops], dst[~loops]
    if dst.numel() > 1 and not bool((dst[1:] >= dst[:-1]).all()):
        order = torch.argsort(dst, stable=True)
        src, dst = src.index_select(0, order), dst.index_select(0, order)
    device = dst.device
    per_target = torch.bincount(dst, minlength=num_nodes)
    deg_inv_sqrt = (per_target + 1).to(torch.float32).rsqrt()
    rows = max(targets_per_layer, default=0)
    # rows 0..rows-1 with their diagonal entry last: row r's edges shift by r slots
    crow = torch.zeros(rows + 1, dtype=torch.long, device=device)
    torch.cumsum(per_target[:rows] + 1, 0, out=crow[1:])
    edges = int(crow[rows]) - rows
    row_of = torch.repeat_interleave(torch.arange(rows, device=device), per_target[:rows],
                                     output_size=edges)
    slots = torch.arange(edges, device=device) + row_of
    col = torch.empty(edges + rows, dtype=torch.long, device=device)
    val = torch.empty(edges + rows, dtype=torch.float32, device=device)
    col[slots] = src[:edges]
    val[slots] = deg_inv_sqrt.index_select(0, src[:edges]) * deg_inv_sqrt.index_select(
        0, dst[:edges])
    diagonal = crow[1:] - 1
    col[diagonal] = torch.arange(rows, device=device)
    val[diagonal] = deg_inv_sqrt[:rows].square()
    layers: list[LayerAdjacency] = []
    sources = num_nodes
    for targets in targets_per_layer:
        if layers and (targets, sources) == tuple(layers[-1].matrix.shape):
            layers.append(layers[-1])  # the same rows (full graph): one matrix, one transpose
            continue
        end = int(crow[targets])
        matrix = torch.sparse_csr_tensor(crow[: targets + 1], col[:end], val[:end],
                                         (targets, sources), check_invariants=False)
        layers.append(LayerAdjacency(matrix))
        sources = targets
    return layers


@dataclass(frozen=True)
class ChunkedAdjacency:
    """The whole graph's normalised adjacency for all-node products a chunk of nodes at a time.

    Only index arrays are kept, the edges grouped by target (``in_ptr``, ``in_src``: a CSR
    without values, int32 or int64) and by source (``out_ptr``, ``out_dst``); a chunk's weights
    1/sqrt(deg_i deg_j) are recomputed from ``deg_inv_sqrt`` when it is read. Grouping by
    source is free when ``edge_index`` is sorted by source (coalesced graphs: ``out_dst`` is a
    view of it), else one more index per edge. Same weights as ``gcn_adjacency``.
    """

    deg_inv_sqrt: Tensor
    in_ptr: Tensor
    in_src: Tensor
    out_ptr: Tensor
    out_dst: Tensor
    read_ahead: tuple[Tensor, Callable[[Tensor], None]] | None = None
    """(features, prefetch): ``pull`` from those features asks for the rows a chunk reads
    before it reads them (a graph folder's features on disk, edgegcl.data.folder)."""

    @property
    def num_nodes(self) -> int:
        return self.deg_inv_sqrt.numel()

    def rows(self, lo: int, hi: int) -> Tensor:
        """Rows lo..hi-1 of A_hat as a (hi - lo) x N CSR matrix, each row's diagonal entry last
        (so A_hat[lo:hi] @ h sums in the order of ``LayerAdjacency.propagate``)."""
        e0, e1 = int(self.in_ptr[lo]), int(self.in_ptr[hi])
        t = hi - lo
        device = self.in_src.device
        counts = self.in_ptr[lo + 1: hi + 1] - self.in_ptr[lo:hi]
        crow = torch.zeros(t + 1, dtype=torch.long, device=device)
        torch.cumsum(counts + 1, 0, out=crow[1:])
        src = self.in_src[e0:e1].long()
        row = torch.repeat_interleave(torch.arange(t, device=device), counts, output_size=e1 - e0)
        col = torch.empty(e1 - e0 + t, dtype=torch.long, device=device)
        val = torch.empty(e1 - e0 + t, dtype=self.deg_inv_sqrt.dtype, device=device)
        slots = torch.arange(e1 - e0, device=device) + row  # row r's entries shift by r diagonals
        col[slots] = src
        val[slots] = self.deg_inv_sqrt.index_select(0, src) * self.deg_inv_sqrt.index_select(
            0, row + lo)
        diagonal = crow[1:] - 1
        col[diagonal] = torch.arange(lo, hi, device=device)
        val[diagonal] = self.self_weight(lo, hi)
        return torch.sparse_csr_tensor(crow, col, val, (t, self.num_nodes),
                                       check_invariants=False)

    def pull(self, lo: int, hi: int, h: Tensor) -> Tensor:
        """A_hat[lo:hi] @ h. A float32 ``h`` is read where the rows point (a mapped one page by
        page, its rows asked for first where it is read ahead); a half-float one (a graph
        folder's float16 features) has just the rows the chunk reads gathered and widened to
        float32, never the whole ``h``."""
        rows = self.rows(lo, hi)
        if self.read_ahead is not None and h is self.read_ahead[0]:
            self.read_ahead[1](rows.col_indices())
        else:  # a whole layer in a mapped file (edgegcl.scratch) larger than memory allows
            prefetch(h, rows.col_indices())
        if h.dtype not in HALF_FLOATS or h.layout != torch.strided:
            return rows @ h
        cols, local = torch.unique(rows.col_indices(), return_inverse=True)
        narrow = torch.sparse_csr_tensor(rows.crow_indices(), local, rows.values(),
                                         (hi - lo, cols.numel()), check_invariants=False)
        return narrow @ h.index_select(0, cols).float()

    def self_weight(self, lo: int, hi: int) -> Tensor:
        """The diagonal entries 1 / deg of rows lo..hi-1."""
        return self.deg_inv_sqrt[lo:hi].square()

    def columns(self, lo: int, hi: int, max_edges: int) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
        """The off-diagonal entries of columns lo..hi-1 (edges out of those sources), in blocks
        of at most ``max_edges``: (source - lo, target, weight) per block."""
        e0, e1 = int(self.out_ptr[lo]), int(self.out_ptr[hi])
        if e1 == e0:
            return
        counts = self.out_ptr[lo + 1: hi + 1] - self.out_ptr[lo:hi]
        local = torch.repeat_interleave(torch.arange(hi - lo, device=counts.device), counts,
                                        output_size=e1 - e0)
        for b0 in range(e0, e1, max_edges):
            b1 = min(b0 + max_edges, e1)
            src, dst = local[b0 - e0: b1 - e0], self.out_dst[b0:b1].long()
            weight = self.deg_inv_sqrt.index_select(0, src + lo) * self.deg_inv_sqrt.index_select(
                0, dst)
            yield src, dst, weight


def chunked_adjacency(edge_index: Tensor, num_nodes: int) -> ChunkedAdjacency:
    """The ``ChunkedAdjacency`` of a graph: self-loops dropped (Eq. 4 adds I), degrees and
    duplicate edges as in ``gcn_adjacency``; each grouping is a stable sort, skipped when the
    edges already are in that order. Edges that carry their adjacency (``carry_adjacency``: a
    graph folder's mapped index) give it instead, and nothing edge-sized is built."""
    carried = getattr(edge_index, _CARRIED, None)
    if carried is not None and carried.num_nodes == num_nodes:
        return carried
    src, dst = edge_index[0], edge_index[1]
    loops = src == dst
    if bool(loops.any()):
        src, dst = src[~loops], dst[~loops]
    per_target = torch.bincount(dst, minlength=num_nodes)
    deg_inv_sqrt = (per_target + 1).to(torch.float32).rsqrt()
    in_ptr = _pointers(per_target)
    del per_target
    if _sorted(dst):
        in_src = src
    else:  # int32 where the ids fit: half the index a whole-graph pass holds
        narrow = torch.int32 if num_nodes <= torch.iinfo(torch.int32).max else torch.long
        in_src = src.index_select(0, torch.argsort(dst, stable=True)).to(narrow)
    out_ptr = _pointers(torch.bincount(src, minlength=num_nodes))
    out_dst = dst if _sorted(src) else dst.index_select(0, torch.argsort(src, stable=True))
    return ChunkedAdjacency(deg_inv_sqrt, in_ptr, in_src, out_ptr, out_dst)


def _pointers(counts: Tensor) -> Tensor:
    """CSR row pointers (N + 1, int64) from per-row counts."""
    ptr = torch.zeros(counts.numel() + 1, dtype=torch.long, device=counts.device)
    torch.cumsum(counts, 0, out=ptr[1:])
    return ptr


def _sorted(index: Tensor) -> bool:
    """Whether ``index`` is non-decreasing (then grouping by it needs no sort)."""
    return index.numel() < 2 or bool((index[1:] >= index[:-1]).all())


_CARRIED = "edgegcl_adjacency"


def grouped_adjacency(in_ptr: Tensor, in_src: Tensor, out_ptr: Tensor, out_dst: Tensor,
                      read_ahead: tuple[Tensor, Callable[[Tensor], None]] | None = None
                      ) -> ChunkedAdjacency:
    """The ``ChunkedAdjacency`` of edges already grouped (self-loops left out): by target
    (``in_ptr``, ``in_src``) and by source (``out_ptr``, ``out_dst``), e.g. a graph folder's
    mapped index; only the degrees (N floats) are computed. ``read_ahead``: see
    ``ChunkedAdjacency``."""
    deg_inv_sqrt = ((in_ptr[1:] - in_ptr[:-1]) + 1).to(torch.float32).rsqrt()
    return ChunkedAdjacency(deg_inv_sqrt, in_ptr, in_src, out_ptr, out_dst, read_ahead)


def carry_adjacency(edge_index: Tensor, adjacency: ChunkedAdjacency) -> Tensor:
    """``edge_index`` made to carry its ``adjacency``, which ``chunked_adjacency`` (every
    all-node embedding) then reads instead of sorting the edges in memory; returned."""
    setattr(edge_index, _CARRIED, adjacency)
    return edge_index
