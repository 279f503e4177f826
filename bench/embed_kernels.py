"""Cache-aware ways to run the runtime's sparse products, side by side with its own kernel.

The aggregation A_hat H gathers one source row of H per stored entry; on a graph whose node
ids carry no locality those gathers come in random order from a table larger than the cache.
Measured here on the benchmark graph, one thread, every variant timed once per round
(interleaved, so a drift of the machine falls on all), at the two widths the encoder
aggregates at (128 and 256):

- ``kernel``: the runtime's CSR loop (edgegcl_embed.kernels, numba's);
- ``columns-B``: column blocks of B floats, the table first copied block-major, so that a
  pass gathers from a B-wide table that fits the cache (the copy is timed with it);
- ``rcm``: the graph and the table relabelled in reverse Cuthill-McKee order, then the
  runtime's kernel; ``rcm+relabel`` adds computing the order and permuting the table and the
  output back, which one embedding must pay.

    python -m bench.embed_kernels --nodes 100000 --rounds 5

Writes bench/results/embed-kernels.{json,md}. Run it alone: it is a timing.
"""

from __future__ import annotations

import sys
from typing import Any

from bench import harness

WIDTHS = (128, 256)
BLOCKS = (16, 32, 64)


def _column_kernel() -> Any:
    """The column-blocked CSR product, compiled: ``hb`` is [blocks, n, B] (block-major)."""
    import numba

    @numba.njit(nogil=True, cache=True)
    def columns(data: Any, indices: Any, indptr: Any, hb: Any, out: Any) -> None:
        nb, _, width = hb.shape
        for b in range(nb):
            table = hb[b]
            b0 = b * width
            for i in range(indptr.shape[0] - 1):
                row = out[i, b0:b0 + width]
                row[:] = 0
                for jj in range(indptr[i], indptr[i + 1]):
                    a = data[jj]
                    src = table[indices[jj]]
                    for k in range(width):
                        row[k] += a * src[k]
    return columns


def measure(nodes: int, rounds: int) -> dict[str, Any]:
    """Every variant's median seconds per width on a synthetic graph of ``nodes`` nodes
    (average degree 10), and the largest difference of each to the kernel's output."""
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    from edgegcl.data import SyntheticSpec, synthetic_graph
    from edgegcl_embed.adjacency import NormalisedAdjacency
    from edgegcl_embed.kernels import csr_rows_product, resolve_kernel

    kernel = resolve_kernel("numba")
    data = synthetic_graph(SyntheticSpec(num_nodes=nodes, num_classes=10, num_features=8))
    edge_index = data.edge_index.numpy()
    adj = NormalisedAdjacency(edge_index, nodes, kernel=kernel)
    a = csr_matrix((adj.data, adj.indices, adj.indptr), shape=(nodes, nodes))

    def order() -> Any:
        return reverse_cuthill_mckee(a, symmetric_mode=True).astype(np.int64)
    perm = order()
    inverse = np.empty_like(perm)
    inverse[perm] = np.arange(nodes)
    relabelled = NormalisedAdjacency(inverse[edge_index], nodes, kernel=kernel)
    columns = _column_kernel()
    rng = np.random.default_rng(0)
    calls: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    for width in WIDTHS:
        h = rng.standard_normal((nodes, width), dtype=np.float32)
        h_rcm = h[perm]
        out = {name: np.empty((nodes, width), np.float32)
               for name in ("kernel", "rcm", "rcm+relabel", *(f"columns-{b}" for b in BLOCKS))}
        outputs[width] = out

        def plain(h: Any = h, out: Any = out) -> None:
            csr_rows_product(kernel, adj.data, adj.indices, adj.indptr, 0, nodes, h,
                             out["kernel"])

        def rcm(h_rcm: Any = h_rcm, out: Any = out) -> None:
            csr_rows_product(kernel, relabelled.data, relabelled.indices, relabelled.indptr, 0,
                             nodes, h_rcm, out["rcm"])

        def rcm_whole(h: Any = h, out: Any = out) -> None:
            p = order()
            inv = np.empty_like(p)
            inv[p] = np.arange(nodes)
            g = NormalisedAdjacency(inv[edge_index], nodes, kernel=kernel)
            z = csr_rows_product(kernel, g.data, g.indices, g.indptr, 0, nodes, h[p])
            out["rcm+relabel"][p] = z

        calls.update({f"{width} kernel": plain, f"{width} rcm": rcm,
                      f"{width} rcm+relabel": rcm_whole})
        for b in BLOCKS:
            def blocked(h: Any = h, out: Any = out, b: int = b) -> None:
                hb = np.ascontiguousarray(h.reshape(nodes, -1, b).transpose(1, 0, 2))
                columns(adj.data, adj.indices, adj.indptr, hb, out[f"columns-{b}"])
            calls[f"{width} columns-{b}"] = blocked
    seconds = harness.interleaved_medians(calls, rounds)
    diff = {}
    for width, out in outputs.items():
        ref = out["kernel"]
        for name, z in out.items():
            back = z[inverse] if name == "rcm" else z  # rcm's rows are in the new order
            diff[f"{width} {name}"] = float(np.abs(back - ref).max())
    return {"nodes": nodes, "edges": int(edge_index.shape[1]), "seconds": seconds,
            "max_difference": diff}


def report(res: dict[str, Any]) -> str:
    lines = [f"# Cache-aware sparse products against the runtime's kernel ({res['nodes']} "
             "nodes)", "", *harness.header(res),
             f"Synthetic planted-class graph, {res['nodes']} nodes, {res['edges']} edges, one "
             "thread, median of the rounds, every variant timed once per round side by side "
             "(bench/embed_kernels.py says what each is). 'max diff' is the largest difference "
             "to the kernel's output (rcm's rows mapped back).", "",
             "| width | variant | ms | / kernel | max diff |", "|---|---|---|---|---|"]
    for key, s in res["seconds"].items():
        width, name = key.split(" ", 1)
        base = res["seconds"][f"{width} kernel"]
        lines.append(f"| {width} | {name} | {1000 * s:.1f} | {s / base:.2f} | "
                     f"{res['max_difference'][key]:.1e} |")
    return "\n".join([*lines, ""])


def main() -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--name", default="embed-kernels",
                   help="results file name in bench/results (.json and .md)")
    args = p.parse_args()
    res = harness.record("embed_kernels", sys.argv[1:])
    res.update(measure(args.nodes, args.rounds))
    res["wall_min"] = harness.wall_min(res)
    harness.write(args.name, res, report(res))
    print(report(res))


if __name__ == "__main__":
    main()
