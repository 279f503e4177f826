"""The resource profiler: per theta_max, what an epoch costs on this device; the largest that fits.

For each theta_max the search (edgegcl.budget.search) asks for, a fresh model trains a few
steps on the real graph and device through the same ``Trainer.train_step`` as training, with
HANS held at the costliest state the run can reach (``reachable_eta``): saturation when the
schedule gets there within the configured epochs, otherwise the state the fastest schedule
HANS allows ends in. (With the paper's defaults, T_int = 20 and steps of at most c_cat, 300
epochs never saturate theta_max = 1, so profiling at saturation would predict a cost the run
never pays.)

- latency, after warm-up: in full-graph mode the median step (one step is an epoch), plus the
  stratification, which runs every T_int epochs, amortised over T_int; in mini-batch mode the
  mean step times ceil(N / B), since an epoch is the sum of its steps and step times are skewed
  by slow batches (the median under-predicts an epoch: docs/performance.md);
- memory: peak above the level before the model is built (edgegcl.memory: CUDA allocator peak,
  or CPU RSS sampled with psutil).

Each theta_max is measured with both ways of computing the loss's logits (edgegcl.contrast.pairs: the
dense similarity blocks, or the scheduled pairs only) and keeps the cheaper under the budgets
(``best_of``): below a crossover that depends on the device and the batch, the scheduled pairs
cost less, and the run trains the way its chosen theta_max was measured.

An out-of-memory error marks that theta_max infeasible; the cache is flushed and the search
goes on. The memory budget of a fixed-size profile covers what the process already holds
(graph, libraries), so that is subtracted before comparing; an ``"auto"`` budget is what is
free, which already excludes it. When no theta_max fits a mini-batch run, the batch size is
halved (down to the profile's minimum) and the search repeated, and the output says so.

When nothing meets the epoch-time budget, the run still trains: with the fastest setting
measured within the memory budget (``closest_fit_line`` says so); only when nothing fits in
memory is there nothing to train with. Measurements are kept per device, graph and settings
(edgegcl.budget.cache), so a second run with the same ones measures nothing again.
"""

from __future__ import annotations

import gc
import itertools
import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import psutil
import torch
from torch import Tensor
from torch_geometric.data import Data

from edgegcl.contrast.module import ScheduledContrast
from edgegcl.contrast.negatives import num_candidates
from edgegcl.contrast.pairs import choose_logits
from edgegcl.contrast.reach import reachable_eta
from edgegcl.nn.augment import as_features
from edgegcl.nn.config import AUTO
from edgegcl.budget.cache import ProfileCache
from edgegcl.budget.search import (
    OUT_OF_MEMORY,
    Budgets,
    Cost,
    SearchResult,
    best_of,
    closest_fit,
    closest_fit_reason,
    search_theta,
    to_json,
)
from edgegcl.errors import is_out_of_memory
from edgegcl.training.config import TrainConfig
from edgegcl.memory import PeakMemory, release_cpu_memory
from edgegcl.contrast.pairs import PATHS
from edgegcl.phases import PhaseClock
from edgegcl.budget.profiles import DeviceProfile, memory_budget_bytes
from edgegcl.training.engine import Trainer, batch_inputs
from edgegcl.training.results import SeedResult
from edgegcl.training.placement import resolve_mode, structure_loader
from edgegcl.training.threads import ThreadPicker

WARMUP_STEPS = 2
"""Untimed steps first: allocator growth, kernel selection and the optimiser's state."""
TIMED_STEPS = 5
"""Timed steps per theta_max; the median is kept (robust to one slow step)."""

Batch = tuple[Tensor, Tensor, "list[int] | None", "Tensor | None"]
"""Features, edges, per-hop node counts and node ids, as ``Trainer.train_step`` takes them."""


def _batches(data: Data, cfg: TrainConfig, mode: str, device: torch.device) -> Iterator[Batch]:
    """Endless training batches: the whole graph, or the loader's mini-batches in a loop.

    The graph on the device and the sampler's index are built here, before the measurement
    starts, as training builds them before its first epoch.
    """
    if mode == "full":
        return itertools.repeat((as_features(data.x.to(device)), data.edge_index.to(device),
                                 None, None))
    features = data.x.to(device)
    loader = structure_loader(data, cfg.run, seed=0)
    return ((features, *batch_inputs(b, device)) for _ in itertools.count() for b in loader)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def steps_per_epoch(num_nodes: int, cfg: TrainConfig, mode: str) -> int:
    """Optimiser steps in one epoch: 1 full-graph, ceil(N / B) in mini-batches."""
    return 1 if mode == "full" else math.ceil(num_nodes / cfg.run.batch_size)


def _measure(data: Data, cfg: TrainConfig, device: torch.device,
             eta: dict[str, float]) -> Cost:
    """A step's cost at ``eta``: for ``encoder = auto`` the largest of its candidates' (the
    time of the slowest, the memory of the largest), so the budget holds whichever a seed
    chooses."""
    if cfg.model.encoder != AUTO:
        return _measure_one(data, cfg, device, eta)
    costs = [_measure_one(data, cfg.with_encoder(name), device, eta)
             for name in cfg.model.candidates()]
    slowest = max(costs, key=lambda c: c.epoch_s)
    return Cost(slowest.epoch_s, max(c.peak_bytes for c in costs), phases=slowest.phases)


def _measure_one(data: Data, cfg: TrainConfig, device: torch.device,
                 eta: dict[str, float]) -> Cost:
    mode = resolve_mode(cfg, data, device)
    # Full graph: strata are refreshed every T_int epochs; step 1 of each timed block refreshes.
    batches = _batches(data, cfg, mode, device)
    times: list[float] = []
    with PeakMemory(device) as peak:
        trainer = Trainer(cfg, data.num_features, mode=mode, device=device, seed=0)
        trainer.scheduler.eta = dict(eta)
        clock = PhaseClock(device)
        for i in range(WARMUP_STEPS + TIMED_STEPS):
            step = 1 if i == WARMUP_STEPS else i + 1  # first timed step refreshes the strata
            if i == WARMUP_STEPS:
                clock = PhaseClock(device)  # phases of the timed steps only
            _sync(device)
            t0 = time.perf_counter()
            clock.start()
            x, edge_index, hops, rows = next(batches)
            clock.mark("sample")
            trainer.train_step(x, edge_index, hops, rows, step=step, clock=clock)
            _sync(device)
            if i >= WARMUP_STEPS:
                times.append(time.perf_counter() - t0)
    if mode == "full":  # one refreshing step per T_int epochs, the others plain
        plain = statistics.median(times[1:])
        epoch_s = plain + (times[0] - plain) / cfg.schedule.T_int
    else:  # an epoch is a sum of steps: the mean step, not the median, scales to it
        epoch_s = statistics.fmean(times) * steps_per_epoch(data.num_nodes, cfg, mode)
    return Cost(epoch_s, peak.peak_bytes, phases=tuple(clock.mean().items()))


def pick_threads(data: Data, cfg: TrainConfig, device: torch.device,
                 picker: ThreadPicker) -> None:
    """Train a throwaway model at the run's settings (HANS at ``reachable_eta``) until
    ``picker`` has chosen the thread count, so the measurements after it are taken at that
    count (edgegcl.training.threads)."""
    mode = resolve_mode(cfg, data, device)
    batches = _batches(data, cfg, mode, device)
    if cfg.model.encoder == AUTO:  # any candidate: the thread count is the machine's
        cfg = cfg.with_encoder(cfg.model.candidates()[0])
    trainer = Trainer(cfg, data.num_features, mode=mode, device=device, seed=0)
    trainer.scheduler.eta = reachable_eta(cfg.schedule, cfg.hans, cfg.run.epochs)
    trainer.threads = picker
    step = 0
    while not picker.done:
        step += 1
        x, edge_index, hops, rows = next(batches)
        trainer.train_step(x, edge_index, hops, rows, step=step)
    del trainer, batches
    _flush(device)


def _flush(device: torch.device) -> None:
    """Drop what a failed attempt left behind, so the next one starts clean."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    else:
        release_cpu_memory()


def auto_logits(data: Data, cfg: TrainConfig, theta: float,
                eta: dict[str, float] | None = None,
                device: torch.device | None = None) -> str:
    """The logits path ``--logits auto`` takes at ``theta_max = theta`` in the state
    ``measure_theta`` holds (``eta``, default ``reachable_eta``), for a step of the run's
    anchors (the graph, or a batch): what a run without ``--auto-budget`` trains on there
    (edgegcl.contrast.pairs.choose_logits). ``device``: where ``--mode auto`` would train
    (default the CPU)."""
    cfg = cfg.replace(schedule={"theta_max": theta})
    mode = resolve_mode(cfg, data, torch.device("cpu") if device is None else device)
    anchors = data.num_nodes if mode == "full" else min(cfg.run.batch_size, data.num_nodes)
    scheduler = cfg.build_scheduler()
    scheduler.eta = reachable_eta(cfg.schedule, cfg.hans, cfg.run.epochs) if eta is None else dict(eta)
    selector = ScheduledContrast.from_config(cfg.schedule, cfg.contrast, hans=cfg.hans,
                                             epochs=cfg.run.epochs).selector
    return choose_logits(cfg.contrast.logits, selector.stratify,
                         selector.touched(anchors, scheduler),
                         num_candidates(anchors, cfg.contrast.candidates))


def measure_theta(data: Data, cfg: TrainConfig, device: torch.device, theta: float,
                  eta: dict[str, float] | None = None) -> Cost:
    """Epoch latency and peak memory at ``theta_max = theta``, or OUT_OF_MEMORY.

    ``eta``: the HANS state to hold (default: ``reachable_eta`` of the run at that theta).
    """
    cfg = cfg.replace(schedule={"theta_max": theta})
    try:
        cost = _measure(data, cfg, device, reachable_eta(cfg.schedule, cfg.hans, cfg.run.epochs) if eta is None else eta)
    except Exception as exc:  # only allocator failures are a measurement; the rest propagates
        if not is_out_of_memory(exc):
            raise
        cost = OUT_OF_MEMORY
    _flush(device)  # outside the except block: the traceback no longer pins the tensors
    return cost


def training_memory_budget(profile: DeviceProfile, device: torch.device) -> int:
    """Bytes the training itself may add: the profile's budget after headroom, less what this
    process already holds when the budget is a fixed device size (see the module docstring)."""
    budget = memory_budget_bytes(profile, device)
    if profile.memory_budget_gib == "auto":
        return budget
    held = (torch.cuda.memory_allocated(device) if device.type == "cuda"
            else psutil.Process().memory_info().rss)
    return max(1, budget - held)


@dataclass(frozen=True)
class Calibration:
    """The search's outcome at the batch size it ended with, the notes it printed, and every
    (theta_max, logits path) it measured there (``paths``; the search kept the cheaper).

    ``meets_target``: False when no setting met the epoch-time budget and ``chosen`` is the
    closest fit instead (edgegcl.budget.search.closest_fit); ``cached``: how many of the
    measurements came from the profile cache (edgegcl.budget.cache)."""

    result: SearchResult
    mode: str
    batch_size: int
    notes: list[str]
    paths: list[tuple[float, Cost]]
    meets_target: bool = True
    cached: int = 0

    @property
    def chosen(self) -> float | None:
        return self.result.chosen

    @property
    def logits(self) -> str:
        """The logits path the chosen theta_max was measured with (``TrainConfig.logits``)."""
        return next((m.label for m in self.result.measurements if m.theta == self.chosen),
                    PATHS[0])

    def predicted(self) -> Cost | None:
        """The measured cost of the chosen theta_max: what the run should see."""
        return next((Cost(m.epoch_s, m.peak_bytes) for m in self.result.measurements
                     if m.theta == self.chosen), None)

    def to_json(self, profile: DeviceProfile) -> dict[str, Any]:
        return {"profile": profile.name, "device_kind": profile.device, "mode": self.mode,
                "batch_size": self.batch_size, "notes": self.notes, "logits": self.logits,
                "meets_target": self.meets_target, "from_cache": self.cached,
                **to_json(self.result),
                "paths": [{"theta": theta, "logits": c.label, "epoch_s": c.epoch_s,
                           "peak_bytes": c.peak_bytes, "oom": c.oom} for theta, c in self.paths]}


def calibrate(data: Data, cfg: TrainConfig, profile: DeviceProfile, device: torch.device,
              log: Callable[[str], None] = print, cache: ProfileCache | None = None
              ) -> Calibration:
    """Search theta_max under the profile's budgets; in mini-batch mode, halve the batch size
    while nothing fits. When nothing meets the epoch-time budget at any batch size tried, the
    fastest setting within the memory budget is chosen (``meets_target`` False); only when
    none is within memory is ``chosen`` None. ``log`` receives the progress lines; ``cache``
    answers the measurements it holds and keeps the new ones."""
    mode = resolve_mode(cfg, data, device)
    cfg = cfg.replace(run={"mode": mode})  # one choice for every measurement
    budgets = Budgets(profile.target_epoch_s, training_memory_budget(profile, device))
    notes: list[str] = []
    batch = cfg.run.batch_size
    if mode == "minibatch":
        clipped = min(max(batch, profile.batch_size_min), profile.batch_size_max)
        if clipped != batch:
            notes.append(f"batch size {batch} is outside profile {profile.name}'s bounds "
                         f"[{profile.batch_size_min}, {profile.batch_size_max}]; using {clipped}")
            batch = clipped
    tried: list[Calibration] = []
    # --logits auto: both paths, the cheaper kept at each theta; a path the user named: that one
    paths_to_measure = PATHS if cfg.contrast.logits == "auto" else (cfg.contrast.logits,)
    while True:
        run_cfg = cfg.replace(run={"batch_size": batch})
        paths: list[tuple[float, Cost]] = []

        def measure(theta: float) -> Cost:
            costs = []
            for logits in paths_to_measure:
                cost = None if cache is None else cache.get(batch, theta, logits)
                if cost is None:
                    log(f"profiling theta_max = {theta:.2f} ({mode}"
                        + (f", batch size {batch}" if mode == "minibatch" else "")
                        + f", {logits} logits)")
                    cost = measure_theta(data, run_cfg.replace(contrast={"logits": logits}), device,
                                         theta)
                    if cache is not None:
                        cache.put(batch, theta, logits, cost)
                cost = replace(cost, label=logits)
                paths.append((theta, cost))
                costs.append(cost)
            return best_of(costs, budgets)

        result = search_theta(measure, budgets)
        cal = Calibration(result, mode, batch, list(notes), paths,
                          cached=0 if cache is None else cache.hits)
        if result.chosen is not None:
            return cal
        tried.append(cal)
        if mode == "full" or batch // 2 < profile.batch_size_min:
            return _closest(tried, notes)
        notes.append(f"no theta_max fits at batch size {batch} ({result.reason}); "
                     f"halving the batch size to {batch // 2}")
        log(notes[-1])
        batch //= 2


def _closest(tried: list[Calibration], notes: list[str]) -> Calibration:
    """Of searches where nothing fit both budgets, the fastest setting within memory (the
    last search unchanged when none is)."""
    fits = [(m, cal) for cal in tried if (m := closest_fit(cal.result)) is not None]
    if not fits:
        return replace(tried[-1], notes=notes)
    m, cal = min(fits, key=lambda f: (f[0].epoch_s, -f[0].theta))
    reason = closest_fit_reason(m, cal.result.budgets)  # the choice's, not the search's
    return replace(cal, result=replace(cal.result, chosen=m.theta, reason=reason), notes=notes,
                   meets_target=False, cached=tried[-1].cached)


def closest_fit_line(cal: Calibration, profile: DeviceProfile) -> str:
    """One line for a calibration that ended with the closest fit: what was asked, what was
    chosen and its predicted epoch time."""
    predicted, budgets = cal.predicted(), cal.result.budgets
    assert predicted is not None and predicted.epoch_s is not None
    return (f"no setting meets the epoch-time target of {budgets.epoch_s:g} s (profile "
            f"{profile.name}, less the {budgets.margin:.0%} margin); the closest fit is "
            f"theta_max = {cal.chosen:.2f} ({cal.logits} logits"
            + (f", batch size {cal.batch_size}" if cal.mode == "minibatch" else "")
            + f"), predicted {predicted.epoch_s:.3f} s per epoch")


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
        "meets_target": cal.meets_target, "measurements_from_cache": cal.cached,
    }


def auto_budget_line(report: dict[str, Any]) -> str:
    """One line: measured vs predicted vs budget, for the end of an auto-budget run."""
    m, p, b = report["measured"], report["predicted"], report["budgets"]
    mib = 2**20
    over = []  # each budget exceeded, and by how much
    if m["epoch_s"] > b["epoch_s"]:
        over.append(f"the epoch-time budget by {m['epoch_s'] / b['epoch_s'] - 1:.0%}")
    if m["peak_memory_bytes"] > b["memory_bytes"]:
        over.append(f"the memory budget by {m['peak_memory_bytes'] / b['memory_bytes'] - 1:.0%}")
    return (f"auto-budget theta_max = {report['theta_max']:.2f} ({report['logits']} logits): epoch {m['epoch_s']:.3f} s "
            f"(predicted {p['epoch_s']:.3f}, budget {b['epoch_s']:g}); peak memory "
            f"{m['peak_memory_bytes'] / mib:.0f} MiB (predicted "
            f"{p['peak_memory_bytes'] / mib:.0f}, budget {b['memory_bytes'] / mib:.0f}); "
            + ("within the budgets" if not over else "over " + " and ".join(over)))
