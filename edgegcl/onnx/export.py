"""Writing a checkpoint's encoder to ONNX, with metadata, and checking it against torch; and
what ``edgegcl export`` writes around it (``ExportPlan``, ``export_checkpoint``): the INT8 model
and its report, the graph file, an earlier export reused, every file replaced atomically.

Exporter: torch's TorchScript-based ``torch.onnx.export(..., dynamo=False)``. The dynamo
exporter (torch's default since 2.9) needs the ``onnxscript`` package, which edgegcl does not
depend on; the TorchScript one needs only torch and emits exactly the ops the modules in
``edgegcl.onnx.module`` ask for.
torch marks it deprecated, so its DeprecationWarnings are silenced here and the round-trip
check below is what guarantees the file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import scipy.sparse
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from edgegcl import __version__
from edgegcl.data import load_recorded
from edgegcl.errors import Asking, ExportCheckError, PathNotNamed, UsageError, first_line
from edgegcl.nn.augment import as_features
from edgegcl.training.checkpoint import Checkpoint
from edgegcl.evaluation.metrics import metric_name
from edgegcl.training.config import TrainConfig
from edgegcl.onnx.metadata import write_metadata
from edgegcl.nn.family import encoder_name
from edgegcl.onnx.module import STAGES, Stages
from edgegcl.onnx.opset import DEFAULT_OPSET
from edgegcl.onnx.portable import portable_model
from edgegcl.onnx.quantize import int8_report, quantize_int8
from edgegcl.onnx.scorer import export_scorer
from edgegcl_embed.contract import (INPUT_EDGE_INDEX, INPUT_X, OUTPUT, ModelMetadata,
                                    aggregate_input, carry_input, carry_output,
                                    stage_output)
from edgegcl_embed.errors import InputError
from edgegcl_embed.files import replacing
from edgegcl_embed.graph import write_npz
from edgegcl_embed.runtime import EncoderSession, portable_session


# Largest |onnxruntime - torch| accepted for an fp32 export.
TOLERANCE = 1e-4

FEATURE_PREPROCESSING = ("none: node features as stored in the graph, cast to float32 "
                         "(edgegcl training applies no feature normalisation)")

_INPUT_DOCS = {
    INPUT_X: "node features, float32 [num_nodes, in_dim]",
    INPUT_EDGE_INDEX: "edges, int64 [2, num_edges]: row 0 source, row 1 target, every index "
                      "in 0..num_nodes-1 (not checked inside the model)",
}


def config_digest(cfg: TrainConfig) -> str:
    """SHA-256 of the training configuration's canonical JSON (sorted keys)."""
    return hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()


def _stages(ckpt: Checkpoint) -> tuple[Stages, tuple[Tensor, ...], dict]:
    """The encoder's stage module (edgegcl.onnx.module.STAGES), example inputs, and input /
    output names and dynamic axes: stage j reads x (stage 0) or a{j}, then s{j} when stage
    j - 1 carries; it writes z{j} (the embeddings for the last), then r{j} when it carries.
    Each input's width is found by running the stages on a few zero rows."""
    name = encoder_name(ckpt.encoder)
    if name is None:
        raise ValueError("a user's encoder exports through torch.onnx (export_any_encoder)")
    encoder = ckpt.encoder  # batch normalisation folded into its layers (GCNEncoder)
    state = (encoder.folded_state_dict() if hasattr(encoder, "folded_state_dict")
             else encoder.state_dict())
    module = STAGES[name](state, ckpt.config.model.activation)
    k, ids = module.num_layers, module.stage_ids()
    inputs: list[str] = []
    outputs: list[str] = []
    example: list[Tensor] = []
    axes: dict[str, dict[int, str]] = {}
    h, carried = torch.zeros(3, module.in_dim), None
    with torch.no_grad():
        for j in ids:
            names = [INPUT_X if j == 0 else aggregate_input(j)]
            example.append(h)
            if carried is not None:
                names.append(carry_input(j))
                example.append(carried)
            out = module.stage(j, h, carried)
            produced = [stage_output(j, k)] + ([carry_output(j)] if module.carries(j) else [])
            h, carried = out[0], (out[1] if module.carries(j) else None)
            inputs += names
            outputs += produced
            # each stage's rows its own symbol: the runtime runs one stage at a time and feeds
            # the others none, so equal symbols would let onnxruntime share their buffers
            axes.update({tensor: {0: f"rows{j}"} for tensor in (*names, *produced)})
    return module, tuple(example), {"input_names": inputs, "output_names": outputs,
                                    "dynamic_axes": axes}


def export_encoder(ckpt: Checkpoint, path: Path, opset: int = DEFAULT_OPSET) -> ModelMetadata:
    """Write ``ckpt``'s encoder (not the projection head) to ``path`` as the portable fp32 ONNX
    model (x, edge_index -> embeddings, standard ops; edgegcl.onnx.portable); the number of
    nodes is dynamic. Returns the metadata stored in the file.

    Example:
        >>> export_encoder(load_checkpoint(Path("runs/Cora-1/checkpoint.pt")),
        ...                Path("model.onnx"))  # doctest: +SKIP
    """
    module, example, names = _stages(ckpt)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(module, example, buffer, dynamo=False, opset_version=opset, **names)
    model = portable_model(onnx.load_from_string(buffer.getvalue()),
                           expose_stage0=module.stage0_is_product)
    for value in model.graph.input:
        value.doc_string = _INPUT_DOCS[value.name]
    encoder = encoder_name(ckpt.encoder)
    model.doc_string = f"edgegcl {encoder} encoder: (x, edge_index) -> embeddings, standard ONNX ops"
    meta = ModelMetadata(version=__version__, in_dim=module.in_dim, out_dim=module.out_dim,
                         num_layers=module.num_layers, activation=ckpt.config.model.activation,
                         feature_preprocessing=FEATURE_PREPROCESSING,
                         config_sha256=config_digest(ckpt.config), dataset=ckpt.config.data.dataset,
                         precision="fp32", quantization="none", encoder=encoder,
                         features=ckpt.feature_columns.to_text(), edges=ckpt.config.data.edges)
    write_metadata(model, meta)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return meta


@dataclass(frozen=True)
class GraphCheck:
    """One comparison of onnxruntime with torch: which graph, its size, the largest difference."""

    graph: str
    nodes: int
    edges: int
    max_abs_diff: float


def random_subgraph(x: Tensor, edge_index: Tensor, seed: int) -> tuple[Tensor, Tensor]:
    """The subgraph induced by a random half of the nodes (at least one), relabelled."""
    n = x.size(0)
    keep = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:max(1, n // 2)]
    sub_ei, _ = subgraph(keep, edge_index, relabel_nodes=True, num_nodes=n)
    return x[keep], sub_ei


@torch.no_grad()
def check_against_torch(path: Path, encoder: torch.nn.Module, x: Tensor, edge_index: Tensor,
                        seed: int = 0, tolerance: float = TOLERANCE) -> list[GraphCheck]:
    """Compare the ONNX model at ``path`` with ``encoder(x, edge_index)``.

    Runs the runtime (``EncoderSession``, its dense first layer) on the given graph and on a
    random induced subgraph of another size, so a shape frozen at export time or a mis-lowered
    aggregation shows up; when the model exposes W1, the training graph once more with x as
    scipy CSR through the runtime's sparse first layer; and the file on both graphs through
    onnxruntime alone, as any other consumer runs it. Raises ExportCheckError, with the number, when a difference exceeds ``tolerance``;
    returns the checks otherwise.
    """
    session = EncoderSession(path, first_layer="dense")
    subgraph = random_subgraph(x, edge_index, seed)
    runs = [("training graph", x, edge_index, partial(session.embed, batch_size=0)),
            ("random subgraph", *subgraph, partial(session.embed, batch_size=0))]
    if session.stage0_weight is not None:
        sparse = EncoderSession(path, first_layer="sparse")
        runs.append(("training graph, sparse first layer", x, edge_index,
                     lambda gx, gei: sparse.embed(scipy.sparse.csr_matrix(gx), gei)))
    alone = portable_session(path)
    for name, gx, gei in (("training graph", x, edge_index), ("random subgraph", *subgraph)):
        runs.append((f"{name}, portable model alone", gx, gei, lambda gx, gei: alone.run(
            [OUTPUT], {INPUT_X: gx, INPUT_EDGE_INDEX: gei})[0]))
    checks = []
    for name, gx, gei, run in runs:
        expected = encoder(gx, gei).numpy()
        diff = float(np.abs(expected - run(gx.numpy(), gei.numpy())).max())
        check = GraphCheck(name, gx.size(0), gei.size(1), diff)
        if not diff <= tolerance:  # NaN fails too
            raise ExportCheckError(f"onnxruntime and torch disagree on the {name} ({check.nodes} "
                                   f"nodes, {check.edges} edges): max abs difference {diff:.3g} "
                                   f"> {tolerance:g}")
        checks.append(check)
    return checks


def export_any_encoder(ckpt: Checkpoint, path: Path, x: Tensor, edge_index: Tensor,
                       opset: int = DEFAULT_OPSET,
                       tolerance: float = TOLERANCE) -> list[GraphCheck]:
    """Write an encoder other than the built-in GCN (``--encoder``) as ONNX with torch.onnx:
    inputs ``x`` and ``edge_index``, output ``embeddings``, nodes and edges dynamic, then
    check onnxruntime against torch on the training graph and a random subgraph.

    What torch.onnx cannot export (an op without an ONNX form, such as some of PyG's
    scatter reductions) is one UsageError line naming the reason; a model onnxruntime cannot
    run, or that disagrees with torch beyond ``tolerance``, is an ExportCheckError.
    """
    encoder = ckpt.encoder.eval()
    x = x.to_dense().float() if x.layout != torch.strided else x.float()
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(encoder, (x, edge_index), buffer, dynamo=False,
                              opset_version=opset, input_names=[INPUT_X, INPUT_EDGE_INDEX],
                              output_names=[OUTPUT],
                              dynamic_axes={INPUT_X: {0: "nodes"}, INPUT_EDGE_INDEX: {1: "edges"},
                                            OUTPUT: {0: "nodes"}})
    except Exception as exc:  # torch.onnx raises many types for what it cannot lower
        raise UsageError(f"torch.onnx cannot export the encoder {ckpt.config.model.encoder} "
                         f"({type(exc).__name__}: {first_line(exc)[:200]}); export covers the "
                         "built-in GCN and encoders whose ops torch.onnx lowers") from None
    model = onnx.load_from_string(buffer.getvalue())
    model.doc_string = (f"edgegcl encoder {ckpt.config.model.encoder}: (x, edge_index) -> "
                        "embeddings (torch.onnx)")
    try:
        session = onnxruntime.InferenceSession(model.SerializeToString(),
                                               providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ExportCheckError(f"onnxruntime cannot load the exported encoder "
                               f"({type(exc).__name__}: {first_line(exc)[:200]})") from None
    checks = []
    with torch.no_grad():
        for name, gx, gei in (("training graph", x, edge_index),
                              ("random subgraph", *random_subgraph(x, edge_index, 0))):
            expected = encoder(gx, gei).numpy()
            try:
                got = session.run([OUTPUT], {INPUT_X: gx.numpy(), INPUT_EDGE_INDEX: gei.numpy()})
            except Exception as exc:
                raise ExportCheckError(f"onnxruntime cannot run the exported encoder on the "
                                       f"{name} ({type(exc).__name__}: {first_line(exc)[:200]})"
                                       ) from None
            diff = float(np.abs(expected - got[0]).max())
            if not diff <= tolerance:
                raise ExportCheckError(f"onnxruntime and torch disagree on the {name}: max abs "
                                       f"difference {diff:.3g} > {tolerance:g}")
            checks.append(GraphCheck(name, gx.size(0), gei.size(1), diff))
    onnx.save(model, str(path))
    return checks


@dataclass(frozen=True)
class ExportPlan:
    """What ``export_checkpoint`` writes: the fp32 model ``out``, with ``quantize="int8"``
    also ``OUT.int8.onnx`` and its report ``OUT.int8.json``, with ``graph_out`` the training
    graph as edgegcl-embed reads it, with ``scorer`` the run's link scorer. Nothing existing is overwritten without ``force``; an
    existing ``out`` that is this checkpoint's fp32 export is reused when other files are
    asked for (``reusable``)."""

    out: Path
    quantize: str | None = None
    graph_out: Path | None = None
    force: bool = False
    scorer: Path | None = None
    """Also the link scorer of an edge-objective link run (edgegcl.onnx.scorer)."""

    @property
    def reusable(self) -> bool:
        """Whether an existing ``out`` may serve instead of a new export: other files are
        written too and ``force`` does not ask for a new one."""
        return bool(self.quantize or self.graph_out or self.scorer) and not self.force

    def paths(self) -> dict[str, Path]:
        """Every file the export may write, checked before any work (a UsageError line)."""
        out = Path(self.out)
        paths = {"fp32": out}
        if self.quantize:
            stem = out.name[:-5] if out.name.endswith(".onnx") else out.name
            paths["int8"] = out.with_name(stem + ".int8.onnx")
            paths["report"] = out.with_name(stem + ".int8.json")
        if self.graph_out:
            paths["graph"] = Path(self.graph_out)
        if self.scorer:
            paths["scorer"] = Path(self.scorer)
        if len({os.path.realpath(p) for p in paths.values()}) < len(paths):  # sub/../m.onnx
            named = " and ".join(f"{flag} {value}" for flag, value in (
                ("--graph-out", self.graph_out), ("--scorer", self.scorer)) if value)
            raise UsageError(f"{named} is one of the model files; choose another path")
        for path in dict.fromkeys(p.parent for p in paths.values()):
            if not path.is_dir():
                raise UsageError(f"directory {path} does not exist; create it or choose "
                                 "another output path")
        existing = [str(p) for name, p in paths.items() if p.exists()
                    and not (name == "fp32" and self.reusable)]
        if existing and not self.force:
            verb = "exists" if len(existing) == 1 else "exist"
            raise Asking(f"{', '.join(existing)} already {verb}; pass ", [("force", True)],
                         " to overwrite or choose another output path")
        return paths


def _reuse(path: Path, ckpt: Checkpoint, data: Data) -> str:
    """Why the existing ``path`` can be used instead of exported again (the line to print):
    it is a portable fp32 export of ``ckpt``'s configuration that computes its encoder.
    Anything else is a UsageError."""
    def refused(line: str) -> Asking:
        return Asking(f"{line}; pass ", [("force", True)],
                      " to export it again, or choose another output path")

    try:
        meta = EncoderSession(path, threads=1, kernel="scipy").metadata
    except InputError as exc:  # its message without the runtime's own fix
        raise refused(f"{path} exists and cannot be reused: "
                      f"{str(exc).rsplit('; ', 1)[0]}") from None
    if meta.precision != "fp32":
        raise refused(f"{path} exists and is an edgegcl {meta.precision} model, not an fp32 "
                      "export")
    if meta.config_sha256 != config_digest(ckpt.config) or meta.in_dim != ckpt.in_dim or \
            meta.feature_columns != ckpt.feature_columns:
        raise refused(f"{path} exists and was exported from another training "
                      f"configuration (config_sha256 {meta.config_sha256[:12]}...)")
    try:
        checks = check_against_torch(path, ckpt.encoder, data.x, data.edge_index)
    except ExportCheckError as exc:
        raise refused(f"{path} exists and does not compute this checkpoint's encoder "
                      f"({exc})") from None
    worst = max(c.max_abs_diff for c in checks)
    return f"reusing {path} (fp32, this checkpoint's encoder: max abs diff to torch {worst:.2g})"


def training_graph(cfg: TrainConfig, graph: str | None = None, *,
                   root: str | Path | None = None, source: str | Path = "the checkpoint",
                   node_table: str | Path | None = None) -> Data:
    """The graph an encoder was trained on: ``graph`` (a dataset name or file, under ``root``
    when given), else rebuilt from its config, read from ``source``, whose paths are used only
    when the user passes them (edgegcl.data.datasets.check_recorded_paths; a CSV edge list's
    ``node_table`` too); one UsageError line when neither can be loaded."""
    try:
        return load_recorded(cfg.data.dataset, cfg.data.root, cfg.synthetic_spec(), source,
                             graph=graph or None, user_root=root, node_table=node_table,
                             recorded_node_table=cfg.data.node_table, edges=cfg.data.edges)
    except UsageError as exc:
        if graph or isinstance(exc, PathNotNamed):
            raise
        raise Asking(f"cannot rebuild the training graph to check the export ({exc}); "
                     "pass it with ", [("graph", None)]) from None


def _checked_fp32(ckpt: Checkpoint, path: Path, data: Data, opset: int,
                  log: Callable[[str], None]) -> str:
    """Export a built-in encoder to ``path`` and check it against torch; the line to print."""
    export_encoder(ckpt, path, opset)
    log(f"checking onnxruntime against torch on {data.name} ({data.num_nodes} nodes) and a "
        "random subgraph")
    checks = check_against_torch(path, ckpt.encoder, data.x, data.edge_index)
    return "; ".join(f"{c.graph} ({c.nodes} nodes): max abs diff {c.max_abs_diff:.2g}"
                     for c in checks)


def _int8(fp32: Path, int8: Path, report_path: Path, names: tuple[Path, Path, Path],
          data: Data, cfg: TrainConfig, log: Callable[[str], None]) -> str:
    """Quantise ``fp32`` into ``int8`` and write its report (fp32 against int8, judged by the
    run's task and metric, ``cfg``'s); the line."""
    run = cfg.run
    log("quantising to int8 and comparing embeddings and the run's figure with fp32")
    quantize_int8(fp32, int8)
    report = int8_report(fp32, int8, data, run.task, run.metric)
    report.update(fp32_model=str(names[0]), int8_model=str(names[1]))
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    judged = report.get("downstream")
    return (f"wrote {names[1]} (int8): size x{report['size_ratio']:.2f}, mean cosine to fp32 "
            f"{report['mean_cosine']:.5f}"
            + (f", {metric_name(judged['metric'])} {judged['fp32']:.2f} -> "
               f"{judged['int8']:.2f} ({judged['change']:+.2f})"
               if judged else " (no labels: no downstream figure compared)")
            + f"; report {names[2]}")


def _graph_file(path: Path, name: Path, model: Path, data: Data) -> str:
    """The training graph as edgegcl-embed reads it (x dense or CSR as training fed it); the
    line."""
    x = data.x.numpy()
    sparse = as_features(data.x).layout == torch.sparse_csr
    with path.open("wb") as fh:
        write_npz(fh, scipy.sparse.csr_matrix(x) if sparse else x, data.edge_index.numpy())
    return (f"wrote {name} ({data.num_nodes} nodes, {data.edge_index.size(1)} edges, x "
            f"{'as CSR' if sparse else 'dense'}): edgegcl-embed {model} --graph {name} --out "
            "EMB.npy")


def export_checkpoint(ckpt: Checkpoint, plan: ExportPlan, data: Data,
                      opset: int = DEFAULT_OPSET, source: str = "the checkpoint",
                      log: Callable[[str], None] = lambda line: None) -> list[str]:
    """Export ``ckpt``'s encoder as ``plan`` says, checked against torch on ``data`` (its
    training graph) and a random subgraph; the lines to print. Every file is written into a
    temporary beside it and replaces it only once every check passed (a full or read-only
    disk is one UsageError line, no temporary is left). An encoder other than the built-in
    GCN goes through torch.onnx (``export_any_encoder``). A failed check is an
    ExportCheckError and nothing is written.

    Example:
        >>> ckpt = load_checkpoint(Path("runs/Cora-1/checkpoint.pt"))  # doctest: +SKIP
        >>> export_checkpoint(ckpt, ExportPlan(Path("m.onnx"), quantize="int8"),
        ...                   training_graph(ckpt.config))  # doctest: +SKIP
    """
    if data.x.size(1) != ckpt.in_dim:
        raise Asking(f"graph {data.name} has {data.x.size(1)} features but the encoder "
                     f"expects {ckpt.in_dim}; pass the training graph with ", [("graph", None)])
    if data.x.dtype != torch.float32:  # a graph folder's float16 features: the checks' x
        data = Data(x=data.x.float(), edge_index=data.edge_index, y=getattr(data, "y", None),
                    name=data.name)
    paths, lines = plan.paths(), []
    fix = "free space or choose another output path (nothing was replaced)"
    if plan.scorer and ckpt.decoder is None:
        raise UsageError("a scorer is the link decoder of a run that learned from the edges "
                         "(task link); this checkpoint has none: export without one")
    if ckpt.config.model.user_encoder:
        if plan.quantize or plan.graph_out or plan.scorer:
            raise UsageError(f"--quantize, --graph-out and --scorer take a built-in encoder's "
                             f"export; this "
                             f"checkpoint's encoder is {ckpt.config.model.encoder}: drop them")
        with replacing([paths["fp32"]], UsageError, fix) as (temp,):
            checks = export_any_encoder(ckpt, temp, data.x, data.edge_index, opset)
        summary = "; ".join(f"{c.graph} ({c.nodes} nodes): max abs diff {c.max_abs_diff:.2g}"
                            for c in checks)
        return [f"wrote {plan.out} (fp32, torch.onnx: inputs x and edge_index): onnxruntime "
                f"vs torch {summary}"]
    if plan.reusable and paths["fp32"].exists():  # checked silently: a refusal is one line
        lines.append(_reuse(paths["fp32"], ckpt, data))
        paths = {name: p for name, p in paths.items() if name != "fp32"}
    with replacing(list(paths.values()), UsageError, fix) as temps:
        staged = dict(zip(paths, temps))
        fp32 = staged.get("fp32", Path(plan.out))
        if "fp32" in staged:
            log(f"exporting {source} (opset {opset})")
            lines.append(f"wrote {plan.out} (fp32, portable): onnxruntime vs torch "
                         + _checked_fp32(ckpt, fp32, data, opset, log))
        if plan.quantize:
            lines.append(_int8(fp32, staged["int8"], staged["report"],
                               (Path(plan.out), paths["int8"], paths["report"]), data,
                               ckpt.config, log))
        if "graph" in staged:
            lines.append(_graph_file(staged["graph"], paths["graph"], Path(plan.out), data))
        if "scorer" in staged:
            lines.append(_scorer_file(staged["scorer"], paths["scorer"], ckpt, data, opset))
    if ckpt.decoder is not None and not plan.scorer:
        lines.append("this run scores links with its trained link decoder: --scorer "
                     "SCORER.onnx writes it (inputs z_u, z_v: two nodes' embeddings)")
    return lines


def _scorer_file(path: Path, name: Path, ckpt: Checkpoint, data: Data, opset: int) -> str:
    """The run's link decoder as its own ONNX model, checked on the training graph's
    embeddings (edgegcl.onnx.scorer); the line."""
    assert ckpt.decoder is not None
    with torch.no_grad():
        z = ckpt.encoder(as_features(data.x), data.edge_index)
    diff = export_scorer(ckpt.decoder, path, z, opset=opset)
    return (f"wrote {name} (link scorer: z_u, z_v -> logits; onnxruntime vs torch max abs "
            f"diff {diff:.2g} on random pairs of the training graph's embeddings)")
