"""Suite-wide settings for the tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """The tests' graphs are tiny: threads gain nothing and, on a busy 2-core machine, thrash."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
