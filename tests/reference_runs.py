"""Small fixed-seed runs of ``edgegcl train`` with the built-in GCN, recorded for comparison.

``tests/fixtures/reference-runs.json`` holds what these runs produced on the machine that
recorded them (its ``platform`` key says which, for information only): final and chosen
weights, HANS events, epochs.csv and metrics (timings left out). ``tests/test_reference.py``
runs them again and compares what the maths fixes on any CPU (the schedule exactly, floats
within a rounding bound, F1 within a node), never the recorded bits.
Regenerate (only on purpose, when a change is meant to alter the numbers), every run or the
runs named (the others kept as recorded; a re-recorded run notes its own platform)::

    OMP_NUM_THREADS=1 python tests/reference_runs.py tests/fixtures/reference-runs.json [NAME ...]
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import torch

COMMON = ["--nodes", "200", "--features", "16", "--hidden-dim", "16", "--out-dim", "8",
          "--proj-dim", "8", "--epochs", "16", "--eval-every", "4", "--T-init", "2",
          "--T-int", "3", "--theta-max", "0.6", "--device", "cpu",
          "--sampler", "builtin", "--protocol", "both", "--encoder", "gcn"]
RUNS = {
    "full-random": ["--mode", "full", "--seeds", "2"],
    "minibatch-hans": ["--mode", "minibatch", "--batch-size", "64", "--fanout", "4,4",
                       "--scheduler", "hans", "--e", "1", "--b", "0.5", "--pace", "fixed",
                       "--pick", "hardest"],  # the default when it was recorded
    "full-hans-sampled": ["--mode", "full", "--scheduler", "hans", "--e", "1", "--pick", "random",
                          "--stratify", "sampled", "--stratify-sample", "16", "--logits",
                          "pairs", "--gate", "any", "--category-loss", "sum", "--fixed-half",
                          "run", "--candidates", "inter"],
}
TIMINGS = {"epoch_time_s", "train_time_s", "final_epoch_time_s", "peak_memory_bytes"}
CURVE_TIMINGS = {"epoch_s", "peak_memory_bytes"}
NEWER = ("epochs_trained", "encoder", "raw_features", "raw_features_test_micro_f1")
"""Metrics newer than the recordings (a seed's trained epochs: its curve's length says it; the
encoder, recorded by name since, and the raw features' probe beside the embeddings')."""


def platform() -> dict[str, str]:
    """What bitwise equality of float results depends on besides the code."""
    return {"torch": torch.__version__, "cpu": torch.backends.cpu.get_cpu_capability()}


def _weights(state: dict[str, torch.Tensor]) -> dict[str, list[Any]]:
    return {k: v.detach().cpu().float().tolist() for k, v in state.items()}


def record(run_dir: Path) -> dict[str, Any]:
    """A finished run directory as comparable plain values."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    metrics.pop("edgegcl_version")
    metrics.pop("threads", None)  # the machine's (its cores), as timings are
    for part in (*metrics["seeds"], metrics["summary"]):
        for key in (*TIMINGS, *NEWER):
            part.pop(key, None)
    seeds = sorted(p for p in run_dir.glob("seed-*") if p.is_dir())
    out: dict[str, Any] = {"metrics": metrics, "seeds": {}}
    for seed_dir in seeds:
        state = torch.load(seed_dir / "state.pt", weights_only=True)
        chosen = torch.load(seed_dir / "checkpoint.pt", weights_only=True)
        with (seed_dir / "epochs.csv").open() as fh:
            curve = [{k: v for k, v in row.items() if k not in CURVE_TIMINGS}
                     for row in csv.DictReader(fh)]
        out["seeds"][seed_dir.name] = {
            "events": (seed_dir / "hans_events.jsonl").read_text().splitlines(),
            "curve": curve, "final": _weights(state["trainer"]["model"]),
            "chosen": _weights(chosen["encoder"]), "chosen_epoch": chosen["epoch"]}
    return out


def train(name: str, out: Path) -> dict[str, Any]:
    """Run reference ``name`` into ``out`` (in this process, one thread) and record it."""
    from edgegcl.cli.main import main

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["train", *COMMON, *RUNS[name], "--threads", "1", "--out", str(out)])
    finally:
        torch.set_num_threads(before)
    if code != 0:
        raise RuntimeError(f"reference run {name} failed ({code}): {err.getvalue()[-2000:]}")
    return record(out)


if __name__ == "__main__":
    import tempfile

    target, names = Path(sys.argv[1]), sys.argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        runs = {name: train(name, Path(tmp) / name) for name in names or RUNS}
    if names:  # the others as recorded
        kept = json.loads(target.read_text())
        for name in names:
            kept["runs"][name] = {**runs[name], "platform": platform()}
        text = json.dumps(kept)
    else:
        text = json.dumps({"platform": platform(), "runs": runs})
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text + "\n")
    print(f"wrote {target}")
