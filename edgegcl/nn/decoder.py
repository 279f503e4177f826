"""A learned link scorer: a small MLP on the Hadamard product of two embeddings.

What a masked graph autoencoder (MaskGAE) trains beside its encoder: a pair (u, v) is scored by
MLP(z_u * z_v), which sees which coordinates agree rather than only their sum (the inner
product) or angle (the cosine). Trained on edges masked from the encoder's input against
non-edges (edgegcl.training.edges), it is the link task's ``decoder`` scorer.
"""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["DegreeDecoder", "LinkDecoder"]


class LinkDecoder(nn.Module):
    """logit(u, v) = W2 relu(W1 dropout(z_u * z_v) + b1) + b2, symmetric in (u, v).

    Example:
        >>> import torch
        >>> decoder = LinkDecoder(8)
        >>> a, b = torch.randn(5, 8), torch.randn(5, 8)
        >>> bool(torch.allclose(decoder.eval()(a, b), decoder(b, a)))
        True
    """

    def __init__(self, dim: int, hidden: int = 64, dropout: float = 0.2) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Dropout(dropout), nn.Linear(dim, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, z_u: Tensor, z_v: Tensor) -> Tensor:
        """The pairs' logits [K] from their embeddings [K, D] each."""
        return self.net(z_u * z_v).squeeze(-1)


class DegreeDecoder(nn.Module):
    """deg(u) = relu(W2 relu(dropout(W1 z_u + b1)) + b2): MaskGAE's degree decoder, a
    regulariser trained beside the link decoder (each node's count of masked edges regressed
    from its embedding); training only, never exported.

    Example:
        >>> import torch
        >>> DegreeDecoder(8)(torch.randn(5, 8)).shape
        torch.Size([5])
    """

    def __init__(self, dim: int, hidden: int = 64, dropout: float = 0.2) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.Dropout(dropout), nn.ReLU(),
                                 nn.Linear(hidden, 1), nn.ReLU())

    def forward(self, z: Tensor) -> Tensor:
        """The nodes' predicted degrees [N] from their embeddings [N, D]."""
        return self.net(z).squeeze(-1)
