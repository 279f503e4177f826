"""How long a user's first commands take, against importing torch, measured in the same run.

Times ``python -m edgegcl --version``, ``--help``, ``profiles``, every command's ``--help`` and
a bad value (``train --epochs many``), each in a fresh interpreter as a user starts them, and
``python -c "import torch"`` beside them; the runs are interleaved (one of each per round), so
that load on a shared machine falls on all alike. Reports the median of the rounds and each
command's ratio to ``import torch`` (the goal: each at most 0.3).

    python -m bench.cli_latency [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import harness

HERE = Path(__file__).resolve().parent
GOAL = 0.3
"""The largest ratio to ``import torch`` each command may take."""

COMMANDS = {
    "import torch": [sys.executable, "-c", "import torch"],
    "edgegcl --version": [sys.executable, "-m", "edgegcl", "--version"],
    "edgegcl --help": [sys.executable, "-m", "edgegcl", "--help"],
    "edgegcl profiles": [sys.executable, "-m", "edgegcl", "profiles"],
    "edgegcl train --help": [sys.executable, "-m", "edgegcl", "train", "--help"],
    "edgegcl train --epochs many": [sys.executable, "-m", "edgegcl", "train", "--epochs", "many"],
    "edgegcl profile --help": [sys.executable, "-m", "edgegcl", "profile", "--help"],
    "edgegcl export --help": [sys.executable, "-m", "edgegcl", "export", "--help"],
}


def _seconds(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if proc.returncode not in (0, 2):  # 2: a usage error, which is what some of them time
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")
    return time.perf_counter() - t0


def measure(rounds: int) -> dict[str, list[float]]:
    """Wall-clock seconds of every command, ``rounds`` times, interleaved."""
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for name, cmd in COMMANDS.items():  # one untimed run each: the OS's file cache
        _seconds(cmd)
    for _ in range(rounds):
        for name, cmd in COMMANDS.items():
            times[name].append(_seconds(cmd))
    return times


def report(times: dict[str, list[float]], rounds: int, res: dict) -> str:
    """The markdown result: the machine, the command line, one row per command."""
    torch_s = statistics.median(times["import torch"])
    rows = ["| command | median s | runs (s) | ratio to `import torch` | within 0.3x? |",
            "|---|---|---|---|---|"]
    for name, runs in times.items():
        med = statistics.median(runs)
        ratio = med / torch_s
        verdict = "-" if name == "import torch" else ("yes" if ratio <= GOAL else "NO")
        rows.append(f"| `{name}` | {med:.3f} | {', '.join(f'{t:.3f}' for t in runs)} | "
                    f"{ratio:.2f} | {verdict} |")
    return "\n".join([
        "# The first commands' latency", "", *harness.header(res, note=""),
        "Each command in a fresh interpreter, after one untimed run of each, the rounds "
        "interleaved; a shared machine (other jobs ran beside it).", "",
        *rows, "",
        f"Goal: each edgegcl command at most {GOAL}x the time of `import torch`, median of "
        f"{rounds}. They import neither torch nor PyG (tests/test_cli_startup.py checks it).",
        ""])


def main() -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=str(harness.RESULTS / "cli-latency.md"))
    args = p.parse_args()

    res = harness.record("cli_latency", sys.argv[1:])
    times = measure(args.rounds)
    res["wall_min"] = harness.wall_min(res)
    text = report(times, args.rounds, res)
    harness.save(Path(args.out), text)
    print(text)


if __name__ == "__main__":
    main()
