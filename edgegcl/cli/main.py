"""The ``edgegcl`` command line. Usage errors print one line and exit with code 2.

Importing this module loads the standard library alone, and so does building the parser:
each command is a module of edgegcl.cli (``COMMANDS``), loaded with its options only when that
command is parsed (``_Parser``'s ``options``), and no command module imports torch. So
``--version``, ``--help``, ``profiles``, ``plot``'s errors and the errors of the command line
itself answer before torch is imported; torch loads inside ``main``, so that Ctrl-C while it
loads is one line and exit code 130 too.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NoReturn

from edgegcl import __version__
from edgegcl.jobs.ranks import RANK_VARIABLES, rank_environment_problem
from edgegcl.jobs.signals import INTERRUPTED, interrupt
from edgegcl.errors import Asking, UsageError, is_out_of_memory, out_of_memory_line
from edgegcl_embed.errors import one_line, shown
from edgegcl_embed.interrupt import forget_handled_interrupt


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (no usage dump) with exit code 2.

    ``options``: adds the parser's arguments when it first parses (a subcommand's parser
    parses only when that subcommand is named, its ``--help`` included), so that what they
    import loads only for the subcommand that needs it.
    """

    def __init__(self, *args: Any,
                 options: Callable[[argparse.ArgumentParser], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._options = options

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        if self._options is not None:
            options, self._options = self._options, None
            options(self)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"edgegcl: error: {one_line(message)} (see '{self.prog} --help')\n")


COMMANDS: dict[str, str] = {
    "train": "train AdNGCL with HANS and evaluate it",
    "profile": "measure epoch time and memory per theta_max on a device",
    "export": "write a trained encoder to ONNX for torch-free inference",
    "plot": "draw a run's training curves (loss, eta, micro-F1) to a PNG",
    "bench": "measure what each theta_max costs on this device",
    "profiles": "list the device profiles, or check your own",
    "convert": "write a graph as a graph folder, read memory-mapped by every command",
}
"""Every command, by its module in edgegcl.cli, with the line ``edgegcl --help`` shows. A
command's module holds ``DESCRIPTION``, ``add_options(parser)`` and ``run(args) -> int``."""


def _command(name: str, parser: argparse.ArgumentParser) -> None:
    """Load the command ``name``'s module and give ``parser`` its description, options and
    ``run``: only the command named loads what it imports (the start-up of ``--version`` and
    ``--help``, bench/results/cli-latency.md), here, the one place the CLI loads lazily."""
    module = importlib.import_module(f"edgegcl.cli.{name}")
    parser.description = module.DESCRIPTION
    module.add_options(parser)
    parser.set_defaults(func=module.run)


_NEGATIVE_VALUE = re.compile(r"-\d[\d.,]*")
"""A value that starts with a minus: a number or a list (``--fanout -1,5``)."""


def _negative_values(argv: Sequence[str]) -> list[str]:
    """``--opt -1,5`` as ``--opt=-1,5``: argparse takes a value that starts with a minus and
    is not a plain number for an option, and refuses the flag before it."""
    out: list[str] = []
    for arg in argv:
        if "--" in out:
            out.append(arg)
        elif (out and out[-1].startswith("--") and "=" not in out[-1] and out[-1] != "--"
              and _NEGATIVE_VALUE.fullmatch(arg)):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _parser() -> _Parser:
    """The whole command line; a command's options are added when it is parsed."""
    parser = _Parser(prog="edgegcl", description="Graph contrastive learning with HANS.")
    parser.add_argument("--version", action="version", version=f"edgegcl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, summary in COMMANDS.items():
        sub.add_parser(name, help=summary, options=partial(_command, name))
    return parser


def _os_error_line(exc: OSError) -> str | None:
    """One line for an OSError a user's path caused (a name too long, a loop of links), or
    None for one that is a bug."""
    if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR):
        name = f" {shown(str(exc.filename), 80)}" if exc.filename else ""
        return f"the path{name} cannot be used ({exc.strerror}); pass a shorter or plain path"
    return None


OUT_OF_MEMORY_FIX = ("free memory, or make the work smaller: train in mini-batches (--mode "
                     "minibatch, a smaller --batch-size), or convert the graph to a graph folder "
                     "(edgegcl convert), which runs read a batch at a time")
"""What the out-of-memory line advises: nothing was written that a run cannot resume."""


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush at exit does not meet
    the closed pipe again (Python's documented recipe for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line (``argv``, else ``sys.argv``); returns the exit code: 2 with one
    line for a usage error, 130 (143) with one line for Ctrl-C (SIGTERM) outside training's
    own handling."""
    INTERRUPTED.clear()
    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        problem = rank_environment_problem()
        if problem is not None:
            for name in RANK_VARIABLES:  # this process speaks for itself
                os.environ.pop(name, None)
            raise UsageError(problem)
        argv = list(sys.argv[1:] if argv is None else argv)
        args = _parser().parse_args(_negative_values(argv))
        args.command_line = shlex.join(["edgegcl", *argv])  # what results files record
        return int(args.func(args))
    except BaseException as exc:
        if isinstance(exc, BrokenPipeError):  # the reader went away (``| head -1``): quietly
            _discard_stdout()
            return 128 + signal.SIGPIPE
        # Ctrl-C while starting up (whatever it broke), or a second one while training
        if isinstance(exc, KeyboardInterrupt) or (INTERRUPTED and isinstance(exc, Exception)):
            signum = INTERRUPTED[0] if INTERRUPTED else signal.SIGINT
            print("edgegcl: terminated" if signum == signal.SIGTERM else "edgegcl: interrupted",
                  file=sys.stderr)
            forget_handled_interrupt()
            return 128 + signum
        line = None
        if isinstance(exc, RecursionError):
            line = "an input file is nested too deeply to be read; check the file you passed"
        elif isinstance(exc, OSError):
            line = _os_error_line(exc)
        elif is_out_of_memory(exc):
            line = out_of_memory_line(exc, OUT_OF_MEMORY_FIX)
        if line is not None:
            exc = UsageError(line)
        if not isinstance(exc, UsageError):
            raise
        if isinstance(exc, Asking):  # what it asks for, as flags
            exc = UsageError(exc.command_line())
        # under torchrun rank 0 speaks for all: every rank meets the same bad input (a
        # QuietUsageError exists only once edgegcl.training.distributed is loaded)
        dist = sys.modules.get("edgegcl.training.distributed")
        quiet = dist is not None and isinstance(exc, dist.QuietUsageError)
        own = dist is not None and isinstance(exc, dist.JoinError)  # each rank's own reason
        rank = os.environ.get("RANK", "0")
        if own:
            print(f"edgegcl: error (rank {rank}): {one_line(str(exc))}", file=sys.stderr,
                  flush=True)
        elif not quiet and rank == "0":
            size = os.environ.get("WORLD_SIZE", "1")
            ranks = f" (rank 0, for all {size} ranks)" if size not in ("", "1") else ""
            print(f"edgegcl: error{ranks}: {one_line(str(exc))}", file=sys.stderr, flush=True)
        return 2
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
