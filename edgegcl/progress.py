"""The command line's status lines (progress lines with an ETA: edgegcl_embed.progress)."""

from __future__ import annotations

import sys


def say(line: str) -> None:
    """One status line of the command line on stderr, ``edgegcl: LINE``."""
    print(f"edgegcl: {line}", file=sys.stderr, flush=True)
