"""Configuration sections: typed records owned by the layers, read from TOML and flags.

Each layer defines the section it reads beside its code (``edgegcl.nn.model.ModelConfig``,
``edgegcl.contrast.hans.HANSConfig``, ...) as a frozen dataclass subclassing ``Section``: a
field says its default and what it does (``option``), its annotation what it takes (``int``,
``float``, ``str``, a ``Literal`` of choices, ``dict[str, float]`` keyed by ``keys``,
``list[int]``). A section converts what a flag or a file gives (``"10,40,50"``, ``10``) to
that type and checks it as it is made: choices and bounds from its fields, its other rules
in its ``check``; a bad value is one ``UsageError`` line naming the flag. A configuration made
of sections (``edgegcl.training.config.TrainConfig``) is written as TOML, one table per
section (``to_toml``), and read back from that layout alone (``load_values``); field names are unique across sections, so a flat mapping of
values by field name is what files, flags and presets exchange. This module imports no layer.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import operator
import typing
from dataclasses import MISSING, Field, field, fields
from pathlib import Path
from typing import Any, ClassVar

from edgegcl.errors import UsageError
from edgegcl.tomlfile import read_toml


def option(default: Any, help: str, *, at_least: float | None = None,
           above: float | None = None, at_most: float | None = None, why: str = "",
           keys: tuple[str, ...] = (), omit_default: bool = False) -> Any:
    """A section's field: its default, what it does (``--help`` shows it), and its bounds.

    ``at_least`` / ``above`` / ``at_most``: the inclusive, exclusive and upper bounds a
    number must keep (``why`` says why in the refusal); ``keys``: a mapping's keys (its flag
    form names each, ``--ratios hard=30,inter=50,easy=20``); ``omit_default``: an option only
    some runs use (an encoder's or ProGCL's), left out of the canonical forms while it holds
    its default, so that config.toml lists what the run uses.
    """
    meta = {"help": help, "at_least": at_least, "above": above, "at_most": at_most,
            "why": why, "keys": keys, "omit_default": omit_default}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda d=default: copy.deepcopy(d), metadata=meta)
    return field(default=default, metadata=meta)


def flag(name: str) -> str:
    """A field's command-line flag: ``theta_max`` -> ``--theta-max``."""
    return "--" + name.replace("_", "-")


def choices(kind: Any) -> tuple[str, ...]:
    """The values of a ``Literal`` type, e.g. ``choices(Pick)`` -> ``("hardest", "random")``."""
    return typing.get_args(kind)


class Section:
    """A part of the configuration that one layer reads: a frozen dataclass of options.

    Subclasses set ``TITLE`` (the TOML table's comment and ``--help``'s group) and may add
    rules between fields in ``check``. Values are converted to each field's type, then checked
    (choices, bounds, ``check``) when the section is made: a section never holds a bad value.
    """

    TITLE: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            value = _coerce(f, _hints(type(self))[f.name], getattr(self, f.name))
            object.__setattr__(self, f.name, value)
            _check_bounds(f, value)
        self.check()

    def check(self) -> None:
        """The section's rules between fields; raise ``UsageError`` naming the flags."""

    @classmethod
    def default(cls, name: str) -> Any:
        """The default of field ``name`` (a fresh copy of a mapping or list): what the flag
        starts from, and what the Python classes that take the option start from too."""
        f = next(f for f in fields(cls) if f.name == name)  # type: ignore[arg-type]
        return f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]

    def values(self) -> dict[str, Any]:
        """Every field by name (a copy; the canonical forms leave out ``omit_default`` fields
        at their default: ``canonical_values``)."""
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _check_bounds(f: Field[Any], value: Any) -> None:
    numbers = value.values() if isinstance(value, dict) else [value]
    if any(isinstance(v, float) and not math.isfinite(v) for v in numbers):
        raise UsageError(f"{flag(f.name)} must be a finite number, got {value!r}")
    meta = f.metadata
    lo, gt, hi = meta["at_least"], meta["above"], meta["at_most"]
    if lo is None and gt is None and hi is None:
        return
    ok = (lo is None or value >= lo) and (gt is None or value > gt) and (hi is None or value <= hi)
    if ok:
        return
    if hi is not None and (lo is not None or gt is not None):
        rule = (f"in {'[' if lo is not None else '('}{_number_text(lo if lo is not None else gt)}"
                f", {_number_text(hi)}]")
    elif hi is not None:
        rule = f"<= {_number_text(hi)}"
    else:
        rule = (f"at least {_number_text(lo)}" if lo is not None else f"> {_number_text(gt)}")
    why = f" ({meta['why']})" if meta["why"] else ""
    raise UsageError(f"{flag(f.name)} must be {rule}{why}, got {_number_text(value)}")


def _number_text(value: Any) -> str:
    """A bound or a refused value as a refusal shows it: an integer in full up to 20 digits
    (2147483648, not 2.14748e+09), a longer one by its size (Python refuses to print integers
    of more than 4300 digits), a float as ``g`` does."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value) if abs(value) < 10**20 else f"an integer of {value.bit_length()} bits"
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value)


CATEGORY_ORDER = ("hard", "inter", "easy")
"""The order the keyed form of a mapping flag is shown in (``hard=30,inter=50,easy=20``)."""


def _coerce(f: Field[Any], kind: Any, value: Any) -> Any:
    """``value`` as the field's type, or one UsageError line naming the field."""
    keys: tuple[str, ...] = f.metadata["keys"]
    origin = typing.get_origin(kind)
    if origin is typing.Literal:
        if value not in choices(kind):
            raise UsageError(f"{flag(f.name)} must be one of {', '.join(choices(kind))}, got "
                             f"{value!r}")
        return value
    try:
        if origin is dict:
            if isinstance(value, dict):
                if set(value) != set(keys):
                    raise ValueError
                return {k: _number(value[k]) for k in keys}
            if not isinstance(value, str):
                raise ValueError
            pairs = [item.partition("=") for item in value.split(",")]  # hard=30,inter=50,...
            named = {k.strip().lower(): v for k, eq, v in pairs if eq}
            if len(named) != len(pairs) or set(named) != set(keys):
                raise ValueError
            return {k: _number(named[k]) for k in keys}
        if origin is list:
            items = value.split(",") if isinstance(value, str) else list(value)
            return [_integer(v) for v in items]
        if kind is int:
            return _integer(value)
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if isinstance(value, (list, dict)):
            raise ValueError
        return str(value)
    except (TypeError, ValueError, OverflowError, ArithmeticError):
        if origin is dict:
            what = (f"{','.join(f'{k}=N' for k in CATEGORY_ORDER if k in keys)} (every one "
                    f"once) or a table {' / '.join(keys)}")
        elif origin is list:
            what = "a list of integers, e.g. [10, 10] or 10,10"
        else:
            what = getattr(kind, "__name__", str(kind))
        raise UsageError(f"config field {f.name!r} ({flag(f.name)}) must be {what}, got "
                         f"{value!r}") from None


def _number(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError
    v = float(value)
    if not math.isfinite(v):
        raise ValueError
    return v


def _integer(value: Any) -> int:
    """An integer option's value: an int (numpy's too), a whole number of another type
    (2.0, Decimal("2")) or a string of digits; ValueError (or OverflowError: infinity) for
    anything else, a fraction included (``int()`` alone would truncate it)."""
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, str):
        return int(value.strip())
    try:
        return operator.index(value)
    except TypeError:
        pass
    whole = int(value)
    if whole != value:
        raise ValueError
    return whole


# ---- a configuration of sections ----------------------------------------------------------

def section_fields(config: type | Any) -> dict[str, tuple[str, Field[Any]]]:
    """Every option of a configuration of sections: ``{name: (section, field)}``."""
    hints = _hints(config if isinstance(config, type) else type(config))
    return {f.name: (s.name, f) for s in fields(config) for f in fields(hints[s.name])}


def convert(config: type, name: str, value: Any) -> Any:
    """``value`` (a flag's string, a file's value) as option ``name`` of the configuration
    class ``config`` holds it, or one UsageError line naming the flag; bounds unchecked."""
    section, f = section_fields(config)[name]
    return _coerce(f, _hints(_hints(config)[section])[name], value)


def split_values(config: type, values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Flat values by field name as ``{section: {name: value}}`` (unknown names: ValueError)."""
    owner = section_fields(config)
    out: dict[str, dict[str, Any]] = {s.name: {} for s in fields(config)}
    for name, value in values.items():
        if name not in owner:
            raise ValueError(f"{config.__name__} has no field {name!r}")
        out[owner[name][0]][name] = value
    return out


def canonical_values(config: Any) -> dict[str, Any]:
    """Every option by name, flat, in section order; ``omit_default`` fields at their default
    left out: the form stored in checkpoints and seed files."""
    out: dict[str, Any] = {}
    for s in fields(config):
        section = getattr(config, s.name)
        for f in fields(section):
            value = getattr(section, f.name)
            if not (f.metadata["omit_default"] and value == f.default):
                out[f.name] = copy.deepcopy(value)
    return out


def layout(config: Any) -> list[tuple[str, str, list[str]]]:
    """A configuration's TOML tables: (section name, its TITLE, its field names), in order."""
    return [(s.name, getattr(config, s.name).TITLE,
             [f.name for f in fields(getattr(config, s.name))]) for s in fields(config)]


def to_toml(config: Any, tables: list[tuple[str, str, list[str]]] | None = None) -> str:
    """A configuration of sections as TOML, one table per section with its ``TITLE``, that
    ``load_values`` reads back unchanged (``omit_default`` fields at their default left out).
    ``tables``: another grouping of the same fields (default ``layout(config)``)."""
    lines: list[str] = []
    flat = canonical_values(config)
    for name, title, names in tables if tables is not None else layout(config):
        lines += ([""] if lines else []) + [f"[{name}]  # {title}"]
        lines += [f"{n} = {_toml_value(flat[n])}" for n in names if n in flat]
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        # a JSON string is a TOML basic string, once DEL (legal in JSON only) is escaped too
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


_HERE = Path(__file__).resolve().parent
PRESETS_DIR = next((d for d in (_HERE / "presets", _HERE.parent / "presets") if d.is_dir()),
                   _HERE / "presets")
"""Shipped configurations (the repository's presets/, installed as edgegcl/presets)."""


def list_presets() -> list[str]:
    """Names ``--config`` accepts besides a path, e.g. ``paper-Cora``."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.toml"))


def resolve_config(name: str | Path) -> Path:
    """A ``--config`` value as a file: an existing path, else a shipped preset's file."""
    p = Path(name)
    if p.exists() or p.suffix == ".toml" or str(name) not in list_presets():
        return p
    return PRESETS_DIR / f"{name}.toml"


def load_values(p: Path, config: type) -> dict[str, Any]:
    """Read config file ``p`` (a preset's name resolved by ``resolve_config``) for the
    configuration class ``config``: its values by field name, as written (each section
    converts and checks them). Every key sits in its section's TOML table, as ``to_toml``
    writes it; a key at the top level or in another table, an unknown key and an unreadable
    file are usage errors naming the table the key belongs in."""
    raw = read_toml(p, f"config file {p}", "check the path given to --config (or name a "
                    f"preset: {', '.join(list_presets())})")
    owner = {name: section for name, (section, _) in section_fields(config).items()}
    tables = [s.name for s in fields(config)]
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in tables and isinstance(value, dict):
            for name, v in value.items():
                home = owner.get(name)
                if home != key:
                    keys = [n for n, s in owner.items() if s == key]
                    raise UsageError(f"config file {p}: [{key}] has no key {name!r}"
                                     + (f"; it belongs in [{home}]" if home else
                                        f"; its keys are {', '.join(keys)}"))
                values[name] = v
        elif isinstance(value, dict):  # a table of its own, whatever keys share its name
            name = key[:40] if key.isprintable() else repr(key[:40])
            raise UsageError(f"config file {p}: [{name}] is not a table of a run; "
                             f"the tables are {', '.join('[' + t + ']' for t in tables)}")
        elif key in owner:
            raise UsageError(f"config file {p}: key {key!r} sits outside any table; it "
                             f"belongs in [{owner[key]}] (a run's config.toml shows the "
                             "layout)")
        else:
            raise UsageError(f"config file {p} has unknown key {key!r}; the tables are "
                             f"{', '.join('[' + t + ']' for t in tables)}, their keys the "
                             "flag names with underscores (e.g. theta_max in [schedule])")
    return values


def flag_form(value: Any) -> str:
    """A value as its flag is written: a mapping keyed (``hard=30,inter=50,easy=20``), a list
    joined by commas (``10,10``), anything else as its repr."""
    if isinstance(value, dict):
        order = [k for k in CATEGORY_ORDER if k in value] + [k for k in value
                                                              if k not in CATEGORY_ORDER]
        return ",".join(f"{k}={value[k]:g}" for k in order)
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return repr(value)
