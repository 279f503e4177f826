"""The ``edgegcl`` command line."""

from edgegcl.cli.main import main

__all__ = ["main"]
