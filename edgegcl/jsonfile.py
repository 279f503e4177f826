"""Reading a small JSON record that a run keeps in its directory (its graph record, a
search's figures), every problem one ``UsageError`` line; the caller checks every value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edgegcl.errors import UsageError
from edgegcl_embed.errors import InputError, shown
from edgegcl_embed.files import read_regular


def read_record(path: Path, what: str, fix: str, limit: int) -> Any:
    """The JSON value in ``path``, or None when there is no such file; a file that is not a
    regular one of at most ``limit`` bytes holding JSON is one UsageError line ("PATH is not
    a WHAT (...); FIX")."""
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return json.loads(read_regular(path, what, fix, limit))
    except (InputError, ValueError, RecursionError) as exc:
        raise UsageError(f"{path} is not a {what} ({shown(str(exc), 80)}); {fix}") from None
