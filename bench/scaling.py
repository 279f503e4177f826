"""Memory and time of mini-batch training as the graph grows.

For synthetic graphs of 10k, 100k and 1M nodes (average degree ~10, 128 features; power-law
degrees with ``--degree-exponent``), each size in its own process: peak RSS above the
process's RSS once the graph is loaded (psutil, sampled every 2 ms) and the time per batch
(median over the timed batches, after warm-up), scaled to an epoch of ceil(N / B) batches;
the sampler's own time per batch (its loader iterated alone), ours and PyG's NeighborLoader's
where pyg-lib or torch-sparse is installed; full-graph mode on the sizes whose estimated need
fits. The memory bound: from the smallest to the largest size, the whole process's peak grows
at most 1.5x as much as the graph's storage (features and edge_index).

    python -m bench.scaling --batches 30
    python -m bench.scaling --sizes 100000,1000000 --avg-degree 20 --degree-exponent 2.5 \
        --out bench/results/scaling-power-law.md
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from itertools import islice
from pathlib import Path

import psutil
from bench import harness

import torch

from edgegcl.memory import release_cpu_memory, reuse_freed_memory

HERE = Path(__file__).resolve().parent


def measure(nodes: int, mode: str, batch_size: int, batches: int, device: torch.device,
            shape: dict) -> dict:
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
                                         seed=0, **shape))
    storage = data.x.numel() * data.x.element_size() + data.edge_index.numel() * 8
    degree = torch.bincount(data.edge_index[0], minlength=nodes)
    x = data.x.to(device)
    cfg = TrainConfig(encoder="gcn", batch_size=batch_size)
    trainer = Trainer(cfg, 128, mode=mode, device=device, seed=0)
    trainer.scheduler.eta = {c: 1.0 for c in CATEGORIES}  # worst case: every negative active
    if mode == "full":
        steps = [(as_features(x), data.edge_index.to(device), None, None)] * 2
    else:  # the sampler's CSR index is built here, so it counts as graph storage
        loader = structure_loader(data, replace(cfg, sampler="builtin").run, seed=0)
        steps = ((x, *batch_inputs(b, device)) for b in islice(loader, batches + 3))
    if device.type == "cpu":  # the generator's and the index build's freed scratch returned
        release_cpu_memory()
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
    sampler = {}
    if mode == "minibatch":
        from edgegcl.data.sampling import pyg_sampler_available

        for name in ("builtin", "pyg") if pyg_sampler_available() else ("builtin",):
            sampler[name] = sampler_seconds(structure_loader(
                data, replace(cfg, sampler=name).run, seed=1), batches)
    return {"nodes": nodes, "mode": mode, "sampled_nodes": statistics.fmean(sampled),
            "edges": int(data.edge_index.size(1)), "max_degree": int(degree.max()),
            "storage_MiB": storage / 2**20, "sampler_s": sampler,
            "setup_peak_MiB": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
                               - start) / 2**20 if device.type == "cpu" else None,
            "graph_MiB": graph_bytes / 2**20,
            "peak_above_graph_MiB": peak.peak_bytes / 2**20, "live_tensors_MiB": live,
            "step_s": per_step, "epoch_s": epoch, "steps_timed": len(times)}


def sampler_seconds(loader: Iterable, batches: int) -> float:
    """Median seconds per batch of ``loader`` iterated alone (after 3 warm-up batches)."""
    times, it = [], iter(loader)
    for i in range(batches + 3):
        t0 = time.perf_counter()
        next(it)
        if i >= 3:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


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
    p.add_argument("--avg-degree", type=float, default=10.0)
    p.add_argument("--degree-exponent", type=float, default=0.0,
                   help="power-law degrees with this exponent (0: near-uniform)")
    p.add_argument("--max-degree", type=int, default=0, help="the hubs' degree (0: natural)")
    p.add_argument("--out", default=str(harness.RESULTS / "scaling.md"), help="report file")
    p.add_argument("--child", nargs=2, metavar=("NODES", "MODE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    reuse_freed_memory()  # as edgegcl train does
    shape = {"avg_degree": args.avg_degree, "degree_exponent": args.degree_exponent,
             "max_degree": args.max_degree}
    if args.child:
        print(json.dumps(measure(int(args.child[0]), args.child[1], args.batch_size, args.batches,
                                 torch.device(args.device), shape)))
        return
    res = harness.record("scaling", sys.argv[1:])
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        for mode in ("minibatch", "full") if n <= args.full_up_to else ("minibatch",):
            cmd = [sys.executable, "-m", "bench.scaling", "--child", str(n), mode,
                   "--batch-size", str(args.batch_size), "--batches", str(args.batches),
                   "--device", args.device, "--avg-degree", str(args.avg_degree),
                   "--degree-exponent", str(args.degree_exponent),
                   "--max-degree", str(args.max_degree)]
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
                       "index and the model (their freed scratch returned first); peak RSS is "
                       "above that; 'setup peak' is the process's highest RSS while the graph and "
                       "the index were built (the generator's scratch). 'live tensors' is the peak "
                       "of the tensors alive at once in one more mini-batch step, from the torch "
                       "profiler's memory timeline: what the step itself needs, without the heap "
                       "pages glibc keeps resident after a free (which the RSS peak includes).")
        flat_live = (max(r["live_tensors_MiB"] for r in mb)
                     / min(r["live_tensors_MiB"] for r in mb))
        flat_text = f"; live tensors: {flat_live:.2f}"
    small, large = min(mb, key=lambda r: r["nodes"]), max(mb, key=lambda r: r["nodes"])
    growth = ((large["graph_MiB"] + large["peak_above_graph_MiB"]
               - small["graph_MiB"] - small["peak_above_graph_MiB"])
              / max(large["storage_MiB"] - small["storage_MiB"], 1e-9))
    shape = (f"power-law degrees (exponent {args.degree_exponent:g}, hubs "
             f"{'at the natural cutoff' if not args.max_degree else args.max_degree})"
             if args.degree_exponent else "near-uniform degrees")
    pyg = any("pyg" in r["sampler_s"] for r in mb)
    lines = [
        "# Mini-batch scaling", "",
        *harness.header({**res, "wall_min": harness.wall_min(res)}),
        f"Synthetic planted-class graphs (average degree {args.avg_degree:g}, {shape}, 128 "
        "features), default model sizes, HANS held saturated (every negative active, the most a "
        f"run uses), fanout 10,10, built-in sampler. {memory_text} 'storage MiB' is the graph's "
        "features and edge_index. Epoch time is the median step time x ceil(N / B) steps "
        "(mini-batch) or one step (full). 'sampled nodes' is the mean size of a batch's "
        "subgraph: B seeds and their sampled 2-hop neighbourhood, which a small graph caps. "
        "'sampler ms' is the loader iterated alone, per batch"
        + ("; PyG's NeighborLoader beside it." if pyg else
           " (PyG's NeighborLoader needs pyg-lib or torch-sparse, not installed here)."), "",
        f"| nodes | edges | max degree | mode | sampled nodes | storage MiB | graph MiB | "
        f"{peak_name} above graph MiB | setup peak MiB | live tensors MiB | sampler ms (ours"
        f"{' / PyG' if pyg else ''}) | s / step | s / epoch |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(f"| {r['nodes']} | {r['edges']} | {r['max_degree']} | {r['mode']} | "
          f"{r['sampled_nodes']:.0f} | {r['storage_MiB']:.0f} | {r['graph_MiB']:.0f} | "
          f"{r['peak_above_graph_MiB']:.0f} | "
          f"{'' if r.get('setup_peak_MiB') is None else round(r['setup_peak_MiB'])} | "
          f"{'' if r['live_tensors_MiB'] is None else round(r['live_tensors_MiB'])} | "
          f"{' / '.join(f'{1000 * v:.1f}' for v in r['sampler_s'].values())} | "
          f"{r['step_s']:.3f} | {r['epoch_s']:.1f} |" for r in rows), "",
        f"Mini-batch {peak_name} above the graph, largest / smallest size: {flat:.2f} "
        f"(target: within 1.25){flat_text}.",
        *([] if small is large else [
            f"The whole process's peak (graph + above it) grew {growth:.2f}x the storage's "
            f"growth from {small['nodes']} to {large['nodes']} nodes (bound: 1.5x): "
            f"**{'held' if growth <= 1.5 else 'missed'}**."]), ""]
    harness.save(Path(args.out), "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
