"""``edgegcl bench budgets --out DIR``: what each theta_max costs on this device, as a table, a CSV
file and a plot in DIR (edgegcl.budget.bench), from any directory, writing nowhere else. Every
config flag sets the run measured (``--out`` is where the results go)."""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path

from edgegcl.errors import UsageError


def add_parser(sub: argparse._SubParsersAction, parser_class: type[argparse.ArgumentParser]
               ) -> None:
    """Register ``bench`` and its ``budgets`` (options added when it is parsed)."""
    bench = sub.add_parser("bench", help="measure what each theta_max costs on this device",
                           description="Benchmarks of the device edgegcl runs on.")
    kinds = bench.add_subparsers(dest="bench", metavar="budgets", required=True,
                                 parser_class=parser_class)
    p = kinds.add_parser(
        "budgets", help="epoch time and peak memory per theta_max: table, CSV and plot",
        description="Measure the epoch time and peak training memory of every theta_max in "
                    "--thetas on both logits paths, as the profiler does (HANS held at the "
                    "state a run reaches there), each repeated --repeats times interleaved; "
                    "write DIR/budgets.md (median and spread), DIR/budgets.csv (every repeat) "
                    "and DIR/budgets.png. A figure measured while other processes used the "
                    "CPU is marked busy.",
        options=_options)
    p.set_defaults(func=_cmd_budgets, profile=None, target_epoch_s=None, memory_gib=None,
                   remeasure=False, resume=None)


def _options(p: argparse.ArgumentParser) -> None:
    from edgegcl.budget.bench import THETAS
    from edgegcl.cli.flags import add_config_flags

    p.add_argument("--thetas", default=",".join(f"{t:g}" for t in THETAS),
                   help="the theta_max values to measure, comma-separated (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=3,
                   help="measurements per cell, interleaved; the table gives their median and "
                        "spread (default: 3)")
    p.add_argument("--force", action="store_true",
                   help="replace budgets.* files already in DIR")
    add_config_flags(p)
    out = next(a for a in p._actions if a.dest == "out")
    out.help = ("directory to write budgets.md, budgets.csv and budgets.png into (made if "
                "missing; its parent must exist); required")


def _thetas(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or not all(0.0 < v <= 1.0 for v in values):
        raise UsageError(f"--thetas must be theta_max values in (0, 1], comma-separated, got "
                         f"{text!r}")
    return values


def _out_dir(args: argparse.Namespace) -> Path:
    """DIR, checked before anything is measured: its parent exists, nothing is overwritten
    unasked."""
    from edgegcl.budget.bench import FILES

    if not args.out:
        raise UsageError(f"edgegcl bench budgets writes {', '.join(FILES)}: say where with "
                         "--out DIR")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise UsageError(f"directory {out.parent} does not exist; create it or choose another "
                         "--out")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a directory")
    taken = [str(out / n) for n in FILES if (out / n).exists() or (out / n).is_symlink()]
    if taken and not args.force:
        raise UsageError(f"{', '.join(taken)} already exist(s); pass --force to replace them, or "
                         "another --out")
    return out


def _cmd_budgets(args: argparse.Namespace) -> int:
    from edgegcl.cli.setup import choose_threads, setup

    thetas = _thetas(args.thetas)
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {args.repeats}")
    out = _out_dir(args)
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:  # checked before minutes of measuring
        raise UsageError("edgegcl bench budgets draws budgets.png with matplotlib: pip install "
                         "matplotlib (or the plot extra)")
    with ExitStack() as hold:
        s = setup(args, hold)
        from edgegcl.budget.bench import measure_budgets, progress_line, write_budgets
        from edgegcl.budget.profiler import pick_threads

        assert s.data is not None
        threads = choose_threads(s)
        if threads.picker is not None and not threads.picker.done:
            pick_threads(s.data, s.cfg, s.device, threads.picker)
            print(f"edgegcl: {threads.line()}", file=sys.stderr)
        total = args.repeats * len(set(thetas)) * 2
        print(f"edgegcl: measuring {len(set(thetas))} theta_max values x 2 logits paths x "
              f"{args.repeats} repeats on {s.data.name} ({s.data.num_nodes} nodes) on {s.device}",
              file=sys.stderr)
        table = measure_budgets(s.data, s.cfg, s.device, thetas, args.repeats,
                                progress_line(total, "budgets"))
        out.mkdir(exist_ok=True)
        paths = write_budgets(table, out)
    print(Path(paths[0]).read_text(), end="")
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0
