"""A polynomial graph filter with learned coefficients (GPR-GNN's propagation; PolyGCL's idea
of a learned spectral filter for contrastive learning).

H = MLP(X) (two node-wise layers, in_dim -> hidden_dim -> out_dim, each followed by sigma),
then f(X, A) = sum_{k=0..K} gamma_k A_hat^k H with A_hat = D^-1/2 (A + I) D^-1/2 (Eq. 4's
normalisation) and K = ``num_layers`` hops. The coefficients are trained with the rest: gamma
= (1, 0, ..., 0) is the node's own representation (an MLP), positive decaying ones a low-pass
filter (GCN-like smoothing), alternating signs a high-pass one (a node against its
neighbours), so one encoder covers graphs whose neighbours agree and graphs whose neighbours
disagree. Mini-batches are trimmed per hop as the GCN's layers are (edgegcl.nn.adjacency).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from edgegcl.nn.adjacency import chunked_adjacency, gcn_adjacency
from edgegcl.nn.config import ModelConfig
from edgegcl.nn.linear import FeatureLinear, row_block
from edgegcl.nn.model import embed_output, hop_targets, make_activation, row_chunks

__all__ = ["PolyEncoder", "initial_gamma"]


def initial_gamma(hops: int, alpha: float) -> Tensor:
    """The coefficients' start: personalised PageRank's gamma_k = alpha (1 - alpha)^k, the
    last (1 - alpha)^K (GPR-GNN's PPR initialisation); ``alpha`` 1 starts at the identity."""
    gamma = alpha * (1.0 - alpha) ** torch.arange(hops + 1, dtype=torch.float32)
    gamma[-1] = (1.0 - alpha) ** hops
    return gamma


class PolyEncoder(nn.Module):
    """The polynomial filter encoder: ``mlp`` (``lin1``, ``act1``, ``lin2``, ``act2``) and the
    coefficients ``gamma`` [K + 1] over the hops.

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
        self.lin1 = FeatureLinear(in_dim, cfg.hidden_dim, columns_first=True)
        self.act1 = make_activation(cfg.activation, cfg.hidden_dim)
        self.lin2 = nn.Linear(cfg.hidden_dim, cfg.out_dim)
        self.act2 = make_activation(cfg.activation, cfg.out_dim)
        self.gamma = nn.Parameter(initial_gamma(cfg.num_layers, cfg.poly_alpha))

    @property
    def out_dim(self) -> int:
        return int(self.lin2.out_features)

    def transform(self, x: Tensor, feature_keep: Tensor | None = None) -> Tensor:
        """H = MLP(x o feature_keep), node by node (x dense or sparse CSR)."""
        return self.act2(self.lin2(self.act1(self.lin1(x, feature_keep))))

    def forward(self, x: Tensor, edge_index: Tensor,
                num_sampled_nodes: Sequence[int] | None = None,
                feature_keep: Tensor | None = None) -> Tensor:
        """sum_k gamma_k A_hat^k MLP(x) of every node, or with a sampler's per-hop counts of
        the seed nodes only, hop k computed for the nodes hop k + 1 reads
        (``GCNEncoder.forward``'s trimming)."""
        n = x.size(0)
        targets = hop_targets(n, self.num_layers, num_sampled_nodes)
        seeds = targets[-1] if targets else n
        power = self.transform(x, feature_keep)
        z = self.gamma[0] * power[:seeds]
        for k, adj in enumerate(gcn_adjacency(edge_index, n, targets), start=1):
            power = adj.propagate(power)
            z = z + self.gamma[k] * power[:seeds]
        return z

    @torch.no_grad()
    def embed_nodes(self, x: Tensor, edge_index: Tensor, out: Tensor | None = None,
                    chunk_rows: int | None = None) -> Tensor:
        """``forward(x, edge_index)`` of every node without autograd, a chunk of rows at a
        time: besides ``out`` [N, out_dim] it holds two N x out_dim powers (the current and the
        next) and the graph's index arrays, never an N x hidden tensor. Equal to ``forward``
        up to float summation order."""
        n, width = x.size(0), self.out_dim
        out = embed_output(n, width, x, out)
        chunks = row_chunks(n, chunk_rows, x.size(1) + 2 * self.lin1.out_features)
        power = torch.empty(n, width, device=x.device)
        for lo, hi in chunks:
            power[lo:hi] = self.transform(row_block(x, lo, hi))
        torch.mul(power, self.gamma[0], out=out)
        if self.num_layers:
            adj = chunked_adjacency(edge_index, n)
            following = torch.empty_like(power)
            for k in range(1, self.num_layers + 1):
                for lo, hi in chunks:
                    following[lo:hi] = adj.rows(lo, hi) @ power
                out.add_(following, alpha=float(self.gamma[k]))
                power, following = following, power
        return out
