"""How likely a candidate negative is a true one: ProGCL's two-component Beta mixture.

In graph contrastive learning the candidates most similar to an anchor are mostly of its own
class (false negatives), since message passing pulls neighbours together. ProGCL (Xia et al.,
ICML 2022) models the anchor-candidate similarities, mapped to [0, 1] as (cos + 1) / 2, by a
mixture of two Beta distributions: the lower one the true negatives, the upper one the false.
The posterior of the lower component is the probability that a candidate is a true negative,
and ProGCL's hardness of a negative is that probability times its similarity:

    B_ij = p(true negative | s_ij) * s_ij          (ProGCL, Eq. 8; s in [0, 1])

so the hardest negatives are the similar ones that are still likely of another class.
``BetaMixture`` fits the mixture by EM with weighted moment matching (ProGCL's procedure);
``true_negative_hardness`` fits it on a bounded sample of one step's similarities and returns
the elementwise key that ranks candidates by B instead of by similarity. Nothing here sees a
label: it is unsupervised, and its memory is the sample's, whatever the graph.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["FIT_SAMPLE", "BetaMixture", "HARDNESS", "true_negative_hardness"]

HARDNESS = ("similarity", "progcl")
"""``--hardness``: candidates ranked by similarity (the paper's S_i), or by ProGCL's
B = p(true negative) x similarity."""
FIT_SAMPLE = 1 << 16
"""Similarities the mixture is fitted on per refresh (ProGCL fits on N x 100)."""
_EPS = 1e-6


def _log_beta_pdf(x: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """log Beta(x; a, b), x in (0, 1), broadcasting a and b ([2, 1]) against x ([n])."""
    log_norm = torch.lgamma(a) + torch.lgamma(b) - torch.lgamma(a + b)
    return (a - 1) * torch.log(x) + (b - 1) * torch.log1p(-x) - log_norm


@dataclass
class BetaMixture:
    """Two Beta components over [0, 1]: 0 the true negatives (lower mean), 1 the false ones.

    ``fit(x)`` runs ``iters`` EM steps as ProGCL does (responsibilities, then each component's
    alpha and beta by weighted moment matching) from a two-means split of the data;
    ``true_negative(x)`` is the posterior of component 0.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> low = torch.distributions.Beta(2.0, 8.0).sample((4000,))
        >>> high = torch.distributions.Beta(9.0, 2.0).sample((1000,))
        >>> mix = BetaMixture().fit(torch.cat([low, high]))
        >>> float(mix.true_negative(torch.tensor([0.1]))) > 0.99
        True
        >>> float(mix.true_negative(torch.tensor([0.95]))) < 0.01
        True
    """

    iters: int = 10
    weight_init: float = 0.05
    alphas: Tensor = field(default_factory=lambda: torch.tensor([[1.0], [2.0]], dtype=torch.float64))
    betas: Tensor = field(default_factory=lambda: torch.tensor([[2.0], [1.0]], dtype=torch.float64))
    weights: Tensor | None = None

    def _clamp(self, x: Tensor) -> Tensor:
        return x.detach().to(torch.float64).clamp(_EPS, 1 - _EPS)

    def _responsibilities(self, x: Tensor) -> Tensor:
        assert self.weights is not None
        log_p = _log_beta_pdf(x, self.alphas, self.betas) + torch.log(self.weights)
        return torch.softmax(log_p, dim=0)  # [2, n]

    def _m_step(self, x: Tensor, r: Tensor) -> None:
        """Each component's alpha and beta by weighted moment matching, its weight by mass."""
        mass = r.sum(dim=1, keepdim=True).clamp_min(_EPS)
        mean = ((r * x).sum(dim=1, keepdim=True) / mass).clamp(_EPS, 1 - _EPS)
        var = (r * (x - mean) ** 2).sum(dim=1, keepdim=True) / mass
        var = torch.minimum(var.clamp_min(_EPS ** 2), mean * (1 - mean) * (1 - _EPS))
        common = mean * (1 - mean) / var - 1  # a + b of a Beta with this mean and variance
        self.alphas = (mean * common).clamp_min(_EPS)
        self.betas = ((1 - mean) * common).clamp_min(_EPS)
        self.weights = (mass / mass.sum()).clamp_min(_EPS)

    def fit(self, x: Tensor) -> BetaMixture:
        """Fit to the values ``x`` in [0, 1]. The start is a two-means split of ``x`` (its
        upper cluster, then ``iters`` EM steps): ProGCL's fixed start (Beta(1, 2) and
        Beta(2, 1)) can settle on two broad overlapping components when the upper one is small,
        a start from the data does not."""
        x = self._clamp(x.flatten())
        lo, hi = torch.quantile(x[: 1 << 16], torch.tensor([0.25, 0.95], dtype=x.dtype,
                                                           device=x.device)).tolist()
        for _ in range(20):  # 1-D two-means (Lloyd)
            upper = (x - hi).abs() < (x - lo).abs()
            if not bool(upper.any()) or bool(upper.all()):
                break
            lo, hi = float(x[~upper].mean()), float(x[upper].mean())
        r = torch.stack([(~upper).to(x.dtype), upper.to(x.dtype)])
        if float(r[1].sum()) < 2 or float(r[0].sum()) < 2:  # one cluster: ProGCL's start
            self.weights = torch.tensor([[1 - self.weight_init], [self.weight_init]],
                                        dtype=torch.float64, device=x.device)
            self.alphas, self.betas = self.alphas.to(x.device), self.betas.to(x.device)
        else:
            self._m_step(x, r)
        for _ in range(self.iters):
            self._m_step(x, self._responsibilities(x))
        means = self.alphas / (self.alphas + self.betas)
        if bool(means[0] > means[1]):  # component 0 is the lower one by definition
            self.alphas, self.betas = self.alphas.flip(0), self.betas.flip(0)
            self.weights = self.weights.flip(0)
        return self

    def true_negative(self, x: Tensor) -> Tensor:
        """p(true negative | x), elementwise, float64, shape of ``x``."""
        if self.weights is None:
            raise RuntimeError("fit the mixture first")
        flat = self._clamp(x.flatten())
        return self._responsibilities(flat)[0].view(x.shape)


def true_negative_hardness(sample: Tensor, tau: float) -> Callable[[Tensor], Tensor]:
    """The key that ranks candidates by ProGCL's hardness B = p(true negative) x s.

    ``sample`` holds cos / tau similarities of one step (any shape, at most ``FIT_SAMPLE`` of
    them are read); the mixture is fitted on (cos + 1) / 2. The key maps a block of cos / tau
    similarities to B, elementwise: a larger key is harder, as a larger similarity was.
    Non-finite entries (the excluded columns a caller marked) keep their value.
    """
    flat = sample.detach().flatten()
    flat = flat[torch.isfinite(flat)][:FIT_SAMPLE]
    if flat.numel() < 2:
        return lambda block: block
    mixture = BetaMixture().fit((flat * tau + 1) / 2)

    def key(block: Tensor) -> Tensor:
        s = (block.detach() * tau + 1) / 2
        out = (mixture.true_negative(s) * s.to(torch.float64)).to(block.dtype)
        return torch.where(torch.isfinite(block), out, block)

    key.mixture = mixture  # type: ignore[attr-defined]
    return key


def sample_columns(num_cols: int, size: int, generator: torch.Generator) -> Tensor:
    """``size`` distinct random columns of ``num_cols`` (all when fewer), on the CPU."""
    if size >= num_cols:
        return torch.arange(num_cols)
    return torch.randperm(num_cols, generator=generator)[:size]


def fit_rows(num_anchors: int) -> int:
    """Anchors whose candidate rows the mixture is fitted on: enough for ``FIT_SAMPLE``
    similarities with 256 columns each, at most all of them."""
    return max(1, min(num_anchors, math.ceil(FIT_SAMPLE / 256)))
