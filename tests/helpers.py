"""Shared test helpers (imported by the test modules; pytest puts tests/ on sys.path)."""

from __future__ import annotations

import contextlib
import io
import shutil
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from edgegcl.training.hooks import Hook


def capture(entry: Callable[[Sequence[str]], int], argv: Sequence[str]) -> tuple[int, str, str]:
    """Run a command-line entry point with stdout/stderr captured: (exit code, out, err).

    argparse's own errors raise SystemExit; its code is returned like any other.
    """
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            warnings.catch_warnings(record=True) as shown:
        # what a terminal shows: Python's default filters (pytest's own would hide them)
        warnings.resetwarnings()
        warnings.simplefilter("default")
        for hidden in (DeprecationWarning, PendingDeprecationWarning, ImportWarning,
                       ResourceWarning):
            warnings.simplefilter("ignore", hidden)
        # edgegcl.nn's filter, set once at import, is lost when an earlier test's pytest
        # filters were restored; a terminal keeps it
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        try:
            code = entry(argv)
        except SystemExit as exc:
            code = exc.code
    lines = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno)
                    for w in shown)
    return code, out.getvalue(), lines + err.getvalue()


class EpochRows(Hook):
    """Every epoch's (seed directory name, row, events) as a user's hook is told them."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict, list]] = []

    def epoch_end(self, seed, row, events) -> None:  # type: ignore[no-untyped-def]
        self.seen.append((seed.run_dir.name, dict(row), events))

    @property
    def epochs(self) -> list[int]:
        return [int(row["epoch"]) for _, row, _ in self.seen]


def views(b: int = 15, d: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two float64 [b, d] leaves requiring grad: stand-ins for a step's projected views."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, d, generator=g, dtype=torch.float64).requires_grad_(),
            torch.randn(b, d, generator=g, dtype=torch.float64).requires_grad_())


def contrast(h1: torch.Tensor, h2: torch.Tensor, tau: float, logits: str, selector, hans,
             step: int):
    """One call of the HANS-scheduled contrast (``ScheduledContrast``) made of the given scheduler
    and negative selection."""
    from edgegcl.contrast.module import ScheduledContrast

    module = ScheduledContrast(hans, tau=tau, logits=logits)
    module.selector = selector
    return module(h1, h2, step=step)


def selector_of(cfg, mode: str = "full", seed: int = 0):
    """The negative selection the Trainer builds for ``cfg`` in ``mode``."""
    from edgegcl.contrast.module import ScheduledContrast

    return ScheduledContrast.from_config(cfg.schedule, cfg.contrast, hans=cfg.hans, epochs=cfg.run.epochs,
                                    refresh_every=cfg.schedule.T_int if mode == "full" else 1,
                                    seed=seed).selector


SOURCES = ("pyproject.toml", "README.md", "LICENSE", "edgegcl", "edgegcl_embed", "profiles",
           "presets")
"""What a clone of the repository holds that an install reads."""


def copy_sources(dest: Path) -> Path:
    """A copy of the repository's installable sources in ``dest`` (made): a build or an
    editable install writes into the folder it installs, never into the repository."""
    root = Path(__file__).resolve().parents[1]
    dest.mkdir(parents=True)
    for name in SOURCES:
        src = root / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns(
                "__pycache__", "build", "*.egg-info"))
        else:
            shutil.copy2(src, dest / name)
    return dest


@torch.no_grad()
def select_active(strata, counts, draw: int):
    """The unblocked reference of edgegcl.contrast.negatives.schedule_negatives's random
    picks: ``counts[cat]`` negatives per anchor drawn from each of its pools at once.

    A draw is a random set of positions in each pool (``randperm`` prefix) rotated by a random
    offset per anchor, so every anchor's subset is a uniform random subset of its pool, and a
    larger count with the same ``draw`` extends the previous subset instead of replacing it."""
    from edgegcl.contrast.negatives import ActiveNegatives, drawn_sizes, draw_positions, take_drawn

    plan = draw_positions(tuple(p.size(1) for p in strata.pools), counts, draw,
                          strata.pools[0].size(0))
    return ActiveNegatives(take_drawn(strata, plan), drawn_sizes(plan), strata.num_cand)
