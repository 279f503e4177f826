"""Whole-run peak memory as the graph grows: generate, one mini-batch epoch, final evaluation.

For planted synthetic graphs (10 classes, 128 features, average degree 10), each size in its
own fresh process: the process's peak RSS (VmHWM, the kernel's exact high-water mark) while
the graph is generated, then, after resetting the mark, while ``edgegcl.train_seeds`` trains
one epoch in mini-batches (``--encoder``: the default run's ``auto`` unless named) (B = 1024, fanout 10,10, built-in sampler) and evaluates the task
(``--task node``: the labels' probe; ``--task link``: the edge split, every link scorer,
the raw features and Adamic-Adar). The run must at least hold x (N x 128 float32), edge_index (2 x E int64) and the
embeddings (N x 256 float32); the report compares the growth of the peak from the smallest
to the largest size with the growth of that.

    python -m bench.run_memory [--sizes 10000,100000,1000000] [--task link] [--encoder gcn]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import harness

HERE = Path(__file__).resolve().parent


def _status_mib(field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak since start or the last reset) from /proc/self/status."""
    with open("/proc/self/status") as fh:
        kib = next(int(line.split()[1]) for line in fh if line.startswith(field + ":"))
    return kib / 1024


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: ``5`` into clear_refs); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def child(nodes: int, task: str = "node", encoder: str = "gcn") -> dict:
    """One size in this process: generation peak, then the run's peak, in MiB."""
    import torch

    from edgegcl.training.config import TrainConfig
    from edgegcl.data import SyntheticSpec, synthetic_graph
    from edgegcl import train_seeds

    started = _status_mib("VmRSS")
    t0 = time.perf_counter()
    data = synthetic_graph(SyntheticSpec(num_nodes=nodes, num_classes=10, num_features=128,
                                         avg_degree=10.0, seed=0))
    generate_s = time.perf_counter() - t0
    generate_peak = _status_mib("VmHWM")
    after_graph = _status_mib("VmRSS")
    reset = _reset_peak()
    cfg = TrainConfig(encoder=encoder, epochs=1, mode="minibatch", batch_size=1024, fanout="10,10",
                      sampler="builtin", eval_every=1, device="cpu", seeds=1, task=task)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        metrics = train_seeds(cfg, data, Path(tmp), torch.device("cpu"))
        run_s = time.perf_counter() - t0
    run_peak = _status_mib("VmHWM")
    seed = metrics["seeds"][0]
    held = (data.x.numel() * 4 + data.edge_index.numel() * 8 + nodes * cfg.model.out_dim * 4) / 2**20
    return {"nodes": nodes, "edges": int(data.edge_index.size(1)), "held_MiB": held,
            "start_MiB": started, "graph_MiB": after_graph, "generate_peak_MiB": generate_peak,
            "run_peak_MiB": run_peak if reset else None,
            "peak_MiB": max(generate_peak, run_peak), "generate_s": generate_s,
            "epoch_s": seed["train_time_s"], "run_s": run_s,
            "eval_s": run_s - seed["train_time_s"], "metric": metrics["summary"]["metric"],
            "test": seed[f"test_{metrics['summary']['metric']}"],
            "checkpoint_probe": seed.get("checkpoint_probe"),
            "encoder": seed.get("encoder", encoder), "choice": seed.get("encoder_choice")}


def _sizes(text: str) -> list[int]:
    """``--sizes``: node counts, each 100..10^8 (argparse says what is wrong in one line)."""
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated integers: {text[:40]!r}") from None
    if not sizes or not all(100 <= n <= 10**8 for n in sizes):
        raise argparse.ArgumentTypeError("each size must be in 100..100000000")
    return sizes


def main() -> None:
    p = harness.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000,100000,1000000", type=_sizes,
                   help="comma-separated node counts, each 100..100000000")
    p.add_argument("--task", choices=("node", "link"), default="node",
                   help="what the run evaluates (edgegcl train --task)")
    p.add_argument("--encoder", choices=("auto", "gcn", "ego", "poly"), default="auto",
                   help="the encoder (edgegcl train --encoder; auto, the default run's choice: "
                   "a search, or the GCN at once on a clearly homophilous graph)")
    p.add_argument("--out", default=None,
                   help="report file (default: bench/results/run-memory[-link].md)")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        from edgegcl.memory import reuse_freed_memory

        reuse_freed_memory()  # as edgegcl train does
        print(json.dumps(child(args.child, args.task, args.encoder)))
        return
    out = Path(args.out or harness.RESULTS / ("run-memory.md" if args.task == "node"
                                              else f"run-memory-{args.task}.md"))

    res_ = harness.record("run_memory", sys.argv[1:])
    rows = []
    for n in args.sizes:
        cmd = [sys.executable, "-m", "bench.run_memory", "--child", str(n), "--task", args.task,
               "--encoder", args.encoder]
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True
                                        ).stdout.strip().splitlines()[-1])
        print(res, flush=True)
        rows.append(res)
    small, large = rows[0], rows[-1]
    peak_growth = large["peak_MiB"] - small["peak_MiB"]
    held_growth = large["held_MiB"] - small["held_MiB"]
    ratio = peak_growth / held_growth
    lines = [
        "# Whole-run peak memory", "", *harness.header({**res_, "wall_min": harness.wall_min(res_)}),
        "Each size in a fresh process: `edgegcl.data.synthetic_graph` (10 classes, 128 features, "
        "average degree 10, seed 0), then `edgegcl.train_seeds` with one epoch in mini-batches "
        "(B = 1024, fanout 10,10, built-in sampler, default model: hidden 512, embeddings 256, "
        f"--encoder {args.encoder}, --task {args.task}) and its evaluation "
        + ("with the labels (the probe after the epoch and, where the checkpoint probe used a "
           "labelled sample, the final probe on the full split). " if args.task == "node" else
           "of the links (the 85 / 5 / 10 edge split made before training, the validation "
           "pairs scored after the epoch, then the test pairs by every scorer, the raw "
           "features and Adamic-Adar). ") +
        "'must hold' is x (N x 128 float32) + edge_index (2 x E int64) + the embeddings "
        "(N x 256 float32). Peaks are VmHWM from /proc/self/status: 'generate' while the graph "
        "is built, 'run' after resetting the mark (clear_refs) for training and evaluation; "
        "'process peak' is the larger. 'eval s' is the run's wall time less its training steps "
        "(probes, final evaluation, checkpoint writing).", "",
        "| nodes | edges | must hold MiB | RSS at start MiB | RSS with graph MiB | generate peak MiB "
        "| run peak MiB | process peak MiB | generate s | epoch s | eval s | test "
        f"{rows[0]['metric']} |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(f"| {r['nodes']} | {r['edges']} | {r['held_MiB']:.0f} | {r['start_MiB']:.0f} | "
          f"{r['graph_MiB']:.0f} | {r['generate_peak_MiB']:.0f} | "
          f"{'' if r['run_peak_MiB'] is None else round(r['run_peak_MiB'])} | "
          f"{r['peak_MiB']:.0f} | {r['generate_s']:.1f} | {r['epoch_s']:.1f} | "
          f"{r['eval_s']:.1f} | {r['test']:.2f} |" for r in rows), "",
        f"From {small['nodes']} to {large['nodes']} nodes the process peak grew by "
        f"{peak_growth:.0f} MiB and what the run must hold by {held_growth:.0f} MiB: "
        f"ratio {ratio:.2f} (target: at most 1.5).", "",
        "Checkpoint probes (labelled nodes per probe): " + "; ".join(
            f"{r['nodes']}: {json.dumps(r['checkpoint_probe'])}" for r in rows), "",
        "Encoder trained: " + "; ".join(
            f"{r['nodes']}: {r['encoder']}" + (f" (chosen by {r['choice']['by']})"
                                               if r.get("choice") else "") for r in rows), ""]
    harness.save(out, "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
