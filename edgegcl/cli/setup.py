"""What ``train`` and ``profile`` share before any work: the configuration (a file, the
dataset's tuned defaults or a resumed run's saved one, then the flags, each checked), the
device profile, the device, the graph, the thread count and the profiler's run.

Everything here is imported when a command runs, never to build the parser.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgegcl.errors import UsageError

if TYPE_CHECKING:
    import torch
    from torch_geometric.data import Data

    from edgegcl.budget.profiler import Calibration
    from edgegcl.budget.profiles import DeviceProfile
    from edgegcl.training.config import TrainConfig
    from edgegcl.training.threads import ThreadChoice


def config_flag_form(name: str, cfg: TrainConfig) -> str:
    """An option's value as its flag is written (``20,30,50`` for the ratios)."""
    from edgegcl.config import flag_form

    value = getattr(cfg, name)
    return flag_form(value)


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
    from edgegcl.training.config import RESUMABLE
    from edgegcl.training.state import RunLock

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
                             f"{run_dir} ({config_flag_form(name, replace(defaults, **{name: before}))}"
                             f"); {may_change}")
    values = {**saved, **{k: v for k, v in flags.items() if k in RESUMABLE}}
    epochs = int(values.get("epochs", defaults.epochs))  # type: ignore[arg-type]
    if (run_dir / "metrics.json").exists() and epochs <= int(saved.get("epochs", defaults.epochs)):
        raise UsageError(f"{run_dir} is a finished run (metrics.json is written); pass a larger "
                         "--epochs to train on, or start a new run")
    return {**values, "out": str(run_dir)}


@dataclass
class Setup:
    cfg: TrainConfig
    data: Data | None
    device: torch.device
    profile: DeviceProfile | None
    tuned: Path | None = None  # the dataset's tuned defaults the config started from
    remeasure: bool = False  # --remeasure: the profile cache is measured anew


def configure(args: argparse.Namespace, hold: ExitStack
              ) -> tuple[TrainConfig, Path | None, DeviceProfile | None]:
    """The run's configuration (file, else the dataset's tuned defaults; then flags; a resumed
    run's saved one), the tuned defaults it started from and the device profile, each checked:
    on the standard library alone (a resumed run aside), so that a bad value is refused before
    torch loads. A resumed run is locked (in ``hold``) before its files are read."""
    from edgegcl.budget.profiles import check_device_present, load_profile, with_budgets
    from edgegcl.training.config import FIELDS, build, load_toml, tuned_defaults, unused_settings
    from edgegcl.trust import allow_encoder

    if not args.profile and (args.target_epoch_s, args.memory_gib) != (None, None):
        raise UsageError("--target-epoch-s and --memory-gib replace a device profile's "
                         "budgets: add --profile NAME (see 'edgegcl profiles')")
    if not args.profile and args.remeasure:
        raise UsageError("--remeasure measures a device profile's budgets again: add --profile "
                         "NAME (see 'edgegcl profiles')")
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
    model_unused = [name for name in flags if name in cfg.model.unused()]
    if model_unused:  # another encoder has widths of its own; a built-in one its own settings
        named = ", ".join("--" + name.replace("_", "-") for name in model_unused)
        if cfg.model.user_encoder:
            raise UsageError(f"{named}: --encoder {cfg.model.encoder} does not use the built-in "
                             "encoders' widths and activation; set them in the encoder's "
                             "function, or drop them")
        it = "it" if len(model_unused) == 1 else "them"
        raise UsageError(f"{named}: --encoder {cfg.model.encoder} does not use {it}; drop {it}"
                         " (or choose the encoder that does)")
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
            cfg = cfg.replace(run={"device": profile.device})
    return cfg, tuned, profile


def setup(args: argparse.Namespace, hold: ExitStack, graph: bool = True) -> Setup:
    """``configure``'s run, then its device and, with ``graph``, the graph; the allocator set
    to reuse freed pages (edgegcl.memory.reuse_freed_memory). A resumed run is refused if its
    files cannot continue (edgegcl.training.resume.check_resume)."""
    cfg, tuned, profile = configure(args, hold)
    from edgegcl.memory import reuse_freed_memory
    from edgegcl.training.resume import check_resume
    from edgegcl.training.step import resolve_device

    reuse_freed_memory()
    device = resolve_device(cfg.run.device)
    data = load_data(cfg) if graph else None
    if getattr(args, "resume", None):  # refused here, before the run is announced
        check_resume(Path(args.resume), cfg, None if data is None else data.x.size(1),
                     int(os.environ.get("WORLD_SIZE", "1")))
    return Setup(cfg, data, device, profile, tuned, args.remeasure)


def load_data(cfg: TrainConfig) -> Data:
    """The run's graph, and the size of each built-in encoder it may train checked against it
    (one line each)."""
    from edgegcl.data import load_graph
    from edgegcl.nn.config import AUTO
    from edgegcl.nn.family import check_model_size

    data = load_graph(cfg.data.dataset, cfg.data.root or None, cfg.synthetic_spec())
    model = cfg.model
    names = model.candidates() if model.encoder == AUTO else [model.built_in]
    for name in names:
        if name is not None:
            check_model_size(data.x.size(1), model, name)
    return data


def calibrate(s: Setup, run_dir: Path, then: str = "",
               threads: ThreadChoice | None = None) -> Calibration:
    """The profiler under ``s``'s profile, its table and choice printed and kept
    (edgegcl.cli.autobudget); a measuring ``threads`` chooses the thread count first."""
    from edgegcl.cli.autobudget import calibrate_and_report

    assert s.profile is not None and s.data is not None
    return calibrate_and_report(s.data, s.cfg, s.profile, s.device, run_dir, then,
                                s.remeasure, threads)


def choose_threads(s: Setup, main: bool = True) -> ThreadChoice:
    """How this run sets torch's threads: ``--threads``, else the profile's ``threads``,
    else edgegcl.training.threads.resolve_threads's default; its line printed (rank 0) unless
    the count is still to be measured (then the line comes once it is)."""
    from edgegcl.training.threads import resolve_threads

    count = s.cfg.run.threads or (s.profile.threads if s.profile is not None else 0)
    choice = resolve_threads(count, s.device)
    if choice.picker is None and main:
        print(f"edgegcl: {choice.line()}", file=sys.stderr)
    return choice
