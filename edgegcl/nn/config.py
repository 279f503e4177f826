"""The ``[model]`` and ``[augment]`` sections: the encoder and head, and the two views. The
standard library alone, so that the command line builds its flags before torch loads; the
modules they configure are ``edgegcl.nn.model`` and ``edgegcl.nn.augment``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from edgegcl.config import Section, choices, option
from edgegcl.errors import UsageError

Activation = Literal["relu", "prelu", "elu", "rrelu"]
ACTIVATIONS: tuple[str, ...] = choices(Activation)


@dataclass(frozen=True)
class ModelConfig(Section):
    """The encoder and the projection head (the ``[model]`` section).

    The built-in encoder is the 2-layer GCN: in_dim -> hidden_dim -> out_dim; the head maps
    its out_dim -> proj_dim -> out_dim. ``encoder`` names a function that builds another
    encoder instead (``edgegcl.nn.encoders``); the head then maps that encoder's width.

    Args:
        hidden_dim: width of the first GCN layer.
        out_dim: embedding width (second GCN layer, and the head's output).
        proj_dim: hidden width of the projection head.
        activation: sigma after each GCN layer, one of ACTIVATIONS.
        encoder: ``FILE.py:FN`` or ``package.module:FN``, FN(in_dim) returning the encoder;
            ``""``: the built-in GCN.

    Example:
        >>> ModelConfig(hidden_dim=256, out_dim=128, proj_dim=128, activation="relu").out_dim
        128
    """

    TITLE = "encoder and projection head"
    hidden_dim: int = option(512, "width of the first GCN layer", at_least=1)
    out_dim: int = option(256, "embedding width (second GCN layer)", at_least=1)
    proj_dim: int = option(256, "hidden width of the projection head", at_least=1)
    activation: Activation = option("prelu", f"activation: {', '.join(ACTIVATIONS)}")
    num_layers: int = option(2, "GCN layers (the paper's 2): in_dim -> hidden_dim -> ... -> "
                             "out_dim; in mini-batches give --fanout one hop per layer",
                             at_least=1, at_most=16, omit_default=True)
    encoder: str = option("", "FILE.py:FN or package.module:FN, FN(in_dim) returning a "
                          "torch.nn.Module called as module(x, edge_index), to train instead of "
                          "the built-in GCN ('': the GCN; the GCN's widths and activation are "
                          "then unused)", omit_default=True)

    GCN_ONLY: ClassVar[tuple[str, ...]] = ("hidden_dim", "out_dim", "activation", "num_layers")
    """What another encoder (``encoder``) does not read."""

    def check(self) -> None:
        if self.encoder and ":" not in self.encoder.strip(":"):
            raise UsageError(f"--encoder must be FILE.py:FN or package.module:FN, got "
                             f"{self.encoder!r}")
        where = self.encoder.rpartition(":")[0]
        if where.endswith(".py") and not Path(where).expanduser().is_file():
            raise UsageError(f"--encoder {self.encoder}: {where} does not exist; pass the path "
                             "of a Python file")

    def unused(self) -> tuple[str, ...]:
        """The fields the encoder this section names does not read."""
        return self.GCN_ONLY if self.encoder else ()


FixedHalf = Literal["step", "run"]
"""When view 2's kept half of the columns (Eq. 3) is drawn: at every step, or once per run."""


@dataclass(frozen=True)
class AugmentConfig(Section):
    """The two views' drop probabilities (the ``[augment]`` section; Eqs. 1-3).

    Example:
        >>> AugmentConfig(p_edge_1=0.3).p_edge_2
        0.4
    """

    TITLE = "the two views (drop probabilities, Eqs. 1-3)"
    p_edge_1: float = option(0.2, "view 1: probability of removing an edge (Eq. 1)",
                             at_least=0.0, at_most=1.0)
    p_edge_2: float = option(0.4, "view 2: probability of removing an edge", at_least=0.0,
                             at_most=1.0)
    p_feature_1: float = option(0.3, "view 1: probability of masking a feature column (Eq. 2)",
                                at_least=0.0, at_most=1.0)
    p_feature_2: float = option(0.4, "view 2: probability of masking an entry of the unfixed "
                                "half of the columns (Eq. 3)", at_least=0.0, at_most=1.0)
    fixed_half: FixedHalf = option("step", "view 2's kept half of the columns (Eq. 3): step "
                                   "(redrawn at every step) or run (drawn once per run and seed)")
