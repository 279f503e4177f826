"""``edgegcl bench budgets --out DIR``: what each theta_max costs on this device, as a table, a CSV
file and a plot in DIR (edgegcl.jobs.budgets), from any directory, writing nowhere else. Every
config flag sets the run measured (``--out`` is where the results go)."""

from __future__ import annotations

import argparse

from edgegcl.budget.table import THETAS
from edgegcl.cli.flags import add_config_flags, config_settings
from edgegcl.errors import UsageError
from edgegcl.jobs.budgets import bench_budgets


DESCRIPTION = "Benchmarks of the device edgegcl runs on."

NOT_MEASURED = frozenset({
    "theta_max",  # --thetas names the budgets measured
    "seeds", "eval_every", "checkpoint_every", "patience", "metric", "protocol",  # evaluation
    "lr", "weight_decay",  # the optimiser's step costs the same at any rate
    "search_encoders", "search_epochs",  # the encoder search is not measured
    "dist_backend", "dist_timeout", "dist_join_timeout", "negatives",  # one process
})
"""Config options that do not change what ``bench budgets`` measures, left out of its flags."""


def add_options(p: argparse.ArgumentParser) -> None:
    """``bench``'s kinds: ``budgets``, its options added when it is parsed."""
    kinds = p.add_subparsers(dest="bench", metavar="budgets", required=True,
                             parser_class=type(p))
    budgets = kinds.add_parser(
        "budgets", help="epoch time and peak memory per theta_max: table, CSV and plot",
        description="Measure the epoch time and peak training memory of every theta_max in "
                    "--thetas on both logits paths (on one with --logits dense or pairs), as "
                    "the profiler does (HANS held at the state a run reaches there), each "
                    "repeated --repeats times interleaved; "
                    "write DIR/budgets.md (median and spread, then the choice: the largest "
                    "theta_max within --target-epoch-s / --memory-gib, else the knee of the "
                    "cost curve, with the flags to train with it and the accuracy the docs "
                    "measured), DIR/budgets.csv (every repeat) and DIR/budgets.png. A figure "
                    "measured while other processes used the CPU is marked busy. The options "
                    "below are the run's that change what is measured.",
        options=_budgets_options)
    budgets.set_defaults(profile=None, target_epoch_s=None, memory_gib=None, remeasure=False,
                         resume=None)


def _budgets_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--thetas", default=",".join(f"{t:g}" for t in THETAS),
                   help="the theta_max values to measure, comma-separated (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=3,
                   help="measurements per cell, interleaved; the table gives their median and "
                        "spread (default: 3)")
    p.add_argument("--target-epoch-s", type=float, metavar="SECONDS",
                   help="choose the largest theta_max whose epoch takes at most this (default: "
                        "the knee of the cost curve)")
    p.add_argument("--memory-gib", type=float, metavar="GIB",
                   help="choose within this peak training memory, in GiB")
    p.add_argument("--force", action="store_true",
                   help="replace budgets.* files already in DIR")
    add_config_flags(p, leave_out=NOT_MEASURED)
    out = next(a for a in p._actions if a.dest == "out")
    out.help = ("directory to write budgets.md, budgets.csv and budgets.png into (made if "
                "missing; its parent must exist); required")


def _thetas(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or not all(0.0 < v <= 1.0 for v in values):
        raise UsageError(f"--thetas must be theta_max values in (0, 1], comma-separated, got "
                         f"{text!r}")
    return values


def run(args: argparse.Namespace) -> int:
    """``edgegcl bench KIND`` with its parsed ``args`` (``budgets``, the one kind); the exit
    code."""
    paths = bench_budgets(args.out, args.config, settings=config_settings(args),
                          thetas=_thetas(args.thetas), repeats=args.repeats, force=args.force,
                          command=args.command_line, target_epoch_s=args.target_epoch_s,
                          memory_gib=args.memory_gib)
    print(paths[0].read_text(), end="")
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0
