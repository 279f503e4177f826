"""Crash-safe files: atomic writes, and a seed's complete training state for ``--resume``.

Every file a run writes goes through ``write_atomic`` / ``save_atomic``: a temporary file in
the same directory, flushed and fsynced, then renamed over the target, so a kill at any
instant leaves either the previous complete file or the new one. A seed's state
(``seed-K/state.pt``) holds everything its next epoch depends on (the engine's state, the
selector's kept strata, the loader's random streams, the probes so far and the best
checkpoint), as plain tensors and Python values: ``torch.load(weights_only=True)`` reads it.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import torch
from torch_geometric.loader import NodeLoader

from edgegcl.errors import UsageError
from edgegcl.contrast.negatives import ActiveNegatives, CandidateSample
from edgegcl.training.step import NegativeSelector

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


def _active_to_dict(active: ActiveNegatives) -> dict[str, Any]:
    out = {f.name: getattr(active, f.name) for f in dataclasses.fields(active)}
    if active.sample is not None:
        out["sample"] = {f.name: getattr(active.sample, f.name)
                         for f in dataclasses.fields(active.sample)}
    out["sizes"] = list(active.sizes)
    return out


def _active_from_dict(raw: dict[str, Any], device: torch.device) -> ActiveNegatives:
    raw = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in raw.items()}
    if raw.get("sample") is not None:
        sample = dict(raw["sample"])
        raw["sample"] = CandidateSample(**{**sample, "cols": sample["cols"].to(device)})
    raw["sizes"] = tuple(raw["sizes"])
    return ActiveNegatives(**raw)


def selector_state(selector: NegativeSelector) -> dict[str, Any]:
    """The selector's kept strata and stream: what a full-graph step between refreshes uses."""
    active = selector._active
    return {"generator": selector.generator.get_state(),
            "key": None if selector._key is None else list(selector._key),
            "active": None if active is None else [_active_to_dict(a) for a in active]}


def load_selector_state(selector: NegativeSelector, state: dict[str, Any],
                        device: torch.device | str = "cpu") -> None:
    """Restore ``selector_state``; the kept strata go to ``device``."""
    selector.generator.set_state(state["generator"])
    selector._key = None if state["key"] is None else tuple(
        tuple(v) if isinstance(v, list) else v for v in state["key"])
    selector._active = None if state["active"] is None else tuple(  # type: ignore[assignment]
        _active_from_dict(a, torch.device(device)) for a in state["active"])


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
