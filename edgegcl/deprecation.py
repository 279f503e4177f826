"""How a public name is retired: the one deprecation helper.

edgegcl keeps one version of everything. When a public name (a function or class of the
top-level package, a configuration key, a flag) is renamed, the old name keeps working for one
release and no longer: it goes into ``RENAMED`` (old name -> ``Renamed``), reading it warns
with a ``DeprecationWarning`` that names the replacement and the release that removes it, and
CHANGELOG.md lists it under that release. Nothing else in the package carries an old name.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

__all__ = ["RENAMED", "Renamed", "renamed_message", "warn_renamed"]


@dataclass(frozen=True)
class Renamed:
    """An old name kept for one release: what replaces it (a top-level name of edgegcl, or a
    key or flag as written) and the release that removes it."""

    new: str
    removed_in: str


RENAMED: dict[str, Renamed] = {}
"""The top-level names kept for one release, by their old name (none at present)."""


def renamed_message(old: str, renamed: Renamed) -> str:
    """The warning's text: the replacement and when the old name goes."""
    return (f"{old} is now {renamed.new}; the name {old} goes in edgegcl "
            f"{renamed.removed_in} (CHANGELOG.md)")


def warn_renamed(old: str, renamed: Renamed, stacklevel: int = 3) -> None:
    """Warn once per call site that ``old`` is deprecated in favour of ``renamed.new``."""
    warnings.warn(renamed_message(old, renamed), DeprecationWarning, stacklevel=stacklevel)
