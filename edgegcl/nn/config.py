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
Norm = Literal["none", "batch"]
"""``norm``: what follows each GCN layer's aggregation before its activation."""
ACTIVATIONS: tuple[str, ...] = choices(Activation)


BUILT_IN_ENCODERS: tuple[str, ...] = ("gcn", "ego", "poly")
"""The encoders edgegcl builds itself (edgegcl.nn.family): the paper's GCN, the GCN with an
ego path, the polynomial filter."""
AUTO = "auto"
"""``encoder = "auto"``: one of ``search_encoders`` chosen for each seed by measurement
(edgegcl.training.choice)."""


@dataclass(frozen=True)
class ModelConfig(Section):
    """The encoder and the projection head (the ``[model]`` section).

    The built-in encoders (``BUILT_IN_ENCODERS``) map in_dim -> hidden_dim -> ... -> out_dim:
    ``gcn``, the paper's GCN (Eq. 4), ``num_layers`` layers; ``ego``, the same layers with a
    separate path for each node's own representation beside its neighbours'
    (edgegcl.nn.ego); ``poly``, a learned polynomial of the normalised adjacency over
    ``num_layers`` hops applied to the features' first linear map, then the node-wise rest
    (edgegcl.nn.poly). ``auto`` chooses one of
    ``search_encoders`` per seed by measurement. ``FILE.py:FN`` or ``package.module:FN``
    names a function that builds another encoder instead (``edgegcl.nn.encoders``); the head
    then maps that encoder's width. The head maps out_dim -> proj_dim -> out_dim.

    Args:
        hidden_dim: width of the first layer.
        out_dim: embedding width (the last layer, and the head's output).
        proj_dim: hidden width of the projection head.
        activation: sigma after each layer, one of ACTIVATIONS.
        num_layers: layers (gcn, ego) or hops K (poly).
        encoder: ``auto``, a name of BUILT_IN_ENCODERS, or ``FILE.py:FN`` /
            ``package.module:FN``, FN(in_dim) returning the encoder.
        poly_alpha: poly's coefficients start at personalised PageRank's with this alpha
            (1: the identity, the node's own MLP representation).
        search_encoders: auto's candidates, comma-separated.
        search_epochs: auto: epochs each candidate trains before the choice (0: a quarter of
            the run's epochs, rounded up to a multiple of ``eval_every``).

    Example:
        >>> ModelConfig(hidden_dim=256, out_dim=128, proj_dim=128, activation="relu").out_dim
        128
        >>> ModelConfig(encoder="ego").built_in
        'ego'
    """

    TITLE = "encoder and projection head"
    hidden_dim: int = option(512, "width of the first layer", at_least=1, at_most=1 << 20)
    out_dim: int = option(256, "embedding width (the last layer)", at_least=1, at_most=1 << 20)
    proj_dim: int = option(256, "hidden width of the projection head", at_least=1,
                           at_most=1 << 20)
    activation: Activation = option("prelu", f"activation: {', '.join(ACTIVATIONS)}")
    num_layers: int = option(2, "layers of gcn and ego (the paper's 2), hops of poly: in_dim -> "
                             "hidden_dim -> ... -> out_dim; in mini-batches give --fanout one "
                             "hop per layer", at_least=1, at_most=16, omit_default=True)
    norm: Norm = option("none", "gcn: batch normalisation after each layer's aggregation, "
                        "before its activation (batch: running statistics at inference, "
                        "folded into the layer's weights on export), or none",
                        omit_default=True)
    encoder: str = option(AUTO, "auto (chosen per seed by measurement: the GCN at once where "
                          "the seed's labelled nodes clearly keep to their class across edges "
                          "(adjusted homophily); else a short search on the validation metric, "
                          "another than the first candidate only when more than one standard "
                          "error above it; how alike linked nodes' features are for an "
                          "unlabelled graph), gcn (the paper's GCN), ego "
                          "(a GCN with a separate path for each node itself), poly (a learned "
                          "polynomial filter over the hops), or FILE.py:FN / package.module:FN, "
                          "FN(in_dim) returning a torch.nn.Module called as module(x, "
                          "edge_index) (the widths and activation are then its own)",
                          omit_default=True)
    poly_alpha: float = option(1.0, "poly: its coefficients start at personalised PageRank's "
                               "with this alpha (1: the identity, each node's own MLP "
                               "representation)", above=0.0, at_most=1.0, omit_default=True)
    search_encoders: str = option(",".join(BUILT_IN_ENCODERS), "auto: the encoders tried, "
                                  "comma-separated", omit_default=True)
    search_epochs: int = option(0, "auto: epochs each candidate trains before the choice (0: a "
                                "quarter of --epochs, up to a probe epoch)", at_least=0,
                                at_most=1_000_000, omit_default=True)

    GCN_ONLY: ClassVar[tuple[str, ...]] = ("hidden_dim", "out_dim", "activation", "num_layers",
                                           "poly_alpha", "norm")
    """What another encoder (``encoder = FILE.py:FN``) does not read."""

    def check(self) -> None:
        if self.encoder == "":  # written before the built-in family: the GCN
            object.__setattr__(self, "encoder", "gcn")
        if self.encoder not in (AUTO, *BUILT_IN_ENCODERS):
            if ":" not in self.encoder.strip(":"):
                raise UsageError(f"--encoder must be {AUTO}, {', '.join(BUILT_IN_ENCODERS)}, "
                                 f"FILE.py:FN or package.module:FN, got {self.encoder!r}")
            where = self.encoder.rpartition(":")[0]
            if where.endswith(".py") and not Path(where).expanduser().is_file():
                raise UsageError(f"--encoder {self.encoder}: {where} does not exist; pass the "
                                 "path of a Python file")
        names = self.candidates()
        unknown = [name for name in names if name not in BUILT_IN_ENCODERS]
        if not names or unknown or len(set(names)) != len(names):
            raise UsageError(f"--search-encoders must name built-in encoders ("
                             f"{', '.join(BUILT_IN_ENCODERS)}) once each, comma-separated, got "
                             f"{self.search_encoders!r}")

    @property
    def built_in(self) -> str | None:
        """The built-in encoder this section names (None for ``auto`` and a user's)."""
        return self.encoder if self.encoder in BUILT_IN_ENCODERS else None

    @property
    def user_encoder(self) -> bool:
        """Whether the encoder is a user's function (``FILE.py:FN``), i.e. code to import."""
        return self.encoder not in (AUTO, *BUILT_IN_ENCODERS)

    def candidates(self) -> list[str]:
        """``search_encoders`` as a list of names."""
        return [name.strip() for name in self.search_encoders.split(",") if name.strip()]

    def unused(self) -> tuple[str, ...]:
        """The fields the encoder this section names does not read."""
        search = ("search_encoders", "search_epochs")
        if self.user_encoder:
            return (*self.GCN_ONLY, *search)
        auto = self.encoder == AUTO
        poly = "poly" in self.candidates() if auto else self.encoder == "poly"
        gcn = "gcn" in self.candidates() if auto else self.encoder == "gcn"
        return (*(() if auto else search), *(() if poly else ("poly_alpha",)),
                *(() if gcn else ("norm",)))


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
