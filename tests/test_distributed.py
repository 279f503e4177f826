"""Data-parallel training under torch.distributed: two gloo ranks spawned on the CPU.

One spawn runs every check (process start-up is the cost): global negatives equal one process
with the world's batch (loss and gradients, with both views' candidates or the other view's
only), the HANS schedule is the same on every rank, and rank 0 alone writes the run directory.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from multiprocessing.connection import Connection
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from torch_geometric.data import Data

from edgegcl.training.config import TrainConfig
from edgegcl.data.sampling import ShardedIndices
from edgegcl.data.synthetic import SyntheticSpec, synthetic_graph
from edgegcl.training.engine import Trainer
from edgegcl.training.placement import structure_loader

B, DIM = 24, 12
SETTINGS = [(s, c) for c in ("both", "inter") for s in ("none", "hans")]
"""(scheduler, candidates) of the global-negatives steps."""
SMALL = dict(encoder="gcn", hidden_dim=16, out_dim=8, proj_dim=8, p_edge_1=0.0, p_edge_2=0.0,
             p_feature_1=0.0, p_feature_2=0.0, logits="dense")


def _features() -> torch.Tensor:
    return torch.randn(2 * B, DIM, generator=torch.Generator().manual_seed(3))


def _loss_and_grads(trainer: Trainer, x: torch.Tensor) -> tuple[float, dict[str, torch.Tensor]]:
    """One step's loss and gradients on a graph without edges (each anchor's embedding is its
    own features', whichever rank computes it) and identity views."""
    no_edges = torch.empty(2, 0, dtype=torch.long)
    out = trainer.contrast(*trainer.project(x, no_edges), step=1)
    out.loss.backward()
    return out.loss.item(), {n: p.grad.clone() for n, p in trainer.model.named_parameters()}


def _worker(rank: int, port: int, tmp: str, run_port: int, conn: Connection) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(run_port))
    torch.set_num_threads(1)
    from edgegcl.training import distributed
    from edgegcl import train_seeds

    out: dict[str, object] = {}
    cfg = TrainConfig(encoder="gcn", nodes=400, features=DIM, hidden_dim=16, out_dim=8,
                      proj_dim=8, batch_size=50, fanout="4,4", mode="minibatch", epochs=8,
                      eval_every=4, T_init=2, T_int=2, e=1, b=1.0, gamma=10.0)
    # homophily 0.3: edges that do not clearly keep to the classes, so auto searches
    data = synthetic_graph(SyntheticSpec(num_nodes=400, num_features=DIM, homophily=0.3))
    run_dir = Path(tmp) / f"rank-{rank}"
    run_dir.mkdir()
    # a whole run through the jobs path, which joins the ranks' group and leaves it: each
    # seed's search, run by every rank; --mode auto: mini-batches under torchrun
    auto = cfg.replace(model={"encoder": "auto"}, run={"mode": "auto"},
                       distributed={"dist_backend": "gloo", "dist_timeout": 30.0})
    metrics = train_seeds(auto, data, run_dir, "cpu")
    out["written"] = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))
    out["metrics"] = bool(metrics)
    out["mode"] = metrics.get("mode")
    out["choice"] = metrics["seeds"][0]["encoder_choice"] if metrics else None
    os.environ["MASTER_PORT"] = str(port)  # a group of its own for the steps below
    world = distributed.start(distributed.DistributedConfig(
        dist_backend="gloo", dist_timeout=30.0, negatives="global"), "cpu")
    try:
        for scheduler, candidates in SETTINGS:  # every negative; HANS's sampled strata
            step = TrainConfig(**SMALL, scheduler=scheduler, candidates=candidates)
            trainer = Trainer(step, DIM, mode="minibatch", seed=0, world=world)
            x = _features()[rank * B:(rank + 1) * B]
            loss, grads = _loss_and_grads(trainer, x)  # numpy: pickled by value
            out[f"step-{scheduler}-{candidates}"] = loss, {n: g.numpy() for n, g in grads.items()}
        # local negatives: HANS decides every 2 epochs from the ranks' averaged losses
        world = replace(world, negatives="local")
        trainer = Trainer(cfg, DIM, mode="minibatch", seed=1, world=world)
        loader = structure_loader(data, cfg.run, 1, (rank, 2))
        for _ in range(6):
            trainer.fit_epoch(data.x, loader=loader)
        out["eta"] = dict(trainer.scheduler.eta)
        out["events"] = [repr(e) for e in trainer.scheduler.events]
        # the edge objective: HANS on the non-edges decides alike everywhere, the ranks draw
        # their own edges, and the averaged gradients keep encoder and decoder in step
        edges = cfg.replace(learning={"objective": "edges", "edge_pool": 20},
                            schedule={"scheduler": "hans", "theta_max": 0.3})
        trainer = Trainer(edges, DIM, mode="minibatch", seed=1, world=world)
        for _ in range(6):
            trainer.fit_epoch(data.x, loader=loader)
        out["edges-eta"] = dict(trainer.scheduler.eta)
        out["edges-events"] = [repr(e) for e in trainer.scheduler.events]
        out["edges-weights"] = {n: p.detach().numpy().copy()
                                for n, p in trainer.model.named_parameters()}
        out["edges-draw"] = trainer.edges_generator.get_state().numpy()
    finally:
        distributed.stop()
    conn.send((rank, out))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn_ranks(target: Callable[..., None], *args: object, timeout: float = 300.0
                 ) -> list[object]:
    """Run ``target(rank, port, *args, conn)`` in two spawned ranks; what each sends on its own
    pipe, in rank order. A pipe is written synchronously (no feeder thread that must flush at
    exit); a rank that dies or hangs fails the test after ``timeout`` with the exit codes,
    and no rank outlives it."""
    ctx = mp.get_context("spawn")
    port = _free_port()
    pipes = [ctx.Pipe(duplex=False) for _ in range(2)]
    procs = [ctx.Process(target=target, args=(r, port, *args, pipes[r][1])) for r in range(2)]
    try:
        for p in procs:
            p.start()
        got = []
        for rank, (reader, _) in enumerate(pipes):
            if not reader.poll(timeout):
                codes = [p.exitcode for p in procs]
                pytest.fail(f"rank {rank} sent nothing in {timeout:.0f} s; exit codes {codes}")
            got.append(reader.recv())
        for p in procs:
            p.join(timeout=120)
        return got
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict]:
    got = dict(_spawn_ranks(_worker, str(tmp_path_factory.mktemp("dist")), _free_port()))
    assert sorted(got) == [0, 1]
    return got


@pytest.mark.parametrize("scheduler, candidates", SETTINGS)
def test_global_negatives_equal_one_process_with_the_world_batch(ranks: dict, scheduler: str,
                                                                  candidates: str) -> None:
    trainer = Trainer(TrainConfig(**SMALL, scheduler=scheduler, candidates=candidates), DIM,
                      mode="minibatch", seed=0)
    loss, grads = _loss_and_grads(trainer, _features())
    for rank in (0, 1):
        rank_loss, rank_grads = ranks[rank][f"step-{scheduler}-{candidates}"]
        assert rank_loss == pytest.approx(loss, abs=1e-5)
        for name, g in grads.items():
            torch.testing.assert_close(torch.from_numpy(rank_grads[name]), g, atol=1e-5, rtol=1e-4, msg=name)


def test_every_rank_makes_the_same_hans_decisions(ranks: dict) -> None:
    assert ranks[0]["events"] == ranks[1]["events"]
    assert ranks[0]["eta"] == ranks[1]["eta"]
    assert ranks[0]["events"]  # decisions were made
    assert max(ranks[0]["eta"].values()) > 0.05  # the schedule moved


def test_the_edge_objective_trains_alike_on_every_rank(ranks: dict) -> None:
    assert ranks[0]["edges-events"] == ranks[1]["edges-events"]
    assert ranks[0]["edges-eta"] == ranks[1]["edges-eta"]
    assert max(ranks[0]["edges-eta"].values()) > 0.05  # HANS grew on the non-edges' losses
    weights = ranks[0]["edges-weights"]
    assert any(name.startswith("decoder.") for name in weights)
    for name, w in weights.items():
        torch.testing.assert_close(torch.from_numpy(ranks[1]["edges-weights"][name]),
                                   torch.from_numpy(w), msg=name)
    assert (ranks[0]["edges-draw"] != ranks[1]["edges-draw"]).any()  # each rank its own edges


def test_rank_zero_alone_writes_the_run_directory(ranks: dict) -> None:
    written = ranks[0]["written"]
    for name in ("config.toml", "metrics.json", "checkpoint.pt", "seed-0/state.pt",
                 "seed-0/epochs.csv", "seed-0/hans_events.jsonl", "seed-0/result.pt"):
        assert name in written
    assert ranks[1]["written"] == [] and not ranks[1]["metrics"]
    assert ranks[0]["mode"] == "minibatch"  # --mode auto: nothing to shard in a full graph
    choice = ranks[0]["choice"]  # the search under torchrun: rank 0's probes, every rank's steps
    assert choice["by"] == "search" and set(choice["scores"]) == {"gcn", "ego", "poly"}


def test_shards_cover_every_seed_in_equal_steps() -> None:
    for n, world, batch in [(10, 2, 3), (7, 3, 2), (101, 4, 8), (5, 2, 4)]:
        shards = [list(ShardedIndices(n, torch.Generator().manual_seed(0), r, world, batch))
                  for r in range(world)]
        assert len({len(s) for s in shards}) == 1  # same number of seeds, so of steps
        assert sorted(set(sum(shards, []))) == list(range(n))
        assert len(sum(shards, [])) - n < world  # at most world - 1 seeds visited twice
        single = torch.randperm(n, generator=torch.Generator().manual_seed(0)).tolist()
        if n >= world * batch:  # global batch 0 = a single process's first batch
            assert sum((s[:batch] for s in shards), []) == single[:world * batch]


def test_more_processes_than_seed_nodes_is_one_line() -> None:
    from edgegcl.data.sampling import make_loader
    from edgegcl.errors import UsageError

    data = Data(edge_index=torch.empty(2, 0, dtype=torch.long), num_nodes=3)
    with pytest.raises(UsageError, match="at least 4 seed nodes"):
        make_loader(data, 2, [2], sampler="builtin", shard=(0, 4))


@pytest.mark.parametrize("flags, needle", [
    (["--mode", "full"], "--mode minibatch"),
    (["--mode", "minibatch", "--dist-backend", "nccl", "--device", "cpu"], "nccl needs CUDA"),
])
def test_refusals_under_torchrun_are_one_line(flags: list[str], needle: str, monkeypatch,
                                              capsys) -> None:
    """Found before any process group is joined, so one process shows them."""
    from edgegcl.cli.main import main

    for name, value in (("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"),
                        ("MASTER_PORT", "29500")):  # what torchrun sets
        monkeypatch.setenv(name, value)
    code = main(["train", "--nodes", "100", "--features", "8", *flags])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and needle in lines[0], lines
    assert lines[0].startswith("edgegcl: error (rank 0, for all 2 ranks): ")


def _dying_worker(rank: int, port: int, conn: Connection) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from edgegcl.training import distributed

    world = distributed.start(distributed.DistributedConfig(
        dist_backend="gloo", dist_timeout=20.0, negatives="local"), "cpu")
    world.barrier()
    if rank == 1:
        conn.send("died")
        os._exit(1)  # dies without a word, as under SIGKILL
    try:
        world.any(False)
        conn.send("no error")
    except distributed.RankLost as lost:
        conn.send(str(lost))


def test_a_rank_that_dies_is_named_by_the_others() -> None:
    message, died = _spawn_ranks(_dying_worker)
    assert died == "died"
    assert message.startswith("rank 0: rank 1 stopped"), message


def test_a_graph_that_cannot_load_stops_every_rank_at_once(tmp_path: Path) -> None:
    """Under torchrun the graph loads after the ranks have joined: rank 0's one line, and no
    rank left waiting for the others (torchrun's own report follows it)."""
    import subprocess
    import sys
    import time

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", "-m", "edgegcl", "train", "--dataset",
                           str(tmp_path / "missing.npz"), "--mode", "minibatch",
                           "--dist-timeout", "600"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    elapsed = time.monotonic() - t0
    ours = [line for line in proc.stderr.splitlines() if line.startswith("edgegcl:")]
    assert proc.returncode != 0 and len(ours) == 1, proc.stderr[-3000:]
    assert ours[0].startswith("edgegcl: error (rank 0, for all 2 ranks): ")
    assert "missing.npz" in ours[0]
    assert "exitcode: 2" in proc.stderr and "forcefully" not in proc.stderr
    assert elapsed < 120  # not the --dist-timeout of a rank waiting for one that has gone
