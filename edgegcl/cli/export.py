"""``edgegcl export OUT.onnx``: a trained encoder to ONNX (and INT8), checked against torch."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from edgegcl.errors import UsageError

if TYPE_CHECKING:
    from torch_geometric.data import Data

    from edgegcl.config import TrainConfig
    from edgegcl.training.checkpoint import Checkpoint

RUNS_DIR = Path("runs")  # where ``edgegcl train`` puts runs without --out (run.prepare_run_dir)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``export`` subcommand."""
    from edgegcl.onnx.export import DEFAULT_OPSET, MAX_OPSET, MIN_OPSET

    p = sub.add_parser(
        "export", help="write a trained encoder to ONNX for torch-free inference",
        description="Export a run's encoder (not the projection head) to ONNX with a dynamic "
                    "number of nodes (its dense stages; the runtime aggregates between them), "
                    "then check onnxruntime against torch on the "
                    "training graph and a random subgraph, and through the runtime's sparse "
                    "first layer when the model has one (max abs difference <= 1e-4).")
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
    p.add_argument("--quantize", choices=["int8"],
                   help="also write OUT.int8.onnx (dynamic INT8) and its report OUT.int8.json")
    p.add_argument("--force", action="store_true", help="overwrite existing output files")
    p.set_defaults(func=_cmd_export)


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


def _outputs(args: argparse.Namespace) -> dict[str, Path]:
    """Every file the command will write, checked before any work: never overwrite unasked."""
    out = Path(args.out)
    paths = {"fp32": out}
    if args.quantize:
        stem = out.name[:-5] if out.name.endswith(".onnx") else out.name
        paths["int8"] = out.with_name(stem + ".int8.onnx")
        paths["report"] = out.with_name(stem + ".int8.json")
    if not out.parent.is_dir():
        raise UsageError(f"directory {out.parent} does not exist; create it or choose another "
                         "output path")
    existing = [str(p) for p in paths.values() if p.exists()]
    if existing and not args.force:
        verb = "exists" if len(existing) == 1 else "exist"
        raise UsageError(f"{', '.join(existing)} already {verb}; pass --force to overwrite "
                         "or choose another output path")
    return paths


def _log(text: str) -> None:
    print(f"edgegcl: {text}", file=sys.stderr, flush=True)


def _training_graph(args: argparse.Namespace, cfg: TrainConfig) -> Data:
    """The graph the encoder was trained on: --graph, else rebuilt from the config."""
    from edgegcl.data import load_graph

    spec = cfg.synthetic_spec()
    try:
        return load_graph(args.graph or cfg.dataset, cfg.root or None, spec)
    except UsageError as exc:
        if args.graph:
            raise
        raise UsageError(f"cannot rebuild the training graph to check the export ({exc}); "
                         "pass it with --graph") from None


def _write(args: argparse.Namespace, paths: dict[str, Path], ckpt_path: Path,
           ckpt: Checkpoint, data: Data) -> list[str]:
    """Export, check and (``--quantize``) quantise into temporaries beside the outputs, which
    replace the outputs only once every check passed (edgegcl_embed.files.replacing: a full
    or read-only disk is one line, and no temporary is left); the lines to print."""
    from edgegcl.onnx.export import check_against_torch, export_encoder
    from edgegcl_embed.files import replacing

    with replacing(list(paths.values()), UsageError, "free space or choose another output "
                   "path (nothing was replaced)") as temps:
        staged = dict(zip(paths, temps))
        _log(f"exporting {ckpt_path} (opset {args.opset})")
        export_encoder(ckpt, staged["fp32"], args.opset)
        _log(f"checking onnxruntime against torch on {data.name} ({data.num_nodes} nodes) "
             "and a random subgraph")
        checks = check_against_torch(staged["fp32"], ckpt.encoder, data.x, data.edge_index)
        summary = "; ".join(f"{c.graph} ({c.nodes} nodes): max abs diff {c.max_abs_diff:.2g}"
                            for c in checks)
        lines = [f"wrote {paths['fp32']} (fp32): onnxruntime vs torch {summary}"]
        if args.quantize:
            from edgegcl.onnx.quantize import int8_report, quantize_int8

            _log("quantising to int8 and comparing embeddings and micro-F1 with fp32")
            quantize_int8(staged["fp32"], staged["int8"])
            report = int8_report(staged["fp32"], staged["int8"], data)
            report.update(fp32_model=str(paths["fp32"]), int8_model=str(paths["int8"]))
            staged["report"].write_text(json.dumps(report, indent=2) + "\n")
            f1 = report.get("micro_f1")
            lines.append(
                f"wrote {paths['int8']} (int8): size x{report['size_ratio']:.2f}, mean cosine "
                f"to fp32 {report['mean_cosine']:.4f}"
                + (f", micro-F1 {f1['fp32']:.2f} -> {f1['int8']:.2f} ({f1['change']:+.2f})"
                   if f1 else " (no labels: micro-F1 not compared)")
                + f"; report {paths['report']}")
    return lines


def _cmd_export(args: argparse.Namespace) -> int:
    from edgegcl.training.checkpoint import load_checkpoint
    from edgegcl.onnx.export import MAX_OPSET, MIN_OPSET, ExportCheckError

    if not MIN_OPSET <= args.opset <= MAX_OPSET:
        raise UsageError(f"--opset must be in {MIN_OPSET}..{MAX_OPSET} (the encoder's ops need "
                         f"{MIN_OPSET}, torch exports up to {MAX_OPSET}), got {args.opset}")
    paths = _outputs(args)
    ckpt_path = _checkpoint_path(args)
    ckpt = load_checkpoint(ckpt_path)
    data = _training_graph(args, ckpt.config)
    if data.x.size(1) != ckpt.in_dim:
        raise UsageError(f"graph {data.name} has {data.x.size(1)} features but the encoder "
                         f"expects {ckpt.in_dim}; pass the training graph with --graph")
    try:
        lines = _write(args, paths, ckpt_path, ckpt, data)
    except ExportCheckError as exc:
        print(f"edgegcl: error: export check failed: {exc}; nothing was written",
              file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0
