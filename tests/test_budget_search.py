"""Choosing θ_max (edgegcl.budget.search): OOM classification, and the search on fake costs."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from edgegcl.errors import is_out_of_memory
from edgegcl.budget.search import (DEFAULT_MARGIN, OUT_OF_MEMORY, Budgets, Cost, best_of,
                                   format_table, search_theta, to_json)

GIB = 2**30
GRID = [i / 20 for i in range(1, 21)]  # 0.05, 0.10, ..., 1.0


def _raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - we want whatever the allocator raises
        return exc
    raise AssertionError("expected an exception")


# --- out-of-memory classification -------------------------------------------------------------

def test_real_cpu_allocator_failure_is_oom() -> None:
    """2**62 bytes is beyond any address space, so posix_memalign fails even with overcommit."""
    exc = _raised(lambda: torch.empty(2**62, dtype=torch.uint8))
    assert "DefaultCPUAllocator: can't allocate memory" in str(exc)
    assert is_out_of_memory(exc)


def test_real_numpy_memory_error_is_oom() -> None:
    exc = _raised(lambda: np.empty(2**62, dtype=np.uint8))
    assert isinstance(exc, MemoryError) and is_out_of_memory(exc)


@pytest.mark.parametrize("text", [
    # c10/cuda/CUDACachingAllocator.cpp, torch >= 2.1 wording
    "CUDA out of memory. Tried to allocate 1.22 GiB. GPU 0 has a total capacity of 15.77 GiB of "
    "which 959.44 MiB is free. Process 12447 has 14.83 GiB memory in use. Of the allocated memory "
    "14.01 GiB is allocated by PyTorch, and 472.05 MiB is reserved by PyTorch but unallocated.",
    # the same allocator, torch 1.x wording
    "CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total capacity; 130.35 MiB "
    "already allocated; 47.06 MiB free; 188.00 MiB reserved in total by PyTorch)",
    # c10/core/impl/alloc_cpu.cpp (Linux / macOS), as torch 2.13 raises it
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
    "tried to allocate 10000000000000 bytes. Error code 12 (Cannot allocate memory)",
    # the same on Windows and Android
    "[enforce fail at alloc_cpu.cpp:72] data. DefaultCPUAllocator: not enough memory: you tried to "
    "allocate 4294967296 bytes.",
    "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other "
    "API call, so the stacktrace below might be incorrect.",
    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
])
def test_allocator_texts_are_oom(text: str) -> None:
    assert is_out_of_memory(RuntimeError(text))


def test_typed_oom_errors() -> None:
    assert is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert is_out_of_memory(MemoryError())


def test_real_non_oom_errors_are_not_oom() -> None:
    shape = _raised(lambda: torch.ones(3, 4) @ torch.ones(5, 6))
    index = _raised(lambda: torch.zeros(3)[torch.tensor([7])])
    assert not is_out_of_memory(shape) and not is_out_of_memory(index)


@pytest.mark.parametrize("exc", [
    RuntimeError("CUDA error: an illegal memory access was encountered"),
    RuntimeError("CUDA error: device-side assert triggered"),
    RuntimeError("Expected all tensors to be on the same device, but found cuda:0 and cpu"),
    RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in "
                 "a non-contiguous input."),
    ValueError("CUDA out of memory"),  # only allocator RuntimeErrors carry these texts
    KeyboardInterrupt(),
])
def test_other_errors_are_not_oom(exc: BaseException) -> None:
    assert not is_out_of_memory(exc)


# --- the search -------------------------------------------------------------------------------

class Fake:
    """A cost function θ -> Cost that records what the search asked for."""

    def __init__(self, cost) -> None:
        self.cost, self.asked = cost, []

    def __call__(self, theta: float) -> Cost:
        self.asked.append(theta)
        return self.cost(theta)


def linear(epoch_per_theta: float, gib_per_theta: float, oom_from: float = 2.0):
    return lambda t: OUT_OF_MEMORY if t >= oom_from else Cost(epoch_per_theta * t,
                                                             int(gib_per_theta * t * GIB))


def brute_force(cost, budgets: Budgets) -> float | None:
    """The largest grid θ that fits, measuring every one of them."""
    fitting = [t for t in GRID if not (c := cost(t)).oom and not budgets.exceeded(c)]
    return max(fitting, default=None)


def check_invariants(result, fake: Fake) -> None:
    thetas = [m.theta for m in result.measurements]
    assert thetas == fake.asked and len(set(thetas)) == len(thetas)  # each θ measured once
    assert all(t in GRID for t in thetas)  # on the grid: never below 0.05 nor above 1.0
    failed = [m.theta for m in result.measurements if not m.fits]
    fitted = [m.theta for m in result.measurements if m.fits]
    assert result.chosen not in failed
    assert result.chosen == max(fitted, default=None)
    assert max(fitted, default=0.0) < min(failed, default=2.0)  # every fit below every failure
    for i, m in enumerate(result.measurements):  # after a θ fails, nothing above it is tried
        assert m.fits or all(later < m.theta for later in thetas[i + 1:])


def test_latency_bound_picks_the_largest_fitting_theta() -> None:
    fake = Fake(linear(10.0, 1.0))  # 10 s per epoch at θ = 1; memory plentiful
    result = search_theta(fake, Budgets(epoch_s=5.0, memory_bytes=100 * GIB))
    # limit 5.0 * 0.9 = 4.5 s -> θ <= 0.45
    assert result.chosen == 0.45
    assert fake.asked == [0.1, 0.2, 0.4, 0.8, 0.6, 0.5, 0.45]  # grow, then bisect
    check_invariants(result, fake)
    above = next(m for m in result.measurements if m.theta == 0.5)
    assert above.over == ("latency",)
    assert "theta_max = 0.45 is the largest" in result.reason
    assert "0.50 exceeds the latency limit" in result.reason


def test_memory_bound_picks_the_largest_fitting_theta() -> None:
    fake = Fake(linear(0.1, 10.0))  # 10 GiB at θ = 1; time plentiful
    result = search_theta(fake, Budgets(epoch_s=60.0, memory_bytes=8 * GIB))
    # limit 8 * 0.9 = 7.2 GiB -> θ <= 0.72 -> 0.70 on the grid
    assert result.chosen == 0.7
    check_invariants(result, fake)
    assert {m.over for m in result.measurements if not m.fits} == {("memory",)}
    assert "0.75 exceeds the memory limit" in result.reason


def test_matches_brute_force_on_many_monotone_costs() -> None:
    rng = random.Random(0)
    for _ in range(200):
        a, b = rng.uniform(0.1, 30.0), rng.uniform(0.1, 30.0)
        cost = linear(a, b, oom_from=rng.choice([0.3, 0.75, 2.0]))
        budgets = Budgets(epoch_s=rng.uniform(0.5, 10.0),
                          memory_bytes=int(rng.uniform(0.5, 10.0) * GIB))
        fake = Fake(cost)
        result = search_theta(fake, budgets)
        assert result.chosen == brute_force(cost, budgets)
        assert len(fake.asked) <= 9  # grow (<= 5) + bisect (<= 4), not 20
        check_invariants(result, fake)


def test_everything_fits_goes_to_one() -> None:
    fake = Fake(linear(1.0, 1.0))
    result = search_theta(fake, Budgets(epoch_s=10.0, memory_bytes=10 * GIB))
    assert result.chosen == 1.0 and fake.asked == [0.1, 0.2, 0.4, 0.8, 1.0]


def test_oom_at_high_theta_is_never_chosen() -> None:
    fake = Fake(linear(1.0, 1.0, oom_from=0.7))
    result = search_theta(fake, Budgets(epoch_s=100.0, memory_bytes=100 * GIB))
    assert result.chosen == 0.65
    check_invariants(result, fake)
    ooms = [m for m in result.measurements if m.oom]
    assert ooms and all(m.theta >= 0.7 and not m.fits and m.epoch_s is None for m in ooms)
    assert "0.70 ran out of memory" in result.reason
    assert "no: out of memory" in format_table(result)


def test_start_failing_searches_down_to_the_minimum() -> None:
    fake = Fake(linear(10.0, 1.0))  # 0.5 s at θ = 0.05, 1 s at 0.1
    result = search_theta(fake, Budgets(epoch_s=0.6, memory_bytes=10 * GIB))
    assert result.chosen == 0.05 and fake.asked == [0.1, 0.05]


def test_nothing_fits_names_the_cheapest_measured_cost() -> None:
    fake = Fake(linear(100.0, 40.0))  # 5 s and 2 GiB at θ = 0.05
    result = search_theta(fake, Budgets(epoch_s=1.0, memory_bytes=1 * GIB))
    assert result.chosen is None
    assert min(fake.asked) == 0.05
    assert result.reason.startswith("no theta_max fits: the cheapest measured, theta_max = 0.05, "
                                    "takes 5.00 s per epoch and peaks at 2048 MiB")
    assert "exceeds the memory and latency limits" in result.reason
    check_invariants(result, fake)


def test_nothing_fits_when_everything_runs_out_of_memory() -> None:
    result = search_theta(Fake(lambda t: OUT_OF_MEMORY), Budgets(epoch_s=1.0, memory_bytes=GIB))
    assert result.chosen is None
    assert result.reason == "no theta_max fits: every theta tried ran out of memory, down to 0.05"


def test_non_monotone_noise_never_picks_a_failed_theta() -> None:
    """A spike at 0.4 (say another process ran) fails it; 0.6 would fit but is never measured."""
    spike = Fake(lambda t: Cost(50.0 if t == 0.4 else t, GIB))
    result = search_theta(spike, Budgets(epoch_s=2.0, memory_bytes=10 * GIB))
    assert result.chosen == 0.35  # conservative: settles below the failure
    assert max(spike.asked) == 0.4  # nothing above a failure is measured
    check_invariants(result, spike)

    rng = random.Random(1)
    for _ in range(200):  # noisy costs: whatever happens, the choice was measured and fitted
        noisy = Fake(lambda t: OUT_OF_MEMORY if rng.random() < 0.1
                     else Cost(t * rng.uniform(0.5, 3.0), GIB))
        result = search_theta(noisy, Budgets(epoch_s=1.0, memory_bytes=10 * GIB))
        check_invariants(result, noisy)


def test_margin_is_applied_to_both_budgets() -> None:
    at_budget = lambda t: Cost(1.0, GIB)  # noqa: E731 - exactly the budgets, at every θ
    assert search_theta(Fake(at_budget), Budgets(1.0, GIB, margin=0.0)).chosen == 1.0
    assert search_theta(Fake(at_budget), Budgets(1.0, GIB)).chosen is None
    budgets = Budgets(1.0, GIB)
    assert DEFAULT_MARGIN == budgets.margin == 0.1
    assert budgets.epoch_limit_s == pytest.approx(0.9) and budgets.memory_limit_bytes == int(0.9 * GIB)


def test_custom_grid_and_start() -> None:
    fake = Fake(linear(10.0, 1.0))
    result = search_theta(fake, Budgets(5.0, 100 * GIB), start=0.25, resolution=0.25)
    assert result.chosen == 0.25 and fake.asked == [0.25, 0.5]


@pytest.mark.parametrize("kwargs", [{"resolution": 0.3}, {"resolution": 0.0}, {"start": 0.07},
                                    {"start": 1.5}, {"start": 0.0}])
def test_bad_grid_is_a_value_error(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        search_theta(Fake(linear(1.0, 1.0)), Budgets(1.0, GIB), **kwargs)


def test_bad_costs_and_budgets_are_value_errors() -> None:
    for args in [(1.0, None), (None, 5), (-1.0, 5), (float("nan"), 5)]:
        with pytest.raises(ValueError):
            Cost(*args)
    for args in [(0.0, GIB), (1.0, 0), (1.0, GIB, 1.0), (1.0, GIB, -0.1)]:
        with pytest.raises(ValueError):
            Budgets(*args)


def test_errors_other_than_oom_propagate() -> None:
    def broken(theta: float) -> Cost:
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)")
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        search_theta(broken, Budgets(1.0, GIB))


def test_table_and_json() -> None:
    result = search_theta(Fake(linear(10.0, 1.0, oom_from=0.8)), Budgets(5.0, 100 * GIB))
    table = format_table(result).splitlines()
    assert table[0].split() == ["theta_max", "epoch", "s", "peak", "MiB", "fits?"]
    rows = [line.split()[0] for line in table[1:-1]]
    assert rows == sorted(rows)  # by θ
    assert any(line.split()[0] == "0.45" and line.endswith("yes, chosen") for line in table)
    assert any(line.split()[:3] == ["0.80", "-", "-"] and line.endswith("no: out of memory")
               for line in table)
    assert table[-1].startswith("fits: epoch <= 4.500 s and peak <= ")
    data = json.loads(json.dumps(to_json(result)))
    assert data["chosen_theta_max"] == 0.45 and data["reason"] == result.reason
    assert data["budgets"]["margin"] == 0.1 and data["budgets"]["epoch_limit_s"] == pytest.approx(4.5)
    assert [m["theta"] for m in data["measurements"]] == [m.theta for m in result.measurements]
    assert set(data["measurements"][0]) == {"theta", "epoch_s", "peak_bytes", "oom", "fits", "over",
                                             "label"}


# --- several ways to run one θ ---------------------------------------------------------------

def test_best_of_keeps_the_fastest_that_fits_else_the_least_over() -> None:
    budgets = Budgets(10.0, GIB, margin=0.0)
    fast_but_big = Cost(1.0, 2 * GIB, "a")
    slow_fits = Cost(8.0, GIB // 2, "b")
    faster_fits = Cost(5.0, GIB // 2, "c")
    assert best_of([fast_but_big, slow_fits, faster_fits], budgets) is faster_fits
    both_over = Cost(20.0, 2 * GIB, "d")
    oom = Cost(None, None, "e")
    assert best_of([oom, both_over, fast_but_big], budgets) is fast_but_big
    assert best_of([oom, both_over], budgets) is both_over


def test_labels_reach_the_measurements_and_the_table() -> None:
    budgets = Budgets(1.0, GIB)
    result = search_theta(lambda t: Cost(t / 2, GIB // 4, "pairs" if t < 0.5 else "dense"),
                          budgets)
    assert {m.label for m in result.measurements} == {"pairs", "dense"}
    assert all((m.label == "pairs") == (m.theta < 0.5) for m in result.measurements)
    lines = format_table(result).splitlines()
    assert "run as" in lines[0]
    assert any("pairs" in line for line in lines[1:]) and any("dense" in line for line in lines[1:])
    assert "run as" not in format_table(search_theta(lambda t: Cost(t, 1), budgets))
