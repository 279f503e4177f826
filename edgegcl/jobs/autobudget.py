"""The profiler in a job (``train`` with ``auto_budget``, ``profile``): measurements from
the profile cache where it has them, the table and the choice printed and kept in the run
directory, one line when only the closest fit is left, one refusal when nothing fits in
memory, with what can make it fit for the mode measured.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import torch
from torch_geometric.data import Data

from edgegcl import runfiles
from edgegcl.budget.cache import ProfileCache
from edgegcl.budget.profiler import Calibration, calibrate as measure, closest_fit_line
from edgegcl.budget.profiler import pick_threads
from edgegcl.budget.profiles import DeviceProfile
from edgegcl.budget.search import format_table
from edgegcl.config import to_toml
from edgegcl.errors import UsageError
from edgegcl.jobs.plan import Plan
from edgegcl.jobs.rundir import new_run_dir, run_name
from edgegcl.jobs.start import Start, choose_threads, start
from edgegcl.progress import say
from edgegcl.training.config import TrainConfig
from edgegcl.training.state import write_atomic
from edgegcl.training.threads import ThreadChoice


def profile_plan(settled: Plan, hold: ExitStack, graph: Data | None = None) -> Calibration:
    """``edgegcl profile``'s work on its plan: a new ``profile-DATASET-*`` directory (locked in
    ``hold``) with the configuration, and the profiler's table and choice kept there."""
    s = start(settled, graph)
    run_dir, _ = new_run_dir(hold, s.cfg.run.out, f"profile-{run_name(s.cfg.data.dataset)}")
    write_atomic(run_dir / runfiles.CONFIG, to_toml(s.cfg))
    return calibrate(s, run_dir, threads=choose_threads(s))


def calibrate(s: Start, run_dir: Path, then: str = "",
              threads: ThreadChoice | None = None) -> Calibration:
    """The profiler under ``s``'s profile, its table and choice printed and kept
    (``calibrate_and_report``); a measuring ``threads`` chooses the thread count first."""
    assert s.profile is not None and s.data is not None
    return calibrate_and_report(s.data, s.cfg, s.profile, s.device, run_dir, then,
                                s.remeasure, threads)


def calibrate_and_report(data: Data, cfg: TrainConfig, profile: DeviceProfile,
                         device: torch.device, run_dir: Path, then: str = "",
                         remeasure: bool = False, threads: ThreadChoice | None = None
                         ) -> Calibration:
    """Run the profiler (measurements cached per device, graph, settings and thread count),
    print its table and choice, and keep it as RUN_DIR/profile.json; one line when only the
    closest fit is left (``then`` ends it), a UsageError when nothing fits in memory. A
    measuring ``threads`` chooses the thread count first (``pick_threads``), so the profiler
    measures what training will run at."""
    if threads is not None and threads.picker is not None and not threads.picker.done:
        say(threads.line())
        pick_threads(data, cfg, device, threads.picker)
        say(threads.line())
    say(f"profiling on {device} under profile {profile.name} (HANS at the costliest state "
        "the run can reach)")
    cache = ProfileCache.for_run(data, cfg, device, lambda w: say(f"warning: {w}"), remeasure)
    cal = measure(data, cfg, profile, device, log=say, cache=cache)
    if cal.cached:
        say(f"{cal.cached} of the {len(cal.paths)} measurements came from the profile cache "
            f"{cache.path} (--remeasure measures again)")
    write_atomic(run_dir / runfiles.PROFILE, json.dumps(cal.to_json(profile), indent=2) + "\n")
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

