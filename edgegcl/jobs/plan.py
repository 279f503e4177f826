"""What a run will do, settled before torch loads: the user's ``Request`` (a config file or
preset, a ``TrainConfig``, or the dataset's tuned defaults; the settings given over it; a run to
resume; a device profile and its budgets; the auto-budget) resolved into one frozen ``Plan``:
the configuration with each value checked, the device profile, the run to resume (locked, its
saved configuration read and checked), and which paths the user named. ``edgegcl train``,
``profile`` and ``bench budgets`` and their Python functions build the same plan, once, and the
jobs execute it (edgegcl.jobs.start, edgegcl.jobs.train) without checking again what it settled.

This module and what it imports need the standard library alone, so that a bad value is refused
in one line before torch is imported (tests/test_cli_startup.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgegcl import runfiles
from edgegcl.budget.profiles import DeviceProfile, check_device_present, load_profile, with_budgets
from edgegcl.config import resolve_config
from edgegcl.errors import UsageError
from edgegcl.jobs.arguments import path_argument
from edgegcl.training.config import (FIELDS, RESUMABLE, SECTIONS, TrainConfig, build, coerce,
                                     load_toml, option_text, option_value, refuse_unused,
                                     tuned_defaults)
from edgegcl.training.lock import RunLock
from edgegcl.trust import allow_encoder
from edgegcl_embed.errors import shown
from edgegcl_embed.files import refuse_planted_links


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
class Plan:
    """A run as it will be done: ``cfg`` checked; ``tuned``, the dataset's tuned defaults it
    started from (None when a file, a ``TrainConfig`` or a resumed run gave it); ``profile``
    with the request's budgets; ``resume``, the run directory to continue (locked by the
    ``hold`` the plan was made in); ``source``, the file the configuration's paths come from
    (a config file or the resumed run's config.toml: its paths are used only where the user
    named them, ``named``); ``auto_budget`` and ``remeasure`` as asked."""

    cfg: TrainConfig
    tuned: Path | None = None
    profile: DeviceProfile | None = None
    resume: Path | None = None
    source: Path | None = None
    named: frozenset[str] = frozenset()
    auto_budget: bool = False
    remeasure: bool = False


def config_argument(config: object) -> TrainConfig | Path | str | None:
    """``config``: a ``TrainConfig``, a file or preset name, or None (one line otherwise)."""
    if config is None or isinstance(config, TrainConfig):
        return config
    path = path_argument("config", config)
    return config if isinstance(config, str) else path


def profile_argument(profile: object) -> DeviceProfile | Path | str | None:
    """``profile``: a ``DeviceProfile``, a profile's name or file, or None."""
    if profile is None or isinstance(profile, DeviceProfile):
        return profile
    path = path_argument("profile", profile)
    return profile if isinstance(profile, str) else path


def plan(request: Request, hold: ExitStack) -> Plan:
    """``request`` resolved and checked (one UsageError line for anything wrong, nothing
    written); a resumed run's directory is locked in ``hold`` before its files are read."""
    _check_request(request)
    settings = {name: value for name, value in request.settings.items() if value is not None}
    if "encoder" in settings:  # named here: files may name it too; as the run directory records it
        settings["encoder"] = allow_encoder(str(settings["encoder"]))
    tuned, from_file, source = None, {}, None
    if request.resume is not None:
        cfg = build(_resume_values(request, settings, hold), {})
        source = Path(request.resume) / runfiles.CONFIG
    elif isinstance(request.config, TrainConfig):
        cfg = TrainConfig(**{name: getattr(request.config, name) for name in SECTIONS},
                          **settings)
    elif request.config is not None:
        source = resolve_config(request.config)  # a preset's name: its file
        cfg, from_file = _from_file(source, settings)
    else:
        tuned, values = tuned_defaults(str(settings.get("dataset", "")),
                                       str(settings.get("task", "node")))
        cfg = build(values, settings)
    refuse_unused(cfg, settings)
    refuse_unused(cfg, from_file, f" (set in {shown(str(request.config), 120)})")
    profile = _profile(request)
    if profile is not None:
        if cfg.run.device != "auto" and not cfg.run.device.startswith(profile.device):
            raise UsageError(f"--device {cfg.run.device} contradicts profile {profile.name} "
                             f"(device {profile.device}); drop --device or pick another profile")
        if cfg.run.device == "auto":
            cfg = cfg.replace(run={"device": profile.device})
    return Plan(cfg, tuned, profile, None if request.resume is None else Path(request.resume),
                source, frozenset(settings), request.auto_budget, request.remeasure)


def _check_request(request: Request) -> None:
    """The request's own contradictions: budgets, a re-measure or an auto-budget without a
    profile, and options no run has."""
    if request.profile is None and (request.target_epoch_s, request.memory_gib) != (None, None):
        raise UsageError("--target-epoch-s and --memory-gib replace a device profile's "
                         "budgets: add --profile NAME (see 'edgegcl profiles')")
    if request.profile is None and request.remeasure:
        raise UsageError("--remeasure measures a device profile's budgets again: add --profile "
                         "NAME (see 'edgegcl profiles')")
    if request.profile is None and request.auto_budget:
        raise UsageError("--auto-budget needs a device profile: add --profile NAME "
                         "(see 'edgegcl profiles')")
    unknown = [name for name in request.settings if name not in FIELDS]
    if unknown:
        raise UsageError(f"{unknown[0]!r} is not an option of a run; 'edgegcl train --help' "
                         "lists them")


def _from_file(config: Path, settings: dict[str, object]
               ) -> tuple[TrainConfig, dict[str, object]]:
    """A config file or preset with ``settings`` over it, and the values the file sets away
    from their defaults (what it asks the run to do: checked as flags are); a run directory
    it names is not used (a file does not choose where a run writes), said in one warning
    line."""
    values = load_toml(config)
    defaults = TrainConfig()
    changed = {name: value for name, value in values.items() if name not in settings
               and coerce(name, value) != option_value(defaults, name)}
    cfg = build(values, settings)
    if cfg.run.out and "out" not in settings:
        print(f"edgegcl: warning: {shown(str(config), 120)} names the run directory "
              f"{shown(cfg.run.out, 120)}, which a file cannot choose: this run gets a new "
              f"one under runs/ (pass --out {shown(cfg.run.out, 200)} to write there)",
              file=sys.stderr, flush=True)
        cfg = cfg.replace(run={"out": ""})
    return cfg, changed


def _profile(request: Request) -> DeviceProfile | None:
    """The request's device profile with its budgets, its device checked to be present."""
    profile = request.profile
    if profile is None:
        return None
    if not isinstance(profile, DeviceProfile):
        profile = load_profile(str(profile))
    profile = with_budgets(profile, request.target_epoch_s, request.memory_gib)
    check_device_present(profile)
    return profile


def _saved_config(run_dir: Path) -> dict[str, Any]:
    """RUN_DIR/config.toml's values, refused in one line when fields are missing (a
    truncated file; defaults in their place would train another configuration)."""
    path = run_dir / runfiles.CONFIG
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
    assert request.resume is not None
    run_dir = Path(request.resume)
    may_change = (f"on --resume only {', '.join('--' + f.replace('_', '-') for f in RESUMABLE)} "
                  "may change")
    if not (run_dir / runfiles.CONFIG).is_file():
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
            shown_before = option_text(TrainConfig(**{name: before}), name)
            raise UsageError(f"--{name.replace('_', '-')} {value} contradicts the run in "
                             f"{run_dir} ({shown_before}); {may_change}")
    values = {**saved, **{k: v for k, v in settings.items() if k in RESUMABLE}}
    epochs = int(values.get("epochs", defaults.run.epochs))  # type: ignore[arg-type]
    if (run_dir / runfiles.METRICS).exists() and epochs <= int(saved.get("epochs",
                                                                       defaults.run.epochs)):
        raise UsageError(f"{run_dir} is a finished run (metrics.json is written); pass a larger "
                         "--epochs to train on, or start a new run")
    return {**values, "out": str(run_dir)}
