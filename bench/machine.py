"""One line describing the machine a benchmark ran on (CPU, cores, memory, torch)."""

from __future__ import annotations

import torch

from edgegcl.budget.bench import machine_line


def describe() -> str:
    """``machine_line`` of the GPU when there is one, else of the CPU."""
    return machine_line(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
