"""The Python API's arguments checked at the boundary, as the command line's flags are: each
of the wrong type or kind is one ``UsageError`` line naming the argument and what it takes
(never a TypeError from deep inside, and no value formatted as a number it may not be).
Standard library alone: the jobs check their arguments before torch loads.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from edgegcl.errors import UsageError


def _kind(value: object) -> str:
    return type(value).__name__


def path_argument(name: str, value: object) -> Path | None:
    """``value`` as a Path (a str or PathLike of text, no NUL byte), None as None."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, (str, Path)):
        raise UsageError(f"{name} must be a path (str or pathlib.Path), not {_kind(value)}")
    if "\0" in str(value) or not str(value):
        raise UsageError(f"{name} must be a non-empty path without NUL bytes")
    path = Path(value)
    longest = max(path.parts, key=lambda part: len(os.fsencode(part)))
    if len(os.fsencode(longest)) > NAME_MAX:
        raise UsageError(f"{name}: the name {longest[:40]}... is {len(os.fsencode(longest))} "
                         f"bytes, longer than a file name may be ({NAME_MAX}); pass a shorter "
                         "one")
    return path


NAME_MAX = 255
"""The longest file name, in bytes, that the usual filesystems allow (ext4, XFS, APFS, NTFS
in UTF-16 units): a longer one is refused before any work, not met as an OSError later."""


def settings_argument(value: object) -> dict[str, object]:
    """``settings``: a mapping of option names (str) to values, or None."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise UsageError(f"settings must be a dict of option names to values (as "
                         f"{{'theta_max': 0.3}}), not {_kind(value)}")
    return dict(value)


def flag_argument(name: str, value: object) -> bool:
    """A yes / no argument: True or False only (a string "no" is not False)."""
    if not isinstance(value, bool):
        raise UsageError(f"{name} must be True or False, not {_kind(value)}")
    return value


def callable_argument(name: str, value: object) -> Callable[..., Any] | None:
    """A function argument (``stop``, ``log``), or None."""
    if value is not None and not callable(value):
        raise UsageError(f"{name} must be a function (or None), not {_kind(value)}")
    return value  # type: ignore[return-value]


def stop_argument(value: object) -> Callable[[], bool] | None:
    """``stop``: a function of no arguments polled after every epoch, as one that answers
    True or False (numpy's bool too) or says in one UsageError line that it did not: what
    it returned instead, or what it raised."""
    stop = callable_argument("stop", value)
    if stop is None:
        return None

    def poll() -> bool:
        try:
            answer = stop()
        except Exception as exc:  # the user's function: its own error, named in one line
            text = str(exc).strip().splitlines()
            raise UsageError(f"stop raised {_kind(exc)}{': ' + text[0][:120] if text else ''}; "
                             "it must return True (stop after this epoch) or False") from None
        if not (isinstance(answer, bool) or (type(answer).__module__ == "numpy"
                                             and _kind(answer) in ("bool", "bool_"))):
            raise UsageError(f"stop must return True or False, not {_kind(answer)}")
        return bool(answer)
    return poll


def hooks_argument(value: object, hook_type: type) -> list[Any]:
    """``hooks``: a list or tuple of ``Hook`` instances."""
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)) or not all(
            isinstance(h, hook_type) for h in value):
        raise UsageError("hooks must be a list of edgegcl.Hook instances (subclass "
                         f"edgegcl.Hook), not {_kind(value)}")
    return list(value)


def budget_argument(name: str, value: object) -> float | None:
    """A number (seconds, GiB) as a float, an integer too large for one as inf (its range is
    the profile's to check: edgegcl.budget.profiles.with_budgets), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{name} must be a number, not {_kind(value)}")
    try:
        return float(value)
    except OverflowError:
        return math.inf
