"""Checkpoints: the trained encoder's weights and the configuration that produced it.

A checkpoint holds only tensors and plain Python values, so it loads with
``torch.load(weights_only=True)``: opening one never executes pickled code.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import torch
from torch import Tensor

from edgegcl import __version__
from edgegcl.config import TrainConfig
from edgegcl.errors import UsageError, first_line
from edgegcl.nn.model import GCNEncoder

FORMAT = "edgegcl-checkpoint-1"


def save_checkpoint(path: Path, encoder_state: dict[str, Tensor], cfg: TrainConfig, in_dim: int,
                    seed: int, epoch: int) -> None:
    """Write encoder weights + config (+ provenance) to ``path`` (atomically)."""
    from edgegcl.training.state import save_atomic

    save_atomic({"format": FORMAT, "edgegcl_version": __version__, "config": cfg.to_dict(),
                "in_dim": in_dim, "seed": seed, "epoch": epoch,
                "encoder": {k: v.detach().cpu() for k, v in encoder_state.items()}}, Path(path))


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: the encoder (eval mode, CPU), its config and where it came from."""

    encoder: GCNEncoder
    config: TrainConfig
    in_dim: int
    seed: int
    epoch: int


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Read a checkpoint written by ``save_checkpoint``; anything else is a usage error."""
    p = Path(path)
    try:
        raw = torch.load(p, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UsageError(f"checkpoint {p} does not exist; pass a run's checkpoint.pt") from None
    except Exception as exc:  # torch raises many types for corrupt or unsafe files
        raise UsageError(f"checkpoint {p} cannot be read ({first_line(exc)[:160]}); "
                         "pass a checkpoint.pt written by edgegcl train") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise UsageError(f"{p} is not an edgegcl checkpoint (format {FORMAT!r} expected); "
                         "pass a checkpoint.pt written by edgegcl train")
    known = {f.name for f in fields(TrainConfig)}
    cfg = TrainConfig(**{k: v for k, v in raw["config"].items() if k in known})
    encoder = GCNEncoder(raw["in_dim"], cfg.model_config())
    encoder.load_state_dict(raw["encoder"])
    encoder.eval()
    return Checkpoint(encoder, cfg, raw["in_dim"], raw["seed"], raw["epoch"])
