"""Peak-memory measurement (edgegcl.memory) on the CPU; the CUDA path runs where CUDA exists."""

from __future__ import annotations

import gc
import mmap
import time

import pytest
import torch

from edgegcl.memory import PeakMemory, current_bytes

MIB = 2**20


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA"))])
def test_peak_counts_a_transient_allocation_and_the_baseline_counts_what_was_kept(device):
    dev = torch.device(device)
    gc.collect()  # garbage left by earlier tests, freed mid-test, would lower the RSS read
    with PeakMemory(dev) as idle:
        pass
    with PeakMemory(dev) as block:
        t = torch.ones(64 * MIB // 4, device=dev)  # 64 MiB, touched so it is resident
        time.sleep(0.05)  # several RSS samples while it is alive
        del t
    assert block.peak_bytes >= 56 * MIB
    assert idle.peak_bytes < 16 * MIB
    base = current_bytes(dev)
    if dev.type == "cpu":
        # fresh pages whatever the allocator keeps: with reuse_freed_memory (which any
        # in-process `edgegcl train` of an earlier test turns on) a torch tensor here could
        # reuse the pages the 64 MiB block left resident, and RSS would not grow
        kept = mmap.mmap(-1, 32 * MIB)
        kept.write(b"\1" * (32 * MIB))
    else:
        kept = torch.ones(32 * MIB // 4, device=dev)
    with PeakMemory(dev, baseline=base) as later:  # kept was allocated before entry
        pass
    assert later.peak_bytes >= 28 * MIB
    del kept


def test_reuse_freed_memory_takes_effect_and_can_be_turned_off():
    """glibc only (every Linux CI machine); the opt-out is EDGEGCL_MALLOC=system."""
    import os
    import subprocess
    import sys

    code = "from edgegcl.memory import reuse_freed_memory; print(reuse_freed_memory())"
    env = {k: v for k, v in os.environ.items() if k != "EDGEGCL_MALLOC"}
    on = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    off = subprocess.run([sys.executable, "-c", code], env={**env, "EDGEGCL_MALLOC": "system"},
                         capture_output=True, text=True)
    assert on.stdout.strip() == ("True" if sys.platform == "linux" else "False")
    assert off.stdout.strip() == "False"
