"""torchrun's variables as a job reads them, checked whole before anything else runs: a stray
``RANK=1`` or ``WORLD_SIZE=abc`` left in a shell would otherwise make a plain run a silent
follower, wait for ranks that never come, or end in a traceback. Importing this module loads
the standard library alone."""

from __future__ import annotations

import os
from collections.abc import Mapping

from edgegcl.errors import UsageError
from edgegcl_embed.errors import shown

RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
"""What torchrun sets for each process (with ``MASTER_ADDR`` and ``MASTER_PORT``)."""


def rank_environment_problem(env: Mapping[str, str] = os.environ) -> str | None:
    """Why torchrun's variables in ``env`` cannot be used, or None: one that is not a whole
    number, ``WORLD_SIZE`` above 1 or ``RANK`` without the rest of a process group, a rank out
    of range."""
    given = [k for k in RANK_VARIABLES if k in env]
    bad = [f"{k}={shown(env[k], 20)}" for k in given if not env[k].isdigit()]
    if bad:
        return (f"{', '.join(bad)} is not a whole number: start the processes with torchrun, "
                f"or unset {', '.join(given)}")
    size = int(env.get("WORLD_SIZE", "1"))
    if "RANK" not in env:
        if size > 1:
            return (f"WORLD_SIZE={size} is set without RANK: start several processes with "
                    "torchrun, or unset WORLD_SIZE")
        return None
    missing = [k for k in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if not env.get(k)]
    if missing:
        return (f"RANK={env['RANK']} is set without {', '.join(missing)}: start several "
                "processes with torchrun, or unset RANK")
    port = env["MASTER_PORT"]
    if not (port.isdigit() and 1 <= int(port) <= 65535):
        return (f"MASTER_PORT={shown(port, 20)} is not a port (1..65535): start the processes "
                "with torchrun, or unset RANK")
    rank, local = int(env["RANK"]), int(env.get("LOCAL_RANK", "0"))
    if not (rank < size and local < size):
        return (f"RANK={rank} (LOCAL_RANK={local}) does not fit WORLD_SIZE={size}: start the "
                "processes with torchrun, or unset RANK")
    return None


def world_size(env: Mapping[str, str] = os.environ) -> int:
    """How many processes run this job (1 without torchrun); one UsageError line when
    torchrun's variables cannot be used (``rank_environment_problem``)."""
    problem = rank_environment_problem(env)
    if problem is not None:
        raise UsageError(problem)
    return int(env.get("WORLD_SIZE", "1"))
