"""``edgegcl train``: the parsed flags to ``edgegcl.train``, and what a run prints when it ends
(its summary, or how to continue a stopped one)."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys

from edgegcl.cli.flags import config_settings
from edgegcl.errors import RankLost, Stopped
from edgegcl.jobs.ranks import world_size


def train_command(args: argparse.Namespace) -> int:
    """``edgegcl train`` with its parsed ``args``; the exit code."""
    from edgegcl.jobs.train import train  # lazy: `edgegcl train --help` answers without it

    torchrun = "torchrun ... -m edgegcl train"
    ranks = world_size() > 1
    try:
        run = train(args.config, settings=config_settings(args), resume=args.resume,
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
    if run is None:  # a rank other than 0 under torchrun
        return 0
    assert run.metrics is not None
    from edgegcl.jobs.execute import summary_lines  # loaded with the training, at no cost

    for warning, line in summary_lines(run.metrics, run.path):
        print(f"edgegcl: {line}" if warning else line, file=sys.stderr if warning else sys.stdout,
              flush=warning)
    if args.save_embeddings:
        print(f"wrote {run.path / 'embeddings.npy'}")
    return 0


def _paths(args: argparse.Namespace) -> str:
    """The flags naming the run's graph and root, which ``--resume`` needs again (a run's
    files choose no path: edgegcl.data.datasets.check_recorded_paths)."""
    return "".join(f" --{name} {shlex.quote(str(value))}" for name in ("dataset", "root")
                   if (value := getattr(args, name, None)))
