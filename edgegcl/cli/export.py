"""``edgegcl export OUT.onnx``: a trained encoder to ONNX (and INT8), checked against torch."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from edgegcl.errors import UsageError

if TYPE_CHECKING:
    from torch_geometric.data import Data

    from edgegcl.training.config import TrainConfig
    from edgegcl.training.checkpoint import Checkpoint

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
    from edgegcl.onnx.export import DEFAULT_OPSET, MAX_OPSET, MIN_OPSET

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


def _outputs(args: argparse.Namespace) -> dict[str, Path]:
    """Every file the command may write, checked before any work: never overwrite unasked.

    When the command also writes other files (``_reusable``), an existing OUT is left for
    ``_reuse`` to check rather than refused here.
    """
    out = Path(args.out)
    paths = {"fp32": out}
    if args.quantize:
        stem = out.name[:-5] if out.name.endswith(".onnx") else out.name
        paths["int8"] = out.with_name(stem + ".int8.onnx")
        paths["report"] = out.with_name(stem + ".int8.json")
    if args.graph_out:
        paths["graph"] = Path(args.graph_out)
    if len({os.path.realpath(p) for p in paths.values()}) < len(paths):  # sub/../m.onnx too
        raise UsageError(f"--graph-out {args.graph_out} is one of the model files; choose "
                         "another path")
    for path in dict.fromkeys(p.parent for p in paths.values()):
        if not path.is_dir():
            raise UsageError(f"directory {path} does not exist; create it or choose another "
                             "output path")
    existing = [str(p) for name, p in paths.items() if p.exists()
                and not (name == "fp32" and _reusable(args))]
    if existing and not args.force:
        verb = "exists" if len(existing) == 1 else "exist"
        raise UsageError(f"{', '.join(existing)} already {verb}; pass --force to overwrite "
                         "or choose another output path")
    return paths


def _reusable(args: argparse.Namespace) -> bool:
    """Whether an existing OUT may serve instead of a new export: the command also writes
    other files (``--quantize``, ``--graph-out``) and ``--force`` does not ask for a new one."""
    return bool(args.quantize or args.graph_out) and not args.force


def _reuse(path: Path, ckpt: Checkpoint, data: Data) -> str:
    """Why the existing ``path`` can be used instead of exported again (the line to print):
    it is a portable fp32 export of ``ckpt``'s configuration that computes its encoder (the
    export check, against torch). Anything else is a UsageError."""
    from edgegcl.onnx.export import ExportCheckError, check_against_torch, config_digest
    from edgegcl_embed.contract import PORTABLE
    from edgegcl_embed.errors import InputError
    from edgegcl_embed.runtime import EncoderSession

    fix = "pass --force to export it again, or choose another output path"
    try:
        meta = EncoderSession(path, threads=1, kernel="scipy").metadata
    except InputError as exc:  # its message without the runtime's own fix
        raise UsageError(f"{path} exists and cannot be reused: {str(exc).rsplit('; ', 1)[0]}; "
                         f"{fix}") from None
    if meta.interface != PORTABLE or meta.precision != "fp32":
        raise UsageError(f"{path} exists and is an edgegcl interface-{meta.interface} "
                         f"{meta.precision} model, not a portable (interface {PORTABLE}) fp32 "
                         f"export; {fix}")
    if meta.config_sha256 != config_digest(ckpt.config) or meta.in_dim != ckpt.in_dim:
        raise UsageError(f"{path} exists and was exported from another training "
                         f"configuration (config_sha256 {meta.config_sha256[:12]}...); {fix}")
    try:
        checks = check_against_torch(path, ckpt.encoder, data.x, data.edge_index)
    except ExportCheckError as exc:
        raise UsageError(f"{path} exists and does not compute this checkpoint's encoder "
                         f"({exc}); {fix}") from None
    worst = max(c.max_abs_diff for c in checks)
    return f"reusing {path} (fp32, this checkpoint's encoder: max abs diff to torch {worst:.2g})"


def _log(text: str) -> None:
    print(f"edgegcl: {text}", file=sys.stderr, flush=True)


def _training_graph(args: argparse.Namespace, cfg: TrainConfig) -> Data:
    """The graph the encoder was trained on: --graph, else rebuilt from the config."""
    from edgegcl.data import load_graph

    spec = cfg.synthetic_spec()
    try:
        return load_graph(args.graph or cfg.data.dataset, cfg.data.root or None, spec)
    except UsageError as exc:
        if args.graph:
            raise
        raise UsageError(f"cannot rebuild the training graph to check the export ({exc}); "
                         "pass it with --graph") from None


def _write(args: argparse.Namespace, paths: dict[str, Path], ckpt_path: Path,
           ckpt: Checkpoint, data: Data) -> list[str]:
    """Export, check and (``--quantize``) quantise into temporaries beside the outputs, which
    replace the outputs only once every check passed (edgegcl_embed.files.replacing: a full
    or read-only disk is one line, and no temporary is left); the lines to print. An existing
    fp32 export of this checkpoint is quantised as it is (``_reuse``)."""
    import scipy.sparse
    import torch

    from edgegcl.nn.augment import as_features
    from edgegcl.onnx.export import check_against_torch, export_encoder
    from edgegcl_embed.files import replacing
    from edgegcl_embed.graph import write_npz

    lines = []
    if _reusable(args) and paths["fp32"].exists():  # checked silently: a refusal is one line
        lines.append(_reuse(paths["fp32"], ckpt, data))
        paths = {name: p for name, p in paths.items() if name != "fp32"}
    with replacing(list(paths.values()), UsageError, "free space or choose another output "
                   "path (nothing was replaced)") as temps:
        staged = dict(zip(paths, temps))
        fp32 = staged.get("fp32", Path(args.out))
        if "fp32" in staged:
            _log(f"exporting {ckpt_path} (opset {args.opset})")
            export_encoder(ckpt, fp32, args.opset)
            _log(f"checking onnxruntime against torch on {data.name} ({data.num_nodes} nodes) "
                 "and a random subgraph")
            checks = check_against_torch(fp32, ckpt.encoder, data.x, data.edge_index)
            summary = "; ".join(f"{c.graph} ({c.nodes} nodes): max abs diff "
                                f"{c.max_abs_diff:.2g}" for c in checks)
            lines.append(f"wrote {paths['fp32']} (fp32, portable): onnxruntime vs torch "
                         f"{summary}")
        if args.quantize:
            from edgegcl.onnx.quantize import int8_report, quantize_int8

            _log("quantising to int8 and comparing embeddings and micro-F1 with fp32")
            quantize_int8(fp32, staged["int8"])
            report = int8_report(fp32, staged["int8"], data)
            report.update(fp32_model=str(paths.get("fp32", args.out)),
                          int8_model=str(paths["int8"]))
            staged["report"].write_text(json.dumps(report, indent=2) + "\n")
            f1 = report.get("micro_f1")
            lines.append(
                f"wrote {paths['int8']} (int8): size x{report['size_ratio']:.2f}, mean cosine "
                f"to fp32 {report['mean_cosine']:.5f}"
                + (f", micro-F1 {f1['fp32']:.2f} -> {f1['int8']:.2f} ({f1['change']:+.2f})"
                   if f1 else " (no labels: micro-F1 not compared)")
                + f"; report {paths['report']}")
        if "graph" in staged:
            x = data.x.numpy()
            sparse = as_features(data.x).layout == torch.sparse_csr  # as training feeds it
            with staged["graph"].open("wb") as fh:
                write_npz(fh, scipy.sparse.csr_matrix(x) if sparse else x,
                          data.edge_index.numpy())
            lines.append(f"wrote {paths['graph']} ({data.num_nodes} nodes, "
                         f"{data.edge_index.size(1)} edges, x {'as CSR' if sparse else 'dense'}"
                         f"): edgegcl-embed {paths.get('fp32', args.out)} --graph "
                         f"{paths['graph']} --out EMB.npy")
    return lines


def _write_any(args: argparse.Namespace, ckpt: Checkpoint, data: Data) -> list[str]:
    """Export an encoder other than the built-in GCN through torch.onnx (atomically), checked
    against torch; the INT8 model and the staged graph are the built-in GCN's."""
    from edgegcl.onnx.export import export_any_encoder
    from edgegcl_embed.files import replacing

    if args.quantize or args.graph_out:
        raise UsageError(f"--quantize and --graph-out take the built-in GCN's export; this "
                         f"checkpoint's encoder is {ckpt.config.model.encoder}: drop them")
    out = Path(args.out)
    with replacing([out], UsageError, "free space or choose another output path (nothing was "
                   "replaced)") as (temp,):
        checks = export_any_encoder(ckpt, temp, data.x, data.edge_index, args.opset)
    summary = "; ".join(f"{c.graph} ({c.nodes} nodes): max abs diff {c.max_abs_diff:.2g}"
                        for c in checks)
    return [f"wrote {out} (fp32, torch.onnx: inputs x and edge_index): onnxruntime vs torch "
            f"{summary}"]


def _cmd_export(args: argparse.Namespace) -> int:
    from edgegcl.training.checkpoint import load_checkpoint
    from edgegcl.onnx.export import MAX_OPSET, MIN_OPSET, ExportCheckError
    from edgegcl.trust import allow_encoder

    if not MIN_OPSET <= args.opset <= MAX_OPSET:
        raise UsageError(f"--opset must be in {MIN_OPSET}..{MAX_OPSET} (the encoder's ops need "
                         f"{MIN_OPSET}, torch exports up to {MAX_OPSET}), got {args.opset}")
    paths = _outputs(args)
    ckpt_path = _checkpoint_path(args)
    if args.encoder:
        allow_encoder(args.encoder)
    ckpt = load_checkpoint(ckpt_path)
    data = _training_graph(args, ckpt.config)
    if data.x.size(1) != ckpt.in_dim:
        raise UsageError(f"graph {data.name} has {data.x.size(1)} features but the encoder "
                         f"expects {ckpt.in_dim}; pass the training graph with --graph")
    try:
        lines = _write_any(args, ckpt, data) if ckpt.config.model.encoder else \
            _write(args, paths, ckpt_path, ckpt, data)
    except ExportCheckError as exc:
        print(f"edgegcl: error: export check failed: {exc}; nothing was written",
              file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0
