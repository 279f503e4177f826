"""What every job does before its work: the user's ``Request`` (a config file or preset, a
``TrainConfig``, or the dataset's tuned defaults; the settings given over it; a run to resume;
a device profile and its budgets) resolved into a ``Start``: the configuration, each value
checked, the device, the graph and the profile.

The configuration is resolved on the standard library alone (a resumed run aside), so that
``edgegcl train`` refuses a bad value before torch loads. ``Start`` is a frozen value: a job
that changes the configuration (the auto-budget's choice) makes a new one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgegcl.errors import UsageError
from edgegcl.jobs.ranks import world_size
from edgegcl_embed.errors import shown

if TYPE_CHECKING:
    import torch
    from torch_geometric.data import Data

    from edgegcl.budget.profiles import DeviceProfile
    from edgegcl.training.config import TrainConfig
    from edgegcl.training.threads import ThreadChoice


@dataclass(frozen=True)
class Request:
    """What the user asked for, before anything is read.

    ``config``: a ``TrainConfig``, a TOML file or a shipped preset's name, or None for the
    dataset's tuned defaults (``edgegcl.training.config.tuned_defaults``); ``settings``: options
    by name set over it (``{"theta_max": 0.3}``; the command line's flags); ``resume``: a run
    directory to continue (its saved configuration; only ``RESUMABLE`` settings may change);
    ``profile``: a device profile's name, file or value, ``target_epoch_s`` / ``memory_gib``
    replacing its budgets, ``remeasure`` measuring its cache again; ``auto_budget``: theta_max
    chosen by the profiler before training.
    """

    config: TrainConfig | str | Path | None = None
    settings: Mapping[str, object] = field(default_factory=dict)
    resume: str | Path | None = None
    profile: str | Path | DeviceProfile | None = None
    target_epoch_s: float | None = None
    memory_gib: float | None = None
    remeasure: bool = False
    auto_budget: bool = False


@dataclass(frozen=True)
class Start:
    """A job ready for its work: the checked configuration, the graph (None until it is
    loaded: under torchrun after the ranks have joined), the device, the device profile and
    the dataset's tuned defaults the configuration started from."""

    cfg: TrainConfig
    data: Data | None
    device: torch.device
    profile: DeviceProfile | None
    tuned: Path | None = None
    remeasure: bool = False

    def with_data(self, data: Data, device: torch.device | None = None) -> Start:
        return replace(self, data=data, device=self.device if device is None else device)


def _saved_config(run_dir: Path) -> dict[str, Any]:
    """RUN_DIR/config.toml's values, refused in one line when fields are missing (a
    truncated file; defaults in their place would train another configuration)."""
    from edgegcl.training.config import FIELDS, load_toml

    path = run_dir / "config.toml"
    saved = load_toml(path)
    missing = [name for name, f in FIELDS.items() if name not in saved
               and not f.metadata["omit_default"]]
    if missing:
        more = f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        raise UsageError(f"{path} lacks {', '.join(missing[:4])}{more}: it is truncated or "
                         "not edgegcl's; restore it from a copy, or start a new run (nothing "
                         "was written)")
    return saved


def _resume_values(request: Request, settings: dict[str, object],
                   hold: ExitStack) -> dict[str, object]:
    """The saved configuration of the run ``request.resume`` names, after checking that the
    settings agree with it (only RESUMABLE fields may change) and that the run has something
    left to do. The run directory is locked (``hold`` keeps the lock) before its files are
    read."""
    from edgegcl.training.config import (RESUMABLE, TrainConfig, coerce, option_text,
                                         option_value)
    from edgegcl.training.state import RunLock
    from edgegcl_embed.files import refuse_planted_links

    assert request.resume is not None
    run_dir = Path(request.resume)
    may_change = f"on --resume only {', '.join('--' + f for f in RESUMABLE)} may change"
    if not (run_dir / "config.toml").is_file():
        raise UsageError(f"{run_dir} is not an edgegcl run directory (no config.toml); pass "
                         "the --out of an earlier edgegcl train")
    if request.config is not None or request.profile is not None or request.auto_budget:
        raise UsageError("--resume takes the run's saved configuration: drop --config, "
                         "--profile and --auto-budget")
    if "out" in settings and Path(str(settings["out"])).resolve() != run_dir.resolve():
        raise UsageError(f"--resume continues {run_dir} where it is: drop --out "
                         f"{settings['out']} ({may_change}; copy the directory to move it)")
    if os.environ.get("RANK", "0") == "0":  # under torchrun rank 0 alone writes
        hold.enter_context(RunLock(run_dir))
    refuse_planted_links(run_dir, UsageError)
    saved = _saved_config(run_dir)
    defaults = TrainConfig()
    for name, value in settings.items():
        before = saved[name] if name in saved else option_value(defaults, name)
        if name not in RESUMABLE and name != "out" and coerce(name, value) != before:
            shown = option_text(TrainConfig(**{name: before}), name)
            raise UsageError(f"--{name.replace('_', '-')} {value} contradicts the run in "
                             f"{run_dir} ({shown}); {may_change}")
    values = {**saved, **{k: v for k, v in settings.items() if k in RESUMABLE}}
    epochs = int(values.get("epochs", defaults.run.epochs))  # type: ignore[arg-type]
    if (run_dir / "metrics.json").exists() and epochs <= int(saved.get("epochs",
                                                                       defaults.run.epochs)):
        raise UsageError(f"{run_dir} is a finished run (metrics.json is written); pass a larger "
                         "--epochs to train on, or start a new run")
    return {**values, "out": str(run_dir)}


def configure(request: Request, hold: ExitStack
              ) -> tuple[TrainConfig, Path | None, DeviceProfile | None]:
    """The run's configuration (``request.config``, else the dataset's tuned defaults; then
    the settings; a resumed run's saved one), the tuned defaults it started from and the
    device profile, each checked. A resumed run is locked (in ``hold``) before its files are
    read."""
    from edgegcl.budget.profiles import DeviceProfile, check_device_present, load_profile
    from edgegcl.budget.profiles import with_budgets
    from edgegcl.training.config import (FIELDS, SECTIONS, TrainConfig, build, load_toml,
                                         tuned_defaults, unused_settings)
    from edgegcl.trust import allow_encoder

    if request.profile is None and (request.target_epoch_s, request.memory_gib) != (None, None):
        raise UsageError("--target-epoch-s and --memory-gib replace a device profile's "
                         "budgets: add --profile NAME (see 'edgegcl profiles')")
    if request.profile is None and request.remeasure:
        raise UsageError("--remeasure measures a device profile's budgets again: add --profile "
                         "NAME (see 'edgegcl profiles')")
    unknown = [name for name in request.settings if name not in FIELDS]
    if unknown:
        raise UsageError(f"{unknown[0]!r} is not an option of a run; 'edgegcl train --help' "
                         "lists them")
    settings = {name: value for name, value in request.settings.items() if value is not None}
    if "encoder" in settings:  # named here: files may name it too; as the run directory records it
        settings["encoder"] = allow_encoder(str(settings["encoder"]))
    tuned = None
    if request.resume is not None:
        cfg = build(_resume_values(request, settings, hold), {})
    elif isinstance(request.config, TrainConfig):
        cfg = TrainConfig(**{name: getattr(request.config, name) for name in SECTIONS},
                          **settings)
    elif request.config is not None:
        cfg = build(load_toml(request.config), settings)
        if cfg.run.out and "out" not in settings:  # a file does not choose where a run writes
            print(f"edgegcl: warning: {shown(str(request.config), 120)} names the run directory "
                  f"{shown(cfg.run.out, 120)}, which a file cannot choose: this run gets a new "
                  f"one under runs/ (pass --out {shown(cfg.run.out, 200)} to write there)",
                  file=sys.stderr, flush=True)
            cfg = cfg.replace(run={"out": ""})
    else:
        tuned, values = tuned_defaults(str(settings.get("dataset", "")))
        cfg = build(values, settings)
    model_unused = [name for name in settings if name in cfg.model.unused()]
    if model_unused:  # another encoder has widths of its own; a built-in one its own settings
        named = ", ".join("--" + name.replace("_", "-") for name in model_unused)
        if cfg.model.user_encoder:
            raise UsageError(f"{named}: --encoder {cfg.model.encoder} does not use the built-in "
                             "encoders' widths and activation; set them in the encoder's "
                             "function, or drop them")
        it = "it" if len(model_unused) == 1 else "them"
        raise UsageError(f"{named}: --encoder {cfg.model.encoder} does not use {it}; drop {it}"
                         " (or choose the encoder that does)")
    unused = [name for name in settings if name in unused_settings(cfg)]
    if unused:  # an option that would do nothing is refused, not ignored
        named = ", ".join("--" + name.replace("_", "-") for name in unused)
        it = "it" if len(unused) == 1 else "them"
        raise UsageError(f"{named}: --scheduler {cfg.schedule.scheduler} does not use {it} (HANS's "
                         f"settings it does without); add --scheduler hans, or drop {it}")
    profile = request.profile
    if profile is not None and not isinstance(profile, DeviceProfile):
        profile = load_profile(str(profile))
    if profile is not None:
        profile = with_budgets(profile, request.target_epoch_s, request.memory_gib)
        check_device_present(profile)
        if cfg.run.device != "auto" and not cfg.run.device.startswith(profile.device):
            raise UsageError(f"--device {cfg.run.device} contradicts profile {profile.name} "
                             f"(device {profile.device}); drop --device or pick another profile")
        if cfg.run.device == "auto":
            cfg = cfg.replace(run={"device": profile.device})
    return cfg, tuned, profile


def start(request: Request, hold: ExitStack, graph: Data | None = None,
          load: bool = True) -> Start:
    """``configure``'s run, then its device and its graph (``graph``, checked, else loaded
    from the configuration unless ``load`` is false); the allocator set to reuse freed pages
    (edgegcl.memory.reuse_freed_memory). A resumed run is refused if its files cannot
    continue (edgegcl.training.resume.check_resume)."""
    cfg, tuned, profile = configure(request, hold)
    from edgegcl.memory import reuse_freed_memory
    from edgegcl.training.resume import check_resume
    from edgegcl.training.placement import resolve_device

    reuse_freed_memory()
    device = resolve_device(cfg.run.device)
    source = _recorded_source(request)
    if graph is None and source is not None:  # a file's paths are read only where the user named them
        from edgegcl.data import check_recorded_paths

        named = {k for k, v in request.settings.items() if v is not None}
        check_recorded_paths(cfg.data.dataset, cfg.data.root, source,
                             dataset_named="dataset" in named, root_named="root" in named,
                             node_table=cfg.data.node_table,
                             node_table_named="node_table" in named)
    data = None
    if graph is not None:
        data = checked_graph(cfg, graph)
    elif load:
        data = load_data(cfg)
    if request.resume is not None:  # refused here, before the run is announced
        check_resume(Path(request.resume), cfg, None if data is None else data.x.size(1),
                     world_size())
    return Start(cfg, data, device, profile, tuned, request.remeasure)


def _recorded_source(request: Request) -> Path | None:
    """The file the configuration's paths come from: a resumed run's config.toml or a config
    file; None when the user's own code or flags made it (a ``TrainConfig``, the defaults)."""
    if request.resume is not None:
        return Path(request.resume) / "config.toml"
    if isinstance(request.config, (str, Path)):
        from edgegcl.config import resolve_config

        return resolve_config(request.config)
    return None


def load_data(cfg: TrainConfig) -> Data:
    """The run's graph, and the size of each built-in encoder it may train checked against it
    (one line each)."""
    from edgegcl.data import load_graph

    return _check_models(cfg, load_graph(cfg.data.dataset, cfg.data.root or None,
                                         cfg.synthetic_spec(), cfg.data.node_table or None))


def checked_graph(cfg: TrainConfig, graph: Data) -> Data:
    """A graph given in Python, checked as a loaded one is (edgegcl.data.validation)."""
    from edgegcl.data.validation import validate_graph

    return _check_models(cfg, validate_graph(graph))


def _check_models(cfg: TrainConfig, data: Data) -> Data:
    from edgegcl.nn.config import AUTO
    from edgegcl.nn.family import check_model_size

    model = cfg.model
    names = model.candidates() if model.encoder == AUTO else [model.built_in]
    for name in names:
        if name is not None:
            check_model_size(data.x.size(1), model, name)
    return data


def choose_threads(s: Start, main: bool = True) -> ThreadChoice:
    """How this run sets torch's threads: ``threads`` of the configuration, else the
    profile's, else edgegcl.training.threads.resolve_threads's default; its line printed
    (rank 0) unless the count is still to be measured (then the line comes once it is)."""
    from edgegcl.training.threads import resolve_threads

    count = s.cfg.run.threads or (s.profile.threads if s.profile is not None else 0)
    choice = resolve_threads(count, s.device)
    if choice.picker is None and main:
        print(f"edgegcl: {choice.line()}", file=sys.stderr)
    return choice
