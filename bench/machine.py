"""One line describing the machine a benchmark ran on (CPU, cores, memory, torch)."""

from __future__ import annotations

import platform

import psutil
import torch

from edgegcl.budget.cache import cpu_model


def describe() -> str:
    cpu = cpu_model()
    mem = psutil.virtual_memory().total / 2**30
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return (f"{cpu}, {psutil.cpu_count(logical=True)} cores, {mem:.0f} GiB RAM{gpu}; "
            f"torch {torch.__version__} ({torch.get_num_threads()} threads), Python {platform.python_version()}")
