"""Any encoder in place of the built-in GCN: found by name, and given the projection head.

``edgegcl train --encoder FILE.py:FN`` (or ``package.module:FN``) names a function that takes
the graph's feature dimension and returns a ``torch.nn.Module`` called as
``module(x, edge_index)``: a PyG ``GraphSAGE``, ``GAT``, ``GIN``, or one's own. ``load_encoder``
finds and calls it; ``Encoded`` gives it what the engine needs of a model (the projection head,
``project``, and frozen embeddings, ``embed``), as ``AdNGCL`` does for the GCN; ``make_model``
picks between them. The run directory's config.toml records the name, so ``--resume`` and
``edgegcl export`` rebuild the same encoder.

Naming an encoder runs code, so a name read from a file (a checkpoint, a run's config.toml, a
``--config`` file) is used only when the user named the same encoder themselves
(``allow_encoder``: ``--encoder SPEC`` on the command line); ``check_named`` refuses it
otherwise, before anything is imported.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import torch
from torch import Tensor, nn

from edgegcl.errors import UsageError, first_line
from edgegcl.trust import allow_encoder, canonical_spec, check_named
from edgegcl.nn.augment import keep_columns
from edgegcl.nn.config import ModelConfig
from edgegcl.nn.family import build_encoder, check_model_size
from edgegcl.nn.model import AdNGCL, ProjectionHead

__all__ = ["Encoded", "allow_encoder", "canonical_spec", "check_named", "load_encoder",
           "make_model"]

def _function(spec: str) -> Callable[[int], nn.Module]:
    """The function ``FILE.py:FN`` or ``package.module:FN`` names, or one UsageError line."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise UsageError(f"--encoder must be FILE.py:FN or package.module:FN, got {spec!r}")
    path = Path(where).expanduser().resolve()
    module_name = f"edgegcl_encoder_{abs(hash(str(path)))}"
    try:
        if where.endswith(".py"):
            if not path.is_file():
                raise UsageError(f"--encoder {spec}: {where} does not exist; pass the path of a "
                                 "Python file")
            module = sys.modules.get(module_name)
            if module is None:
                loader = importlib.util.spec_from_file_location(module_name, path)
                assert loader is not None and loader.loader is not None
                module = importlib.util.module_from_spec(loader)
                sys.modules[module_name] = module
                loader.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except UsageError:
        raise
    except Exception as exc:  # the user's module failed to import: say where
        sys.modules.pop(module_name, None)
        raise UsageError(f"--encoder {spec}: importing {where} failed ({type(exc).__name__}: "
                         f"{first_line(exc)}); fix that module") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"--encoder {spec}: {where} has no function {name!r}; name a function "
                         "that takes the feature dimension and returns a torch.nn.Module")
    return fn  # type: ignore[no-any-return]


def load_encoder(spec: str, in_dim: int) -> nn.Module:
    """The encoder ``spec`` (``FILE.py:FN`` or ``package.module:FN``) builds for ``in_dim``
    features: ``FN(in_dim)``, which must return a ``torch.nn.Module``; one UsageError line
    otherwise.

    Example:
        >>> enc = load_encoder("torch.nn:Identity", 8)  # any callable returning a Module
        >>> type(enc).__name__
        'Identity'
    """
    try:
        encoder = _function(spec)(in_dim)
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"--encoder {spec}: calling it with in_dim={in_dim} failed "
                         f"({type(exc).__name__}: {first_line(exc)}); fix the function") from None
    if not isinstance(encoder, nn.Module):
        raise UsageError(f"--encoder {spec} returned {type(encoder).__name__}, not a "
                         "torch.nn.Module; return the encoder module")
    return encoder


def output_width(encoder: nn.Module, in_dim: int) -> int:
    """The embedding width of ``encoder``, read from its output on a two-node graph (in eval
    mode, without autograd and with the global random stream restored)."""
    was_training = encoder.training
    encoder.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            param = next(encoder.parameters(), None)
            device = param.device if param is not None else torch.device("cpu")
            out = encoder(torch.zeros(2, in_dim, device=device),
                          torch.tensor([[0, 1], [1, 0]], device=device))
    except Exception as exc:
        raise UsageError(f"the encoder ({type(encoder).__name__}) cannot be called as "
                         f"encoder(x, edge_index) ({type(exc).__name__}: {first_line(exc)}); "
                         "pass a module with that forward") from None
    finally:
        encoder.train(was_training)
    if not isinstance(out, Tensor) or out.dim() != 2 or out.size(0) != 2:
        raise UsageError(f"the encoder ({type(encoder).__name__}) must return one [N, D] "
                         "tensor of node embeddings from encoder(x, edge_index)")
    return int(out.size(1))


class Encoded(nn.Module):
    """Any encoder f called as ``f(x, edge_index)``, plus the projection head g (Eq. 5).

    It takes the engine's calls as ``AdNGCL`` does: ``forward(x, edge_index,
    num_sampled_nodes, feature_keep)``, the column mask applied to the features (a generic
    encoder has no first weight matrix to fold it into), and on a sampled subgraph the seed
    nodes' rows (the first ``num_sampled_nodes[0]``, as PyG's loaders order them); ``embed``
    runs the encoder on the whole graph, frozen.

    Args:
        encoder: the module.
        in_dim: feature dimension of the graph.
        proj_dim: hidden width of the head (its output is the encoder's width).

    Example:
        >>> from torch_geometric.nn import GraphSAGE
        >>> model = Encoded(GraphSAGE(8, 16, num_layers=2, out_channels=4), 8, proj_dim=4)
        >>> x, edges = torch.randn(5, 8), torch.tensor([[0, 1, 2], [1, 2, 3]])
        >>> model.project(model(x, edges)).shape, model.embed(x, edges).shape
        (torch.Size([5, 4]), torch.Size([5, 4]))
    """

    def __init__(self, encoder: nn.Module, in_dim: int, proj_dim: int) -> None:
        super().__init__()
        self.encoder = encoder
        width = output_width(encoder, in_dim)
        self.head = ProjectionHead(replace(ModelConfig(), out_dim=width, proj_dim=proj_dim))

    def forward(self, x: Tensor, edge_index: Tensor,
                num_sampled_nodes: Sequence[int] | None = None,
                feature_keep: Tensor | None = None) -> Tensor:
        if x.layout != torch.strided:  # sparse features: a generic encoder takes them dense
            x = x.to_dense()
        if feature_keep is not None:
            x = keep_columns(x, feature_keep)
        z = self.encoder(x, edge_index)
        return z if num_sampled_nodes is None else z[: num_sampled_nodes[0]]

    def project(self, z: Tensor) -> Tensor:
        return self.head(z)

    @torch.no_grad()
    def embed(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Frozen embeddings of every node, in eval mode."""
        was_training = self.training
        self.eval()
        try:
            return self(x, edge_index)
        finally:
            self.train(was_training)


def make_model(in_dim: int, cfg: ModelConfig, encoder: nn.Module | None = None) -> nn.Module:
    """The model a run trains: ``encoder`` with the head (``Encoded``), else the encoder
    ``cfg.encoder`` names: a user's function's (``Encoded``) or a built-in one with the head
    (``AdNGCL``; edgegcl.nn.family), its size checked first."""
    if encoder is None and cfg.user_encoder:
        encoder = load_encoder(cfg.encoder, in_dim)
    if encoder is None:
        name = cfg.built_in
        if name is None:
            raise ValueError(f"encoder {cfg.encoder!r} must be resolved to a built-in encoder "
                             "(edgegcl.training.choice) before its model is built")
        check_model_size(in_dim, cfg, name)
        return AdNGCL(in_dim, cfg, build_encoder(name, in_dim, cfg))
    return Encoded(encoder, in_dim, cfg.proj_dim)
