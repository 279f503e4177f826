"""``edgegcl convert GRAPH --out DIR``: a graph written as a graph folder
(edgegcl.jobs.convert)."""

from __future__ import annotations

import argparse

from edgegcl.config import choices
from edgegcl.data.config import EdgeReading
from edgegcl.jobs.convert import convert

DESCRIPTION = ("Write any graph train reads (a dataset name, a .pt / .npz file, an edge list "
               "with --node-table, a graph folder) as a graph folder: plain .npy files, a "
               "metadata.json and the sampler's index, which train, export and edgegcl-embed "
               "read memory-mapped, so a run's memory depends on its batch, not on the graph "
               "(docs/graph-folder.md).")


def add_options(p: argparse.ArgumentParser) -> None:
    """``convert``'s options: the graph, the folder to write, the features' type."""
    p.add_argument("graph", metavar="GRAPH", help="a dataset name, graph file or graph folder")
    p.add_argument("--out", metavar="DIR", required=True,
                   help="the graph folder to write (must not exist)")
    p.add_argument("--root", metavar="DIR", help="where a named dataset is read")
    p.add_argument("--node-table", metavar="NODES.csv",
                   help="with a CSV / TSV / Parquet edge list: its node table")
    p.add_argument("--edges", choices=choices(EdgeReading), default="auto",
                   help="how the graph's edges are read, as train's --edges: auto (an edge "
                        "table and the heterophilous-graph benchmark's .npz both ways, "
                        "edgegcl's edge_index as stored), undirected (each edge both ways) or "
                        "directed (as stored, one way); the folder keeps them as read")
    p.add_argument("--half", action="store_true",
                   help="store the features as float16 (half the storage; steps compute in "
                        "float32)")


def run(args: argparse.Namespace) -> int:
    """``edgegcl convert`` with its parsed ``args``; the exit code."""
    print(convert(args.graph, args.out, root=args.root, node_table=args.node_table,
                  half=args.half, edges=args.edges))
    return 0
