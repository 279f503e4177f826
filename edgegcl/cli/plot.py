"""``edgegcl plot RUN_DIR``: a run's training curves drawn to a PNG
(edgegcl.training.curves.plot_run)."""

from __future__ import annotations

import argparse

from edgegcl.training.curves import plot_run

DESCRIPTION = ("Draw every seed's loss, eta per category and probe micro-F1 against the epoch, "
               "from RUN_DIR/seed-*/epochs.csv (a finished, running or stopped run). Needs "
               "matplotlib.")


def add_options(p: argparse.ArgumentParser) -> None:
    """``plot``'s options: the run, where the PNG goes, whether to replace it."""
    p.add_argument("run_dir", metavar="RUN_DIR", help="the --out of an edgegcl train run")
    p.add_argument("--out", metavar="FILE.png", help="where to write (default RUN_DIR/curves.png, "
                   "redrawn each time); an existing FILE is kept unless --force")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")


def run(args: argparse.Namespace) -> int:
    """``edgegcl plot`` with its parsed ``args``; the exit code."""
    print(plot_run(args.run_dir, args.out, args.force))
    return 0
