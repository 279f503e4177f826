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

    @torch.no_grad()
    def embed(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Frozen embeddings H = f*(A, X) of the original graph (the paper's output)."""
        was_training = self.training
        self.eval()
        z = self.encoder(x, edge_index)
        self.train(was_training)
        return z
