"""Data-parallel scaling under torchrun (issue 14): seed nodes per second and memory per rank.

For each process count N, ``torchrun --nproc-per-node N`` runs this module's worker: gloo on
the CPU, each rank with cores / N threads, training the 100k-node synthetic graph (128
features, average degree ~10) in mini-batches of B seeds per rank through the engine
(``Trainer`` with a ``World``: DDP, sharded seeds, HANS all-reduced). After warm-up steps, K
steps are timed on every rank; throughput = N x B x K / the slowest rank's time. Scaling
efficiency at N = throughput(N) / (N x throughput(1)). Memory: each rank's RSS and PSS
(proportional set size: shared pages divided among the processes mapping them) after the
timed steps, with the graph shared per machine (``share_graph``) or, with ``--no-share``, one
copy per rank.

    python -m bench.dist_scaling --procs 1,2 --steps 10
    python -m bench.dist_scaling --procs 1,2,4,8 --steps 10 --out DIR   # a 16-core machine
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from bench import harness

import torch

HERE = Path(__file__).resolve().parent


def worker(args: argparse.Namespace) -> None:
    from edgegcl.training.config import TrainConfig
    from edgegcl.data import SyntheticSpec, synthetic_graph
    from edgegcl.training import distributed
    from edgegcl.training.engine import Trainer
    from edgegcl.training.engine import batch_inputs
    from edgegcl.training.placement import structure_loader

    world = distributed.start("gloo", "cpu", 600.0, args.negatives)
    spec = SyntheticSpec(num_nodes=args.nodes, num_features=128, num_classes=10)
    if args.share:
        data = distributed.share_graph(synthetic_graph(spec) if world.local_rank == 0 else None,
                                       world)
    else:
        data = synthetic_graph(spec)
    cfg = TrainConfig(encoder="gcn", mode="minibatch", batch_size=args.batch_size, fanout="10,10",
                      sampler="builtin", theta_max=args.theta_max)
    trainer = Trainer(cfg, 128, mode="minibatch", seed=0, world=world)
    loader = iter(structure_loader(data, cfg.run, 0, (world.rank, world.size)))
    times = []
    for i in range(args.warmup + args.steps):
        batch = next(loader)
        edges, hops, rows = batch_inputs(batch, world.device)
        world.barrier()  # every rank starts the step together: the slowest one sets the pace
        t0 = time.perf_counter()
        trainer.train_step(data.x, edges, hops, rows, step=i + 1)
        world.barrier()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    mem = psutil.Process().memory_full_info()
    got = world.gather({"step_s": times, "rss": mem.rss, "pss": getattr(mem, "pss", mem.rss),
                        "threads": torch.get_num_threads()})
    if world.is_main:
        Path(args.result).write_text(json.dumps(got))
    distributed.stop()


def run(n: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "r.json"
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, args.cores // n)),
               "PYTHONWARNINGS": "ignore"}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n),
               "--master-port", str(29500 + n), "-m", "bench.dist_scaling", "--worker",
               "--result", str(result), "--nodes", str(args.nodes),
               "--batch-size", str(args.batch_size), "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--negatives", args.negatives,
               "--theta-max", str(args.theta_max)] + ([] if args.share else ["--no-share"])
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, env=env, cwd=HERE.parent, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
        ranks = json.loads(result.read_text())
    # every rank timed the same barrier-to-barrier steps: their median is the world's step
    step_s = statistics.median(max(r["step_s"][k] for r in ranks) for k in range(args.steps))
    return {"procs": n, "threads_per_proc": ranks[0]["threads"], "step_s": step_s,
            "seeds_per_s": n * args.batch_size / step_s,
            "rss_mib": [r["rss"] / 2**20 for r in ranks],
            "pss_mib": [r["pss"] / 2**20 for r in ranks],
            "wall_s": time.perf_counter() - t0}


def main() -> None:
    p = harness.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--procs", default="1,2")
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--batch-size", type=int, default=1024, help="seed nodes per rank and step")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--negatives", default="local")
    p.add_argument("--theta-max", type=float, default=1.0)
    p.add_argument("--cores", type=int, default=psutil.cpu_count(logical=True) or 1)
    p.add_argument("--no-share", dest="share", action="store_false")
    p.add_argument("--out", default=str(harness.RESULTS))
    p.add_argument("--name", default="dist-scaling")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return


    res = harness.record("dist_scaling", sys.argv[1:])
    load0 = os.getloadavg()
    rows = []
    for n in (int(v) for v in args.procs.split(",")):
        rows.append(run(n, args))
        print(json.dumps(rows[-1]), flush=True)
    base = rows[0]["seeds_per_s"] / rows[0]["procs"]
    lines = [
        "# Data-parallel scaling under torchrun (gloo, CPU)", "",
        *harness.header({**res, "wall_min": harness.wall_min(res)},
                        note=f"load average {load0[0]:.1f} at the start, "
                             f"{os.getloadavg()[0]:.1f} at the end"),
        f"Synthetic graph of {args.nodes} nodes (128 features, average degree ~10), "
        f"{args.batch_size} seed nodes per rank and step, fanout 10,10, built-in sampler, "
        f"theta_max {args.theta_max:g} ({args.negatives} negatives), each rank with cores / N "
        f"threads; the graph {'shared per machine (share_graph)' if args.share else 'copied per rank'}. "
        f"Step = median over {args.steps} timed steps (after {args.warmup}) of the slowest "
        "rank's barrier-to-barrier time. Efficiency = throughput(N) / (N x throughput(1) "
        "per process). RSS counts shared pages in full in every process; PSS divides them "
        "among the processes that map them.", "",
        "| processes | threads each | step s | seed nodes / s | efficiency | RSS per rank MiB "
        "(max) | PSS per rank MiB (max) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        eff = r["seeds_per_s"] / (r["procs"] * base)
        lines.append(f"| {r['procs']} | {r['threads_per_proc']} | {r['step_s']:.3f} | "
                     f"{r['seeds_per_s']:.0f} | {eff:.2f} | {max(r['rss_mib']):.0f} | "
                     f"{max(r['pss_mib']):.0f} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    harness.save(out / f"{args.name}.md", "\n".join(lines) + "\n")
    harness.save(out / f"{args.name}.json", json.dumps(rows, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
