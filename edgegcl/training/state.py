"""Crash-safe files: atomic writes, a run's configuration hash, and a seed's complete training
state for ``--resume``.

Every file a run writes goes through ``write_atomic`` / ``save_atomic`` (edgegcl_embed.files
``replacing``: a temporary file of this process's beside the target, fsynced, then renamed
over it), so a kill at any instant leaves either the previous complete file or the new one,
and a full or read-only disk is one line. One process at a time writes a run directory: it
holds its ``RunLock`` (edgegcl.training.lock). Every seed file names the configuration it was trained under
(``config_hash``), so ``--resume`` refuses one copied from another run. A seed's state
(``seed-K/state.pt``) holds everything its next epoch depends on (the engine's state, the
selector's kept strata, the loader's random streams, the probes so far and the best
checkpoint), as plain tensors and Python values: ``torch.load(weights_only=True)`` reads it.
"""

from __future__ import annotations

import hashlib
import warnings
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from edgegcl.config import to_toml
from edgegcl.memory import memory_limit
from edgegcl.training.config import FIELDS, RESUMABLE, TrainConfig
from edgegcl.errors import UsageError
from edgegcl_embed.errors import shown
from edgegcl_embed.files import open_regular, refusals, replacing

if TYPE_CHECKING:
    from torch_geometric.loader import NodeLoader

STATE_FORMAT = "edgegcl-seed-state-1"

UNHASHED = (*RESUMABLE, "out")
"""Fields ``config_hash`` leaves out: what a resume may change, and where the run lives."""
_WRITE_HINT = "free space or pick a writable --out (the previous files are intact)"


def config_hash(cfg: TrainConfig) -> str:
    """SHA-256 of the configuration as config.toml writes it (``to_toml``) without
    ``UNHASHED``: the identity of the training a seed file belongs to,
    stored in state.pt, result.pt and checkpoint.pt."""
    defaults = {name: FIELDS[name].default for name in UNHASHED}
    return hashlib.sha256(to_toml(replace(cfg, **defaults)).encode()).hexdigest()


def check_config(path: Path, saved: dict[str, Any], cfg: TrainConfig) -> None:
    """Refuse, in one line, a seed file trained under another configuration than ``cfg``.

    A state names the fields that differ (it keeps its configuration)."""
    stored = saved.get("config_hash")
    if stored == config_hash(cfg):
        return
    if stored is None:
        raise UsageError(f"{path} carries no configuration hash: it was not written by this "
                         "version of edgegcl; remove it to train that seed afresh")
    theirs, ours = saved.get("config"), cfg.to_dict()
    differ = [f"{k} {theirs[k]!r} there, {ours[k]!r} here" for k in ours
              if isinstance(theirs, dict) and k not in UNHASHED and k in theirs
              and theirs[k] != ours[k]]
    raise UsageError(f"{path} was trained under another configuration than this run's "
                     f"config.toml{' (' + '; '.join(differ[:3]) + ')' if differ else ''}: it "
                     "comes from another run; remove it to train that seed afresh")


def guard_writes(path: Path) -> AbstractContextManager[None]:
    """For the writes to ``path`` that are not replacements (an append, a new directory): a
    disk that refuses them is one line, as with ``write_atomic``."""
    return refusals([path], UsageError, _WRITE_HINT)


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` (UTF-8) atomically."""
    with replacing([path], UsageError, _WRITE_HINT) as (tmp,):
        tmp.write_bytes(text.encode())


def save_atomic(obj: Any, path: Path) -> None:
    """``torch.save(obj)`` to ``path`` atomically."""
    with replacing([path], UsageError, _WRITE_HINT) as (tmp,), tmp.open("wb") as fh:
        torch.save(obj, fh)


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


def load_tensors(path: Path, what: str, fix: str) -> Any:
    """``torch.load(weights_only=True)`` of a regular file no larger than the memory available
    (a FIFO, device or oversized file is one UsageError line naming ``what``); torch's own
    errors for a damaged file pass through for the caller to name."""

    with open_regular(path, what, fix, memory_limit(), UsageError) as fh, \
            warnings.catch_warnings():
        # torch's deprecation notes (TypedStorage, for a quantised tensor) are not the user's
        # to act on: the values are judged by the caller, in one line
        warnings.simplefilter("ignore", UserWarning)
        return torch.load(fh, map_location="cpu", weights_only=True)


def odd_tensor(value: Any, where: str = "", depth: int = 0) -> str | None:
    """The first tensor in ``value`` (dicts, lists and tuples walked) that no saved state
    holds: sparse, quantised, on the meta device, or floating with NaN or inf; where it is
    and what it is, or None. A loaded state is checked before anything uses its values."""
    if depth > 32:
        return f"{where or 'the state'} is nested more than 32 deep"
    if isinstance(value, torch.Tensor):
        kind = ("a sparse" if value.layout != torch.strided else
                "a quantised" if value.is_quantized else
                "a meta" if value.is_meta else None)
        if kind is None and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            kind = "a non-finite"
        return None if kind is None else f"{where or 'the state'} is {kind} tensor"
    items = (value.items() if isinstance(value, dict) else
             enumerate(value) if isinstance(value, (list, tuple)) else ())
    for key, inner in items:
        found = odd_tensor(inner, f"{where}[{key!r}]" if where else repr(key), depth + 1)
        if found is not None:
            return found
    return None


def read_state(path: Path) -> dict[str, Any]:
    """A seed's ``state.pt``, or one line naming the problem (truncated, foreign)."""
    fix = "remove it to restart that seed from epoch 0"
    try:
        raw = load_tensors(path, "seed state", fix)
    except UsageError:
        raise
    except Exception:  # torch raises many types for truncated or unsafe files
        raise UsageError(f"{path} cannot be read: it is truncated or not edgegcl's; {fix}"
                         ) from None
    if not isinstance(raw, dict) or raw.get("format") != STATE_FORMAT:
        raise UsageError(f"{path} is not an edgegcl seed state (format {STATE_FORMAT!r}); "
                         "remove it to restart that seed from epoch 0")
    odd = odd_tensor(raw)
    if odd is not None:
        raise UsageError(f"{path} holds what no seed state holds ({shown(odd, 160)}); {fix}")
    return raw
