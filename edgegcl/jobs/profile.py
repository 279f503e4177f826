"""The resource profiler alone (``edgegcl profile``): a new run directory of its own
(``profile-DATASET-*``) holding the configuration and the profiler's table and choice
(edgegcl.jobs.autobudget)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from edgegcl.jobs.start import Request, choose_threads, start

if TYPE_CHECKING:
    from torch_geometric.data import Data

    from edgegcl.budget.profiler import Calibration
    from edgegcl.budget.profiles import DeviceProfile
    from edgegcl.training.config import TrainConfig


def profile(config: TrainConfig | str | Path | None = None, graph: Data | None = None, *,
            profile: str | Path | DeviceProfile, settings: Mapping[str, object] | None = None,
            out: str | Path | None = None, target_epoch_s: float | None = None,
            memory_gib: float | None = None, remeasure: bool = False) -> Calibration:
    """Measure epoch time and peak memory per theta_max under device ``profile`` and choose
    the largest theta_max within its budgets, as ``edgegcl profile`` does (no training); the
    table and choice are printed and kept in the new directory ``out`` (default
    ``runs/profile-DATASET-TIMESTAMP``). ``config``, ``settings``, ``graph``: as
    ``edgegcl.train``'s.

    Example:
        >>> import edgegcl
        >>> cal = edgegcl.profile(settings={"dataset": "cora"}, profile="cpu")  # doctest: +SKIP
        >>> cal.chosen  # doctest: +SKIP
    """
    from edgegcl.jobs.autobudget import calibrate
    from edgegcl.jobs.rundir import new_run_dir, run_name
    from edgegcl.training.config import to_toml

    given = dict(settings or {})
    if out is not None:
        given["out"] = str(out)
    request = Request(config, given, None, profile, target_epoch_s, memory_gib, remeasure)
    with ExitStack() as hold:
        s = start(request, hold, graph)  # torch loads once the configuration is good
        from edgegcl.training.state import write_atomic

        run_dir, _ = new_run_dir(hold, s.cfg.run.out, f"profile-{run_name(s.cfg.data.dataset)}")
        write_atomic(run_dir / "config.toml", to_toml(s.cfg))
        return calibrate(s, run_dir, threads=choose_threads(s))
