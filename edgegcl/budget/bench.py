"""What each budget costs on this device: epoch time and peak memory per theta_max, measured as
the profiler measures them (``measure_theta``: HANS held at the state a run reaches at that
theta_max), on both logits paths (on one where ``--logits`` names it), each cell repeated and
reported as its median and spread, with how busy the machine was beside every figure, under
the command and the machine that measured it (an edgegcl.budget.table.BudgetTable, which
``edgegcl bench budgets`` writes as a table, a CSV file and a plot).

The repeats run interleaved (every cell once, then again in the opposite order), so that a
drift of the machine's speed falls on every cell alike. A cell during which other processes
used more than ``edgegcl.budget.table.BUSY_CORES`` of a core on average is marked busy: its figure is what a loaded
machine gave, not this device's.

Example:
    >>> table = measure_budgets(data, TrainConfig(), torch.device("cpu"), repeats=3)  # doctest: +SKIP
    >>> write_budgets(table, Path("out"))  # edgegcl.budget.table  # doctest: +SKIP
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Sequence

import psutil
import torch
from torch_geometric.data import Data

from edgegcl.budget.cache import cpu_model
from edgegcl.budget.profiler import auto_logits, measure_theta
from edgegcl.budget.table import THETAS, BudgetTable, Cell
from edgegcl.contrast.pairs import PATHS
from edgegcl.errors import UsageError
from edgegcl_embed.progress import Progress
from edgegcl.training.config import TrainConfig
from edgegcl.training.placement import resolve_mode


class OtherLoad:
    """The CPU other processes used during a block, in cores (CPU seconds over wall seconds).

    Counted from every process's CPU times before and after, this process and its children
    left out; a process that ends inside the block is missed, one that starts counts whole.
    """

    def __init__(self) -> None:
        self.cores = 0.0

    @staticmethod
    def _cpu_seconds() -> dict[int, float]:
        me = os.getpid()
        seconds = {}
        for proc in psutil.process_iter(["pid", "ppid", "cpu_times"]):
            info = proc.info
            times = info.get("cpu_times")
            if info["pid"] == me or info.get("ppid") == me or times is None:
                continue
            seconds[info["pid"]] = times.user + times.system
        return seconds

    def __enter__(self) -> OtherLoad:
        self._before, self._t0 = self._cpu_seconds(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = max(time.perf_counter() - self._t0, 1e-9)
        after = self._cpu_seconds()
        used = sum(max(0.0, s - self._before.get(pid, 0.0)) for pid, s in after.items())
        self.cores = used / wall

def measure_budgets(data: Data, cfg: TrainConfig, device: torch.device,
                    thetas: Sequence[float] = THETAS, repeats: int = 3,
                    progress: Callable[[float, str], None] | None = None) -> BudgetTable:
    """Measure every theta in ``thetas`` ``repeats`` times, interleaved
    (edgegcl.budget.profiler.measure_theta at ``cfg``'s settings), on both logits paths when
    ``cfg``'s is ``auto``, else on the path it names only; ``progress(done, text)`` is told
    after each measurement."""
    if repeats < 1 or not thetas:
        raise UsageError("--repeats must be at least 1 and --thetas name one budget or more")
    mode = resolve_mode(cfg, data, device)
    cfg = cfg.replace(run={"mode": mode})  # one choice for every measurement
    paths = PATHS if cfg.contrast.logits == "auto" else (cfg.contrast.logits,)
    cells = {(t, p): Cell(t, p) for t in sorted(set(thetas)) for p in paths}
    order = list(cells)
    t0, load0, started = time.perf_counter(), os.getloadavg()[0], time.strftime(
        "%Y-%m-%d %H:%M UTC", time.gmtime())
    done = 0
    for r in range(repeats):
        for key in order if r % 2 == 0 else order[::-1]:
            theta, logits = key
            with OtherLoad() as other:
                cost = measure_theta(data, cfg.replace(contrast={"logits": logits}), device,
                                     theta)
            cell = cells[key]
            cell.epoch_s.append(cost.epoch_s)
            cell.peak_bytes.append(cost.peak_bytes)
            cell.others.append(other.cores)
            done += 1
            if progress is not None:
                progress(done, f"theta_max {theta:.2f}, {logits} logits, repeat {r + 1}/{repeats}")
    return BudgetTable(getattr(data, "name", cfg.data.dataset), data.num_nodes,
                       int(data.edge_index.size(1)), mode, cfg.run.batch_size, str(device),
                       torch.get_num_threads(), repeats, list(cells.values()),
                       (load0, os.getloadavg()[0]), started, time.perf_counter() - t0,
                       {t: auto_logits(data, cfg, t) for t in sorted(set(thetas))},
                       cfg.contrast.logits, machine_line(device),
                       scheduler=cfg.schedule.scheduler)


def machine_line(device: torch.device) -> str:
    """One line naming the machine behind a measurement on ``device``: its CPU (and GPU), cores,
    memory, torch and its threads, and Python, so a reader can tell whose figures they are."""
    gpu = f", GPU {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
    return (f"{cpu_model()}, {psutil.cpu_count(logical=True)} cores, "
            f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM{gpu}; torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), Python {platform.python_version()}")

def progress_line(total: int, label: str) -> Callable[[float, str], None]:
    """A progress line with its ETA for ``total`` measurements, ended after the last."""
    bar = Progress(total, label)

    def update(done: float, text: str) -> None:
        bar.update(done, text)
        if done >= total:
            bar.close()
    return update
