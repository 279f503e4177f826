"""A training run: independent seeds, each trained and probed, written into the run directory
with the metrics over seeds.

Per seed a short loop trains (``edgegcl.training.engine.Trainer``) and calls its hooks
(``edgegcl.training.hooks``): the probe every ``eval_every`` epochs, which keeps the encoder
whose validation micro-F1 is best, the curve, the HANS event log, the progress line, a user's
hooks and the state saver. What a seed produced and the metrics:
``edgegcl.training.results``; whether a run directory can be resumed:
``edgegcl.training.resume``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch_geometric.data import Data

from edgegcl import runfiles
from edgegcl import __version__
from edgegcl.errors import Stopped, UsageError
from edgegcl.nn.config import AUTO
from edgegcl.training.checkpoint import save_checkpoint
from edgegcl.training.choice import choose_encoder, planned_epochs
from edgegcl.training.searchrecord import read_search
from edgegcl.training.config import TrainConfig, to_toml
from edgegcl.training.distributed import World
from edgegcl.training.hooks import Hook, StateSaver, standard_hooks
from edgegcl.training.results import (EncoderChoice, SeedResult, result_to_dict, seed_metrics,
                                      summarise)
from edgegcl.training.resume import finished_seed, saved_encoder
from edgegcl.training.seed import SeedTraining, saved_state
from edgegcl.data.columns import feature_columns
from edgegcl.data.identity import PYTHON, write_identity
from edgegcl.training.placement import resolve_mode
from edgegcl.training.state import (config_hash, guard_writes, save_atomic,
                                    write_atomic)
from edgegcl.training.threads import ThreadChoice
from edgegcl.training.timebudget import RunClock
from edgegcl_embed.files import refuse_link

__all__ = ["Stopped", "start_seed", "train_planned", "train_seed"]


def train_seed(data: Data, cfg: TrainConfig, seed: int, device: torch.device,
               run_dir: Path, label: str, stop: Callable[[], bool] | None = None,
               resume: bool = False, world: World | None = None,
               hooks: Sequence[Hook] = (), threads: ThreadChoice | None = None,
               deadline: float | None = None, clock: RunClock | None = None,
               later: int = 0) -> SeedResult:
    """Train one independent training (own split, initialisation and random streams) and probe it.

    The loop trains epochs and polls ``stop()``; everything else is a hook
    (edgegcl.training.hooks): the probe, ``epochs.csv``, ``hans_events.jsonl``, the progress
    line, then ``hooks``, then the state saver. With ``resume`` a seed continues from
    ``run_dir/state.pt`` and on the CPU ends exactly as the uninterrupted training would have. After
    ``stop()`` turns true the state is saved and ``Stopped`` raised; under torchrun
    (``world``) a stop reaching any rank stops all of them after the same epoch.
    ``threads``: the run's thread choice (edgegcl.training.threads). ``deadline``
    (``time.monotonic``): when the seed's part of a time budget ends, its encoder search
    included (edgegcl.training.timebudget); it trains the epochs that fit. ``clock``: the run's
    (its budget, the epochs trained so far), ``later``: the epochs the seeds after this one
    plan; the progress line says from them when the run ends.
    """
    training = start_seed(data, cfg, seed, device, run_dir, label, resume, world, threads, stop,
                          deadline, clock, later)
    training.deadline, training.later = deadline, later
    every = [*standard_hooks(label, threads, cfg.run.patience), *hooks, StateSaver()]
    for hook in every:
        hook.seed_start(training)
    try:
        epoch = training.trainer.epoch
        while epoch < training.epochs:  # --epochs, cut by --max-steps and a time budget
            if training.finished:  # early stopping: the best checkpoint is kept
                break
            epoch += 1
            row, events = training.epoch(epoch, partial(_batch_end, every, training, epoch))
            if not math.isfinite(float(row["loss"])):  # type: ignore[arg-type]
                raise UsageError(_diverged(row["loss"], epoch, seed, cfg))
            stopping = stop is not None and stop()
            training.stopping = world.any(stopping) if world is not None else stopping
            for hook in every:
                hook.epoch_end(training, row, events)
            if training.stopping and epoch < training.epochs:
                raise Stopped(seed, epoch)
    finally:
        for hook in every:
            hook.seed_end(training)
    return training.result()


def _diverged(loss: object, epoch: int, seed: int, cfg: TrainConfig) -> str:
    """Why a seed stops when its loss is not a number: the epoch, and what usually causes it."""
    return (f"the loss became {loss} at epoch {epoch} in seed-{seed}: training diverged; a "
            f"smaller --lr (this run's is {cfg.run.lr:g}), a larger --tau or features of a "
            "smaller scale usually keep it finite (what was saved before this epoch is kept)")


def start_seed(data: Data, cfg: TrainConfig, seed: int, device: torch.device, run_dir: Path,
               label: str, resume: bool = False, world: World | None = None,
               threads: ThreadChoice | None = None,
               stop: Callable[[], bool] | None = None,
               deadline: float | None = None, clock: RunClock | None = None,
               later: int = 0) -> SeedTraining:
    """Seed ``seed`` ready for its next epoch: continued from its ``state.pt`` (with the
    encoder it records), or new, its encoder chosen first when the run says ``auto``
    (edgegcl.training.choice; recorded in the seed's state from its first save on), a search
    within its share of the seed's ``deadline``, continued from its saved figures on
    ``resume``; ``clock`` counts its epochs, ``later`` (the epochs of the seeds after it) tells
    the search's progress line when the run ends."""
    state = saved_state(run_dir, seed, cfg, world, resume)
    if state is not None:
        path = run_dir / runfiles.STATE
        choice = state.get("choice")
        training = SeedTraining(data, cfg, seed, device, run_dir, world, threads,
                                saved_encoder(state.get("encoder"), cfg, path),
                                None if choice is None else
                                EncoderChoice.from_dict(choice, path).to_dict(), clock)
        training.restore(state)
        return training
    if cfg.model.encoder != AUTO:
        return SeedTraining(data, cfg, seed, device, run_dir, world, threads, clock=clock)
    choice = choose_encoder(data, cfg, seed, device, run_dir, label, world, threads, stop,
                            RunClock.search_end(deadline), resume, clock, later)
    if choice is None:  # stopped while searching: --resume goes on from the saved figures
        record = read_search(run_dir) if world is None or world.is_main else None
        raise Stopped(seed, 0, searched="" if record is None else record.kept())
    return SeedTraining(data, cfg, seed, device, run_dir, world, threads, choice.encoder,
                        choice.to_dict(), clock)


def train_planned(cfg: TrainConfig, data: Data, run_dir: Path, device: torch.device,
                  report: Callable[[list[SeedResult]], dict[str, Any]] | None = None,
                  stop: Callable[[], bool] | None = None, resume: bool = False,
                  world: World | None = None, hooks: Sequence[Hook] = (),
                  threads: ThreadChoice | None = None, clock: RunClock | None = None,
                  source: str = PYTHON) -> dict[str, Any]:
    """Train ``cfg.run.seeds`` independent seeds into ``run_dir``, write the metrics there and
    return them (``{}`` on a rank other than 0), for the job that checked everything first
    (edgegcl.jobs.plan and edgegcl.jobs.start; ``edgegcl.train`` and ``edgegcl.train_seeds``
    are the public ways in): ``run_dir`` locked (rank 0), ``data`` validated, a resumed run's
    files and graph checked, its ``--mode auto`` resolved to the one it chose.

    ``report``: more entries for ``metrics.json`` from the seeds' results (``--auto-budget``:
    the profiler's prediction beside what training measured); ``stop``: polled after every
    epoch (``train_seed``); ``resume``: finished seeds are kept, the others continue from
    their ``state.pt``; ``world``: this rank under torchrun (rank 0 writes everything);
    ``hooks``: called by every seed's loop (edgegcl.training.hooks); ``threads``: how torch's
    CPU threads are set (metrics.json records it); ``clock``: the run's time budget as the
    job started it (default: ``cfg``'s, from now); ``source``: where the graph came from, for
    a new run's ``graph.json`` (edgegcl.data.identity)."""
    main = world is None or world.is_main
    if clock is None:
        clock = RunClock.started(cfg.run.time_budget_s)
    if cfg.run.mode == "auto" and not resume:  # chosen once, for every seed: config.toml keeps it
        mode = resolve_mode(cfg, data, device) if world is None else "minibatch"
        cfg = cfg.replace(run={"mode": mode})
    if main:
        write_atomic(run_dir / runfiles.CONFIG, to_toml(cfg))
        if not resume:  # the graph, tied to the configuration config.toml now holds
            write_identity(run_dir, data, source, config_hash(cfg))
    results = []
    for seed in range(cfg.run.seeds):
        stopping = stop is not None and stop()
        if world is not None:
            stopping = world.any(stopping)
        if stopping:  # between seeds: the ones before are finished and saved
            raise Stopped(seed, 0)
        seed_dir = runfiles.seed_dir(run_dir, seed)
        if main:
            refuse_link(seed_dir, "seed directory", UsageError)
            with guard_writes(seed_dir):
                seed_dir.mkdir(exist_ok=resume)
        done = finished_seed(seed_dir, cfg.run.epochs) if resume and main else None
        if world is not None and world.broadcast(done is not None):
            if done is not None:
                results.append(done)
            continue  # rank 0 has this seed's result
        if done is not None:
            results.append(done)
            continue
        result = train_seed(data, cfg, seed, device, seed_dir, f"seed {seed + 1}/{cfg.run.seeds}",
                            stop, resume, world, threads=threads, hooks=hooks,
                            deadline=clock.seed_end(cfg.run.seeds - seed), clock=clock,
                            later=(cfg.run.seeds - seed - 1) * planned_epochs(cfg))
        if not main:
            continue
        save_checkpoint(seed_dir / runfiles.CHECKPOINT, result.encoder_state,
                        _trained(result, cfg, seed_dir), data.x.size(1), seed,
                        result.selected_epoch, result.decoder_state, feature_columns(data))
        save_atomic({**result_to_dict(result), "config_hash": config_hash(cfg)},
                    seed_dir / runfiles.RESULT)
        (seed_dir / runfiles.SEARCH).unlink(missing_ok=True)  # the choice is in the result now
        results.append(result)
    if not main:
        return {}
    metrics = _run_metrics(results, cfg, data, run_dir, device, world, threads)
    if report is not None:
        metrics.update(report(results))
    write_atomic(run_dir / runfiles.METRICS, json.dumps(metrics, indent=2) + "\n")
    return metrics


def _run_metrics(results: list[SeedResult], cfg: TrainConfig, data: Data, run_dir: Path,
                 device: torch.device, world: World | None,
                 threads: ThreadChoice | None) -> dict[str, Any]:
    """metrics.json's entries over the seeds; the run's checkpoint, the seed chosen on
    validation, copied to RUN_DIR/checkpoint.pt."""
    best = max(results, key=lambda r: _chosen_value(r))
    save_checkpoint(run_dir / runfiles.CHECKPOINT, best.encoder_state,
                    _trained(best, cfg, runfiles.seed_dir(run_dir, best.seed)), data.x.size(1),
                    best.seed, best.selected_epoch, best.decoder_state, feature_columns(data))
    return {
        "edgegcl_version": __version__,
        "dataset": getattr(data, "name", cfg.data.dataset),
        "num_nodes": data.num_nodes,
        "num_edges": int(data.edge_index.size(1)),
        "mode": results[0].mode,
        "device": str(device),
        **({} if threads is None else {"threads": threads.to_json()}),
        **({} if world is None else {"world_size": world.size, "negatives": world.negatives}),
        "labelled": any(r.selection is not None for r in results),
        "checkpoint_seed": best.seed,
        "seeds": [seed_metrics(r) for r in results],
        "summary": summarise(results),
    }


def _trained(result: SeedResult, cfg: TrainConfig, seed_dir: Path) -> TrainConfig:
    """The configuration a seed's encoder was trained with (its checkpoint's): the run's,
    with ``auto`` resolved to the encoder the seed chose."""
    return cfg.with_encoder(saved_encoder(result.encoder, cfg, seed_dir / runfiles.RESULT))


def _batch_end(hooks: Sequence[Hook], training: SeedTraining, epoch: int, batch: int,
               batches: int, mean: float) -> None:
    for hook in hooks:
        hook.batch_end(training, epoch, batch, batches, mean)


def _chosen_value(result: SeedResult) -> float:
    """What chooses the run's checkpoint among its seeds: the kept checkpoint's validation
    figure of the run's metric (NaN ranks last)."""
    if result.selection is None:
        return -math.inf
    value = result.selection.scores.val_score
    return -math.inf if math.isnan(value) else value
