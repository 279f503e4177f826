"""The run configuration: one flat, typed record, loadable from TOML and overridable by flags.

Every field is settable in a ``--config FILE.toml`` (same names, e.g. ``theta_max = 0.6`` or
``T_int = 20``) and by a command-line flag (``--theta-max 0.6``, ``--T-int 20``); flags win.
``validate`` turns any bad value into one ``UsageError`` line naming the field and the fix.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from edgegcl.errors import UsageError, first_line
from edgegcl.nn.model import ACTIVATIONS, ModelConfig
from edgegcl.contrast.negatives import SAMPLE_MIN, STRATIFY
from edgegcl.contrast.pairs import LOGITS
from edgegcl.data.sampling import SAMPLERS
from edgegcl.data.synthetic import SyntheticSpec
from edgegcl.training.distributed import BACKENDS, NEGATIVES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

_SYNTHETIC = SyntheticSpec()

MODES = ("auto", "full", "minibatch")
PROTOCOLS = ("honest", "both")
"""``protocol``: the honest evaluation alone, or with the authors' (edgegcl.evaluation.authors)."""
SCHEDULERS = ("hans", "none")
"""``scheduler``: HANS, or none (every candidate a negative from epoch 1: GRACE's contrast)."""
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class TrainConfig:
    """Everything a training run depends on; saved as ``config.toml`` in the run directory.

    Example:
        >>> cfg = TrainConfig(theta_max=0.6, ratios="10,40,50")
        >>> cfg.ratio_map()["hard"], cfg.model_config().hidden_dim
        (0.4, 512)
    """

    # data (the synthetic graph's defaults are SyntheticSpec's)
    dataset: str = "synthetic"
    root: str = ""
    nodes: int = _SYNTHETIC.num_nodes
    classes: int = _SYNTHETIC.num_classes
    features: int = _SYNTHETIC.num_features
    avg_degree: float = _SYNTHETIC.avg_degree
    homophily: float = _SYNTHETIC.homophily
    graph_seed: int = _SYNTHETIC.seed
    # run
    mode: str = "auto"
    batch_size: int = 1024
    fanout: str = "10,10"
    sampler: str = "auto"
    epochs: int = 300
    seeds: int = 1
    device: str = "auto"
    out: str = ""
    eval_every: int = 20
    checkpoint_every: int = 0
    protocol: str = "honest"
    # several processes under torchrun (edgegcl.training.distributed)
    negatives: str = "local"
    dist_backend: str = "auto"
    dist_timeout: float = 900.0
    # optimisation and model
    lr: float = 5e-4
    weight_decay: float = 1e-5
    tau: float = 0.4
    hidden_dim: int = 512
    out_dim: int = 256
    proj_dim: int = 256
    activation: str = "prelu"
    # augmentation (drop probabilities per view)
    p_edge_1: float = 0.2
    p_edge_2: float = 0.4
    p_feature_1: float = 0.3
    p_feature_2: float = 0.4
    # HANS (paper names)
    scheduler: str = "hans"
    theta_max: float = 1.0
    ratios: str = "20,30,50"
    T_init: int = 60
    T_int: int = 20
    e: int = 10
    gamma: float = 0.99
    b: float = 0.05
    c_cat: str = "0.05,0.05,0.025"
    eta_0: float = 0.05
    floor: float = 0.05
    swap_every: int = 0
    # how the strata are found (edgegcl.contrast.negatives) and the logits computed (edgegcl.contrast.pairs)
    stratify: str = "sampled"
    stratify_sample: int = SAMPLE_MIN
    logits: str = "auto"

    def ratio_map(self) -> dict[str, float]:
        """``ratios`` ("EASY,HARD,INTER" percent, the paper's order) as fractions by category."""
        easy, hard, inter = (float(v) / 100.0 for v in self.ratios.split(","))
        return {"hard": hard, "inter": inter, "easy": easy}

    def c_cat_map(self) -> dict[str, float]:
        """``c_cat`` ("HARD,INTER,EASY" per-step caps) by category."""
        hard, inter, easy = (float(v) for v in self.c_cat.split(","))
        return {"hard": hard, "inter": inter, "easy": easy}

    def fanout_list(self) -> list[int]:
        """``fanout`` ("10,10": neighbours per hop, -1 = all) as integers."""
        return [int(v) for v in self.fanout.split(",")]

    def model_config(self) -> ModelConfig:
        """The encoder and head sizes of this run."""
        return ModelConfig(self.hidden_dim, self.out_dim, self.proj_dim, self.activation)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FIELDS = {f.name: f for f in fields(TrainConfig)}


def _coerce(name: str, value: Any) -> Any:
    """Convert a TOML or flag value to the field's type, or say which field is wrong."""
    kind = FIELDS[name].type
    try:
        if kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if isinstance(value, list):
            return ",".join(str(v) for v in value)
        return str(value)
    except (TypeError, ValueError):
        raise UsageError(f"config field {name!r} must be {kind}, got {value!r}") from None


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


def read_toml(path: Path, what: str, missing_hint: str) -> dict[str, Any]:
    """A TOML file's table; a missing file (``missing_hint`` says what to do) or invalid TOML
    is one UsageError line naming ``what`` (e.g. "config file x.toml")."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise UsageError(f"{what} does not exist; {missing_hint}") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{what} is not valid TOML ({first_line(exc)}); fix the file") from None


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a config file (or a preset by name); unknown keys and unreadable files are usage
    errors."""
    p = resolve_config(path)
    raw = read_toml(p, f"config file {p}", "check the path given to --config (or name a "
                    f"preset: {', '.join(list_presets())})")
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise UsageError(f"config file {p} has unknown keys {', '.join(unknown)}; "
                         f"valid keys are the flag names with underscores (e.g. theta_max)")
    return {k: _coerce(k, v) for k, v in raw.items()}


def build(file_values: dict[str, Any], flag_values: dict[str, Any]) -> TrainConfig:
    """Defaults, then the file, then the flags (flags win); validated."""
    cfg = TrainConfig(**{**file_values, **{k: _coerce(k, v) for k, v in flag_values.items()}})
    validate(cfg)
    return cfg


def _parse_floats(name: str, text: str, count: int, what: str) -> list[float]:
    try:
        vals = [float(v) for v in text.split(",")]
    except ValueError:
        vals = []
    if len(vals) != count or not all(math.isfinite(v) for v in vals):
        raise UsageError(f"{name} must be {count} comma-separated numbers ({what}), got {text!r}")
    return vals


def validate(cfg: TrainConfig) -> None:
    """Check every field's range; the first problem found is raised as one line."""
    def need(ok: bool, msg: str) -> None:
        if not ok:
            raise UsageError(msg)

    need(cfg.mode in MODES, f"--mode must be one of {', '.join(MODES)}, got {cfg.mode!r}")
    need(cfg.sampler in SAMPLERS, f"--sampler must be one of {', '.join(SAMPLERS)}, got {cfg.sampler!r}")
    try:
        fanout = cfg.fanout_list()
    except ValueError:
        fanout = []
    need(len(fanout) > 0 and all(f == -1 or f > 0 for f in fanout),
         f"--fanout must be comma-separated neighbours per hop (positive, or -1 for all), got {cfg.fanout!r}")
    need(cfg.device in DEVICES or re.fullmatch(r"cuda:\d+", cfg.device) is not None,
         f"--device must be auto, cpu, cuda or cuda:N, got {cfg.device!r}")
    need(cfg.protocol in PROTOCOLS,
         f"--protocol must be one of {', '.join(PROTOCOLS)}, got {cfg.protocol!r}")
    need(cfg.scheduler in SCHEDULERS,
         f"--scheduler must be one of {', '.join(SCHEDULERS)}, got {cfg.scheduler!r}")
    need(cfg.negatives in NEGATIVES,
         f"--negatives must be one of {', '.join(NEGATIVES)}, got {cfg.negatives!r}")
    need(cfg.dist_backend in BACKENDS,
         f"--dist-backend must be one of {', '.join(BACKENDS)}, got {cfg.dist_backend!r}")
    need(cfg.dist_timeout > 0, f"--dist-timeout must be > 0 seconds, got {cfg.dist_timeout}")
    need(cfg.logits in LOGITS, f"--logits must be one of {', '.join(LOGITS)}, got {cfg.logits!r}")
    need(cfg.stratify in STRATIFY,
         f"--stratify must be one of {', '.join(STRATIFY)}, got {cfg.stratify!r}")
    need(cfg.stratify_sample >= 16,
         f"--stratify-sample must be at least 16 candidates, got {cfg.stratify_sample}")
    need(cfg.activation in ACTIVATIONS,
         f"--activation must be one of {', '.join(ACTIVATIONS)}, got {cfg.activation!r}")
    for name in ("epochs", "seeds", "eval_every", "batch_size", "hidden_dim", "out_dim", "proj_dim",
                 "T_int", "e", "nodes", "classes", "features"):
        need(getattr(cfg, name) >= 1, f"{name} must be a positive integer, got {getattr(cfg, name)}")
    need(cfg.nodes >= 2, f"--nodes must be at least 2, got {cfg.nodes}")
    need(cfg.T_init >= 0 and cfg.swap_every >= 0, "T_init and swap_every must be >= 0")
    need(cfg.checkpoint_every >= 0,
         f"--checkpoint-every must be >= 0 (0: every probe), got {cfg.checkpoint_every}")
    need(0.0 < cfg.theta_max <= 1.0, f"--theta-max must be in (0, 1], got {cfg.theta_max}")
    need(cfg.lr > 0 and cfg.weight_decay >= 0, "--lr must be > 0 and --weight-decay >= 0")
    need(cfg.tau >= 0.05, f"--tau must be >= 0.05 (exp(-2/tau) underflows below), got {cfg.tau}")
    for name in ("p_edge_1", "p_edge_2", "p_feature_1", "p_feature_2", "homophily"):
        need(0.0 <= getattr(cfg, name) <= 1.0, f"{name} must be in [0, 1], got {getattr(cfg, name)}")
    need(cfg.avg_degree > 0, f"--avg-degree must be > 0, got {cfg.avg_degree}")
    ratios = _parse_floats("--ratios", cfg.ratios, 3, "EASY,HARD,INTER percent, e.g. 20,30,50")
    need(all(r > 0 for r in ratios) and abs(sum(ratios) - 100.0) < 1e-6,
         f"--ratios EASY,HARD,INTER must be positive and sum to 100, got {cfg.ratios!r}")
    caps = _parse_floats("--c-cat", cfg.c_cat, 3, "HARD,INTER,EASY per-step caps")
    need(all(c > 0 for c in caps), f"--c-cat caps must be > 0, got {cfg.c_cat!r}")
    need(0 < cfg.eta_0 <= 1 and 0 <= cfg.floor <= 1, "--eta-0 must be in (0, 1] and --floor in [0, 1]")
    need(cfg.gamma > 0 and cfg.b > 0, "--gamma and --b must be > 0")


def to_toml(cfg: TrainConfig) -> str:
    """The resolved configuration as TOML that ``load_toml`` reads back unchanged."""
    lines = []
    for name, value in cfg.to_dict().items():
        if isinstance(value, str):
            # a JSON string is a TOML basic string, once DEL (legal in JSON only) is escaped too
            text = json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
            lines.append(f"{name} = {text}")
        else:
            lines.append(f"{name} = {value!r}")
    return "\n".join(lines) + "\n"
