"""Crash-safe files: atomic writes, and a seed's complete training state for ``--resume``.

Every file a run writes goes through ``write_atomic`` / ``save_atomic``: a temporary file in
the same directory, flushed and fsynced, then renamed over the target, so a kill at any
instant leaves either the previous complete file or the new one. A seed's state
(``seed-K/state.pt``) holds everything its next epoch depends on (the engine's state, the
selector's kept strata, the loader's random streams, the probes so far and the best
checkpoint), as plain tensors and Python values: ``torch.load(weights_only=True)`` reads it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch_geometric.loader import NodeLoader

from edgegcl.errors import UsageError

STATE_FORMAT = "edgegcl-seed-state-1"


def _replace_atomically(path: Path, write: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"cannot write {path} ({exc.strerror or exc}); free space or pick a "
                         "writable --out (the previous files are intact)") from None
    try:  # make the rename itself durable
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` (UTF-8) atomically."""
    _replace_atomically(path, lambda fh: fh.write(text.encode()))


def save_atomic(obj: Any, path: Path) -> None:
    """``torch.save(obj)`` to ``path`` atomically."""
    _replace_atomically(path, lambda fh: torch.save(obj, fh))


def loader_state(loader: NodeLoader | None) -> dict[str, Any]:
    """The random streams of a mini-batch loader: its seed order and, for the built-in
    sampler, its neighbour draws (PyG's sampler draws from the global stream, saved too)."""
    if loader is None:
        return {}
    out: dict[str, Any] = {}
    order = getattr(loader, "sampler", None)
    if hasattr(order, "generator"):
        out["order"] = order.generator.get_state()
    sampler = getattr(loader, "node_sampler", None)
    if hasattr(sampler, "_generator"):
        out["neighbours"] = sampler._generator.get_state()
    return out


def load_loader_state(loader: NodeLoader | None, state: dict[str, Any]) -> None:
    if loader is None:
        return
    if "order" in state:
        loader.sampler.generator.set_state(state["order"])  # type: ignore[attr-defined]
    if "neighbours" in state:
        loader.node_sampler._generator.set_state(state["neighbours"])  # type: ignore[attr-defined]


def read_state(path: Path) -> dict[str, Any]:
    """A seed's ``state.pt``, or one line naming the problem (truncated, foreign)."""
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # torch raises many types for truncated or unsafe files
        raise UsageError(f"{path} cannot be read: it is truncated or not edgegcl's; remove it "
                         "to restart that seed from epoch 0") from None
    if not isinstance(raw, dict) or raw.get("format") != STATE_FORMAT:
        raise UsageError(f"{path} is not an edgegcl seed state (format {STATE_FORMAT!r}); "
                         "remove it to restart that seed from epoch 0")
    return raw
