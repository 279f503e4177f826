"""``edgegcl export OUT.onnx``: its options, parsed and passed to ``edgegcl.export``
(edgegcl.jobs.export)."""

from __future__ import annotations

import argparse
import sys

from edgegcl.errors import ExportCheckError
from edgegcl.jobs.export import export
from edgegcl.onnx.opset import DEFAULT_OPSET, MAX_OPSET, MIN_OPSET
from edgegcl_embed.errors import one_line

DESCRIPTION = ("Export a run's encoder (not the projection head) to a portable ONNX model "
               "(inputs x and edge_index, output embeddings, standard ops: any ONNX runtime runs "
               "it alone; edgegcl-embed cuts it into its dense stages), then check it against "
               "torch on the training graph and a random subgraph, run by onnxruntime alone and "
               "by edgegcl-embed's runtime (dense and sparse first layer): max abs difference "
               "<= 1e-4.")


def add_options(p: argparse.ArgumentParser) -> None:
    """``export``'s options: the model file, where the encoder comes from, the graph, the
    opset, the extra files."""
    p.add_argument("out", metavar="OUT.onnx", help="the model file to write")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--run", metavar="RUN_DIR",
                        help="a run directory (default: the most recent under runs/)")
    source.add_argument("--checkpoint", metavar="FILE", help="a checkpoint.pt")
    p.add_argument("--graph", metavar="GRAPH",
                   help="the training graph (dataset name, .npz or .pt), when the checkpoint's "
                        "config cannot rebuild it, or a graph file the checkpoint names")
    p.add_argument("--root", metavar="DIR",
                   help="where a named dataset is read (the root the checkpoint records is "
                        "used only when passed here; default: $EDGEGCL_DATA or "
                        "~/.cache/edgegcl/datasets)")
    p.add_argument("--opset", type=int, default=DEFAULT_OPSET,
                   help=f"ONNX opset, {MIN_OPSET}..{MAX_OPSET} (default: {DEFAULT_OPSET})")
    p.add_argument("--node-table", metavar="NODES.csv",
                   help="with a CSV / TSV / Parquet edge list as --graph: its node table (id, "
                        "feature columns, label)")
    p.add_argument("--graph-out", metavar="GRAPH.npz",
                   help="also write the training graph as edgegcl-embed reads it (x, or a sparse "
                        "x as CSR arrays, and edge_index)")
    p.add_argument("--scorer", metavar="SCORER.onnx",
                   help="also write the run's link scorer, for a run that learned from the "
                        "edges (--task link): its trained link decoder as an ONNX model, "
                        "inputs z_u and z_v (two nodes' embeddings, float32 [pairs, out_dim]), "
                        "output logits [pairs]")
    p.add_argument("--quantize", choices=["int8"],
                   help="also write OUT.int8.onnx (dynamic INT8) and its report OUT.int8.json")
    p.add_argument("--encoder", metavar="FILE.py:FN|module:FN",
                   help="the encoder the checkpoint names (its code runs to rebuild it): a "
                        "checkpoint that names one is refused unless you name the same here")
    p.add_argument("--force", action="store_true",
                   help="overwrite existing output files (without it, an existing OUT that is "
                        "this checkpoint's fp32 export is reused by --quantize and --graph-out)")


def run(args: argparse.Namespace) -> int:
    """``edgegcl export`` with its parsed ``args``; the exit code."""
    try:
        lines = export(args.out, run=args.run, checkpoint=args.checkpoint, graph=args.graph,
                       node_table=args.node_table,
                       root=args.root, opset=args.opset, graph_out=args.graph_out,
                       quantize=args.quantize, encoder=args.encoder, force=args.force,
                       scorer=args.scorer,
                       log=lambda text: print(f"edgegcl: {text}", file=sys.stderr, flush=True))
    except ExportCheckError as exc:
        print(f"edgegcl: error: export check failed: {one_line(str(exc))}; nothing was written",
              file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0
