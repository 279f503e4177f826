"""Does hardness help? HANS against a random subset of the same size and against all negatives.

One harness, the honest protocol (checkpoint chosen on validation micro-F1, test read once),
each dataset at its tuned defaults (``edgegcl train --dataset D`` with no ``--config``) with
one cell's change:

- ``hans@T``: HANS at theta_max = T (hardest picks, the deadline pace; ``+pick=random`` for
  Algorithm 1's picks, HANS's default now);
- ``random@T``: ``--scheduler random`` at theta_max = T: the same pace with every gate open,
  each anchor's active set a uniform random subset of its candidates of HANS's size;
- ``all``: ``--scheduler none``, every candidate from epoch 1 (GRACE's contrast);
- ``before``: edgegcl's defaults before issue 22 (random members of ratio-cut pools, sampled
  strata, the paper's fixed pace, per-category InfoNCE over the active negatives, the gate
  opening when any category stalls, T_init 60, T_int 20, e 10), at theta_max = 1;
- any cell with ``+key=value`` modifiers (config fields), e.g. ``hans@0.3+reach=0.2``;
  ``synthetic`` is the planted-class graph (``+homophily=0.55`` and friends set its
  ``[synthetic]`` section), whose false negatives are known by construction.

Each finished run is added to bench/results/NAME.json at once (atomically) and NAME.md /
NAME.png are rewritten from everything in it, so the sweep can stop and resume (``--resume``).
Accuracy runs go one process at a time by default (``--jobs 1``): two torch processes on two
cores slow each other up to 10x. Epoch times in the table are the runs' own (drifting with
whatever else the machine does); the side-by-side timings are bench.budget_cost's.

    python -m bench.hardness --root ../shared/datasets --datasets Cora,CiteSeer --seeds 5 \\
        --resume
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from bench import harness

HERE = Path(__file__).resolve().parent
THETAS = (0.1, 0.3, 0.6, 1.0)
DEFAULT_CELLS = ",".join([*(f"hans@{t:g}" for t in THETAS), *(f"random@{t:g}" for t in THETAS),
                          "all", "before"])
BEFORE = {"scheduler": "hans", "pick": "random", "stratify": "sampled", "pace": "fixed",
          "category_loss": "sum", "gate": "any", "T_init": 60, "T_int": 20, "e": 10,
          "theta_max": 1.0}
"""edgegcl's HANS defaults at commit 8d34e79, before this harness's issue (22)."""


def cell_flags(cell: str) -> dict[str, Any]:
    """A cell's config changes: ``hans@0.3``, ``random@0.6``, ``all``, ``before``, each with
    optional ``+key=value`` modifiers."""
    from edgegcl.training.config import FIELDS, coerce

    head, *mods = cell.split("+")
    if head == "all":
        flags: dict[str, Any] = {"scheduler": "none"}
    elif head == "before":
        flags = dict(BEFORE)
    elif head.startswith(("hans@", "random@")):
        kind, theta = head.split("@")
        flags = {"theta_max": float(theta), "scheduler": kind,  # hans@: the hardest picks,
                 **({"pick": "hardest"} if kind == "hans" else {})}  # as its rows were run
    else:
        raise SystemExit(f"hardness: unknown cell {cell!r}; use hans@T, random@T, all or before, "
                         "with optional +key=value")
    for mod in mods:
        key, _, value = mod.partition("=")
        if key not in FIELDS:
            raise SystemExit(f"hardness: {cell!r}: {key!r} is not a config field")
        flags[key] = coerce(key, value)
    return flags


def one_run(root: str, dataset: str, cell: str, seed: int, threads: int,
            device: str = "cpu", epochs: int | None = None) -> dict[str, Any]:
    """One seed of one cell, in a worker process (``epochs``: a shorter run, for a try)."""
    from bench.sweep import train_record

    flags = {**cell_flags(cell), **({"epochs": epochs} if epochs else {})}
    return {**train_record(root, dataset, None, flags, seed, threads, device), "cell": cell}


def _mean(runs: list[dict], key: str, form: str, scale: float = 1.0) -> str:
    """``form`` of the mean of ``key`` over ``runs`` (times ``scale``), or a dash."""
    return form.format(scale * statistics.fmean(r[key] for r in runs)) if runs else "—"


def side_by_side(ds: str, records: list[dict]) -> dict[str, float]:
    """Epoch seconds of each cell held at its saturated budget, measured side by side by
    bench.budget_cost on the same dataset and device as ``records``' runs
    (bench/results/budget-cost-DS[-cuda].json), if present."""
    devices = {r.get("device", "cpu") for r in records if r["dataset"] == ds}
    suffix = "" if devices <= {"cpu"} else "-cuda" if devices == {"cuda"} else None
    if suffix is None:  # runs on several devices: no one time axis fits them
        return {}
    path = harness.RESULTS / f"budget-cost-{ds.lower()}{suffix}.json"
    if not path.exists():
        return {}
    return {name: row["epoch_s"] for name, row in json.loads(path.read_text())["held"].items()}


def _paired(records: list[dict], ds: str, a: str, b: str, key: str) -> str:
    """Mean over the seeds both cells ran of (a - b), with how many seeds a is ahead."""
    by_seed = {r["seed"]: r[key] for r in records if r["dataset"] == ds and r["cell"] == b}
    diffs = [r[key] - by_seed[r["seed"]] for r in records
             if r["dataset"] == ds and r["cell"] == a and r["seed"] in by_seed]
    if not diffs:
        return "—"
    return (f"{statistics.fmean(diffs):+.2f} ({sum(d > 0 for d in diffs)} of {len(diffs)} "
            f"seeds ahead)")


def report(records: list[dict], invocations: list[dict], name: str, datasets: list[str],
           cells: list[str], seeds: int) -> str:
    """The markdown: per dataset one row per cell, then HANS against the random subset."""
    from bench.sweep import mean_std

    lines = ["# Does hardness help? HANS, a random subset of the same size, all negatives",
             "", "Measured by these commands, each adding its runs to the same JSON:", ""]
    for h in invocations:
        done = f" ({h['done']} finished)" if h.get("done", h["runs"]) != h["runs"] else ""
        lines += [f"- {h['started']}, {h['runs']} runs{done}, {h['jobs']} at a time, "
                  f"{h['wall_min']:.1f} min wall; {h['machine']}:", "",
                  f"      {h['command']}", ""]
    intro = (__doc__ or "").split("\n\n")
    lines += [intro[1].replace("\n", " "), "", intro[2], "",
              "Columns: n = seeds done; **val** = validation micro-F1 of the chosen checkpoint "
              "(what a user selects on); **test** = honest test micro-F1 there; mean ± "
              "population std over seeds. 'active' = mean over the run's epochs of the active "
              "negatives per anchor, as a share of the 2B - 2 candidates; 'at 90 %' = share of "
              "the epochs with at least 90 % of theta_max in use; **epoch ms held** = the epoch at "
              "the cell's saturated budget, every cell measured side by side in one process on "
              "an otherwise idle machine by bench.budget_cost (budget-cost-DATASET.md): the "
              "accuracy-cost curve; epoch ms in-run = the runs' own mean epoch, on a shared "
              "machine (runs went two at a time beside other work: not comparable).", ""]
    for ds in datasets:
        held = side_by_side(ds, records)
        lines += [f"## {ds}", "", "| cell | n | val | test | active | at 90 % | epoch ms held "
                  "| epoch ms in-run |", "|---|---|---|---|---|---|---|---|"]
        for cell in cells:
            runs = [r for r in records if r["dataset"] == ds and r["cell"] == cell]
            if not runs:  # a cell of another dataset
                continue
            timed = held.get(cell)
            cols = [mean_std([r["honest_val_micro_f1"] for r in runs]),
                    mean_std([r["honest_test_micro_f1"] for r in runs]),
                    _mean(runs, "active_share_mean", "{:.3f}"),
                    _mean(runs, "epochs_at_90pc_budget", "{:.2f}"),
                    "—" if timed is None else f"{1000 * timed:.0f}",
                    _mean(runs, "epoch_s_mean", "{:.0f}", 1000)]
            lines.append(f"| {cell} | {len(runs)}/{seeds} | " + " | ".join(cols) + " |")
        mine = [c for c in cells if any(r["dataset"] == ds and r["cell"] == c for r in records)]
        pairs = [(c, "random@" + c.split("@")[1]) for c in mine
                 if c.startswith("hans@") and "+" not in c]
        pairs = [(h, r) for h, r in pairs if r in mine]
        if pairs:
            lines += ["", "HANS minus the random subset, the same seeds (val / test):", ""]
        for h, r in pairs:
            val = _paired(records, ds, h, r, "honest_val_micro_f1")
            test = _paired(records, ds, h, r, "honest_test_micro_f1")
            lines.append(f"- theta_max {h.split('@')[1]}: val {val}, test {test}")
        base = min((c for c in mine if c.startswith("random@0.1")), key=len, default=None)
        if base is not None:
            common = set(base.split("+")[1:])  # the cells run with the same changes
            lines += ["", f"Each cell with {base}'s changes minus it, the same seeds (val / "
                      "test):", ""]
            lines += [f"- {c}: val {_paired(records, ds, c, base, 'honest_val_micro_f1')}, "
                      f"test {_paired(records, ds, c, base, 'honest_test_micro_f1')}"
                      for c in mine if c != base and common <= set(c.split("+")[1:])]
        lines.append("")
    lines += [f"Raw runs: {name}.json; plot: {name}.png."]
    return "\n".join(lines) + "\n"


def plot(records: list[dict], datasets: list[str], path: Path) -> None:
    """Honest test micro-F1 and epoch time against theta_max, HANS and the random subset, with
    all negatives and the old defaults as lines."""
    from bench.sweep import pyplot, save_png

    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(2, len(datasets), figsize=(5 * len(datasets), 7), squeeze=False)
    for j, ds in enumerate(datasets):
        mine = [r for r in records if r["dataset"] == ds]
        held = side_by_side(ds, mine)
        for kind, marker in (("hans", "o"), ("random", "s")):
            by_theta: dict[float, list[dict]] = {}
            for r in mine:
                if r["cell"].startswith(f"{kind}@") and "+" not in r["cell"]:
                    by_theta.setdefault(r["theta_max"], []).append(r)
            thetas = sorted(by_theta)
            if not thetas:
                continue
            acc = [[r["honest_test_micro_f1"] for r in by_theta[t]] for t in thetas]
            axes[0][j].errorbar(thetas, [statistics.fmean(a) for a in acc],
                                [statistics.pstdev(a) for a in acc], marker=marker, capsize=3,
                                label=f"{kind}, honest test")
            if all(f"{kind}@{t:g}" in held for t in thetas):  # the accuracy-cost curve
                ms, how = [1000 * held[f"{kind}@{t:g}"] for t in thetas], "held, side by side"
            else:
                ms = [1000 * statistics.fmean(r["epoch_s_mean"] for r in by_theta[t])
                      for t in thetas]
                how = "in-run"
            axes[1][j].plot(thetas, ms, marker=marker, label=f"{kind} ({how})")
        for cell, style in (("all", ":"), ("before", "--")):
            runs = [r for r in mine if r["cell"] == cell]
            if runs:
                axes[0][j].axhline(statistics.fmean(r["honest_test_micro_f1"] for r in runs),
                                   color="gray", ls=style, label=cell)
                if cell in held:
                    axes[1][j].axhline(1000 * held[cell], color="gray", ls=style,
                                       label=f"{cell} (held)")
        axes[0][j].set_title(f"{ds}: honest test micro-F1 vs theta_max")
        axes[1][j].set_xlabel("theta_max")
        axes[0][j].set_ylabel("test micro-F1 (%)")
        axes[1][j].set_ylabel("epoch ms")
        for ax in axes[:, j]:
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
    save_png(fig, path)


def main() -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--root", required=True, help="directory holding Cora/ and CiteSeer/")
    p.add_argument("--datasets", default="Cora,CiteSeer")
    p.add_argument("--cells", default=DEFAULT_CELLS, help="comma-separated cells, in order")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--epochs", type=int, default=None, help="override (a quick try only)")
    p.add_argument("--resume", action="store_true", help="keep the JSON's runs, skip them")
    p.add_argument("--name", default="hardness")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()

    from bench.sweep import Results

    datasets, cells = args.datasets.split(","), args.cells.split(",")
    for cell in cells:
        cell_flags(cell)  # a bad cell stops the sweep before it starts
    results = Results(args.name, args.resume or args.report_only)
    records = results.records
    shown = list(dict.fromkeys([*(r["cell"] for r in records), *cells]))
    shown_ds = list(dict.fromkeys([*datasets, *(r["dataset"] for r in records)]))
    tasks = [] if args.report_only else [
        (ds, cell, seed) for ds in datasets for cell in cells for seed in range(args.seeds)
        if not any(r["dataset"] == ds and r["cell"] == cell and r["seed"] == seed
                   for r in records)]

    def render() -> None:
        harness.save(harness.RESULTS / f"{args.name}.md",
                     report(records, results.invocations, args.name, shown_ds, shown,
                            args.seeds))
        plot(records, shown_ds, harness.RESULTS / f"{args.name}.png")

    results.run("hardness", tasks, lambda task, threads: (
        one_run, (args.root, *task, threads, args.device, args.epochs)), args.jobs, render)


if __name__ == "__main__":
    main()
