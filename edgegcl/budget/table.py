"""The budgets table (``edgegcl bench budgets``): what was measured per (theta_max, logits
path) and on what, read as a table a user reads, a CSV file of every repeat and a plot, each
written atomically. Torch-free: the job checks its output directory and the command line
lists its default budgets before torch loads; edgegcl.budget.bench measures the cells.
"""

from __future__ import annotations

import csv
import io
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from edgegcl.errors import UsageError
from edgegcl_embed.files import replacing

THETAS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0)
"""The budgets measured unless others are asked for."""
BUSY_CORES = 0.25
"""Other processes' mean CPU use (in cores) during a cell above which its figure is marked."""
FILES = ("budgets.md", "budgets.csv", "budgets.png")
"""What ``write_budgets`` writes into its directory."""


@dataclass
class Cell:
    """One (theta_max, logits path): every repeat's epoch seconds, peak bytes and the other
    processes' CPU use (cores) while it was measured; None seconds for out of memory."""

    theta: float
    logits: str
    epoch_s: list[float | None] = field(default_factory=list)
    peak_bytes: list[int | None] = field(default_factory=list)
    others: list[float] = field(default_factory=list)

    @property
    def oom(self) -> bool:
        return any(s is None for s in self.epoch_s)

    @property
    def busy(self) -> bool:
        return any(c > BUSY_CORES for c in self.others)

    def median_s(self) -> float:
        return statistics.median(s for s in self.epoch_s if s is not None)

    def spread_s(self) -> tuple[float, float]:
        done = [s for s in self.epoch_s if s is not None]
        return min(done), max(done)

    def median_peak(self) -> float:
        return statistics.median(b for b in self.peak_bytes if b is not None)


@dataclass
class BudgetTable:
    """The measured cells and what they were measured on."""

    graph: str
    nodes: int
    edges: int
    mode: str
    batch_size: int
    device: str
    threads: int
    repeats: int
    cells: list[Cell]
    load: tuple[float, float]
    """The 1-minute load average at the start and at the end."""
    started: str = ""
    wall_s: float = 0.0
    auto: dict[float, str] = field(default_factory=dict)
    """The path the run's ``--logits`` takes at each theta_max (``auto_logits``)."""
    logits: str = "auto"
    """The run's ``--logits``: ``auto`` measures both paths, a named one only itself."""
    machine: str = ""
    """The machine measured (``machine_line``)."""
    command: str = ""
    """The command line that measured it, when it came from one."""

    def fastest(self, theta: float) -> Cell | None:
        """The cheaper path at ``theta`` (by median time), None when both ran out of memory."""
        fits = [c for c in self.cells if c.theta == theta and not c.oom]
        return min(fits, key=Cell.median_s) if fits else None

def _mib(b: float) -> str:
    return f"{b / 2**20:.0f}"


def table_markdown(table: BudgetTable) -> str:
    """The table a user reads: one row per cell (median, spread, peak), then each budget
    against theta_max = 1 on the cheaper path."""
    where = (f"{table.graph} ({table.nodes} nodes, {table.edges} edges), {table.mode}"
             + (f", batch size {table.batch_size}" if table.mode == "minibatch" else "")
             + f", on {table.device} with {table.threads} threads")
    busy = [c for c in table.cells if c.busy]
    lines = [f"# What each theta_max costs: {table.graph}", "",
             *([f"    {table.command}", ""] if table.command else []),
             f"Measured {table.started}, {table.wall_s / 60:.1f} min"
             + (f", on {table.machine}" if table.machine else "")
             + f": {where}. Each cell is the "
             f"median of {table.repeats} interleaved repeats (spread: fastest to slowest), HANS "
             "held at the state a run reaches at that theta_max (as `--auto-budget` measures). "
             f"Load average {table.load[0]:.2f} at the start, {table.load[1]:.2f} at the end.",
             "", "| theta_max | logits | epoch s (median) | spread s | peak MiB | busy |",
             "|---|---|---|---|---|---|"]
    for c in table.cells:
        if c.oom:
            lines.append(f"| {c.theta:.2f} | {c.logits} | out of memory | | | |")
            continue
        lo, hi = c.spread_s()
        lines.append(f"| {c.theta:.2f} | {c.logits} | {c.median_s():.4f} | {lo:.4f} - {hi:.4f} "
                     f"| {_mib(c.median_peak())} | {'yes *' if c.busy else ''} |")
    lines += _against_the_largest(table)
    if busy:
        lines += ["", f"\\* {len(busy)} cell(s) ran while other processes used more than "
                  f"{BUSY_CORES} of a core on average: those figures are a loaded machine's; "
                  "measure again on a quiet one to compare budgets."]
    return "\n".join(lines) + "\n"


def _against_the_largest(table: BudgetTable) -> list[str]:
    """Each theta_max against the largest measured, on the path the run's ``--logits`` takes
    and on the cheaper one: time and memory ratios of the medians, whether the median is within the
    largest budget's slowest repeat and largest peak, and whether time grows with theta_max
    along the path taken (each median at least the previous one's fastest repeat)."""
    cell = {(c.theta, c.logits): c for c in table.cells if not c.oom}
    thetas = sorted({c.theta for c in table.cells})
    top = cell.get((thetas[-1], table.auto.get(thetas[-1], "")))
    if top is None:
        return []
    lines = ["", f"Against theta_max = {top.theta:g} on the path `--logits {table.logits}` "
             f"takes ({top.logits} there), and on the cheaper path:", "",
             "| theta_max | path taken | time ratio | peak memory ratio | within theta_max = "
             f"{top.theta:g} (time, memory) | cheaper path | its time ratio | its memory ratio |",
             "|---|---|---|---|---|---|---|---|"]
    previous, rising = None, True
    for theta in thetas:
        auto, best = cell.get((theta, table.auto.get(theta, ""))), table.fastest(theta)
        if auto is None or best is None:
            continue
        within = (auto.median_s() <= top.spread_s()[1],
                  auto.median_peak() <= max(b for b in top.peak_bytes if b is not None))
        if previous is not None and auto.median_s() < previous.spread_s()[0]:
            rising = False
        previous = auto
        lines.append(f"| {theta:.2f} | {auto.logits} | {auto.median_s() / top.median_s():.2f} | "
                     f"{auto.median_peak() / top.median_peak():.2f} | "
                     f"{', '.join('yes' if w else 'no' for w in within)} | {best.logits} | "
                     f"{best.median_s() / top.median_s():.2f} | "
                     f"{best.median_peak() / top.median_peak():.2f} |")
    lines += ["", f"On the path `--logits {table.logits}` takes, time "
              + ("grows with theta_max (within the spread)." if rising else
                 "does not grow with theta_max: a smaller budget took longer than a larger one.")]
    return lines


def table_csv(table: BudgetTable) -> str:
    """Every repeat of every cell, one row each."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["graph", "mode", "batch_size", "device", "threads", "theta_max", "logits",
                     "repeat", "epoch_s", "peak_bytes", "other_processes_cores", "busy"])
    for c in table.cells:
        for r, (s, b, o) in enumerate(zip(c.epoch_s, c.peak_bytes, c.others), 1):
            writer.writerow([table.graph, table.mode, table.batch_size, table.device,
                             table.threads, c.theta, c.logits, r, "" if s is None else s,
                             "" if b is None else b, f"{o:.3f}", int(o > BUSY_CORES)])
    return out.getvalue()


def _plot(table: BudgetTable, path: Path) -> None:
    import matplotlib  # optional (the plot extra): checked before the job measures

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4))
    for logits in sorted({c.logits for c in table.cells}):
        cells = [c for c in table.cells if c.logits == logits and not c.oom]
        if not cells:
            continue
        thetas = [c.theta for c in cells]
        med = [c.median_s() for c in cells]
        lo = [m - c.spread_s()[0] for m, c in zip(med, cells)]
        hi = [c.spread_s()[1] - m for m, c in zip(med, cells)]
        ax_t.errorbar(thetas, med, yerr=[lo, hi], marker="o", capsize=3, label=f"{logits} logits")
        ax_m.plot(thetas, [c.median_peak() / 2**20 for c in cells], marker="o",
                  label=f"{logits} logits")
        for c, m in zip(cells, med):
            if c.busy:
                ax_t.annotate("busy", (c.theta, m), fontsize=7)
    ax_t.set(title=f"epoch time ({table.graph}, {table.mode})", xlabel="theta_max",
             ylabel="seconds (median, spread)")
    ax_m.set(title="peak training memory", xlabel="theta_max", ylabel="MiB")
    for ax in (ax_t, ax_m):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


def write_budgets(table: BudgetTable, out: Path) -> list[Path]:
    """``FILES`` into the directory ``out``, each written atomically; their paths."""
    paths = [out / name for name in FILES]
    with replacing(paths, UsageError, "free space or choose another --out") as (md, cs, png):
        md.write_text(table_markdown(table))
        cs.write_text(table_csv(table))
        _plot(table, png)
    return paths
