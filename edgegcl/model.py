"""Encoder and projection head ("Learning" in the paper, Eqs. 4-5).

f: a 2-layer GCN, Z^(l+1) = sigma(D^-1/2 (A + I) D^-1/2 Z^(l) W^(l)) (Eq. 4).
g: the projection head H = g(Z) (Eq. 5), Linear -> ELU -> Linear as in GRACE.
Only the encoder is kept for embeddings and export; the head exists for the loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch_geometric.nn.inits import glorot

from edgegcl.adjacency import LayerAdjacency, gcn_adjacency

ACTIVATIONS = ("relu", "prelu", "elu", "rrelu")


def make_activation(name: str, channels: int) -> nn.Module:
    """The encoder's sigma by name; PReLU gets one slope per channel."""
    if name == "relu":
        return nn.ReLU()
    if name == "prelu":
        return nn.PReLU(channels)
    if name == "elu":
        return nn.ELU()
    if name == "rrelu":
        return nn.RReLU()
    raise ValueError(f"unknown activation {name!r}; choose one of {', '.join(ACTIVATIONS)}")


@dataclass(frozen=True)
class ModelConfig:
    """Layer sizes: in_dim -> hidden_dim -> out_dim (GCN), out_dim -> proj_dim -> out_dim (head)."""

    hidden_dim: int = 512
    out_dim: int = 256
    proj_dim: int = 256
    activation: str = "prelu"


class GCNLayer(nn.Module):
    """One GCN layer of Eq. 4 before its activation: A_hat H W + b.

    The product is taken in the order with fewer multiply-adds (``aggregate_first``): with T
    output rows, S input rows and nnz edges, (A_hat H) W costs nnz d_in + T d_in d_out and
    A_hat (H W) costs S d_in d_out + nnz d_out. Full graph (T = S): aggregate first exactly
    when the input is the narrower side (128 synthetic features into 512 hidden units). A
    layer-trimmed mini-batch layer (T much smaller than S) aggregates first whatever the
    widths, which also keeps autograd from saving the S-row input for the weight gradient
    (it saves the T-row aggregate). Sparse CSR input (bag-of-words features) is always
    transformed first. Parameter names match PyG's ``GCNConv`` (``lin.weight``, ``bias``),
    with its glorot / zero initialisation.
    """

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))
        glorot(self.lin.weight)

    def forward(self, adj: LayerAdjacency, h: Tensor, in_keep: Tensor | None = None) -> Tensor:
        """A_hat (H o in_keep) W + b; ``in_keep`` (one 0/1 per input column, Eq. 2's nu_1)
        masks the columns of W instead of H: (H o nu) W^T = H (W o nu)^T, gradients included."""
        weight = self.lin.weight if in_keep is None else self.lin.weight * in_keep
        if h.layout == torch.strided and aggregate_first(adj, h.size(0), *weight.shape[::-1]):
            return nn.functional.linear(adj.propagate(h), weight, self.bias)
        return adj.propagate(nn.functional.linear(h, weight)).add_(self.bias)


def aggregate_first(adj: LayerAdjacency, num_inputs: int, d_in: int, d_out: int) -> bool:
    """Whether (A_hat H) W takes fewer multiply-adds than A_hat (H W) (see ``GCNLayer``)."""
    nnz, t = adj.neighbours.values().numel() + adj.num_targets, adj.num_targets
    return nnz * d_in + t * d_in * d_out < num_inputs * d_in * d_out + nnz * d_out


class GCNEncoder(nn.Module):
    """f in the paper: two GCN layers (Eq. 4), each followed by the activation sigma."""

    num_layers = 2

    def __init__(self, in_dim: int, cfg: ModelConfig) -> None:
        super().__init__()
        self.conv1 = GCNLayer(in_dim, cfg.hidden_dim)
        self.conv2 = GCNLayer(cfg.hidden_dim, cfg.out_dim)
        self.act1 = make_activation(cfg.activation, cfg.hidden_dim)
        self.act2 = make_activation(cfg.activation, cfg.out_dim)

    def forward(self, x: Tensor, edge_index: Tensor,
                num_sampled_nodes: Sequence[int] | None = None,
                feature_keep: Tensor | None = None) -> Tensor:
        """Embeddings Z (self-loops added as in Eq. 4) of the features x o ``feature_keep``.

        Without ``num_sampled_nodes``: of every node of the graph (x, edge_index). With a
        sampler's per-hop node counts (seeds first): of the seed nodes only, each layer
        computed just for the nodes the next one reads (edgegcl.adjacency). ``feature_keep``
        (view 1's column mask, edgegcl.augment) is applied to the first layer's weights.
        """
        n = x.size(0)
        if num_sampled_nodes is None:
            targets = [n] * self.num_layers
        else:
            hops = list(num_sampled_nodes)
            targets = [sum(hops[: self.num_layers - layer]) for layer in range(self.num_layers)]
        adj1, adj2 = gcn_adjacency(edge_index, n, targets)
        z = self.act1(self.conv1(adj1, x, feature_keep))
        return self.act2(self.conv2(adj2, z))


class ProjectionHead(nn.Module):
    """g in the paper (Eq. 5): Linear -> ELU -> Linear, used only by the contrastive loss."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.out_dim, cfg.proj_dim)
        self.fc2 = nn.Linear(cfg.proj_dim, cfg.out_dim)

    def forward(self, z: Tensor) -> Tensor:
        return self.fc2(nn.functional.elu(self.fc1(z)))


class AdNGCL(nn.Module):
    """Encoder f plus projection head g; ``forward`` gives embeddings, ``project`` the loss space."""

    def __init__(self, in_dim: int, cfg: ModelConfig) -> None:
        super().__init__()
        self.encoder = GCNEncoder(in_dim, cfg)
        self.head = ProjectionHead(cfg)

    def forward(self, x: Tensor, edge_index: Tensor,
                num_sampled_nodes: Sequence[int] | None = None,
                feature_keep: Tensor | None = None) -> Tensor:
        return self.encoder(x, edge_index, num_sampled_nodes, feature_keep)

    def project(self, z: Tensor) -> Tensor:
        return self.head(z)

    def embed(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Frozen embeddings H = f*(A, X) of every node of the original graph (the paper's
        output), in eval mode and without autograd: memory O(N d + E), never N x N."""
        was_training = self.training
        self.eval()
        with torch.no_grad():
            z = self.encoder(x, edge_index)
        self.train(was_training)
        return z
