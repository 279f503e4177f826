"""``edgegcl profile``: the resource profiler alone, its flags passed to ``edgegcl.profile``
(edgegcl.jobs.profile)."""

from __future__ import annotations

import argparse

from edgegcl.cli.flags import add_budget_flags, add_config_flags, config_settings
from edgegcl.jobs.profile import profile

DESCRIPTION = ("Run the resource profiler alone: per theta_max, the epoch latency and peak "
               "memory on the profile's device, and the largest theta_max within its budgets "
               "(no training).")


def add_options(p: argparse.ArgumentParser) -> None:
    """``profile``'s options: the profile (required), its budgets, one flag per config option."""
    p.add_argument("--profile", metavar="NAME|FILE.toml", required=True,
                   help="device profile (see 'edgegcl profiles')")
    add_budget_flags(p)
    add_config_flags(p)


def run(args: argparse.Namespace) -> int:
    """``edgegcl profile`` with its parsed ``args``; the exit code."""
    profile(args.config, profile=args.profile, settings=config_settings(args),
            target_epoch_s=args.target_epoch_s, memory_gib=args.memory_gib,
            remeasure=args.remeasure)
    return 0
