"""What the accuracy sweeps share: one seed trained into a record, and a resumable runner.

``train_record`` trains one seed of one configuration in a worker process (the base config,
a file or preset, or a dataset's tuned defaults, with flags on top) and returns the record the
sweep's JSON keeps: honest test and validation micro-F1 at the checkpoint chosen on
validation, the authors' protocol figure when asked, mean epoch time, and how much of the
budget the schedule had in use over the run (from the seed's ``epochs.csv``).

``run_tasks`` runs tasks ``jobs`` at a time, saving after each finished run, so a sweep can
stop and resume (runs already in the JSON are skipped by the caller) and its partial tables
are always readable.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from bench import harness

Task = tuple[str, str, int]
"""(dataset, cell name, seed)."""

RATIO_COLUMNS = ("easy", "hard", "inter")
"""The order of the ratios in a record's ``ratios`` text, as the results files keep it."""


def ratios_text(ratios: dict[str, float]) -> str:
    """The category ratios as the records keep them: easy, hard, inter shares joined by
    commas (``20,30,50``), the form of every sweep's JSON in bench/results."""
    return ",".join(f"{ratios[c]:g}" for c in RATIO_COLUMNS)


def base_values(dataset: str, base: str | None) -> dict[str, Any]:
    """The configuration a run starts from: ``base`` (a file or preset, e.g. ``paper-Cora``),
    or the dataset's tuned defaults, as ``edgegcl train --dataset DATASET`` without
    ``--config``."""
    from edgegcl.training.config import load_toml, tuned_defaults

    return load_toml(base) if base else {"dataset": dataset, **tuned_defaults(dataset)[1]}


def train_record(root: str, dataset: str, base: str | None, flags: dict[str, Any], seed: int,
                 threads: int, device: str = "cpu") -> dict[str, Any]:
    """One seed of ``base`` + ``flags`` on ``dataset``, trained in this (worker) process."""
    import torch

    from edgegcl.training.config import build
    from edgegcl.contrast.negatives import num_candidates
    from edgegcl.data import load_graph
    from edgegcl.evaluation.authors import authors_figure
    from edgegcl.memory import reuse_freed_memory
    from edgegcl.training.seeds import train_seed
    from edgegcl.training.placement import resolve_mode

    torch.set_num_threads(threads)
    reuse_freed_memory()
    cfg = build(base_values(dataset, base), {"root": root, "dataset": dataset, **flags})
    data = load_graph(dataset, root, cfg.synthetic_spec())
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        r = train_seed(data, cfg, seed, torch.device(device), Path(tmp), f"{dataset} {seed}")
        with (Path(tmp) / "epochs.csv").open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    wall = time.perf_counter() - t0
    assert r.selection is not None
    anchors = data.num_nodes if resolve_mode(cfg, data, torch.device(device)) == "full" else \
        min(cfg.run.batch_size, data.num_nodes)
    active = statistics.fmean(float(w["active_per_anchor"]) for w in rows)
    record = {
        "dataset": dataset, "seed": seed, "epochs": cfg.run.epochs, "flags": flags,
        "theta_max": cfg.schedule.theta_max, "ratios": ratios_text(cfg.schedule.ratios),
        "scheduler": cfg.schedule.scheduler, "pick": cfg.contrast.pick,
        "honest_test_micro_f1": r.selection.scores.test_micro,
        "honest_val_micro_f1": r.selection.scores.val_micro,
        "honest_epoch": r.selection.epoch,
        "epoch_s_mean": statistics.fmean(r.epoch_times),
        "active_per_anchor_mean": active,
        "active_share_mean": active / num_candidates(anchors, cfg.contrast.candidates),
        "budget_used_mean": statistics.fmean(float(w["budget_used"]) for w in rows),
        "epochs_at_90pc_budget": sum(float(w["budget_used"]) >= 0.9 for w in rows) / len(rows),
        "final_eta": r.final_eta, "saturated_at_epoch": r.saturated_at, "wall_s": wall,
        "threads": threads, "device": device,
    }
    if r.authors:
        a_epoch, a = authors_figure(r.authors)
        record.update(authors_test_micro_f1=a.test_micro, authors_epoch=a_epoch,
                      authors_mean_over_checkpoints=statistics.fmean(
                          s.test_micro for _, s in r.authors))
    return record


def invocation(name: str, tasks: int, jobs: int) -> dict[str, Any]:
    """The header a sweep's JSON keeps per invocation: when, where, how, the command (dataset
    roots shown as ROOT)."""
    import torch

    from bench.machine import describe

    threads = max(1, (os.cpu_count() or 1) // jobs)
    return {"started": harness.stamp(),
            "machine": describe().replace(f"({torch.get_num_threads()} threads)",
                                          f"({threads} threads per run)"),
            "jobs": jobs, "runs": tasks, "wall_min": 0.0,
            "command": f"python -m bench.{name} " + " ".join(
                a if not a.startswith("/") else "ROOT" for a in sys.argv[1:])}


Submit = Callable[[Task, int], tuple[Callable[..., dict], tuple]]
"""``submit(task, threads)``: the function a worker runs for ``task`` and its arguments."""


def run_tasks(tasks: Sequence[Task], submit: Submit, jobs: int,
              on_record: Callable[[dict], None], label: str) -> None:
    """Run every task, ``jobs`` at a time with cores / jobs threads each; ``submit(task,
    threads)`` gives the function and arguments of a task, ``on_record`` receives each record
    as it finishes (the caller saves). Prints progress with an ETA."""
    threads = max(1, (os.cpu_count() or 1) // jobs)
    start = time.perf_counter()
    walls: list[float] = []
    print(f"{label}: {len(tasks)} runs to do, {jobs} at a time", flush=True)
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        futures = {}
        for task in tasks:
            fn, args = submit(task, threads)
            futures[pool.submit(fn, *args)] = task
        for i, fut in enumerate(as_completed(futures), start=1):
            rec = fut.result()
            on_record(rec)
            walls.append(rec["wall_s"])
            eta_min = statistics.fmean(walls) * (len(tasks) - i) / jobs / 60
            ds, cell, seed = futures[fut]
            print(f"{label}: {i}/{len(tasks)} {ds} {cell} seed {seed}: honest "
                  f"{rec['honest_test_micro_f1']:.2f} (val {rec['honest_val_micro_f1']:.2f}), "
                  f"{rec['wall_s'] / 60:.1f} min; elapsed "
                  f"{(time.perf_counter() - start) / 60:.1f} min, ETA {eta_min:.0f} min",
                  flush=True)


def mean_std(values: Sequence[float]) -> str:
    """``mean ± population std``, or a dash for no values."""
    if not values:
        return "—"
    return f"{statistics.fmean(values):.2f} ± {statistics.pstdev(values):.2f}"


class Results:
    """A sweep's runs and invocations in bench/results/NAME.json, saved after every finished
    run together with whatever the sweep renders from them (its table and plot), so a sweep
    can stop and resume and its partial results are always readable.

    ``resume``: keep the runs already in the JSON (the caller skips them); otherwise an
    existing JSON stops the sweep before it starts.
    """

    def __init__(self, name: str, resume: bool) -> None:
        self.name, self.path = name, harness.RESULTS / f"{name}.json"
        self.records: list[dict] = []
        self.invocations: list[dict] = []
        if resume and self.path.exists():
            saved = json.loads(self.path.read_text())
            self.records, self.invocations = saved["runs"], saved["invocations"]
        elif self.path.exists():
            raise SystemExit(f"{name}: {self.path} exists; pass --resume to add to it or "
                             "--name to start another")

    def run(self, label: str, tasks: Sequence[Task], submit: Submit, jobs: int,
            render: Callable[[], None]) -> None:
        """Run ``tasks`` (``run_tasks``), saving the JSON and calling ``render`` after each."""

        header = invocation(label, len(tasks), jobs)
        if tasks:
            self.invocations.append(header)
        start = time.perf_counter()

        def save(rec: dict | None = None) -> None:
            if rec is not None:
                self.records.append(rec)
                header["done"] = header.get("done", 0) + 1
            header["wall_min"] = (time.perf_counter() - start) / 60
            harness.save(self.path, json.dumps({"invocations": self.invocations,
                                                "runs": self.records}, indent=1) + "\n")
            render()

        run_tasks(tasks, submit, jobs, save, label)
        save()


def save_png(fig: Any, path: Path) -> None:
    """A matplotlib figure to ``path``, atomically (a temporary beside it, then renamed)."""
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=90)
    os.replace(tmp, path)
    import matplotlib.pyplot as plt

    plt.close(fig)  # a sweep saves after every run: an open figure each time would pile up


def pyplot() -> Any:
    """matplotlib's pyplot on the file backend, or None where matplotlib is not installed (the
    ``bench`` extra): a sweep then writes its table without the plot."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt
