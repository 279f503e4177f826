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
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch_geometric.data import Data

from edgegcl import __version__
from edgegcl.nn.augment import as_features
from edgegcl.training.checkpoint import save_checkpoint
from edgegcl.training.config import TrainConfig, to_toml
from edgegcl.training.engine import Trainer
from edgegcl.training.hooks import Callback, EpochCallback, Hook, StateSaver, standard_hooks
from edgegcl.errors import UsageError
from edgegcl.memory import PeakMemory, current_bytes
from edgegcl.contrast.hans import HANSEvent
from edgegcl.contrast.negatives import CATEGORIES
from edgegcl.training.resume import (
    check_resume,
    check_seed_file,
    check_world,
    finished_seed,
    state_parts,
)
from edgegcl.training.results import SeedResult, result_to_dict, seed_metrics, summarise
from edgegcl.training.state import (
    STATE_FORMAT,
    config_hash,
    guard_writes,
    load_loader_state,
    loader_state,
    read_state,
    save_atomic,
    write_atomic,
)
from edgegcl.training.distributed import World, on_main
from edgegcl.training.prober import Prober
from edgegcl.training.step import resolve_mode, structure_loader
from edgegcl.training.threads import ThreadChoice
from edgegcl_embed.files import refuse_link


class Stopped(Exception):
    """Training stopped on request (SIGINT / SIGTERM) after an epoch, its state saved, or
    before seed ``seed`` started (``epoch`` 0: the seeds before it are finished)."""

    def __init__(self, seed: int, epoch: int) -> None:
        super().__init__(f"stopped after epoch {epoch} of seed {seed}" if epoch else
                         f"stopped before seed {seed}")
        self.seed, self.epoch = seed, epoch


class SeedRun:
    """One seed between epochs, as hooks see it: its config, directory, trainer and prober,
    the epoch times, the epochs.csv rows and the peak memory so far, and whether a stop was
    requested after this epoch (``stopping``); one epoch of training with its row (``epoch``),
    and the whole state written to and read back from ``state.pt`` (``save``, ``restore``)."""

    def __init__(self, data: Data, cfg: TrainConfig, seed: int, device: torch.device,
                 run_dir: Path, world: World | None, threads: ThreadChoice | None) -> None:
        self.cfg, self.seed, self.device = cfg, seed, device
        self.run_dir, self.world = run_dir, world
        self.main = world is None or world.is_main
        torch.manual_seed(seed)
        self.mode = mode = resolve_mode(cfg.run.mode, data.num_nodes)
        self.features, self.edge_index = data.x.to(device), data.edge_index.to(device)
        # full-graph steps and the probe's embeddings (rank 0 alone probes under torchrun)
        self.x = as_features(self.features) if self.main or mode == "full" else self.features
        self.loader = None if mode != "minibatch" else structure_loader(
            data, cfg.run, seed, None if world is None else (world.rank, world.size))
        # Training's memory is measured above this level: the graph and the sampler's index
        # are storage, the model, optimiser state and everything after are training (as the
        # profiler measures).
        self.baseline = current_bytes(device)
        self.trainer = Trainer(cfg, self.x.size(1), mode=mode, device=device, seed=seed,
                               world=world)
        self.picker = None if threads is None else threads.picker
        self.trainer.threads = self.picker
        self.prober = Prober(data, seed, device, cfg.run.protocol)  # rank 0 alone probes
        self.anchors = data.num_nodes if mode == "full" else min(cfg.run.batch_size, data.num_nodes)
        self.times: list[float] = []
        self.rows: list[dict[str, object]] = []  # epochs.csv
        self.peak = 0
        self.stopping = False
        self.finished = False  # early stopping ended the seed (edgegcl.training.hooks.EarlyStop)

    def save(self) -> None:
        """The whole state to ``state.pt`` (rank 0, with every rank's random streams)."""
        trainer, loader = self.trainer, self.loader
        ranks = None if self.world is None else self.world.gather(
            {**trainer.streams(), "loader": loader_state(loader)})
        if not self.main:
            return
        save_atomic({
            "format": STATE_FORMAT, "config": self.cfg.to_dict(),
            "config_hash": config_hash(self.cfg), "seed": self.seed,
            "epoch": trainer.epoch, "trainer": trainer.state_dict(),
            "loader": loader_state(loader), "global_rng": torch.get_rng_state(),
            **self.prober.state_dict(), "times": self.times, "rows": self.rows,
            "peak": self.peak, "ranks": ranks,
            "threads": None if self.picker is None else self.picker.state_dict()},
            self.run_dir / "state.pt")

    def restore(self, resume: bool) -> None:
        """Continue from ``state.pt`` when resuming and it exists (every rank: rank 0 reads it
        and broadcasts it)."""
        world, state = self.world, None
        if resume and self.main and (self.run_dir / "state.pt").exists():
            state = read_state(self.run_dir / "state.pt")
            check_seed_file(self.run_dir / "state.pt", state, self.seed, self.cfg, {}, state_parts)
            check_world(self.run_dir, 1 if world is None else world.size, state)
        if world is not None and resume:
            state = world.broadcast(state)
        if state is None:
            return
        self.trainer.load_state_dict(state["trainer"])
        load_loader_state(self.loader, state["loader"])
        if world is not None:
            mine = state["ranks"][world.rank]
            self.trainer.load_streams(mine)
            load_loader_state(self.loader, mine["loader"])
        torch.set_rng_state(state["global_rng"])
        self.prober.load_state_dict(state)
        self.times, self.peak = list(state["times"]), int(state["peak"])
        self.rows = list(state["rows"])
        measured = state.get("threads")
        if self.picker is not None and measured is not None:  # the count the run measured,
            try:  # so that it ends as if uninterrupted
                self.picker.load_state_dict(measured)
            except (KeyError, TypeError, ValueError, AttributeError):
                raise UsageError(f"{self.run_dir / 'state.pt'} holds a malformed thread "
                                 "record; remove it to train that seed afresh") from None

    def epoch(self, epoch: int, hooks: Sequence[Hook]) -> tuple[dict[str, object], list[HANSEvent]]:
        """Train epoch ``epoch`` (``hooks`` told after each batch): its epochs.csv row, F1 cells
        empty (the probe's hook fills them), and the HANS events its end produced."""
        trainer, device = self.trainer, self.device

        def batch_end(i: int, n: int, mean: float) -> None:
            for hook in hooks:
                hook.batch_end(self, epoch, i, n, mean)

        with PeakMemory(device, self.baseline) as memory:  # the training step(s), not the probe
            t0 = time.perf_counter()
            result = trainer.fit_epoch(
                self.x if self.loader is None else self.features, self.edge_index, self.loader,
                batch_end)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            self.times.append(time.perf_counter() - t0)
        self.peak = max(self.peak, memory.peak_bytes)
        hans = trainer.hans
        row: dict[str, object] = {
            "epoch": epoch, "loss": result.loss,
            **{f"loss_{c}": result.category[c] for c in CATEGORIES},
            **{f"eta_{c}": hans.eta[c] for c in CATEGORIES},
            "active_per_anchor": sum(trainer.selector.plan(self.anchors, hans)[0].values()),
            "budget_used": hans.budget_share(),
            "epoch_s": self.times[-1], "peak_memory_bytes": memory.peak_bytes,
            "val_micro_f1": "", "test_micro_f1": "", "authors_test_micro_f1": ""}
        self.rows.append(row)  # the probe's hook fills the F1 cells of this same dict
        return row, result.events

    def result(self) -> SeedResult:
        """The finished seed (rank 0: with the checkpoint chosen on validation)."""
        cfg, hans, prober = self.cfg, self.trainer.hans, self.prober
        if not self.main:  # rank 0 chose the checkpoint; this rank's part ends with training
            return SeedResult(self.seed, self.mode, None, [], self.times, dict(hans.eta),
                              hans.saturated_at, {}, 0, self.peak, cfg.hans.T_int)
        if prober.best_state is None:  # resumed at the last epoch: nothing left to train
            raise UsageError(f"{self.run_dir} has no chosen checkpoint; remove its state.pt to "
                             "restart this seed")
        return SeedResult(self.seed, self.mode,
                          prober.selection(self.trainer.model, self.x, self.edge_index),
                          prober.history, self.times, dict(hans.eta), hans.saturated_at,
                          prober.best_state, prober.best_epoch, self.peak, cfg.hans.T_int,
                          prober.authors)


def train_seed(data: Data, cfg: TrainConfig, seed: int, device: torch.device,
               run_dir: Path, label: str, stop: Callable[[], bool] | None = None,
               resume: bool = False, world: World | None = None,
               hooks: Sequence[Hook] = (), threads: ThreadChoice | None = None) -> SeedResult:
    """Train one independent run (own split, initialisation and random streams) and probe it.

    The loop trains epochs and polls ``stop()``; everything else is a hook
    (edgegcl.training.hooks): the probe, ``epochs.csv``, ``hans_events.jsonl``, the progress
    line, then ``hooks``, then the state saver. With ``resume`` a seed continues from
    ``run_dir/state.pt`` and on the CPU ends exactly as the uninterrupted run would have. After
    ``stop()`` turns true the state is saved and ``Stopped`` raised; under torchrun
    (``world``) a stop reaching any rank stops all of them after the same epoch.
    ``threads``: the run's thread choice (edgegcl.training.threads).
    """
    run = SeedRun(data, cfg, seed, device, run_dir, world, threads)
    run.restore(resume)
    every = [*standard_hooks(label, threads, cfg.run.patience), *hooks, StateSaver()]
    for hook in every:
        hook.seed_start(run)
    try:
        for epoch in range(run.trainer.epoch + 1, cfg.run.epochs + 1):
            if run.finished:  # early stopping: the best checkpoint is kept
                break
            row, events = run.epoch(epoch, every)
            stopping = stop is not None and stop()
            run.stopping = world.any(stopping) if world is not None else stopping
            for hook in every:
                hook.epoch_end(run, row, events)
            if run.stopping and epoch < cfg.run.epochs:
                raise Stopped(seed, epoch)
    finally:
        for hook in every:
            hook.seed_end(run)
    return run.result()


def run(cfg: TrainConfig, data: Data, run_dir: Path, device: torch.device,
        report: Callable[[list[SeedResult]], dict[str, Any]] | None = None,
        stop: Callable[[], bool] | None = None, resume: bool = False,
        world: World | None = None, on_epoch: EpochCallback | None = None,
        hooks: Sequence[Hook] = (),
        threads: ThreadChoice | None = None) -> dict[str, Any]:
    """Train ``cfg.run.seeds`` independent seeds, write the run directory, return the metrics.

    ``report``: more entries for ``metrics.json`` from the seeds' results (``--auto-budget``:
    the profiler's prediction beside what training measured,
    edgegcl.budget.profiler.auto_budget_report). ``stop``: polled
    after every epoch (edgegcl.training.run.train_seed). ``resume``: continue the run in ``run_dir``:
    finished seeds are kept, the others continue from their ``state.pt``. ``world``: this
    rank under torchrun; rank 0 writes everything, the others train and return ``{}``.
    ``hooks``: called by every seed's loop (edgegcl.training.hooks); ``on_epoch(seed_dir, row,
    events)``: a plain function called after every epoch of every seed. ``threads``: how
    torch's CPU threads are set (edgegcl.training.threads); metrics.json records it.
    """
    main = world is None or world.is_main
    if resume:
        on_main(world, lambda: check_resume(run_dir, cfg, data.x.size(1),
                                            1 if world is None else world.size))
    if main:
        write_atomic(run_dir / "config.toml", to_toml(cfg))
    results = []
    for seed in range(cfg.run.seeds):
        stopping = stop is not None and stop()
        if world is not None:
            stopping = world.any(stopping)
        if stopping:  # between seeds: the ones before are finished and saved
            raise Stopped(seed, 0)
        seed_dir = run_dir / f"seed-{seed}"
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
                            stop, resume, world, threads=threads,
                            hooks=[*hooks, *([] if on_epoch is None else [Callback(on_epoch)])])
        if not main:
            continue
        save_checkpoint(seed_dir / "checkpoint.pt", result.encoder_state, cfg, data.x.size(1),
                        seed, result.selected_epoch)
        save_atomic({**result_to_dict(result), "config_hash": config_hash(cfg)},
                    seed_dir / "result.pt")
        results.append(result)
    if not main:
        return {}
    best = max(results, key=lambda r: r.selection.scores.val_micro if r.selection else 0.0)
    save_checkpoint(run_dir / "checkpoint.pt", best.encoder_state, cfg, data.x.size(1),
                    best.seed, best.selected_epoch)
    metrics = {
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
    if report is not None:
        metrics.update(report(results))
    write_atomic(run_dir / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    return metrics
