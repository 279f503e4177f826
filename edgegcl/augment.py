"""The two stochastic views of AdNGCL ("Graph Data Augmentation" in the paper).

One structural augmentation (edge removal, Eq. 1) and two feature-masking schemes: view 1
masks whole feature columns (Eq. 2); view 2 keeps a random half of the columns untouched and
masks the other half entry by entry, rows x columns (Eq. 3). Every function takes an explicit
``torch.Generator`` so a run is reproducible, and returns new tensors (inputs are untouched).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def _bernoulli_keep(shape: tuple[int, ...], p_drop: float, generator: torch.Generator,
                    device: torch.device) -> Tensor:
    """Boolean tensor whose entries are True with probability ``1 - p_drop``."""
    return torch.rand(shape, generator=generator, device=device) >= p_drop


def remove_edges(edge_index: Tensor, p_edge: float, generator: torch.Generator) -> Tensor:
    """Eq. 1, A_hat = A o M_e: drop each (directed) edge independently with probability ``p_edge``.

    The paper draws M_e entry-wise over the n x n adjacency, so the two directions of an
    undirected edge are dropped independently (as GRACE does); we keep that.
    """
    keep = _bernoulli_keep((edge_index.size(1),), p_edge, generator, edge_index.device)
    return edge_index[:, keep]


def mask_columns(x: Tensor, p_feature: float, generator: torch.Generator) -> Tensor:
    """Eq. 2, X_1 = X o nu_1: zero each feature column with probability ``p_feature``."""
    keep = _bernoulli_keep((x.size(1),), p_feature, generator, x.device)
    return x * keep.to(x.dtype)


def mask_half_rows_columns(x: Tensor, p_feature: float, generator: torch.Generator) -> Tensor:
    """Eq. 3, X_2 = [X_fixed, X_unfixed o M_2].

    A random half of the columns (floor(d/2), redrawn at every call) is kept as it is; each entry
    of the other columns is zeroed with probability ``p_feature``. Columns stay where they are:
    the paper's bracket notation lists the two groups side by side, but reordering columns
    would scramble the features the encoder reads, so the mask is applied in place.
    """
    n, d = x.shape
    unfixed = torch.randperm(d, generator=generator, device=x.device)[d // 2:]
    keep = _bernoulli_keep((n, unfixed.numel()), p_feature, generator, x.device)
    out = x.clone()
    out[:, unfixed] = x[:, unfixed] * keep.to(x.dtype)
    return out


@dataclass(frozen=True)
class AugmentConfig:
    """Drop probabilities of the two views: edges (p_e) and features (p_f), per view."""

    p_edge_1: float = 0.2
    p_edge_2: float = 0.4
    p_feature_1: float = 0.3
    p_feature_2: float = 0.4


def two_views(x: Tensor, edge_index: Tensor, cfg: AugmentConfig, generator: torch.Generator
              ) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """The paper's pair of views: ((X_1, A_1), (X_2, A_2)) with view-1 and view-2 masking."""
    view_1 = (mask_columns(x, cfg.p_feature_1, generator),
              remove_edges(edge_index, cfg.p_edge_1, generator))
    view_2 = (mask_half_rows_columns(x, cfg.p_feature_2, generator),
              remove_edges(edge_index, cfg.p_edge_2, generator))
    return view_1, view_2
