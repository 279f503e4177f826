"""The two stochastic views of AdNGCL ("Graph Data Augmentation" in the paper).

One structural augmentation (edge removal, Eq. 1) and two feature-masking schemes: view 1
masks whole feature columns (Eq. 2); view 2 keeps a random half of the columns untouched and
masks the other half entry by entry, rows x columns (Eq. 3). Every function takes an explicit
``torch.Generator`` so a run is reproducible, and returns new tensors (inputs are untouched).

Training never materialises view 1's features: a column mask commutes into the first layer,
(X o nu_1) W^T = X (W o nu_1)^T, forward and backward, so the encoder takes ``column_keep``'s
vector and masks its first weight matrix instead (edgegcl.nn.model). On a mini-batch of a large
graph the feature matrix is the largest input of a step, and one copy fewer is what keeps a
step's memory flat in the graph's size (bench/results/scaling.md).

``Views`` draws both views from one seeded stream, in the order nu_1, A_1, X_2, A_2: the
object ``edgegcl train`` uses and a hand-written loop can use too (README, "Use HANS with your
own encoder"); ``AugmentConfig`` is its ``[augment]`` section.

Features may be dense or a sparse CSR tensor (bag-of-words features such as Cora's are 99 %
zeros; see ``as_features``). Masking a sparse matrix masks its stored values: masking
an entry that is already zero changes nothing, so both forms give the same distribution.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor

from edgegcl.nn.config import AugmentConfig
from edgegcl.nn.linear import HALF_FLOATS

SPARSE_DENSITY = 0.1
"""Feature matrices with fewer nonzeros than this fraction are kept sparse (``as_features``)."""

# torch labels all CSR support "beta"; the operations used here are covered by our tests.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")


def _bernoulli_keep(shape: tuple[int, ...], p_drop: float, generator: torch.Generator,
                    device: torch.device) -> Tensor:
    """Boolean tensor whose entries are True with probability ``1 - p_drop``."""
    return torch.rand(shape, generator=generator, device=device) >= p_drop


def remove_edges(edge_index: Tensor, p_edge: float, generator: torch.Generator) -> Tensor:
    """Eq. 1, A_hat = A o M_e: drop each (directed) edge independently with probability ``p_edge``.

    The paper draws M_e entry-wise over the n x n adjacency, so the two directions of an
    undirected edge are dropped independently (as GRACE does); we keep that.

    Args:
        edge_index: [2, E] edges.
        p_edge: drop probability of each edge.
        generator: the stream the mask is drawn from.

    Example:
        >>> edges = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
        >>> remove_edges(edges, 0.0, torch.Generator()).shape
        torch.Size([2, 4])
    """
    keep = _bernoulli_keep((edge_index.size(1),), p_edge, generator, edge_index.device)
    return edge_index[:, keep]


def as_features(x: Tensor) -> Tensor:
    """``x`` as training input (half floats widened to float32): sparse CSR when mostly zeros,
    else dense.

    A sparse first layer multiplies only the nonzeros, and CSR beats COO and dense for
    bag-of-words features (docs/performance.md, "Sparse first layer"). The encoder
    (edgegcl.nn.model) accepts either.
    """
    if x.layout == torch.sparse_csr or x.numel() == 0:
        return x
    if x.dtype in HALF_FLOATS:  # a graph folder's: steps compute in float32
        x = x.float()
    if torch.count_nonzero(x).item() < SPARSE_DENSITY * x.numel():
        return x.to_sparse_csr()
    return x


def _with_values(x: Tensor, values: Tensor) -> Tensor:
    """A CSR tensor with ``x``'s sparsity pattern (valid by construction) and new values."""
    return torch.sparse_csr_tensor(x.crow_indices(), x.col_indices(), values, x.shape,
                                   check_invariants=False)


def column_keep(num_features: int, p_feature: float, generator: torch.Generator,
                device: torch.device) -> Tensor:
    """Eq. 2's nu_1 as a float vector: 0 for each column dropped with probability ``p_feature``."""
    return _bernoulli_keep((num_features,), p_feature, generator, device).float()


def mask_columns(x: Tensor, p_feature: float, generator: torch.Generator) -> Tensor:
    """Eq. 2, X_1 = X o nu_1: zero each feature column with probability ``p_feature``.

    Args:
        x: [N, d] features, dense or sparse CSR.
        p_feature: drop probability of each column.
        generator: the stream the mask is drawn from.

    Example:
        >>> x = torch.ones(3, 4)
        >>> mask_columns(x, 1.0, torch.Generator()).sum().item()
        0.0
    """
    return keep_columns(x, column_keep(x.size(1), p_feature, generator, x.device))


def keep_columns(x: Tensor, keep: Tensor) -> Tensor:
    """``x`` with column j multiplied by ``keep[j]`` (0 or 1: Eq. 2's nu_1), dense or CSR."""
    keep = keep.to(x.dtype)
    if x.layout == torch.sparse_csr:
        return _with_values(x, x.values() * keep[x.col_indices()])
    return x * keep


def dropout_entries(x: Tensor, p: float, generator: torch.Generator) -> Tensor:
    """Dropout of ``x``'s entries (dense, or the stored entries of a CSR matrix): each zeroed
    with probability ``p``, the rest scaled by 1 / (1 - p), as ``torch.nn.functional.dropout``
    in training, drawn from ``generator``.

    Example:
        >>> x = torch.ones(200, 50)
        >>> out = dropout_entries(x, 0.5, torch.Generator().manual_seed(0))
        >>> sorted(set(out.flatten().tolist()))
        [0.0, 2.0]
    """
    if p <= 0.0:
        return x
    values = x.values() if x.layout == torch.sparse_csr else x
    keep = torch.rand(values.shape, generator=generator, device=generator.device)
    scaled = values * (keep.to(values.device) >= p).to(values.dtype) / (1.0 - p)
    return _with_values(x, scaled) if x.layout == torch.sparse_csr else scaled


def unfixed_half(num_features: int, generator: torch.Generator,
                 device: torch.device | str = "cpu") -> Tensor:
    """Eq. 3's X_unfixed columns: a random ceil(d/2) of the d columns (the other floor(d/2)
    are X_fixed)."""
    return torch.randperm(num_features, generator=generator, device=generator.device
                          )[num_features // 2:].to(device)


def mask_half_rows_columns(x: Tensor, p_feature: float, generator: torch.Generator,
                           unfixed: Tensor | None = None) -> Tensor:
    """Eq. 3, X_2 = [X_fixed, X_unfixed o M_2].

    A random half of the columns (floor(d/2), redrawn at every call unless ``unfixed`` names
    the other half, e.g. drawn once per run) is kept as it is; each entry of the other columns
    is zeroed with probability ``p_feature``. Columns stay where they are: the paper's bracket
    notation lists the two groups side by side, but reordering columns would scramble the
    features the encoder reads, so the mask is applied in place.
    """
    n, d = x.shape
    if unfixed is None:
        unfixed = unfixed_half(d, generator, x.device)
    else:
        unfixed = unfixed.to(x.device)
    if x.layout == torch.sparse_csr:
        is_unfixed = torch.zeros(d, dtype=torch.bool, device=x.device)
        is_unfixed[unfixed] = True
        drop = torch.rand(x.values().numel(), generator=generator, device=x.device) < p_feature
        keep = ~(is_unfixed[x.col_indices()] & drop)
        return _with_values(x, x.values() * keep.to(x.dtype))
    # Random draws for the masked half only: half the generator's work and temporaries of
    # n x d/2, next to the one output (a mini-batch's features are its largest tensor).
    drop = _bernoulli_keep((n, unfixed.numel()), 1.0 - p_feature, generator, x.device)
    out = x.clone()
    out[:, unfixed] = x[:, unfixed].masked_fill_(drop, 0.0)
    return out


class Views:
    """The two stochastic views of a graph (Eqs. 1-3), drawn from one seeded stream.

    View 1 removes edges with probability p_edge_1 (Eq. 1) and masks feature columns with
    p_feature_1 (Eq. 2); view 2 removes edges with p_edge_2 and masks the entries of a random
    half of the columns with p_feature_2 (Eq. 3). The draws come in the order nu_1, A_1, X_2,
    A_2 from ``generator``, so a run is reproducible and ``state_dict()`` resumes it.
    ``first_mask`` leaves view 1's column mask to an encoder that applies it to its first
    layer's weights (the built-in GCN: one feature-sized copy fewer per step).

    Args:
        config: the drop probabilities (``AugmentConfig``; default: GRACE's / the paper's).
        seed: seed of the stream.
        unfixed: view 2's masked columns when drawn once per run (``unfixed_half``); None:
            redrawn at every step.
        device: where the stream draws.

    Example:
        >>> views = Views(AugmentConfig(p_edge_1=0.5), seed=0)
        >>> x, edges = torch.ones(4, 6), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
        >>> (x1, e1), (x2, e2) = views(x, edges)
        >>> x1.shape, e1.size(0)
        (torch.Size([4, 6]), 2)
    """

    def __init__(self, config: AugmentConfig | None = None, *, seed: int = 0,
                 unfixed: Tensor | None = None, device: torch.device | str = "cpu") -> None:
        self.config = config if config is not None else AugmentConfig()
        self.unfixed = unfixed
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def __call__(self, x: Tensor, edge_index: Tensor) -> tuple[tuple[Tensor, Tensor],
                                                               tuple[Tensor, Tensor]]:
        """Both views, ``((x_1, edges_1), (x_2, edges_2))``."""
        return self.first(x, edge_index), self.second(x, edge_index)

    def first(self, x: Tensor, edge_index: Tensor) -> tuple[Tensor, Tensor]:
        """View 1: its features (Eq. 2) and edges (Eq. 1)."""
        keep, edges = self.first_mask(x, edge_index)
        return keep_columns(x, keep), edges

    def first_mask(self, x: Tensor, edge_index: Tensor) -> tuple[Tensor, Tensor]:
        """View 1 with its features left to the encoder: nu_1 (0 / 1 per column, Eq. 2) and
        the edges (Eq. 1)."""
        keep = column_keep(x.size(1), self.config.p_feature_1, self.generator, x.device)
        return keep, remove_edges(edge_index, self.config.p_edge_1, self.generator)

    def second(self, x: Tensor, edge_index: Tensor) -> tuple[Tensor, Tensor]:
        """View 2: its features (Eq. 3) and edges (Eq. 1)."""
        x_2 = mask_half_rows_columns(x, self.config.p_feature_2, self.generator, self.unfixed)
        return x_2, remove_edges(edge_index, self.config.p_edge_2, self.generator)

    def state_dict(self) -> dict[str, Any]:
        """The stream's state."""
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the stream of a ``state_dict()``."""
        self.generator.set_state(state["generator"])
