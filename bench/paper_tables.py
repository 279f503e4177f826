"""The paper's tables, reproduced: HANS at the paper presets, its theta_max sweep, its ratio rows
and the all-negatives baseline, honest and authors' protocol side by side with the paper.

Every run is one seed of ``edgegcl train --config paper-DATASET`` (presets/; 2000 epochs,
probes every 50) with one cell's change, through ``edgegcl.training.seeds.train_seed``:

- ``preset``: the paper's best row (Cora theta_max 0.6, ratios 10,40,50; CiteSeer 1.0, 10,30,60);
- ``theta=X``: the preset at theta_max = X (the paper's theta_max table);
- ``ratios=E,H,I``: the preset at those EASY,HARD,INTER ratios (the paper's ratio table);
- ``baseline``: ``--scheduler none``, every one of the 2B - 2 candidates from epoch 1 (GRACE's
  contrast with the same encoder, views, epochs and evaluation).

Each finished run is added to bench/results/NAME.json at once (written atomically), and
NAME.md / NAME.png are rewritten from everything in it, so a long sweep can stop and resume
(``--resume``: runs already in the JSON are skipped) and its partial tables are always
readable. Runs go in the order of ``--cells``, dataset by dataset, seed by seed; ``--jobs``
runs that many at once, each with cores / jobs threads.

    python -m bench.paper_tables --root ../shared/datasets --datasets Cora,CiteSeer \\
        --cells preset,baseline --seeds 3 --preset-seeds 5 --jobs 2 --resume
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from bench import harness

HERE = Path(__file__).resolve().parent

PAPER_THETA = {  # the paper's table "Micro-F1 vs. maximum negative-sample percentage"
    "Cora": {0.0: 80.29, 0.1: 82.06, 0.2: 83.16, 0.3: 85.11, 0.4: 87.76, 0.5: 87.90, 0.6: 88.05,
             0.7: 87.76, 0.8: 87.83, 0.9: 87.90, 1.0: 88.05},
    "CiteSeer": {0.0: 71.20, 0.1: 72.13, 0.2: 73.26, 0.3: 73.59, 0.4: 75.06, 0.5: 75.39,
                 0.6: 75.21, 0.7: 75.45, 0.8: 75.87, 0.9: 75.84, 1.0: 76.50},
}
PAPER_RATIOS = {  # the paper's ratio table (EASY,HARD,INTER)
    "Cora": {"10,10,80": 82.83, "10,20,70": 85.44, "10,30,60": 87.43, "20,30,50": 87.79,
             "30,30,40": 87.68, "10,40,50": 88.09, "25,25,50": 87.35, "20,10,70": 82.76,
             "20,20,60": 86.32, "30,10,60": 83.27, "30,20,50": 86.62},
    "CiteSeer": {"10,10,80": 73.62, "10,20,70": 74.25, "10,30,60": 75.81, "20,30,50": 74.91,
                 "30,30,40": 74.85, "10,40,50": 74.37, "25,25,50": 75.36, "20,10,70": 73.17,
                 "20,20,60": 74.67, "30,10,60": 73.38, "30,20,50": 74.40},
}
PAPER_EPOCH_MS = {"Cora": (28, 33), "CiteSeer": (32, 37)}  # AvgEpoch, its two regimes (RTX 4090)
DEFAULT_CELLS = ("preset,baseline,theta=0.1,theta=0.3,theta=0.6,theta=1.0,ratios=10,30,60,"
                 "ratios=10,40,50,ratios=20,30,50,ratios=30,10,60")


def parse_cells(text: str) -> list[str]:
    """``preset,theta=0.1,ratios=10,30,60,baseline`` -> cell names (ratios keep their commas)."""
    cells: list[str] = []
    for part in text.split(","):
        if part.startswith(("preset", "baseline", "theta=", "ratios=")) or not cells:
            cells.append(part)
        else:
            cells[-1] += "," + part
    for c in cells:
        ok = c in ("preset", "baseline") or (c.startswith("theta=") and _float(c[6:]) is not None) \
            or (c.startswith("ratios=") and len(c[7:].split(",")) == 3)
        if not ok:
            raise SystemExit(f"paper_tables: unknown cell {c!r}; use preset, baseline, theta=X "
                             f"or ratios=E,H,I")
    return cells


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def cell_overrides(dataset: str, cell: str) -> dict[str, Any]:
    """The preset's fields a cell changes."""
    if cell == "baseline":
        return {"scheduler": "none"}
    if cell.startswith("theta="):
        return {"theta_max": float(cell[6:])}
    if cell.startswith("ratios="):
        return {"ratios": dict(zip(("easy", "hard", "inter"), map(float, cell[7:].split(","))))}
    return {}


def canonical(dataset: str, cell: str) -> str:
    """A cell equal to the preset is the preset (theta=0.6 on Cora, ratios=10,30,60 on
    CiteSeer, ...): it is run once and shown in every table it belongs to."""
    from edgegcl.training.config import build, coerce, load_toml, option_value

    if cell == "preset":
        return cell
    preset = build(load_toml(f"paper-{dataset}"), {})
    over = cell_overrides(dataset, cell)
    if all(option_value(preset, k) == coerce(k, v) for k, v in over.items()):
        return "preset"
    return cell


def paper_figure(dataset: str, cell: str, preset_theta: float, preset_ratios: str) -> float | None:
    if cell == "preset":
        return PAPER_THETA[dataset].get(preset_theta)
    if cell.startswith("theta="):
        return PAPER_THETA[dataset].get(round(float(cell[6:]), 2))
    if cell.startswith("ratios="):
        return PAPER_RATIOS[dataset].get(cell[7:])
    return None


def one_run(root: str, dataset: str, cell: str, seed: int, threads: int,
            epochs: int | None, device: str = "cpu") -> dict[str, Any]:
    """One seed of one cell, in a worker process: the record the JSON keeps."""
    from bench.sweep import train_record
    from edgegcl.training.config import build, load_toml

    flags: dict[str, Any] = dict(cell_overrides(dataset, cell))
    if epochs is not None:
        flags["epochs"] = epochs
    rec = train_record(root, dataset, f"paper-{dataset}", flags, seed, threads, device)
    cfg = build(load_toml(f"paper-{dataset}"), {**flags, "root": root})
    used = sum(rec["final_eta"][c] * cfg.ratio_map()[c] for c in rec["final_eta"]) * \
        (1.0 if cfg.schedule.scheduler == "none" else (cfg.schedule.theta_max or 1.0))
    return {**rec, "cell": cell, "final_used_fraction": used}


def _ms(runs: list[dict], key: str) -> str:
    from bench.sweep import mean_std

    return mean_std([r[key] for r in runs])


def _epoch_ms(runs: list[dict]) -> str:
    """Mean epoch ms per device the cell's runs used (CPU and GPU times do not mix)."""
    by_device: dict[str, list[float]] = {}
    for r in runs:
        by_device.setdefault(r.get("device", "cpu"), []).append(1000 * r["epoch_s_mean"])
    return ", ".join(f"{statistics.fmean(v):.0f} ({d})" for d, v in sorted(by_device.items())) \
        or "—"


def report(records: list[dict], invocations: list[dict[str, Any]], name: str,
           datasets: list[str], cells: list[str], wanted: dict[tuple[str, str], int]) -> str:
    """The markdown tables from every record so far, with the paper's figure in each cell."""
    from edgegcl.evaluation.authors import AUTHORS_LABEL
    from bench.sweep import ratios_text
    from edgegcl.training.config import build, load_toml

    lines = ["# The paper's tables, reproduced (HANS at the paper presets, 2000 epochs)", "",
             "Measured by these commands, each adding its runs to the same JSON:", ""]
    for h in invocations:
        lines += [f"- {h['started']}, {h['runs']} runs, {h['jobs']} at a time, "
                  f"{h['wall_min']:.1f} min wall; {h['machine']}:", "",
                  f"      {h['command']}", ""]
    lines += [
             "Each run: one seed of `edgegcl train --config paper-DATASET` (presets/) with the "
             "cell's change. **honest** = test micro-F1 at the checkpoint chosen on validation "
             "(fixed 10/10/80 split per seed). **authors** = "
             f"{AUTHORS_LABEL}: the figure the paper's tables use. 'authors - honest' is "
             "measured on the same runs' embeddings. Mean ± population std over seeds; n = "
             "seeds done. epoch ms = mean training epoch (probes excluded) on this machine; "
             "the paper's AvgEpoch is on an RTX 4090. 'used' = sum eta theta_cat at the end "
             "(the fraction of the candidates active).", ""]
    for ds in datasets:
        preset = build(load_toml(f"paper-{ds}"), {})
        lines += [f"## {ds} (preset: theta_max {preset.schedule.theta_max:g}, ratios "
                  f"{ratios_text(preset.schedule.ratios)})", "",
                  "| table | cell | n | honest | authors | authors - honest | paper | "
                  "epoch ms | used at end |", "|---|---|---|---|---|---|---|---|---|"]
        for cell in cells:
            canon = canonical(ds, cell)
            runs = [r for r in records if r["dataset"] == ds and r["cell"] == canon]
            table = ("theta_max" if cell.startswith("theta=") else "ratios"
                     if cell.startswith("ratios=") else cell)
            paper = paper_figure(ds, cell, preset.schedule.theta_max, ratios_text(preset.schedule.ratios))
            gap = [r["authors_test_micro_f1"] - r["honest_test_micro_f1"] for r in runs]
            label = cell + (" (= preset)" if canon == "preset" and cell != "preset" else "")
            lines.append(
                f"| {table} | {label} | {len(runs)}/{wanted.get((ds, canon), 0)} | "
                f"{_ms(runs, 'honest_test_micro_f1')} | {_ms(runs, 'authors_test_micro_f1')} | "
                + (f"{statistics.fmean(gap):+.2f}" if gap else "—") + " | "
                + (f"{paper:.2f}" if paper is not None else "—") + " | "
                + _epoch_ms(runs) + " | "
                + (f"{statistics.fmean(r['final_used_fraction'] for r in runs):.2f}"
                   if runs else "—") + " |")
        ms = PAPER_EPOCH_MS.get(ds)
        if ms:
            lines += ["", f"The paper's AvgEpoch for {ds}: {ms[0]} ms (budgets 5-50 %), "
                          f"{ms[1]} ms (5-100 %), on an RTX 4090."]
        lines.append("")
    def count(ds: str, c: str) -> int:
        return sum(1 for r in records if r["dataset"] == ds and r["cell"] == c)

    missing = [f"{ds} {c} ({n - count(ds, c)} of {n} seeds)" for (ds, c), n in wanted.items()
               if count(ds, c) < n]
    lines += ["## Missing", "", ("Runs not done yet: " + "; ".join(missing) + ".") if missing
              else "None: every requested run is in.", "",
              f"Raw runs: {name}.json; plot: {name}.png."]
    return "\n".join(lines) + "\n"


def plot(records: list[dict], datasets: list[str], path: Path) -> None:
    """Micro-F1 and epoch time against theta_max: ours honest, ours authors', the paper."""
    from bench.sweep import pyplot, save_png

    plt = pyplot()
    if plt is None:
        return
    from bench.sweep import ratios_text
    from edgegcl.training.config import build, load_toml

    fig, axes = plt.subplots(2, len(datasets), figsize=(5 * len(datasets), 7), squeeze=False)
    for j, ds in enumerate(datasets):
        preset = build(load_toml(f"paper-{ds}"), {})
        by_theta: dict[float, list[dict]] = {}
        for r in records:
            if r["dataset"] == ds and r["scheduler"] == "hans" and r["ratios"] == ratios_text(preset.schedule.ratios):
                by_theta.setdefault(r["theta_max"], []).append(r)
        thetas = sorted(by_theta)
        ax = axes[0][j]
        for key, label in (("honest_test_micro_f1", "ours, honest"),
                           ("authors_test_micro_f1", "ours, authors' protocol")):
            if thetas:
                ax.errorbar(thetas, [statistics.fmean(r[key] for r in by_theta[t]) for t in thetas],
                            [statistics.pstdev([r[key] for r in by_theta[t]]) for t in thetas],
                            marker="o", capsize=3, label=label)
        paper = sorted(PAPER_THETA[ds].items())
        ax.plot([t for t, _ in paper], [v for _, v in paper], "k--", marker="s", label="paper")
        base = [r for r in records if r["dataset"] == ds and r["scheduler"] == "none"]
        if base:
            ax.axhline(statistics.fmean(r["honest_test_micro_f1"] for r in base), color="gray",
                       ls=":", label="all negatives, honest")
        ax.set_title(f"{ds}: micro-F1 vs theta_max")
        ax.set_xlabel("theta_max")
        ax.set_ylabel("test micro-F1 (%)")
        ax.legend(fontsize=8)
        ax = axes[1][j]
        if thetas:
            ax.plot(thetas, [1000 * statistics.fmean(r["epoch_s_mean"] for r in by_theta[t])
                             for t in thetas], marker="o", label="ours, mean epoch (this CPU)")
        if base:
            ax.axhline(1000 * statistics.fmean(r["epoch_s_mean"] for r in base), color="gray",
                       ls=":", label="all negatives")
        ax.set_xlabel("theta_max")
        ax.set_ylabel("epoch ms")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    save_png(fig, path)


def main() -> None:
    p = harness.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True, help="directory holding Cora/ and CiteSeer/")
    p.add_argument("--datasets", default="Cora,CiteSeer")
    p.add_argument("--cells", default=DEFAULT_CELLS,
                   help="preset, baseline, theta=X, ratios=E,H,I (comma-separated, in order)")
    p.add_argument("--seeds", type=int, default=3, help="seeds per cell")
    p.add_argument("--preset-seeds", type=int, default=5, help="seeds of the preset cell")
    p.add_argument("--epochs", type=int, default=None, help="override the presets' 2000")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--device", default="cpu",
                   help="cpu or cuda; on a GPU, --jobs runs share it (small graphs leave it idle)")
    p.add_argument("--resume", action="store_true", help="keep the JSON's runs, skip them")
    p.add_argument("--name", default="paper-tables")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: rewrite NAME.md / NAME.png from NAME.json")
    args = p.parse_args()

    from bench.sweep import Results

    datasets = args.datasets.split(",")
    cells = parse_cells(args.cells)
    # the tables always show the whole plan (both datasets, every cell), whatever this
    # invocation runs, so that invocations adding to one JSON share one report
    all_datasets = list(dict.fromkeys(["Cora", "CiteSeer", *datasets]))
    all_cells = list(dict.fromkeys([*parse_cells(DEFAULT_CELLS), *cells]))
    results = Results(args.name, args.resume or args.report_only)
    records = results.records
    wanted: dict[tuple[str, str], int] = {}
    for cell in all_cells:
        for ds in all_datasets:
            canon = canonical(ds, cell)
            n = args.preset_seeds if canon == "preset" else args.seeds
            wanted[(ds, canon)] = max(wanted.get((ds, canon), 0), n)
    tasks: list[tuple[str, str, int]] = []
    for cell in cells:
        for ds in datasets:
            canon = canonical(ds, cell)
            for seed in range(wanted[(ds, canon)]):
                done = any(r["dataset"] == ds and r["cell"] == canon and r["seed"] == seed
                           for r in records)
                if not done and not args.report_only and (ds, canon, seed) not in tasks:
                    tasks.append((ds, canon, seed))
    def render() -> None:
        harness.save(harness.RESULTS / f"{args.name}.md",
                     report(records, results.invocations, args.name, all_datasets, all_cells,
                            wanted))
        plot(records, all_datasets, harness.RESULTS / f"{args.name}.png")

    results.run("paper_tables", tasks, lambda task, threads: (
        one_run, (args.root, *task, threads, args.epochs, args.device)), args.jobs, render)


if __name__ == "__main__":
    main()
