"""Reading a TOML file into its table, every problem one ``UsageError`` line.

A module of its own, on the standard library alone, so that what reads small TOML files
before any training (device profiles, ``edgegcl profiles``) loads without torch.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from edgegcl.errors import UsageError, first_line
from edgegcl_embed.files import open_checked

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


TOML_LIMIT = 1 << 20
"""The most bytes a TOML file (a config, a profile) is read for: such files are a few KB."""


def read_toml(path: Path, what: str, missing_hint: str) -> dict[str, Any]:
    """A TOML file's table; a missing file (``missing_hint`` says what to do), one that is
    not a regular file of at most ``TOML_LIMIT`` bytes (a FIFO, a device), invalid or too
    deeply nested TOML is one UsageError line naming ``what`` (e.g. "config file x.toml")."""
    fh, problem = open_checked(Path(path), TOML_LIMIT)
    if fh is None:
        hint = missing_hint if problem == "does not exist" else "pass a TOML file"
        raise UsageError(f"{what} {problem}; {hint}")
    try:
        with fh:
            text = fh.read(TOML_LIMIT + 1).decode()
        return tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else first_line(exc)
        raise UsageError(f"{what} is not valid TOML ({why}); fix the file") from None
