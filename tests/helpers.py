"""Shared test helpers (imported by the test modules; pytest puts tests/ on sys.path)."""

from __future__ import annotations

import contextlib
import io
import shutil
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch


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
        try:
            code = entry(argv)
        except SystemExit as exc:
            code = exc.code
    lines = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno)
                    for w in shown)
    return code, out.getvalue(), lines + err.getvalue()


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
