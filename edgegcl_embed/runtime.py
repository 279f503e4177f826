"""Embedding graphs with an exported encoder: onnxruntime for the dense stages, a CSR
product for the aggregation (and for the first layer of sparse features), row blocks spread
over every core; whole graph or k-hop batches."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
from scipy.sparse import csr_matrix, issparse

from .adjacency import IndexedAdjacency, NormalisedAdjacency
from .cores import available_cores
from .contract import (INPUT_X, STAGE0_WEIGHT,
                       STAGE0_WEIGHT_INT8, ModelMetadata, OutdatedModel, aggregate_input,
                       carry_input, carry_output, stage_output)
from .errors import InputError, first_line, shown
from .features import dense_rows, density, sparse_product, use_sparse_product
from .files import read_regular
from .folder import Folder
from .graph import Features, InNeighbourhoods, check_graph, gcn_degree
from .kernels import resolve_kernel, warm_up
from .bounds import MAX_NODES, check_bounded, node_count
from .scratch import mapped_array
from .stages import ModelFormatError, external_tensors, stage_model

MODEL_LIMIT = 2**31 - 1
"""The largest model file read: protocol buffers cannot exceed 2 GiB."""

# Rows per block of a stage: a block is one unit of work for one thread (its CSR rows, then
# its dense stage). The block size depends on the graph only, never on the thread count, so
# every thread count computes the same blocks in the same order: identical results (INT8's
# per-run activation scale included). At most MAX_BLOCK_ROWS keeps a block's buffers a few
# MiB; at least BLOCKS_PER_STAGE blocks keep every core busy on mid-sized graphs.
MAX_BLOCK_ROWS = 512
MIN_BLOCK_ROWS = 64
BLOCKS_PER_STAGE = 16

FOLDER_BATCH = 512
"""Rows per block when a graph folder is embedded (``embed_folder``): a block of a stage reads
its rows' in-neighbours' rows of the layer before, at average degree 10 about 5 600 rows, 16 MiB
of 768 float32 features."""

DEVICES = ("cpu", "cuda")
MAX_THREADS = 1024
"""The most worker threads a session starts (each a stack and an onnxruntime run)."""

# How stage 0 (x W1) runs: "auto" as a CSR product when that is cheaper for x's density and
# the model's precision (edgegcl_embed.features), "dense" always as the model's MatMul (a sparse x
# densified block by block), "sparse" always as a CSR product (a dense x converted likewise).
FIRST_LAYER_MODES = ("auto", "dense", "sparse")


def block_bounds(num_rows: int, block_rows: int) -> list[tuple[int, int]]:
    """Consecutive [lo, hi) row ranges of at most ``block_rows`` rows covering ``num_rows``."""
    return [(lo, min(lo + block_rows, num_rows)) for lo in range(0, num_rows, block_rows)]


def default_block_rows(num_rows: int) -> int:
    """Rows per block for a graph of ``num_rows`` nodes (see MAX_BLOCK_ROWS)."""
    return min(MAX_BLOCK_ROWS, max(MIN_BLOCK_ROWS, -(-num_rows // BLOCKS_PER_STAGE)))


@dataclass
class Layered:
    """How ``EncoderSession`` runs the stages over a graph: ``block_rows`` rows per block,
    each stage's output in memory or, with ``scratch`` (a directory), in an unlinked mapped
    file there (``edgegcl_embed.scratch``), whose rows ``adjacency`` asks for ahead when it is
    larger than memory allows; ``rows_ahead(lo, hi)`` before stage 0 reads rows lo..hi of x;
    ``progress(done, total)`` after each block, counted in rows over all stages."""

    block_rows: int
    scratch: str | Path | None = None
    adjacency: IndexedAdjacency | None = None
    rows_ahead: Callable[[int, int], None] | None = None
    progress: Callable[[int, int], None] | None = None

    def buffer(self, rows: int, cols: int) -> np.ndarray:
        """An uninitialised float32 [rows, cols] stage output."""
        if self.scratch is None:
            return np.empty((rows, cols), dtype=np.float32)
        array, read_ahead = mapped_array(self.scratch, rows, cols)
        if read_ahead is not None and self.adjacency is not None:
            self.adjacency.register(array, read_ahead.prefetch)
        return array

    def report(self, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(done, total)


def portable_session(path: str | Path, threads: int = 1,
                     memory_pattern: bool = False) -> ort.InferenceSession:
    """A plain onnxruntime session of an exported model file, opened as any
    consumer of the file opens it, with none of this runtime's code:
    ``session.run(["embeddings"], {"x": x, "edge_index": edge_index})`` embeds a whole graph.

    ``threads``: onnxruntime's intra-op threads (the numbers do not depend on them).
    ``memory_pattern``: onnxruntime's default is on; its allocation plan for one graph's
    shapes raises the peak memory of this dynamic-shape model (docs/export.md), so it is off
    here unless asked for.
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.enable_mem_pattern = memory_pattern
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


MODEL_FIX = "pass a .onnx written by edgegcl export"


def _read_model(p: Path) -> bytes:
    """The model file's bytes, refused in one line when it is no ONNX model, keeps a tensor
    in another file (a path the runtime never follows) or holds more nodes than any
    edgegcl encoder."""
    model = read_regular(p, "model file", MODEL_FIX, MODEL_LIMIT)
    try:
        external = external_tensors(model)
        nodes = node_count(model)
    except ModelFormatError as exc:
        raise InputError(f"model file {p} is not an ONNX model ({first_line(exc)}); "
                         f"{MODEL_FIX}") from None
    if external:  # read from bytes: nothing outside the file is ever opened
        raise InputError(f"model file {p} keeps tensor {shown(external[0])} as external "
                         "data (a path to another file), which edgegcl never writes and "
                         f"the runtime does not follow; {MODEL_FIX}")
    if nodes > MAX_NODES:
        raise InputError(f"model file {p} holds more than {MAX_NODES} nodes (edgegcl's "
                         f"encoders hold under 100 per 2 layers); {MODEL_FIX}")
    return model


def _check_options(threads: int | None, device: str, first_layer: str) -> None:
    """One InputError line for a thread count, device or first-layer mode out of range."""
    if threads is not None and not 1 <= threads <= MAX_THREADS:
        raise InputError(f"threads must be in 1..{MAX_THREADS}, got {threads}; pass a "
                         "positive number or leave it out for every core")
    if device not in DEVICES:
        raise InputError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if first_layer not in FIRST_LAYER_MODES:
        raise InputError(f"first_layer must be one of {', '.join(FIRST_LAYER_MODES)}, got "
                         f"{first_layer!r}")


def _providers(device: str) -> list[str]:
    """onnxruntime's execution providers for ``device`` (one line when CUDA's is missing)."""
    if device != "cuda":
        return ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise InputError("onnxruntime here has no CUDAExecutionProvider; install "
                         "onnxruntime-gpu on a machine with CUDA, or use the CPU")
    return ["CUDAExecutionProvider", "CPUExecutionProvider"]


def _session_options() -> ort.SessionOptions:
    """One thread per run (the runtime runs row blocks concurrently), errors only logged."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: a bad model is reported in one line
    return options


class EncoderSession:
    """An exported encoder, opened for inference, with its ``edgegcl.*`` metadata.

    The file is cut into its dense stages (``edgegcl_embed.stages``): ``session`` is the stages'
    onnxruntime session. What onnxruntime loads is checked first to be bounded
    (``edgegcl_embed.bounds``: no control flow, no shape taken from a value); a file of an
    earlier interface is refused in one line (re-export it).

    ``threads``: worker threads for the row blocks (default: every available core). Each
    onnxruntime run is single-threaded and blocks run concurrently, which scales better than
    splitting every small product. ``device`` "cuda" runs the dense stages with onnxruntime's CUDA provider,
    the whole graph as one block. ``first_layer`` (FIRST_LAYER_MODES): when a model that
    exposes W1 (edgegcl_embed.contract) takes stage 0 as a CSR product over x's nonzeros instead
    of its MatMul; ``stage0_weight`` is that W1, None for models without it (the ego and
    polynomial encoders, or a first layer that aggregates first), which always densify a sparse
    x. ``kernel``
    (edgegcl_embed.kernels.KERNELS): the CSR product for the aggregation and the sparse first layer,
    the faster of numba's and scipy's on this machine ("auto", ``kernels.faster_kernel``);
    ``self.kernel`` is the one chosen, and assigning it
    switches (``sparse_work`` and ``kernels.one_shot_kernel`` choose for a single embedding).
    Results do not depend on ``threads``; they agree across kernels to float32 rounding.

    Example:
        >>> session = EncoderSession("model.onnx", threads=4)  # doctest: +SKIP
        >>> z = session.embed(x, edge_index)                    # doctest: +SKIP
    """

    def __init__(self, path: str | Path, threads: int | None = None,
                 device: str = "cpu", first_layer: str = "auto", kernel: str = "auto") -> None:
        """Open ``path``; a missing, corrupt or foreign model file is a one-line InputError."""
        p = Path(path)
        model = _read_model(p)
        _check_options(threads, device, first_layer)
        self._kernel = resolve_kernel(kernel)
        self._pool: ThreadPoolExecutor | None = None
        self._run_options = ort.RunOptions()  # its terminate flag ends runs in progress
        self.device = device
        self.threads = 1 if device == "cuda" else threads or available_cores()
        self._size = len(model)
        stages = self._read_metadata_and_cut(p, model)
        del model
        options = _session_options()
        self.session = self._load(stages, options, _providers(device), p)
        if device == "cuda" and "CUDAExecutionProvider" not in self.session.get_providers():
            raise InputError("onnxruntime could not start its CUDA provider (CUDA or cuDNN "
                             "libraries missing or mismatched); fix the install or use the CPU")
        self._check_graph(p, self.metadata, cut=True)
        inputs = {i.name: i.shape for i in self.session.get_inputs()}
        self._has_stage0 = INPUT_X in inputs
        self._widths = {o.name: o.shape[1] for o in self.session.get_outputs()
                        if len(o.shape) == 2}  # the stages' outputs (and W1)
        # zero-row feeds for the stages a run does not compute
        self._idle = {
            name: np.zeros((0, shape[1]), dtype=np.float32) for name, shape in inputs.items()}
        self.first_layer = first_layer
        self.stage0_weight = self._fetch_stage0_weight(p) if self._has_stage0 else None
        if first_layer == "sparse" and self.stage0_weight is None:
            raise InputError(f"model file {p} does not expose W1 (its {self.metadata.encoder} "
                             "encoder's first layer is more than x W1, or aggregates first), so "
                             "it cannot run sparse; use first_layer auto or dense")
        warm_up(self._kernel)  # numba's one-time load, charged to opening, not to embed

    def _read_metadata_and_cut(self, p: Path, model: bytes) -> bytes:
        """The file's metadata (``self.metadata``), checked against its whole graph, and the
        model of its dense stages, checked to be bounded: what onnxruntime will run."""
        # the whole file, loaded to read its inputs and outputs only: no optimisation, so
        # nothing is folded (run) before the stages are known to be bounded
        plain = _session_options()
        plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        self.session = self._load(model, plain, ["CPUExecutionProvider"], p)
        props = self.session.get_modelmeta().custom_metadata_map
        try:
            self.metadata = ModelMetadata.from_props(props)
        except OutdatedModel as exc:
            raise InputError(f"model file {p} was written by an earlier edgegcl ({exc}); "
                             "re-export it with edgegcl export") from None
        except (KeyError, ValueError) as exc:
            raise InputError(f"model file {p} is not an edgegcl encoder (metadata: {exc}); "
                             "export it with edgegcl export") from None
        self._check_graph(p, self.metadata)
        try:  # what onnxruntime runs: the dense stages, bounded (edgegcl_embed.bounds)
            stages = stage_model(model)
            check_bounded(stages)
        except (ModelFormatError, OSError) as exc:
            raise InputError(f"model file {p} cannot be cut into its stages ("
                             f"{first_line(exc)}); re-export it with edgegcl export") from None
        return stages

    @staticmethod
    def _load(model: str | bytes, options: ort.SessionOptions, providers: list[str],
              path: Path) -> ort.InferenceSession:
        """An onnxruntime session of ``model`` (a path, or bytes cut from ``path``)."""
        try:
            return ort.InferenceSession(model, options, providers=providers)
        except Exception as exc:  # onnxruntime raises its own types for unreadable models
            raise InputError(f"model file {path} cannot be loaded by onnxruntime "
                             f"({first_line(exc)}); re-export it with edgegcl export") from None

    def _run(self, outputs: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """``session.run``; an error onnxruntime raises while computing (a model whose ops
        fail on this input or provider) is one InputError line."""
        try:
            return self.session.run(outputs, feeds, self._run_options)
        except Exception as exc:  # onnxruntime's own exception types
            raise InputError(f"onnxruntime failed while running the model ({first_line(exc)}); "
                             "re-export it with edgegcl export, or check the graph") from None

    def _check_graph(self, path: Path, meta: ModelMetadata, cut: bool = False) -> None:
        """A one-line InputError when the session's graph (``cut``: a portable file's stages)
        contradicts ``meta``."""
        problem = meta.graph_problem({i.name: i.shape for i in self.session.get_inputs()},
                                     {o.name: o.shape for o in self.session.get_outputs()},
                                     self._size, cut)
        if problem is not None:
            raise InputError(f"model file {path} does not match its edgegcl metadata "
                             f"({problem}); re-export it with edgegcl export")

    @property
    def kernel(self) -> str:
        """The CSR kernel in use, "numba" or "scipy" (edgegcl_embed.kernels)."""
        return self._kernel

    @kernel.setter
    def kernel(self, kernel: str) -> None:
        self._kernel = resolve_kernel(kernel)
        warm_up(self._kernel)

    def sparse_work(self, x: Features, edge_index: np.ndarray) -> int:
        """Multiply-adds of the CSR products of one whole-graph embedding of (x, edge_index):
        A_hat (at most E + N nonzeros) times each aggregated width, and x's nonzeros times W1's
        width when the first layer runs sparse. Dense stages are not counted."""
        widths = sum(self._idle[aggregate_input(j)].shape[1]
                     for j in range(1, self.metadata.num_layers + 1))
        work = (edge_index.shape[1] + x.shape[0]) * widths
        if self._sparse_first_layer(x):
            nonzeros = x.nnz if issparse(x) else density(x) * x.size
            work += int(nonzeros) * self.stage0_weight.shape[1]
        return int(work)

    def _fetch_stage0_weight(self, path: Path) -> np.ndarray | None:
        """W1 from the cut model's outputs: ``w1``, or an INT8 file's int8 weight
        dequantised as DequantizeLinear does; None when the model has neither."""
        outputs = {o.name for o in self.session.get_outputs()}
        if STAGE0_WEIGHT in outputs:
            w1 = self._run([STAGE0_WEIGHT], self._idle)[0]
        elif outputs.issuperset(STAGE0_WEIGHT_INT8):
            q, scale, zero = self._run(list(STAGE0_WEIGHT_INT8), self._idle)
            w1 = (q.astype(np.int32) - zero.astype(np.int32)).astype(np.float32) * scale
        else:
            return None
        expected = (self.metadata.in_dim, self._widths[stage_output(0, self.metadata.num_layers)])
        if w1.shape != expected or w1.dtype != np.float32 or not np.isfinite(w1).all():
            raise InputError(f"model file {path} has a stage-0 weight of {w1.dtype} "
                             f"{list(w1.shape)}, not finite float32 {list(expected)}; re-export "
                             "it with edgegcl export")
        return np.ascontiguousarray(w1)

    def _sparse_first_layer(self, x: np.ndarray | csr_matrix) -> bool:
        """Whether stage 0 runs as a CSR product on ``x`` (see FIRST_LAYER_MODES)."""
        if self.stage0_weight is None or self.first_layer == "dense":
            return False
        return self.first_layer == "sparse" or use_sparse_product(x, self.metadata.precision)

    def stage(self, j: int, h: np.ndarray, carried: np.ndarray | None = None) -> np.ndarray:
        """Stage j of the model on the float32 rows ``h``, as one run: stage
        0 takes rows of x, stage j >= 1 rows of A_hat z(j-1) (and of the tensor stage j - 1
        carried, when it carries one). Checks and tests read single stages through it (an INT8
        stage quantises ``h`` as one block)."""
        return self.stage_outputs(j, h, carried)[0]

    def carries(self, j: int) -> bool:
        """Whether stage j hands a tensor to stage j + 1 unaggregated."""
        return carry_output(j) in self._widths

    def stage_outputs(self, j: int, h: np.ndarray, carried: np.ndarray | None = None
                      ) -> tuple[np.ndarray, np.ndarray | None]:
        """Stage j's output and its carried output (None when it carries nothing)."""
        feeds = {**self._idle, INPUT_X if j == 0 else aggregate_input(j): h}
        if j > 0 and self.carries(j - 1):
            if carried is None:
                raise ValueError(f"stage {j} takes the tensor stage {j - 1} carries")
            feeds[carry_input(j)] = carried
        names = [stage_output(j, self.metadata.num_layers)]
        if self.carries(j):
            names.append(carry_output(j))
        out = self._run(names, feeds)
        for name, array in zip(names, out):  # row-wise, as wide as declared: never broadcast
            if array.shape != (h.shape[0], self._widths[name]):
                raise InputError(f"the model's stage {j} returned {name} of shape "
                                 f"{list(array.shape)} for {h.shape[0]} rows, not "
                                 f"[{h.shape[0]}, {self._widths[name]}]; re-export it with "
                                 "edgegcl export")
        return out[0], (out[1] if len(out) > 1 else None)

    def _forward(self, inputs: list[np.ndarray | csr_matrix],
                 adj: NormalisedAdjacency | IndexedAdjacency, out: np.ndarray | None,
                 sparse0: bool, plan: Layered | None = None) -> np.ndarray:
        """The encoder on a checked graph with its adjacency, one stage over every row block
        at a time; writes into ``out`` if given.

        ``inputs`` is [x]; it is emptied, so when the caller held no other reference x is
        freed as soon as the first layer no longer needs it. ``sparse0``: stage 0 as a CSR
        product with ``stage0_weight`` (x CSR, or dense and converted per block). ``plan``:
        the blocks, buffers and progress of a graph on disk (``embed_folder``); None: the
        default blocks, stage outputs in memory.
        """
        h = inputs.pop()
        n, k = h.shape[0], self.metadata.num_layers
        if plan is None:
            plan = Layered(default_block_rows(n) if self.device != "cuda" else max(n, 1))
        bounds = block_bounds(n, plan.block_rows)
        pool = self._workers() if self.threads > 1 and len(bounds) > 1 else None
        stages = [j for j in range(k + 1) if j > 0 or self._has_stage0]

        def run_stage(j: int, source: np.ndarray, carried: np.ndarray | None,
                      dest: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
            if dest is None:
                dest = plan.buffer(n, self._widths[stage_output(j, k)])
            carry = (plan.buffer(n, self._widths[carry_output(j)])
                     if self.carries(j) else None)

            def block(lo: int, hi: int) -> None:
                if j == 0 and plan.rows_ahead is not None:
                    plan.rows_ahead(lo, hi)
                if j == 0 and sparse0:
                    sparse_product(source, lo, hi, self.stage0_weight, self.kernel, dest[lo:hi])
                    return
                rows = (dense_rows(source, lo, hi) if j == 0
                        else adj.product(lo, hi, source, self.kernel))
                if rows.dtype != np.float32:  # a graph folder's half-float features
                    rows = rows.astype(np.float32)
                z, r = self.stage_outputs(j, rows, None if carried is None else carried[lo:hi])
                dest[lo:hi] = z
                if carry is not None:
                    carry[lo:hi] = r

            done = stages.index(j) * n
            if pool is None:
                for lo, hi in bounds:
                    block(lo, hi)
                    plan.report(done + hi, len(stages) * n)
            else:
                futures = [pool.submit(block, lo, hi) for lo, hi in bounds]
                try:
                    for future, (_, hi) in zip(futures, bounds):
                        future.result()
                        plan.report(done + hi, len(stages) * n)
                except BaseException:  # Ctrl-C, or a block's error: stop the others now
                    self._stop(futures)
                    raise
            return dest, carry

        carried = None
        if self._has_stage0:
            h, carried = run_stage(0, h, None, None)
        for j in range(1, k + 1):
            h, carried = run_stage(j, h, carried, out if j == k else None)
        return h

    def _stop(self, futures: list[Future]) -> None:
        """Cancel the blocks not started and end the onnxruntime runs in progress
        (``RunOptions.terminate``), then wait for the workers: an interrupted embedding stops
        at once instead of finishing every block."""
        for future in futures:
            future.cancel()
        self._run_options.terminate = True
        try:
            wait(futures)
        finally:
            self._run_options.terminate = False

    def _workers(self) -> ThreadPoolExecutor:
        """The session's worker threads, started on first use and kept until ``close``."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="edgegcl-embed")
        return self._pool

    def close(self) -> None:
        """Stop the worker threads (a later embed starts them again)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __enter__(self) -> EncoderSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def embed(self, x: Features, edge_index: np.ndarray, batch_size: int = 0,
              progress: Callable[[int, int], None] | None = None,
              out: np.ndarray | None = None) -> np.ndarray:
        """Embeddings [num_nodes, out_dim] of every node of the graph (x, edge_index).

        ``x``: dense, or a scipy sparse matrix, which the first layer multiplies over its
        nonzeros when the model exposes W1 (``first_layer``); the numbers agree either way.

        ``batch_size`` 0: the whole graph at once (memory O(N d + E)); B > 0: B target nodes
        per run, each over its k-hop in-neighbourhood with full-graph degrees, which gives the
        same numbers as the whole graph (up to float summation order) with intermediate
        buffers that follow the neighbourhood. ``progress(done, total)`` is called after each
        batch. ``out``: a float32 [num_nodes, out_dim] array (a memory-mapped .npy, say) to
        write the embeddings into; it is returned.
        """
        return self.embed_owned([x, edge_index], batch_size, progress, out)

    def embed_owned(self, graph: list[Features], batch_size: int = 0,
                    progress: Callable[[int, int], None] | None = None,
                    out: np.ndarray | None = None) -> np.ndarray:
        """``embed`` for a caller that hands over ``graph`` = [x, edge_index] and keeps no other
        reference: the list is emptied, and edge_index (once the adjacency is built) and x
        (after the first layer) are freed early, which lowers the peak memory of a large graph.
        """
        return _finite(self._embed_checked(graph, batch_size, progress, out))

    def _embed_checked(self, graph: list[Features], batch_size: int,
                       progress: Callable[[int, int], None] | None,
                       out: np.ndarray | None) -> np.ndarray:
        x, edge_index = check_graph(graph.pop(0), graph.pop(0), self.metadata.in_dim)
        n = x.shape[0]
        if batch_size < 0:
            raise InputError(f"batch size must be >= 0 (0: whole graph), got {batch_size}")
        self._check_out(out, n)
        sparse0 = self._sparse_first_layer(x)
        if issparse(x) and not self._has_stage0:  # A_hat x needs any rows of x: densify it
            x = x.toarray()
        if batch_size == 0 or batch_size >= n:
            adj = NormalisedAdjacency(edge_index, n, kernel=self.kernel)
            del edge_index
            features = [x]
            del x
            return self._forward(features, adj, out, sparse0)
        return self._embed_batches(x, edge_index, batch_size, progress, out, sparse0)

    def embed_folder(self, folder: Folder, batch_size: int = FOLDER_BATCH,
                     progress: Callable[[int, int], None] | None = None,
                     out: np.ndarray | None = None,
                     scratch: str | Path | None = None) -> np.ndarray:
        """Embeddings [num_nodes, out_dim] of every node of a graph folder
        (edgegcl_embed.folder.read_folder), layer by layer: each stage runs over every node,
        ``batch_size`` rows at a time, the aggregation of a block built from the folder's index
        and reading only the rows of the layer before that the block needs. x is read once,
        front to back, where the first layer transforms before it aggregates (gcn); each
        layer between stages goes to an unlinked memory-mapped file in ``scratch`` (default:
        the system's temporary directory; pass a directory on disk, since a tmpfs is memory),
        so memory follows the block, not the graph. Same numbers as ``embed`` of the graph (up
        to float summation order). ``progress(done, total)``: rows done over all stages.
        ``out`` as for ``embed``."""
        n, width = folder.x.shape
        if width != self.metadata.in_dim:
            raise InputError(f"the graph folder's x has {width} features per node but the model "
                             f"expects {self.metadata.in_dim}; pass the features the model was "
                             "trained on")
        if batch_size < 1:
            raise InputError(f"batch size must be >= 1 for a graph folder, got {batch_size}")
        self._check_out(out, n)
        if out is None:
            out = np.empty((n, self.metadata.out_dim), dtype=np.float32)
        adj = IndexedAdjacency(folder.index.in_ptr, folder.index.in_src)
        if folder.prefetch is not None:  # x larger than memory allows: read its rows ahead
            adj.register(folder.x, folder.prefetch)
        features = folder.features
        plan = Layered(batch_size, tempfile.gettempdir() if scratch is None else scratch, adj,
                       None if features is None else
                       lambda lo, hi: features.prefetch(np.arange(lo, hi)), progress)
        return _finite(self._forward([folder.x], adj, out, False, plan))

    def _check_out(self, out: np.ndarray | None, n: int) -> None:
        if out is not None and (out.shape != (n, self.metadata.out_dim)
                                or out.dtype != np.float32):
            raise InputError(f"out must be float32 [{n}, {self.metadata.out_dim}], got "
                             f"{out.dtype} {list(out.shape)}; allocate it for this graph")

    def _embed_batches(self, x: np.ndarray | csr_matrix, edge_index: np.ndarray,
                       batch_size: int, progress: Callable[[int, int], None] | None,
                       out: np.ndarray | None, sparse0: bool) -> np.ndarray:
        """``embed`` in batches of ``batch_size`` target nodes over their k-hop subgraphs."""
        n = x.shape[0]
        hoods, deg = InNeighbourhoods.of(edge_index, n), gcn_degree(edge_index, n)
        relabel = np.zeros(n, dtype=np.int64)  # global -> subgraph id, valid for the batch's nodes
        if out is None:
            out = np.empty((n, self.metadata.out_dim), dtype=np.float32)
        for lo in range(0, n, batch_size):
            targets = np.arange(lo, min(lo + batch_size, n))
            nodes, edges = hoods.khop(targets, self.metadata.num_layers)
            relabel[nodes] = np.arange(nodes.size)
            sub_edges = relabel[edge_index[:, edges]]
            rows = x[nodes]
            z = self._forward([rows], NormalisedAdjacency(
                sub_edges, nodes.size, deg[nodes], self.kernel), None, sparse0)
            out[targets] = z[:targets.size]
            if progress is not None:
                progress(int(targets[-1]) + 1, n)
        return out


FINITE_CHECK_ROWS = 1 << 16


def _finite(z: np.ndarray) -> np.ndarray:
    """``z``, checked finite a block of rows at a time (a mapped output is not read whole):
    NaN or inf weights, or INT8 scales, never exit 0."""
    for lo, hi in block_bounds(z.shape[0], FINITE_CHECK_ROWS):
        if not np.isfinite(z[lo:hi]).all():
            raise InputError("the model computed non-finite embeddings (NaN or inf) from a "
                             "finite graph: its weights or INT8 scales are not finite; "
                             "re-export it with edgegcl export")
    return z
