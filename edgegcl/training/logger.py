"""Dashboards: every seed's per-epoch row (the columns of ``epochs.csv``) and HANS events,
sent to TensorBoard as training runs (``edgegcl train --logger tensorboard``).

The run directory's files stay the record (``edgegcl plot`` reads them); a logger is a view
for users who watch runs in TensorBoard, as with Lightning or PyG's examples. Each seed writes
its event files into its own ``RUN_DIR/seed-K``, so ``tensorboard --logdir RUN_DIR`` shows the
seeds as runs side by side: scalars ``epochs/COLUMN`` per epoch, and each HANS event as text ``hans/events``
(TensorBoard's tag ``hans/events/text_summary``: its line of ``hans_events.jsonl``) at its
epoch. A resumed seed hides what a
crash left logged past the state it resumes from (TensorBoard's ``purge_step``).

Importing this module loads the standard library alone; torch.utils.tensorboard, which needs
the ``tensorboard`` package (the ``tensorboard`` extra), loads when a logger is made.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgegcl.errors import UsageError
from edgegcl.training.hooks import Hook, Row  # the standard library alone, as this module

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

    from edgegcl.training.seed import SeedTraining

LOGGERS = ("none", "tensorboard")
"""``--logger``: the run directory's files alone, or TensorBoard event files besides them."""


class TensorBoardLogger(Hook):
    """One ``SummaryWriter`` per seed directory, made at that seed's first logged epoch, on
    rank 0; a new seed's first epoch also logs its bootstrap's events."""

    def __init__(self) -> None:
        self._writers: dict[Path, SummaryWriter] = {}
        self._bootstrap = 0

    def seed_start(self, seed: SeedTraining) -> None:
        self._bootstrap = len(seed.trainer.scheduler.events)  # a new seed's: its bootstrap

    def epoch_end(self, seed: SeedTraining, row: Row, events: list[Any]) -> None:
        if seed.main:
            first = seed.trainer.scheduler.events[:self._bootstrap] if row["epoch"] == 1 else []
            self.log(seed.run_dir, row, [*first, *events])

    def log(self, seed_dir: Path, row: Row, events: list[Any]) -> None:
        """Log one epoch's row (blank cells, the F1 of an epoch without a probe, are left
        out) and its HANS events, and flush them so that a dashboard sees them now."""
        step = int(row["epoch"])  # type: ignore[call-overload]
        writer = self._writers.get(seed_dir)
        if writer is None:
            from torch.utils.tensorboard import SummaryWriter  # optional: the tensorboard extra

            writer = SummaryWriter(str(seed_dir), purge_step=step if step > 1 else None)
            self._writers[seed_dir] = writer
        for name, value in row.items():
            if name != "epoch" and value != "":
                writer.add_scalar(f"epochs/{name}", float(value), step)  # type: ignore[arg-type]
        for event in events:
            writer.add_text("hans/events", json.dumps(dataclasses.asdict(event)), event.epoch)
        writer.flush()

    def close(self) -> None:
        """Flush and close every seed's writer."""
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


def make_logger(kind: str) -> TensorBoardLogger | None:
    """The logger ``--logger kind`` names (None for ``none``); a missing package is one
    UsageError line, raised before anything is written."""
    if kind == "none":
        return None
    if kind != "tensorboard":
        raise UsageError(f"--logger must be one of {', '.join(LOGGERS)}, got {kind!r}")
    if importlib.util.find_spec("tensorboard") is None:
        raise UsageError("--logger tensorboard needs the tensorboard package: "
                         "pip install tensorboard (or drop --logger)")
    return TensorBoardLogger()
