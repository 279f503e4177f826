"""A training run's configuration: the layers' sections, the ``[run]`` section, and how a run's
values are read (a file, a dataset's tuned defaults, then the flags).

``TrainConfig`` is made of one section per layer, each defined and checked in its layer's
``config`` module (``edgegcl.data.config``, ``edgegcl.nn.config``, ``edgegcl.contrast.config``;
the schedule's beside the scheduler family, ``edgegcl.contrast.scheduler.ScheduleConfig``, and
HANS's gate beside HANS, ``edgegcl.contrast.hans.HANSConfig``); ``RunConfig`` and
``DistributedConfig`` are this layer's. None of them needs torch, so the command line builds
its flags from them before torch loads. Field names are unique across sections, so a run's
values also exchange flat (``option_value(cfg, "theta_max")`` is ``cfg.schedule.theta_max``),
which is how files, flags and presets name them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from edgegcl.config import (
    PRESETS_DIR,
    Section,
    canonical_values,
    convert,
    flag_form,
    list_presets,
    load_values,
    option,
    read_toml,
    resolve_config,
    section_fields,
    split_values,
    to_toml,
)
from edgegcl.contrast.config import ContrastConfig
from edgegcl.contrast.hans import HANSConfig
from edgegcl.contrast.scheduler import NegativeScheduler, ScheduleConfig
from edgegcl.data.config import (DataConfig, SamplerName, SyntheticConfig, SyntheticSpec,
                                 canonical_name)
from edgegcl.errors import UsageError
from edgegcl_embed.errors import shown
from edgegcl.nn.config import AugmentConfig, ModelConfig
from edgegcl.trust import check_named
from edgegcl.training.task import metric_problem, task_named
from edgegcl.training.timebudget import MINIBATCH_STEPS, duration_seconds

MAX_EPOCHS = 1_000_000
"""The most epochs a run may ask for (ten thousand is already a long run)."""
MAX_HOPS = 16
"""The most hops a mini-batch may sample: one per encoder layer."""
MAX_THREADS = 4096
"""The most threads ``--threads``, a profile or a saved state may name."""
RESUMABLE = ("epochs", "device", "threads", "time_budget")
"""Fields a resumed run may change: more (or as many) epochs, another device, its threads, the
time its continuation may take."""

__all__ = ["FIELDS", "SECTIONS", "LearningConfig", "RunConfig", "TrainConfig", "build", "coerce",
           "list_presets", "load_toml", "option_text", "option_value", "read_toml", "to_toml",
           "tuned_defaults", "unused_settings", "validate"]

Negatives = Literal["local", "global"]
"""``negatives`` under torchrun: each rank's own batch, or the world's (all-gathered)."""
Backend = Literal["auto", "gloo", "nccl"]
"""``dist_backend``: ``auto`` is NCCL when training on CUDA, gloo on the CPU."""


@dataclass(frozen=True)
class DistributedConfig(Section):
    """Several processes under torchrun (the ``[distributed]`` section).

    Example:
        >>> DistributedConfig(negatives="global").dist_backend
        'auto'
    """

    TITLE = "several processes under torchrun"
    negatives: Negatives = option("local", "local (each rank contrasts its batch) or global "
                                  "(every rank's anchors are candidates, as one process with "
                                  "the world's batch)")
    dist_backend: Backend = option("auto", "auto (nccl on CUDA, gloo on the CPU), gloo or nccl")
    dist_timeout: float = option(900.0, "seconds a collective waits for the other ranks before "
                                 "the run stops (a rank that died or hangs)", above=0.0)
    dist_join_timeout: float = option(60.0, "seconds processes started without torchrun (RANK, "
                                      "WORLD_SIZE, MASTER_* set by hand) wait for each other to "
                                      "join: a lone process with stale variables stops then",
                                      above=0.0, omit_default=True)


Mode = Literal["auto", "full", "minibatch"]
Metric = Literal["auto", "micro_f1", "macro_f1", "roc_auc", "auc", "ap", "hits@20", "hits@50",
                 "hits@100"]
"""``metric``: the validation figure that chooses checkpoints and encoders."""
Protocol = Literal["honest", "both"]
"""``protocol``: the honest evaluation alone, or with the authors' (edgegcl.evaluation.authors)."""


@dataclass(frozen=True)
class RunConfig(Section):
    """Training, evaluation and the run directory (the ``[run]`` section).

    Example:
        >>> RunConfig(fanout="5,5").fanout
        [5, 5]
    """

    TITLE = "training, evaluation and the run directory"
    mode: Mode = option("auto", "full (the whole graph is one batch), minibatch "
                        "(neighbour-sampled batches), or auto (full up to 10000 nodes while a "
                        "full-graph step's predicted memory is at most half of what is "
                        "available when the run starts; the run says the numbers)")
    batch_size: int = option(1024, "minibatch: seed nodes (anchors) per batch (per rank under "
                             "torchrun)", at_least=2, at_most=1 << 31,
                             why="one anchor has no negatives: its loss is 0; no graph has more "
                             "seed nodes than 2^31")
    fanout: list[int] = option([10, 10], "minibatch: neighbours sampled per hop (-1: all); "
                               "flag: 10,10")
    sampler: SamplerName = option("auto", "minibatch: auto (PyG's NeighborLoader when pyg-lib "
                                  "or torch-sparse is installed), builtin, or pyg")
    epochs: int = option(300, "training epochs per seed", at_least=1, at_most=MAX_EPOCHS)
    max_steps: int = option(-1, "optimizer steps a seed trains at most, its epochs cut to fit "
                            f"(-1: {MINIBATCH_STEPS} in mini-batches, no bound on the whole graph; 0: no "
                            "bound)", at_least=-1, at_most=1 << 40, omit_default=True)
    time_budget: str = option("", "wall time the run may take, e.g. 10m, 90s, 1h30m ('': "
                              "none): the seeds share it, an encoder search takes at most a "
                              "quarter of a seed's part, and a seed trains while its next epoch "
                              "and final probe fit (within --epochs and --max-steps)",
                              omit_default=True)
    seeds: int = option(1, "independent runs, each with its own split and initialisation",
                        at_least=1, at_most=10_000)
    lr: float = option(5e-4, "Adam learning rate", above=0.0, at_most=10.0,
                       why="Adam moves each weight by about lr a step: beyond it training only "
                       "diverges (and float32 overflows)")
    weight_decay: float = option(1e-5, "Adam weight decay", at_least=0.0)
    grad_clip: float = option(0.0, "the gradients' largest total norm at each update, "
                              "clipped to it beforehand (0: not clipped)", at_least=0.0,
                              omit_default=True)
    device: str = option("auto", "auto, cpu, cuda or cuda:N (under torchrun each rank's GPU is "
                         "LOCAL_RANK)")
    threads: int = option(0, "CPU threads torch uses (0: OMP_NUM_THREADS when set, else the "
                          "count of cores, cores/2, ..., 1 that the first training steps "
                          "measure fastest; a GPU run keeps torch's default)", at_least=0,
                          at_most=MAX_THREADS, omit_default=True)
    out: str = option("", "run directory to create ('': runs/DATASET-TIMESTAMP)")
    eval_every: int = option(20, "epochs between linear-probe checkpoints", at_least=1,
                             at_most=MAX_EPOCHS)
    checkpoint_every: int = option(0, "epochs between saves of each seed's full state for "
                                   "--resume (0: every probe)", at_least=0, at_most=MAX_EPOCHS)
    patience: int = option(0, "early stopping: end a seed once this many probes in a row have "
                           "not raised its validation --metric (the best checkpoint is kept); "
                           "0: train every epoch", at_least=0, at_most=MAX_EPOCHS,
                           omit_default=True)
    task: str = option("node", "what the embeddings are judged on: node (their labels, by "
                        "a linear probe) or link (which pairs connect: 85 / 5 / 10 %% of the "
                        "edges held out for training / validation / test, with as many "
                        "non-edges; the encoder trains on the training edges only)",
                        omit_default=True)
    metric: Metric = option("auto", "the validation figure that chooses the checkpoint, the "
                            "probe's weight decay and the encoder: auto (node: ROC-AUC for "
                            "binary labels, micro-F1 otherwise; link: AUC), micro_f1, "
                            "macro_f1, roc_auc; link: auc, ap, hits@20, hits@50, hits@100",
                            omit_default=True)
    protocol: Protocol = option("honest", "honest (checkpoint and classifier chosen on "
                                "validation, test touched once) or both (also the authors' "
                                "protocol behind the paper's tables, optimistic: re-drawn 10 %% "
                                "test split at every checkpoint, max over checkpoints)")

    @property
    def time_budget_s(self) -> float:
        """``time_budget`` in seconds (0: no budget)."""
        return duration_seconds(self.time_budget)

    def check(self) -> None:
        duration_seconds(self.time_budget)
        try:
            task = task_named(self.task)
        except ValueError as exc:
            raise UsageError(f"--{exc}") from None
        problem = metric_problem(self.metric, self.task)
        if problem is not None:  # known from the flags alone: refused before any work
            raise UsageError(problem)
        if self.protocol == "both" and not task.authors_protocol:
            raise UsageError("--protocol both adds the authors' node-label protocol, which has "
                             f"no {task.name} counterpart; drop it with --task {task.name}")
        if not self.fanout or not all(f == -1 or f > 0 for f in self.fanout):
            raise UsageError(f"--fanout must be neighbours per hop (positive, or -1 for all), "
                             f"got {self.fanout!r}")
        if len(self.fanout) > MAX_HOPS:
            raise UsageError(f"--fanout names {len(self.fanout)} hops; at most {MAX_HOPS} (one "
                             "per layer of the encoder), e.g. --fanout 10,10")
        if (self.device not in ("auto", "cpu", "cuda")
                and re.fullmatch(r"cuda:\d+", self.device) is None):
            raise UsageError(f"--device must be auto, cpu, cuda or cuda:N, got {self.device!r}")


Objective = Literal["auto", "views", "edges"]
"""``objective``: what training learns from (``LearningConfig``)."""


@dataclass(frozen=True)
class LearningConfig(Section):
    """What training learns from (the ``[learning]`` section): the paper's two augmented
    views contrasted under HANS (``views``), or the graph's own edges (``edges``): at each
    step each direction of the training edges is masked with probability ``edge_mask``, an edge
    both of whose directions are masked is hidden from the encoder, and a small decoder on the Hadamard product of two embeddings learns to tell them
    from non-edges (masked graph autoencoding, as MaskGAE trains; edgegcl.training.edges),
    which the run's negative scheduler picks from each anchor's ``edge_pool`` candidates
    (edgegcl.training.nonedges). ``auto`` is ``edges`` for ``--task link`` and ``views`` for the
    node task, as measured (docs/tasks.md).

    Example:
        >>> LearningConfig().resolved("link"), LearningConfig().resolved("node")
        ('edges', 'views')
    """

    TITLE = "what training learns from"
    objective: Objective = option("auto", "views (two augmented views contrasted, HANS "
                                  "scheduling the negatives), edges (a share of the edges "
                                  "hidden from the encoder at each step and scored back by a "
                                  "learned decoder against non-edges), or auto (link task: "
                                  "edges; node task: views)", omit_default=True)
    edge_mask: float = option(0.7, "edges: the probability that each direction of a training "
                              "edge is masked at each step and scored back; an edge is hidden "
                              "from the encoder when both of its directions are (MaskGAE's "
                              "masking)", above=0.0, at_most=0.99,
                              why="a step must keep some edges and hide some",
                              omit_default=True)
    edge_dropout: float = option(0.8, "edges: dropout on the encoder's input features at each "
                                 "step", at_least=0.0, at_most=0.99, omit_default=True)
    edge_pool: int = option(10, "edges: candidate non-edges of each masked edge, |N_i| of the "
                            "schedule (a uniform anchor node and as many uniform candidates, "
                            "shared by 64 anchors): --theta-max and the pace say how many are "
                            "scored, --scheduler which (hans: by hardness, the embeddings' inner "
                            "product; random: uniformly)", at_least=1, at_most=1 << 16,
                            omit_default=True)
    decoder_dim: int = option(64, "edges: hidden width of the link decoder, an MLP on z_u * z_v",
                              at_least=1, at_most=1 << 16, omit_default=True)
    decoder_dropout: float = option(0.2, "edges: dropout on the link decoder's input",
                                    at_least=0.0, at_most=0.99, omit_default=True)

    degree_weight: float = option(0.0, "edges: alpha, the weight of a degree decoder's loss "
                                  "beside the links' (MaskGAE's: an MLP on each node's "
                                  "embedding regresses its count of the step's masked edges, "
                                  "mean squared error); 0: no degree decoder", at_least=0.0,
                                  at_most=1e6, omit_default=True)

    EDGES_ONLY: ClassVar[tuple[str, ...]] = ("edge_mask", "edge_dropout", "edge_pool",
                                             "decoder_dim", "decoder_dropout", "degree_weight")
    """What the ``views`` objective does not read."""

    def resolved(self, task: str) -> str:
        """The objective a run of ``task`` trains with (``auto`` resolved)."""
        if self.objective != "auto":
            return self.objective
        return task_named(task).objective


@dataclass(frozen=True, init=False)
class TrainConfig:
    """Everything a training run depends on, by section; saved as ``config.toml``.

    Each section is its layer's (a TOML table, a group in ``--help``) and checks itself as it
    is made; the one rule between sections (HANS's hardest picks rank every candidate,
    ``ContrastConfig.check_with``) is checked here. Typed values: ``ratios`` and ``c_cat`` are
    mappings keyed hard / inter / easy, ``fanout`` a list; their flag forms (``--ratios
    hard=30,inter=50,easy=20``) are accepted wherever a value is given.

    Args:
        data, synthetic, model, augment, schedule, hans, contrast, learning, run,
            distributed: the
            sections (default: each section's defaults).
        **values: any option by name (``theta_max=0.6``, ``ratios="hard=40,inter=50,easy=10"``), set in its
            section over what the section argument holds. ``edgegcl train --help`` lists them.

    Example:
        >>> cfg = TrainConfig(theta_max=0.6, ratios="hard=40,inter=50,easy=10")
        >>> cfg.schedule.ratios["hard"], cfg.schedule.theta_max, cfg.model.hidden_dim
        (40.0, 0.6, 512)
    """

    data: DataConfig
    synthetic: SyntheticConfig
    model: ModelConfig
    augment: AugmentConfig
    schedule: ScheduleConfig
    hans: HANSConfig
    contrast: ContrastConfig
    learning: LearningConfig
    run: RunConfig
    distributed: DistributedConfig

    def __init__(self, data: DataConfig | None = None, synthetic: SyntheticConfig | None = None,
                 model: ModelConfig | None = None, augment: AugmentConfig | None = None,
                 schedule: ScheduleConfig | None = None,
                 hans: HANSConfig | None = None, contrast: ContrastConfig | None = None,
                 learning: LearningConfig | None = None,
                 run: RunConfig | None = None, distributed: DistributedConfig | None = None,
                 **values: Any) -> None:
        given = {"data": data, "synthetic": synthetic, "model": model, "augment": augment,
                 "schedule": schedule, "hans": hans, "contrast": contrast,
                 "learning": learning, "run": run, "distributed": distributed}
        try:
            parts = split_values(TrainConfig, values)
        except ValueError as exc:
            raise TypeError(str(exc)) from None
        for name, kind in _SECTIONS.items():
            section = given[name]
            if section is None:
                section = kind(**parts[name])
            elif parts[name]:
                section = replace(section, **parts[name])
            object.__setattr__(self, name, section)
        self.contrast.check_with(self.schedule.scheduler, self.run.epochs)

    def replace(self, **sections: dict[str, Any]) -> TrainConfig:
        """A copy with options changed section by section, each section checked again.

        Example:
            >>> cfg = TrainConfig().replace(schedule={"theta_max": 0.3}, run={"batch_size": 256})
            >>> cfg.schedule.theta_max, cfg.run.batch_size
            (0.3, 256)
        """
        unknown = [name for name in sections if name not in _SECTIONS]
        if unknown:
            raise TypeError(f"TrainConfig has no section {unknown[0]!r}")
        return TrainConfig(**{name: replace(getattr(self, name), **sections.get(name, {}))
                              for name in _SECTIONS})

    def with_encoder(self, encoder: str) -> TrainConfig:
        """This configuration with ``encoder`` (a built-in name) in place of ``auto``: what a
        seed that chose it trains, and what its checkpoint records."""
        return self if encoder == self.model.encoder else self.replace(
            model={"encoder": encoder})

    def resolved_objective(self) -> str:
        """What this run learns from, ``views`` or ``edges`` (``objective = auto`` resolved by
        the task)."""
        return self.learning.resolved(self.run.task)

    def to_dict(self) -> dict[str, Any]:
        """Every option by name (flat; options only some runs use left out at their defaults,
        ``edgegcl.config.option``'s ``omit_default``)."""
        return canonical_values(self)

    def ratio_map(self) -> dict[str, float]:
        """``ratios`` as fractions of 1 by category."""
        return self.schedule.ratio_map()

    def build_scheduler(self, epochs: int | None = None) -> NegativeScheduler:
        """The negative scheduler of a run of ``epochs`` epochs (default this run's), of the
        class ``scheduler`` names (``ScheduleConfig.build``)."""
        return self.schedule.build(self.run.epochs if epochs is None else epochs, self.hans)

    def synthetic_spec(self) -> SyntheticSpec:
        """The generated graph of this run (``dataset = synthetic``)."""
        return self.synthetic.spec()


_SECTIONS: dict[str, type[Section]] = {
    "data": DataConfig, "synthetic": SyntheticConfig, "model": ModelConfig,
    "augment": AugmentConfig, "schedule": ScheduleConfig, "hans": HANSConfig,
    "contrast": ContrastConfig, "learning": LearningConfig, "run": RunConfig,
    "distributed": DistributedConfig}
"""The sections in their order: ``config.toml``'s tables and ``--help``'s groups."""
_OWNER = {name: section for name, (section, _) in section_fields(TrainConfig).items()}
FIELDS = {name: f for name, (_, f) in section_fields(TrainConfig).items()}
"""Every option of a run by name (its dataclass field: default and help)."""
SECTIONS = {name: kind.TITLE for name, kind in _SECTIONS.items()}
"""Section name -> what it holds."""
def option_value(cfg: TrainConfig, name: str) -> Any:
    """Option ``name``'s value in ``cfg``, from the section that holds it.

    Example:
        >>> option_value(TrainConfig(theta_max=0.3), "theta_max")
        0.3
    """
    if name not in _OWNER:
        raise KeyError(f"TrainConfig has no option {name!r}")
    return getattr(getattr(cfg, _OWNER[name]), name)


def option_text(cfg: TrainConfig, name: str) -> str:
    """Option ``name``'s value in ``cfg`` as its flag is written (``20,30,50`` for the
    ratios)."""
    return flag_form(option_value(cfg, name))


def coerce(name: str, value: Any) -> Any:
    """A flag's or file's value as option ``name`` holds it, or one UsageError line."""
    return convert(TrainConfig, name, value)


def load_toml(path: str | Path) -> dict[str, Any]:
    """A config file (or a preset by name) as typed values by option name; unknown keys, keys
    in the wrong table and unreadable files are usage errors (edgegcl.config.load_values). An
    encoder it names must have been named by the user (edgegcl.trust.check_named); a relative
    one is resolved against the file's folder."""
    where = resolve_config(path)
    values = {k: coerce(k, v) for k, v in load_values(where, TrainConfig).items()}
    if values.get("encoder"):
        values["encoder"] = check_named(str(values["encoder"]), where, where.parent)
    return values


def build(file_values: dict[str, Any], flag_values: dict[str, Any]) -> TrainConfig:
    """Defaults, then the file, then the flags (flags win); every section checked."""
    return TrainConfig(**{**file_values, **flag_values})


def validate(cfg: TrainConfig) -> None:
    """Check a configuration again (each section checks itself when made; kept for callers
    that build one by parts): rebuilding it raises the first problem as one line."""
    TrainConfig(**{s.name: getattr(cfg, s.name) for s in fields(cfg)})


def unused_settings(cfg: TrainConfig) -> tuple[str, ...]:
    """The options ``cfg`` never reads: HANS's strata and gate under the random-subset
    baseline, every HANS setting under ``scheduler = none``, the GCN's widths with another
    ``encoder``."""
    scheduler = cfg.schedule.scheduler
    edges = LearningConfig.EDGES_ONLY if cfg.resolved_objective() == "views" else ()
    return (*cfg.schedule.unused(cfg.hans), *cfg.contrast.unused(scheduler),
            *cfg.model.unused(), *edges)


def _flags(names: list[str]) -> tuple[str, str]:
    """Options as their flags, comma-separated, and the pronoun that stands for them."""
    return (", ".join("--" + name.replace("_", "-") for name in names),
            "it" if len(names) == 1 else "them")


SYNTHETIC_FIELDS = tuple(f.name for f in fields(SyntheticConfig))
"""The generated graph's shape (the ``[synthetic]`` section)."""
MINIBATCH_ONLY = ("batch_size", "fanout")
"""What a full-graph run (``--mode full``) does not read."""


def _refuse_unread(cfg: TrainConfig, settings: Mapping[str, Any], where: str) -> None:
    """The options the chosen graph, mode or pace does not read: the generated graph's shape
    with another ``--dataset``, the mini-batches' with ``--mode full`` given beside them, the
    deadline pace's ``--reach`` with ``--pace fixed``."""
    shape = [name for name in settings if name in SYNTHETIC_FIELDS]
    if shape and canonical_name(cfg.data.dataset) != "synthetic":
        named, it = _flags(shape)
        they = "it shapes" if len(shape) == 1 else "they shape"
        raise UsageError(f"{named}{where}: {they} the generated graph, and this run reads "
                         f"--dataset {shown(cfg.data.dataset, 80)}; drop {it} (or train on "
                         "--dataset synthetic)")
    batches = [name for name in settings if name in MINIBATCH_ONLY]
    if batches and settings.get("mode") == "full":  # named together (a file's resolved mode
        named, it = _flags(batches)  # may be full beside the batch size it was chosen with)
        raise UsageError(f"{named}{where}: --mode full trains the whole graph at each step and "
                         f"does not read {it}; drop {it}, or --mode minibatch (or auto)")
    if "reach" in settings and cfg.schedule.pace == "fixed":
        raise UsageError(f"--reach{where}: --pace fixed grows eta by b and c_cat alone and does "
                         "not read it; drop it, or --pace deadline")


def refuse_unused(cfg: TrainConfig, settings: Mapping[str, Any], where: str = "") -> None:
    """An option the run would not read is refused, not ignored: the chosen encoder's or
    scheduler's, the edge objective's in a run of the views, the generated graph's with a
    graph file, the mini-batches' with ``--mode full``, ``--reach`` with ``--pace fixed``
    (``where``: the file that set it, said in the line; those three for the flags alone: a
    configuration file, a run's config.toml above all, keeps every section's values)."""
    if not where:
        _refuse_unread(cfg, settings, where)
    model_unused = [name for name in settings if name in cfg.model.unused()]
    if model_unused:  # another encoder has widths of its own; a built-in one its own settings
        named, it = _flags(model_unused)
        if cfg.model.user_encoder:
            raise UsageError(f"{named}: --encoder {cfg.model.encoder} does not use the built-in "
                             "encoders' widths and activation; set them in the encoder's "
                             "function, or drop them")
        raise UsageError(f"{named}{where}: --encoder {cfg.model.encoder} does not use {it}; "
                         f"drop {it} (or choose the encoder that does)")
    unused = [name for name in settings if name in unused_settings(cfg)]
    edge_only = [name for name in unused if name in LearningConfig.EDGES_ONLY]
    if edge_only:
        named, it = _flags(edge_only)
        raise UsageError(f"{named}{where}: this run learns from the two views (objective "
                         f"{cfg.resolved_objective()}), which does not use {it}; add --objective "
                         f"edges, or drop {it}")
    if unused:
        named, it = _flags(unused)
        raise UsageError(f"{named}{where}: --scheduler {cfg.schedule.scheduler} does not use "
                         f"{it} (HANS's settings it does without); add --scheduler hans, or "
                         f"drop {it}")


def tuned_defaults(dataset: str, task: str = "node") -> tuple[Path | None, dict[str, Any]]:
    """The tuned defaults a run starts from when no ``--config`` is given: for the link task
    the shipped ``presets/link.toml`` whatever the graph (the edge objective's model and
    optimiser, chosen on validation AUC); for the node task a named benchmark dataset's
    preset (``presets/CiteSeer.toml``), whose settings were chosen on validation micro-F1
    (its comments say how); ``(None, {})`` for other graphs. Its path and values. A setting
    tuned on one graph (Cora: the global defaults) can cost points on another, as GRACE
    ships one setting per dataset.

    Example:
        >>> path, values = tuned_defaults("citeseer")
        >>> path.name, values["tau"]
        ('CiteSeer.toml', 0.9)
        >>> tuned_defaults("synthetic")
        (None, {})
        >>> tuned_defaults("citeseer", "link")[0].name
        'link.toml'
    """
    try:
        name = task_named(task).preset(dataset)
    except ValueError:  # an unknown task: the configuration refuses it, naming the choices
        return None, {}
    path = None if name is None else PRESETS_DIR / f"{name}.toml"
    if path is None or not path.is_file():
        return None, {}
    return path, load_toml(path)
