"""``edgegcl-embed MODEL.onnx --graph GRAPH.npz --out EMB.npy``: embeddings without torch.

Needs numpy, scipy and onnxruntime. The model is an ``edgegcl export`` file (one portable graph,
which the runtime cuts into its dense stages: ``edgegcl_embed.contract``). The graph
file holds ``x`` (or a sparse x as CSR arrays, ``graph.save_npz``, which the first layer
multiplies over its nonzeros only) and ``edge_index``; edgegcl_embed/README.md lists its keys. Bad
input (model, graph, paths) prints one line ``edgegcl-embed: error: ...`` and exits with code
2; nothing is written then. The embeddings are written through a memory-mapped .npy
under a temporary name, renamed when complete.
"""

from __future__ import annotations

import argparse
import errno
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from .errors import InputError, first_line, one_line, shown
from .files import npy_writer, refuse_inputs_as_outputs, replacing
from .graph import EDGE_READINGS, check_graph, load_npz
from .interrupt import forget_handled_interrupt
from .kernels import KERNELS, one_shot_kernel
from .progress import Progress
from .folder import is_graph_folder, read_folder
from .cores import available_cores
from .runtime import FOLDER_BATCH, EncoderSession
from .tables import TABLE_SUFFIXES, read_tables

PROG = "edgegcl-embed"


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line with exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {one_line(message)} (see '{PROG} --help')\n")

def _progress_printer(every_s: float = 5.0) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` callback: a progress line with an ETA on stderr
    (``edgegcl_embed.progress``), redrawn on a terminal, else at most every ``every_s`` s."""
    line: list[Progress] = []

    def report(done: int, total: int) -> None:
        if not line:
            line.append(Progress(total, f"{PROG}: embedding", every_s=every_s))
        line[0].update(done)
        if done >= total:
            line[0].close()

    return report

def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = _Parser(prog=PROG, description="Embed a graph's nodes with an encoder exported by "
                                       "'edgegcl export' (numpy + onnxruntime only).")
    p.add_argument("model", metavar="MODEL.onnx", help="the exported encoder (fp32 or int8)")
    p.add_argument("--graph", required=True, metavar="GRAPH.npz",
                   help="arrays x [num_nodes, in_dim] (or a sparse x as CSR arrays x_data, "
                        "x_indices, x_indptr, x_shape) and edge_index [2, num_edges]; or a "
                        "graph folder (edgegcl convert), read memory-mapped a batch at a time")
    p.add_argument("--node-table", default=None, metavar="NODES.csv",
                   help="with a CSV / TSV / Parquet edge list as --graph: its node table (id, "
                        "feature columns, label), read as edgegcl train reads it")
    p.add_argument("--edges", choices=EDGE_READINGS, default=None,
                   help="how the graph's edges are read, as edgegcl train's --edges: auto (an "
                        "edge table and the heterophilous-graph benchmark's .npz both ways, "
                        "edge_index as stored), undirected (each edge both ways) or directed "
                        "(as stored, one way); default: as the model's training run read "
                        "them (its --edges, recorded in the model); a graph folder's as it "
                        "was converted")
    p.add_argument("--out", required=True, metavar="EMB.npy",
                   help="where to write the float32 embeddings [num_nodes, out_dim]; for an "
                        "edge list, each row's node id goes to EMB.ids.txt beside it")
    p.add_argument("--batch-size", type=int, default=0, metavar="B",
                   help="target nodes per run over their k-hop subgraph (default 0: the whole "
                        "graph, memory O(nodes x width + edges)); a graph folder is embedded "
                        f"layer by layer, B rows at a time (default {FOLDER_BATCH}), its layers "
                        "in files beside --out")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help=f"worker threads (default: every core, {available_cores()} here); the "
                        "result does not depend on N")
    p.add_argument("--kernel", choices=KERNELS, default="auto",
                   help="the CSR product: numba's compiled loop or scipy's; auto: numba's when "
                        "the graph is large enough to repay its start-up (about 0.5 s) and it "
                        "is the faster here (timed once); the numbers agree to float32 rounding")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    return p.parse_args(argv)

def ids_path(out: Path) -> Path:
    """Where the node ids of an edge list's embeddings go: ``EMB.ids.txt`` beside ``EMB.npy``."""
    return out.with_name(out.stem + ".ids.txt")


def _embed(args: argparse.Namespace) -> None:
    out = Path(args.out)
    inputs = [Path(args.model), Path(args.graph),
              *([] if args.node_table is None else [Path(args.node_table)])]
    refuse_inputs_as_outputs([out, ids_path(out)], inputs)
    for target in (out, *([ids_path(out)] if Path(args.graph).suffix.lower() in
                          TABLE_SUFFIXES else [])):
        if target.exists() and not args.force:
            raise InputError(f"{target} already exists; pass --force to overwrite it or choose "
                             "another --out")
    if not out.parent.is_dir():
        raise InputError(f"directory {out.parent} does not exist; create it or choose "
                         "another --out")
    if args.batch_size < 0:
        raise InputError(f"--batch-size must be >= 0 (0: whole graph), got {args.batch_size}")
    # one embedding per process: numba's start is paid only where the graph repays it
    session = EncoderSession(args.model, threads=args.threads,
                             kernel="scipy" if args.kernel == "auto" else args.kernel)
    tables = Path(args.graph).suffix.lower() in TABLE_SUFFIXES
    if args.node_table is not None and not tables:
        raise InputError("--node-table goes with a CSV / TSV / Parquet edge list as --graph; "
                         "drop it")
    if is_graph_folder(args.graph):  # on disk: a batch of targets at a time, mapped
        if args.edges == "undirected":
            raise InputError(f"{args.graph} is a graph folder, whose edges are read as they were "
                             "converted; convert the graph again with --edges undirected, or "
                             "drop --edges")
        folder = read_folder(args.graph, labels=False, say=lambda text: print(
            f"{PROG}: {text}", file=sys.stderr))
        session.metadata.feature_columns.check_in_place(folder.feature_columns,
                                                        f"graph folder {args.graph}")
        shape = (folder.num_nodes, session.metadata.out_dim)
        start = time.perf_counter()
        with npy_writer(out, shape) as emb:
            # the layers between stages go beside the output, on the disk it is written to
            session.embed_folder(folder, args.batch_size or FOLDER_BATCH, _progress_printer(),
                                 out=emb, scratch=out.parent)
        _wrote(out, shape, session, start)
        return
    ids = None
    reading = session.metadata.edges if args.edges is None else args.edges  # as trained
    if tables:
        read = read_tables(args.graph, args.node_table, reading)
        where = (f"node table {args.node_table}" if args.node_table is not None
                 else f"edge list {args.graph}")  # its features: the model's, by column name
        x = session.metadata.feature_columns.conform(read.feature_columns, read.x, where)
        ids, graph = read.ids, list(check_graph(x, read.edge_index, session.metadata.in_dim))
        del x, read  # the runtime takes the only references (below)
    else:
        graph = list(check_graph(*load_npz(args.graph, reading), session.metadata.in_dim))
    session.kernel = one_shot_kernel(args.kernel, session.sparse_work(*graph))
    shape = (graph[0].shape[0], session.metadata.out_dim)
    start = time.perf_counter()
    with npy_writer(out, shape) as emb:
        # the runtime takes the only references to x and edge_index, and frees them early
        session.embed_owned(graph, args.batch_size, _progress_printer(), out=emb)
    if ids is not None:  # row i is the node named on line i
        with replacing([ids_path(out)]) as (tmp,):
            tmp.write_text("".join(f"{i}\n" for i in ids), encoding="utf-8")
    _wrote(out, shape, session, start)


def _wrote(out: Path, shape: tuple[int, int], session: EncoderSession, start: float) -> None:
    """The line saying what was written, how fast and how."""
    print(f"{PROG}: wrote {shape[0]} x {shape[1]} embeddings to {out} "
          f"({time.perf_counter() - start:.2f} s, {session.metadata.precision}, "
          f"{session.threads} thread{'s' if session.threads > 1 else ''}, "
          f"{session.kernel} kernel)", file=sys.stderr)

def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``edgegcl-embed`` and ``python -m edgegcl_embed.embed``."""
    try:
        args = _parse(argv)
        _embed(args)
    except InputError as exc:
        print(f"{PROG}: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path the system refuses (a name too long, a loop of links)
        if exc.errno not in (errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR):
            raise
        print(f"{PROG}: error: the path {shown(str(exc.filename), 80)} cannot be used "
              f"({exc.strerror}); pass a shorter or plain path", file=sys.stderr)
        return 2
    except RecursionError:
        print(f"{PROG}: error: an input file is nested too deeply to be read; check the files "
              "you passed", file=sys.stderr)
        return 2
    except MemoryError as exc:  # numpy and scipy name the size they asked for
        said = first_line(exc) if str(exc).strip() else "an allocation failed"
        print(f"{PROG}: error: out of memory ({said}); free memory, or embed in batches "
              "(--batch-size) or from a graph folder (edgegcl convert), read a batch at a time",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        forget_handled_interrupt()
        return 130
    return 0

if __name__ == "__main__":
    sys.exit(main())
