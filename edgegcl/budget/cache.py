"""Profile measurements kept between runs, so that a second ``--auto-budget`` starts at once.

What the profiler measures at one (batch size, theta_max, logits path) depends on the device,
the graph and the run's settings, not on the profile's budgets: the budgets only decide which
measurement is kept. So the measurements are stored per (device, graph, settings) key, one
JSON file per key in the cache folder (``$EDGEGCL_CACHE/profiles``, by default
``~/.cache/edgegcl/profiles``), and any later search under any budgets reads what it can from
there and measures the rest.

- the device: its kind and model (CPU model name or GPU name), the cores and torch's threads,
  the torch and edgegcl versions and the memory allocator setting (``EDGEGCL_MALLOC``);
- the graph: a digest of its features and edges (their values, not the file's name);
- the settings: every config field but those the profiler sets itself (theta_max, batch
  size, logits path) or never reads (the run directory, seeds, probes, learning rate, ...).

A file is JSON only: it is never unpickled or executed. One that is not valid JSON, not
edgegcl's or written for another key (a digest collision, a hand-edited file) is ignored with
one warning line and replaced on the next write; every write is atomic. Out-of-memory results
are not kept: what was free then says little about the next run.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from edgegcl import __version__
from edgegcl.budget.search import Cost
from edgegcl.data.identity import feed
from edgegcl.errors import UsageError, first_line
from edgegcl.training.state import write_atomic
from edgegcl_embed.files import open_checked

if TYPE_CHECKING:
    from torch_geometric.data import Data

    from edgegcl.training.config import TrainConfig

CACHE_ENV = "EDGEGCL_CACHE"
FORMAT = "edgegcl-profile-cache"
VERSION = 1
NOT_MEASURED_BY_PROFILER = ("theta_max", "batch_size", "logits", "dataset", "root", "device",
                            "out", "seeds", "eval_every", "checkpoint_every", "protocol", "lr",
                            "weight_decay", "dist_timeout")
"""Config fields left out of the key: set by the search itself, named by the graph's and the
device's own entries, or never read by the profiler's steps."""

CACHE_LIMIT = 16 << 20
"""The most bytes a cache file is read for (one holds a few dozen measurements)."""
MIN_EPOCH_S, MAX_EPOCH_S, MAX_PEAK_BYTES = 1e-6, 1e7, 1 << 50
"""Bounds of a cost a device can have measured: an epoch takes at least a microsecond (a
kernel launch) and less than four months; memory is positive and below a petabyte. A cache
entry outside them was not measured: the file is ignored with a warning."""

Entry = tuple[int, float, str]
"""(batch size, theta_max, logits path)."""


def cache_root() -> Path:
    """edgegcl's cache folder: ``$EDGEGCL_CACHE``, else ``~/.cache/edgegcl``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "edgegcl"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as fh:
            return next(line.split(":", 1)[1].strip() for line in fh
                        if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def device_key(device: torch.device) -> dict[str, Any]:
    """What makes one machine's measurements another's: see the module docstring."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
    return {"kind": device.type, "name": name, "cores": os.cpu_count(),
            "threads": torch.get_num_threads(), "torch": torch.__version__,
            "edgegcl": __version__, "malloc": os.environ.get("EDGEGCL_MALLOC", "")}


def graph_digest(data: Data) -> str:
    """A digest of the graph's features and edges (their layout, shapes and values)."""
    h = hashlib.blake2b(digest_size=16)
    feed(h, data.x)
    feed(h, data.edge_index)
    return h.hexdigest()


def settings_key(cfg: TrainConfig) -> dict[str, Any]:
    """The config's fields the profiler's measurements depend on."""
    return {k: v for k, v in cfg.to_dict().items() if k not in NOT_MEASURED_BY_PROFILER}


class ProfileCache:
    """The measurements stored under one key; ``get`` what is there, ``put`` what is new.

    ``warn`` receives one line when the stored file is ignored or cannot be written (the run
    goes on, measuring).
    """

    def __init__(self, directory: Path, key: dict[str, Any],
                 warn: Callable[[str], None], remeasure: bool = False) -> None:
        text = json.dumps(key, sort_keys=True)
        self.key = json.loads(text)  # as it reads back
        self.path = directory / f"{hashlib.blake2b(text.encode(), digest_size=16).hexdigest()}.json"
        self._warn = warn
        self._writable = True
        self._costs: dict[Entry, Cost] = {} if remeasure else self._load()
        self.hits = 0
        """Measurements ``get`` has answered from the file."""

    @classmethod
    def for_run(cls, data: Data, cfg: TrainConfig, device: torch.device,
                warn: Callable[[str], None], remeasure: bool = False) -> ProfileCache:
        """The cache of this graph, settings and device, in ``cache_root()/profiles``;
        ``remeasure``: what it holds is not read, and is replaced by what is measured now."""
        return cls(cache_root() / "profiles",
                   {"device": device_key(device), "graph": graph_digest(data),
                    "settings": settings_key(cfg)}, warn, remeasure)

    def __len__(self) -> int:
        return len(self._costs)

    def _load(self) -> dict[Entry, Cost]:
        if not self.path.exists() and not self.path.is_symlink():
            return {}
        try:
            fh, problem = open_checked(self.path, CACHE_LIMIT)
            if fh is None:
                raise ValueError(f"it {problem}")
            with fh:
                raw = json.loads(fh.read(CACHE_LIMIT + 1).decode("utf-8"))
            if not (isinstance(raw, dict) and raw.get("format") == FORMAT):
                raise ValueError("not an edgegcl profile cache")
            if raw.get("version") != VERSION:
                raise ValueError(f"version {raw.get('version')!r}, not {VERSION}")
            if raw.get("key") != self.key:
                raise ValueError("written for another device, graph or settings")
            return {_entry(e): _cost(e) for e in raw["costs"]}
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError,
                RecursionError) as exc:
            self._warn(f"ignoring the profile cache {self.path} ({first_line(exc)}); measuring "
                       "again, and it will be rewritten")
            return {}

    def get(self, batch_size: int, theta: float, logits: str) -> Cost | None:
        """The stored cost of this measurement, or None."""
        cost = self._costs.get((batch_size, round(theta, 6), logits))
        if cost is not None:
            self.hits += 1
        return cost

    def put(self, batch_size: int, theta: float, logits: str, cost: Cost) -> None:
        """Keep a new measurement (not an out-of-memory one) and rewrite the file."""
        if cost.oom:
            return
        self._costs[(batch_size, round(theta, 6), logits)] = cost
        if not self._writable:
            return
        body = {"format": FORMAT, "version": VERSION, "key": self.key,
                "costs": [{"batch_size": b, "theta": t, "logits": p, "epoch_s": c.epoch_s,
                           "peak_bytes": c.peak_bytes, "phases": [list(ph) for ph in c.phases]}
                          for (b, t, p), c in sorted(self._costs.items())]}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, json.dumps(body, indent=1) + "\n")
        except (OSError, UsageError) as exc:
            self._writable = False
            self._warn(f"cannot write the profile cache {self.path} ({first_line(exc)}); "
                       f"the next run measures again (set {CACHE_ENV} to a writable folder)")


def _entry(e: dict[str, Any]) -> Entry:
    batch, theta, logits = e["batch_size"], e["theta"], e["logits"]
    if not (isinstance(batch, int) and isinstance(theta, float) and isinstance(logits, str)):
        raise ValueError("an entry of the wrong type")
    return batch, round(theta, 6), logits


def _cost(e: dict[str, Any]) -> Cost:
    epoch_s, peak = e["epoch_s"], e["peak_bytes"]
    if not (isinstance(epoch_s, float) and math.isfinite(epoch_s) and isinstance(peak, int)):
        raise ValueError("a cost of the wrong type")
    if not (MIN_EPOCH_S <= epoch_s <= MAX_EPOCH_S and 0 < peak <= MAX_PEAK_BYTES):
        raise ValueError(f"an impossible cost (epoch {epoch_s:g} s, peak {peak} bytes)")
    phases = tuple((str(name), float(s)) for name, s in e["phases"])
    return Cost(epoch_s, peak, phases=phases)
