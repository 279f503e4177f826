"""A whole training run, as ``edgegcl train`` runs it: the plan (edgegcl.jobs.plan: the
configuration, a run to resume, the profile, all checked before torch loads), then the plan
executed (edgegcl.jobs.execute: graph, ranks, run directory, threads, auto-budget, seeds) and
the run loaded back.

Example:
    >>> import edgegcl
    >>> run = edgegcl.train(settings={"dataset": "synthetic", "epochs": 40},
    ...                     out="runs/mine")  # doctest: +SKIP
    >>> run.metrics["summary"]["test_micro_f1"]["mean"], run.embed().shape  # doctest: +SKIP
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgegcl.budget.profiles import DeviceProfile
from edgegcl.errors import UsageError
from edgegcl.jobs.arguments import (budget_argument, flag_argument, hooks_argument,
                                    path_argument, settings_argument, stop_argument)
from edgegcl.jobs.plan import Plan, Request, config_argument, plan, profile_argument
from edgegcl.training.config import RESUMABLE, TrainConfig, option_value
from edgegcl.training.hooks import Hook
from edgegcl.training.logger import make_logger

if TYPE_CHECKING:
    from torch_geometric.data import Data

    import torch

    from edgegcl.training.runs import Run


def train(config: TrainConfig | str | Path | None = None, graph: Data | None = None, *,
          settings: Mapping[str, object] | None = None, out: str | Path | None = None,
          resume: str | Path | None = None, profile: str | Path | DeviceProfile | None = None,
          auto_budget: bool = False, target_epoch_s: float | None = None,
          memory_gib: float | None = None, remeasure: bool = False, hooks: Sequence[Hook] = (),
          logger: str = "none", save_embeddings: bool = False,
          stop: Callable[[], bool] | None = None, handle_signals: bool = False) -> Run | None:
    """Train as ``edgegcl train`` does, with the same checks in the same order; the finished
    run (``edgegcl.load_run``'s ``Run``), or None on a rank other than 0 under torchrun.

    ``config``: a ``TrainConfig``, a TOML file or preset name, or None for the dataset's tuned
    defaults; ``settings``: options by name over it (the flags: ``{"theta_max": 0.3}``);
    ``graph``: a ``Data`` to train on instead of loading ``dataset``; ``out``: the new run
    directory (default ``runs/DATASET-TIMESTAMP``); ``resume``: a stopped run to continue;
    ``profile``, ``auto_budget``, ``target_epoch_s``, ``memory_gib``, ``remeasure``: the
    resource profiler (``edgegcl profiles``); ``hooks``: called by every seed's loop
    (edgegcl.training.hooks); ``logger``: ``none`` or ``tensorboard``; ``save_embeddings``:
    also write RUN_DIR/embeddings.npy; ``stop``: polled after every epoch, true stops the run
    with its state saved (``Stopped``); ``handle_signals``: SIGINT / SIGTERM do the same (the
    first; a second stops at once).

    Raises ``UsageError`` (one line) for bad input, with nothing of the user's written;
    ``Stopped`` (its ``run_dir`` and ``signum`` set) when stopped; under torchrun
    ``RankLost`` (its ``run_dir`` set) when another rank stopped.

    Example:
        >>> import edgegcl
        >>> run = edgegcl.train(settings={"dataset": "cora", "theta_max": 0.2},
        ...                     profile="cpu", auto_budget=True)  # doctest: +SKIP
        >>> run.path, run.config.schedule.theta_max  # doctest: +SKIP
    """
    given = settings_argument(settings)
    out, resume = path_argument("out", out), path_argument("resume", resume)
    if out is not None:
        if "out" in given and str(given["out"]) != str(out):  # two directories: which one?
            raise UsageError(f"out={str(out)!r} and settings['out']={str(given['out'])!r} name "
                             "two run directories; pass one")
        given["out"] = str(out)
    hooks = hooks_argument(hooks, Hook)
    stop = stop_argument(stop)
    for name, flag in (("auto_budget", auto_budget), ("remeasure", remeasure),
                       ("save_embeddings", save_embeddings),
                       ("handle_signals", handle_signals)):
        flag_argument(name, flag)
    if handle_signals and threading.current_thread() is not threading.main_thread():
        raise UsageError("handle_signals=True works in the main thread only (Python delivers "
                         "signals there); pass False, and stop= to stop the run")
    request = Request(config_argument(config), given, resume, profile_argument(profile),
                      budget_argument("target_epoch_s", target_epoch_s),
                      budget_argument("memory_gib", memory_gib), remeasure, auto_budget)
    made_logger = make_logger(logger)
    try:
        with ExitStack() as hold:  # the run directory's lock, released however training ends
            settled = plan(request, hold)  # every refusal before torch loads
            return execute_plan(settled, hold, graph, hooks, made_logger, save_embeddings, stop,
                                handle_signals)
    finally:
        if made_logger is not None:
            made_logger.close()


def train_seeds(cfg: TrainConfig, data: Data, run_dir: str | Path,
                device: torch.device | str | None = None, *, resume: bool = False,
                hooks: Sequence[Hook] = (), stop: Callable[[], bool] | None = None
                ) -> dict[str, Any]:
    """``cfg``'s seeds trained on ``data`` into ``run_dir``, and their metrics (what
    ``metrics.json`` holds; ``{}`` on a rank other than 0 under torchrun): ``train`` with a
    configuration and a graph in hand, through the same checks (``run_dir`` new or empty).
    ``device``: where to train (default ``cfg``'s ``--device``); ``resume``: continue the
    stopped run in ``run_dir``, ``cfg``'s epochs, device, threads and time budget over its
    saved configuration (what ``--resume`` may change; its other values are the run's own);
    ``hooks``, ``stop``: as ``train``'s.

    Example:
        >>> from edgegcl import SyntheticSpec, TrainConfig, synthetic_graph
        >>> cfg = TrainConfig(epochs=40, eval_every=5, patience=3)
        >>> metrics = train_seeds(cfg, synthetic_graph(SyntheticSpec()), "runs/mine",
        ...                       "cpu")  # doctest: +SKIP
        >>> metrics["summary"]["test_micro_f1"]["mean"]  # doctest: +SKIP
    """
    if not isinstance(cfg, TrainConfig):
        raise UsageError(f"cfg must be a TrainConfig, got {type(cfg).__name__}; pass "
                         "TrainConfig(...), or call edgegcl.train with a file or settings")
    if device is not None:
        cfg = cfg.replace(run={"device": str(device)})
    if resume:
        run = train(graph=data, settings={name: option_value(cfg, name) for name in RESUMABLE},
                    resume=run_dir, hooks=hooks, stop=stop)
    else:
        run = train(cfg, data, out=run_dir, hooks=hooks, stop=stop)
    return {} if run is None or run.metrics is None else run.metrics


def execute_plan(settled: Plan, hold: ExitStack, graph: Data | None = None,
                 hooks: Sequence[Hook] = (), logger: Hook | None = None,
                 save_embeddings: bool = False, stop: Callable[[], bool] | None = None,
                 handle_signals: bool = False) -> Run | None:
    """``settled`` trained (edgegcl.jobs.execute.execute, ``train``'s arguments)."""
    # torch and the training code load here, once the plan has refused what it would
    # (bench/results/cli-latency.md: 1.4 s of imports before a one-line refusal otherwise)
    from edgegcl.jobs.execute import execute

    return execute(settled, hold, graph, hooks, logger, save_embeddings, stop, handle_signals)
