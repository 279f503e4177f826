"""What a finished seed produced (``SeedResult``), as a seed's ``result.pt`` holds it, and the
metrics over seeds that ``metrics.json`` reports (``seed_metrics``, ``summarise``).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from torch import Tensor

from edgegcl.evaluation.authors import AUTHORS_LABEL, AuthorsScore, authors_figure
from edgegcl.evaluation.probe import ProbeScores, Selection

__all__ = ["SeedResult", "result_from_dict", "result_to_dict", "seed_metrics", "summarise"]


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

    @property
    def final_epoch_s(self) -> float:
        """Median epoch time over the last T_int epochs, which run in the schedule's final
        state: the state the profiler predicts (edgegcl.budget.profiler.reachable_eta)."""
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
            "authors": [[e, asdict(a)] for e, a in r.authors]}


def result_from_dict(raw: dict[str, Any]) -> SeedResult:
    sel = raw["selection"]
    return SeedResult(
        raw["seed"], raw["mode"],
        None if sel is None else Selection(sel["epoch"], ProbeScores(**sel["scores"])),
        [(e, ProbeScores(**sc)) for e, sc in raw["history"]], list(raw["epoch_times"]),
        dict(raw["final_eta"]), raw["saturated_at"], raw["encoder_state"], raw["selected_epoch"],
        raw["peak_memory_bytes"], raw["T_int"],
        [(e, AuthorsScore(**a)) for e, a in raw["authors"]])


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
        out.update({
            "selected_epoch": s.epoch,
            "val_micro_f1": s.scores.val_micro, "val_macro_f1": s.scores.val_macro,
            "test_micro_f1": s.scores.test_micro, "test_macro_f1": s.scores.test_macro,
            "probe_weight_decay": s.scores.weight_decay,
            "checkpoint_probe": {
                "train_nodes": probe.num_train, "val_nodes": probe.num_val,
                "test_nodes": probe.num_test,
                "sampled": (probe.num_train, probe.num_val) != (s.scores.num_train,
                                                                s.scores.num_val)},
            "history": [{"epoch": ep, **_f1_fields(sc)} for ep, sc in r.history],
        })
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


def _f1_fields(scores: ProbeScores) -> dict[str, float]:
    """A probe's F1 scores and weight decay (its node counts are in ``checkpoint_probe``)."""
    return {k: v for k, v in asdict(scores).items() if not k.startswith("num_")}


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
        summary.update({
            "val_micro_f1": _mean_std([s.scores.val_micro for s in chosen]),
            "val_macro_f1": _mean_std([s.scores.val_macro for s in chosen]),
            "test_micro_f1": _mean_std([s.scores.test_micro for s in chosen]),
            "test_macro_f1": _mean_std([s.scores.test_macro for s in chosen]),
        })
    authors = [authors_figure(r.authors)[1] for r in results if r.authors]
    if authors:
        summary.update({
            "authors_protocol_test_micro_f1": _mean_std([a.test_micro for a in authors]),
            "authors_protocol_test_macro_f1": _mean_std([a.test_macro for a in authors]),
        })
    return summary

