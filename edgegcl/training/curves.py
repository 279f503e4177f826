"""Training curves: one row per epoch in ``seed-K/epochs.csv``, and ``edgegcl plot RUN_DIR``.

The rows say what HANS saw and did (the loss and its per-category parts, eta per category,
the active negatives per anchor) and what the epoch cost (seconds, peak memory), with the
probe's scores on the epochs that were probed. ``plot_run`` draws loss, eta and micro-F1
against the epoch for every seed, from the CSV files alone, so it works on a run that is
still going or was stopped (matplotlib, the ``plot`` extra).
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from edgegcl import runfiles
from edgegcl.errors import UsageError, first_line
from edgegcl_embed.errors import shown
from edgegcl_embed.files import (read_regular, refuse_inputs_as_outputs, refuse_link,
                                 refuse_planted_links, replacing, run_files)

FIELDS = ("epoch", "loss", "loss_hard", "loss_inter", "loss_easy", "eta_hard", "eta_inter",
          "eta_easy", "active_per_anchor", "budget_used", "epoch_s", "peak_memory_bytes",
          "val_micro_f1", "test_micro_f1", "val_score", "test_score", "authors_test_micro_f1")
"""Columns of ``epochs.csv``; the probe's columns are empty on epochs without a probe
(``val_score`` / ``test_score``: the figure of the run's ``--metric``, metrics.json's
``metric``)."""
CSV_LIMIT = 256 << 20
"""The most bytes an epochs.csv is read for: about a million epochs' rows."""


def csv_text(rows: list[dict[str, object]], header: bool = True) -> str:
    """Rows (dicts keyed by FIELDS) as CSV text."""
    out = io.StringIO()
    writer = csv.DictWriter(out, FIELDS, lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


FLOAT32_MAX = 3.4028234663852886e38
"""The largest finite value a run's float32 losses and timings can write; beyond it a file
is not a run's (and no plot can draw its axis)."""


def _read(path: Path) -> dict[str, list[float]]:
    """The columns of one epochs.csv; anything but edgegcl's rows is a one-line UsageError.

    A last line without its newline is what a killed run leaves half-written, and is skipped;
    every other row must be complete and numeric (the F1 columns may be empty).
    """
    fix = "pass the directory of an edgegcl train run (--out), or delete the damaged file"
    try:
        text = read_regular(path, "epochs file", fix, CSV_LIMIT, UsageError).decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} cannot be read as an edgegcl epochs.csv ({first_line(exc)}); "
                         f"{fix}") from None
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines.pop()  # the half-written row of a killed run
    columns: dict[str, list[float]] = {f: [] for f in FIELDS}
    try:
        reader = csv.DictReader(lines)
        header = reader.fieldnames or []
        missing = [f for f in FIELDS if f not in header]
        if missing:
            raise UsageError(f"{path} is not an edgegcl epochs.csv (its header lacks "
                             f"{', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); "
                             f"{fix}")
        for row in reader:
            for f in FIELDS:
                value = row.get(f)
                if value is None:
                    raise UsageError(f"{path} line {reader.line_num} has no {f} value (a "
                                     f"damaged row); {fix}")
                try:
                    number = float(value) if value not in ("", "nan") else math.nan
                except ValueError:
                    raise UsageError(f"{path} line {reader.line_num}: {f} = {shown(value)} is not "
                                     f"a number; {fix}") from None
                if math.isinf(number):  # a diverged epoch: not drawn
                    number = math.nan
                elif abs(number) > FLOAT32_MAX:  # a run writes float32 values (and NaN)
                    raise UsageError(f"{path} line {reader.line_num}: {f} = {shown(value)} is "
                                     f"beyond what a run writes (float32); {fix}")
                columns[f].append(number)
    except csv.Error as exc:
        raise UsageError(f"{path} cannot be read as an edgegcl epochs.csv ({first_line(exc)}); "
                         f"{fix}") from None
    return columns


def plot_run(run_dir: str | Path, out: str | Path | None = None, force: bool = False) -> Path:
    """Draw every seed's loss, eta and micro-F1 against the epoch into a PNG (default
    ``RUN_DIR/curves.png``, written atomically); returns its path. An existing ``out`` is
    replaced only with ``force`` (the default ``curves.png`` is the run's own and redrawn).

    Example:
        >>> plot_run("runs/Cora-20261126-120000")  # doctest: +SKIP
        PosixPath('runs/Cora-20261126-120000/curves.png')
    """
    run = Path(run_dir)
    target = Path(out) if out is not None else run / "curves.png"
    if out is not None and not force and (target.exists() or target.is_symlink()):
        raise UsageError(f"{target} already exists; pass --force to replace it, or another "
                         "--out")
    refuse_link(target, "output", UsageError)
    refuse_planted_links(run, UsageError)
    files = sorted(run.glob(f"{runfiles.SEED_PREFIX}*/{runfiles.EPOCHS}"))
    if not files:
        raise UsageError(f"{run} has no seed-*/epochs.csv; pass the directory of an edgegcl "
                         "train run (--out)")
    inputs = [p for p in run_files(run) if p != run / "curves.png"]  # its own, redrawn
    refuse_inputs_as_outputs([target], inputs, UsageError)  # the run's files, --force or not
    curves = {path: _read(path) for path in files}  # every file checked before drawing any
    try:
        import matplotlib  # optional (the plot extra); the CLI's plot answers without torch
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("edgegcl plot needs matplotlib: pip install matplotlib") from None
    fig, (loss_ax, eta_ax, f1_ax) = plt.subplots(1, 3, figsize=(15, 4))
    for path, c in curves.items():
        seed = path.parent.name
        loss_ax.plot(c["epoch"], c["loss"], label=seed)
        for cat, style in (("hard", "-"), ("inter", "--"), ("easy", ":")):
            eta_ax.plot(c["epoch"], c[f"eta_{cat}"], style, label=f"{seed} {cat}")
        probed = [i for i, v in enumerate(c["val_micro_f1"]) if not math.isnan(v)]
        for key, style in (("val_micro_f1", "o-"), ("test_micro_f1", "s--"),
                           ("authors_test_micro_f1", "^:")):
            points = [(c["epoch"][i], c[key][i]) for i in probed if not math.isnan(c[key][i])]
            if points:
                f1_ax.plot(*zip(*points), style, label=f"{seed} {key.replace('_micro_f1', '')}")
    for ax, title in ((loss_ax, "loss"), (eta_ax, "eta (share of each category's budget)"),
                      (f1_ax, "micro-F1 at the probes (%)")):
        ax.set_title(title)
        ax.set_xlabel("epoch")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    try:
        with replacing([target], UsageError, "pass a writable --out") as (tmp,):
            fig.savefig(tmp, dpi=90, format="png")
    finally:
        plt.close(fig)
    return target
