"""``edgegcl profile --profile NAME``: the resource profiler alone, into a new run directory of
its own (``profile-DATASET-*``): the configuration, the profiler's table and choice
(edgegcl.cli.autobudget)."""

from __future__ import annotations

import argparse
from contextlib import ExitStack


def profile_command(args: argparse.Namespace) -> int:
    """``edgegcl profile`` with its parsed ``args``: the profiler alone, into a new
    ``profile-DATASET-*`` directory; the exit code."""
    from edgegcl.cli.rundir import new_run_dir, run_name
    from edgegcl.cli.setup import calibrate, choose_threads, setup
    from edgegcl.training.config import to_toml

    with ExitStack() as hold:
        s = setup(args, hold)
        from edgegcl.training.state import write_atomic

        run_dir, _ = new_run_dir(hold, s.cfg.run.out, f"profile-{run_name(s.cfg.data.dataset)}")
        write_atomic(run_dir / "config.toml", to_toml(s.cfg))
        calibrate(s, run_dir, threads=choose_threads(s))
    return 0
