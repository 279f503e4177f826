"""Suite-wide settings for the tests."""

from __future__ import annotations

import os

import pytest
import torch

# The CLI tests run ``edgegcl train`` in this process; its allocator settings
# (edgegcl.memory.reuse_freed_memory) would then change what the RSS-based memory tests see.
os.environ.setdefault("EDGEGCL_MALLOC", "system")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own profile cache (edgegcl.budget.cache), never ~/.cache."""
    monkeypatch.setenv("EDGEGCL_CACHE", str(tmp_path_factory.mktemp("edgegcl-cache")))


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch):
    """The tests' graphs are tiny: threads gain nothing and, on a busy 2-core machine, thrash.
    OMP_NUM_THREADS tells an in-process ``edgegcl train`` to keep that one thread instead of
    measuring (edgegcl.training.threads); tests of the measurement remove it."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield
    torch.set_num_threads(before)
