"""``encoder = "auto"``: each seed's encoder chosen by measurement, before it trains.

The task decides first where a measured signal settles the encoder without a search
(edgegcl.training.task: ``clear_choice``): for node labels, training and validation nodes
that clearly keep to their class (the adjusted homophily less two standard errors at least
``HOMOPHILY_THRESHOLD``) keep the GCN; for links, training edges whose endpoints' features
clearly agree (at least ``AGREEMENT_THRESHOLD``). The search chose the GCN on every such graph
measured (docs/encoders.md).

Any other graph the task can judge (``labelled``): a short search. Each of
``search_encoders`` trains ``search_epochs`` epochs (the task's ``search_share`` of the run's:
a quarter for node labels, a tenth for links, to a probe epoch) from the seed's own
initialisation, probed every ``eval_every`` epochs on the seed's validation nodes or pairs
(test ones are never looked at); the best validation figure of the run's metric wins when it
beats the first candidate (the GCN) by more than one standard error of that figure, else the
first stays (``pick``). The search's runs are thrown away and the seed trains the winner from
its start: an ``auto`` seed is, epoch for epoch, the run of the encoder it chose, plus the
search's time.

A graph without labels: a label-free signal, how much more alike the features of linked
nodes are than those of random pairs (edgegcl.data.homophily.feature_agreement), picks the GCN
when linked nodes clearly agree and the ego encoder, which keeps each node's own
representation beside its neighbours', otherwise (docs/encoders.md has the table the
threshold comes from).

Either way the choice is one line and a record in the seed's state and the run's metrics
(``EncoderChoice``); a resumed seed keeps its recorded choice.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch_geometric.data import Data

from edgegcl.data.homophily import feature_agreement
from edgegcl.progress import say
from edgegcl_embed.progress import Progress
from edgegcl.nn.config import AUTO
from edgegcl.training.config import TrainConfig
from edgegcl.training.distributed import World
from edgegcl.training.results import AGREEMENT_THRESHOLD, EncoderChoice
from edgegcl.training.searchrecord import SearchRecord, read_search
from edgegcl.training.seed import SeedTraining
from edgegcl.training.threads import ThreadChoice
from edgegcl.training.task import task_named
from edgegcl.training.timebudget import RunClock, ends_text, epochs_that_fit, probe_interval

__all__ = ["EncoderChoice", "choose_encoder", "planned_epochs", "search_epochs"]


def search_epochs(cfg: TrainConfig, epochs: int | None = None) -> int:
    """Epochs each candidate of the search trains: ``search_epochs``, else a quarter of the
    seed's ``epochs`` (default ``--epochs``; fewer where ``--max-steps`` cuts them; the task's
    ``search_share``: a tenth for links) rounded up to a probe epoch (a multiple of ``eval_every``, so the
    winner's probes fall where a run of it alone probes), within 1 .. the seed's."""
    epochs = cfg.run.epochs if epochs is None else epochs
    every = (cfg.run.eval_every if epochs == cfg.run.epochs else  # a cut seed's probes
             probe_interval(cfg.run.eval_every, epochs))
    share = task_named(cfg.run.task).search_share
    wanted = cfg.model.search_epochs or every * math.ceil(epochs * share / every)
    return max(1, min(wanted, epochs))


def planned_epochs(cfg: TrainConfig) -> int:
    """The epochs a seed of ``cfg`` plans: ``--epochs``, and for ``encoder = "auto"`` each
    candidate's ``search_epochs`` (at most: a measured signal may settle it without one)."""
    search = len(cfg.model.candidates()) * search_epochs(cfg) if cfg.model.encoder == AUTO else 0
    return cfg.run.epochs + search


def choose_encoder(data: Data, cfg: TrainConfig, seed: int, device: torch.device,
                   run_dir: Path, label: str, world: World | None = None,
                   threads: ThreadChoice | None = None,
                   stop: Callable[[], bool] | None = None,
                   end: float | None = None, resume: bool = False,
                   clock: RunClock | None = None, later: int = 0) -> EncoderChoice | None:
    """Seed ``seed``'s encoder for an ``auto`` configuration: the search's winner on a
    labelled graph, the label-free signal's pick otherwise; the line saying it is printed
    (rank 0). The search's runs are thrown away: the seed then trains its encoder from the
    start, exactly as a run that names it does. ``stop`` is polled after every epoch of the
    search; None when it asked to stop (every rank, under torchrun). ``end``
    (``time.monotonic``): when the search must be over (a time budget's share), the
    candidates sharing what is left evenly. ``clock``: the run's, which counts the search's
    epochs; ``later``: the epochs of the seeds after this one (the run's end, on the search's
    progress line)."""
    candidates = cfg.model.candidates()
    main = world is None or world.is_main
    task = task_named(cfg.run.task)
    labelled = task.labelled(data)
    clear = task.clear_choice(data, candidates, seed) if labelled else None
    if clear is not None:
        choice = clear
    elif labelled and len(candidates) > 1:
        choice = _search(data, cfg, seed, device, run_dir, label, world, threads, stop, end,
                         resume, clock, later)
        if choice is None:
            return None
    else:
        agreement = feature_agreement(data.x, data.edge_index)
        name = "gcn" if agreement >= AGREEMENT_THRESHOLD else "ego"
        choice = EncoderChoice(name if name in candidates else candidates[0], "signal",
                               agreement=agreement)
    if main:
        say(f"{label}: {choice.line()}")
    return choice


def _search(data: Data, cfg: TrainConfig, seed: int, device: torch.device, run_dir: Path,
            label: str, world: World | None, threads: ThreadChoice | None,
            stop: Callable[[], bool] | None, end: float | None,
            resume: bool = False, clock: RunClock | None = None,
            later: int = 0) -> EncoderChoice | None:
    """Train each candidate ``search_epochs`` epochs from the seed's initialisation (fewer
    when its share of the time to ``end`` runs out), probing its validation figure (the run's
    metric) as a run does; the best (the first of equals) and the record. After each
    candidate the figures so far are saved in the seed's ``search.json``; with ``resume`` a
    saved record's finished candidates are read back, not trained again."""
    candidates = cfg.model.candidates()
    main = world is None or world.is_main
    start = time.perf_counter()
    saved = read_search(run_dir) if resume and main else None
    if world is not None:
        saved = world.broadcast(saved)
    if saved is not None and saved.candidates != candidates:
        saved = None  # another plan: the search starts again (the config is checked on resume)
    record = saved or SearchRecord(candidates, 0)
    before = record.seconds  # what the saved search had already spent
    announce = (main and threads is not None and threads.picker is not None
                and not threads.picker.done)  # the thread count's line, once it is measured
    if saved is not None and saved.scores and main:
        say(f"{label}: the encoder search goes on from its saved figures ({saved.kept()})")
    remaining = record.remaining()
    for i, name in enumerate(remaining):
        training = SeedTraining(data, cfg, seed, device, run_dir, world, threads, encoder=name,
                                clock=clock)
        planned = search_epochs(cfg, training.most)  # within the seed's epochs (--max-steps)
        if not record.epochs:
            record.epochs = record.trained = planned
        elif record.epochs != planned:  # --epochs changed on --resume: measured for another plan
            del training
            if main:
                say(f"{label}: the saved search trained {record.epochs} epochs a candidate and "
                    f"this run plans {planned}: it starts again")
            return _search(data, cfg, seed, device, run_dir, label, world, threads, stop, end,
                           clock=clock, later=later)
        epochs = record.epochs
        bar = Progress(epochs, f"{label}: choosing the encoder, {name}", enabled=main)
        share = None if end is None else time.monotonic() + max(
            0.0, end - time.monotonic()) / (len(remaining) - i)
        probe_s: float | None = None
        for epoch in range(1, epochs + 1):
            row, _ = training.epoch(epoch)
            last = epoch == epochs or (share is not None and _out_of_time(
                share, training.times, probe_s, training.eval_every, world))
            if main and (epoch % training.eval_every == 0 or last):
                probed = time.monotonic()
                row.update(training.prober.probe(epoch, training.trainer.model, training.x,
                                                 training.edge_index, epoch == cfg.run.epochs))
                probe_s = time.monotonic() - probed
            if announce and threads is not None and threads.picker.done:  # type: ignore[union-attr]
                bar.close()
                say(threads.line())
                announce = False
            left = (epochs - epoch + (len(remaining) - i - 1) * epochs + training.most + later)
            bar.update(epoch, f"loss {float(row['loss']):.4f}"  # type: ignore[arg-type]
                       + ends_text(clock, left))
            stopping = stop is not None and stop()
            if world.any(stopping) if world is not None else stopping:
                bar.close()
                return None
            if last:
                record.trained = min(record.trained, epoch)
                break
        bar.close()
        best = float(training.prober.best_val)
        score = best if main and math.isfinite(best) else 0.0
        record.scores[name] = world.broadcast(score) if world is not None else score
        if name == candidates[0]:  # the reference's spread: the margin to beat it by
            record.margin = training.prober.standard_error(record.scores[name])
            record.metric = training.prober.metric
        del training
        if main:
            record.seconds = before + time.perf_counter() - start
            record.save(run_dir)
    assert record.margin is not None
    return EncoderChoice(pick(record.scores, candidates, record.margin), "search",
                         record.scores, record.trained, before + time.perf_counter() - start,
                         margin=record.margin, metric=record.metric)


def _out_of_time(share: float, times: list[float], probe_s: float | None, every: int,
                 world: World | None) -> bool:
    """Whether a candidate's next epoch and its final probe no longer fit before ``share``
    ends (the last epoch's time, the last probe's or, before one, an epoch's); rank 0's
    answer on every rank."""
    epoch_s = times[-1]
    late = epochs_that_fit(share - time.monotonic(), epoch_s,
                           epoch_s if probe_s is None else probe_s, every) < 1
    return bool(world.broadcast(late)) if world is not None else late


def pick(scores: dict[str, float], candidates: list[str], margin: float) -> str:
    """The search's choice: the best validation micro-F1, unless it beats the first candidate
    (the reference, the paper's GCN by default) by no more than ``margin`` (one standard
    error of the reference's figure: the one-standard-error rule, which keeps the reference
    where the search cannot tell them apart); ties go to the earlier candidate.

    Example:
        >>> pick({"gcn": 86.7, "ego": 87.5, "poly": 65.2}, ["gcn", "ego", "poly"], 2.1)
        'gcn'
        >>> pick({"gcn": 29.7, "ego": 36.2, "poly": 37.6}, ["gcn", "ego", "poly"], 1.7)
        'poly'
    """
    best = max(candidates, key=lambda name: (scores[name], -candidates.index(name)))
    reference = candidates[0]
    return best if scores[best] - scores[reference] > margin else reference
