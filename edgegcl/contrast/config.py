"""The ``[contrast]`` section: the InfoNCE loss and how its negatives are found, with the
names its options take. The standard library alone, so that the command line builds its flags
before torch loads; ``edgegcl.contrast.module`` (the loss), ``negatives`` (the strata) and
``pairs`` (the logits' paths) use them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from edgegcl.config import Section, choices, option
from edgegcl.contrast.scheduler import scheduler_class
from edgegcl.errors import UsageError

Candidates = Literal["both", "inter"]
CANDIDATES: tuple[str, ...] = choices(Candidates)
"""``--candidates``: each anchor's candidate negatives are the other anchors in both views
(2B - 2, GRACE's and the default) or in the other view only (B - 1, Eq. 6 as printed);
docs/hans.md has the measurement."""

Pick = Literal["hardest", "random"]
PICKS: tuple[str, ...] = choices(Pick)
"""``pick``: which candidates a category's count takes. ``hardest`` ("pool = count"): hard
the anchor's most similar candidates, intermediate the next most similar, easy the least
similar, found among every candidate and deterministic (the authors' NegAmplify takes top-k
and bottom-k so). ``random``: pools cut by the ratios, members drawn uniformly at random
inside each (Algorithm 1's RandomSample). docs/hans.md has the measurements."""

SAMPLE_MIN = 256
"""Default least number of candidates an anchor ranks in sampled strata (``stratify_sample``):
the purity of the pools (share of drawn members truly in the anchor's pool) rises with the
sample; docs/hans.md has the measured purity per sample size."""

Logits = Literal["auto", "dense", "pairs"]
LOGITS: tuple[str, ...] = choices(Logits)
"""``--logits``: the cheaper of the two for the current schedule (``choose_logits``), the
dense similarity blocks, or the scheduled pairs only (this module)."""

NegativeWeight = Literal["none", "progcl", "progcl-mix"]
"""``negative_weight``: the InfoNCE denominator's negatives as they are, weighted as
ProGCL-weight weighs them, or joined by ProGCL-mix's synthesised negatives."""
NEGATIVE_WEIGHTS = ("none", "progcl", "progcl-mix")
Hardness = Literal["similarity", "progcl"]
"""``hardness``: edgegcl.contrast.falseneg.HARDNESS."""
Stratify = Literal["auto", "sampled", "exact"]
"""``stratify``: ``auto`` is exact with ``pick = hardest`` (the top of a ranking needs every
candidate) and sampled with ``pick = random``."""


def check_pick(pick: str, stratify: str) -> None:
    """``pick = "hardest"`` ranks every candidate: the top of a sample is not the top of the
    ranking, so it takes exact strata (docs/hans.md); a UsageError line otherwise."""
    if pick == "hardest" and stratify != "exact":
        raise UsageError("--pick hardest needs every candidate ranked (the top of a sample is "
                         "not the top of the ranking: docs/hans.md, 'Hard means hardest'); use "
                         "--stratify exact (or auto), or --pick random with sampled strata")


@dataclass(frozen=True)
class ContrastConfig(Section):
    """The InfoNCE loss and how its negatives are found (the ``[contrast]`` section).

    Example:
        >>> ContrastConfig(pick="hardest").resolved_stratify("hans")
        'exact'
    """

    TITLE = "the InfoNCE loss and how its negatives are found"
    tau: float = option(0.4, "InfoNCE temperature", at_least=0.05,
                        why="exp(-2/tau) underflows below")
    candidates: Candidates = option("both", "each anchor's candidate negatives: both (the "
                                    "other anchors of both views, 2B - 2, as GRACE) or inter "
                                    "(the other view's only, B - 1, as Eq. 6 prints); the loss "
                                    "is symmetric either way")
    pick: Pick = option("random", "which candidates each category's count takes: random (a "
                        "uniform subset of a pool cut by --ratios, Algorithm 1's RandomSample; "
                        "measured level with the random subset, while the hardest lose 4.5 "
                        "points on Cora: docs/hans.md) or hardest (hard the most similar, inter "
                        "the next, easy the least similar, among every candidate)")
    stratify: Stratify = option("auto", "how the ranking is found: exact (every candidate), "
                                "sampled (each anchor ranks a random sample of its candidates, "
                                "about as many as it uses; --pick random only), or auto (exact "
                                "with --pick hardest, sampled with --pick random)")
    stratify_sample: int = option(SAMPLE_MIN, "sampled strata: least number of candidates each "
                                  "anchor ranks", at_least=16, at_most=1 << 20)
    logits: Logits = option("auto", "auto (the cheaper of the two for HANS's current state), "
                            "dense (B x B similarity blocks with their gradients) or pairs (a "
                            "gradient for the scheduled pairs only)")
    hardness: Hardness = option("similarity", "what the strata rank: similarity (the paper's "
                                "S_i) or progcl (ProGCL's p(true negative) x similarity, the "
                                "probability from a Beta mixture fitted to each refresh's "
                                "similarities: the hard stratum keeps fewer likely same-class "
                                "candidates)", omit_default=True)

    negative_weight: NegativeWeight = option(
        "none", "none, or progcl: each negative's exp-similarity in the InfoNCE denominator "
        "weighted by p(true negative) x similarity over the anchor's mean (ProGCL-weight; the "
        "Beta mixture fitted to each step's similarities); with --scheduler none this is "
        "ProGCL-weight itself; or progcl-mix: the denominator gains --mix-negatives "
        "synthesised negatives per anchor, each mixing two of its negatives of highest "
        "p(true negative) x similarity by those weights (ProGCL-mix)", omit_default=True)
    mix_negatives: int = option(1000, "--negative-weight progcl-mix: negatives of highest "
                                "p(true negative) x similarity each anchor mixes in pairs, "
                                "at most its candidates (ProGCL's sel_num)", at_least=1,
                                at_most=1 << 20, omit_default=True)
    false_negatives_from: int = option(
        0, "epoch from which the false-negative estimate acts (--hardness progcl, "
        "--negative-weight); before it the strata rank by similarity and the loss is plain "
        "InfoNCE, as ProGCL's epoch_start waits for similarities worth fitting", at_least=0,
        at_most=10**6, omit_default=True)

    STRATA_SETTINGS: ClassVar[tuple[str, ...]] = ("pick", "stratify", "stratify_sample",
                                                  "hardness")
    """How HANS's hardness strata are found, which the baselines do not read."""

    def resolved_stratify(self, scheduler: str) -> str:
        """``stratify`` with ``auto`` resolved: exact for ``pick = hardest``, sampled
        otherwise; sampled (nothing ranked) for a scheduler that ranks no candidates (the
        baselines), whatever it says."""
        if not scheduler_class(scheduler).ranks_candidates:
            return "sampled"
        if self.stratify == "auto":
            return "exact" if self.pick == "hardest" else "sampled"
        return self.stratify

    def check_with(self, scheduler: str, epochs: int | None = None) -> None:
        """The rules between this section, the scheduler and the run's length: HANS's hardest
        picks rank every candidate (``check_pick``); a false-negative estimate starts before
        the last epoch."""
        if scheduler_class(scheduler).ranks_candidates:
            check_pick(self.pick, self.resolved_stratify(scheduler))
        if (epochs is not None and "false_negatives_from" not in self.unused(scheduler)
                and self.false_negatives_from >= epochs):
            raise UsageError(f"--false-negatives-from {self.false_negatives_from} is not before "
                             f"the run's end (--epochs {epochs}): the estimate would never act; "
                             f"give an epoch below {epochs}")

    def unused(self, scheduler: str) -> tuple[str, ...]:
        """The fields ``scheduler`` does not read: the strata's, unless it ranks candidates;
        the mix's count without ProGCL-mix, the estimate's start without an estimate."""
        ranks = scheduler_class(scheduler).ranks_candidates
        out = () if ranks else self.STRATA_SETTINGS
        if self.negative_weight != "progcl-mix":
            out += ("mix_negatives",)
        if self.negative_weight == "none" and (self.hardness == "similarity" or not ranks):
            out += ("false_negatives_from",)
        return out
