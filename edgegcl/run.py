"""A training run: independent seeds, the run directory, and the metrics over seeds."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch_geometric.data import Data

from edgegcl import __version__
from edgegcl.authors_protocol import AUTHORS_LABEL, authors_figure
from edgegcl.checkpoint import save_checkpoint
from edgegcl.config import TrainConfig, to_toml
from edgegcl.errors import UsageError
from edgegcl.evaluate import ProbeScores
from edgegcl.train import SeedResult, train_seed

if TYPE_CHECKING:
    from edgegcl.profiler import Calibration
    from edgegcl.profiles import DeviceProfile


def _mean_std(values: list[float]) -> dict[str, float]:
    """Mean and population standard deviation (numpy's default, as the papers' tables)."""
    return {"mean": statistics.fmean(values), "std": statistics.pstdev(values)}


def _seed_metrics(r: SeedResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seed": r.seed,
        "epoch_time_s": {"mean": statistics.fmean(r.epoch_times),
                         "median": statistics.median(r.epoch_times)},
        "train_time_s": sum(r.epoch_times),
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


def prepare_run_dir(out: str, dataset: str) -> Path:
    """A new, empty run directory; an existing non-empty one is never overwritten."""
    path = Path(out) if out else Path("runs") / f"{Path(dataset).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"run directory {path} already exists and is not empty; "
                         "pass a new --out (nothing was written)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create run directory {path} ({exc.strerror}); "
                         "pass a writable --out") from None
    return path


def auto_budget_report(cal: Calibration, profile: DeviceProfile,
                       results: list[SeedResult]) -> dict[str, Any]:
    """The profiler's prediction for the chosen theta_max beside what training measured.

    Measured epoch time: the median over each seed's last T_int epochs (the schedule's final
    state, which the profiler measures), averaged over seeds; memory: the largest per-epoch
    training peak of any seed.
    """
    predicted = cal.predicted()
    assert predicted is not None and predicted.epoch_s is not None
    budgets = cal.result.budgets
    epoch_s = statistics.fmean(r.final_epoch_s for r in results)
    peak = max(r.peak_memory_bytes for r in results)
    return {
        "profile": profile.name, "theta_max": cal.chosen, "mode": cal.mode,
        "batch_size": cal.batch_size, "logits": cal.logits,
        "budgets": {"epoch_s": budgets.epoch_s, "memory_bytes": budgets.memory_bytes},
        "predicted": {"epoch_s": predicted.epoch_s, "peak_memory_bytes": predicted.peak_bytes},
        "measured": {"epoch_s": epoch_s, "peak_memory_bytes": peak},
        "measured_over_predicted": {"epoch_s": epoch_s / predicted.epoch_s,
                                    "peak_memory_bytes": peak / max(1, predicted.peak_bytes or 1)},
        "within_budgets": epoch_s <= budgets.epoch_s and peak <= budgets.memory_bytes,
    }


def auto_budget_line(report: dict[str, Any]) -> str:
    """One line: measured vs predicted vs budget, for the end of an auto-budget run."""
    m, p, b = report["measured"], report["predicted"], report["budgets"]
    mib = 2**20
    return (f"auto-budget theta_max = {report['theta_max']:.2f} ({report['logits']} logits): epoch {m['epoch_s']:.3f} s "
            f"(predicted {p['epoch_s']:.3f}, budget {b['epoch_s']:g}); peak memory "
            f"{m['peak_memory_bytes'] / mib:.0f} MiB (predicted "
            f"{p['peak_memory_bytes'] / mib:.0f}, budget {b['memory_bytes'] / mib:.0f}); "
            f"{'within' if report['within_budgets'] else 'OUTSIDE'} the budgets")


def run(cfg: TrainConfig, data: Data, run_dir: Path, device: torch.device,
        auto_budget: tuple[Calibration, DeviceProfile] | None = None) -> dict[str, Any]:
    """Train ``cfg.seeds`` independent seeds, write the run directory, return the metrics.

    ``auto_budget``: the profiler's calibration that chose ``cfg.theta_max`` and its profile;
    the metrics then compare its prediction with what training measured.
    """
    (run_dir / "config.toml").write_text(to_toml(cfg))
    results = []
    for seed in range(cfg.seeds):
        seed_dir = run_dir / f"seed-{seed}"
        seed_dir.mkdir()
        result = train_seed(data, cfg, seed, device, seed_dir, f"seed {seed + 1}/{cfg.seeds}")
        save_checkpoint(seed_dir / "checkpoint.pt", result.encoder_state, cfg, data.x.size(1),
                        seed, result.selected_epoch)
        results.append(result)
    best = max(results, key=lambda r: r.selection.scores.val_micro if r.selection else 0.0)
    save_checkpoint(run_dir / "checkpoint.pt", best.encoder_state, cfg, data.x.size(1),
                    best.seed, best.selected_epoch)
    metrics = {
        "edgegcl_version": __version__,
        "dataset": getattr(data, "name", cfg.dataset),
        "num_nodes": data.num_nodes,
        "num_edges": int(data.edge_index.size(1)),
        "mode": results[0].mode,
        "device": str(device),
        "labelled": any(r.selection is not None for r in results),
        "checkpoint_seed": best.seed,
        "seeds": [_seed_metrics(r) for r in results],
        "summary": summarise(results),
    }
    if auto_budget is not None:
        metrics["auto_budget"] = auto_budget_report(*auto_budget, results)
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics
