"""The profiler on the command line (``train --auto-budget``, ``profile``): measurements from
the profile cache where it has them, the table and the choice printed and kept in the run
directory, one line when only the closest fit is left, one refusal when nothing fits in
memory, with what can make it fit for the mode measured.
"""

from __future__ import annotations

import argparse
import json
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from edgegcl.errors import UsageError

if TYPE_CHECKING:
    import torch
    from torch_geometric.data import Data

    from edgegcl.budget.profiler import Calibration
    from edgegcl.budget.profiles import DeviceProfile
    from edgegcl.training.config import TrainConfig
    from edgegcl.training.threads import ThreadChoice


def calibrate_and_report(data: Data, cfg: TrainConfig, profile: DeviceProfile,
                         device: torch.device, run_dir: Path, then: str = "",
                         remeasure: bool = False, threads: ThreadChoice | None = None
                         ) -> Calibration:
    """Run the profiler (measurements cached per device, graph, settings and thread count),
    print its table and choice, and keep it as RUN_DIR/profile.json; one line when only the
    closest fit is left (``then`` ends it), a UsageError when nothing fits in memory. A
    measuring ``threads`` chooses the thread count first (``pick_threads``), so the profiler
    measures what training will run at."""
    from edgegcl.budget.cache import ProfileCache
    from edgegcl.budget.profiler import calibrate, closest_fit_line, pick_threads
    from edgegcl.budget.search import format_table
    from edgegcl.progress import say
    from edgegcl.training.state import write_atomic

    if threads is not None and threads.picker is not None and not threads.picker.done:
        say(threads.line())
        pick_threads(data, cfg, device, threads.picker)
        say(threads.line())
    say(f"profiling on {device} under profile {profile.name} (HANS at the costliest state "
        "the run can reach)")
    cache = ProfileCache.for_run(data, cfg, device, lambda w: say(f"warning: {w}"), remeasure)
    cal = calibrate(data, cfg, profile, device, log=say, cache=cache)
    if cal.cached:
        say(f"{cal.cached} of the {len(cal.paths)} measurements came from the profile cache "
            f"{cache.path} (--remeasure measures again)")
    write_atomic(run_dir / "profile.json", json.dumps(cal.to_json(profile), indent=2) + "\n")
    print(format_table(cal.result))
    if cal.chosen is None:
        raise UsageError(f"nothing fits profile {profile.name}'s memory: {cal.result.reason}; "
                         f"nothing was trained ({memory_advice(cal)})")
    if cal.meets_target:
        print(cal.result.reason)
    else:
        say(closest_fit_line(cal, profile) + then)
    return cal


def memory_advice(cal: Calibration) -> str:
    """What can make a run fit in memory, for the mode it was measured in."""
    if cal.mode == "full":
        return ("give more memory with --memory-gib, or train neighbour-sampled mini-batches: "
                "--mode minibatch")
    return ("give more memory with --memory-gib, or sample fewer neighbours (--fanout), or "
            "use a profile whose batch_size_min is smaller")


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
