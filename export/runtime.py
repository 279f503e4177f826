"""Embedding graphs with an exported encoder through onnxruntime, whole or in node batches."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .contract import INPUT_DEG, INPUT_EDGE_INDEX, INPUT_X, OUTPUT, ModelMetadata
from .errors import InputError
from .graph import InNeighbourhoods, check_graph, gcn_degree

# Graphs up to this many nodes are embedded in one run by default; larger ones in batches of
# DEFAULT_BATCH_SIZE target nodes, so memory follows the batch's k-hop neighbourhood, not N.
FULL_GRAPH_MAX_NODES = 100_000
DEFAULT_BATCH_SIZE = 4096


class EncoderSession:
    """An exported encoder, opened for inference, with its ``edgegcl.*`` metadata."""

    def __init__(self, path: str | Path) -> None:
        """Open ``path``; a missing, corrupt or foreign model file is a one-line InputError.

        The session runs on one thread: onnxruntime's CPU ScatterND splits its updates over
        threads without guarding rows that several edges add into, so with more than one
        thread a node's sum can lose messages (onnxruntime issue #18048; measured here: max
        error 0.06 on a 3000-node graph with two threads, 0 with one).
        """
        p = Path(path)
        if not p.is_file():
            raise InputError(f"model file {p} does not exist; pass a .onnx written by "
                             "edgegcl export")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(str(p), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own types for unreadable models
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise InputError(f"model file {p} cannot be loaded by onnxruntime ({first[:200]}); "
                             "re-export it with edgegcl export") from None
        props = self.session.get_modelmeta().custom_metadata_map
        try:
            self.metadata = ModelMetadata.from_props(props)
        except (KeyError, ValueError) as exc:
            raise InputError(f"model file {p} is not an edgegcl encoder (metadata: {exc}); "
                             "export it with edgegcl export") from None
        names = {i.name for i in self.session.get_inputs()}
        if names != {INPUT_X, INPUT_EDGE_INDEX, INPUT_DEG}:
            raise InputError(f"model file {p} has inputs {sorted(names)}, not x, edge_index, deg; "
                             "re-export it with edgegcl export")

    def run(self, x: np.ndarray, edge_index: np.ndarray, deg: np.ndarray) -> np.ndarray:
        """One onnxruntime call on an already validated graph (or subgraph) with given degrees."""
        return self.session.run([OUTPUT], {INPUT_X: x, INPUT_EDGE_INDEX: edge_index,
                                           INPUT_DEG: deg})[0]

    def embed(self, x: np.ndarray, edge_index: np.ndarray, batch_size: int | None = None,
              progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """Embeddings [num_nodes, out_dim] of every node of the graph (x, edge_index).

        ``batch_size`` None: the whole graph at once up to FULL_GRAPH_MAX_NODES nodes, batches
        of DEFAULT_BATCH_SIZE above; 0: the whole graph; B > 0: B target nodes per run, each
        over its k-hop in-neighbourhood with full-graph degrees, which gives the same numbers
        as the whole graph (up to float summation order). ``progress(done, total)`` is called
        after each batch (batched mode only).
        """
        x, edge_index = check_graph(x, edge_index, self.metadata.in_dim)
        n = x.shape[0]
        deg = gcn_degree(edge_index, n)
        if batch_size is None:
            batch_size = 0 if n <= FULL_GRAPH_MAX_NODES else DEFAULT_BATCH_SIZE
        if batch_size < 0:
            raise InputError(f"batch size must be >= 0 (0: whole graph), got {batch_size}")
        if batch_size == 0 or batch_size >= n:
            return self.run(x, edge_index, deg)
        hoods = InNeighbourhoods(edge_index, n)
        relabel = np.zeros(n, dtype=np.int64)  # global -> subgraph id, valid for the batch's nodes
        out = np.empty((n, self.metadata.out_dim), dtype=np.float32)
        for lo in range(0, n, batch_size):
            targets = np.arange(lo, min(lo + batch_size, n))
            nodes, edges = hoods.khop(targets, self.metadata.num_layers)
            relabel[nodes] = np.arange(nodes.size)
            z = self.run(x[nodes], relabel[edge_index[:, edges]], deg[nodes])
            out[targets] = z[:targets.size]
            if progress is not None:
                progress(int(targets[-1]) + 1, n)
        return out
