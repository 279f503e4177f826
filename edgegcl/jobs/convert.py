"""``edgegcl convert``: any graph ``train`` reads written as a graph folder
(edgegcl.data.folder), with its sampler index, for runs whose memory depends on the batch
alone (docs/graph-folder.md)."""

from __future__ import annotations

import os
from pathlib import Path

from edgegcl.config import choices
from edgegcl.data.config import EdgeReading, SyntheticSpec
from edgegcl.errors import UsageError
from edgegcl.jobs.arguments import flag_argument, path_argument
from edgegcl.progress import say
from edgegcl_embed.errors import shown

STREAMED_TABLES = (".csv", ".tsv")
"""Edge lists converted a chunk of rows at a time (Parquet is read whole)."""


def convert(graph: str | Path, out: str | Path, *, root: str | Path | None = None,
            node_table: str | Path | None = None, half: bool = False,
            edges: str = "auto") -> Path:
    """Write ``graph`` (a dataset name, a graph file, an edge list with its ``node_table``, or
    a graph folder) as a new graph folder ``out``, its features float16 with ``half``, its
    edges as ``edges`` reads them (``[data] edges``: auto, undirected, directed); the
    folder's path. ``out`` must not exist; it appears whole or not at all. A graph folder and
    an uncompressed ``.npz`` (``np.savez``) are read mapped, a chunk at a time; a CSV / TSV
    edge list a chunk of rows at a time (its node table whole); any other graph is read into
    memory first.

    Example:
        >>> import edgegcl
        >>> edgegcl.convert("my_graph.npz", "my_graph")  # doctest: +SKIP
        PosixPath('my_graph')
    """
    name = path_argument("graph", graph)
    target = path_argument("out", out)
    if name is None or target is None:
        raise UsageError("convert needs a graph and an out folder: convert(graph, out)")
    if os.path.lexists(target):  # refused before the graph is read
        raise UsageError(f"{target} already exists; name a new folder with --out")
    if edges not in choices(EdgeReading):
        raise UsageError(f"edges={shown(str(edges), 40)} is not a way to read edges; use one of "
                         f"{', '.join(choices(EdgeReading))}")
    # torch loads here, once the arguments are checked (the CLI's start-up)
    from edgegcl.data.datasets import load_graph
    from edgegcl.data.files import mapped_npz
    from edgegcl.data.folder import write_folder, write_table_folder

    table = path_argument("node_table", node_table)
    if name.suffix.lower() in STREAMED_TABLES:  # out of core: an edge list larger than memory
        say(f"writing {name.name} as the graph folder {target}, a chunk of its rows at a time")
        return write_table_folder(name.expanduser(), target, half=flag_argument("half", half),
                                  node_table=None if table is None else table.expanduser(),
                                  reading=edges)
    data = (mapped_npz(name.expanduser()) if name.suffix.lower() == ".npz" and table is None
            and edges != "undirected" else None)  # mapped: a chunk in memory at a time
    if data is None:
        data = load_graph(str(name), path_argument("root", root), SyntheticSpec(), table, edges)
    say(f"writing {data.name} ({data.num_nodes} nodes, {data.edge_index.size(1)} edges) as "
        f"the graph folder {target}")
    return write_folder(data, target, half=flag_argument("half", half))
