"""How a torchrun rank picks its backend and device (edgegcl.training.distributed.start),
with CUDA and the process group stubbed: the choice NCCL runs on, checked on any machine."""

from __future__ import annotations

import pytest
import torch

from edgegcl.errors import UsageError
from edgegcl.training import distributed


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """A machine with two CUDA devices; records set_device and init_process_group calls."""
    calls: dict[str, list] = {"set_device": [], "init": []}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", calls["set_device"].append)
    monkeypatch.setattr(distributed.dist, "init_process_group",
                        lambda backend, **kw: calls["init"].append((backend, kw)))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")  # torchrun's: its agents joined the ranks
    return calls


@pytest.mark.parametrize("backend, device, local_rank, chosen, expected", [
    ("auto", "auto", "1", "nccl", "cuda:1"),  # a GPU per local rank, NCCL between them
    ("auto", "cuda", "0", "nccl", "cuda:0"),
    ("gloo", "cuda", "1", "gloo", "cuda:1"),  # gloo asked for explicitly
    ("auto", "cpu", "1", "gloo", "cpu"),      # CPUs: gloo, no GPU touched
])
def test_backend_and_device_follow_local_rank(two_gpus: dict[str, list],
                                              monkeypatch: pytest.MonkeyPatch, backend: str,
                                              device: str, local_rank: str, chosen: str,
                                              expected: str) -> None:
    monkeypatch.setenv("LOCAL_RANK", local_rank)
    world = distributed.start(distributed.DistributedConfig(
        dist_backend=backend, dist_timeout=30.0, negatives="global"), device)
    (name, kwargs), = two_gpus["init"]
    assert name == chosen and str(world.device) == expected
    assert kwargs["timeout"].total_seconds() == 30.0
    assert kwargs.get("device_id") == (world.device if chosen == "nccl" else None)
    assert two_gpus["set_device"] == ([] if expected == "cpu" else [world.device])
    assert (world.rank, world.size, world.local_rank) == (3, 4, int(local_rank))


def test_more_local_ranks_than_gpus_is_one_line(two_gpus: dict[str, list],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(UsageError, match="local rank 2 has no GPU .2 on this machine."):
        distributed.start(distributed.DistributedConfig(
            dist_backend="auto", dist_timeout=30.0, negatives="local"), "cuda")
    assert two_gpus["init"] == []  # refused before joining the group
