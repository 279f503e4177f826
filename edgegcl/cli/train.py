"""``edgegcl train``: the run directory, the auto-budget choice, the lines a run says before its
first epoch and after its last, stopping on a signal, and the ranks under torchrun.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgegcl.cli.setup import Setup, calibrate, choose_threads, setup
from edgegcl.cli.signals import INTERRUPTED, StopAfterEpoch
from edgegcl.errors import UsageError
from edgegcl.training.hooks import Hook

if TYPE_CHECKING:
    from torch_geometric.data import Data

    from edgegcl.budget.profiler import Calibration
    from edgegcl.budget.profiles import DeviceProfile
    from edgegcl.training.config import TrainConfig
    from edgegcl.training.distributed import World
    from edgegcl.training.results import SeedResult
    from edgegcl.training.seed import SeedRun
    from edgegcl.training.threads import ThreadChoice


def train_command(args: argparse.Namespace) -> int:
    """``edgegcl train`` with its parsed ``args``; the exit code."""
    with ExitStack() as hold:  # the run directory's lock, released however training ends
        return _train(args, hold)


def _auto_budget_report(cal: Calibration, profile: DeviceProfile | None
                        ) -> Callable[[list[SeedResult]], dict[str, Any]]:
    """``metrics.json``'s ``auto_budget`` entry: the profiler's prediction beside training."""
    from edgegcl.budget.profiler import auto_budget_report

    assert profile is not None
    return lambda results: {"auto_budget": auto_budget_report(cal, profile, results)}


def _join_world(s: Setup) -> World | None:
    """Under torchrun: join the ranks, load the graph on each machine's local rank 0 and share
    it, and refuse full-graph mode (one line); else None. The graph loads after the ranks have
    joined, so a graph that cannot load stops every rank at once with rank 0's line (not the
    others waiting for a rank that has gone)."""
    from edgegcl.cli.setup import load_data
    from edgegcl.training.distributed import QuietUsageError, require_minibatch, share_graph, start
    from edgegcl.training.step import resolve_mode

    if s.cfg.run.mode != "auto":  # refused before joining the ranks; auto once the graph is known
        require_minibatch(s.cfg.run.mode)
    world = start(s.cfg.distributed, s.cfg.run.device)
    problem = None
    if world.local_rank == 0:
        try:
            s.data = load_data(s.cfg)
        except UsageError as exc:
            problem = str(exc)
    found = next((p for p in world.gather(problem) if p is not None), None)
    if found is not None:  # every rank stops; rank 0 says why
        raise UsageError(found) if world.is_main else QuietUsageError(found)
    s.device, s.data = world.device, share_graph(s.data, world)
    assert s.data is not None
    require_minibatch(resolve_mode(s.cfg.run.mode, s.data.num_nodes))
    return world


def _start_lines(s: Setup, cfg: TrainConfig, run_dir: Path, world: World | None,
                 cal: Calibration | None) -> None:
    """What a run says before its first epoch (rank 0): the auto-budget choice, the tuned
    defaults, HANS's pace, a fanout shorter than the GCN, the graph and the run directory."""
    from edgegcl.budget.profiler import pace_line
    from edgegcl.progress import say
    from edgegcl.training.step import resolve_mode

    data = s.data
    assert data is not None
    if cal is not None and cal.meets_target:
        say(f"training with theta_max = {cal.chosen:.2f}"
            + (f", batch size {cal.batch_size}" if cal.mode == "minibatch" else "")
            + f", {cal.logits} logits")
    if s.tuned is not None:
        say(f"{cfg.data.dataset} starts from its tuned defaults, {s.tuned.name} in the presets "
            "(chosen on validation); flags override them, --config replaces them")
    pace = pace_line(cfg)
    if pace is not None:
        say(pace)
    layers, hops = cfg.model.num_layers, len(cfg.run.fanout)
    if (resolve_mode(cfg.run.mode, data.num_nodes) == "minibatch" and not cfg.model.user_encoder
            and hops < layers):
        example = ",".join(["10"] * layers)
        what = {"gcn": "GCN", "auto": "encoder"}.get(cfg.model.encoder,
                                                     f"{cfg.model.encoder} encoder")
        say(f"warning: --fanout samples {hops} hop(s) for a {layers}-layer {what}, so its outer "
            f"layers see cut neighbourhoods; give one per layer, e.g. --fanout {example}")
    if cfg.run.patience and getattr(data, "y", None) is None:
        say(f"warning: --patience reads the validation probe, and {data.name} has no labels: "
            "every epoch trains")
    ranks = "" if world is None else (f", {world.size} processes ({world.negatives} "
                                      f"negatives, {cfg.run.batch_size} seeds per rank)")
    say(f"training on {data.name} ({data.num_nodes} nodes, {data.edge_index.size(1)} edges), "
        f"{cfg.run.seeds} seed(s){ranks}; run directory {run_dir}")


def _summary_lines(metrics: dict[str, Any], cfg: TrainConfig, run_dir: Path) -> None:
    """What a finished run prints: test micro-F1 (and the authors' protocol's), the mean
    epoch time, where the results are, and the auto-budget comparison."""
    from edgegcl.evaluation.authors import AUTHORS_LABEL
    from edgegcl.progress import say

    summary, seeds = metrics["summary"], cfg.run.seeds
    if "test_micro_f1" in summary:
        raw = summary.get("raw_features_test_micro_f1")
        print(f"test micro-F1 {_over_seeds(summary['test_micro_f1'], seeds)} (checkpoint "
              "chosen on validation)" + ("" if raw is None else
                                         f"; raw features {_figure(raw, seeds)} on the same "
                                         "splits"))
    raw_val = [s["raw_features"]["val_micro_f1"] for s in metrics["seeds"] if "raw_features" in s]
    if raw_val and statistics.fmean(raw_val) > summary["val_micro_f1"]["mean"]:
        say(f"warning: on validation the raw features ({statistics.fmean(raw_val):.2f}) score "
            f"above the embeddings ({summary['val_micro_f1']['mean']:.2f}): on this graph a "
            "classifier is better served by the features themselves (docs/encoders.md)")
    if "published_split_test_micro_f1" in summary:
        splits = summary["published_splits"]
        count = metrics["seeds"][0]["published_split"]["splits"]
        print(f"the graph's published split{'s' if len(splits) > 1 else ''} "
              f"{', '.join(map(str, splits))} of {count}: test micro-F1 "
              f"{_over_seeds(summary['published_split_test_micro_f1'], seeds)}; raw features "
              f"{_figure(summary['published_split_raw_features_test_micro_f1'], seeds)}")
    if "authors_protocol_test_micro_f1" in summary:
        print(f"{AUTHORS_LABEL}: test micro-F1 "
              f"{_over_seeds(summary['authors_protocol_test_micro_f1'], seeds)}")
    print(f"mean epoch time {summary['epoch_time_s']['mean']:.3f} s; results in {run_dir}")
    if "auto_budget" in metrics:
        from edgegcl.budget.profiler import auto_budget_line

        print(auto_budget_line(metrics["auto_budget"]))


@dataclass(frozen=True)
class _Prepared:
    """A run ready for its first epoch: the setup, this rank, the run directory and how it
    will be trained."""

    s: Setup
    cfg: TrainConfig
    world: World | None
    run_dir: Path
    started: Callable[[], None] | None  # marks a new run directory as started (rank 0)
    threads: ThreadChoice
    cal: Calibration | None


def _prepare(args: argparse.Namespace, hold: ExitStack) -> _Prepared:
    """Config, graph, ranks, run directory, thread count and (``--auto-budget``) the
    profiler's choice, with the lines a run says before it trains."""
    # under torchrun the graph loads once the ranks have joined (_join_world)
    s = setup(args, hold, graph=int(os.environ.get("WORLD_SIZE", "1")) <= 1)
    from edgegcl.training.distributed import launched, on_main
    from edgegcl.training.step import check_full_graph_memory, resolve_mode

    world = _join_world(s) if launched() else None
    cfg, data, main = s.cfg, s.data, world is None or world.is_main
    assert data is not None
    if resolve_mode(cfg.run.mode, data.num_nodes) == "full":
        check_full_graph_memory(data.num_nodes, s.device)
    starts: list[Callable[[], None]] = []  # rank 0's new directory: mark it started
    run_dir = Path(args.resume) if args.resume else on_main(
        world, partial(_new_run_dir, hold, cfg, starts))
    threads = choose_threads(s, main)
    cal = None
    if args.auto_budget:  # measured on rank 0's device, its choice used by every rank
        cal = on_main(world, lambda: calibrate(s, run_dir, "; training with it", threads))
        cfg = cfg.replace(hans={"theta_max": cal.chosen}, run={"batch_size": cal.batch_size},
                          contrast={"logits": cal.logits})
    if main:
        _start_lines(s, cfg, run_dir, world, cal)
    return _Prepared(s, cfg, world, run_dir, starts[0] if starts else None, threads, cal)


def _new_run_dir(hold: ExitStack, cfg: TrainConfig, starts: list[Callable[[], None]]) -> Path:
    """A new run directory for ``cfg`` (edgegcl.cli.rundir.new_run_dir); its start marker
    appended to ``starts``."""
    from edgegcl.cli.rundir import new_run_dir, run_name

    path, started = new_run_dir(hold, cfg.run.out, run_name(cfg.data.dataset))
    starts.append(started)
    return path


class _KeepRunDir(Hook):
    """Once an epoch is trained the new run directory is kept, whatever happens next."""

    def __init__(self, started: Callable[[], None] | None) -> None:
        self.started = started

    def epoch_end(self, seed: SeedRun, row: dict[str, object], events: list[Any]) -> None:
        if self.started is not None and seed.main:
            self.started()
            self.started = None


def _train(args: argparse.Namespace, hold: ExitStack) -> int:
    from edgegcl.training.hooks import Callback
    from edgegcl.training.logger import make_logger

    if args.auto_budget and not args.profile:
        raise UsageError("--auto-budget needs a device profile: add --profile NAME "
                         "(see 'edgegcl profiles')")
    logger = make_logger(args.logger)
    p = _prepare(args, hold)  # torch loads once the configuration is known to be good
    from edgegcl.training.distributed import RankLost
    from edgegcl.training.distributed import stop as stop_world
    from edgegcl.training.run import Stopped, run

    main = p.world is None or p.world.is_main
    if INTERRUPTED:  # a Ctrl-C while starting up that a library swallowed
        raise KeyboardInterrupt
    stop = StopAfterEpoch(p.world, main)
    hooks = [_KeepRunDir(p.started), *([] if logger is None else [Callback(logger.epoch)])]
    try:
        with stop.installed():
            metrics = run(p.cfg, p.s.data, p.run_dir, p.s.device,  # type: ignore[arg-type]
                          report=None if p.cal is None else _auto_budget_report(p.cal, p.s.profile),
                          stop=lambda: bool(stop), resume=bool(args.resume), world=p.world,
                          hooks=hooks, threads=p.threads)
    except Stopped as stopped:
        if main:
            again = "edgegcl train" if p.world is None else "torchrun ... -m edgegcl train"
            print(f"edgegcl: {stopped}; state saved; continue with: {again} --resume "
                  f"{p.run_dir}", file=sys.stderr)
        return stop.exit_code()
    except RuntimeError as exc:  # a collective failed: gloo / NCCL raise RuntimeErrors
        if p.world is None:
            raise
        lost = exc if isinstance(exc, RankLost) else p.world.lost(exc)
        print(f"edgegcl: error: {lost}; the last saved state is kept: continue with torchrun "
              f"... -m edgegcl train --resume {p.run_dir}", file=sys.stderr)
        return 1
    finally:
        stop_world()
        if logger is not None:
            logger.close()
    if main:
        _summary_lines(metrics, p.cfg, p.run_dir)
        if args.save_embeddings:
            print(f"wrote {_save_embeddings(p.run_dir, args.encoder, p.s.data)}")
    return 0


def _save_embeddings(run_dir: Path, encoder: str | None, data: Data | None) -> Path:
    """RUN_DIR/embeddings.npy from the run as ``edgegcl.load_run`` reads it back, written
    into a memory-mapped temporary (made exclusively, then renamed into place), so the
    embeddings go to the file a chunk of nodes at a time."""
    from edgegcl.nn.family import encoder_name
    from edgegcl.nn.model import npy_embeddings
    from edgegcl.training.runs import load_run
    from edgegcl_embed.files import replacing

    run = load_run(run_dir, encoder)
    data = run.graph(data)  # the graph trained on, already in memory
    target = run_dir / "embeddings.npy"
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


def _figure(figure: dict[str, float], seeds: int) -> str:
    """A figure over seeds, ``0.83 ± 0.01`` (one seed: ``0.83``)."""
    return f"{figure['mean']:.2f}" + ("" if seeds == 1 else f" ± {figure['std']:.2f}")


def _over_seeds(figure: dict[str, float], seeds: int) -> str:
    """A figure over seeds: ``0.83 ± 0.01 over 5 seeds``, or ``0.83`` for one seed (its
    spread is not measured, not zero)."""
    if seeds == 1:
        return f"{figure['mean']:.2f}"
    return f"{figure['mean']:.2f} ± {figure['std']:.2f} over {seeds} seeds"
