"""``edgegcl profiles [PROFILE ...]``: the shipped device profiles listed, or the given ones
checked and shown (edgegcl.budget.profiles)."""

from __future__ import annotations

import argparse

from edgegcl.budget.profiles import SHIPPED_DIR, format_profiles, list_profiles, load_profile

DESCRIPTION = ("List the shipped device profiles (for --profile NAME), or validate and show the "
               "given ones (names or PATH.toml files).")


def add_options(p: argparse.ArgumentParser) -> None:
    """``profiles``' one argument: the profiles to show."""
    p.add_argument("profile", nargs="*", metavar="PROFILE",
                   help="a shipped profile's name or your own PATH.toml (default: all shipped)")


def run(args: argparse.Namespace) -> int:
    """``edgegcl profiles`` with its parsed ``args``; the exit code."""
    profiles = [load_profile(p) for p in args.profile] if args.profile else list_profiles()
    print(format_profiles(profiles))
    if not args.profile:
        print(f"\n(from {SHIPPED_DIR}; memory: the budget before headroom; epoch: target epoch time)")
    return 0
