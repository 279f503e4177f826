"""The ``edgegcl`` command line. Usage errors print one line and exit with code 2.

Importing this module loads the standard library alone, and so does building the parser: a
subcommand's options that need the library (``train``'s one flag per config field, ``export``'s
opset range) are added when that subcommand is parsed (``_Parser``'s ``options``). So
``--version``, ``--help``, ``profiles``, ``plot``'s errors and the errors of the command line
itself answer before torch is imported; torch loads inside ``main``, so that Ctrl-C while it
loads is one line and exit code 130 too.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from edgegcl import __version__
from edgegcl.errors import UsageError

if TYPE_CHECKING:
    import torch
    from torch_geometric.data import Data

    from edgegcl.budget.profiler import Calibration
    from edgegcl.budget.profiles import DeviceProfile
    from edgegcl.training.config import TrainConfig
    from edgegcl.training.distributed import World
    from edgegcl.training.results import SeedResult
    from edgegcl.training.threads import ThreadChoice

class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (no usage dump) with exit code 2.

    ``options``: adds the parser's arguments when it first parses (a subcommand's parser
    parses only when that subcommand is named, its ``--help`` included), so that what they
    import loads only for the subcommand that needs it.
    """

    def __init__(self, *args: Any,
                 options: Callable[[argparse.ArgumentParser], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._options = options

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        if self._options is not None:
            options, self._options = self._options, None
            options(self)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"edgegcl: error: {message} (see '{self.prog} --help')\n")


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    """``--config`` and one flag per option of every section (flags win over the file)."""
    from edgegcl.config import flag, section_fields
    from edgegcl.training.config import SECTIONS, TrainConfig

    p.add_argument("--config", metavar="FILE.toml|PRESET",
                   help="TOML file setting any of the options below (flags win), or a shipped "
                        "preset: paper-Cora, paper-CiteSeer (the paper's settings, presets/)")
    defaults = TrainConfig()
    groups = {name: p.add_argument_group(f"{name}: {what}") for name, what in SECTIONS.items()}
    from edgegcl.contrast.scheduler import scheduler_names

    members = {"scheduler": f"; every member: {', '.join(scheduler_names())}"}
    for name, (section, f) in section_fields(TrainConfig).items():
        kind = {"int": int, "float": float}.get(str(f.type), str)
        groups[section].add_argument(
            flag(name), dest=name, type=kind, default=None, metavar=name.upper(),
            help=f"{f.metadata['help']}{members.get(name, '')} (default: "
                 f"{_flag_form(name, defaults)})")


def _flag_form(name: str, cfg: TrainConfig) -> str:
    """An option's value as its flag is written (``20,30,50`` for the ratios)."""
    from edgegcl.config import flag_form
    from edgegcl.training.config import format_ratios

    value = getattr(cfg, name)
    return format_ratios(value) if name == "ratios" else flag_form(value)


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train AdNGCL with HANS and evaluate it",
                       description="Train AdNGCL with HANS; writes config, metrics, the HANS "
                                   "event log and checkpoints into a run directory.",
                       options=_train_options)
    p.set_defaults(func=_cmd_train)


def _train_options(p: argparse.ArgumentParser) -> None:
    from edgegcl.training.logger import LOGGERS
    from edgegcl.training.state import RESUMABLE

    p.add_argument("--profile", metavar="NAME|FILE.toml",
                   help="device profile (see 'edgegcl profiles'): trains on its device")
    p.add_argument("--auto-budget", action="store_true",
                   help="with --profile: measure theta_max on the device first (measurements "
                        "are cached) and train with the largest that fits the profile's memory "
                        "and epoch-time budgets, or, when none meets the epoch time, the "
                        "fastest that fits in memory")
    _add_budget_flags(p)
    p.add_argument("--logger", choices=LOGGERS, default=LOGGERS[0],
                   help="where the per-epoch rows and HANS events go besides the run "
                        "directory's files: none, or tensorboard (event files in each "
                        "RUN_DIR/seed-K; 'tensorboard --logdir RUN_DIR'; needs the tensorboard "
                        "extra) (default: none)")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a stopped or crashed run from its seeds' saved state; only "
                        f"{', '.join('--' + f.replace('_', '-') for f in RESUMABLE)} (and "
                        "--logger) may change")
    _add_config_flags(p)


def _add_budget_flags(p: argparse.ArgumentParser) -> None:
    """``--target-epoch-s`` and ``--memory-gib``: a profile's budgets from the command line."""
    p.add_argument("--target-epoch-s", type=float, metavar="SECONDS",
                   help="with --profile: the epoch time to meet, instead of the profile's "
                        "target_epoch_s")
    p.add_argument("--memory-gib", type=float, metavar="GIB",
                   help="with --profile: the memory training may use, in GiB, instead of the "
                        "profile's memory_budget_gib (its headroom still applies)")
    p.add_argument("--remeasure", action="store_true",
                   help="with --profile: measure every theta_max again instead of reading the "
                        "profile cache, and replace what the cache holds")


def _add_profile(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="measure epoch time and memory per theta_max on a device",
                       description="Run the resource profiler alone: per theta_max, the epoch "
                                   "latency and peak memory on the profile's device, and the "
                                   "largest theta_max within its budgets (no training).",
                       options=_profile_options)
    p.set_defaults(func=_cmd_profile)


def _profile_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", metavar="NAME|FILE.toml", required=True,
                   help="device profile (see 'edgegcl profiles')")
    _add_budget_flags(p)
    _add_config_flags(p)


def _saved_config(run_dir: Path) -> dict[str, Any]:
    """RUN_DIR/config.toml's values, refused in one line when fields are missing (a
    truncated file; defaults in their place would train another configuration)."""
    from edgegcl.config import NEWER_THAN_HARD_PICK
    from edgegcl.tomlfile import read_toml
    from edgegcl.training.config import FIELDS, load_toml

    path = run_dir / "config.toml"
    saved = load_toml(path)
    raw = read_toml(path, f"config file {path}", "restore it")  # load_toml has read it
    named = set(raw) | {k for v in raw.values() if isinstance(v, dict) for k in v}
    newer = NEWER_THAN_HARD_PICK if "hard_pick" in named else ()
    missing = [name for name, f in FIELDS.items() if name not in saved and name not in newer
               and not f.metadata["omit_default"]]
    if missing:
        more = f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        raise UsageError(f"{path} lacks {', '.join(missing[:4])}{more}: it is truncated or "
                         "not edgegcl's; restore it from a copy, or start a new run (nothing "
                         "was written)")
    return saved


def _resume_values(args: argparse.Namespace, flags: dict[str, object],
                   hold: ExitStack) -> dict[str, object]:
    """The saved configuration of ``--resume RUN_DIR``, after checking that the flags agree
    with it (only RESUMABLE fields may change) and that the run has something left to do.
    The run directory is locked (``hold`` keeps the lock) before its files are read."""
    from edgegcl.training.config import TrainConfig, coerce
    from edgegcl.training.state import RESUMABLE, RunLock

    run_dir = Path(args.resume)
    may_change = f"on --resume only {', '.join('--' + f for f in RESUMABLE)} may change"
    if not (run_dir / "config.toml").is_file():
        raise UsageError(f"{run_dir} is not an edgegcl run directory (no config.toml); pass "
                         "the --out of an earlier edgegcl train")
    if args.config or args.profile or args.auto_budget:
        raise UsageError("--resume takes the run's saved configuration: drop --config, "
                         "--profile and --auto-budget")
    if "out" in flags and Path(str(flags["out"])).resolve() != run_dir.resolve():
        raise UsageError(f"--resume continues {run_dir} where it is: drop --out "
                         f"{flags['out']} ({may_change}; copy the directory to move it)")
    if os.environ.get("RANK", "0") == "0":  # under torchrun rank 0 alone writes
        hold.enter_context(RunLock(run_dir))
    saved = _saved_config(run_dir)
    defaults = TrainConfig()
    for name, value in flags.items():
        before = saved.get(name, getattr(defaults, name))
        if name not in RESUMABLE and name != "out" and coerce(name, value) != before:
            raise UsageError(f"--{name.replace('_', '-')} {value} contradicts the run in "
                             f"{run_dir} ({_flag_form(name, replace(defaults, **{name: before}))}"
                             f"); {may_change}")
    values = {**saved, **{k: v for k, v in flags.items() if k in RESUMABLE}}
    epochs = int(values.get("epochs", defaults.epochs))  # type: ignore[arg-type]
    if (run_dir / "metrics.json").exists() and epochs <= int(saved.get("epochs", defaults.epochs)):
        raise UsageError(f"{run_dir} is a finished run (metrics.json is written); pass a larger "
                         "--epochs to train on, or start a new run")
    return {**values, "out": str(run_dir)}


@dataclass
class _Setup:
    cfg: TrainConfig
    data: Data | None
    device: torch.device
    profile: DeviceProfile | None
    tuned: Path | None = None  # the dataset's tuned defaults the config started from
    remeasure: bool = False  # --remeasure: the profile cache is measured anew


def _setup(args: argparse.Namespace, hold: ExitStack, graph: bool = True) -> _Setup:
    """Config (file, else the dataset's tuned defaults; then flags), device (the profile's,
    when one is given) and, with ``graph``, the graph; the allocator set to reuse freed pages
    (edgegcl.memory.reuse_freed_memory). A resumed run is locked (in ``hold``) before its
    files are read, and refused if they cannot continue (edgegcl.training.resume.check_resume)."""
    from edgegcl.budget.profiles import check_device_present, load_profile, with_budgets
    from edgegcl.training.config import FIELDS, build, load_toml, tuned_defaults, unused_settings
    from edgegcl.data import load_graph
    from edgegcl.memory import reuse_freed_memory
    from edgegcl.nn.encoders import check_model_size
    from edgegcl.trust import allow_encoder
    from edgegcl.training.resume import check_resume
    from edgegcl.training.step import resolve_device

    if not args.profile and (args.target_epoch_s, args.memory_gib) != (None, None):
        raise UsageError("--target-epoch-s and --memory-gib replace a device profile's "
                         "budgets: add --profile NAME (see 'edgegcl profiles')")
    if not args.profile and args.remeasure:
        raise UsageError("--remeasure measures a device profile's budgets again: add --profile "
                         "NAME (see 'edgegcl profiles')")
    reuse_freed_memory()

    flags = {name: getattr(args, name) for name in FIELDS if getattr(args, name) is not None}
    if "encoder" in flags:  # named here: files may name it too; as the run directory records it
        flags["encoder"] = allow_encoder(str(flags["encoder"]))
    tuned = None
    if getattr(args, "resume", None):
        cfg = build(_resume_values(args, flags, hold), {})
    elif args.config:
        cfg = build(load_toml(args.config), flags)
    else:
        tuned, values = tuned_defaults(flags.get("dataset", ""))
        cfg = build(values, flags)
    gcn_only = [name for name in flags if name in cfg.model.unused()]
    if gcn_only:  # another encoder has widths of its own
        raise UsageError(f"{', '.join('--' + n.replace('_', '-') for n in gcn_only)}: --encoder "
                         f"{cfg.model.encoder} does not use the built-in GCN's widths and "
                         "activation; set them in the encoder's function, or drop them")
    unused = [name for name in flags if name in unused_settings(cfg)]
    if unused:  # an option that would do nothing is refused, not ignored
        named = ", ".join("--" + name.replace("_", "-") for name in unused)
        it = "it" if len(unused) == 1 else "them"
        raise UsageError(f"{named}: --scheduler {cfg.hans.scheduler} does not use {it} (HANS's "
                         f"settings it does without); add --scheduler hans, or drop {it}")
    profile = load_profile(args.profile) if args.profile else None
    if profile is not None:
        profile = with_budgets(profile, args.target_epoch_s, args.memory_gib)
        check_device_present(profile)
        if cfg.run.device != "auto" and not cfg.run.device.startswith(profile.device):
            raise UsageError(f"--device {cfg.run.device} contradicts profile {profile.name} "
                             f"(device {profile.device}); drop --device or pick another profile")
        if cfg.run.device == "auto":
            cfg = replace(cfg, device=profile.device)
    device = resolve_device(cfg.run.device)
    data = (load_graph(cfg.data.dataset, cfg.data.root or None, cfg.synthetic_spec())
            if graph else None)
    if data is not None and not cfg.model.encoder:
        check_model_size(data.x.size(1), cfg.model)
    if getattr(args, "resume", None):  # refused here, before the run is announced
        check_resume(Path(args.resume), cfg, None if data is None else data.x.size(1),
                     int(os.environ.get("WORLD_SIZE", "1")))
    return _Setup(cfg, data, device, profile, tuned, args.remeasure)


def _calibrate(s: _Setup, run_dir: Path, then: str = "",
               threads: ThreadChoice | None = None) -> Calibration:
    """The profiler under ``s``'s profile, its table and choice printed and kept
    (edgegcl.cli.autobudget); a measuring ``threads`` chooses the thread count first."""
    from edgegcl.cli.autobudget import calibrate_and_report

    assert s.profile is not None and s.data is not None
    return calibrate_and_report(s.data, s.cfg, s.profile, s.device, run_dir, then,
                                s.remeasure, threads)


def _threads(s: _Setup, main: bool = True) -> ThreadChoice:
    """How this run sets torch's threads: ``--threads``, else the profile's ``threads``,
    else edgegcl.training.threads.resolve_threads's default; its line printed (rank 0) unless
    the count is still to be measured (then the line comes once it is)."""
    from edgegcl.training.threads import resolve_threads

    count = s.cfg.run.threads or (s.profile.threads if s.profile is not None else 0)
    choice = resolve_threads(count, s.device)
    if choice.picker is None and main:
        print(f"edgegcl: {choice.line()}", file=sys.stderr)
    return choice


def _cmd_profile(args: argparse.Namespace) -> int:
    from edgegcl.cli.rundir import new_run_dir, run_name
    from edgegcl.training.config import to_toml
    from edgegcl.training.state import write_atomic

    with ExitStack() as hold:
        s = _setup(args, hold)
        run_dir, _ = new_run_dir(hold, s.cfg.run.out, f"profile-{run_name(s.cfg.data.dataset)}")
        write_atomic(run_dir / "config.toml", to_toml(s.cfg))
        _calibrate(s, run_dir, threads=_threads(s))
    return 0


def _auto_budget_report(cal: Calibration, profile: DeviceProfile | None
                        ) -> Callable[[list[SeedResult]], dict[str, Any]]:
    """``metrics.json``'s ``auto_budget`` entry: the profiler's prediction beside training."""
    from edgegcl.budget.profiler import auto_budget_report

    assert profile is not None
    return lambda results: {"auto_budget": auto_budget_report(cal, profile, results)}


def _cmd_train(args: argparse.Namespace) -> int:
    with ExitStack() as hold:  # the run directory's lock, released however training ends
        return _train(args, hold)


def _join_world(s: _Setup) -> World | None:
    """Under torchrun: join the ranks, share the graph and refuse full-graph mode (one line);
    else None."""
    from edgegcl.training.distributed import launched, require_minibatch, share_graph, start
    from edgegcl.training.step import resolve_mode

    if not launched():
        return None
    if s.cfg.run.mode != "auto":  # refused before joining the ranks; auto once the graph is known
        require_minibatch(s.cfg.run.mode)
    world = start(s.cfg.distributed, s.cfg.run.device)
    s.device, s.data = world.device, share_graph(s.data, world)
    assert s.data is not None
    require_minibatch(resolve_mode(s.cfg.run.mode, s.data.num_nodes))
    return world


def _start_lines(s: _Setup, cfg: TrainConfig, run_dir: Path, world: World | None,
                 cal: Calibration | None) -> None:
    """What a run says before its first epoch (rank 0): the auto-budget choice, the tuned
    defaults, HANS's pace, a fanout shorter than the GCN, the graph and the run directory."""
    from edgegcl.budget.profiler import pace_line
    from edgegcl.training.step import resolve_mode

    def say(line: str) -> None:
        print(f"edgegcl: {line}", file=sys.stderr)

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
    if resolve_mode(cfg.run.mode, data.num_nodes) == "minibatch" and not cfg.model.encoder \
            and hops < layers:
        say(f"warning: --fanout samples {hops} hop(s) for a {layers}-layer GCN, so its outer "
            f"layers see cut neighbourhoods; give one per layer, e.g. --fanout "
            f"{','.join(['10'] * layers)}")
    ranks = "" if world is None else (f", {world.size} processes ({world.negatives} "
                                      f"negatives, {cfg.run.batch_size} seeds per rank)")
    say(f"training on {data.name} ({data.num_nodes} nodes, {data.edge_index.size(1)} edges), "
        f"{cfg.run.seeds} seed(s){ranks}; run directory {run_dir}")


class _StopAfterEpoch:
    """SIGINT / SIGTERM handler while training: the first asks the run to stop after the
    epoch (its state saved), a second one stops at once (not under torchrun, where Ctrl-C
    reaches every rank and torchrun then sends SIGTERM). ``installed()`` sets it for a block."""

    def __init__(self, world: World | None, main: bool) -> None:
        self.world, self.main = world, main
        self.signals: list[int] = []

    def __call__(self, signum: int, frame: object) -> None:
        if self.signals:
            if self.world is not None:
                return
            raise KeyboardInterrupt  # a second signal: stop now, without saving
        self.signals.append(signum)
        if self.main:
            print("\nedgegcl: stopping after this epoch, once its state is saved"
                  + (" (signal again to stop at once)" if self.world is None else ""),
                  file=sys.stderr)

    def __bool__(self) -> bool:
        return bool(self.signals)

    def exit_code(self) -> int:
        """128 + the signal that stopped the run (SIGTERM when none did)."""
        return 128 + (self.signals[0] if self.signals else signal.SIGTERM)

    @contextmanager
    def installed(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _summary_lines(metrics: dict[str, Any], cfg: TrainConfig, run_dir: Path) -> None:
    """What a finished run prints: test micro-F1 (and the authors' protocol's), the mean
    epoch time, where the results are, and the auto-budget comparison."""
    from edgegcl.evaluation.authors import AUTHORS_LABEL

    summary = metrics["summary"]
    if "test_micro_f1" in summary:
        print(f"test micro-F1 {_over_seeds(summary['test_micro_f1'], cfg.run.seeds)} (checkpoint "
              "chosen on validation)")
    if "authors_protocol_test_micro_f1" in summary:
        print(f"{AUTHORS_LABEL}: test micro-F1 "
              f"{_over_seeds(summary['authors_protocol_test_micro_f1'], cfg.run.seeds)}")
    print(f"mean epoch time {summary['epoch_time_s']['mean']:.3f} s; results in {run_dir}")
    if "auto_budget" in metrics:
        from edgegcl.budget.profiler import auto_budget_line

        print(auto_budget_line(metrics["auto_budget"]))


def _train(args: argparse.Namespace, hold: ExitStack) -> int:
    from edgegcl.cli.rundir import new_run_dir, run_name
    from edgegcl.training.distributed import RankLost, launched, on_main
    from edgegcl.training.distributed import stop as stop_world
    from edgegcl.training.logger import make_logger
    from edgegcl.training.run import Stopped, run
    from edgegcl.training.step import check_full_graph_memory, resolve_mode

    if args.auto_budget and not args.profile:
        raise UsageError("--auto-budget needs a device profile: add --profile NAME "
                         "(see 'edgegcl profiles')")
    logger = make_logger(args.logger)
    # under torchrun only each machine's local rank 0 loads the graph; it is then shared
    s = _setup(args, hold, graph=not launched() or os.environ.get("LOCAL_RANK", "0") == "0")
    world = _join_world(s)
    cfg, data, main = s.cfg, s.data, world is None or world.is_main
    assert data is not None
    if resolve_mode(cfg.run.mode, data.num_nodes) == "full":
        check_full_graph_memory(data.num_nodes, s.device)
    starts: list[Callable[[], None]] = []  # marks a new run directory as started (rank 0)

    def make_run_dir() -> Path:
        if args.resume:
            return Path(args.resume)
        path, started = new_run_dir(hold, cfg.run.out, run_name(cfg.data.dataset))
        starts.append(started)
        return path

    run_dir = on_main(world, make_run_dir)
    threads = _threads(s, main)
    cal = None
    if args.auto_budget:  # measured on rank 0's device, its choice used by every rank
        cal = on_main(world, lambda: _calibrate(s, run_dir, "; training with it", threads))
        cfg = replace(cfg, theta_max=cal.chosen, batch_size=cal.batch_size, logits=cal.logits)
    if main:
        _start_lines(s, cfg, run_dir, world, cal)
    if _INTERRUPTED:  # a Ctrl-C while starting up that a library swallowed
        raise KeyboardInterrupt
    stop = _StopAfterEpoch(world, main)

    def on_epoch(seed_dir: Path, row: dict[str, object], events: list[Any]) -> None:
        while starts:  # an epoch is trained: the run directory is kept from here on
            starts.pop()()
        if logger is not None:
            logger.epoch(seed_dir, row, events)

    try:
        with stop.installed():
            metrics = run(cfg, data, run_dir, s.device,
                          report=None if cal is None else _auto_budget_report(cal, s.profile),
                          stop=lambda: bool(stop), resume=bool(args.resume), world=world,
                          on_epoch=on_epoch, threads=threads)
    except Stopped as stopped:
        if main:
            again = "edgegcl train" if world is None else "torchrun ... -m edgegcl train"
            print(f"edgegcl: {stopped}; state saved; continue with: {again} --resume "
                  f"{run_dir}", file=sys.stderr)
        return stop.exit_code()
    except RuntimeError as exc:  # a collective failed: gloo / NCCL raise RuntimeErrors
        if world is None:
            raise
        lost = exc if isinstance(exc, RankLost) else world.lost(exc)
        print(f"edgegcl: error: {lost}; the last saved state is kept: continue with torchrun "
              f"... -m edgegcl train --resume {run_dir}", file=sys.stderr)
        return 1
    finally:
        stop_world()
        if logger is not None:
            logger.close()
    if main:
        _summary_lines(metrics, cfg, run_dir)
    return 0


def _over_seeds(figure: dict[str, float], seeds: int) -> str:
    """A figure over seeds: ``0.83 ± 0.01 over 5 seeds``, or ``0.83`` for one seed (its
    spread is not measured, not zero)."""
    if seeds == 1:
        return f"{figure['mean']:.2f}"
    return f"{figure['mean']:.2f} ± {figure['std']:.2f} over {seeds} seeds"


def _add_plot(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot", help="draw a run's training curves (loss, eta, micro-F1) to a PNG",
                       description="Draw every seed's loss, eta per category and probe "
                                   "micro-F1 against the epoch, from RUN_DIR/seed-*/epochs.csv "
                                   "(a finished, running or stopped run). Needs matplotlib.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the --out of an edgegcl train run")
    p.add_argument("--out", metavar="FILE.png", help="where to write (default RUN_DIR/curves.png, "
                   "redrawn each time); an existing FILE is kept unless --force")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.set_defaults(func=_cmd_plot)


def _cmd_plot(args: argparse.Namespace) -> int:
    from edgegcl.training.curves import plot_run

    print(plot_run(args.run_dir, args.out, args.force))
    return 0


_NEGATIVE_VALUE = re.compile(r"-\d[\d.,]*")
"""A value that starts with a minus: a number or a list (``--fanout -1,5``)."""


def _negative_values(argv: Sequence[str]) -> list[str]:
    """``--opt -1,5`` as ``--opt=-1,5``: argparse takes a value that starts with a minus and
    is not a plain number for an option, and refuses the flag before it."""
    out: list[str] = []
    for arg in argv:
        if "--" in out:
            out.append(arg)
        elif (out and out[-1].startswith("--") and "=" not in out[-1] and out[-1] != "--"
              and _NEGATIVE_VALUE.fullmatch(arg)):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _parser() -> _Parser:
    """The whole command line; the subcommands' options are added when one is parsed."""
    from edgegcl.budget.profiles import add_profiles_parser
    from edgegcl.cli.export import add_parser as add_export_parser

    parser = _Parser(prog="edgegcl", description="Graph contrastive learning with HANS.")
    parser.add_argument("--version", action="version", version=f"edgegcl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_train(sub)
    _add_profile(sub)
    add_export_parser(sub)
    _add_plot(sub)
    add_profiles_parser(sub)
    return parser


_INTERRUPTED: list[int] = []
"""SIGINTs and SIGTERMs received before training took them over (``_interrupt``)."""


def _interrupt(signum: int, frame: object) -> NoReturn:
    """Ctrl-C or SIGTERM while starting up (or profiling): remembered, then raised. A module
    being imported when it lands may swallow the KeyboardInterrupt or fail otherwise as it
    unwinds; ``main`` reads any exception after it as the interruption. What the command had
    made is removed on the way out (a new run directory that never trained)."""
    _INTERRUPTED.append(signum)
    raise KeyboardInterrupt


def rank_environment_problem(env: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    """Why torchrun's rank variables in ``env`` cannot be used, or None: ``RANK`` without the
    process group it belongs to (``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), or out of
    range. A stray ``RANK=1`` would otherwise make this process a silent follower."""
    if "RANK" not in env:
        return None
    missing = [k for k in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if not env.get(k)]
    if missing:
        return (f"RANK={env['RANK']} is set without {', '.join(missing)}: start several "
                "processes with torchrun, or unset RANK")
    rank, size = env["RANK"], env["WORLD_SIZE"]
    if not (rank.isdigit() and size.isdigit() and int(rank) < int(size)):
        return (f"RANK={rank} does not fit WORLD_SIZE={size}: start the processes with "
                "torchrun, or unset RANK")
    return None


def _os_error_line(exc: OSError) -> str | None:
    """One line for an OSError a user's path caused (a name too long, a loop of links), or
    None for one that is a bug."""
    import errno

    if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR):
        from edgegcl_embed.errors import shown

        name = f" {shown(str(exc.filename), 80)}" if exc.filename else ""
        return f"the path{name} cannot be used ({exc.strerror}); pass a shorter or plain path"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line (``argv``, else ``sys.argv``); returns the exit code: 2 with one
    line for a usage error, 130 (143) with one line for Ctrl-C (SIGTERM) outside training's
    own handling."""
    _INTERRUPTED.clear()
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        problem = rank_environment_problem()
        if problem is not None:
            os.environ.pop("RANK")  # this process speaks for itself
            raise UsageError(problem)
        args = _parser().parse_args(_negative_values(sys.argv[1:] if argv is None else argv))
        return int(args.func(args))
    except BaseException as exc:
        # Ctrl-C while starting up (whatever it broke), or a second one while training
        if isinstance(exc, KeyboardInterrupt) or (_INTERRUPTED and isinstance(exc, Exception)):
            signum = _INTERRUPTED[0] if _INTERRUPTED else signal.SIGINT
            print("edgegcl: terminated" if signum == signal.SIGTERM else "edgegcl: interrupted",
                  file=sys.stderr)
            return 128 + signum
        line = None
        if isinstance(exc, RecursionError):
            line = "an input file is nested too deeply to be read; check the file you passed"
        elif isinstance(exc, OSError):
            line = _os_error_line(exc)
        if line is not None:
            exc = UsageError(line)
        if not isinstance(exc, UsageError):
            raise
        # under torchrun rank 0 speaks for all: every rank meets the same bad input (a
        # QuietUsageError exists only once edgegcl.training.distributed is loaded)
        dist = sys.modules.get("edgegcl.training.distributed")
        quiet = dist is not None and isinstance(exc, dist.QuietUsageError)
        if not quiet and os.environ.get("RANK", "0") == "0":
            print(f"edgegcl: error: {exc}", file=sys.stderr)
        return 2
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
