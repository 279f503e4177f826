"""Negative selection: which of each anchor's candidates are active, kept between refreshes.

``NegativeSelector`` decides when the strata are recomputed (a schedule change, or every
``refresh_every`` steps) and how they are found (sampled or exact, edgegcl.contrast.negatives);
the contrast (edgegcl.contrast.module) asks it for each step's active sets.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from edgegcl.contrast.scheduler import NegativeScheduler
from edgegcl.contrast.loss import AnchorSimilarities
from edgegcl.contrast.config import SAMPLE_MIN, check_pick
from edgegcl.contrast.falseneg import HARDNESS, fit_rows, sample_columns, true_negative_hardness
from edgegcl.contrast.negatives import (
    PICKS,
    ActiveNegatives,
    CandidateSample,
    candidate_views,
    negative_counts,
    num_candidates,
    pool_sizes,
    schedule_negatives,
)
from edgegcl.contrast.sampled import draw_sample, sample_size, schedule_sampled

__all__ = ["NegativeSelector"]


class NegativeSelector:
    """Keeps the active negatives between refreshes, and chooses how they are found.

    Stratification is the costliest step of HANS, so it runs when the schedule changes (new
    counts or a swap) and otherwise every ``refresh_every`` steps: T_int epochs in full-graph
    mode, as the paper's complexity analysis assumes (strata recomputed at the T_int
    checkpoints), and every batch in mini-batch mode, where candidates change. ``stratify``
    is ``"sampled"`` (each anchor ranks a random sample of about as many candidates as it
    uses, at least ``sample_min``, drawn with this selector's own generator, seeded with
    ``seed``: edgegcl.contrast.sampled.schedule_sampled) or ``"exact"`` (all |N_i|); sampled
    strata whose sample would be every candidate are exact. Once every candidate is active
    (theta_max = 1 at saturation) the loss no longer depends on the strata and a swap cannot
    change the active set, so the strata stay as they were; they then only label the
    per-category losses that are logged. On the scheduled-pairs path the drawn columns'
    similarities come along only in the step that drew them; a kept active set is handed out
    without them, and the loss recomputes them from that step's projections. ``pick``: each
    category's count is its ``"hardest"`` candidates (hard the most similar, easy the least;
    ranked among every candidate, so ``stratify`` must be ``"exact"``) or a ``"random"``
    subset of a pool cut by the ratios (edgegcl.contrast.negatives.PICKS). ``uniform``: no
    strata at all: each anchor's active set is a uniform random subset of its candidates, as
    many as HANS's counts add up to (the random-subset baseline, ``--scheduler random``).
    ``candidates``: each anchor's candidates are the other anchors of ``"both"`` views
    (2B - 2) or of the other view only, ``"inter"`` (B - 1;
    edgegcl.contrast.negatives.CANDIDATES); the similarities handed to ``get`` must have been
    built for the same (``similarities(..., candidates)``).
    """

    def __init__(self, ratios: dict[str, float], refresh_every: int, stratify: str = "sampled",
                 sample_min: int = SAMPLE_MIN, seed: int = 0, pick: str = "random",
                 candidates: str = "both", uniform: bool = False,
                 hardness: str = "similarity") -> None:
        if pick not in PICKS:
            raise ValueError(f"pick must be one of {', '.join(PICKS)}, got {pick!r}")
        if hardness not in HARDNESS:
            raise ValueError(f"hardness must be one of {', '.join(HARDNESS)}, got {hardness!r}")
        self.hardness = hardness
        if not uniform:
            check_pick(pick, stratify)
        candidate_views(candidates)  # validates it
        self.ratios, self.pick, self.candidates = ratios, pick, candidates
        self.refresh_every, self.uniform = refresh_every, uniform
        self.stratify = "sampled" if uniform else stratify
        self.sample_min = sample_min
        self.generator = torch.Generator().manual_seed(seed)
        self._key: tuple[Any, ...] | None = None
        self._active: tuple[ActiveNegatives, ActiveNegatives] | None = None

    def state_dict(self) -> dict[str, Any]:
        """The kept active sets and the sample stream, as tensors and plain values: what a
        step between refreshes uses, so a restored selector continues exactly."""
        active = self._active
        return {"generator": self.generator.get_state(),
                "key": None if self._key is None else list(self._key),
                "active": None if active is None else [_active_to_dict(a) for a in active]}

    def load_state_dict(self, state: dict[str, Any], device: torch.device | str = "cpu") -> None:
        """Restore a ``state_dict()``; the kept active sets go to ``device``."""
        self.generator.set_state(state["generator"])
        self._key = None if state["key"] is None else tuple(
            tuple(v) if isinstance(v, list) else v for v in state["key"])
        self._active = None if state["active"] is None else tuple(  # type: ignore[assignment]
            _active_from_dict(a, torch.device(device)) for a in state["active"])

    def plan(self, num_anchors: int, hans: NegativeScheduler) -> tuple[dict[str, int], int, bool]:
        """(counts per category, candidates per anchor the strata rank or sample, whether the
        per-category losses are wanted) for a batch of ``num_anchors`` in HANS's state.

        Sampled strata rank ``sample_size`` candidates while HANS is still growing. Once it
        is saturated every category uses its whole share, so the active set is the same
        fraction of every pool: it is drawn as a uniform random sample of that many
        candidates, each pool's share holding in expectation, with nothing ranked, and the
        per-category losses, which HANS no longer reads, are not computed (docs/hans.md).
        """
        c = num_candidates(num_anchors, self.candidates)
        counts = negative_counts(hans.fractions(), c, self.ratios)
        if self.stratify != "sampled":
            return counts, c, True
        if hans.saturated or self.uniform:
            size = sum(counts.values())
            return (pool_sizes(size, self.ratios) if size < c else counts), size, False
        return counts, sample_size(c, self.ratios, counts, self.sample_min), True

    def touched(self, num_anchors: int, hans: NegativeScheduler) -> int:
        """Candidates per anchor a step's strata rank (sampled) or its loss uses (exact): what
        the pairs path's cost follows (edgegcl.contrast.pairs.choose_logits)."""
        counts, size, _ = self.plan(num_anchors, hans)
        return size if self.stratify == "sampled" else sum(counts.values())

    def get(self, sims: AnchorSimilarities, hans: NegativeScheduler, epoch: int, *,
            estimate: bool = True, compact: bool = False
            ) -> tuple[ActiveNegatives, ActiveNegatives]:
        """The two directions' active negatives of this step: kept from an earlier step, or
        scheduled afresh (see the class). ``estimate``: ProGCL's hardness may rank them (from
        its epoch on); ``compact``: an uncategorised uniform draw comes as its samples and
        left-out columns (``ActiveNegatives.left_out``) instead of index columns."""
        if sims.intra != (self.candidates == "both"):
            raise ValueError(f"similarities {'with' if sims.intra else 'without'} intra-view "
                             f"candidates for a selector of candidates={self.candidates!r}")
        counts, size, labels = self.plan(sims.num_anchors, hans)
        c = num_candidates(sims.num_anchors, self.candidates)
        if size == c and not labels and not sims.keeps_values:  # every candidate, no labels
            every = ActiveNegatives(torch.empty(sims.num_anchors, 0, dtype=torch.long,
                                                device=sims.device),
                                    tuple(counts.values()), c, grouped=False)  # type: ignore[arg-type]
            return every, every
        keyed = estimate and self.hardness == "progcl"  # strata by ProGCL's B from now on
        key = (tuple(counts.values()), hans.draw, sims.num_anchors, labels, compact, keyed)
        if (self._active is not None and self._active[0].complete and key[0] == self._key[0]
                and key[-1] == self._key[-1]):
            return self._active  # type: ignore[return-value]
        stale = (epoch - 1) % self.refresh_every == 0
        if self._active is None or key != self._key or stale:
            fresh = tuple(self._schedule(sims, d, counts, size, labels, hans.draw, keyed,
                                         compact) for d in (0, 1))
            # similarities of this step only: a later step recomputes its own
            self._active = tuple(replace(a, values=None) for a in fresh)  # type: ignore[assignment]
            self._key = key
            return fresh  # type: ignore[return-value]
        return self._active  # type: ignore[return-value]

    def _schedule(self, sims: AnchorSimilarities, direction: int, counts: dict[str, int],
                  size: int, labels: bool, draw: int, keyed: bool, compact: bool
                  ) -> ActiveNegatives:
        b, c = sims.num_anchors, num_candidates(sims.num_anchors, self.candidates)
        if self.stratify == "sampled" and size < c:
            sample = draw_sample(b, size, self.generator, sims.device,
                                 candidates=self.candidates)
            values = sims.candidate_values(direction)
            key = None
            if keyed:
                start, stop = next(iter(sample.chunks(b)))
                key = true_negative_hardness(values(start, stop, sample), sims.tau)
            return schedule_sampled(values, b, sims.device, self.ratios,
                                    counts, draw, sample, keep_values=sims.keeps_values,
                                    grouped=labels and direction == 0,  # the loss reads d 0's
                                    key=key, compact=compact)
        rows = sims.candidate_rows(direction)
        key = None
        if keyed:  # fitted on a few anchors' rows, a sample of columns
            block = rows(0, fit_rows(b))
            cols = sample_columns(block.size(1), 256, self.generator).to(block.device)
            key = true_negative_hardness(block[:, cols], sims.tau)
        return schedule_negatives(rows, b, sims.device, self.ratios,
                                  counts, draw, keep_values=sims.keeps_values, pick=self.pick,
                                  candidates=self.candidates, key=key)


def _active_to_dict(active: ActiveNegatives) -> dict[str, Any]:
    out = {f.name: getattr(active, f.name) for f in dataclasses.fields(active)}
    if active.sample is not None:
        out["sample"] = {f.name: getattr(active.sample, f.name)
                         for f in dataclasses.fields(active.sample)}
    out["sizes"] = list(active.sizes)
    return out


def _active_from_dict(raw: dict[str, Any], device: torch.device) -> ActiveNegatives:
    raw = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in raw.items()}
    if raw.get("sample") is not None:
        sample = dict(raw["sample"])
        raw["sample"] = CandidateSample(**{**sample, "cols": sample["cols"].to(device)})
    raw["sizes"] = tuple(raw["sizes"])
    raw["values"] = None  # never saved (a later step recomputes its own)
    active = ActiveNegatives(**raw)
    _check_active(active)
    return active


def _check_active(a: ActiveNegatives) -> None:
    """ValueError unless a restored active set indexes only within its own layout: every
    candidate column below the candidates' width, every sample position below the sample's,
    one sample row per block and one left-out row per anchor (a saved state is a file others
    may have written; an index out of range would fail deep inside a step)."""
    b = a.cols.size(0) if a.cols.dim() == 2 else -1
    if b < 2 or a.num_cand % (b - 1) or a.num_cand // (b - 1) not in (1, 2):
        raise ValueError("kept active negatives of an unknown layout")
    width = a.num_cand // (b - 1) * b

    def inside(t: Tensor | None, limit: int, rows: int) -> bool:
        return t is None or (t.dim() == 2 and t.size(0) == rows and not t.is_floating_point()
                             and not t.is_complex() and t.dtype != torch.bool
                             and (t.numel() == 0 or (int(t.min()) >= 0 and int(t.max()) < limit)))

    sample = a.sample
    sample_width = 0 if sample is None else sample.cols.size(-1)
    ok = inside(a.cols, width, b) and inside(a.left_out, width, b) and (
        sample is None or (sample.block >= 1 and inside(sample.cols, width,
                                                         -(-b // sample.block))))
    ok = ok and inside(a.positions, sample_width, b) and inside(a.left_out_at, sample_width, b)
    ok = ok and (sample is None or sample_width - sample.size == width // b)
    if not ok or ((a.left_out is not None or a.positions is not None) and sample is None):
        raise ValueError("kept active negatives index outside their candidates")
