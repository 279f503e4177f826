"""``edgegcl train``: the parsed flags to ``edgegcl.train``, and what a run prints when it ends
(its summary, or how to continue a stopped one)."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys

from edgegcl.cli.flags import add_budget_flags, add_config_flags, config_settings
from edgegcl.errors import RankLost, Stopped
from edgegcl.jobs.ranks import world_size
from edgegcl.jobs.train import train
from edgegcl.training.config import RESUMABLE
from edgegcl.training.logger import LOGGERS

DESCRIPTION = ("Train AdNGCL with HANS; writes config, metrics, the HANS event log and "
               "checkpoints into a run directory.")


def add_options(p: argparse.ArgumentParser) -> None:
    """``train``'s options: a device profile and its budgets, the logger, the embeddings, a
    resume, and one flag per config option."""
    p.add_argument("--profile", metavar="NAME|FILE.toml",
                   help="device profile (see 'edgegcl profiles'): trains on its device")
    p.add_argument("--auto-budget", action="store_true",
                   help="with --profile: measure theta_max on the device first (measurements "
                        "are cached) and train with the largest that fits the profile's memory "
                        "and epoch-time budgets, or, when none meets the epoch time, the "
                        "fastest that fits in memory")
    add_budget_flags(p)
    p.add_argument("--logger", choices=LOGGERS, default=LOGGERS[0],
                   help="where the per-epoch rows and HANS events go besides the run "
                        "directory's files: none, or tensorboard (event files in each "
                        "RUN_DIR/seed-K; 'tensorboard --logdir RUN_DIR'; needs the tensorboard "
                        "extra) (default: none)")
    p.add_argument("--save-embeddings", action="store_true",
                   help="also write RUN_DIR/embeddings.npy: the kept encoder's embeddings of "
                        "every node of the training graph (float32 [nodes, out_dim], "
                        "np.load reads it)")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a stopped or crashed run from its seeds' saved state; only "
                        f"{', '.join('--' + f.replace('_', '-') for f in RESUMABLE)} (and "
                        "--logger) may change")
    add_config_flags(p)


def run(args: argparse.Namespace) -> int:
    """``edgegcl train`` with its parsed ``args``; the exit code."""
    torchrun = "torchrun ... -m edgegcl train"
    ranks = world_size() > 1
    try:
        trained = train(args.config, settings=config_settings(args), resume=args.resume,
                    profile=args.profile, auto_budget=args.auto_budget,
                    target_epoch_s=args.target_epoch_s, memory_gib=args.memory_gib,
                    remeasure=args.remeasure, logger=args.logger,
                    save_embeddings=args.save_embeddings, handle_signals=True)
    except Stopped as stopped:
        if os.environ.get("RANK", "0") == "0" and stopped.run_dir is None:
            print(f"edgegcl: {stopped}, before the run's first epoch: nothing was kept (its new "
                  "directory is removed); run the command again to start over", file=sys.stderr)
        elif os.environ.get("RANK", "0") == "0":  # rank 0 speaks for all
            again = torchrun if ranks else "edgegcl train"
            print(f"edgegcl: {stopped}; state saved; continue with: {again} --resume "
                  f"{stopped.run_dir}{_paths(args)}", file=sys.stderr)
        return 128 + (stopped.signum or signal.SIGTERM)
    except RankLost as lost:
        print(f"edgegcl: error: {lost}; the last saved state is kept: continue with {torchrun} "
              f"--resume {lost.run_dir}{_paths(args)}", file=sys.stderr)
        return 1
    if trained is None:  # a rank other than 0 under torchrun
        return 0
    assert trained.metrics is not None
    from edgegcl.jobs.execute import summary_lines  # torch's side: loaded by the training

    for warning, line in summary_lines(trained.metrics, trained.path):
        print(f"edgegcl: {line}" if warning else line, file=sys.stderr if warning else sys.stdout,
              flush=warning)
    if args.save_embeddings:
        print(f"wrote {trained.path / 'embeddings.npy'}")
    return 0


def _paths(args: argparse.Namespace) -> str:
    """The flags naming the run's graph and root, which ``--resume`` needs again (a run's
    files choose no path: edgegcl.data.datasets.check_recorded_paths)."""
    return "".join(f" --{name} {shlex.quote(str(value))}" for name in ("dataset", "root")
                   if (value := getattr(args, name, None)))
