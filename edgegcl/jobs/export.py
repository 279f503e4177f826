"""A run's encoder to ONNX (``edgegcl export``): which checkpoint (a run directory, a file,
or the most recent run), the graph it was trained on, then the export and its checks
(edgegcl.onnx.export.export_checkpoint)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from edgegcl import runfiles
from edgegcl.errors import Asking, UsageError
from edgegcl.jobs.arguments import callable_argument, flag_argument, path_argument
from edgegcl.trust import allow_encoder
from edgegcl_embed.files import refuse_inputs_as_outputs, refuse_planted_links, run_files
from edgegcl.onnx.opset import DEFAULT_OPSET, MAX_OPSET, MIN_OPSET

RUNS_DIR = Path("runs")
"""Where ``edgegcl train`` puts runs without ``out`` (edgegcl.jobs.rundir.prepare_run_dir)."""


def latest_run(runs_dir: Path = RUNS_DIR) -> Path:
    """The run directory under ``runs_dir`` whose checkpoint.pt was written last."""
    found = sorted(runs_dir.glob(f"*/{runfiles.CHECKPOINT}"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise UsageError(f"no run with a checkpoint.pt under {runs_dir}/; train one with "
                         "edgegcl train or pass --run DIR / --checkpoint FILE")
    return found[-1].parent


def checkpoint_path(run: str | Path | None = None, checkpoint: str | Path | None = None,
                    log: Callable[[str], None] = lambda line: None) -> Path:
    """The checkpoint to export: ``checkpoint``, else ``run``'s, else the most recent run's
    (said through ``log``)."""
    if checkpoint is not None:
        return Path(checkpoint)
    run_dir = Path(run) if run is not None else latest_run()
    if run is None:
        log(f"exporting the most recent run, {run_dir} (choose another with --run)")
    refuse_planted_links(run_dir, UsageError)
    if not (run_dir / runfiles.CHECKPOINT).is_file():
        raise UsageError(f"{run_dir} has no checkpoint.pt; pass a run directory written by "
                         "edgegcl train")
    return run_dir / runfiles.CHECKPOINT


def export(out: str | Path, *, run: str | Path | None = None,
           checkpoint: str | Path | None = None, graph: str | None = None,
           root: str | Path | None = None, opset: int = DEFAULT_OPSET, graph_out: str | Path | None = None,
           quantize: str | None = None, encoder: str | None = None, force: bool = False,
           log: Callable[[str], None] = lambda line: None,
           node_table: str | Path | None = None,
           scorer: str | Path | None = None) -> list[str]:
    """Export a run's encoder to the ONNX model ``out`` as ``edgegcl export`` does, checked
    against torch (an ``ExportCheckError`` when a check fails: nothing written); the lines
    to print. ``run`` / ``checkpoint``: which (default: the most recent run under runs/);
    ``graph``: the training graph when its config cannot rebuild it, ``root``: where a named
    dataset is read (the checkpoint's own graph file or root is used only when passed here:
    a received file chooses no path); ``graph_out``: also the
    graph as edgegcl-embed reads it; ``quantize="int8"``: also OUT.int8.onnx and its report;
    ``encoder``: the code the checkpoint names, named by the caller; ``force``: replace
    existing files; ``log``: progress lines; ``node_table``: a CSV edge list's node table;
    ``scorer``: also the link scorer of a run that learned from the edges (its link decoder
    as an ONNX model of two nodes' embeddings).

    Example:
        >>> import edgegcl
        >>> print("\\n".join(edgegcl.export("model.onnx", run="runs/mine",
        ...                                  quantize="int8")))  # doctest: +SKIP
    """
    out = path_argument("out", out)
    run, checkpoint = path_argument("run", run), path_argument("checkpoint", checkpoint)
    root, graph_out = path_argument("root", root), path_argument("graph_out", graph_out)
    node_table = path_argument("node_table", node_table)
    scorer = path_argument("scorer", scorer)
    if graph is not None:
        graph = str(path_argument("graph", graph))
    flag_argument("force", force)
    callable_argument("log", log)
    if isinstance(opset, bool) or not isinstance(opset, int):
        raise UsageError(f"opset must be an integer, not {type(opset).__name__}")
    if not MIN_OPSET <= opset <= MAX_OPSET:  # refused before torch loads
        raise UsageError(f"--opset must be in {MIN_OPSET}..{MAX_OPSET} (the encoder's ops need "
                         f"{MIN_OPSET}, torch exports up to {MAX_OPSET}), got {opset}")
    if run is not None and checkpoint is not None:
        raise UsageError("--run and --checkpoint name the same thing: pass one")
    if quantize not in (None, "int8"):
        raise UsageError(f"quantize must be None or 'int8' (the one quantisation edgegcl "
                         f"writes), got {str(quantize)[:40]!r}")
    # torch and onnx load here, once the arguments are checked: `edgegcl export --help` and
    # its refusals answer without them (tests/test_cli_startup.py)
    from edgegcl.data.columns import conform
    from edgegcl.data.identity import (PYTHON, check_identity, differs,
                                       read_identity)
    from edgegcl.onnx.export import ExportPlan, export_checkpoint, training_graph
    from edgegcl.training.checkpoint import load_checkpoint

    plan = ExportPlan(Path(out), quantize, Path(graph_out) if graph_out else None, force,
                      Path(scorer) if scorer else None)
    plan.paths()  # refused before any work
    path = checkpoint_path(run, checkpoint, log)
    inputs = [path] + ([Path(graph)] if graph is not None and Path(graph).is_file() else []) + (
        [Path(node_table)] if node_table is not None else [])
    if checkpoint is None:  # a run's: its files are inputs, but for what an export writes
        inputs += [p for p in run_files(path.parent) if p.suffix not in (".onnx", ".npz")
                   and not p.name.endswith(".int8.json")]
    refuse_inputs_as_outputs(list(plan.paths().values()), inputs, UsageError)
    if encoder:
        allow_encoder(encoder)
    ckpt = load_checkpoint(path)
    # the run directory of the checkpoint (RUN_DIR or RUN_DIR/seed-K's), whose graph record
    # is required: a checkpoint outside one is checked against the graph passed alone
    run_dir = next((f for f in (path.parent, path.parent.parent)
                    if (f / runfiles.CONFIG).is_file()), None)
    record = None if run_dir is None else read_identity(run_dir)
    python = graph is None and record is not None and record["source"] == PYTHON
    asked = Asking(f"{run_dir} trained on {PYTHON}: save it as a graph file and pass it with ",
                   [("graph", None)])
    try:
        data = training_graph(ckpt.config, graph, root=root, source=path, node_table=node_table)
    except UsageError:
        if not python:
            raise
        raise asked from None  # its configuration does not rebuild it
    data = conform(data, ckpt.feature_columns)  # a node table's columns, by name
    if python and differs(record, data, labels=False) is not None:  # type: ignore[arg-type]
        raise asked
    if run_dir is not None:  # the check against torch runs on the training graph, or not at all
        check_identity(run_dir, data, "export", "pass the graph the run trained on with ",
                       record, [("graph", None)], labels=False)  # the model's inputs alone
    return export_checkpoint(ckpt, plan, data, opset, str(path), log=log)

