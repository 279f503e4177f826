"""What theta_max costs on a full graph: epochs held at a budget, and whole runs, side by side.

Two measurements in one process, nothing else running (issue 22, item 5):

1. **Held budgets.** One trainer per (scheduler, theta_max), HANS held saturated (every eta =
   1: the state the deadline pace keeps for most of a run), stepped in interleaved blocks of
   T_int epochs, so the strata's refresh every T_int epochs is counted and a background load
   does not favour one of them; the step split into phases (edgegcl.phases). This is also the
   time axis of the accuracy-cost curve (bench.hardness).
2. **Whole runs.** ``edgegcl train``'s epochs for the whole run at ``--theta-max`` (the
   deadline pace brings it to its budget early) against ``--scheduler none`` (every negative
   from epoch 1), the two trainers stepped in alternating blocks of 10 epochs from epoch 1 to
   the last; the ratio of their mean epochs.

The encoder's share is the floor any budget leaves: its multiply-adds are counted from the
graph and the layer sizes and set against the machine's measured dense-product rate.

    python -m bench.budget_cost --root ../shared/datasets --dataset Cora --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import harness

import torch
from torch_geometric.data import Data

from edgegcl.training.config import TrainConfig, build
from edgegcl.contrast.scheduler import CATEGORIES
from edgegcl.nn.augment import as_features
from edgegcl.phases import PhaseClock
from edgegcl.training.engine import Trainer

HERE = Path(__file__).resolve().parent
THETAS = (0.1, 0.3, 0.6, 1.0)


def encoder_gflop(data: Data, cfg: TrainConfig) -> float:
    """Multiply-adds x 2 of one step's encoder and head, both views, forward and backward.

    Per view: the first layer's sparse product (nonzeros of x x hidden) and aggregation
    ((E + N) x width, each layer), the second layer's dense product, the head's two; backward
    twice the forward for dense products (input and weight gradients), once for the first
    layer (no gradient to x) and the aggregations.
    """
    n, e = data.num_nodes, data.edge_index.size(1)
    nnz = int((data.x != 0).sum())
    m = cfg.model
    h, o, p = m.hidden_dim, m.out_dim, m.proj_dim
    agg = (e + n) * (h + o)
    dense = n * h * o + n * o * p + n * p * o
    forward = nnz * h + agg + dense
    backward = nnz * h + agg + 2 * dense
    return 2 * 2 * (forward + backward) / 1e9


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def dense_rate_gflops(n: int, width: int, out: int, device: torch.device) -> float:
    """Measured GFLOP/s of an [n, width] x [width, out] float32 product (median of 5)."""
    a, b = torch.randn(n, width, device=device), torch.randn(width, out, device=device)
    a @ b
    times = []
    for _ in range(5):
        _sync(device)
        t0 = time.perf_counter()
        a @ b
        _sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * n * width * out / statistics.median(times) / 1e9


Step = Callable[[PhaseClock | None], None]


def held(cfg: TrainConfig, data: Data, x: torch.Tensor) -> Step:
    """A trainer with HANS held saturated at ``cfg``'s budget; each call one epoch."""
    trainer = Trainer(cfg, x.size(1), device=x.device, seed=0)
    trainer.scheduler.eta = dict.fromkeys(CATEGORIES, 1.0)
    trainer.scheduler.saturated_at = 0
    count = [0]

    def step(clock: PhaseClock | None) -> None:
        count[0] += 1
        trainer.train_step(x, data.edge_index, step=count[0], clock=clock)
    return step


def held_budgets(base: TrainConfig, data: Data, x: torch.Tensor, rounds: int
                 ) -> dict[str, dict[str, Any]]:
    """Mean epoch seconds and phases of every (scheduler, theta_max), interleaved."""
    variants = {f"{kind}@{t:g}": replace(base, theta_max=t, scheduler=kind)
                for kind in ("hans", "random") for t in THETAS}
    variants["all"] = replace(base, scheduler="none")
    steps = {name: held(cfg, data, x) for name, cfg in variants.items()}
    clocks = {name: PhaseClock(x.device) for name in steps}
    seconds = {name: 0.0 for name in steps}
    block = base.schedule.T_int
    for r in range(rounds + 1):  # round 0 warms up every variant
        for name, step in steps.items():
            _sync(x.device)
            t0 = time.perf_counter()
            for _ in range(block):
                clock = clocks[name] if r else None
                if clock is not None:
                    clock.start()
                step(clock)  # Trainer.train_step counts the clock's steps
            if r:
                _sync(x.device)
                seconds[name] += time.perf_counter() - t0
        print(f"budget_cost: held round {r}/{rounds}", flush=True)
    return {name: {"epoch_s": seconds[name] / (rounds * block),
                   "phases_s": clocks[name].mean()} for name in steps}


def profiler_rounds(base: TrainConfig, data: Data, device: torch.device, theta: float,
                    rounds: int) -> list[dict[str, float]]:
    """The profiler's own measurement (``measure_theta``, both logits paths, the cheaper
    kept as the search keeps it) of ``theta`` and of 1, alternated ``rounds`` times."""
    from edgegcl.budget.profiler import measure_theta
    from edgegcl.contrast.pairs import PATHS

    out = []
    for r in range(rounds):
        row = {}
        for t in (theta, 1.0):
            row[f"{t:g}"] = min(measure_theta(data, replace(base, logits=path), device, t).epoch_s
                                or float("inf") for path in PATHS)
        out.append(row)
        print(f"budget_cost: profiler round {r + 1}/{rounds}", flush=True)
    return out


def _alternate(runs: dict[str, Trainer], data: Data, x: torch.Tensor, epochs: int
               ) -> dict[str, float]:
    """Mean epoch seconds of each trainer, all stepped ``epochs`` epochs in alternating blocks
    of 10, so a drift of the machine's speed falls on all of them."""
    seconds = dict.fromkeys(runs, 0.0)
    for start in range(0, epochs, 10):
        for name, trainer in runs.items():
            _sync(x.device)
            t0 = time.perf_counter()
            for _ in range(min(10, epochs - start)):
                trainer.fit_epoch(x, data.edge_index)
            _sync(x.device)
            seconds[name] += time.perf_counter() - t0
        print(f"budget_cost: whole runs, epoch {min(start + 10, epochs)}/{epochs}", flush=True)
    return {name: s / epochs for name, s in seconds.items()}


def whole_runs(base: TrainConfig, data: Data, x: torch.Tensor, theta: float
               ) -> dict[str, float]:
    """Mean epoch seconds over whole runs: ``--theta-max theta`` against ``--scheduler
    none``, the same epochs, in alternating blocks of 10 epochs."""
    runs = {f"{base.schedule.scheduler}@{theta:g}": Trainer(replace(base, theta_max=theta), x.size(1),
                                       device=x.device, seed=0),
            "all": Trainer(replace(base, scheduler="none"), x.size(1), device=x.device, seed=0)}
    seconds = _alternate(runs, data, x, base.run.epochs)
    hans = runs[f"{base.schedule.scheduler}@{theta:g}"].scheduler
    return {**seconds,
            "saturated_at": float(hans.saturated_at or 0)}  # 0: never


def whole_cells(values: dict[str, Any], data: Data, x: torch.Tensor, cells: list[str]
                ) -> dict[str, float]:
    """Mean epoch seconds over whole runs of bench.hardness's ``cells`` (``all`` first: the
    baseline), each ``values`` + the cell's changes, stepped in alternating blocks of 10
    epochs from epoch 1 to the last."""
    from bench.hardness import cell_flags

    cfgs = {cell: build(values, cell_flags(cell)) for cell in ["all", *cells]}
    epochs = {c.run.epochs for c in cfgs.values()}
    if len(epochs) != 1:
        raise SystemExit(f"budget_cost: the cells run different epochs {sorted(epochs)}")
    total = epochs.pop()
    runs = {cell: Trainer(cfg, x.size(1), device=x.device, seed=0) for cell, cfg in cfgs.items()}
    return _alternate(runs, data, x, total)


def cells_report(res: dict[str, Any]) -> str:
    """The markdown of a ``--cells`` measurement: each cell's mean epoch against ``all``."""
    lines = [f"# Whole-run epoch time of false-negative-aware settings on {res['dataset']}", "",
             *harness.header(res),
             f"Each cell is a whole {res['epochs']}-epoch run of `edgegcl train --dataset "
             f"{res['dataset']}` (its tuned defaults) with bench.hardness's cell changes; all the "
             "runs stepped side by side in one process, in alternating blocks of 10 epochs, so "
             "a drift of the machine's speed falls on all of them. `all` is `--scheduler none`.",
             "", "| cell | mean epoch ms | / all |", "|---|---|---|"]
    base = res["whole"]["all"]
    for cell, sec in res["whole"].items():
        lines.append(f"| {cell} | {_ms(sec)} | {sec / base:.2f} |")
    return "\n".join(lines) + "\n"


def _ms(s: float) -> str:
    return f"{1000 * s:.0f}"


def _profiler_lines(res: dict[str, Any], theta: float) -> list[str]:
    """The profiler's ratio per round and their median (runs without it: nothing)."""
    rounds = res.get("profiler")
    if not rounds:
        return []
    ratios = [r[f"{theta:g}"] / r["1"] for r in rounds]
    return [f"The profiler's own measurement (`measure_theta`, the cheaper logits path, as "
            f"`edgegcl profile` measures), theta_max {theta:g} then 1, {len(rounds)} rounds: "
            + ", ".join(f"{_ms(r[f'{theta:g}'])} / {_ms(r['1'])} ms = {q:.2f}"
                        for r, q in zip(rounds, ratios))
            + f"; median **{statistics.median(ratios):.2f}** (target 0.40).", ""]


def report(res: dict[str, Any]) -> str:
    heldr, whole = res["held"], res["whole"]
    full = heldr["hans@1"]["epoch_s"]
    at_1 = heldr["hans@1"]["phases_s"]
    encoder = at_1["encoder forward"] + at_1["encoder backward"]
    lines = [f"# What theta_max costs on {res['dataset']}'s full graph", "",
             *harness.header(res),
             *([res["note"], ""] if res.get("note") else []),
             "Held: HANS held saturated at each budget, stepped in interleaved blocks of T_int "
             "epochs (strata refreshes counted). Whole runs: the default scheduler at "
             "`--theta-max` against `--scheduler none`, alternating blocks of 10 epochs.", "",
             f"Configuration: `edgegcl train --dataset {res['dataset']}`'s (its tuned defaults); "
             f"pick {res['pick']}, strata {res['stratify']}, logits {res['logits']}.", "",
             "## Held at a saturated budget", "",
             "| variant | epoch ms | / hans@1 | encoder fwd+bwd | contrast | optimiser |",
             "|---|---|---|---|---|---|"]
    for name, row in heldr.items():
        ph = row["phases_s"]
        enc = ph["encoder forward"] + ph["encoder backward"]
        con = sum(ph[p] for p in harness.CONTRAST_PHASES)
        lines.append(f"| {name} | {_ms(row['epoch_s'])} | {row['epoch_s'] / full:.2f} | "
                     f"{_ms(enc)} | {_ms(con)} | {_ms(ph['optimiser'])} |")
    lines += ["", "Phases of each step (ms): " + "; ".join(
        f"{name}: " + ", ".join(f"{p} {_ms(v)}" for p, v in row["phases_s"].items() if v > 5e-4)
        for name, row in heldr.items()), ""]
    theta, kind = res["whole_theta"], res.get("scheduler", "hans")
    ratio = whole[f"{kind}@{theta:g}"] / whole["all"]
    held_ratios = "; ".join(
        f"`--scheduler {k}`{' (the default)' if k == kind else ''}: **"
        f"{heldr[f'{k}@{theta:g}']['epoch_s'] / heldr[f'{k}@1']['epoch_s']:.2f}**"
        for k in ("random", "hans"))
    lines += ["## Whole runs", "",
              f"{res['epochs']} epochs each, side by side: `--scheduler {kind} --theta-max "
              f"{theta:g}` ("
              + (f"saturated from epoch {int(whole['saturated_at']) + 1}"
                 if whole["saturated_at"] else "never saturated") + ") mean epoch "
              f"{_ms(whole[f'{kind}@{theta:g}'])} ms, `--scheduler none` {_ms(whole['all'])} ms: "
              f"**{ratio:.2f}** (target 0.40).", "",
              f"Held at theta_max {theta:g} against theta_max 1, the same scheduler: {held_ratios}"
              " (target 0.40).", "",
              *_profiler_lines(res, theta),
              "## The floor", "",
              f"The encoder and head, both views, forward and backward: "
              f"{res['encoder_gflop']:.1f} GFLOP per step; this machine's dense product "
              f"({res['rate_shape']}) runs at {res['rate_gflops']:.0f} GFLOP/s, so its "
              f"multiply-adds alone take {_ms(res['encoder_gflop'] / res['rate_gflops'])} ms; "
              f"measured {_ms(encoder)} ms (with the elementwise work and the sparse products, "
              f"which run below that rate). Held at theta_max 1 the epoch is {_ms(full)} ms, "
              f"so a budget whose contrast cost nothing would still be "
              f"{(encoder + at_1['optimiser']) / full:.2f} of it.", ""]
    return "\n".join(lines)


def main() -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--root", required=True)
    p.add_argument("--dataset", default="Cora")
    p.add_argument("--rounds", type=int, default=3, help="timed blocks of T_int epochs")
    p.add_argument("--theta", type=float, default=0.1, help="the whole runs' theta_max")
    p.add_argument("--epochs", type=int, default=None, help="whole runs' epochs (default: "
                   "the dataset's)")
    p.add_argument("--flags", default="", help="config changes for every variant, as "
                   "key=value,key=value (e.g. pick=random)")
    p.add_argument("--name", default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--report-only", action="store_true",
                   help="rewrite the .md of --name's existing JSON")
    p.add_argument("--cells", default="", help="instead: whole runs of these bench.hardness "
                   "cells against all, side by side (e.g. random@0.1+negative_weight=progcl)")
    args = p.parse_args()
    name = args.name or f"budget-cost-{args.dataset.lower()}" + (
        "" if args.device == "cpu" else f"-{torch.device(args.device).type}")
    if args.cells and args.name is None:
        name = f"fn-cost-{args.dataset.lower()}"
    if args.report_only:
        res = json.loads((harness.RESULTS / f"{name}.json").read_text())
        harness.save(harness.RESULTS / f"{name}.md",
                     (cells_report if "cells" in res else report)(res))
        return

    from edgegcl.training.config import tuned_defaults
    from edgegcl.data import load_graph
    from edgegcl.memory import reuse_freed_memory

    reuse_freed_memory()
    flags = dict(kv.split("=", 1) for kv in args.flags.split(",") if kv)
    if args.epochs:
        flags["epochs"] = args.epochs
    base = build({"dataset": args.dataset, **tuned_defaults(args.dataset)[1]}, flags)
    if base.model.encoder == "auto":  # held budgets and whole runs time one encoder
        raise SystemExit("bench.budget_cost times one encoder, and this configuration chooses "
                         "one per seed (encoder = auto): add --flags encoder=gcn (or ego, poly)")
    device = torch.device(args.device)
    data = load_graph(args.dataset, args.root).to(device)
    x = as_features(data.x).to(device)
    t0 = time.perf_counter()
    m = base.model
    res: dict[str, Any] = {
        **harness.record("budget_cost", sys.argv[1:], root=args.root), "dataset": args.dataset,
        "scheduler": base.schedule.scheduler, "pick": base.contrast.pick, "stratify": base.contrast.resolved_stratify(base.schedule.scheduler), "logits": base.contrast.logits,
        "epochs": base.run.epochs, "whole_theta": args.theta,
        "encoder_gflop": encoder_gflop(data, base),
        "rate_gflops": dense_rate_gflops(data.num_nodes, m.hidden_dim, m.out_dim, device),
        "rate_shape": f"[{data.num_nodes}, {m.hidden_dim}] x [{m.hidden_dim}, {m.out_dim}]"}
    if args.cells:
        cells = args.cells.split(",")
        res.update(cells=cells, whole=whole_cells(
            {"dataset": args.dataset, **tuned_defaults(args.dataset)[1], **flags}, data, x,
            cells), wall_min=(time.perf_counter() - t0) / 60)
        harness.save(harness.RESULTS / f"{name}.json", json.dumps(res, indent=1) + "\n")
        harness.save(harness.RESULTS / f"{name}.md", cells_report(res))
        print(cells_report(res))
        return
    res["profiler"] = profiler_rounds(base, data, device, args.theta, args.rounds)
    res["held"] = held_budgets(base, data, x, args.rounds)
    res["whole"] = whole_runs(base, data, x, args.theta)
    res["wall_min"] = (time.perf_counter() - t0) / 60
    harness.save(harness.RESULTS / f"{name}.json", json.dumps(res, indent=1) + "\n")
    harness.save(harness.RESULTS / f"{name}.md", report(res))
    print(report(res))


if __name__ == "__main__":
    main()
