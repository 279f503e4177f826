"""Data-parallel training under ``torch.distributed``, launched by ``torchrun``.

``torchrun --nproc-per-node N -m edgegcl train ...`` starts N processes (ranks); each takes a
disjoint shard of every epoch's seed nodes (edgegcl.data.sampling.ShardedIndices), the model
is wrapped in ``DistributedDataParallel``, and HANS makes one decision for all of them from
per-category losses averaged over every rank's anchors. Negatives are ``local`` (each rank
contrasts its B anchors with its own batch) or ``global`` (the projections are all-gathered
with their gradient, so each anchor's candidates are the world's W x B anchors in both views,
or in the other view only with ``--candidates inter``, exactly as one process with a batch of
W x B). Rank 0 alone probes and writes the run
directory. Without torchrun (``WORLD_SIZE`` unset or 1) none of this is used.
"""

from __future__ import annotations

import os
import warnings
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data

from edgegcl_embed.files import temp_name
from edgegcl.training.config import DistributedConfig
from edgegcl.errors import RankLost, UsageError, first_line

__all__ = ["DistributedConfig", "QuietUsageError", "RankLost", "World",
           "on_main", "require_minibatch", "share_graph", "start", "stop"]

def require_minibatch(mode: str) -> None:
    """Under torchrun every rank trains a shard of each epoch's seed nodes: mini-batches only
    (full-graph mode runs in one process); a UsageError line otherwise."""
    if mode != "minibatch":
        raise UsageError("under torchrun edgegcl trains mini-batches, each rank a shard of "
                         "every epoch's seed nodes; add --mode minibatch (full-graph mode runs "
                         "in one process)")



@dataclass(frozen=True)
class World:
    """This process's place among the ranks, and how they share negatives.

    Args:
        rank: global rank (``RANK``).
        size: number of ranks (``WORLD_SIZE``).
        local_rank: rank on this machine (``LOCAL_RANK``), which picks its GPU.
        negatives: ``"local"`` or ``"global"``.
        device: where this rank trains; collectives of plain values go through it.
    """

    rank: int
    size: int
    local_rank: int
    negatives: str
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that probes, logs, checkpoints and writes metrics."""
        return self.rank == 0

    # ---- collectives of the training loop ----------------------------------------------

    def gather_views(self, h1: Tensor, h2: Tensor) -> tuple[Tensor, Tensor]:
        """Global negatives: every rank's projections, concatenated in rank order, with a
        gradient back to each rank's own rows; local negatives: ``h1, h2`` unchanged."""
        if self.negatives != "global":
            return h1, h2
        # global negatives only: torch.distributed.nn loads its autograd collectives here
        from torch.distributed.nn.functional import all_gather

        with _naming_failures(self), warnings.catch_warnings():
            # deprecated in favour of a private API; it is the public, autograd-aware one
            warnings.simplefilter("ignore", FutureWarning)
            return torch.cat(all_gather(h1)), torch.cat(all_gather(h2))

    def weighted_mean(self, values: dict[str, float], weight: float) -> dict[str, float]:
        """Each key's mean over ranks, rank r's value weighted by its ``weight`` (anchors):
        the same numbers on every rank, so HANS decides alike everywhere."""
        keys = sorted(values)
        t = torch.tensor([values[k] * weight for k in keys] + [weight], dtype=torch.float64,
                         device=self.device)
        with _naming_failures(self):
            dist.all_reduce(t)
        return {k: float(t[i] / t[-1]) for i, k in enumerate(keys)}

    def any(self, flag: bool) -> bool:
        """True on every rank when it is true on one (a stop request reaching one rank)."""
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        with _naming_failures(self):
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (pickled; for small values and saved states)."""
        box = [obj]
        with _naming_failures(self):
            dist.broadcast_object_list(box, src=0, device=self.device)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        out: list[Any] = [None] * self.size
        with _naming_failures(self):
            dist.all_gather_object(out, obj)
        return out

    def lost(self, exc: BaseException) -> RankLost:
        """A failed collective (here, or in DDP's gradient all-reduce) as ``RankLost``, naming
        the ranks that stopped where the launcher's store can tell."""
        return RankLost(_lost_line(self, exc))

    def barrier(self) -> None:
        with _naming_failures(self):
            dist.barrier()


T = TypeVar("T")


class JoinError(UsageError):
    """Why this rank could not join the others (``rendezvous``): its own reason, which every
    rank says (the others cannot say it for it)."""


class QuietUsageError(UsageError):
    """A usage error rank 0 has already printed: the other ranks exit with code 2 silently."""


def on_main(world: World | None, make: Callable[[], T]) -> T:
    """``make()`` on rank 0 alone, its value (or its UsageError) on every rank, so that a
    refusal stops all ranks with rank 0's one line. Without a world: ``make()``."""
    if world is None:
        return make()
    value: Any = None
    if world.is_main:
        try:
            value = make()
        except UsageError as exc:
            value = exc
    value = world.broadcast(value)
    if isinstance(value, UsageError):
        raise value if world.is_main else QuietUsageError(str(value))
    return value


def start(config: DistributedConfig, device_name: str) -> World:
    """Join the process group torchrun set up (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...).

    The device follows ``device_name``: ``cpu``, or CUDA (``auto`` with a GPU, ``cuda``) on
    GPU ``LOCAL_RANK``; NCCL needs CUDA. ``config.dist_timeout`` bounds every collective, so a
    rank whose peer hangs stops instead of waiting for ever.
    """
    backend = config.dist_backend
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    cuda = device_name.startswith("cuda") or (device_name == "auto" and torch.cuda.is_available())
    if cuda and not torch.cuda.is_available():
        raise UsageError(f"--device {device_name} but this machine has no CUDA device; use "
                         "--device cpu (gloo)")
    if backend == "nccl" and not cuda:
        raise UsageError("--dist-backend nccl needs CUDA devices; use --dist-backend gloo (or "
                         "auto) on the CPU")
    if cuda:
        if local_rank >= torch.cuda.device_count():
            raise UsageError(f"local rank {local_rank} has no GPU ({torch.cuda.device_count()} "
                             "on this machine); start at most one process per GPU")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    chosen = backend if backend != "auto" else ("nccl" if cuda else "gloo")
    timeout = timedelta(seconds=config.dist_timeout)
    joined = ({} if "TORCHELASTIC_RUN_ID" in os.environ  # torchrun's agents have joined them
              else {"store": rendezvous(rank, size, config.dist_join_timeout, timeout),
                    "rank": rank, "world_size": size})
    dist.init_process_group(chosen, timeout=timeout,
                            **({"device_id": device} if chosen == "nccl" else {}), **joined)
    return World(rank, size, local_rank, config.negatives, device)


def rendezvous(rank: int, size: int, join_s: float, timeout: timedelta) -> dist.Store:
    """The store at ``MASTER_ADDR:MASTER_PORT`` of processes started without torchrun (rank 0
    hosts it), once all ``size`` ranks have joined; one UsageError line when they have not
    within ``join_s`` seconds (a lone process whose shell kept RANK / WORLD_SIZE). The wait
    polls, so Ctrl-C and SIGTERM stop it at once; the store then waits ``timeout``."""
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    where = f"{host}:{port}"
    fix = ("start them all with torchrun, or unset RANK, WORLD_SIZE, MASTER_ADDR and "
           "MASTER_PORT to train alone (--dist-join-timeout waits longer)")
    if rank == 0:
        print(f"edgegcl: RANK and WORLD_SIZE are set without torchrun: waiting up to "
              f"{join_s:g} s for {size} ranks at {where}", file=sys.stderr, flush=True)
    deadline = time.monotonic() + join_s
    store = None
    while store is None:
        if rank > 0 and not _listening(host, port):  # asked in Python: c10d logs each miss
            if time.monotonic() > deadline:
                raise JoinError(f"rank {rank} found no rank 0 at {where} within {join_s:g} s: "
                                 f"{fix}")
            time.sleep(0.2)
            continue
        try:
            store = dist.TCPStore(host, port, size, rank == 0, timeout=timedelta(seconds=5),
                                  wait_for_workers=False)
        except (RuntimeError, OSError) as exc:
            if rank == 0:  # the host could not listen there
                raise JoinError(f"rank 0 cannot host the process group at {where} "
                                 f"({first_line(exc)[:120]}): choose a free MASTER_PORT, or "
                                 "unset RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT to "
                                 "train alone") from None
            if time.monotonic() > deadline:
                raise JoinError(f"rank {rank} found no rank 0 at {where} within {join_s:g} s: "
                                 f"{fix}") from None
            time.sleep(0.2)
    count = store.add(_JOINED, 1)
    while count < size:
        if time.monotonic() > deadline:
            raise JoinError(f"{count} of {size} ranks joined at {where} within {join_s:g} s: "
                             f"{fix}")
        time.sleep(0.1)
        count = store.add(_JOINED, 0)
    store.set_timeout(timeout)
    return store


def _listening(host: str, port: int) -> bool:
    """Whether something accepts connections at ``host:port`` (within a second)."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


_JOINED = "edgegcl/joined"
"""The store's count of the ranks that have joined (``rendezvous``)."""


def stop() -> None:
    """Leave the process group (at the end of a run, or after a failure)."""
    if dist.is_initialized():
        dist.destroy_process_group()


class _naming_failures:
    """Turns a failed collective into ``RankLost`` naming the ranks that stopped.

    Each surviving rank marks itself in the launcher's key-value store (torchrun's agent keeps
    it alive when a worker dies); after a short wait, the ranks that never marked themselves
    are the ones that stopped.
    """

    WAIT_S = 2.0

    def __init__(self, world: World) -> None:
        self.world = world

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: Any) -> bool:
        if exc is None or not isinstance(exc, RuntimeError) or isinstance(exc, RankLost):
            return False
        raise self.world.lost(exc) from None


def _lost_line(world: World, exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
    try:
        store = dist.distributed_c10d._get_default_store()
        store.set(f"edgegcl/alive/{world.rank}", "1")
        time.sleep(_naming_failures.WAIT_S)
        gone = [r for r in range(world.size) if r != world.rank
                and not store.check([f"edgegcl/alive/{r}"])]
    except Exception:  # the store went with the rank that hosted it
        gone = []
    who = (f"rank {', '.join(map(str, gone))} stopped" if gone
           else "another rank stopped or timed out")
    return f"rank {world.rank}: {who} ({first}); stopping too"


def share_graph(data: Any, world: World) -> Any:
    """The graph as one copy per machine: local rank 0 writes its tensors to a file in shared
    memory (``/dev/shm``), every rank on the machine maps that file (``torch.load(mmap=True)``)
    instead of holding its own copy, and the file is unlinked once all have mapped it (the
    mappings stay valid). Only local rank 0's ``data`` is read (others may pass None). CUDA
    training copies what it needs to its GPU anyway."""
    folder = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    tag = f"{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}-{os.environ.get('MASTER_PORT', '0')}"
    path = folder / f"edgegcl-graph-{tag}-{os.environ.get('GROUP_RANK', '0')}.pt"
    if world.local_rank == 0:  # a shared folder: the temporary is created exclusively
        tmp = temp_name(path)
        try:
            torch.save(data.to_dict(), tmp)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    world.barrier()
    try:
        shared = Data.from_dict(torch.load(path, mmap=True, weights_only=True))
    finally:
        world.barrier()
        if world.local_rank == 0:
            path.unlink(missing_ok=True)
    return shared
