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
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

# CSR products are the point of this module; torch's "beta" notice would print on every run.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")


@dataclass(frozen=True)
class LayerAdjacency:
    """Rows 0..T-1 of the normalised adjacency: what one layer propagates over.

    ``neighbours`` is the T x S CSR matrix of the off-diagonal weights (row = target,
    column = source) and ``self_weight`` the T diagonal weights 1 / deg; S is the number of
    nodes the layer reads (its input rows).
    """

    neighbours: Tensor
    self_weight: Tensor

    @property
    def num_targets(self) -> int:
        return self.self_weight.numel()

    def propagate(self, h: Tensor) -> Tensor:
        """A_hat[:T] @ h for dense h with S rows: the aggregation step of Eq. 4.

        The diagonal term is added in place into the product (autograd keeps h, not the
        product), so one T x d tensor is allocated.
        """
        out = self.neighbours @ h
        return out.addcmul_(self.self_weight.unsqueeze(1), h[: self.num_targets])


def gcn_adjacency(edge_index: Tensor, num_nodes: int,
                  targets_per_layer: Sequence[int]) -> list[LayerAdjacency]:
    """One ``LayerAdjacency`` per layer; layer l's outputs are nodes 0..targets_per_layer[l]-1.

    Requires (as samplers guarantee) that the sources of the edges into the first T_{l+1}
    nodes lie among the first T_l nodes. Edges need not be sorted: they are ordered by
    target here, with a stable sort skipped when they already are (a sampler's output).
    Weights are 1/sqrt(deg_i deg_j) with deg = in-degree + 1 (Eq. 4); duplicate edges count
    as often as they appear. Equal to PyG's ``GCNConv`` normalisation.
    """
    src, dst = edge_index[0], edge_index[1]
    loops = src == dst
    if bool(loops.any()):  # Eq. 4 adds I; an input self-loop is replaced, as in PyG's gcn_norm
        src, dst = src[~loops], dst[~loops]
    if dst.numel() > 1 and not bool((dst[1:] >= dst[:-1]).all()):
        order = torch.argsort(dst, stable=True)
        src, dst = src.index_select(0, order), dst.index_select(0, order)
    per_target = torch.bincount(dst, minlength=num_nodes)
    deg_inv_sqrt = (per_target + 1).to(torch.float32).rsqrt()
    weight = deg_inv_sqrt.index_select(0, src) * deg_inv_sqrt.index_select(0, dst)
    crow = torch.zeros(num_nodes + 1, dtype=torch.long, device=dst.device)
    torch.cumsum(per_target, 0, out=crow[1:])
    layers, sources = [], num_nodes
    for targets in targets_per_layer:
        end = int(crow[targets])
        neighbours = torch.sparse_csr_tensor(crow[: targets + 1], src[:end], weight[:end],
                                             (targets, sources), check_invariants=False)
        layers.append(LayerAdjacency(neighbours, deg_inv_sqrt[:targets].square()))
        sources = targets
    return layers
