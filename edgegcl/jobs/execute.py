"""A training plan executed: the graph, the ranks under torchrun, a new (or resumed) run
directory, the thread count, the auto-budget's choice, the lines a run says before its first
epoch, the seeds trained (edgegcl.training.seeds.train_planned) and the run loaded back; and what a
finished run reports (``summary_lines``). The plan (edgegcl.jobs.plan) settled and checked
what the run will do, and nothing here checks it again; this is the torch side of
``edgegcl.train``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from torch_geometric.data import Data

from edgegcl import runfiles
from edgegcl.budget.profiler import Calibration, auto_budget_line, auto_budget_report
from edgegcl.contrast.reach import pace_line
from edgegcl.budget.profiles import DeviceProfile
from edgegcl.data.files import edge_reading
from edgegcl.data.folder import is_graph_folder
from edgegcl.data.columns import conform
from edgegcl.data.identity import check_identity, read_identity, recorded_columns
from edgegcl.errors import RankLost, Stopped, UsageError
from edgegcl.evaluation.authors import AUTHORS_LABEL
from edgegcl.evaluation.metrics import metric_name
from edgegcl.jobs.autobudget import calibrate
from edgegcl.jobs.plan import Plan
from edgegcl.jobs.ranks import world_size
from edgegcl.jobs.rundir import new_run_dir, run_name
from edgegcl.jobs.signals import INTERRUPTED, StopAfterEpoch
from edgegcl.jobs.start import Start, choose_threads, load_data, start
from edgegcl.nn.config import AUTO
from edgegcl.nn.family import encoder_name
from edgegcl.nn.model import npy_embeddings
from edgegcl.progress import say
from edgegcl.training.choice import planned_epochs, search_epochs
from edgegcl.training.config import TrainConfig
from edgegcl.training.distributed import (QuietUsageError, World, on_main, require_minibatch,
                                          share_graph)
from edgegcl.training.distributed import start as start_world
from edgegcl.training.distributed import stop as stop_world
from edgegcl.training.hooks import AfterFirstEpoch, Hook
from edgegcl.training.nonedges import edges_line
from edgegcl.training.placement import check_full_graph_memory, choose_mode
from edgegcl.training.results import SeedResult
from edgegcl.training.seeds import train_planned
from edgegcl.training.task import task_named
from edgegcl.training.runs import Run, load_run
from edgegcl.training.state import config_hash, write_atomic
from edgegcl.training.threads import ThreadChoice
from edgegcl.training.timebudget import RunClock, budget_line
from edgegcl_embed.files import replacing


def execute(plan: Plan, hold: ExitStack, graph: Data | None = None,
            hooks: Sequence[Hook] = (), logger: Hook | None = None,
            save_embeddings: bool = False, stop: Callable[[], bool] | None = None,
            handle_signals: bool = False) -> Run | None:
    """Train as ``plan`` says (``edgegcl.train``'s arguments; ``hold`` keeps the run
    directory's lock); the finished run, or None on a rank other than 0 under torchrun. A
    ``--time-budget`` counts from here: loading the graph and measuring threads are part of
    the wait."""
    clock = RunClock.started(plan.cfg.run.time_budget_s)
    p = _prepare(plan, graph, hold)
    return _train(p, hooks, logger, save_embeddings, stop, handle_signals, clock)


@dataclass(frozen=True)
class _Prepared:
    """A run ready for its first epoch: the start, this rank, the run directory, how it will
    be trained, and whether it resumes."""
    s: Start
    world: World | None
    run_dir: Path
    started: Callable[[], None] | None  # marks a new run directory as started (rank 0)
    threads: ThreadChoice
    cal: Calibration | None
    resume: bool


def _prepare(plan: Plan, graph: Data | None, hold: ExitStack) -> _Prepared:
    """Config, graph, ranks, run directory, thread count and (``auto_budget``) the profiler's
    choice, with the lines a run says before it trains."""
    # under torchrun the graph loads once the ranks have joined (_join_world)
    ranks = world_size() > 1
    s = start(plan, graph, load=not ranks)
    world = None
    if ranks:
        s, world = _join_world(s, graph, hold)
    cfg, data, main = s.cfg, s.data, world is None or world.is_main
    assert data is not None
    edges = cfg.resolved_objective() == "edges"
    if plan.auto_budget and edges:
        raise UsageError("--auto-budget times the two views' contrast, and this run learns "
                         "from the edges (objective edges), whose steps it does not model; drop "
                         "--auto-budget and give --theta-max (the non-edges per masked edge), "
                         "or add --objective views")
    mode = choose_mode(cfg, data, s.device)  # once: the run directory's config.toml keeps it
    if mode.need is None and mode.mode == "full":
        check_full_graph_memory(cfg, data, s.device)
    cfg = cfg.replace(run={"mode": mode.mode})
    s = replace(s, cfg=cfg)
    starts: list[Callable[[], None]] = []  # rank 0's new directory: mark it started
    run_dir = plan.resume if plan.resume is not None else on_main(
        world, partial(_new_run_dir, hold, cfg, starts))
    if plan.resume is not None:  # the run continues on its own graph, or not at all
        record = read_identity(plan.resume)
        if record is not None:  # a node table's columns, by name (every rank reads it)
            data = conform(data, recorded_columns(record))
            s = replace(s, data=data)
        on_main(world, lambda: check_identity(
            run_dir, data, "--resume", "give the run the graph it trained on (the same "
            "--dataset file or graph= as then), or start a new run", record,
            config=config_hash(cfg)))
    threads = choose_threads(s, main)
    cal = None
    if plan.auto_budget:  # measured on rank 0's device, its choice used by every rank
        cal = on_main(world, lambda: calibrate(s, run_dir, "; training with it", threads))
        s = Start(cfg.replace(schedule={"theta_max": cal.chosen}, run={"batch_size": cal.batch_size},
                              contrast={"logits": cal.logits}),
                  data, s.device, s.profile, s.tuned, s.remeasure)
    if main and getattr(data, "ids", None) is not None:  # an edge list's ids, row by row
        write_atomic(run_dir / runfiles.NODE_IDS, "".join(f"{i}\n" for i in data.ids))
    if main:
        line = mode.line()
        if line is not None:
            say(line)
        _start_lines(s, run_dir, world, cal)
    return _Prepared(s, world, run_dir, starts[0] if starts else None, threads, cal,
                     plan.resume is not None)


def _join_world(s: Start, graph: Data | None, hold: ExitStack) -> tuple[Start, World]:
    """Under torchrun: join the ranks (left in ``hold``'s exit, so that a rank refused before
    training destroys its process group instead of aborting at exit), load the graph on each
    machine's local rank 0 and share it (a graph folder: every rank maps it), and refuse
    full-graph mode (one line). The graph loads after the ranks have joined, so
    a graph that cannot load stops every rank at once with rank 0's line (not the others
    waiting for a rank that has gone)."""
    if s.cfg.run.mode == "auto":  # every rank trains a shard of each epoch's batches
        s = replace(s, cfg=s.cfg.replace(run={"mode": "minibatch"}))
    require_minibatch(s.cfg.run.mode)  # refused before joining the ranks
    world = start_world(s.cfg.distributed, s.cfg.run.device)
    hold.callback(stop_world)  # a rank that stops before training leaves the group cleanly
    problem, data = None, s.data
    # a graph folder: every rank maps it (the page cache holds one copy per machine); any
    # other graph: local rank 0 loads it and shares it (share_graph)
    mapped = graph is None and is_graph_folder(s.cfg.data.dataset)
    if (world.local_rank == 0 or mapped) and data is None:
        try:
            data = load_data(s.cfg)
        except UsageError as exc:
            problem = str(exc)
    found = next((p for p in world.gather(problem) if p is not None), None)
    if found is not None:  # every rank stops; rank 0 says why
        raise UsageError(found) if world.is_main else QuietUsageError(found)
    data = data if graph is not None or mapped else share_graph(data, world)
    assert data is not None
    return s.with_data(data, world.device), world


def _start_lines(s: Start, run_dir: Path, world: World | None, cal: Calibration | None) -> None:
    """What a run says before its first epoch (rank 0): the auto-budget choice, the tuned
    defaults, HANS's pace, a fanout shorter than the GCN, the graph and the run directory."""
    cfg, data = s.cfg, s.data
    assert data is not None
    if cal is not None and cal.meets_target:
        say(f"training with theta_max = {cal.chosen:.2f}"
            + (f", batch size {cal.batch_size}" if cal.mode == "minibatch" else "")
            + f", {cal.logits} logits")
    task = task_named(cfg.run.task)
    if s.tuned is not None:
        whose = task.preset_owner(cfg.data.dataset)
        say(f"{whose} starts from its tuned defaults, {s.tuned.name} in the presets "
            "(chosen on validation); flags override them, --config replaces them")
    pace = pace_line(cfg.schedule, cfg.hans, cfg.run.epochs, bool(cfg.run.time_budget))
    if pace is not None:
        say(pace)
    if cfg.run.time_budget:
        say(budget_line(cfg.run.time_budget, cfg.run.seeds, cfg.run.epochs))
    if cfg.resolved_objective() == "edges":
        say(edges_line(cfg))
    layers, hops = cfg.model.num_layers, len(cfg.run.fanout)
    if (cfg.run.mode == "minibatch" and not cfg.model.user_encoder
            and hops < layers):
        example = ",".join(["10"] * layers)
        what = {"gcn": "GCN", "auto": "encoder"}.get(cfg.model.encoder,
                                                     f"{cfg.model.encoder} encoder")
        say(f"warning: --fanout samples {hops} hop(s) for a {layers}-layer {what}, so its outer "
            f"layers see cut neighbourhoods; give one per layer, e.g. --fanout {example}")
    judged = task.start_line(data, cfg.run.metric)
    if judged is not None:
        say(judged)
    if cfg.run.patience and getattr(data, "y", None) is None:
        say(f"warning: --patience reads the validation probe, and {data.name} has no labels: "
            "every epoch trains")
    say(plan_line(cfg))
    ranks = "" if world is None else (f", {world.size} processes ({world.negatives} "
                                      f"negatives, {cfg.run.batch_size} seeds per rank)")
    say(f"training on {data.name} ({data.num_nodes} nodes, {data.edge_index.size(1)} edges, "
        f"{edge_reading(data)}), "
        f"{cfg.run.seeds} seed(s){ranks}; run directory {run_dir}")


def plan_line(cfg: TrainConfig) -> str:
    """What the run will train, before it starts: its seeds, each one's encoder search (its
    candidates and their epochs) and epochs, and the epochs in all (the progress line tells
    when the run ends from the pace of those trained).

    Example:
        >>> plan_line(TrainConfig(encoder="auto", epochs=300, seeds=2))
        'plan: 2 seed(s), each choosing its encoder first (gcn, ego, poly, 80 epochs each, unless a measured signal settles it: docs/encoders.md), then training 300 epochs: at most 1080 epochs in all'
    """
    seeds, epochs = cfg.run.seeds, cfg.run.epochs
    search = ""
    if cfg.model.encoder == AUTO:
        search = (f"choosing its encoder first ({', '.join(cfg.model.candidates())}, "
                  f"{search_epochs(cfg)} epochs each, unless a measured signal settles it: "
                  "docs/encoders.md), then ")
    cut = " (fewer where --time-budget cuts them)" if cfg.run.time_budget else ""
    return (f"plan: {seeds} seed(s), each {search}training {epochs} epochs{cut}: at most "
            f"{seeds * planned_epochs(cfg)} epochs in all")


def _new_run_dir(hold: ExitStack, cfg: TrainConfig, starts: list[Callable[[], None]]) -> Path:
    """A new run directory for ``cfg`` (edgegcl.jobs.rundir.new_run_dir); its start marker
    appended to ``starts``."""
    path, started = new_run_dir(hold, cfg.run.out, run_name(cfg.data.dataset))
    starts.append(started)
    return path


def _auto_budget_report(cal: Calibration, profile: DeviceProfile | None
                        ) -> Callable[[list[SeedResult]], dict[str, Any]]:
    """``metrics.json``'s ``auto_budget`` entry: the profiler's prediction beside training."""
    assert profile is not None
    return lambda results: {"auto_budget": auto_budget_report(cal, profile, results)}


def _train(p: _Prepared, hooks: Sequence[Hook], logger: Hook | None, save_embeddings: bool,
           stop: Callable[[], bool] | None, handle_signals: bool, clock: RunClock
           ) -> Run | None:
    main = p.world is None or p.world.is_main
    if INTERRUPTED:  # a Ctrl-C while starting up that a library swallowed
        raise KeyboardInterrupt
    signals = StopAfterEpoch(p.world, main)
    first = AfterFirstEpoch(p.started)
    every = [first, *([] if logger is None else [logger]), *hooks]
    asked = (lambda: bool(signals) or (stop is not None and stop()))
    try:
        with signals.installed() if handle_signals else ExitStack():
            train_planned(p.s.cfg, p.s.data, p.run_dir, p.s.device,  # type: ignore[arg-type]
                      report=None if p.cal is None else _auto_budget_report(p.cal,
                                                                            p.s.profile),
                      stop=asked, resume=p.resume, world=p.world, hooks=every,
                      threads=p.threads, clock=clock, source=p.s.source)
    except Stopped as stopped:  # a new directory before its first epoch is removed: no run_dir
        if stopped.searched and first.then is not None:  # the search's figures keep it
            first.then()
            first.then = None
        kept = p.resume or first.then is None
        raise Stopped(stopped.seed, stopped.epoch, p.run_dir if kept else None,
                      signals.signals[0] if signals.signals else None,
                      stopped.searched) from None
    except RuntimeError as exc:  # a collective failed: gloo / NCCL raise RuntimeErrors
        if p.world is None:
            raise
        lost = exc if isinstance(exc, RankLost) else p.world.lost(exc)
        lost.run_dir = p.run_dir
        raise lost from None
    finally:
        stop_world()
    if not main:
        return None
    encoder = p.s.cfg.model.encoder if p.s.cfg.model.user_encoder else None
    run = load_run(p.run_dir, encoder)
    if save_embeddings:
        _save_embeddings(run, p.s.data)
    return run


def _save_embeddings(run: Run, data: Data | None) -> Path:
    """RUN_DIR/embeddings.npy from the run as ``edgegcl.load_run`` reads it back, of the graph
    the kept seed trained on (a link run's: without its held-out edges, edgegcl.training.task),
    written into a memory-mapped temporary (made exclusively, then renamed into place), so the
    embeddings go to the file a chunk of nodes at a time."""
    task = task_named(run.config.run.task)
    data = run.graph(data)  # the graph loaded for the run, already in memory
    data = task.training_graph(data, task.held_out(data, run.seed))
    target = run.path / runfiles.EMBEDDINGS
    fix = "free space, or train without --save-embeddings"
    with replacing([target], UsageError, fix) as (tmp,):
        if encoder_name(run.encoder) is not None:  # built in: its width is out_dim
            out = npy_embeddings(tmp, data.num_nodes, run.config.model.out_dim)
            run.embed(data, out=out)
        else:  # another encoder's width is known once it has run
            z = run.embed(data)
            out = npy_embeddings(tmp, z.size(0), z.size(1))
            out.copy_(z)
            del z
        del out  # the mapping closes: every page is in the file before it is renamed
    return target


def summary_lines(metrics: dict[str, Any], run_dir: Path) -> list[tuple[bool, str]]:
    """What a finished run reports, as (is a warning, line): test micro-F1 (and the
    authors' protocol's), the raw features beside it, the mean epoch time and the auto-budget
    comparison; warnings go to stderr."""
    summary, seeds = metrics["summary"], len(metrics["seeds"])
    lines: list[tuple[bool, str]] = []
    metric = summary.get("metric", "micro_f1")
    key, name = f"test_{metric}", metric_name(metric)
    if key in summary:
        raw = summary.get(f"raw_features_{key}")
        line = (f"test {name} {_over_seeds(summary[key], seeds)} (checkpoint chosen on "
                f"validation {name})"
                + ("" if raw is None else f"; raw features {_figure(raw, seeds)} on the same "
                   "splits"))
        if "test_ap" in summary:  # links: the chosen scorer, AP, Hits@50, the heuristic
            scorers = sorted({s.get("scorer", "") for s in metrics["seeds"]} - {""})
            hits = ("Hits@50 " + _figure(summary["test_hits@50"], seeds)
                    if "test_hits@50" in summary else
                    "Hits@50 not measured (fewer than 50 test non-edges)")
            line += (f"; scorer {', '.join(scorers)} (chosen on validation); AP "
                     f"{_figure(summary['test_ap'], seeds)}, {hits}")
            if "adamic_adar_test_auc" in summary:
                line += (f"; Adamic-Adar AUC "
                         f"{_figure(summary['adamic_adar_test_auc'], seeds)}")
        elif metric != "micro_f1":
            line += f"; micro-F1 {_figure(summary['test_micro_f1'], seeds)}"
        if "majority_rate" in summary:
            line += f" (the majority class alone: {_figure(summary['majority_rate'], seeds)})"
        lines.append((False, line))
    val_key = f"val_{metric}"
    raw_val = [s["raw_features"][val_key] for s in metrics["seeds"]
               if val_key in s.get("raw_features", {})]
    if raw_val and val_key in summary and statistics.fmean(raw_val) > summary[val_key]["mean"]:
        lines.append((True, f"warning: on validation the raw features "
                            f"({statistics.fmean(raw_val):.2f}) score above the embeddings "
                            f"({summary[val_key]['mean']:.2f}, {name}): on this graph a "
                            "classifier is better served by the features themselves "
                            "(docs/encoders.md)"))
    if f"published_split_{key}" in summary:
        splits = summary["published_splits"]
        count = metrics["seeds"][0]["published_split"]["splits"]
        lines.append((False, f"the graph's published split{'s' if len(splits) > 1 else ''} "
                             f"{', '.join(map(str, splits))} of {count}: test {name} "
                             f"{_over_seeds(summary[f'published_split_{key}'], seeds)}; "
                             "raw features "
                             f"{_figure(summary[f'published_split_raw_features_{key}'], seeds)}"))
    if "authors_protocol_test_micro_f1" in summary:
        lines.append((False, f"{AUTHORS_LABEL}: test micro-F1 "
                             f"{_over_seeds(summary['authors_protocol_test_micro_f1'], seeds)}"))
    lines.append((False, f"mean epoch time {summary['epoch_time_s']['mean']:.3f} s; results in "
                         f"{run_dir}"))
    if "auto_budget" in metrics:
        lines.append((False, auto_budget_line(metrics["auto_budget"])))
    return lines


def _figure(figure: dict[str, float], seeds: int) -> str:
    """A figure over seeds, ``0.83 ± 0.01`` (one seed: ``0.83``)."""
    return f"{figure['mean']:.2f}" + ("" if seeds == 1 else f" ± {figure['std']:.2f}")


def _over_seeds(figure: dict[str, float], seeds: int) -> str:
    """A figure over seeds: ``0.83 ± 0.01 over 5 seeds``, or ``0.83`` for one seed (its
    spread is not measured, not zero)."""
    if seeds == 1:
        return f"{figure['mean']:.2f}"
    return f"{figure['mean']:.2f} ± {figure['std']:.2f} over {seeds} seeds"
