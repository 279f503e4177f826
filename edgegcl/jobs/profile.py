"""The resource profiler alone (``edgegcl profile``): a new run directory of its own
(``profile-DATASET-*``) holding the configuration and the profiler's table and choice
(edgegcl.jobs.autobudget)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from edgegcl.errors import UsageError
from edgegcl.jobs.arguments import (budget_argument, flag_argument, path_argument,
                                    settings_argument)
from edgegcl.jobs.plan import Request, config_argument, plan, profile_argument

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
    given = settings_argument(settings)
    out = path_argument("out", out)
    if out is not None:
        given["out"] = str(out)
    if profile is None:
        raise UsageError("profile must name a device profile (see 'edgegcl profiles')")
    request = Request(config_argument(config), given, None, profile_argument(profile),
                      budget_argument("target_epoch_s", target_epoch_s),
                      budget_argument("memory_gib", memory_gib),
                      flag_argument("remeasure", remeasure))
    with ExitStack() as hold:
        settled = plan(request, hold)  # every refusal before torch loads
        # torch loads here, once the plan has refused what it would (bench/results/cli-latency.md)
        from edgegcl.jobs.autobudget import profile_plan

        return profile_plan(settled, hold, graph)
