"""One seed of a run between its epochs (``SeedTraining``): its trainer and prober, its epochs' rows,
times and peak memory, one epoch of training, and its whole state to and from ``state.pt``.
The seed loop (edgegcl.training.seeds.train_seed) drives it; hooks (edgegcl.training.hooks)
read it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch_geometric.data import Data

from edgegcl import runfiles
from edgegcl.contrast.scheduler import ScheduleEvent
from edgegcl.contrast.negatives import CATEGORIES
from edgegcl.errors import UsageError, first_line
from edgegcl.memory import PeakMemory, current_bytes
from edgegcl.nn.augment import as_features
from edgegcl.training.config import TrainConfig
from edgegcl.training.distributed import World
from edgegcl.training.engine import Trainer
from edgegcl.training.resume import check_seed_file, check_world, state_parts
from edgegcl.training.results import SeedResult
from edgegcl.training.task import TaskProber, task_named
from edgegcl.training.state import (STATE_FORMAT, config_hash, load_loader_state, loader_state,
                                    read_state, save_atomic)
from edgegcl.training.placement import resolve_mode, structure_loader
from edgegcl.training.threads import ThreadChoice
from edgegcl.training.timebudget import RunClock, bounded_epochs, probe_interval
from edgegcl_embed.errors import shown


class SeedTraining:
    """One seed between epochs, as hooks see it: its config, directory, trainer and prober,
    the epoch times, the epochs.csv rows and the peak memory so far, and whether a stop was
    requested after this epoch (``stopping``); one epoch of training with its row (``epoch``),
    and the whole state written to and read back from ``state.pt`` (``save``, ``restore``).

    ``cfg`` is the run's configuration; ``encoder`` the encoder this seed trains (a built-in
    name, or the run's own when it names one), with ``choice`` how an ``auto`` run chose it
    (edgegcl.training.choice); the trainer is built from ``cfg.with_encoder(encoder)``;
    ``clock``: the run's (edgegcl.training.timebudget.RunClock), which counts its epochs.
    """

    def __init__(self, data: Data, cfg: TrainConfig, seed: int, device: torch.device,
                 run_dir: Path, world: World | None, threads: ThreadChoice | None,
                 encoder: str | None = None, choice: dict[str, Any] | None = None,
                 clock: RunClock | None = None) -> None:
        self.cfg, self.seed, self.device = cfg, seed, device
        self.encoder = encoder if encoder is not None else cfg.model.encoder
        self.choice = choice
        self.run_dir, self.world = run_dir, world
        self.main = world is None or world.is_main
        torch.manual_seed(seed)
        # what the task holds out (the link task's held-out edges) never reaches message
        # passing, the views or the negatives: the seed trains on the task's training graph
        task = task_named(cfg.run.task)
        self.held_out = task.held_out(data, seed)
        data = task.training_graph(data, self.held_out)
        self.mode = mode = resolve_mode(cfg, data, device)
        self.features, self.edge_index = data.x.to(device), data.edge_index.to(device)
        # full-graph steps and the probe's embeddings (rank 0 alone probes under torchrun)
        # a graph folder's mapped features stay on disk in mini-batches: each batch's rows are
        # gathered and widened to float32 as it trains (Trainer.project), and the probe's
        # all-node embedding reads them a chunk at a time
        mapped = getattr(data, "folder", None) is not None and mode == "minibatch"
        self.x = (as_features(self.features) if (self.main or mode == "full") and not mapped
                  else self.features)
        self.loader = None if mode != "minibatch" else structure_loader(
            data, cfg.run, seed, None if world is None else (world.rank, world.size))
        # Training's memory is measured above this level: the graph and the sampler's index
        # are storage, the model, optimiser state and everything after are training (as the
        # profiler measures).
        self.baseline = current_bytes(device)
        self.trainer = Trainer(cfg.with_encoder(self.encoder), self.x.size(1), mode=mode,
                               device=device, seed=seed, world=world)
        self.picker = None if threads is None else threads.picker
        self.trainer.threads = self.picker
        self.prober: TaskProber = task.prober(  # rank 0 alone probes
            data, self.held_out, seed, device, cfg.run.metric, cfg.run.protocol,
            run_dir if mapped else None)
        self.anchors = data.num_nodes if mode == "full" else min(cfg.run.batch_size, data.num_nodes)
        # the epochs this seed trains: --epochs within --max-steps, cut further by its part of
        # a --time-budget as it trains (edgegcl.training.hooks.Deadline), probing so that a
        # cut seed still has checkpoints to choose from
        self.steps = 1 if self.loader is None else len(self.loader)  # an epoch's
        self.most = bounded_epochs(cfg.run.epochs, self.steps, cfg.run.max_steps,
                                   mode == "minibatch")
        self.epochs, self.eval_every, self.cut = self.most, cfg.run.eval_every, ""
        self.deadline: float | None = None  # when its part of a --time-budget ends (monotonic)
        self.clock = clock  # the run's: counts the epochs, tells when the run ends
        self.later = 0  # the epochs the seeds after this one plan (the run's end reads them)
        self.probe_s: float | None = None  # the last probe's seconds, and its epoch
        self.probed_at = 0
        if self.most < cfg.run.epochs:
            self.replan(self.most)
        self.times: list[float] = []
        self.rows: list[dict[str, object]] = []  # epochs.csv
        self.peak = 0
        self.stopping = False
        self.finished = False  # early stopping ended the seed (edgegcl.training.hooks.EarlyStop)

    def replan(self, epochs: int) -> None:
        """Train ``epochs`` epochs in all (at most ``most``): why fewer than ``--epochs``, the
        probe interval, and the pace re-aimed at them (edgegcl.contrast.pace.PacedScheduler.aim)."""
        self.epochs = epochs
        self.cut = ("time_budget" if epochs < self.most else
                    "max_steps" if epochs < self.cfg.run.epochs else "")
        self.eval_every = probe_interval(self.cfg.run.eval_every, epochs)
        self.trainer.scheduler.aim(self.cfg.schedule.reach_epoch(epochs), epochs)

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
            "peak": self.peak, "ranks": ranks, "encoder": self.encoder, "choice": self.choice,
            "plan": {"epochs": self.epochs, "eval_every": self.eval_every, "cut": self.cut},
            "threads": None if self.picker is None else self.picker.state_dict()},
            self.run_dir / runfiles.STATE)

    def restore(self, state: dict[str, Any] | None) -> None:
        """Continue from a ``saved_state`` (nothing to do for None); a value that does not fit
        this seed (a random state of another size, an optimiser's moments of another shape, a
        missing entry) is one line."""
        if state is None:
            return
        try:
            self._restore(state)
        except UsageError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError,
                RuntimeError) as exc:
            raise UsageError(f"{self.run_dir / runfiles.STATE} holds a value that does not fit this "
                             f"seed ({type(exc).__name__}: {shown(first_line(exc), 160)}); remove"
                             " it to restart that seed from epoch 0") from None

    def _restore(self, state: dict[str, Any]) -> None:
        world = self.world
        self.trainer.load_state_dict(state["trainer"])
        load_loader_state(self.loader, state["loader"])
        if world is not None:
            mine = state["ranks"][world.rank]
            self.trainer.load_streams(mine)
            load_loader_state(self.loader, mine["loader"])
        torch.set_rng_state(state["global_rng"])
        self.prober.load_state_dict(state)
        self.times, self.peak = [float(t) for t in state["times"]], int(state["peak"])
        self.rows = list(state["rows"])
        plan = state["plan"]  # the epochs its time budget cut it to (else --epochs and
        if plan["cut"] == "time_budget":  # --max-steps say them, as a resume may change them)
            epochs, every = plan["epochs"], plan["eval_every"]
            if not (type(epochs) is int and type(every) is int and 1 <= every
                    and self.trainer.epoch <= epochs <= self.most):
                raise ValueError(f"its plan {plan!r} does not fit this seed")
            self.epochs, self.eval_every, self.cut = epochs, every, "time_budget"
        if not all(isinstance(row, dict) for row in self.rows):
            raise TypeError("its epochs.csv rows are not records")
        measured = state.get("threads")
        if self.picker is not None and measured is not None:  # the count the run measured,
            try:  # so that it ends as if uninterrupted
                self.picker.load_state_dict(measured)
            except (KeyError, TypeError, ValueError, AttributeError):
                raise UsageError(f"{self.run_dir / runfiles.STATE} holds a malformed thread "
                                 "record; remove it to train that seed afresh") from None

    def epoch(self, epoch: int, batch_end: Callable[[int, int, float], None] | None = None
              ) -> tuple[dict[str, object], list[ScheduleEvent]]:
        """Train epoch ``epoch`` (``batch_end(batch, batches, mean_loss)`` after each batch):
        its epochs.csv row, F1 cells empty (the probe fills them), and the HANS events its end
        produced."""
        trainer, device = self.trainer, self.device

        with PeakMemory(device, self.baseline) as memory:  # the training step(s), not the probe
            t0 = time.perf_counter()
            result = trainer.fit_epoch(
                self.x if self.loader is None else self.features, self.edge_index, self.loader,
                batch_end)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            self.times.append(time.perf_counter() - t0)
        if self.clock is not None:
            self.clock.count()
        self.peak = max(self.peak, memory.peak_bytes)
        hans, views = trainer.scheduler, trainer.objective == "views"
        row: dict[str, object] = {  # under the edge objective: non-edges per masked edge
            "epoch": epoch, "loss": result.loss,
            **{f"loss_{c}": result.category.get(c, "") for c in CATEGORIES},
            **{f"eta_{c}": hans.eta[c] for c in CATEGORIES},
            "active_per_anchor": (sum(trainer.selector.plan(self.anchors, hans)[0].values())
                                  if views else trainer.edge_active),
            "budget_used": hans.budget_share(),
            "epoch_s": self.times[-1], "peak_memory_bytes": memory.peak_bytes,
            "val_micro_f1": "", "test_micro_f1": "", "val_score": "", "test_score": "",
            "authors_test_micro_f1": ""}
        self.rows.append(row)  # the probe's hook fills the F1 cells of this same dict
        return row, result.events

    def result(self) -> SeedResult:
        """The finished seed (rank 0: with the checkpoint chosen on validation)."""
        cfg, hans, prober = self.cfg, self.trainer.scheduler, self.prober
        if not self.main:  # rank 0 chose the checkpoint; this rank's part ends with training
            return SeedResult(self.seed, self.mode, None, [], self.times, dict(hans.eta),
                              hans.saturated_at, {}, 0, self.peak, cfg.schedule.T_int,
                              encoder=self.encoder, choice=self.choice, cut=self.cut)
        if prober.best_state is None:  # resumed at the last epoch: nothing left to train
            raise UsageError(f"{self.run_dir} has no chosen checkpoint; remove its state.pt to "
                             "restart this seed")
        model = self.trainer.model
        selection = prober.selection(model, self.x, self.edge_index)
        return SeedResult(self.seed, self.mode, selection, prober.history, self.times,
                          dict(hans.eta), hans.saturated_at, prober.best_state,
                          prober.best_epoch, self.peak, cfg.schedule.T_int, prober.authors,
                          prober.baselines(model, self.x, self.edge_index), self.encoder,
                          self.choice, getattr(prober, "best_decoder", None), self.cut)


def saved_state(run_dir: Path, seed: int, cfg: TrainConfig, world: World | None,
                resume: bool) -> dict[str, Any] | None:
    """A resumed seed's ``state.pt`` as every rank needs it (rank 0 reads and checks it, then
    broadcasts it); None when not resuming or the seed has none yet."""
    state = None
    if resume and (world is None or world.is_main) and (run_dir / runfiles.STATE).exists():
        state = read_state(run_dir / runfiles.STATE)
        check_seed_file(run_dir / runfiles.STATE, state, seed, cfg, {}, state_parts)
        check_world(run_dir, 1 if world is None else world.size, state)
    if world is not None and resume:
        state = world.broadcast(state)
    return state
