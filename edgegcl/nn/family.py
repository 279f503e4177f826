"""The built-in encoders by name, the model a run trains, and what a model costs in memory.

``ENCODERS`` maps ``--encoder`` names to their classes; each is called as ``encoder(x,
edge_index, num_sampled_nodes=None, feature_keep=None)`` (trimmed to the seeds on a sampled
subgraph, view 1's column mask folded into its first weights), embeds every node a chunk at a
time (``embed_nodes``) and exports to the portable ONNX model (edgegcl.onnx.module).
``make_model`` gives a run its model: a built-in encoder with the projection head
(``AdNGCL``), or a user's encoder (edgegcl.nn.encoders) with it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from edgegcl.memory import check_allocation
from edgegcl.nn.config import AUTO, BUILT_IN_ENCODERS, ModelConfig
from edgegcl.nn.ego import EgoEncoder
from edgegcl.nn.model import AdNGCL, GCNEncoder, layer_widths
from edgegcl.nn.poly import PolyEncoder

__all__ = ["ENCODERS", "build_encoder", "check_model_size", "encoder_name"]

ENCODERS: dict[str, Callable[[int, ModelConfig], nn.Module]] = {
    "gcn": GCNEncoder, "ego": EgoEncoder, "poly": PolyEncoder}
"""The built-in encoders by name (``BUILT_IN_ENCODERS``; a new one: its module and a line
here)."""
assert tuple(ENCODERS) == BUILT_IN_ENCODERS


def build_encoder(name: str, in_dim: int, cfg: ModelConfig) -> nn.Module:
    """The built-in encoder ``name`` for ``in_dim`` features with ``cfg``'s widths.

    Example:
        >>> build_encoder("poly", 8, ModelConfig(16, 4, 4)).num_layers
        2
    """
    if name == AUTO:
        raise ValueError("encoder 'auto' is resolved to a built-in encoder per seed "
                         "(edgegcl.training.choice) before a model is built")
    if name not in ENCODERS:
        raise ValueError(f"unknown built-in encoder {name!r}; one of {', '.join(ENCODERS)}")
    return ENCODERS[name](in_dim, cfg)


def encoder_name(encoder: nn.Module) -> str | None:
    """The built-in name of ``encoder`` (None for a user's module)."""
    return next((name for name, cls in ENCODERS.items() if type(encoder) is cls), None)


def check_model_size(in_dim: int, cfg: ModelConfig, name: str) -> None:
    """One UsageError line, before anything is allocated, when built-in encoder ``name``'s
    weights and the head's, with their gradients and Adam's two moments (four copies), exceed
    the memory available. The weights are counted on torch's meta device (no memory)."""
    with torch.device("meta"):
        model = AdNGCL(in_dim, cfg, build_encoder(name, in_dim, cfg))
    weights = sum(p.numel() for p in model.parameters())
    widths = layer_widths(in_dim, cfg)
    check_allocation(4.0 * 4 * weights, f"a {name} encoder of widths "
                     f"{' -> '.join(map(str, widths))} (head {cfg.proj_dim}) with its "
                     "gradients and Adam's state",
                     "pass smaller --hidden-dim, --out-dim or --proj-dim")
