"""Reading a TOML file into its table, every problem one ``UsageError`` line.

A module of its own, on the standard library alone, so that what reads small TOML files
before any training (device profiles, ``edgegcl profiles``) loads without torch.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from edgegcl.errors import UsageError, first_line

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def read_toml(path: Path, what: str, missing_hint: str) -> dict[str, Any]:
    """A TOML file's table; a missing file (``missing_hint`` says what to do) or invalid TOML
    is one UsageError line naming ``what`` (e.g. "config file x.toml")."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise UsageError(f"{what} does not exist; {missing_hint}") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{what} is not valid TOML ({first_line(exc)}); fix the file") from None
