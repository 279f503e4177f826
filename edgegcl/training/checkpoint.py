"""Checkpoints: the trained encoder's weights and the configuration that produced it.

A checkpoint holds only tensors and plain Python values, so it loads with
``torch.load(weights_only=True)``: opening one never executes pickled code. It names its
configuration's hash (edgegcl.training.state.config_hash), as the run's seed files do, and
what its input features are (edgegcl_embed.columns: a node table's columns by name and width,
the structural features, or a matrix without names), so that a graph fed to it later is
matched by column name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from edgegcl import __version__
from edgegcl.training.config import FIELDS, TrainConfig
from edgegcl.errors import UsageError, first_line
from edgegcl.nn.decoder import LinkDecoder
from edgegcl.nn.encoders import load_encoder, output_width
from edgegcl.nn.config import AUTO
from edgegcl.nn.family import build_encoder
from edgegcl.training.state import config_hash, load_tensors, save_atomic
from edgegcl.trust import check_named
from edgegcl_embed.columns import MATRIX, FeatureColumns

FORMAT = "edgegcl-checkpoint-2"


def save_checkpoint(path: Path, encoder_state: dict[str, Tensor], cfg: TrainConfig, in_dim: int,
                    seed: int, epoch: int,
                    decoder_state: dict[str, Tensor] | None = None,
                    feature_columns: FeatureColumns = FeatureColumns(MATRIX)) -> None:
    """Write encoder weights + config (+ provenance) to ``path`` (atomically), with the link
    decoder an edge-objective link run chose (``decoder_state``) and what its ``in_dim``
    input features are (``feature_columns``: edgegcl.data.columns.feature_columns of the
    training graph). ``cfg`` names the encoder trained (``auto`` is resolved first:
    ``TrainConfig.with_encoder``)."""
    if feature_columns.width not in (None, in_dim):
        raise ValueError(f"feature_columns name {feature_columns.width} values per node, "
                         f"not in_dim {in_dim}")
    if cfg.model.encoder == AUTO:
        raise ValueError("a checkpoint records the encoder trained, not 'auto': save it with "
                         "cfg.with_encoder(name)")
    save_atomic({"format": FORMAT, "edgegcl_version": __version__, "config": cfg.to_dict(),
                "config_hash": config_hash(cfg), "in_dim": in_dim,
                "features": feature_columns.to_text(), "seed": seed, "epoch": epoch,
                "encoder": {k: v.detach().cpu() for k, v in encoder_state.items()},
                "decoder": None if decoder_state is None else {
                    k: v.detach().cpu() for k, v in decoder_state.items()}}, Path(path))


def misfit(weights: Any, expected: dict[str, Tensor]) -> str | None:
    """How saved weights differ from a model's ``state_dict()`` (a missing, extra or
    reshaped tensor), or None: a one-line reason instead of load_state_dict's traceback."""
    if not isinstance(weights, dict):
        return "it holds no weights"
    for name, want in expected.items():
        got = weights.get(name)
        if not isinstance(got, Tensor):
            return f"{name} is missing"
        if got.layout != torch.strided or got.is_quantized or got.is_meta:
            return f"{name} is not a dense tensor of numbers ({got.layout}, {got.dtype})"
        if got.shape != want.shape:
            return f"{name} is {list(got.shape)}, the model's {list(want.shape)}"
        if want.is_floating_point() and not got.is_floating_point():
            return f"{name} is {got.dtype}, the model's {want.dtype}"
    extra = sorted(repr(k) for k in set(weights) - set(expected))  # repr: one line whatever
    return f"{extra[0]} is not the model's" if extra else None


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: the encoder (eval mode, CPU; a built-in one, edgegcl.nn.family, or
    the module its config's ``encoder`` names), its config and where it came from."""

    encoder: nn.Module
    config: TrainConfig
    in_dim: int
    seed: int
    epoch: int
    decoder: LinkDecoder | None = None
    """The link decoder (eval mode) an edge-objective link run trained: scores a pair from
    its two embeddings, ``decoder(z_u, z_v)``; None for other runs."""
    feature_columns: FeatureColumns = FeatureColumns(MATRIX)
    """What the ``in_dim`` input features are (edgegcl_embed.columns)."""


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Read a checkpoint written by ``save_checkpoint``; anything else is a usage error."""
    p = Path(path)
    fix = "pass a checkpoint.pt written by edgegcl train"
    try:
        raw = load_tensors(p, "checkpoint", fix)
    except UsageError:
        raise
    except Exception as exc:  # torch raises many types for corrupt or unsafe files
        raise UsageError(f"checkpoint {p} cannot be read ({first_line(exc)[:160]}); "
                         "pass a checkpoint.pt written by edgegcl train") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise UsageError(f"{p} is not an edgegcl checkpoint (format {FORMAT!r} expected); "
                         "pass a checkpoint.pt written by edgegcl train")
    try:
        values = {k: v for k, v in raw["config"].items() if k in FIELDS}
        if values["encoder"] == AUTO:
            raise UsageError(f"{p} names the encoder 'auto', not the encoder a seed chose; "
                             "pass a checkpoint.pt written by edgegcl train")
        if ":" in str(values["encoder"]):  # code: only the encoder the user named (trust)
            values["encoder"] = check_named(str(values["encoder"]), p, p.parent)
        cfg = TrainConfig(**values)
        seed, epoch, weights = int(raw["seed"]), int(raw["epoch"]), raw["encoder"]
        in_dim = raw["in_dim"]
        if not isinstance(in_dim, int) or in_dim < 1:
            raise ValueError(f"in_dim {in_dim!r}")
        if not isinstance(raw["features"], str):
            raise ValueError("features is not a feature record")
        columns = FeatureColumns.from_text(raw["features"])
        if columns.width not in (None, in_dim):
            raise ValueError(f"its feature columns are {columns.width} wide, not in_dim {in_dim}")
        name = cfg.model.built_in
        if name is not None:  # shapes first: nothing allocated that the file does not hold
            with torch.device("meta"):
                why = misfit(weights, build_encoder(name, in_dim, cfg.model).state_dict())
            if why is not None:
                raise UsageError(f"{p} does not fit the encoder its configuration describes "
                                 f"({why}); pass a checkpoint.pt written by edgegcl train")
        encoder = (build_encoder(name, in_dim, cfg.model) if name is not None
                   else load_encoder(cfg.model.encoder, in_dim))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, UsageError):
            raise
        raise UsageError(f"{p} is an incomplete edgegcl checkpoint ({type(exc).__name__}: "
                         f"{first_line(exc)[:160]}); pass a checkpoint.pt written by edgegcl "
                         "train") from None
    why = misfit(weights, encoder.state_dict())
    if why is not None:
        raise UsageError(f"{p} does not fit the encoder its configuration describes ({why}); "
                         "pass a checkpoint.pt written by edgegcl train")
    bad = next((k for k, v in weights.items() if isinstance(v, torch.Tensor)
                and v.is_floating_point() and not bool(torch.isfinite(v).all())), None)
    if bad is not None:  # a run that diverged: its embeddings would all be NaN
        raise UsageError(f"{p} holds weights that are not numbers (NaN or inf in {bad}): the "
                         "run diverged; train again with a smaller --lr")
    encoder.load_state_dict(weights)
    encoder.eval()
    decoder = _decoder(p, raw.get("decoder"), cfg, encoder, in_dim)
    return Checkpoint(encoder, cfg, raw["in_dim"], seed, epoch, decoder, columns)


def _decoder(path: Path, weights: Any, cfg: TrainConfig, encoder: nn.Module,
             in_dim: int) -> LinkDecoder | None:
    """The checkpoint's link decoder, its shapes checked before it is built, or None."""
    if weights is None:
        return None
    width = output_width(encoder, in_dim)
    with torch.device("meta"):
        why = misfit(weights, LinkDecoder(width, cfg.learning.decoder_dim).state_dict())
    if why is None:
        bad = next((k for k, v in weights.items() if not bool(torch.isfinite(v).all())), None)
        why = None if bad is None else f"{bad} holds NaN or inf"
    if why is not None:
        raise UsageError(f"{path} holds a link decoder that does not fit its configuration "
                         f"({why}); pass a checkpoint.pt written by edgegcl train")
    decoder = LinkDecoder(width, cfg.learning.decoder_dim, cfg.learning.decoder_dropout)
    decoder.load_state_dict(weights)
    return decoder.eval()
