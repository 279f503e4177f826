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
    scheduler: str = "random"
    """The run's scheduler (the accuracy evidence depends on it)."""

    target_epoch_s: float | None = None
    """The epoch time the user asked the choice to meet, if any."""
    memory_bytes: float | None = None
    """The peak training memory the user asked the choice to stay within, if any."""

    def fastest(self, theta: float) -> Cell | None:
        """The cheaper path at ``theta`` (by median time), None when both ran out of memory."""
        fits = [c for c in self.cells if c.theta == theta and not c.oom]
        return min(fits, key=Cell.median_s) if fits else None

    def thetas(self) -> list[float]:
        return sorted({c.theta for c in self.cells})


@dataclass(frozen=True)
class Choice:
    """The theta_max (and logits path) the table recommends, and why, in one line."""

    theta: float
    logits: str
    why: str


FLAT = 1.05
"""Budgets within this multiple of the cheapest one's time cost the same here (the noise of a
median of a few repeats): the largest of them is chosen when it is the largest measured (or
fewer than three were measured), as a larger budget then costs nothing measurable."""


def choose(table: BudgetTable) -> Choice | None:
    """The budget to train with. With a target (``table.target_epoch_s`` / ``memory_bytes``):
    the largest theta_max whose cheaper path meets it. Without one, by what the docs measured
    of accuracy for the run's scheduler (``ACCURACY``): where it stayed flat in theta_max
    (the random subset), the cheapest theta_max inside the range measured (``EVIDENCE``;
    within ``FLAT`` of it, the largest); otherwise the knee of the cheaper path's time curve
    (the point farthest below the chord from the smallest to the largest theta_max, both axes
    scaled to [0, 1]: beyond it each step of theta_max costs more than before); the largest
    theta_max when the curve bends the other way (it flattens: more budget costs little
    more); else the largest theta_max within ``FLAT`` of the cheapest. None when every budget
    ran out of memory."""
    best = {t: c for t in table.thetas() if (c := table.fastest(t)) is not None}
    if not best:
        return None
    if table.target_epoch_s is not None or table.memory_bytes is not None:
        return _within_targets(table, best)
    if table.scheduler in FLAT_ACCURACY:
        covered = {t: c for t, c in best.items() if EVIDENCE[0] <= t <= EVIDENCE[1]} or best
        low = min(c.median_s() for c in covered.values())
        t = max(t for t, c in covered.items() if c.median_s() <= FLAT * low)
        c = covered[t]
        return Choice(t, c.logits, f"theta_max {t:g}: accuracy stayed flat in theta_max for "
                      f"this scheduler (below), and it is the cheapest budget measured from "
                      f"{EVIDENCE[0]:g} to {EVIDENCE[1]:g} ({c.median_s():.3f} s an epoch on the "
                      f"{c.logits} path; theta_max {max(best):g}: "
                      f"{best[max(best)].median_s():.3f} s)")
    thetas = sorted(best)
    times = [best[t].median_s() for t in thetas]
    lo, hi = min(times), max(times)
    gain = ([(t - thetas[0]) / (thetas[-1] - thetas[0]) - (m - lo) / (hi - lo)
             for t, m in zip(thetas, times)] if len(thetas) >= 3 and hi > FLAT * lo else [])
    if gain and -min(gain) > BEND and max(gain) <= BEND:  # the cost flattens: more is cheap
        flat_from = thetas[min(range(len(thetas)), key=gain.__getitem__)]
        top = best[thetas[-1]]
        return Choice(thetas[-1], top.logits,
                      f"theta_max {thetas[-1]:g}: the cost curve flattens from theta_max "
                      f"{flat_from:g} on ({best[flat_from].median_s():.3f} s), so the largest "
                      f"budget costs little more ({top.median_s():.3f} s an epoch, {top.logits} "
                      "path)")
    if not gain or max(gain) <= BEND:
        cheap = max(t for t, m in zip(thetas, times) if m <= FLAT * lo)
        c = best[cheap]
        return Choice(cheap, c.logits,
                      f"theta_max {cheap:g}: the largest measured within "
                      f"{100 * (FLAT - 1):.0f} % of the cheapest budget's time "
                      f"({c.median_s():.3f} s against {lo:.3f} s an epoch, {c.logits} path)")
    knee = thetas[max(range(len(thetas)), key=gain.__getitem__)]
    above = [t for t in thetas if t > knee]
    return Choice(knee, best[knee].logits,
                  f"theta_max {knee:g}: the knee of the cost curve, {best[knee].median_s():.3f} s "
                  f"an epoch on the {best[knee].logits} path ({best[knee].median_s() / hi:.2f}x "
                  f"the dearest budget)" + (f"; theta_max {above[0]:g} costs "
                                           f"{best[above[0]].median_s():.3f} s" if above else ""))


BEND = 0.1
"""How far (in the scaled axes) the knee must lie below the chord for the curve to have one."""
FLAT_ACCURACY = frozenset({"random"})
"""Schedulers whose accuracy docs/hans.md measured flat in theta_max (``ACCURACY``)."""
EVIDENCE = (0.1, 1.0)
"""The theta_max range that measurement covers."""


def _within_targets(table: BudgetTable, best: dict[float, Cell]) -> Choice:
    """The largest theta_max whose cheaper path meets the epoch-time and memory targets, or,
    when none does, the cheapest in time that fits in memory (said so)."""
    def fits(c: Cell) -> tuple[bool, bool]:
        return ((table.target_epoch_s is None or c.median_s() <= table.target_epoch_s),
                (table.memory_bytes is None or c.median_peak() <= table.memory_bytes))

    asked = " and ".join(([f"{table.target_epoch_s:g} s an epoch"]
                          if table.target_epoch_s is not None else [])
                         + ([f"{table.memory_bytes / 2**30:g} GiB"]
                            if table.memory_bytes is not None else []))
    ok = [t for t, c in best.items() if all(fits(c))]
    if ok:
        t = max(ok)
        c = best[t]
        return Choice(t, c.logits, f"theta_max {t:g}: the largest within {asked} "
                      f"({c.median_s():.3f} s, {c.median_peak() / 2**20:.0f} MiB on the "
                      f"{c.logits} path)")
    in_memory = [t for t, c in best.items() if fits(c)[1]] or list(best)
    t = min(in_memory, key=lambda t: best[t].median_s())
    c = best[t]
    return Choice(t, c.logits, f"no theta_max meets {asked}: theta_max {t:g} is the fastest "
                  f"measured{' in that memory' if fits(c)[1] else ''} ({c.median_s():.3f} s, "
                  f"{c.median_peak() / 2**20:.0f} MiB on the {c.logits} path); a smaller "
                  "batch or graph, or a faster device, would be needed")


ACCURACY = {
    "random": ("with the random subset (this run's scheduler) test micro-F1 stayed flat from "
               "theta_max 0.1 to 1 on Cora and CiteSeer, 5 seeds each: a smaller budget cost "
               "no accuracy there"),
    "hans": ("with HANS's hardest picks (this run's scheduler) test micro-F1 grew with "
             "theta_max on Cora and CiteSeer and stayed below the random subset's at every "
             "theta_max: a smaller budget costs accuracy there"),
}
"""What docs/hans.md ("Does hardness help?") measured of accuracy against theta_max, by
scheduler; other schedulers have no measurement there."""


def accuracy_line(scheduler: str) -> str:
    """The accuracy evidence the docs hold for a choice of theta_max with ``scheduler``."""
    what = ACCURACY.get(scheduler, f"for --scheduler {scheduler} there is no measurement of "
                                   "accuracy against theta_max")
    return f"Accuracy: {what} (docs/hans.md, \"Does hardness help?\")."

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
    lines += choice_lines(table)
    if busy:
        lines += ["", f"\\* {len(busy)} cell(s) ran while other processes used more than "
                  f"{BUSY_CORES} of a core on average: those figures are a loaded machine's; "
                  "measure again on a quiet one to compare budgets."]
    return "\n".join(lines) + "\n"


def _against_the_largest(table: BudgetTable) -> list[str]:
    """Each theta_max against the largest measured on the path that measured cheaper there
    (what ``auto`` takes in this table): time and memory ratios of the medians, whether the
    median is within the largest budget's slowest repeat and largest peak, and whether time
    grows with theta_max along it (no median above a larger budget's by more than ``FLAT``);
    beside it, the path a run's ``--logits auto`` rule takes without measuring."""
    thetas = table.thetas()
    top = table.fastest(thetas[-1])
    if top is None:
        return []
    lines = ["", f"Against theta_max = {top.theta:g}, each on the path that measured cheaper "
             f"there (`auto`):", "",
             "| theta_max | auto (cheaper) | time ratio | peak memory ratio | within theta_max = "
             f"{top.theta:g} (time, memory) | a run's `--logits auto` rule |",
             "|---|---|---|---|---|---|"]
    previous, rising, differs = None, True, []
    for theta in thetas:
        best = table.fastest(theta)
        if best is None:
            continue
        within = (best.median_s() <= top.spread_s()[1],
                  best.median_peak() <= max(b for b in top.peak_bytes if b is not None))
        if previous is not None and FLAT * best.median_s() < previous.median_s():
            rising = False
        previous = best
        rule = table.auto.get(theta, "")
        if rule and rule != best.logits and table.logits == "auto":
            differs.append(f"{theta:g}")
        lines.append(f"| {theta:.2f} | {best.logits} | {best.median_s() / top.median_s():.2f} | "
                     f"{best.median_peak() / top.median_peak():.2f} | "
                     f"{', '.join('yes' if w else 'no' for w in within)} | {rule} |")
    lines += ["", "Along the cheaper path, time "
              + (f"grows with theta_max (no median above a larger budget's by more than "
                 f"{100 * (FLAT - 1):.0f} %)." if rising else
                 "does not grow with theta_max: a smaller budget took longer than a larger one "
                 f"by more than {100 * (FLAT - 1):.0f} %.")]
    if differs:
        lines.append(f"At theta_max {', '.join(differs)} a run's `--logits auto` rule (which "
                     "keeps the pairs path below a third of the candidates, where its memory "
                     "passes the dense path's) takes the other path: pass the cheaper one with "
                     "`--logits`, or train with `--auto-budget`, which measures both.")
    return lines


def choice_lines(table: BudgetTable) -> list[str]:
    """The table's answer: the budget to train with (``choose``), the flags that give it, and
    the accuracy evidence the docs hold for it."""
    choice = choose(table)
    if choice is None:
        return ["", "**No choice**: every theta_max ran out of memory; a smaller batch "
                "(`--batch-size`) or `--mode minibatch` would be needed."]
    return ["", f"**Choice: `--theta-max {choice.theta:g} --logits {choice.logits}`**: "
            f"{choice.why}.", "", accuracy_line(table.scheduler)]


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
    busy_shown = False
    for logits in sorted({c.logits for c in table.cells}):
        cells = [c for c in table.cells if c.logits == logits and not c.oom]
        if not cells:
            continue
        thetas = [c.theta for c in cells]
        med = [c.median_s() for c in cells]
        lo = [m - c.spread_s()[0] for m, c in zip(med, cells)]
        hi = [c.spread_s()[1] - m for m, c in zip(med, cells)]
        line = ax_t.errorbar(thetas, med, yerr=[lo, hi], marker="o", capsize=3,
                             label=f"{logits} logits")[0]
        ax_m.plot(thetas, [c.median_peak() / 2**20 for c in cells], marker="o",
                  color=line.get_color(), label=f"{logits} logits")
        busy = [(c.theta, m) for c, m in zip(cells, med) if c.busy]
        if busy:  # a ring around the point: no text to collide with its neighbours
            ax_t.scatter(*zip(*busy), s=160, facecolors="none", edgecolors="red", zorder=3,
                         label=None if busy_shown else "measured while busy")
            busy_shown = True
    choice = choose(table)
    if choice is not None:
        for ax in (ax_t, ax_m):
            ax.axvline(choice.theta, color="grey", linestyle="--", linewidth=1,
                       label=f"choice: {choice.theta:g} ({choice.logits})")
    ax_t.set(title=f"epoch time ({table.graph}, {table.mode})", xlabel="theta_max",
             ylabel="seconds (median, spread)")
    ax_m.set(title="peak training memory", xlabel="theta_max", ylabel="MiB")
    for ax in (ax_t, ax_m):
        ax.set_ylim(bottom=0)
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
