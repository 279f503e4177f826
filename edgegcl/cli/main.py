"""The ``edgegcl`` command line. Usage errors print one line and exit with code 2.

Importing this module loads the standard library alone, and so does building the parser: a
subcommand's options that need the library (``train``'s one flag per config field, ``export``'s
opset range) are added when that subcommand is parsed (``_Parser``'s ``options``). So
``--version``, ``--help``, ``profiles``, ``plot``'s errors and the errors of the command line
itself answer before torch is imported; torch loads inside ``main``, so that Ctrl-C while it
loads is one line and exit code 130 too.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from edgegcl import __version__
from edgegcl.cli.flags import add_budget_flags, add_config_flags, config_settings
from edgegcl.jobs.ranks import RANK_VARIABLES, rank_environment_problem
from edgegcl.jobs.signals import INTERRUPTED, interrupt
from edgegcl.errors import UsageError
from edgegcl_embed.errors import one_line
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


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train AdNGCL with HANS and evaluate it",
                       description="Train AdNGCL with HANS; writes config, metrics, the HANS "
                                   "event log and checkpoints into a run directory.",
                       options=_train_options)
    p.set_defaults(func=_cmd_train)


def _train_options(p: argparse.ArgumentParser) -> None:
    from edgegcl.training.logger import LOGGERS  # lazy: loaded when `train` is named (start-up)
    from edgegcl.training.config import RESUMABLE  # lazy: the same

    p.add_argument("--profile", metavar="NAME|FILE.toml",
                   help="device profile (see 'edgegcl profiles'): trains on its device")
    p.add_argument("--auto-budget", action="store_true",
                   help="with --profile: measure theta_max on the device first (measurements "
                        "are cached) and train with the largest that fits the profile's memory "
                        "and epoch-time budgets, or, when none meets the epoch time, the "
                        "fastest that fits in memory")
    add_budget_flags(p)
    p.add_argument("--logger", choices=LOGGERS, default=LOGGERS[0],
                   help="where the per-epoch rows and HANS events go besides the run "
                        "directory's files: none, or tensorboard (event files in each "
                        "RUN_DIR/seed-K; 'tensorboard --logdir RUN_DIR'; needs the tensorboard "
                        "extra) (default: none)")
    p.add_argument("--save-embeddings", action="store_true",
                   help="also write RUN_DIR/embeddings.npy: the kept encoder's embeddings of "
                        "every node of the training graph (float32 [nodes, out_dim], "
                        "np.load reads it)")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a stopped or crashed run from its seeds' saved state; only "
                        f"{', '.join('--' + f.replace('_', '-') for f in RESUMABLE)} (and "
                        "--logger) may change")
    add_config_flags(p)


def _add_profile(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="measure epoch time and memory per theta_max on a device",
                       description="Run the resource profiler alone: per theta_max, the epoch "
                                   "latency and peak memory on the profile's device, and the "
                                   "largest theta_max within its budgets (no training).",
                       options=_profile_options)
    p.set_defaults(func=_cmd_profile)


def _profile_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", metavar="NAME|FILE.toml", required=True,
                   help="device profile (see 'edgegcl profiles')")
    add_budget_flags(p)
    add_config_flags(p)


def _cmd_train(args: argparse.Namespace) -> int:
    from edgegcl.cli.train import train_command  # lazy: the command named loads alone

    return train_command(args)


def _cmd_profile(args: argparse.Namespace) -> int:
    from edgegcl.jobs.profile import profile  # lazy: the command named loads alone

    profile(args.config, profile=args.profile, settings=config_settings(args),
            target_epoch_s=args.target_epoch_s, memory_gib=args.memory_gib,
            remeasure=args.remeasure)
    return 0


def _add_plot(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot", help="draw a run's training curves (loss, eta, micro-F1) to a PNG",
                       description="Draw every seed's loss, eta per category and probe "
                                   "micro-F1 against the epoch, from RUN_DIR/seed-*/epochs.csv "
                                   "(a finished, running or stopped run). Needs matplotlib.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the --out of an edgegcl train run")
    p.add_argument("--out", metavar="FILE.png", help="where to write (default RUN_DIR/curves.png, "
                   "redrawn each time); an existing FILE is kept unless --force")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.set_defaults(func=_cmd_plot)


def _cmd_plot(args: argparse.Namespace) -> int:
    from edgegcl.training.curves import plot_run  # lazy: the command named loads alone

    print(plot_run(args.run_dir, args.out, args.force))
    return 0


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
    """The whole command line; the subcommands' options are added when one is parsed."""
    # lazy: `edgegcl --version` answers before these load (bench/results/cli-latency.md)
    from edgegcl.budget.profiles import add_profiles_parser
    from edgegcl.cli.bench import add_parser as add_bench_parser
    from edgegcl.cli.export import add_parser as add_export_parser

    parser = _Parser(prog="edgegcl", description="Graph contrastive learning with HANS.")
    parser.add_argument("--version", action="version", version=f"edgegcl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_train(sub)
    _add_profile(sub)
    add_export_parser(sub)
    _add_plot(sub)
    add_bench_parser(sub, _Parser)
    add_profiles_parser(sub)
    return parser


def _os_error_line(exc: OSError) -> str | None:
    """One line for an OSError a user's path caused (a name too long, a loop of links), or
    None for one that is a bug."""
    if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR):
        from edgegcl_embed.errors import shown  # lazy: only on this error's way out

        name = f" {shown(str(exc.filename), 80)}" if exc.filename else ""
        return f"the path{name} cannot be used ({exc.strerror}); pass a shorter or plain path"
    return None


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
        if line is not None:
            exc = UsageError(line)
        if not isinstance(exc, UsageError):
            raise
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
