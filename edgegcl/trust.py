"""Which code a run may import: only what the user named.

``--encoder FILE.py:FN`` names Python code, and run directories, checkpoints and config files
record that name. A file someone else made must not run code, so a name read from a file is
used only when the user named the same encoder in this process (``allow_encoder``, which the
command line calls for ``--encoder SPEC``); ``check_named`` refuses any other, before anything
is imported. Standard library only: checked before torch loads.
"""

from __future__ import annotations

from pathlib import Path

from edgegcl.errors import UsageError
from edgegcl_embed.errors import shown

__all__ = ["allow_encoder", "canonical_spec", "check_named"]

_NAMED: set[str] = set()
"""The encoders the user named in this process (``allow_encoder``), canonical."""


def canonical_spec(spec: str, base: Path | None = None) -> str:
    """``spec`` as a run directory records it: ``FILE.py:FN`` with the file's absolute path
    (so ``--resume`` from another directory finds it), ``package.module:FN`` as given. A
    relative ``FILE.py`` is resolved against ``base`` (the folder of the file that named it),
    else the current directory."""
    where, colon, name = spec.rpartition(":")
    if not colon or not where.endswith(".py"):
        return spec
    path = Path(where).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    return f"{path.resolve()}:{name}"


def allow_encoder(spec: str) -> str:
    """Let files name the encoder ``spec``: the user has named it (``--encoder SPEC``), so
    its code may run when a checkpoint or config file asks for it. Returns the canonical form.

    Example:
        >>> allow_encoder("torch_geometric.nn:GraphSAGE")
        'torch_geometric.nn:GraphSAGE'
    """
    canonical = canonical_spec(spec)
    _NAMED.add(canonical)
    return canonical


def check_named(spec: str, source: str | Path, base: Path | None = None) -> str:
    """The canonical form of ``spec``, read from ``source`` (a file: relative paths resolve
    against ``base``, its folder), when the user named that encoder (``allow_encoder``);
    otherwise one UsageError line saying what the file names and how to allow it. Nothing is
    imported either way. A name without a colon (``auto``, ``gcn``, ``ego``, ``poly``) is a
    built-in encoder, not code, and passes as it is."""
    if ":" not in spec:
        return spec
    canonical = canonical_spec(spec, base)
    if canonical not in _NAMED:
        raise UsageError(f"{source} names the encoder {shown(spec, 120)}, Python code that "
                         f"building it would run; if you trust that code pass --encoder "
                         f"{shown(canonical, 200)} (nothing was run)")
    return canonical
