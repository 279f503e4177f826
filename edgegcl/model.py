"""Encoder and projection head ("Learning" in the paper, Eqs. 4-5).

f: a 2-layer GCN, Z^(l+1) = sigma(D^-1/2 (A + I) D^-1/2 Z^(l) W^(l)) (Eq. 4).
g: the projection head H = g(Z) (Eq. 5), Linear -> ELU -> Linear as in GRACE.
Only the encoder is kept for embeddings and export; the head exists for the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch_geometric.nn import GCNConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm

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


class GCNEncoder(nn.Module):
    """f in the paper: two GCN layers (Eq. 4), each followed by the activation sigma."""

    def __init__(self, in_dim: int, cfg: ModelConfig) -> None:
        super().__init__()
        self.conv1 = GCNConv(in_dim, cfg.hidden_dim)
        self.conv2 = GCNConv(cfg.hidden_dim, cfg.out_dim)
        self.act1 = make_activation(cfg.activation, cfg.hidden_dim)
        self.act2 = make_activation(cfg.activation, cfg.out_dim)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Node embeddings Z of the graph (x, edge_index); self-loops are added by GCNConv."""
        z = self.act1(self.conv1(x, edge_index))
        return self.act2(self.conv2(z, edge_index))


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

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.encoder(x, edge_index)

    def project(self, z: Tensor) -> Tensor:
        return self.head(z)

    def embed(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Frozen embeddings H = f*(A, X) of the original graph (the paper's output)."""
        return embed_layerwise(self.encoder, x, edge_index)


def normalized_adjacency(edge_index: Tensor, num_nodes: int, dtype: torch.dtype) -> Tensor:
    """D^-1/2 (A + I) D^-1/2 as a CSR matrix, exactly as GCNConv normalises (Eq. 4).

    Row = target, column = source (PyG's source-to-target flow), so ``A @ H`` aggregates
    each node's in-neighbours.
    """
    ei, w = gcn_norm(edge_index, None, num_nodes, False, True, "source_to_target", dtype)
    coo = torch.sparse_coo_tensor(torch.stack([ei[1], ei[0]]), w, (num_nodes, num_nodes),
                                  check_invariants=False)  # gcn_norm's indices are in range
    return coo.coalesce().to_sparse_csr()


@torch.no_grad()
def embed_layerwise(encoder: GCNEncoder, x: Tensor, edge_index: Tensor) -> Tensor:
    """Embeddings of every node, one layer at a time, as sparse-dense products.

    Equal to ``encoder(x, edge_index)`` in eval mode, but the propagation is A_hat @ (Z W)
    with A_hat in CSR: memory O(N d + E), where message passing would hold an E x d tensor of
    messages and training-style full-graph contrast an N x N one.
    """
    was_training = encoder.training
    encoder.eval()
    adj = normalized_adjacency(edge_index, x.size(0), torch.float32).to(x.device)
    z = x
    for conv, act in ((encoder.conv1, encoder.act1), (encoder.conv2, encoder.act2)):
        z = act(adj @ conv.lin(z) + conv.bias)
    encoder.train(was_training)
    return z
