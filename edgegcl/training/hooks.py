"""What the seed loop calls around its epochs: the run directory's writers, the probe, the
progress line and anything a user passes (Lightning's callbacks, in the seed loop of
``edgegcl.training.seeds``).

A hook is told when a seed starts (``seed_start``, after a resumed seed's state is read), after
every batch of a mini-batch epoch (``batch_end``; a full-graph epoch is one step and sends
none), after every epoch with that epoch's ``epochs.csv`` row and HANS
events (``epoch_end``; hooks run in order, so the probe fills the row's F1 cells before the
writers see it) and when the seed ends, however it ends (``seed_end``). Every hook receives the
``SeedTraining`` (``edgegcl.training.seed``): its config, directory, trainer, prober and whether a
stop was requested after this epoch (``stopping``).

Example:
    >>> class Losses(Hook):
    ...     def __init__(self):
    ...         self.losses = []
    ...     def epoch_end(self, seed, row, events):
    ...         self.losses.append(row["loss"])
    >>> losses = Losses()
    >>> train_seeds(cfg, data, run_dir, torch.device("cpu"), hooks=[losses])  # doctest: +SKIP
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from edgegcl import runfiles
from edgegcl.errors import UsageError
from edgegcl.progress import say
from edgegcl_embed.progress import Progress
from edgegcl.training.curves import csv_text  # the standard library alone, as this module
from edgegcl.training.timebudget import ends_text, epochs_that_fit, probe_interval, step_bound
from edgegcl_embed.files import refuse_link

if TYPE_CHECKING:
    from edgegcl.training.seed import SeedTraining
    from edgegcl.training.threads import ThreadChoice

Row = dict[str, object]
"""One epoch's ``epochs.csv`` row (edgegcl.training.curves.FIELDS)."""


class Hook:
    """Does nothing at every point of the seed loop; a hook overrides what it needs.

    Example:
        >>> class BestLoss(Hook):
        ...     def __init__(self):
        ...         self.best = float("inf")
        ...     def epoch_end(self, seed, row, events):
        ...         self.best = min(self.best, row["loss"])
        >>> hook = BestLoss()
        >>> hook.epoch_end(None, {"loss": 2.5}, []); hook.best
        2.5
    """

    def seed_start(self, seed: SeedTraining) -> None:
        """The seed's state is ready (read back when resuming); no epoch trained yet."""

    def batch_end(self, seed: SeedTraining, epoch: int, batch: int, batches: int,
                  mean_loss: float) -> None:
        """Batch ``batch`` of ``batches`` of a mini-batch ``epoch`` is trained; ``mean_loss`` so
        far. Full-graph mode trains one step per epoch and calls ``epoch_end`` alone."""

    def epoch_end(self, seed: SeedTraining, row: Row, events: list[Any]) -> None:
        """``row``: the epoch's ``epochs.csv`` row; ``events``: the HANS events its end made."""

    def seed_end(self, seed: SeedTraining) -> None:
        """The seed is finished, stopped or failed: release what the hook holds."""


class Probe(Hook):
    """The linear probe every ``eval_every`` epochs and at the last (rank 0): fills the row's
    F1 cells and keeps the encoder that validation chooses (edgegcl.training.prober).

    In mini-batches the heap pages the steps freed are handed back first: the probe embeds
    every node (a graph-sized block), and the steps' pages, kept for reuse between steps
    (edgegcl.memory.reuse_freed_memory), would otherwise sit under it, adding the batch's
    peak to the graph's."""

    def epoch_end(self, seed: SeedTraining, row: Row, events: list[Any]) -> None:
        epoch = int(row["epoch"])  # type: ignore[call-overload]
        timed = seed.deadline is not None and seed.probe_s is None  # a time budget's first
        if seed.main and (epoch % seed.eval_every == 0 or epoch == seed.epochs or timed):
            probe(seed, row, epoch == seed.epochs)


def probe(seed: SeedTraining, row: Row, last: bool) -> None:
    """Probe the seed after the epoch of ``row`` (rank 0), filling the row's probe cells and
    timing it (``seed.probe_s``); ``last``: the seed's last epoch."""
    epoch = int(row["epoch"])  # type: ignore[call-overload]
    if seed.loader is not None:
        from edgegcl.memory import release_cpu_memory

        release_cpu_memory()
    start = time.monotonic()
    row.update(seed.prober.probe(epoch, seed.trainer.model, seed.x, seed.edge_index, last))
    seed.probe_s, seed.probed_at = time.monotonic() - start, epoch


class Deadline(Hook):
    """Under ``--time-budget`` (``seed.deadline`` set): after each epoch and its probe the
    seed's epochs are planned again to what fits before its part of the budget ends: its last
    epochs' median time, a probe every ``eval_every`` epochs at the last probe's time (the
    probe hook probes a budgeted seed's first epoch to measure it), the final probe kept aside
    (edgegcl.training.timebudget.epochs_that_fit), within ``--epochs`` and ``--max-steps``. An
    epoch it makes the last is probed as the last, unless it just was; under torchrun rank 0's
    plan is every rank's."""

    def epoch_end(self, seed: SeedTraining, row: Row, events: list[Any]) -> None:
        if seed.deadline is None:
            return
        epoch = int(row["epoch"])  # type: ignore[call-overload]
        epoch_s = statistics.median(seed.times[-3:])
        probe_s = seed.probe_s if seed.probe_s is not None else epoch_s
        planned = seed.most
        for _ in range(2):  # the probe interval depends on the plan, the plan on the interval
            every = probe_interval(seed.cfg.run.eval_every, planned)
            fit = epochs_that_fit(seed.deadline - time.monotonic(), epoch_s, probe_s, every)
            planned = max(epoch, min(seed.most, epoch + fit))
        if seed.world is not None:
            planned = int(seed.world.broadcast(planned))
        if planned == seed.epochs:
            return
        seed.replan(planned)
        # the last epoch's probe: a labelled one made this epoch stands (the last flag only
        # keeps an unlabelled graph's checkpoint, which costs nothing)
        if planned == epoch and seed.main and (
                seed.probed_at != epoch or getattr(seed.prober, "track", True) is None):
            probe(seed, row, True)


class EarlyStop(Hook):
    """Ends the seed once ``patience`` probes in a row have not raised its validation figure
    (the probe keeps the best checkpoint): ``seed.finished``. Read from the probe history, so
    a resumed seed that had already stopped stays stopped. An unlabelled graph has no probes
    to read: it trains every epoch."""

    def __init__(self, patience: int) -> None:
        self.patience = patience

    def _stale(self, seed: SeedTraining) -> bool:
        history = seed.prober.history
        best = next((i for i, (e, _) in enumerate(history) if e == seed.prober.best_epoch), None)
        return best is not None and len(history) - 1 - best >= self.patience

    def seed_start(self, seed: SeedTraining) -> None:
        seed.finished = seed.finished or self._stale(seed)

    def epoch_end(self, seed: SeedTraining, row: Row, events: list[Any]) -> None:
        epoch = int(row["epoch"])  # type: ignore[call-overload]
        if epoch % seed.eval_every and epoch != seed.epochs:  # no probe: nothing new to read
            return
        stale = row["val_micro_f1"] != "" and self._stale(seed)
        if seed.world is not None:  # rank 0 probes; every rank stops with it
            stale = bool(seed.world.broadcast(stale))
        seed.finished = seed.finished or stale


class _Appended(Hook):
    """A run file rewritten whole when the seed starts (what the state holds so far) and
    appended to after each epoch, on the writing rank. A disk that refuses an append is one
    line (the saved state, which a resume rewrites the file from, is intact)."""

    name = ""

    def __init__(self) -> None:
        self.fh: Any = None

    def text(self, seed: SeedTraining, row: Row | None, events: list[Any]) -> str:
        raise NotImplementedError

    def seed_start(self, seed: SeedTraining) -> None:
        # lazy: this module stays torch-free (the CLI's logger imports it); state loads torch
        from edgegcl.training.state import guard_writes, write_atomic

        if not seed.main:
            return
        path = seed.run_dir / self.name
        write_atomic(path, self.text(seed, None, []))
        refuse_link(path, "run file", UsageError)  # a link planted since is refused
        with guard_writes(path):
            self.fh = path.open("a")

    def epoch_end(self, seed: SeedTraining, row: Row, events: list[Any]) -> None:
        from edgegcl.training.state import guard_writes  # lazy: as in seed_start

        if self.fh is not None:
            with guard_writes(seed.run_dir / self.name):
                self.fh.write(self.text(seed, row, events))
                self.fh.flush()

    def seed_end(self, seed: SeedTraining) -> None:
        from edgegcl.training.state import guard_writes  # lazy: as in seed_start

        if self.fh is not None:
            fh, self.fh = self.fh, None
            with guard_writes(seed.run_dir / self.name):
                fh.close()


class EventLog(_Appended):
    """``hans_events.jsonl``: every HANS event, one JSON object a line."""

    name = runfiles.EVENTS

    def text(self, seed: SeedTraining, row: Row | None, events: list[Any]) -> str:
        return "".join(json.dumps(asdict(ev)) + "\n"
                       for ev in (seed.trainer.scheduler.events if row is None else events))


class Curve(_Appended):
    """``epochs.csv``: one row per epoch (edgegcl.training.curves)."""

    name = runfiles.EPOCHS

    def text(self, seed: SeedTraining, row: Row | None, events: list[Any]) -> str:
        return csv_text(seed.rows) if row is None else csv_text([row], header=False)


class StateSaver(Hook):
    """The seed's whole state to ``state.pt`` every ``checkpoint_every`` epochs (0: the probe
    interval), at the last epoch and when a stop was requested; every rank takes part (rank 0
    writes the others' random streams)."""

    def epoch_end(self, seed: SeedTraining, row: Row, events: list[Any]) -> None:
        run, epoch = seed.cfg.run, int(row["epoch"])  # type: ignore[call-overload]
        if (epoch % (run.checkpoint_every or seed.eval_every) == 0 or epoch == seed.epochs
                or seed.stopping or seed.finished):
            seed.save()


def _schedule_text(seed: SeedTraining, row: Row) -> str:
    """An epoch's loss and what the schedule uses: the negatives per anchor and their share of
    the budget theta_max, and, for a scheduler with hardness strata (HANS), how full each
    category's cap is (eta)."""
    hans = seed.trainer.scheduler
    what = "non-edges per masked edge" if seed.trainer.objective == "edges" else "negatives per anchor"
    text = (f"loss {float(row['loss']):.4f} | {float(row['active_per_anchor']):.0f} {what}, "  # type: ignore[arg-type]
            f"{float(row['budget_used']):.0%} of the budget")  # type: ignore[arg-type]
    if type(hans).ranks_candidates:
        text += " (" + ", ".join(f"{c} {v:.0%}" for c, v in hans.eta.items()) + " of their caps)"
    return text


class ProgressLine(Hook):
    """The progress line with its ETA on rank 0 (batches within an epoch, then the epoch's
    loss and the negatives the schedule uses), and the thread count's line once a measuring
    ``threads`` has chosen."""

    def __init__(self, label: str, threads: ThreadChoice | None = None) -> None:
        self.label, self.threads, self.bar = label, threads, None
        self.announce = False

    def seed_start(self, seed: SeedTraining) -> None:
        if seed.main and seed.most < seed.cfg.run.epochs:
            hans = seed.trainer.scheduler
            pace = ("" if hans.theta_max == 0 or not type(hans).who else
                    "; theta_max in use from the start (too few epochs for a decision)"
                    if hans.saturated_at == 0 else
                    f"; theta_max in use by epoch {hans.T_reach}"
                    if getattr(hans, "T_reach", None) is not None else "")
            say(f"{self.label}: {seed.most} epochs of {seed.steps} steps, within the "
                f"{step_bound(seed.cfg.run.max_steps, True)} steps a seed trains at most "
                f"(--max-steps; 0: all {seed.cfg.run.epochs} epochs), probed every "
                f"{seed.eval_every}{pace}")
        self.bar = Progress(seed.epochs, self.label, start=seed.trainer.epoch,
                            enabled=seed.main)
        picker = None if self.threads is None else self.threads.picker
        self.announce = seed.main and picker is not None and not picker.done

    def batch_end(self, seed: SeedTraining, epoch: int, batch: int, batches: int,
                  mean_loss: float) -> None:
        assert self.bar is not None
        self.bar.update(epoch - 1 + batch / batches,
                        f"epoch {epoch}: batch {batch}/{batches} loss {mean_loss:.4f}")

    def epoch_end(self, seed: SeedTraining, row: Row, events: list[Any]) -> None:
        assert self.bar is not None
        threads = self.threads
        if (self.announce and threads is not None and threads.picker is not None
                and threads.picker.done):
            self.bar.close()
            say(threads.line())
            self.announce = False
        self.bar.total = seed.epochs  # a time budget plans them again as the seed trains
        epoch = int(row["epoch"])  # type: ignore[call-overload]
        self.bar.update(epoch, _schedule_text(seed, row)
                        + ends_text(seed.clock, seed.epochs - epoch + seed.later))
        if seed.main and seed.cut == "time_budget" and int(row["epoch"]) == seed.epochs:  # type: ignore[call-overload]
            self.bar.close()
            say(f"{self.label}: {seed.epochs} epochs fitted in its part of the time budget "
                f"(--time-budget {seed.cfg.run.time_budget}); the checkpoint of epoch "
                f"{seed.prober.best_epoch} is kept")
        if seed.finished and seed.main:
            self.bar.close()
            say(f"{self.label}: stopped early after epoch {row['epoch']}: validation micro-F1 has "
                f"not risen for {seed.cfg.run.patience} probes; the checkpoint of epoch "
                f"{seed.prober.best_epoch} is kept")

    def seed_end(self, seed: SeedTraining) -> None:
        if self.bar is not None:
            self.bar.close()


class AfterFirstEpoch(Hook):
    """Calls ``then()`` once, when the first epoch of the run has been trained (rank 0): a
    new run directory is kept from then on, whatever happens next."""

    def __init__(self, then: Callable[[], None] | None) -> None:
        self.then = then

    def epoch_end(self, seed: SeedTraining, row: Row, events: list[Any]) -> None:
        if self.then is not None and seed.main:
            self.then()
            self.then = None


def standard_hooks(label: str, threads: ThreadChoice | None = None,
                   patience: int = 0) -> list[Hook]:
    """What every seed of ``edgegcl train`` runs, in order: the probe, the time budget's plan,
    early stopping (with ``patience``), the curve, the event log, the progress line. The state
    saver comes after a user's hooks (``edgegcl.training.seeds.train_seed``)."""
    return [Probe(), Deadline(), *([EarlyStop(patience)] if patience else []), Curve(),
            EventLog(), ProgressLine(label, threads)]
