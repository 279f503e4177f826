"""Device profiles: the memory and time one training epoch may take on a device, from TOML.

A profile is a small TOML file (the shipped ones are in the repository's ``profiles/``):

- ``name``: the profile's name (a shipped profile's is its file name without ``.toml``)
- ``description``: one line saying what the device is (optional)
- ``device``: ``"cuda"`` or ``"cpu"``, where training runs
- ``memory_budget_gib``: GiB (2**30 bytes) training may use, > 0, or ``"auto"``: what the
  device has free when the run starts
- ``headroom``: the fraction of that budget held back, in [0, 1); usable = budget * (1 - headroom)
- ``target_epoch_s``: seconds one training epoch may take, > 0
- ``batch_size_min``, ``batch_size_max``: bounds on ``--batch-size`` (seed nodes per mini-batch)
  on this device, integers with 1 <= min <= max
- ``threads``: CPU threads torch uses on this device (optional; 0 or absent: measured, as
  ``--threads 0``); ``--threads N`` overrides it

Every problem with a file is one ``UsageError`` line naming the field, what is wrong and the fix.
Reading and listing profiles needs the standard library alone (``edgegcl profiles`` answers
without loading torch); what asks the device (``check_device_present``,
``memory_budget_bytes``) imports torch when called.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import psutil

from edgegcl.errors import UsageError
from edgegcl.tomlfile import read_toml
from edgegcl.training.config import MAX_THREADS

if TYPE_CHECKING:
    import torch

DEVICE_KINDS = ("cuda", "cpu")
MAX_GIB, MAX_EPOCH_S = 1 << 20, 1e7
"""Largest budgets a profile may state: a petabyte (2**20 GiB) of memory, four months an epoch."""
FIELDS = ("name", "description", "device", "memory_budget_gib", "headroom", "target_epoch_s",
          "batch_size_min", "batch_size_max", "threads")
OPTIONAL = ("description", "threads")

_HERE = Path(__file__).resolve().parents[1]  # edgegcl/
# Installed from a wheel, the profiles are package data (pyproject.toml maps the repository's
# top-level profiles/ to edgegcl/device_profiles); in a checkout (editable install) they are
# the repository's profiles/ itself.
SHIPPED_DIR = next((d for d in (_HERE / "device_profiles", _HERE.parent / "profiles") if d.is_dir()),
                   _HERE / "device_profiles")


@dataclass(frozen=True)
class DeviceProfile:
    """One validated profile; see the module docstring for what each field means."""

    name: str
    description: str
    device: Literal["cuda", "cpu"]
    memory_budget_gib: float | Literal["auto"]
    headroom: float
    target_epoch_s: float
    batch_size_min: int
    batch_size_max: int
    threads: int = 0


def shipped_names() -> list[str]:
    """Names of the profiles that ship with edgegcl, sorted."""
    return sorted(p.stem for p in SHIPPED_DIR.glob("*.toml"))


def list_profiles() -> list[DeviceProfile]:
    """Every shipped profile, loaded and validated, sorted by name."""
    return [load_profile(name) for name in shipped_names()]


def load_profile(name_or_path: str) -> DeviceProfile:
    """A shipped profile by name (``rtx4090``), or the user's own file (a path ending in ``.toml``)."""
    if name_or_path.endswith(".toml"):
        return _read(Path(name_or_path))
    names = shipped_names()
    if name_or_path not in names:
        raise UsageError(f"unknown profile {name_or_path!r}; shipped profiles are {', '.join(names)} "
                         f"(see 'edgegcl profiles'), or give your own file as PATH.toml")
    return _read(SHIPPED_DIR / f"{name_or_path}.toml")


def _read(path: Path) -> DeviceProfile:
    where = f"profile file {path}"
    raw = read_toml(path, where, "check the path, or use a shipped profile "
                    f"({', '.join(shipped_names())})")
    return _parse(raw, where)


def _parse(raw: dict[str, Any], where: str) -> DeviceProfile:
    """Validate the key/value pairs of a profile file; ``where`` names the file in errors."""
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise UsageError(f"{where}: unknown field(s) {', '.join(unknown)}; "
                         f"valid fields are {', '.join(FIELDS)}")
    missing = [f for f in FIELDS if f not in raw and f not in OPTIONAL]
    if missing:
        raise UsageError(f"{where}: missing field(s) {', '.join(missing)}; "
                         f"add them (docs/profiles.md, 'Device profiles', says what each means)")

    def fail(field: str, what: str, example: str) -> UsageError:
        return UsageError(f"{where}: {field} must be {what}, got {raw[field]!r}; "
                          f"e.g. {field} = {example}")

    name, description = raw["name"], raw.get("description", "")
    if not isinstance(name, str) or not name.strip():
        raise fail("name", "a non-empty string", '"my-laptop"')
    if not isinstance(description, str):
        raise fail("description", "a string", '"my laptop\'s GPU"')
    if raw["device"] not in DEVICE_KINDS:
        raise fail("device", " or ".join(f'"{k}"' for k in DEVICE_KINDS), '"cuda"')
    memory = raw["memory_budget_gib"]
    if memory != "auto" and not (_is_number(memory) and 0 < memory <= MAX_GIB):
        raise fail("memory_budget_gib", f'a positive number of GiB up to {MAX_GIB} or "auto"',
                   "8")
    headroom = raw["headroom"]
    if not (_is_number(headroom) and 0 <= headroom < 1):
        raise fail("headroom", "a fraction in [0, 1) of the memory budget held back", "0.1")
    if not (_is_number(raw["target_epoch_s"]) and 0 < raw["target_epoch_s"] <= MAX_EPOCH_S):
        raise fail("target_epoch_s", f"a positive number of seconds up to {MAX_EPOCH_S:g}",
                   "2.0")
    for field in ("batch_size_min", "batch_size_max"):
        value = raw[field]
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise fail(field, "a positive integer (seed nodes per mini-batch)", "1024")
    threads = raw.get("threads", 0)
    if not (isinstance(threads, int) and not isinstance(threads, bool)
            and 0 <= threads <= MAX_THREADS):
        raise fail("threads", f"an integer in [0, {MAX_THREADS}] (0: measured)", "4")
    if raw["batch_size_min"] > raw["batch_size_max"]:
        raise UsageError(f"{where}: batch_size_min ({raw['batch_size_min']}) is larger than "
                         f"batch_size_max ({raw['batch_size_max']}); swap them")
    return DeviceProfile(name=name, description=description, device=raw["device"],
                         memory_budget_gib=memory if memory == "auto" else float(memory),
                         headroom=float(headroom), target_epoch_s=float(raw["target_epoch_s"]),
                         batch_size_min=raw["batch_size_min"], batch_size_max=raw["batch_size_max"],
                         threads=threads)


def with_budgets(profile: DeviceProfile, target_epoch_s: float | None = None,
                 memory_gib: float | None = None) -> DeviceProfile:
    """``profile`` with the budgets given on the command line (``--target-epoch-s``,
    ``--memory-gib``) in place of its own; None keeps the profile's. Each must be a positive
    number: anything else is one UsageError line."""
    for flag, value, top in (("--target-epoch-s", target_epoch_s, MAX_EPOCH_S),
                             ("--memory-gib", memory_gib, MAX_GIB)):
        if value is not None and not (_is_number(value) and 0 < value <= top):
            raise UsageError(f"{flag} must be a positive number up to {top:g}, got {value:g}; "
                             f"e.g. {flag} "
                             + ("2.0 (seconds per epoch)" if flag == "--target-epoch-s"
                                else "8 (GiB)"))
    return replace(profile,
                   target_epoch_s=profile.target_epoch_s if target_epoch_s is None
                   else float(target_epoch_s),
                   memory_budget_gib=profile.memory_budget_gib if memory_gib is None
                   else float(memory_gib))


def _is_number(value: Any) -> bool:
    """A finite TOML integer or float (TOML booleans are Python ints: not numbers here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_device_present(profile: DeviceProfile) -> None:
    """Raise a one-line ``UsageError`` when the profile's device is not usable from this torch."""
    import torch  # profiles load without torch (edgegcl profiles, the plan); a device needs it

    if profile.device != "cuda" or torch.cuda.is_available():
        return
    why = ("a CPU-only build" if torch.version.cuda is None else
           f"built for CUDA {torch.version.cuda}, but it sees no GPU (driver, CUDA_VISIBLE_DEVICES?)")
    raise UsageError(f"profile {profile.name} needs a CUDA device but this torch has none "
                     f"(torch {torch.__version__}, {why}); run with --profile cpu, or install a "
                     f"CUDA build of torch on a machine with an NVIDIA GPU")


def memory_budget_bytes(profile: DeviceProfile, device: torch.device | None = None) -> int:
    """Bytes a run may use under ``profile``, after headroom.

    A fixed budget is capped at the device's total memory (a Raspberry Pi 5 profile on a 4 GB
    board gets 4 GB, not 7); ``"auto"`` is what is free at the call (psutil's available memory,
    or ``torch.cuda.mem_get_info``), so call it where the profiler takes its memory baseline.
    ``device`` picks the GPU of a cuda profile (default: the current one).
    """
    import torch  # profiles load without torch (edgegcl profiles, the plan)

    check_device_present(profile)
    if profile.device == "cuda":
        free, total = torch.cuda.mem_get_info(device)
    else:
        mem = psutil.virtual_memory()
        free, total = mem.available, mem.total
    if profile.memory_budget_gib == "auto":
        budget = free
    else:
        budget = min(total, int(profile.memory_budget_gib * 2**30))
    return int(budget * (1.0 - profile.headroom))


def format_profiles(profiles: list[DeviceProfile]) -> str:
    """One aligned line per profile: name, device, memory, headroom, epoch target, batch bounds."""
    rows = [("name", "device", "memory", "headroom", "epoch", "batch size", "description")]
    for p in profiles:
        memory = "auto" if p.memory_budget_gib == "auto" else f"{p.memory_budget_gib:g} GiB"
        rows.append((p.name, p.device, memory, f"{p.headroom:.0%}", f"{p.target_epoch_s:g} s",
                     f"{p.batch_size_min}-{p.batch_size_max}", p.description))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(r, widths)), r[-1]]) for r in rows)
