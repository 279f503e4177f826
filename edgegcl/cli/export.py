"""``edgegcl export OUT.onnx``: the options and which checkpoint; the export itself, its checks
and its files are ``edgegcl.onnx.export.export_checkpoint``'s."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from edgegcl.errors import UsageError

RUNS_DIR = Path("runs")  # where ``edgegcl train`` puts runs without --out (run.prepare_run_dir)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``export`` subcommand; its options (which import torch and onnx, for the
    opset range) are added when it is parsed (edgegcl.cli.main._Parser)."""
    p = sub.add_parser(
        "export", help="write a trained encoder to ONNX for torch-free inference",
        description="Export a run's encoder (not the projection head) to a portable ONNX model "
                    "(inputs x and edge_index, output embeddings, standard ops: any ONNX "
                    "runtime runs it alone; edgegcl-embed cuts it into its dense stages), then "
                    "check it against torch on the training graph and a random subgraph, run by "
                    "onnxruntime alone and by edgegcl-embed's runtime (dense and sparse first "
                    "layer): max abs difference <= 1e-4.",
        options=_options)
    p.set_defaults(func=_cmd_export)


def _options(p: argparse.ArgumentParser) -> None:
    from edgegcl.onnx.opset import DEFAULT_OPSET, MAX_OPSET, MIN_OPSET

    p.add_argument("out", metavar="OUT.onnx", help="the model file to write")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--run", metavar="RUN_DIR",
                        help=f"a run directory (default: the most recent under {RUNS_DIR}/)")
    source.add_argument("--checkpoint", metavar="FILE", help="a checkpoint.pt")
    p.add_argument("--graph", metavar="GRAPH",
                   help="the training graph (dataset name, .npz or .pt), when the checkpoint's "
                        "config cannot rebuild it")
    p.add_argument("--opset", type=int, default=DEFAULT_OPSET,
                   help=f"ONNX opset, {MIN_OPSET}..{MAX_OPSET} (default: {DEFAULT_OPSET})")
    p.add_argument("--graph-out", metavar="GRAPH.npz",
                   help="also write the training graph as edgegcl-embed reads it (x, or a sparse "
                        "x as CSR arrays, and edge_index)")
    p.add_argument("--quantize", choices=["int8"],
                   help="also write OUT.int8.onnx (dynamic INT8) and its report OUT.int8.json")
    p.add_argument("--encoder", metavar="FILE.py:FN|module:FN",
                   help="the encoder the checkpoint names (its code runs to rebuild it): a "
                        "checkpoint that names one is refused unless you name the same here")
    p.add_argument("--force", action="store_true",
                   help="overwrite existing output files (without it, an existing OUT that is "
                        "this checkpoint's fp32 export is reused by --quantize and --graph-out)")


def latest_run(runs_dir: Path) -> Path:
    """The run directory under ``runs_dir`` whose checkpoint.pt was written last."""
    found = sorted(runs_dir.glob("*/checkpoint.pt"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise UsageError(f"no run with a checkpoint.pt under {runs_dir}/; train one with "
                         "edgegcl train or pass --run DIR / --checkpoint FILE")
    return found[-1].parent


def _checkpoint_path(args: argparse.Namespace) -> Path:
    if args.checkpoint:
        return Path(args.checkpoint)
    run = Path(args.run) if args.run else latest_run(RUNS_DIR)
    if not args.run:
        print(f"edgegcl: exporting the most recent run, {run} (choose another with --run)",
              file=sys.stderr)
    if not (run / "checkpoint.pt").is_file():
        raise UsageError(f"{run} has no checkpoint.pt; pass a run directory written by "
                         "edgegcl train")
    return run / "checkpoint.pt"


def _cmd_export(args: argparse.Namespace) -> int:
    from edgegcl.onnx.opset import MAX_OPSET, MIN_OPSET

    if not MIN_OPSET <= args.opset <= MAX_OPSET:  # refused before torch loads
        raise UsageError(f"--opset must be in {MIN_OPSET}..{MAX_OPSET} (the encoder's ops need "
                         f"{MIN_OPSET}, torch exports up to {MAX_OPSET}), got {args.opset}")
    from edgegcl.onnx.export import (ExportCheckError, ExportPlan, export_checkpoint,
                                     training_graph)
    from edgegcl.training.checkpoint import load_checkpoint
    from edgegcl.trust import allow_encoder

    plan = ExportPlan(Path(args.out), args.quantize,
                      Path(args.graph_out) if args.graph_out else None, args.force)
    plan.paths()  # refused before any work
    ckpt_path = _checkpoint_path(args)
    if args.encoder:
        allow_encoder(args.encoder)
    ckpt = load_checkpoint(ckpt_path)
    data = training_graph(ckpt.config, args.graph)
    try:
        lines = export_checkpoint(ckpt, plan, data, args.opset, str(ckpt_path),
                                  log=lambda text: print(f"edgegcl: {text}", file=sys.stderr,
                                                         flush=True))
    except ExportCheckError as exc:
        print(f"edgegcl: error: export check failed: {exc}; nothing was written",
              file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0
