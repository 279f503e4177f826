"""Memory and time of mini-batch training as the graph grows (issue 3).

For synthetic graphs of 10k, 100k and 1M nodes (average degree ~10, 128 features), each size
in its own process: peak RSS above the process's RSS once the graph is loaded (psutil, sampled
every 2 ms) and the time per batch (median over the timed batches, after warm-up), scaled to
an epoch of ceil(N / B) batches; full-graph mode on the sizes whose estimated need fits.

    python -m bench.scaling --batches 30
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from itertools import islice
from pathlib import Path

import psutil
from bench import harness

import torch

from edgegcl.memory import reuse_freed_memory

HERE = Path(__file__).resolve().parent


def measure(nodes: int, mode: str, batch_size: int, batches: int, device: torch.device) -> dict:
    """One size, one mode, in this process (called in a fresh subprocess by ``main``).

    CPU: peak RSS above the process's RSS with the graph loaded, plus the live-tensor peak of
    one more step; CUDA: the allocator's peak above the tensors allocated with the graph on
    the device (which is what live tensors are there).
    """
    from edgegcl.nn.augment import as_features
    from edgegcl.training.config import TrainConfig
    from edgegcl.data import SyntheticSpec, synthetic_graph
    from edgegcl.contrast.scheduler import CATEGORIES
    from edgegcl.memory import PeakMemory
    from edgegcl.training.engine import Trainer
    from edgegcl.training.engine import batch_inputs
    from edgegcl.training.placement import structure_loader

    def held() -> int:
        return (torch.cuda.memory_allocated(device) if device.type == "cuda"
                else psutil.Process().memory_info().rss)

    start = held()
    data = synthetic_graph(SyntheticSpec(num_nodes=nodes, num_classes=10, num_features=128,
                                         avg_degree=10.0, seed=0))
    x = data.x.to(device)
    cfg = TrainConfig(encoder="gcn", batch_size=batch_size)
    trainer = Trainer(cfg, 128, mode=mode, device=device, seed=0)
    trainer.scheduler.eta = {c: 1.0 for c in CATEGORIES}  # worst case: every negative active
    if mode == "full":
        steps = [(as_features(x), data.edge_index.to(device), None, None)] * 2
    else:  # the sampler's CSR index is built here, so it counts as graph storage
        loader = structure_loader(data, replace(cfg, sampler="builtin").run, seed=0)
        steps = ((x, *batch_inputs(b, device)) for b in islice(loader, batches + 3))
    graph_bytes = held() - start  # graph, sampler index, model
    times, sampled = [], []
    with PeakMemory(device) as peak:
        for i, (x, ei, hops, rows) in enumerate(steps):
            sampled.append(x.size(0) if rows is None else rows.numel())
            t0 = time.perf_counter()
            trainer.train_step(x, ei, hops, rows, step=i + 1)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if i >= (1 if mode == "full" else 3):
                times.append(time.perf_counter() - t0)
    live = None
    if mode == "minibatch" and device.type == "cpu":
        x, ei, hops, rows = data.x, *batch_inputs(next(iter(loader)), device)

        def step() -> None:
            trainer.train_step(x, ei, hops, rows, step=1)

        live = live_tensor_peak(step) / 2**20
    per_step = statistics.median(times)
    epoch = per_step * (1 if mode == "full" else math.ceil(nodes / batch_size))
    return {"nodes": nodes, "mode": mode, "sampled_nodes": statistics.fmean(sampled),
            "graph_MiB": graph_bytes / 2**20,
            "peak_above_graph_MiB": peak.peak_bytes / 2**20, "live_tensors_MiB": live,
            "step_s": per_step, "epoch_s": epoch, "steps_timed": len(times)}


def live_tensor_peak(step: Callable[[], None]) -> int:
    """Peak bytes of the tensors alive at once during ``step()`` (sampling excluded).

    From the torch profiler's memory timeline (``torch.profiler._memory_profiler``, a
    private API): what the step's tensors need, without the pages the C allocator keeps
    resident after a free, which RSS counts. Tensors that exist before the step (graph,
    weights, optimiser state) are left out.
    """
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import Action

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 with_stack=True) as prof:
        step()
    live: dict = {}
    now = peak = 0
    for _, action, (key, _version), size in prof._memory_profile().timeline:
        if action == Action.CREATE:
            live[key] = size
            now += size
        elif action == Action.DESTROY:
            now -= live.pop(key, 0)
        peak = max(peak, now)
    return peak


def main() -> None:
    p = harness.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=30)
    p.add_argument("--full-up-to", type=int, default=10000, help="largest size run full-graph")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (allocator peak, not RSS)")
    p.add_argument("--out", default=str(harness.RESULTS / "scaling.md"), help="report file")
    p.add_argument("--child", nargs=2, metavar=("NODES", "MODE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    reuse_freed_memory()  # as edgegcl train does
    if args.child:
        print(json.dumps(measure(int(args.child[0]), args.child[1], args.batch_size, args.batches,
                                 torch.device(args.device))))
        return
    res = harness.record("scaling", sys.argv[1:])
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        for mode in ("minibatch", "full") if n <= args.full_up_to else ("minibatch",):
            cmd = [sys.executable, "-m", "bench.scaling", "--child", str(n), mode,
                   "--batch-size", str(args.batch_size), "--batches", str(args.batches),
                   "--device", args.device]
            row = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True
                                            ).stdout.strip().splitlines()[-1])
            print(row, flush=True)
            rows.append(row)
    mb = [r for r in rows if r["mode"] == "minibatch"]
    flat = max(r["peak_above_graph_MiB"] for r in mb) / min(r["peak_above_graph_MiB"] for r in mb)
    cuda = args.device.startswith("cuda")
    peak_name = "peak allocated" if cuda else "peak RSS"
    if cuda:
        memory_text = ("'graph MiB' is the CUDA memory allocated by the graph's features and the "
                       "model; the peak is torch.cuda.max_memory_allocated above that: the "
                       "tensors alive at once, exactly.")
        flat_text = ""
    else:
        memory_text = ("'graph MiB' is the RSS growth from building the graph, the sampler's CSR "
                       "index and the model; peak RSS is above that. 'live tensors' is the peak "
                       "of the tensors alive at once in one more mini-batch step, from the torch "
                       "profiler's memory timeline: what the step itself needs, without the heap "
                       "pages glibc keeps resident after a free (which the RSS peak includes).")
        flat_live = (max(r["live_tensors_MiB"] for r in mb)
                     / min(r["live_tensors_MiB"] for r in mb))
        flat_text = f"; live tensors: {flat_live:.2f}"
    lines = [
        "# Mini-batch scaling", "",
        *harness.header({**res, "wall_min": harness.wall_min(res)}),
        "Synthetic planted-class graphs (average degree ~10, 128 features), default model sizes, "
        "HANS held saturated (every negative active, the most a run uses), fanout 10,10, "
        f"built-in sampler. {memory_text} Epoch time is the median step time x ceil(N / B) "
        "steps (mini-batch) or one step (full). 'sampled nodes' is the mean size of a batch's "
        "subgraph: B seeds and their sampled 2-hop neighbourhood, which a small graph caps.", "",
        f"| nodes | mode | sampled nodes | graph MiB | {peak_name} above graph MiB | "
        "live tensors MiB | s / step | s / epoch |",
        "|---|---|---|---|---|---|---|---|",
        *(f"| {r['nodes']} | {r['mode']} | {r['sampled_nodes']:.0f} | {r['graph_MiB']:.0f} | "
          f"{r['peak_above_graph_MiB']:.0f} | "
          f"{'' if r['live_tensors_MiB'] is None else round(r['live_tensors_MiB'])} | "
          f"{r['step_s']:.3f} | {r['epoch_s']:.1f} |" for r in rows), "",
        f"Mini-batch {peak_name} above the graph, largest / smallest size: {flat:.2f} "
        f"(target: within 1.25){flat_text}.", ""]
    harness.save(Path(args.out), "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
