"""HANS-scheduled contrast as one module, for any encoder: two views' projections in, the loss
(and its per-category parts) out.

``HANSContrast`` is edgegcl's contrast without the rest of edgegcl: bring an encoder (a PyG
``GraphSAGE``, ``GAT``, ...), two views and an optimiser; it keeps the negative selection
between steps and feeds HANS the epoch's per-category losses when asked (``step()``, once per
epoch, as ``torch.optim.lr_scheduler``). Nothing N x N is built: candidates are the batch's
other anchors in both views (2B - 2 per anchor; or in the other view only, B - 1, with
``candidates="inter"``), stratified and scheduled as in ``edgegcl train``
(edgegcl.training.step.contrast).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from edgegcl.contrast.hans import HANS, HANSEvent
from edgegcl.contrast.loss import LossOutput, scheduled_info_nce, similarities
from edgegcl.contrast.negatives import (
    CANDIDATES,
    CATEGORIES,
    SAMPLE_MIN,
    STRATIFY,
    num_candidates,
)
from edgegcl.contrast.pairs import LOGITS, choose_logits, pair_similarities
from edgegcl.contrast.selection import NegativeSelector
from edgegcl.phases import PhaseClock

__all__ = ["HANSContrast", "contrast"]


def contrast(h1: Tensor, h2: Tensor, tau: float, logits: str, selector: NegativeSelector,
             hans: HANS, step: int, clock: PhaseClock | None = None) -> LossOutput:
    """The HANS-scheduled symmetric InfoNCE (Eq. 6) between the projected anchors of the two
    views at temperature ``tau``, over the dense similarity blocks or the scheduled pairs only
    (``logits``; ``auto`` picks per step from HANS's current state,
    edgegcl.contrast.pairs.choose_logits), among the candidates the selector is for
    (``selector.candidates``). ``step`` numbers the selector's refreshes."""
    num_anchors = h1.size(0)
    path = choose_logits(logits, selector.stratify, selector.touched(num_anchors, hans),
                         num_candidates(num_anchors, selector.candidates))
    sims = (pair_similarities if path == "pairs" else similarities)(h1, h2, tau,
                                                                     selector.candidates)
    if clock is not None:
        clock.mark("similarities")
    active = selector.get(sims, hans, step)
    if clock is not None:
        clock.mark("strata")
    out = scheduled_info_nce(sims, active, hans.category_loss)
    if clock is not None:
        clock.mark("loss forward")
    return out


class HANSContrast(nn.Module):
    """Symmetric InfoNCE whose negatives HANS schedules (Eq. 6), between ``h1`` and ``h2``.

    Args:
        hans: the scheduler; its per-category caps ``theta_cat`` also give the strata's
            ratios (theta_cat / sum theta_cat). Default ``HANS()``.
        tau: temperature.
        refresh_every: forward calls between re-stratifications: 1 where every call brings
            new anchors (mini-batches), T_int for one graph contrasted every epoch.
        stratify: ``"sampled"`` or ``"exact"`` strata (edgegcl.contrast.negatives).
        pick: each category's ``"hardest"`` candidates (needs exact strata) or a ``"random"``
            subset of its pool (edgegcl.contrast.negatives.PICKS).
        stratify_sample: least number of candidates an anchor ranks with sampled strata.
        logits: ``"auto"``, ``"dense"`` or ``"pairs"`` (edgegcl.contrast.pairs).
        seed: seed of the strata's random sample.
        candidates: ``"both"`` (the other anchors of both views, 2B - 2) or ``"inter"``
            (the other view's only, B - 1: Eq. 6 as printed); edgegcl.contrast.negatives.

    Example:
        >>> import torch
        >>> contrast = HANSContrast(HANS(theta_max=0.6), tau=0.5)
        >>> h1 = torch.randn(32, 16, requires_grad=True)
        >>> out = contrast(h1, torch.randn(32, 16))
        >>> out.loss.backward()
        >>> events = contrast.step()  # end of the epoch: HANS reads the epoch's losses
        >>> contrast.hans.epoch
        1
    """

    def __init__(self, hans: HANS | None = None, *, tau: float = 0.4, refresh_every: int = 1,
                 stratify: str = "sampled", stratify_sample: int = SAMPLE_MIN,
                 logits: str = "auto", seed: int = 0, candidates: str = "both",
                 pick: str = "random") -> None:
        super().__init__()
        if tau <= 0 or refresh_every < 1:
            raise ValueError(f"need tau > 0 and refresh_every >= 1, got {tau=}, {refresh_every=}")
        if stratify not in STRATIFY or logits not in LOGITS or candidates not in CANDIDATES:
            raise ValueError(f"stratify must be one of {STRATIFY}, logits one of {LOGITS} and "
                             f"candidates one of {CANDIDATES}, got {stratify!r}, {logits!r}, "
                             f"{candidates!r}")
        self.hans = hans if hans is not None else HANS()
        total = sum(self.hans.theta_cat.values())
        ratios = {c: self.hans.theta_cat[c] / total for c in CATEGORIES}
        self.selector = NegativeSelector(ratios, refresh_every, stratify, stratify_sample, seed,
                                         pick, candidates)
        self.tau, self.logits = tau, logits
        self._calls = 0
        self._sums = dict.fromkeys(CATEGORIES, 0.0)
        self._anchors = 0

    def forward(self, h1: Tensor, h2: Tensor) -> LossOutput:
        """The loss of anchors ``h1[i]`` / ``h2[i]`` (row i of both views is one node), with
        ``.loss`` to backpropagate and ``.category`` the per-category parts (NaN once HANS is
        saturated and they are not computed)."""
        if h1.dim() != 2 or h1.shape != h2.shape or h1.size(0) < 2:
            raise ValueError(f"need two [B, D] projections of equal shape with B >= 2, got "
                             f"{tuple(h1.shape)} and {tuple(h2.shape)}")
        self._calls += 1
        out = contrast(h1, h2, self.tau, self.logits, self.selector, self.hans, self._calls)
        b = h1.size(0)
        for c in CATEGORIES:
            self._sums[c] += out.category[c] * b
        self._anchors += b
        return out

    def step(self) -> list[HANSEvent]:
        """End of an epoch: HANS steps on the anchor-weighted mean per-category losses of the
        forward calls since the last ``step()``; returns its events (Algorithm 1)."""
        if self._anchors == 0:
            raise RuntimeError("step() before any forward call: contrast a batch first")
        means = {c: v / self._anchors for c, v in self._sums.items()}
        self._sums, self._anchors = dict.fromkeys(CATEGORIES, 0.0), 0
        return self.hans.step(means)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        """HANS's state and the strata's random stream (no parameters of its own)."""
        return {"hans": self.hans.state_dict(), "calls": self._calls,
                "generator": self.selector.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any], *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """Restore a ``state_dict()``; the next call stratifies afresh."""
        self.hans.load_state_dict(state["hans"])
        self._calls = int(state["calls"])
        self.selector.generator.set_state(state["generator"])
        self.selector.reset()
        self._sums, self._anchors = dict.fromkeys(CATEGORIES, 0.0), 0

