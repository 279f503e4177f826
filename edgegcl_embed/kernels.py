"""The runtime's compiled loops: rows lo..hi-1 of a CSR matrix times a dense matrix, and A_hat.

The product serves both sparse products of the encoder, the aggregation A_hat Z and the sparse
first layer x W1. Two implementations, chosen per session (``KERNELS``):

- ``scipy``: scipy's compiled CSR product. Always available; it releases the GIL, but its inner
  loop is not vectorised for wide rows and it allocates a fresh output per call.
- ``numba``: the same loop compiled by numba (a dependency of edgegcl; optional for the
  edgegcl_embed/ folder copied alone, which then uses scipy's), vectorised for the machine it runs
  on, writing into the caller's buffer, GIL released, and a one-pass build of A_hat. It is
  several times faster (docs/export.md, "Kernels"), at a one-time cost per process: importing
  numba and loading the compiled loops, which numba caches on disk after the first compile.

Both sum each row's nonzeros in their stored order, starting from zero; numba's adds them two
at a time (two source rows in flight per pass: the gathers of a graph's rows, not the
arithmetic, bound the product, and this was 15-18 % faster on a 1M-entry graph,
docs/performance.md), so the two agree to float32 rounding (tested), not to the last bit.
``auto`` takes the faster of the two on the machine, measured once per process
(``faster_kernel``); for a process that embeds once (the ``edgegcl-embed`` command),
``one_shot_kernel`` takes numba only where the graph repays its start-up. A kernel named
explicitly gives bitwise-repeatable embeddings across runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix

from .errors import InputError

KERNELS = ("auto", "numba", "scipy")

# For a process that embeds once (the edgegcl-embed command), numba's one-time start (importing
# numba and loading its cached loops: 0.5-0.7 s on the 2-core Xeon) pays off only when the
# sparse work is large: there its loops saved about 0.1 s per 4e8 multiply-adds at 2 threads
# (docs/export.md, "Kernels"), so "auto" takes numba from this many multiply-adds on.
ONE_SHOT_NUMBA_MIN_WORK = 2_500_000_000

_compiled: dict[str, Callable[..., Any]] = {}
_numba_problem: list[str | None] = []  # the answer of numba_problem, once known


def numba_problem() -> str | None:
    """Why numba's loops cannot run here, or None when they can. Imports numba (once): an
    installed numba can still fail to import, for instance against a newer numpy."""
    if not _numba_problem:
        problem = None
        if importlib.util.find_spec("numba") is None:
            problem = "numba is not installed here"
        else:
            try:
                importlib.import_module("numba")
            except Exception as exc:  # numba raises ImportError, or others from llvmlite
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                problem = f"numba does not import here ({first[:160]})"
        _numba_problem.append(problem)
    return _numba_problem[0]


def _check_name(kernel: str) -> None:
    if kernel not in KERNELS:
        raise InputError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")


MEASURE_SHAPE = (4096, 16, 32768, 128)
"""The product ``faster_kernel`` times: rows, entries per row, table rows (16 MiB, past a
small device's caches, gathered in random order as an aggregation does) and width."""
NUMBA_MARGIN = 1.1
"""scipy is chosen only when numba's loop takes more than this multiple of its time, so
that timing noise does not switch kernels between runs on one machine."""

_faster: list[str] = []  # faster_kernel's answer, once measured


def _product_seconds(kernel: str, rows: int, per_row: int, table: int, width: int) -> float:
    """Best of three timings of ``kernel`` on a random CSR product of that shape."""
    rng = np.random.default_rng(0)
    indptr = np.arange(0, rows * per_row + 1, per_row, dtype=np.int64)
    indices = rng.integers(0, table, rows * per_row).astype(np.int64)
    data = rng.random(rows * per_row, dtype=np.float32)
    h = rng.random((table, width), dtype=np.float32)
    out = np.empty((rows, width), dtype=np.float32)
    best = float("inf")
    for _ in range(4):  # the first also loads numba's compiled loop
        start = time.perf_counter()
        csr_rows_product(kernel, data, indices, indptr, 0, rows, h, out)
        best = min(best, time.perf_counter() - start)
    return best


def faster_kernel() -> str:
    """Of numba's and scipy's loops, the one that runs the CSR product faster on this machine
    (``MEASURE_SHAPE``, timed once per process, some tens of milliseconds): numba unless
    scipy's is faster by more than NUMBA_MARGIN; scipy where numba cannot run."""
    if not _faster:
        if numba_problem():
            _faster.append("scipy")
        else:
            numba_s = _product_seconds("numba", *MEASURE_SHAPE)
            scipy_s = _product_seconds("scipy", *MEASURE_SHAPE)
            _faster.append("scipy" if numba_s > NUMBA_MARGIN * scipy_s else "numba")
    return _faster[0]


def resolve_kernel(kernel: str) -> str:
    """``kernel`` as the implementation it names: "auto" -> the faster on this machine
    (``faster_kernel``: numba's where it runs and is not slower). A kernel not in KERNELS, or
    "numba" where it cannot run, is a one-line InputError."""
    _check_name(kernel)
    if kernel == "scipy":
        return kernel
    problem = numba_problem()
    if kernel == "auto":
        return "scipy" if problem else faster_kernel()
    if problem:
        raise InputError(f"kernel 'numba' cannot run: {problem}; pip install numba (a version "
                         "that supports this numpy), or use kernel 'scipy'")
    return kernel


def one_shot_kernel(kernel: str, work: int) -> str:
    """``resolve_kernel`` for a single embedding of ``work`` sparse multiply-adds
    (``EncoderSession.sparse_work``): "auto" takes numba only from ONE_SHOT_NUMBA_MIN_WORK on,
    and below it never imports numba."""
    _check_name(kernel)
    if kernel == "auto" and work < ONE_SHOT_NUMBA_MIN_WORK:
        return "scipy"
    return resolve_kernel(kernel)


def _numba_kernels() -> dict[str, Callable[..., Any]]:
    """The compiled kernels, built (or loaded from numba's disk cache) on first use."""
    if not _compiled:
        import numba  # optional: scipy's kernel runs without it

        @numba.njit(nogil=True, cache=True)
        def csr_rows_times_dense(data: Any, indices: Any, indptr: Any, lo: int, hi: int,
                                 h: Any, out: Any) -> None:
            for i in range(lo, hi):
                row = out[i - lo]
                row[:] = 0
                jj, end = indptr[i], indptr[i + 1]
                while jj + 1 < end:  # two entries per pass: two row gathers in flight
                    a0, a1 = data[jj], data[jj + 1]
                    s0, s1 = h[indices[jj]], h[indices[jj + 1]]
                    for k in range(s0.shape[0]):
                        row[k] += a0 * s0[k] + a1 * s1[k]
                    jj += 2
                if jj < end:
                    a = data[jj]
                    src = h[indices[jj]]
                    for k in range(src.shape[0]):
                        row[k] += a * src[k]

        @numba.njit(nogil=True, cache=True)
        def normalised_adjacency(src: Any, dst: Any, dinv: Any, indptr: Any, indices: Any,
                                 data: Any) -> None:
            n = indptr.shape[0] - 1
            cursor = indptr[:-1] + 1
            for i in range(n):  # each row starts with its self-loop
                indices[indptr[i]] = i
            for e in range(src.shape[0]):  # a counting sort by target, in edge order
                s, d = src[e], dst[e]
                if s != d:
                    indices[cursor[d]] = s
                    cursor[d] += 1
            for i in range(n):
                for p in range(indptr[i], indptr[i + 1]):
                    data[p] = dinv[i] * dinv[indices[p]]

        _compiled.update(product=csr_rows_times_dense, adjacency=normalised_adjacency)
    return _compiled


def fill_adjacency(src: np.ndarray, dst: np.ndarray, dinv: np.ndarray, indptr: np.ndarray,
                   indices: np.ndarray, data: np.ndarray) -> None:
    """numba's A_hat rows (Eq. of ``edgegcl_embed.adjacency``): given indptr (one self-loop per row
    plus its in-edges that are not loops), write each row's loop, then its sources in edge
    order, and the values dinv[target] * dinv[source]; one pass over the edges, no sort."""
    _numba_kernels()["adjacency"](src, dst, dinv, indptr, indices, data)


def csr_block(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, lo: int, hi: int,
              num_cols: int) -> csr_matrix:
    """Rows lo..hi-1 of the CSR matrix (data, indices, indptr), sharing its data and indices:
    a block costs O(hi - lo), where scipy's own row slicing copies the block's nonzeros."""
    start, stop = int(indptr[lo]), int(indptr[hi])
    return csr_matrix((data[start:stop], indices[start:stop], indptr[lo:hi + 1] - indptr[lo]),
                      shape=(hi - lo, num_cols), copy=False)


def csr_rows_product(kernel: str, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
                     lo: int, hi: int, h: np.ndarray,
                     out: np.ndarray | None = None) -> np.ndarray:
    """(M h)[lo:hi] for the CSR matrix M = (data, indices, indptr) with h.shape[0] columns.

    ``kernel`` is "numba" or "scipy" (``resolve_kernel``); h is C-contiguous float32, as is
    ``out`` ([hi - lo, h.shape[1]], written in place and returned; allocated when None).
    """
    if kernel == "numba":
        if out is None:
            out = np.empty((hi - lo, h.shape[1]), dtype=np.float32)
        _numba_kernels()["product"](data, indices, indptr, lo, hi, h, out)
        return out
    product = csr_block(data, indices, indptr, lo, hi, h.shape[0]) @ h
    if out is None:
        return product
    out[...] = product
    return out


def warm_up(kernel: str) -> None:
    """Compile or load ``kernel``'s loops now (a no-op for scipy), for int32 and int64 indices,
    so that the one-time cost is not charged to the first embedding."""
    if kernel != "numba":
        return
    h = np.ones((1, 1), dtype=np.float32)
    one = np.ones(1, dtype=np.float32)
    for dtype in (np.int32, np.int64):
        csr_rows_product(kernel, one, np.zeros(1, dtype), np.array([0, 1], dtype), 0, 1, h)
        fill_adjacency(np.zeros(1, dtype), np.zeros(1, dtype), one, np.array([0, 1], dtype),
                       np.empty(1, dtype), np.empty(1, np.float32))
