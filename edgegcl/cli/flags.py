"""The options ``train``, ``profile`` and ``bench budgets`` share: one flag per option of every
config section, and the budgets a profile's can be replaced by. Building them needs the
standard library alone (the config sections'), so ``--help`` answers before torch loads.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection

from edgegcl.config import flag, section_fields
from edgegcl.contrast.scheduler import scheduler_names
from edgegcl.training.config import FIELDS, SECTIONS, TrainConfig, option_text


def add_config_flags(p: argparse.ArgumentParser, leave_out: Collection[str] = ()) -> None:
    """``--config`` and one flag per option of every section (flags win over the file), but
    those named in ``leave_out`` (a command whose work they do not change)."""
    p.add_argument("--config", metavar="FILE.toml|PRESET",
                   help="TOML file setting any of the options below (flags win), or a shipped "
                        "preset: paper-Cora, paper-CiteSeer (the paper's settings, presets/)")
    defaults = TrainConfig()
    groups = {name: p.add_argument_group(f"{name}: {what}") for name, what in SECTIONS.items()}
    members = {"scheduler": f"; every member: {', '.join(scheduler_names())}"}
    for name, (section, f) in section_fields(TrainConfig).items():
        if name in leave_out:
            continue
        kind = {"int": int, "float": float}.get(str(f.type), str)
        groups[section].add_argument(
            flag(name), dest=name, type=kind, default=None, metavar=name.upper(),
            help=f"{f.metadata['help']}{members.get(name, '')} (default: "
                 f"{option_text(defaults, name)})")


def add_budget_flags(p: argparse.ArgumentParser) -> None:
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


def config_settings(args: argparse.Namespace) -> dict[str, object]:
    """The config options the user gave as flags, by name (the settings of a job)."""
    return {name: getattr(args, name) for name in FIELDS if getattr(args, name, None) is not None}
