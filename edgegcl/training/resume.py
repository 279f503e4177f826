"""Whether a run directory can be resumed: each seed's ``result.pt`` and ``state.pt`` read
back, trained under this configuration, the seed's own, fitting the model and not past
``--epochs``, from as many processes as will continue it; each refusal one line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from edgegcl import runfiles
from edgegcl.errors import UsageError, first_line
from edgegcl_embed.errors import shown
from edgegcl.nn.config import AUTO
from edgegcl.nn.family import build_encoder
from edgegcl.nn.model import AdNGCL
from edgegcl.training.checkpoint import misfit
from edgegcl.training.edges import with_decoder
from edgegcl.training.config import TrainConfig
from edgegcl.training.results import EncoderChoice, SeedResult, result_from_dict
from edgegcl.training.state import check_config, load_tensors, read_state

__all__ = ["check_resume", "check_seed_file", "check_world", "finished_seed", "saved_encoder",
           "state_parts"]


def check_world(run_dir: Path, size: int, state: dict[str, Any]) -> None:
    """A seed state resumes only with as many processes as wrote it: each rank's random
    streams are in it."""
    saved = len(state.get("ranks") or [None])
    if saved != size:
        raise UsageError(f"{run_dir} was trained by {saved} process(es), not {size}; resume "
                         f"it with the same number (torchrun --nproc-per-node {saved})"
                         if saved > 1 else f"{run_dir} was trained by one process; resume "
                         "it without torchrun")


def _read_result(path: Path) -> dict[str, Any]:
    """A finished seed's ``result.pt`` as saved, or one line naming the problem."""
    try:
        raw = load_tensors(path, "seed result", "remove it to finish that seed again")
        result_from_dict(raw)
        if raw.get("choice") is not None:
            EncoderChoice.from_dict(raw["choice"], path)
    except UsageError:
        raise
    except Exception:  # torch raises many types for truncated or foreign files
        raise UsageError(f"{path} cannot be read; remove it (and keep state.pt) to finish that "
                         "seed again") from None
    return raw


def finished_seed(seed_dir: Path, epochs: int) -> SeedResult | None:
    """A seed that has trained ``epochs`` epochs, or the fewer that ``--max-steps`` or its
    time budget cut it to (its ``result.pt``), else None."""
    path = seed_dir / runfiles.RESULT
    if not path.exists():
        return None
    result = result_from_dict(_read_result(path))
    return result if len(result.epoch_times) >= epochs or result.cut else None


def check_resume(run_dir: Path, cfg: TrainConfig, in_dim: int | None = None,
                 world_size: int | None = None) -> None:
    """Refuse, in one line and before anything is written, a run directory that ``--resume``
    cannot continue under ``cfg`` (its config.toml with the flags a resume may change).

    Each seed's result.pt and state.pt must be readable, trained under ``cfg``
    (``config_hash``; files from before hashes pass), the seed's own, and not past
    ``cfg.run.epochs``; a state that will train on must come from ``world_size`` processes;
    with ``in_dim`` (the graph's features) their weights must fit the model.
    """
    for seed in range(cfg.run.seeds):
        seed_dir = runfiles.seed_dir(run_dir, seed)
        result, state = seed_dir / runfiles.RESULT, seed_dir / runfiles.STATE
        done = reached = 0
        if result.exists():
            raw = _read_result(result)
            shapes = _shapes(in_dim, cfg, saved_encoder(raw.get("encoder"), cfg, result))
            done = reached = check_seed_file(result, raw, seed, cfg, shapes, _result_parts)
        if state.exists():
            raw = read_state(state)
            shapes = _shapes(in_dim, cfg, saved_encoder(raw.get("encoder"), cfg, state))
            reached = max(reached, check_seed_file(state, raw, seed, cfg, shapes, state_parts))
            if world_size is not None and done < cfg.run.epochs:  # it trains on
                check_world(run_dir, world_size, raw)
        if reached > cfg.run.epochs:
            raise UsageError(f"--epochs {cfg.run.epochs} is below the {reached} epochs seed {seed} "
                             f"has trained in {run_dir}; on --resume --epochs may only grow "
                             f"(pass {reached} or more) and --device change")


def _shapes(in_dim: int | None, cfg: TrainConfig, encoder: str) -> dict[str, dict[str, Tensor]]:
    """The shapes of the model and encoder a seed of ``encoder`` (built in) trains on
    ``in_dim`` features, made on torch's meta device (nothing allocated); none for a user's
    encoder (its own shapes) or without ``in_dim``."""
    if in_dim is None or cfg.model.user_encoder:
        return {}
    model = cfg.with_encoder(encoder).model
    with torch.device("meta"):
        net = with_decoder(AdNGCL(in_dim, model, build_encoder(encoder, in_dim, model)), cfg)
    return {"model": net.state_dict(), "encoder": net.encoder.state_dict()}


def _result_parts(raw: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A result.pt's epochs and weights (the chosen encoder); why it was cut short, if it
    was, must be one of the reasons a run records."""
    if raw["cut"] not in ("", "max_steps", "time_budget"):
        raise ValueError(f"cut {shown(repr(raw['cut']), 40)}")
    return len(raw["epoch_times"]), {"encoder": raw["encoder_state"]}


def state_parts(raw: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A state.pt's epoch and weights (the model, and the best encoder so far); its plan
    (the epochs a time budget cut it to) is checked where it is read (SeedTraining)."""
    if not isinstance(raw["plan"], dict) or "cut" not in raw["plan"]:
        raise ValueError("no plan")
    return int(raw["epoch"]), {"model": raw["trainer"]["model"], "encoder": raw["best"]["state"]}


def check_seed_file(path: Path, raw: dict[str, Any], seed: int, cfg: TrainConfig,
               shapes: dict[str, dict[str, Tensor]],
               parts: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]) -> int:
    """Check one seed file (``check_resume``; ``parts``: its epoch and its weights by the
    model they belong to, checked against ``shapes``); returns the epoch it reached."""
    check_config(path, raw, cfg)
    try:
        epoch, weights = parts(raw)
        owner = raw["seed"]
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path} is incomplete ({type(exc).__name__}: {first_line(exc)}); "
                         "remove it to train that seed afresh") from None
    if owner != seed:
        raise UsageError(f"{path} belongs to seed {owner!r}, not {seed}; remove it to train "
                         "this seed afresh")
    if not (isinstance(epoch, int) and epoch >= 0):  # past --epochs: check_resume says so
        raise UsageError(f"{path} records epoch {shown(repr(epoch), 40)}, not a count of "
                         "epochs; remove it to train that seed afresh")
    for kind, expected in shapes.items():
        why = None if weights.get(kind) is None else misfit(weights[kind], expected)
        if why is not None:
            raise UsageError(f"{path} does not fit this run's model ({why}): it was trained on "
                             "another graph or model; remove it to train that seed afresh")
    return epoch


def saved_encoder(name: object, cfg: TrainConfig, path: Path) -> str:
    """The encoder a saved seed (its state.pt or result.pt) trained: ``name``, the one it
    records, which must be the run's own or, for an ``auto`` run, one of its candidates (a
    file never names code to run: edgegcl.trust); a seed saved before the encoders had names
    (None) trained the run's own, or the GCN, the only built-in encoder then."""
    own = cfg.model.encoder
    if name is None:
        return "gcn" if own == AUTO else own
    allowed = cfg.model.candidates() if own == AUTO else [own]
    if name not in allowed:
        raise UsageError(f"{path} names the encoder {shown(str(name), 60)}, not "
                         f"{' or '.join(allowed)} as this run's configuration says; remove it "
                         "to train that seed afresh")
    return str(name)
