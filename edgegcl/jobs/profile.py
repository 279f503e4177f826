"""The resource profiler alone (``edgegcl profile``): a new run directory of its own
(``profile-DATASET-*``) holding the configuration and the profiler's table and choice
(edgegcl.jobs.autobudget)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from edgegcl.jobs.plan import Request, plan

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
    given = dict(settings or {})
    if out is not None:
        given["out"] = str(out)
    request = Request(config, given, None, profile, target_epoch_s, memory_gib, remeasure)
    with ExitStack() as hold:
        settled = plan(request, hold)  # every refusal before torch loads
        # torch loads here, once the plan has refused what it would (bench/results/cli-latency.md)
        from edgegcl.jobs.autobudget import profile_plan

        return profile_plan(settled, hold, graph)
