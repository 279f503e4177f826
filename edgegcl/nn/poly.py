"""A polynomial graph filter with learned coefficients (GPR-GNN's propagation; PolyGCL's idea
of a learned spectral filter for contrastive learning).

f(X, A) = MLP(sum_{k=0..K} gamma_k A_hat^k X W_1 + b_1) with A_hat = D^-1/2 (A + I) D^-1/2
(Eq. 4's normalisation), K = ``num_layers`` hops and MLP = sigma, then Linear, then sigma: the
filter acts on the features' first linear map, as in PolyGCL's and ChebNetII's encoders,
before the node-wise rest. The coefficients are trained with the rest: gamma = (1, 0, ..., 0)
is an MLP of the node's own features, positive decaying ones a low-pass filter (GCN-like
smoothing), alternating signs a high-pass one (a node against its neighbours), so one encoder
covers graphs whose neighbours agree and graphs whose neighbours disagree.

As the filter is linear, sum_k gamma_k A_hat^k (X W_1) = (sum_k gamma_k A_hat^k X) W_1: each
forward takes the order with fewer multiply-adds (``filter_first``). On a mini-batch that is
usually the features filtered over the trimmed hops (edgegcl.nn.adjacency) and W_1 and the
rest on the seed nodes only, cheaper than a GCN's layers; GPR-GNN's order (the MLP before the
filter) would run the MLP on every sampled node, several times the GCN's epoch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from edgegcl.nn.adjacency import LayerAdjacency, chunked_adjacency, gcn_adjacency
from edgegcl.nn.config import ModelConfig
from edgegcl.nn.linear import FeatureLinear, row_block
from edgegcl.nn.model import embed_output, hop_targets, make_activation, row_chunks
from edgegcl.scratch import Scratch, in_memory

__all__ = ["PolyEncoder", "filter_first", "initial_gamma"]


def initial_gamma(hops: int, alpha: float) -> Tensor:
    """The coefficients' start: personalised PageRank's gamma_k = alpha (1 - alpha)^k, the
    last (1 - alpha)^K (GPR-GNN's PPR initialisation); ``alpha`` 1 starts at the identity."""
    gamma = alpha * (1.0 - alpha) ** torch.arange(hops + 1, dtype=torch.float32)
    gamma[-1] = (1.0 - alpha) ** hops
    return gamma


def filter_first(hops: Sequence[LayerAdjacency], num_inputs: int, d_in: int,
                 d_out: int) -> bool:
    """Whether filtering the features and then mapping the last hop's rows,
    (sum_k gamma_k A_hat^k X) W, takes fewer multiply-adds than mapping every input row first,
    sum_k gamma_k A_hat^k (X W) (``GCNLayer``'s ``aggregate_first`` over K hops)."""
    nnz = sum(adj.matrix.values().numel() for adj in hops)
    seeds = hops[-1].num_targets if hops else num_inputs
    return nnz * d_in + seeds * d_in * d_out < num_inputs * d_in * d_out + nnz * d_out


class PolyEncoder(nn.Module):
    """The polynomial filter encoder: ``lin1`` (W_1, no bias) and ``bias1``, the coefficients
    ``gamma`` [K + 1] over the hops, then ``act1``, ``lin2``, ``act2``.

    Args:
        in_dim: feature dimension of the graph.
        cfg: widths, activation, ``num_layers`` (the hops K) and ``poly_alpha`` (the
            coefficients' start, ``initial_gamma``).

    Example:
        >>> enc = PolyEncoder(8, ModelConfig(16, 4, 4, "prelu"))
        >>> enc(torch.randn(5, 8), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
        torch.Size([5, 4])
    """

    def __init__(self, in_dim: int, cfg: ModelConfig) -> None:
        super().__init__()
        self.num_layers = cfg.num_layers
        self.lin1 = FeatureLinear(in_dim, cfg.hidden_dim, bias=False, columns_first=True)
        self.bias1 = nn.Parameter(torch.zeros(cfg.hidden_dim))  # after the filter, as a GCN's
        self.act1 = make_activation(cfg.activation, cfg.hidden_dim)
        self.lin2 = nn.Linear(cfg.hidden_dim, cfg.out_dim)
        self.act2 = make_activation(cfg.activation, cfg.out_dim)
        self.gamma = nn.Parameter(initial_gamma(cfg.num_layers, cfg.poly_alpha))

    @property
    def out_dim(self) -> int:
        return int(self.lin2.out_features)

    def finish(self, filtered: Tensor) -> Tensor:
        """The node-wise rest, sigma(Linear(sigma(filtered + b_1))), of rows already filtered
        and mapped by W_1."""
        return self.act2(self.lin2(self.act1(filtered + self.bias1)))

    def forward(self, x: Tensor, edge_index: Tensor,
                num_sampled_nodes: Sequence[int] | None = None,
                feature_keep: Tensor | None = None) -> Tensor:
        """The encoder on every node, or with a sampler's per-hop counts on the seed nodes
        only, hop k computed for the nodes hop k + 1 reads (``GCNEncoder.forward``'s
        trimming); ``feature_keep`` masks W_1's columns (Eq. 2's nu_1)."""
        n = x.size(0)
        targets = hop_targets(n, self.num_layers, num_sampled_nodes)
        seeds = targets[-1] if targets else n
        hops = gcn_adjacency(edge_index, n, targets)
        weight = self.lin1.weight if feature_keep is None else self.lin1.weight * feature_keep
        if x.layout == torch.strided and filter_first(hops, n, *weight.shape[::-1]):
            mapped = False  # filter the features, then map the seeds' rows
            power = x
        else:
            mapped = True
            power = self.lin1(x, feature_keep)
        total = self.gamma[0] * power[:seeds]
        for k, adj in enumerate(hops, start=1):
            power = adj.propagate(power)
            total = total + self.gamma[k] * power[:seeds]
        return self.finish(total if mapped else nn.functional.linear(total, weight))

    @torch.no_grad()
    def embed_nodes(self, x: Tensor, edge_index: Tensor, out: Tensor | None = None,
                    chunk_rows: int | None = None, scratch: Scratch | None = None) -> Tensor:
        """``forward(x, edge_index)`` of every node without autograd, a chunk of rows at a
        time: besides ``out`` [N, out_dim] and the graph's index arrays it holds three N x w
        tensors (the current power, the next, their weighted sum), w the narrower of the
        features (when dense) and W_1's width; ``scratch`` makes them
        (``edgegcl.scratch.mapped_scratch``: files, each written front to back and read at
        random only where a power is pulled), else they are in memory. Equal to ``forward``
        up to float summation order."""
        n, hidden = x.size(0), self.lin1.out_features
        out = embed_output(n, self.out_dim, x, out)
        buffer = scratch or in_memory(x.device)
        mapped = not (x.layout == torch.strided and x.size(1) < hidden)
        width = hidden if mapped else x.size(1)
        chunks = row_chunks(n, chunk_rows, x.size(1) + 2 * hidden + self.out_dim)
        if mapped:
            power = buffer(n, width)
            for lo, hi in chunks:
                power[lo:hi] = self.lin1(row_block(x, lo, hi))
        else:
            power = x
        total = buffer(n, width)
        for lo, hi in chunks:
            torch.mul(power[lo:hi], self.gamma[0], out=total[lo:hi])
        if self.num_layers:
            adj = chunked_adjacency(edge_index, n)
            following: Tensor | None = None
            for k in range(1, self.num_layers + 1):
                if following is None:
                    following = buffer(n, width)
                for lo, hi in chunks:
                    following[lo:hi] = adj.pull(lo, hi, power)
                    total[lo:hi].add_(following[lo:hi], alpha=float(self.gamma[k]))
                # the old power's rows are the next one's buffer; x itself is never written over
                power, following = following, (None if power is x else power)
        for lo, hi in chunks:
            rows = total[lo:hi] if mapped else nn.functional.linear(total[lo:hi],
                                                                   self.lin1.weight)
            out[lo:hi] = self.finish(rows)
        return out
