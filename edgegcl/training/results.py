"""What a finished seed produced (``SeedResult``), as a seed's ``result.pt`` holds it, and the
metrics over seeds that ``metrics.json`` reports (``seed_metrics``, ``summarise``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor

from edgegcl.errors import UsageError
from edgegcl.evaluation.authors import AUTHORS_LABEL, AuthorsScore, authors_figure
from edgegcl.evaluation.metrics import LINK_METRICS, NODE_METRICS, metric_name
from edgegcl.evaluation.links import LinkScores
from edgegcl.evaluation.probe import ProbeScores, Selection
from edgegcl.training.prober import Baselines
from edgegcl_embed.errors import shown

__all__ = ["AGREEMENT_THRESHOLD", "HOMOPHILY_THRESHOLD", "EncoderChoice", "SeedResult",
           "result_from_dict", "result_to_dict", "seed_metrics", "summarise"]


HOMOPHILY_THRESHOLD = 0.5
"""A labelled ``auto`` run trains the GCN without a search when the adjusted homophily of its
seed's training and validation nodes, less two standard errors, is at least this
(edgegcl.data.homophily.adjusted_homophily; docs/encoders.md: every measured graph with
labels lies at 0.56 or above, where the search always kept the GCN, or at 0.10 or below)."""

AGREEMENT_THRESHOLD = 0.05
"""An unlabelled ``auto`` run trains the GCN when its linked nodes' features agree by at least
this much (edgegcl.data.homophily.feature_agreement), else the ego encoder
(edgegcl.training.choice; docs/encoders.md: the graphs measured)."""


@dataclass(frozen=True)
class EncoderChoice:
    """How a seed's encoder was chosen: ``by`` ``search`` (``scores``: each candidate's best
    validation ``metric`` within ``epochs`` epochs, ``margin`` the points by which another had to
    beat the first candidate, ``seconds`` the search's wall time), ``homophily``
    (``homophily`` the adjusted homophily of the seed's training and validation nodes, ``margin``
    its standard error: clearly above ``HOMOPHILY_THRESHOLD``, so the GCN without a search),
    ``signal`` (``agreement``: the label-free feature agreement of linked nodes) or, for the
    link task, ``agreement`` (the same agreement on the training edges: the GCN without a
    search)."""

    encoder: str
    by: str
    scores: dict[str, float] = field(default_factory=dict)
    epochs: int = 0
    seconds: float = 0.0
    agreement: float | None = None
    margin: float | None = None
    metric: str = "micro_f1"
    homophily: float | None = None

    def line(self) -> str:
        """What was chosen and why, in one line."""
        if self.by == "search":
            ranked = ", ".join(f"{name} {score:.2f}" for name, score in
                               sorted(self.scores.items(), key=lambda kv: -kv[1]))
            rule = ("" if self.margin is None else
                    f"; another than {next(iter(self.scores))} only if more than "
                    f"{self.margin:.1f} points (one standard error) above it")
            return (f"encoder {self.encoder}: validation {metric_name(self.metric)} after "
                    f"{self.epochs} epoch{'' if self.epochs == 1 else 's'} "
                    f"each ({ranked}{rule}); the search took {self.seconds:.0f} s")
        if self.by == "homophily":
            assert self.homophily is not None and self.margin is not None
            return (f"encoder {self.encoder} without a search: the seed's labelled nodes keep "
                    f"to their class across edges (adjusted homophily {self.homophily:.2f} ± "
                    f"{self.margin:.2f}, clearly above {HOMOPHILY_THRESHOLD}, where the GCN "
                    "always won: docs/encoders.md)")
        assert self.agreement is not None
        if self.by == "agreement":
            return (f"encoder {self.encoder} without a search: the training edges' endpoints "
                    f"have features that agree (agreement {self.agreement:.3f}, at least "
                    f"{AGREEMENT_THRESHOLD}, where the link search always kept the GCN: "
                    "docs/encoders.md)")
        verdict = ("agree" if self.agreement >= AGREEMENT_THRESHOLD else
                   "do not clearly agree")
        return (f"encoder {self.encoder}: the graph has no labels to choose on, and its linked "
                f"nodes' features {verdict} (agreement {self.agreement:.3f}, threshold "
                f"{AGREEMENT_THRESHOLD})")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: object, path: Path) -> EncoderChoice:
        """A recorded choice read back from a seed file, checked value by value (it came from
        a file: it is only reported, never run), or one UsageError line."""
        fix = "remove it to train that seed afresh"

        def number(value: object, kind: type) -> bool:
            return isinstance(value, kind) and not isinstance(value, bool)

        ok = isinstance(raw, dict) and set(raw) <= set(cls.__dataclass_fields__) and (
            raw.get("metric", "micro_f1") in NODE_METRICS + LINK_METRICS) and (
            {"encoder", "by", "scores", "epochs", "seconds"} <= set(raw))
        if ok:
            scores = raw["scores"]
            ok = (isinstance(scores, dict) and all(isinstance(k, str) and number(v, float)
                                                   for k, v in scores.items())
                  and isinstance(raw["encoder"], str)
                  and raw["by"] in ("search", "signal", "homophily", "agreement")
                  and number(raw["epochs"], int) and number(raw["seconds"], float)
                  and all(raw.get(k) is None or number(raw[k], float)
                          for k in ("agreement", "margin", "homophily")))
        if not ok:
            raise UsageError(f"{path} holds a malformed encoder choice ({shown(repr(raw), 80)});"
                             f" {fix}")
        return cls(**raw)  # type: ignore[arg-type]


@dataclass
class SeedResult:
    """What one seed produced: the checkpoint choice, the probe history, timings and HANS."""

    seed: int
    mode: str
    selection: Selection | None
    history: list[tuple[int, ProbeScores]]
    epoch_times: list[float]
    final_eta: dict[str, float]
    saturated_at: int | None
    encoder_state: dict[str, Tensor] = field(repr=False)
    selected_epoch: int = 0
    peak_memory_bytes: int = 0
    T_int: int = 1
    authors: list[tuple[int, AuthorsScore]] = field(default_factory=list)
    """The authors'-protocol evaluation of every checkpoint (``protocol = "both"``)."""
    baselines: Baselines | None = None
    """The raw features' probe on the same splits, and the published split's figures."""
    encoder: str | None = None
    """The encoder the seed trained (None: saved before encoders had names; see
    edgegcl.training.resume.saved_encoder)."""
    choice: dict[str, Any] | None = None
    """How an ``auto`` run chose it (edgegcl.training.choice.EncoderChoice, as a dict)."""
    decoder_state: dict[str, Tensor] | None = field(default=None, repr=False)
    """The link decoder of the chosen checkpoint (an edge-objective link run's), else None."""
    cut: str = ""
    """Why the seed trained fewer than ``--epochs`` epochs: ``max_steps``, ``time_budget``, or
    "" (edgegcl.training.timebudget)."""

    @property
    def final_epoch_s(self) -> float:
        """Median epoch time over the last T_int epochs, which run in the schedule's final
        state: the state the profiler predicts (edgegcl.contrast.reach.reachable_eta)."""
        return statistics.median(self.epoch_times[-self.T_int:])


def result_to_dict(r: SeedResult) -> dict[str, Any]:
    """A finished seed as plain values (``seed-K/result.pt``), for a resumed run's metrics."""
    return {"seed": r.seed, "mode": r.mode,
            "selection": None if r.selection is None else {
                "epoch": r.selection.epoch, "scores": asdict(r.selection.scores)},
            "history": [[e, asdict(sc)] for e, sc in r.history], "epoch_times": r.epoch_times,
            "final_eta": r.final_eta, "saturated_at": r.saturated_at,
            "encoder_state": r.encoder_state, "selected_epoch": r.selected_epoch,
            "peak_memory_bytes": r.peak_memory_bytes, "T_int": r.T_int,
            "authors": [[e, asdict(a)] for e, a in r.authors],
            "baselines": None if r.baselines is None else _baselines_to_dict(r.baselines),
            "encoder": r.encoder, "choice": r.choice, "decoder_state": r.decoder_state,
            "cut": r.cut}


def _scores_from_dict(raw: dict[str, Any]) -> ProbeScores | LinkScores:
    """A probe's scores read back from ``result.pt``: a link task's carry its scorer."""
    return LinkScores(**raw) if "scorer" in raw else ProbeScores(**raw)


def _baselines_to_dict(b: Baselines) -> dict[str, Any]:
    return {"raw": asdict(b.raw), "heuristic": b.heuristic,
            "published_number": b.published_number,
            "published_count": b.published_count,
            "published": None if b.published is None else {
                "epoch": b.published.epoch, "scores": asdict(b.published.scores)},
            "published_raw": None if b.published_raw is None else asdict(b.published_raw)}


def _baselines_from_dict(raw: dict[str, Any] | None) -> Baselines | None:
    if raw is None:
        return None
    pub = raw["published"]
    return Baselines(_scores_from_dict(raw["raw"]), raw["published_number"],
                     raw["published_count"],
                     None if pub is None else Selection(pub["epoch"], ProbeScores(**pub["scores"])),
                     None if raw["published_raw"] is None else ProbeScores(**raw["published_raw"]),
                     raw.get("heuristic"))


def result_from_dict(raw: dict[str, Any]) -> SeedResult:
    sel = raw["selection"]
    return SeedResult(
        raw["seed"], raw["mode"],
        None if sel is None else Selection(sel["epoch"], _scores_from_dict(sel["scores"])),
        [(e, _scores_from_dict(sc)) for e, sc in raw["history"]], list(raw["epoch_times"]),
        dict(raw["final_eta"]), raw["saturated_at"], raw["encoder_state"], raw["selected_epoch"],
        raw["peak_memory_bytes"], raw["T_int"],
        [(e, AuthorsScore(**a)) for e, a in raw["authors"]],
        _baselines_from_dict(raw.get("baselines")),  # None in seeds finished before them
        raw.get("encoder"), raw.get("choice"), raw.get("decoder_state"), str(raw["cut"]))


def _mean_std(values: list[float]) -> dict[str, float]:
    """Mean and population standard deviation (numpy's default, as the papers' tables)."""
    return {"mean": statistics.fmean(values), "std": statistics.pstdev(values)}


def seed_metrics(r: SeedResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seed": r.seed,
        "epoch_time_s": {"mean": statistics.fmean(r.epoch_times),
                         "median": statistics.median(r.epoch_times)},
        "train_time_s": sum(r.epoch_times),
        "epochs_trained": len(r.epoch_times),
        "final_eta": r.final_eta,
        "saturated_at_epoch": r.saturated_at,
        "final_epoch_time_s": r.final_epoch_s,
        "peak_memory_bytes": r.peak_memory_bytes,
    }
    if r.selection is not None:
        s = r.selection
        probe = r.history[-1][1]  # every checkpoint probe of a seed uses the same nodes
        out.update({"selected_epoch": s.epoch, "metric": s.scores.metric,
                    **s.scores.figures(), **s.scores.extras()})
        if isinstance(probe, ProbeScores) and isinstance(s.scores, ProbeScores):
            out["checkpoint_probe"] = {
                "train_nodes": probe.num_train, "val_nodes": probe.num_val,
                "test_nodes": probe.num_test,
                "sampled": (probe.num_train, probe.num_val) != (s.scores.num_train,
                                                                s.scores.num_val)}
        out["history"] = [{"epoch": ep, **_history_fields(sc)} for ep, sc in r.history]
    if r.encoder is not None:
        out["encoder"] = r.encoder
    if r.choice is not None:
        out["encoder_choice"] = r.choice
    if r.cut:
        out["cut"] = r.cut  # fewer epochs than --epochs: --max-steps or --time-budget
    if r.baselines is not None:
        out.update(_baseline_metrics(r.baselines))
    if r.authors:
        epoch, best = authors_figure(r.authors)
        out["authors_protocol"] = {
            "label": AUTHORS_LABEL, "epoch": epoch,
            "test_micro_f1": best.test_micro, "test_macro_f1": best.test_macro,
            "history": [{"epoch": ep, "test_micro_f1": a.test_micro,
                         "test_macro_f1": a.test_macro, "val_micro_f1": a.val_micro,
                         "classifier_epoch": a.classifier_epoch} for ep, a in r.authors],
        }
    return out


def _baseline_metrics(b: Baselines) -> dict[str, Any]:
    """A seed's ``raw_features`` (the features scored on its split), ``published_split`` (the
    embeddings and the features on the graph's own split) and, for links, the structural
    heuristic's figures (``adamic_adar``)."""
    out: dict[str, Any] = {"raw_features": b.raw.figures()}
    if b.published is not None and b.published_raw is not None:
        out["published_split"] = {
            "split": b.published_number, "splits": b.published_count,
            "selected_epoch": b.published.epoch, **b.published.scores.figures(),
            "raw_features": b.published_raw.figures()}
    if b.heuristic is not None:
        out["adamic_adar"] = b.heuristic
    return out


def _history_fields(scores: ProbeScores | LinkScores) -> dict[str, Any]:
    """A checkpoint's scores as its history entry (a node probe's node counts are in
    ``checkpoint_probe``, its metric in the seed's ``metric``; JSON has no NaN: an absent
    figure is an absent key)."""
    if isinstance(scores, LinkScores):
        return {**scores.figures(), "scorer": scores.scorer}
    return {k: v for k, v in asdict(scores).items() if not k.startswith("num_")
            and k != "metric" and not (isinstance(v, float) and math.isnan(v))}


def _over_seeds(figures: list[dict[str, float]], prefix: str = "",
                skip: tuple[str, ...] = ()) -> dict[str, dict[str, float]]:
    """Mean/std over seeds of every figure all seeds have, keys prefixed."""
    if not figures:
        return {}
    return {prefix + k: _mean_std([f[k] for f in figures]) for k in figures[0]
            if k not in skip and all(k in f for f in figures)}


def summarise(results: list[SeedResult]) -> dict[str, Any]:
    """Mean/std over seeds of every reported figure (the honest protocol, and the authors'
    where it ran)."""
    summary: dict[str, Any] = {
        "epoch_time_s": _mean_std([statistics.fmean(r.epoch_times) for r in results]),
        "train_time_s": _mean_std([sum(r.epoch_times) for r in results]),
        "peak_memory_bytes": {**_mean_std([float(r.peak_memory_bytes) for r in results]),
                              "max": max(r.peak_memory_bytes for r in results)},
    }
    chosen = [r.selection for r in results if r.selection is not None]
    if chosen:
        summary["metric"] = chosen[0].scores.metric
        summary.update(_over_seeds([s.scores.figures() for s in chosen]))
    base = [r.baselines for r in results if r.baselines is not None]
    summary.update(_over_seeds([b.raw.figures() for b in base], "raw_features_",
                               skip=("majority_rate",)))
    heuristic = [b.heuristic for b in base if b.heuristic is not None]
    summary.update(_over_seeds([h["test"] for h in heuristic], "adamic_adar_test_"))
    published = [b for b in base if b.published is not None and b.published_raw is not None]
    if published:
        summary.update(_over_seeds(
            [b.published.scores.figures() for b in published  # type: ignore[union-attr]
             ], "published_split_", skip=("val_micro_f1", "val_macro_f1", "val_roc_auc")))
        summary.update(_over_seeds(
            [b.published_raw.figures() for b in published  # type: ignore[union-attr]
             ], "published_split_raw_features_", skip=("val_micro_f1", "val_macro_f1",
                                                        "val_roc_auc", "majority_rate")))
        summary["published_splits"] = sorted({int(b.published_number) for b in published})
    authors = [authors_figure(r.authors)[1] for r in results if r.authors]
    if authors:
        summary.update({
            "authors_protocol_test_micro_f1": _mean_std([a.test_micro for a in authors]),
            "authors_protocol_test_macro_f1": _mean_std([a.test_macro for a in authors]),
        })
    return summary

