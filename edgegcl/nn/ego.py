"""A GCN with a separate path for each node itself: ego and neighbour parts with their own
weights, side by side (H2GCN's separation of ego and neighbour embeddings; GraphSAGE's root
weight).

Layer l maps h to sigma([A_hat h W_l + b_l || h R_l]): the first part is Eq. 4's GCN layer
(``conv{l}``), the second the node's own representation through its own weights
(``root{l}``, no bias), each half the layer's width (the neighbour part takes the odd unit).
A 2-layer GCN averages every node with its neighbours twice; where neighbours belong to other
classes (low homophily) that averaging erases what a node's own features say, and the ego part
keeps it in every layer, for the loss and the probe to use or ignore.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from edgegcl.nn.adjacency import chunked_adjacency, gcn_adjacency
from edgegcl.nn.config import ModelConfig
from edgegcl.nn.linear import FeatureLinear, row_block
from edgegcl.nn.model import (EMBED_EDGE_BLOCK, GCNLayer, embed_output, hop_targets,
                              layer_widths, make_activation, pulled_layers, push_rows,
                              row_chunks)
from edgegcl.scratch import Scratch, in_memory

__all__ = ["EgoEncoder"]


def ego_width(width: int) -> int:
    """The ego part's share of a layer of ``width`` units (the neighbour part takes the rest)."""
    return width // 2


class EgoEncoder(nn.Module):
    """Layers ``conv{l}`` (neighbours, a GCN layer), ``root{l}`` (the node itself) and
    ``act{l}``: in_dim -> hidden_dim -> ... -> out_dim, ``cfg.num_layers`` of them.

    Example:
        >>> enc = EgoEncoder(8, ModelConfig(16, 4, 4, "prelu"))
        >>> enc(torch.randn(5, 8), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
        torch.Size([5, 4])
    """

    def __init__(self, in_dim: int, cfg: ModelConfig) -> None:
        super().__init__()
        self.num_layers = cfg.num_layers
        widths = layer_widths(in_dim, cfg)
        for i in range(1, cfg.num_layers + 1):
            d_in, d_out = widths[i - 1], widths[i]
            own = ego_width(d_out)
            setattr(self, f"conv{i}", GCNLayer(d_in, d_out - own, columns_first=i == 1))
            setattr(self, f"root{i}", FeatureLinear(d_in, own, bias=False,
                                                    columns_first=i == 1))
            setattr(self, f"act{i}", make_activation(cfg.activation, d_out))

    def layer(self, i: int) -> tuple[GCNLayer, FeatureLinear, nn.Module]:
        """Layer i's (1-based) neighbour part, ego part and activation."""
        return getattr(self, f"conv{i}"), getattr(self, f"root{i}"), getattr(self, f"act{i}")

    @property
    def out_dim(self) -> int:
        conv, root, _ = self.layer(self.num_layers)
        return conv.lin.out_features + root.out_features

    def forward(self, x: Tensor, edge_index: Tensor,
                num_sampled_nodes: Sequence[int] | None = None,
                feature_keep: Tensor | None = None) -> Tensor:
        """Embeddings of every node, or with a sampler's per-hop counts of the seeds only, each
        layer computed for the nodes the next one reads (``GCNEncoder.forward``'s trimming:
        the ego part of layer l reads the first T_l rows, the nodes it computes)."""
        n = x.size(0)
        z = x
        for i, adj in enumerate(gcn_adjacency(edge_index, n, hop_targets(
                n, self.num_layers, num_sampled_nodes)), start=1):
            conv, root, act = self.layer(i)
            keep = feature_keep if i == 1 else None
            own = root(row_block(z, 0, adj.num_targets), keep)
            z = act(torch.cat([conv(adj, z, keep), own], dim=1))
        return z

    @torch.no_grad()
    def embed_nodes(self, x: Tensor, edge_index: Tensor, out: Tensor | None = None,
                    chunk_rows: int | None = None, edge_block: int = EMBED_EDGE_BLOCK,
                    scratch: Scratch | None = None) -> Tensor:
        """``forward(x, edge_index)`` of every node without autograd, as
        ``GCNEncoder.embed_nodes`` computes it: the layer before the last pulled a chunk of
        rows at a time and the last one's neighbour part pushed along the edges into ``out``
        (its ego part is the chunk's own rows), so besides ``out`` the graph-sized memory is
        the adjacency's index arrays (layers before the last two are pulled whole, N x hidden
        each). ``scratch``: where whole layers go instead
        (``edgegcl.scratch.mapped_scratch``), and the last layer is pulled from its P, as
        ``GCNEncoder.embed_nodes`` does. Equal to ``forward`` up to float summation order."""
        n, k = x.size(0), self.num_layers
        out = embed_output(n, self.out_dim, x, out)
        widest = max(self.layer(i)[0].lin.out_features + self.layer(i)[1].out_features
                     for i in range(1, k + 1))
        chunks = row_chunks(n, chunk_rows, x.size(1) + 2 * widest + self.out_dim, edge_block)
        adj = chunked_adjacency(edge_index, n)

        def pulled(i: int, z: Tensor, lo: int, hi: int) -> Tensor:  # layer i's rows lo..hi-1
            conv, root, act = self.layer(i)
            neighbours = F.linear(adj.pull(lo, hi, z), conv.lin.weight, conv.bias)
            return act(torch.cat([neighbours, root(row_block(z, lo, hi))], dim=1))

        def width(i: int) -> int:
            return self.layer(i)[0].lin.out_features + self.layer(i)[1].out_features

        z = pulled_layers(pulled, x, k - 2, chunks, width, scratch or in_memory(x.device))
        if k == 1:
            for lo, hi in chunks:
                out[lo:hi] = pulled(1, z, lo, hi)
            return out
        conv, root, act = self.layer(k)
        width_k = conv.lin.out_features
        neighbours = out[:, :width_k]
        p = None if scratch is None else scratch(n, width_k)
        for lo, hi in chunks:
            h = pulled(k - 1, z, lo, hi)
            p_c = F.linear(h, conv.lin.weight).to(out.dtype)
            if p is None:
                push_rows(adj, p_c, neighbours, lo, hi, edge_block)
            else:
                p[lo:hi] = p_c
            out[lo:hi, width_k:] = root(h)
        for lo, hi in chunks:
            rows = out[lo:hi]
            if p is not None:
                rows[:, :width_k] = adj.pull(lo, hi, p)
            rows[:, :width_k].add_(conv.bias)
            rows.copy_(act(rows))
        return out
