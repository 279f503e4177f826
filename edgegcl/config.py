"""The run configuration: one typed record in sections, loadable from TOML, overridable by flags.

Every field belongs to a section (``SECTIONS``) and is settable in a ``--config FILE.toml``,
as a key of its section's table (``[hans]`` ``theta_max = 0.6``, ``[hans.ratios]`` ``hard =
40``), and by a command-line flag (``--theta-max 0.6``, ``--ratios 10,40,50``); flags win.
Field names are unique across sections, so older flat files (``theta_max = 0.6`` at the top,
``ratios = "10,40,50"``) load unchanged. ``validate`` turns any bad value into one
``UsageError`` line naming the field and the fix.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from edgegcl.errors import UsageError
from edgegcl.nn.model import ACTIVATIONS, ModelConfig
from edgegcl.contrast.hans import CATEGORY_LOSSES, GATES
from edgegcl.contrast.negatives import CANDIDATES, PICKS, SAMPLE_MIN, STRATIFY
from edgegcl.contrast.pairs import LOGITS
from edgegcl.data.sampling import SAMPLERS
from edgegcl.data.synthetic import SyntheticSpec
from edgegcl.tomlfile import read_toml

_SYNTHETIC = SyntheticSpec()

MODES = ("auto", "full", "minibatch")
PROTOCOLS = ("honest", "both")
"""``protocol``: the honest evaluation alone, or with the authors' (edgegcl.evaluation.authors)."""
SCHEDULERS = ("hans", "random", "none")
"""``scheduler``: HANS; random (as many negatives as HANS's schedule with every gate open,
drawn uniformly from all candidates: the random-subset baseline); or none (every candidate a
negative from epoch 1: GRACE's contrast)."""
PACES = ("deadline", "fixed")
"""``pace``: b and c_cat rescaled so that theta_max is in use by ``reach`` x the epochs, or
used as given (the paper's fixed pace; edgegcl.contrast.hans)."""
STRATIFY_CHOICES = ("auto", *STRATIFY)
"""``stratify``: ``auto`` is exact with ``pick = hardest`` (the top of a ranking needs every
candidate) and sampled with ``pick = random``."""
DEVICES = ("auto", "cpu", "cuda")
NEGATIVES = ("local", "global")
"""``negatives`` under torchrun: each rank's own batch, or the world's (all-gathered)."""
BACKENDS = ("auto", "gloo", "nccl")
"""``dist_backend``: ``auto`` is NCCL when training on CUDA, gloo on the CPU."""
FIXED_HALF = ("step", "run")
"""``fixed_half``: when view 2's kept half of the columns is drawn (docs/hans.md)."""


SECTIONS = {
    "data": "which graph",
    "synthetic": "the generated graph (dataset = synthetic)",
    "model": "encoder and projection head",
    "augment": "the two views (drop probabilities, Eqs. 1-3)",
    "hans": "the Hardness-Aware Negative Scheduler (Algorithm 1; the paper's names)",
    "contrast": "the InfoNCE loss and how its negatives are found",
    "run": "training, evaluation and the run directory",
    "distributed": "several processes under torchrun",
}
"""The config's sections: ``config.toml``'s tables and ``--help``'s groups, in this order."""

RATIO_ORDER = ("easy", "hard", "inter")
"""``--ratios E,H,I``: the paper's order (its ratio table lists EASY, HARD, INTER)."""
CAP_ORDER = ("hard", "inter", "easy")
"""``--c-cat H,I,E``: the order HANS grows the categories in."""


def _opt(section: str, default: Any, help: str) -> Any:
    """A config field: its section, its default and what it does (``--help`` shows it)."""
    meta = {"section": section, "help": help}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda d=default: copy.deepcopy(d), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class TrainConfig:
    """Everything a training run depends on; saved as ``config.toml`` in the run directory.

    Each field belongs to a section (``SECTIONS``: a TOML table, a group in ``--help``) and
    says what it does in its definition. Typed values: ``ratios`` and ``c_cat`` are mappings
    keyed hard / inter / easy, ``fanout`` a list; their flag forms (``--ratios 20,30,50``,
    ``--c-cat 0.05,0.05,0.025``, ``--fanout 10,10``) and the strings of older config files are
    accepted wherever a value is given, the constructor included.

    Args:
        **fields: any field by name (``theta_max=0.6``, ``ratios="10,40,50"``); the others
            keep their defaults. ``edgegcl train --help`` lists them by section.

    Example:
        >>> cfg = TrainConfig(theta_max=0.6, ratios="10,40,50")
        >>> cfg.ratios["hard"], cfg.ratio_map()["hard"], cfg.model_config().hidden_dim
        (40.0, 0.4, 512)
    """

    dataset: str = _opt("data", "synthetic",
                        "Cora, CiteSeer, PubMed, DBLP, WikiCS, Amazon-Computers, Amazon-Photo, "
                        "Coauthor-CS, Actor, synthetic, or a .pt / .npz graph file")
    root: str = _opt("data", "", "directory holding the datasets ('': $EDGEGCL_DATA or "
                     "~/.cache/edgegcl/datasets)")
    nodes: int = _opt("synthetic", _SYNTHETIC.num_nodes, "number of nodes")
    classes: int = _opt("synthetic", _SYNTHETIC.num_classes, "planted classes")
    features: int = _opt("synthetic", _SYNTHETIC.num_features, "feature dimension")
    avg_degree: float = _opt("synthetic", _SYNTHETIC.avg_degree, "average degree")
    homophily: float = _opt("synthetic", _SYNTHETIC.homophily,
                            "fraction of edges inside a class")
    graph_seed: int = _opt("synthetic", _SYNTHETIC.seed, "seed of the generated graph")
    hidden_dim: int = _opt("model", 512, "width of the first GCN layer")
    out_dim: int = _opt("model", 256, "embedding width (second GCN layer)")
    proj_dim: int = _opt("model", 256, "hidden width of the projection head")
    activation: str = _opt("model", "prelu", f"activation: {', '.join(ACTIVATIONS)}")
    p_edge_1: float = _opt("augment", 0.2, "view 1: probability of removing an edge (Eq. 1)")
    p_edge_2: float = _opt("augment", 0.4, "view 2: probability of removing an edge")
    p_feature_1: float = _opt("augment", 0.3,
                              "view 1: probability of masking a feature column (Eq. 2)")
    p_feature_2: float = _opt("augment", 0.4, "view 2: probability of masking an entry of "
                              "the unfixed half of the columns (Eq. 3)")
    fixed_half: str = _opt("augment", "step", "view 2's kept half of the columns (Eq. 3): "
                           "step (redrawn at every step) or run (drawn once per run and seed)")
    scheduler: str = _opt("hans", "random", "random: as many negatives as HANS's pace gives "
                          "with every gate open, a uniform random subset of the candidates "
                          "(measured as accurate as HANS's hardness or all negatives on Cora "
                          "and CiteSeer, and the cheapest: docs/hans.md); hans: HANS's "
                          "hardness strata, gate and loss-aware steps; none: every candidate "
                          "(2B - 2 or B - 1 by --candidates) from epoch 1, the HANS settings "
                          "ignored")
    theta_max: float = _opt("hans", 0.1, "global negative budget theta_max: the largest "
                            "fraction of each anchor's candidates used (of 2B - 2, or B - 1 "
                            "with --candidates inter), in [0, 1]; 0: the bootstrap share "
                            "eta_0 only, never grown")
    ratios: dict[str, float] = _opt("hans", {"easy": 20.0, "hard": 30.0, "inter": 50.0},
                                    "category shares in percent, summing to 100 (flag: "
                                    "EASY,HARD,INTER); theta_cat = share x theta_max")
    pace: str = _opt("hans", "deadline", "how fast eta grows: deadline (b and c_cat rescaled "
                     "at every decision so that theta_max is in use by --reach x --epochs; the "
                     "last decision before then fills every category) or fixed (b and c_cat as "
                     "given, the paper's: a short run may never reach theta_max)")
    reach: float = _opt("hans", 0.4, "deadline pace: the fraction of --epochs by which "
                        "theta_max is in use, in (0, 1]")
    T_init: int = _opt("hans", 20, "bootstrap epochs at eta_0 before the first decision")
    T_int: int = _opt("hans", 10, "epochs between HANS decisions")
    e: int = _opt("hans", 5, "loss-gate window: the last e epochs against the e before (Eq. 7)")
    gamma: float = _opt("hans", 0.99, "loss-gate factor: grow when the loss fell by less "
                        "than 1 - gamma (Eq. 7)")
    gate: str = _opt("hans", "total", "what the loss gate (Eq. 7) reads: total (the sum of "
                     "the category losses, one signal) or any (opens when any category "
                     "stalled, Algorithm 1 as printed)")
    category_loss: str = _opt("hans", "mean", "the per-category losses the gate and the step "
                              "sizes read: mean (InfoNCE against the category's mean "
                              "exp-similarity: more negatives of the same hardness leave it "
                              "unchanged) or sum (InfoNCE over its active negatives, the "
                              "paper's: it grows as negatives are added)")
    b: float = _opt("hans", 0.05, "base step size of eta (Eq. 9)")
    c_cat: dict[str, float] = _opt("hans", {"hard": 0.05, "inter": 0.05, "easy": 0.025},
                                   "per-step caps c_cat on eta's growth (flag: HARD,INTER,EASY)")
    eta_0: float = _opt("hans", 0.05, "eta of every category during the bootstrap")
    floor: float = _opt("hans", 0.05, "least eta of a category")
    swap_every: int = _opt("hans", 0, "epochs between stochastic swaps once saturated "
                           "(0: T_int)")
    tau: float = _opt("contrast", 0.4, "InfoNCE temperature")
    candidates: str = _opt("contrast", "both", "each anchor's candidate negatives: both (the "
                           "other anchors of both views, 2B - 2, as GRACE) or inter (the other "
                           "view's only, B - 1, as Eq. 6 prints); the loss is symmetric either "
                           "way")
    pick: str = _opt("contrast", "hardest", "which candidates each category's count takes: "
                     "hardest (hard the most similar, inter the next, easy the least similar, "
                     "among every candidate) or random (a uniform subset of a pool cut by "
                     "--ratios, Algorithm 1's RandomSample)")
    stratify: str = _opt("contrast", "auto", "how the ranking is found: exact (every "
                         "candidate), sampled (each anchor ranks a random sample of its "
                         "candidates, about as many as it uses; --pick random only), or auto "
                         "(exact with --pick hardest, sampled with --pick random)")
    stratify_sample: int = _opt("contrast", SAMPLE_MIN, "sampled strata: least number of "
                                "candidates each anchor ranks")
    logits: str = _opt("contrast", "auto", "auto (the cheaper of the two for HANS's current "
                       "state), dense (B x B similarity blocks with their gradients) or pairs "
                       "(a gradient for the scheduled pairs only)")
    mode: str = _opt("run", "auto", "full (the whole graph is one batch), minibatch "
                     "(neighbour-sampled batches), or auto (full up to 10000 nodes)")
    batch_size: int = _opt("run", 1024, "minibatch: seed nodes (anchors) per batch (per rank "
                           "under torchrun)")
    fanout: list[int] = _opt("run", [10, 10], "minibatch: neighbours sampled per hop "
                             "(-1: all); flag: 10,10")
    sampler: str = _opt("run", "auto", "minibatch: auto (PyG's NeighborLoader when pyg-lib or "
                        "torch-sparse is installed), builtin, or pyg")
    epochs: int = _opt("run", 300, "training epochs per seed")
    seeds: int = _opt("run", 1, "independent runs, each with its own split and initialisation")
    lr: float = _opt("run", 5e-4, "Adam learning rate")
    weight_decay: float = _opt("run", 1e-5, "Adam weight decay")
    device: str = _opt("run", "auto", "auto, cpu, cuda or cuda:N (under torchrun each rank's "
                       "GPU is LOCAL_RANK)")
    out: str = _opt("run", "", "run directory to create ('': runs/DATASET-TIMESTAMP)")
    eval_every: int = _opt("run", 20, "epochs between linear-probe checkpoints")
    checkpoint_every: int = _opt("run", 0, "epochs between saves of each seed's full state "
                                 "for --resume (0: every probe)")
    protocol: str = _opt("run", "honest", "honest (checkpoint and classifier chosen on "
                         "validation, test touched once) or both (also the authors' protocol "
                         "behind the paper's tables, optimistic: re-drawn 10 %% test split at "
                         "every checkpoint, max over checkpoints)")
    negatives: str = _opt("distributed", "local", "local (each rank contrasts its batch) or "
                          "global (every rank's anchors are candidates, as one process with "
                          "the world's batch)")
    dist_backend: str = _opt("distributed", "auto", "auto (nccl on CUDA, gloo on the CPU), "
                             "gloo or nccl")
    dist_timeout: float = _opt("distributed", 900.0, "seconds a collective waits for the other "
                               "ranks before the run stops (a rank that died or hangs)")

    def __post_init__(self) -> None:
        # flag strings and older files' strings for the typed fields
        for name in ("ratios", "c_cat", "fanout"):
            setattr(self, name, coerce(name, getattr(self, name)))

    def ratio_map(self) -> dict[str, float]:
        """``ratios`` as fractions of 1 by category."""
        return {c: self.ratios[c] / 100.0 for c in CAP_ORDER}

    def c_cat_map(self) -> dict[str, float]:
        """``c_cat`` by category (a copy)."""
        return {c: self.c_cat[c] for c in CAP_ORDER}

    def synthetic_spec(self) -> SyntheticSpec:
        """The generated graph of this run (``dataset = synthetic``)."""
        return SyntheticSpec(self.nodes, self.classes, self.features, self.avg_degree,
                             self.homophily, self.graph_seed)

    def model_config(self) -> ModelConfig:
        """The encoder and head sizes of this run."""
        return ModelConfig(self.hidden_dim, self.out_dim, self.proj_dim, self.activation)

    def to_dict(self) -> dict[str, Any]:
        """Every field by name (flat), mappings and lists as such."""
        return dataclasses.asdict(self)


HANS_ONLY = ("pick", "stratify", "stratify_sample", "gate", "category_loss", "gamma", "e")
"""Settings of HANS's hardness strata and loss gate, which the random-subset baseline lacks."""


def unused_settings(cfg: TrainConfig) -> tuple[str, ...]:
    """The fields ``cfg``'s scheduler never reads: HANS's strata and gate under ``random``
    (its counts follow the pace alone), every HANS setting but the scheduler under ``none``."""
    if cfg.scheduler == "random":
        return HANS_ONLY
    if cfg.scheduler == "none":
        return (*HANS_ONLY, *(f.name for f in fields(TrainConfig)
                              if f.metadata["section"] == "hans" and f.name != "scheduler"))
    return ()


def format_ratios(ratios: dict[str, float]) -> str:
    """``ratios`` in the flag's EASY,HARD,INTER form, e.g. ``10,40,50``."""
    return ",".join(f"{ratios[c]:g}" for c in RATIO_ORDER)


FIELDS = {f.name: f for f in fields(TrainConfig)}


def coerce(name: str, value: Any) -> Any:
    """Convert a TOML, flag or constructor value to the field's type, or say which field is
    wrong. ``ratios`` / ``c_cat``: a mapping keyed hard / inter / easy, or three numbers
    (a list, or a comma-separated string in the flag's order); ``fanout``: integers."""
    kind = FIELDS[name].type
    try:
        if name in ("ratios", "c_cat"):
            order = RATIO_ORDER if name == "ratios" else CAP_ORDER
            if isinstance(value, dict):
                if set(value) != set(order):
                    raise ValueError
                return {c: _number(value[c]) for c in order}
            items = value.split(",") if isinstance(value, str) else list(value)
            if len(items) != 3:
                raise ValueError
            return {c: _number(v) for c, v in zip(order, items)}
        if name == "fanout":
            items = value.split(",") if isinstance(value, str) else list(value)
            return [_integer(v) for v in items]
        if kind == "int":
            return _integer(value)
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if isinstance(value, (list, dict)):
            raise ValueError
        return str(value)
    except (TypeError, ValueError):
        what = {"ratios": "a table easy / hard / inter in percent, or EASY,HARD,INTER",
                "c_cat": "a table hard / inter / easy, or HARD,INTER,EASY",
                "fanout": "a list of neighbours per hop, e.g. [10, 10] or 10,10"}.get(name, kind)
        raise UsageError(f"config field {name!r} (--{name.replace('_', '-')}) must be {what}, "
                         f"got {value!r}") from None


def _number(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError
    v = float(value)
    if not math.isfinite(v):
        raise ValueError
    return v


def _integer(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError
    if isinstance(value, str):
        value = value.strip()
    return int(value)


_HERE = Path(__file__).resolve().parent
PRESETS_DIR = next((d for d in (_HERE / "presets", _HERE.parent / "presets") if d.is_dir()),
                   _HERE / "presets")
"""Shipped configurations (the repository's presets/, installed as edgegcl/presets)."""


def list_presets() -> list[str]:
    """Names ``--config`` accepts besides a path, e.g. ``paper-Cora``."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.toml"))


def resolve_config(name: str | Path) -> Path:
    """A ``--config`` value as a file: an existing path, else a shipped preset's file."""
    p = Path(name)
    if p.exists() or p.suffix == ".toml" or str(name) not in list_presets():
        return p
    return PRESETS_DIR / f"{name}.toml"


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a config file (or a preset by name) into typed values by field name; unknown keys,
    keys in the wrong table and unreadable files are usage errors. Sections are TOML tables;
    keys at the top level (older flat files) are accepted too."""
    p = resolve_config(path)
    raw = read_toml(p, f"config file {p}", "check the path given to --config (or name a "
                    f"preset: {', '.join(list_presets())})")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in SECTIONS and isinstance(value, dict):
            for name, v in value.items():
                home = FIELDS[name].metadata["section"] if name in FIELDS else \
                    LEGACY_FIELDS.get(name)
                if home != key:
                    raise UsageError(f"config file {p}: [{key}] has no key {name!r}"
                                     + (f"; it belongs in [{home}]" if home else
                                        f"; its keys are {', '.join(_section_fields(key))}"))
                values[name] = v
        elif key in FIELDS or key in LEGACY_FIELDS:
            values[key] = value
        else:
            raise UsageError(f"config file {p} has unknown key {key!r}; the tables are "
                             f"{', '.join('[' + s + ']' for s in SECTIONS)}, their keys the "
                             "flag names with underscores (e.g. theta_max in [hans])")
    return {k: coerce(k, v) for k, v in _legacy(values).items()}


LEGACY_FIELDS = {"hard_pick": "contrast"}
"""Keys of older files that load into newer fields (``_legacy``), by the table they were in."""
LEGACY_PICK = {"random": "random", "top": "hardest"}
"""A file's ``hard_pick`` (before ``pick``) as a ``pick``: its top-k hard members become the
hardest counts of every category."""


def _legacy(values: dict[str, Any]) -> dict[str, Any]:
    """A file written before ``pick`` (it names ``hard_pick``, as every config.toml of that
    version does) keeps that version's behaviour where it names nothing newer: the pick it
    named, the fixed pace and the paper's per-category losses, so a run directory of that
    version resumes as it started."""
    if "hard_pick" not in values:
        return values
    old = dict(values)
    pick = old.pop("hard_pick")
    if pick not in LEGACY_PICK:
        raise UsageError(f"config field 'hard_pick' must be one of {', '.join(LEGACY_PICK)}, "
                         f"got {pick!r}; newer files use pick = hardest | random")
    old.setdefault("pick", LEGACY_PICK[pick])
    if old["pick"] == "hardest" and old.get("stratify", "sampled") == "sampled":
        old["stratify"] = "exact"  # the top of a sample is no longer offered
    old.setdefault("pace", "fixed")
    old.setdefault("category_loss", "sum")
    old.setdefault("gate", "any")
    return old


def tuned_defaults(dataset: str) -> tuple[Path | None, dict[str, Any]]:
    """A named benchmark dataset's tuned defaults: the shipped preset named after it
    (``presets/CiteSeer.toml``), whose settings were chosen on validation micro-F1 (its
    comments say how), and its values; ``(None, {})`` for other graphs. ``edgegcl train``
    starts from them when no ``--config`` is given, as GRACE ships one setting per dataset:
    a setting tuned on one graph (Cora: the global defaults) can cost points on another.

    Example:
        >>> path, values = tuned_defaults("citeseer")
        >>> path.name, values["tau"]
        ('CiteSeer.toml', 0.9)
        >>> tuned_defaults("synthetic")
        (None, {})
    """
    from edgegcl.data.datasets import canonical_name

    name = canonical_name(dataset)
    path = None if name is None else PRESETS_DIR / f"{name}.toml"
    if path is None or not path.is_file():
        return None, {}
    return path, load_toml(path)


def _section_fields(section: str) -> list[str]:
    return [f.name for f in fields(TrainConfig) if f.metadata["section"] == section]


def build(file_values: dict[str, Any], flag_values: dict[str, Any]) -> TrainConfig:
    """Defaults, then the file, then the flags (flags win); validated."""
    cfg = TrainConfig(**{**file_values, **{k: coerce(k, v) for k, v in flag_values.items()}})
    validate(cfg)
    return cfg


def validate(cfg: TrainConfig) -> None:
    """Check every field's range; the first problem found is raised as one line."""
    def need(ok: bool, msg: str) -> None:
        if not ok:
            raise UsageError(msg)

    need(cfg.mode in MODES, f"--mode must be one of {', '.join(MODES)}, got {cfg.mode!r}")
    need(cfg.sampler in SAMPLERS, f"--sampler must be one of {', '.join(SAMPLERS)}, got {cfg.sampler!r}")
    fanout = cfg.fanout
    need(len(fanout) > 0 and all(f == -1 or f > 0 for f in fanout),
         f"--fanout must be neighbours per hop (positive, or -1 for all), got {fanout!r}")
    need(cfg.device in DEVICES or re.fullmatch(r"cuda:\d+", cfg.device) is not None,
         f"--device must be auto, cpu, cuda or cuda:N, got {cfg.device!r}")
    need(cfg.protocol in PROTOCOLS,
         f"--protocol must be one of {', '.join(PROTOCOLS)}, got {cfg.protocol!r}")
    need(cfg.scheduler in SCHEDULERS,
         f"--scheduler must be one of {', '.join(SCHEDULERS)}, got {cfg.scheduler!r}")
    need(cfg.pick in PICKS, f"--pick must be one of {', '.join(PICKS)}, got {cfg.pick!r}")
    need(cfg.pace in PACES, f"--pace must be one of {', '.join(PACES)}, got {cfg.pace!r}")
    need(0.0 < cfg.reach <= 1.0, f"--reach must be a fraction of the epochs in (0, 1], got "
                                 f"{cfg.reach}")
    need(cfg.gate in GATES, f"--gate must be one of {', '.join(GATES)}, got {cfg.gate!r}")
    need(cfg.category_loss in CATEGORY_LOSSES, f"--category-loss must be one of "
         f"{', '.join(CATEGORY_LOSSES)}, got {cfg.category_loss!r}")
    need(cfg.candidates in CANDIDATES,
         f"--candidates must be one of {', '.join(CANDIDATES)}, got {cfg.candidates!r}")
    need(cfg.fixed_half in FIXED_HALF,
         f"--fixed-half must be one of {', '.join(FIXED_HALF)}, got {cfg.fixed_half!r}")
    need(cfg.negatives in NEGATIVES,
         f"--negatives must be one of {', '.join(NEGATIVES)}, got {cfg.negatives!r}")
    need(cfg.dist_backend in BACKENDS,
         f"--dist-backend must be one of {', '.join(BACKENDS)}, got {cfg.dist_backend!r}")
    need(cfg.dist_timeout > 0, f"--dist-timeout must be > 0 seconds, got {cfg.dist_timeout}")
    need(cfg.logits in LOGITS, f"--logits must be one of {', '.join(LOGITS)}, got {cfg.logits!r}")
    need(cfg.stratify in STRATIFY_CHOICES,
         f"--stratify must be one of {', '.join(STRATIFY_CHOICES)}, got {cfg.stratify!r}")
    need(not (cfg.pick == "hardest" and cfg.stratify == "sampled" and cfg.scheduler == "hans"),
         "--pick hardest needs every candidate ranked (the top of a sample is not the top of "
         "the ranking: docs/hans.md, 'Hard means hardest'); use --stratify exact (or auto), "
         "or --pick random with sampled strata")
    need(cfg.stratify_sample >= 16,
         f"--stratify-sample must be at least 16 candidates, got {cfg.stratify_sample}")
    need(cfg.activation in ACTIVATIONS,
         f"--activation must be one of {', '.join(ACTIVATIONS)}, got {cfg.activation!r}")
    for name in ("epochs", "seeds", "eval_every", "batch_size", "hidden_dim", "out_dim", "proj_dim",
                 "T_int", "e", "nodes", "classes", "features"):
        need(getattr(cfg, name) >= 1, f"{name} must be a positive integer, got {getattr(cfg, name)}")
    need(cfg.nodes >= 2, f"--nodes must be at least 2, got {cfg.nodes}")
    need(cfg.batch_size >= 2, f"--batch-size must be at least 2 (one anchor has no negatives: "
                              f"its loss is 0), got {cfg.batch_size}")
    need(cfg.T_init >= 0 and cfg.swap_every >= 0, "T_init and swap_every must be >= 0")
    need(cfg.checkpoint_every >= 0,
         f"--checkpoint-every must be >= 0 (0: every probe), got {cfg.checkpoint_every}")
    need(0.0 <= cfg.theta_max <= 1.0, f"--theta-max must be in [0, 1], got {cfg.theta_max}")
    need(cfg.lr > 0 and cfg.weight_decay >= 0, "--lr must be > 0 and --weight-decay >= 0")
    need(cfg.tau >= 0.05, f"--tau must be >= 0.05 (exp(-2/tau) underflows below), got {cfg.tau}")
    for name in ("p_edge_1", "p_edge_2", "p_feature_1", "p_feature_2", "homophily"):
        need(0.0 <= getattr(cfg, name) <= 1.0, f"{name} must be in [0, 1], got {getattr(cfg, name)}")
    need(cfg.avg_degree > 0, f"--avg-degree must be > 0, got {cfg.avg_degree}")
    ratios = list(cfg.ratios.values())
    need(all(r > 0 for r in ratios) and abs(sum(ratios) - 100.0) < 1e-6,
         f"--ratios EASY,HARD,INTER must be positive and sum to 100, got "
         f"{format_ratios(cfg.ratios)!r}")
    need(all(c > 0 for c in cfg.c_cat.values()),
         f"--c-cat caps must be > 0, got {','.join(f'{cfg.c_cat[c]:g}' for c in CAP_ORDER)!r}")
    need(0 < cfg.eta_0 <= 1 and 0 <= cfg.floor <= 1, "--eta-0 must be in (0, 1] and --floor in [0, 1]")
    need(cfg.gamma > 0 and cfg.b > 0, "--gamma and --b must be > 0")


def to_toml(cfg: TrainConfig) -> str:
    """The resolved configuration as TOML, one table per section, that ``load_toml`` reads
    back unchanged."""
    lines: list[str] = []
    for section, what in SECTIONS.items():
        lines += ([""] if lines else []) + [f"[{section}]  # {what}"]
        for f in fields(cfg):
            if f.metadata["section"] == section:
                lines.append(f"{f.name} = {_toml_value(getattr(cfg, f.name))}")
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        # a JSON string is a TOML basic string, once DEL (legal in JSON only) is escaped too
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)
