"""Does a default run reach the theta_max it is given? ``edgegcl train`` as a user runs it.

Runs ``edgegcl train --dataset DATASET --theta-max THETA`` with no other flag (the dataset's
tuned defaults), then reads ``seed-0/epochs.csv``: the share of the epochs whose active
negatives per anchor are at least 90 % of the budget (theta_max x |N_i|), the epoch from which
the budget is in use, and the gate's decisions from ``hans_events.jsonl`` (the goal: at
least half the epochs at 90 % of a 300-epoch Cora run's budget of 0.5).

    python -m bench.reach --root ../shared/datasets --dataset Cora --theta-max 0.5
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import sys
import time
from pathlib import Path

from bench import harness

HERE = Path(__file__).resolve().parent


def main() -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--root", required=True)
    p.add_argument("--dataset", default="Cora")
    p.add_argument("--theta-max", default="0.5")
    p.add_argument("--flags", default="", help="more edgegcl train flags, e.g. '--scheduler "
                   "hans' (the result file's name then says so)")
    p.add_argument("--name", default=None, help="result file name (default: reach-DATASET)")
    args = p.parse_args()

    from edgegcl.contrast.negatives import num_candidates

    res = harness.record("reach", sys.argv[1:], root=args.root)
    out = HERE / "runs" / f"reach-{args.dataset}-{time.strftime('%Y%m%d-%H%M%S')}"
    run = harness.train(["--dataset", args.dataset, "--root", args.root, "--theta-max",
                         args.theta_max, *shlex.split(args.flags)], out, root=args.root)
    res["wall_min"] = harness.wall_min(res)
    rows = list(csv.DictReader((out / "seed-0" / "epochs.csv").open(newline="")))
    events = [json.loads(line) for line in (out / "seed-0" / "hans_events.jsonl").open()]
    nodes = run.metrics.get("num_nodes")
    theta = float(args.theta_max)
    budget = theta * num_candidates(nodes) if nodes else None
    at_90 = [r for r in rows if budget and float(r["active_per_anchor"]) >= 0.9 * budget]
    decisions = sorted({e["epoch"] for e in events
                        if e["reason"].startswith(("gate", "deadline"))})
    closed = [e for e in events if e["reason"].startswith("gate closed")]
    pace = next((line for line in run.stderr.splitlines() if "in use from epoch" in line
                 or "theta_max" in line), "")
    lines = [f"# Does a default run reach its theta_max? ({args.dataset}, theta_max {theta:g})",
             "", *harness.header(res, note=""), f"which ran `{run.command}`.", "",
             (__doc__ or "").split("\n\n")[1].replace("\n", " "), "",
             f"- epochs: {len(rows)}; budget theta_max x |N_i| = {budget:.0f} negatives per "
             f"anchor ({nodes} nodes, 2B - 2 candidates)" if budget else "- budget unknown",
             f"- epochs with at least 90 % of it active: {len(at_90)} of {len(rows)} "
             f"(**{len(at_90) / len(rows):.0%}**; the goal is at least 50 %)",
             f"- first such row: epoch {at_90[0]['epoch'] if at_90 else 'none'} (a row holds the "
             "state after its epoch's end-of-epoch decision, which the next epoch trains with)",
             f"- the run's pace line: `{pace.removeprefix('edgegcl: ')}`",
             f"- decisions (epochs {', '.join(map(str, decisions))}): {len(decisions)}, of "
             f"which the gate closed {len(closed)}: "
             + "; ".join(f"epoch {e['epoch']} {e['reason']}" for e in closed), ""]
    text = "\n".join(lines)
    harness.save(harness.RESULTS / f"{args.name or 'reach-' + args.dataset.lower()}.md", text)
    print(text)


if __name__ == "__main__":
    main()
