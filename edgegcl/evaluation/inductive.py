"""Nodes that arrive after training: the inductive protocol.

A seeded share of the nodes (10 % by default) is held out with every edge it touches
(``hold_out_nodes``); the encoder trains on the graph of the other nodes (``seen_graph``).
Then the whole graph, held-out nodes included, is embedded by the trained model (on a device:
the exported ONNX model in ``edgegcl-embed``), and the held-out nodes are scored as new nodes
(``inductive_scores``): their labels by a linear probe fitted on seen nodes only (its weight
decay chosen on other seen nodes), their own edges against as many non-edges from each of
them, by the embeddings' cosine similarity. The raw features are scored the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch_geometric.data import Data

from edgegcl.evaluation.links import pair_figures
from edgegcl.evaluation.probe import Split, linear_probe

__all__ = ["NodeHoldout", "hold_out_nodes", "inductive_scores"]


@dataclass(frozen=True)
class NodeHoldout:
    """The nodes training sees and the ones held out (sorted node ids of the whole graph)."""

    num_nodes: int
    seen: Tensor
    held: Tensor

    def seen_graph(self, data: Data) -> Data:
        """The graph of the seen nodes alone (renumbered 0 .. |seen| - 1 in order): their
        features, labels and the edges between them; every edge touching a held-out node is
        gone."""
        keep = torch.zeros(self.num_nodes, dtype=torch.bool)
        keep[self.seen] = True
        new_id = torch.full((self.num_nodes,), -1, dtype=torch.long)
        new_id[self.seen] = torch.arange(self.seen.numel())
        edges = data.edge_index[:, keep[data.edge_index[0]] & keep[data.edge_index[1]]]
        y = getattr(data, "y", None)
        return Data(x=data.x[self.seen], edge_index=new_id[edges],
                    **({} if y is None else {"y": y[self.seen]}))


def hold_out_nodes(num_nodes: int, seed: int, share: float = 0.1) -> NodeHoldout:
    """Hold out ``floor(share * N)`` nodes (at least one) chosen at random (seeded).

    Example:
        >>> h = hold_out_nodes(50, seed=0)
        >>> h.seen.numel(), h.held.numel()
        (45, 5)
    """
    count = max(1, int(share * num_nodes))
    perm = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(seed))
    return NodeHoldout(num_nodes, perm[count:].sort().values, perm[:count].sort().values)


def _held_pairs(data: Data, holdout: NodeHoldout, seed: int) -> tuple[Tensor, Tensor]:
    """The held-out nodes' own edges (each undirected edge once) and as many non-edges, each
    from a held-out node to a node drawn uniformly."""
    n = holdout.num_nodes
    held = torch.zeros(n, dtype=torch.bool)
    held[holdout.held] = True
    lo = torch.minimum(data.edge_index[0], data.edge_index[1])
    hi = torch.maximum(data.edge_index[0], data.edge_index[1])
    keys = torch.unique((lo * n + hi)[(lo != hi) & (held[lo] | held[hi])])
    positive = torch.stack([keys // n, keys % n])
    edges = torch.unique(lo * n + hi)
    g = torch.Generator().manual_seed(seed)
    found = torch.empty(0, dtype=torch.long)
    while found.numel() < keys.numel():
        a = holdout.held[torch.randint(0, holdout.held.numel(), (2 * keys.numel() + 8,),
                                       generator=g)]
        b = torch.randint(0, n, (a.numel(),), generator=g)
        k = torch.minimum(a, b) * n + torch.maximum(a, b)
        k = k[(a != b) & ~torch.isin(k, edges)]
        found = torch.unique(torch.cat([found, k]))
    found = found[torch.randperm(found.numel(), generator=g)[:keys.numel()]]
    return positive, torch.stack([found // n, found % n])


def _cosine(z: Tensor, pairs: Tensor) -> Tensor:
    return torch.nn.functional.cosine_similarity(z[pairs[0]].float(), z[pairs[1]].float(),
                                                 dim=1, eps=1e-12)


def inductive_scores(z: Tensor, data: Data, holdout: NodeHoldout, seed: int = 0
                     ) -> dict[str, float]:
    """The held-out nodes scored as new nodes from embeddings (or features) ``z`` [N, D] of
    the whole graph: ``test_micro_f1`` / ``test_macro_f1`` (and ``test_roc_auc`` for binary
    labels) of a probe fitted on seen nodes (80 % to fit, 20 % to choose its weight decay),
    and ``link_auc`` / ``link_ap`` of their own edges against non-edges by cosine."""
    out: dict[str, float] = {}
    y = getattr(data, "y", None)
    if y is not None:
        order = holdout.seen[torch.randperm(holdout.seen.numel(),
                                            generator=torch.Generator().manual_seed(seed))]
        cut = int(0.8 * order.numel())
        scores = linear_probe(z, y, Split(order[:cut], order[cut:], holdout.held), seed=seed)
        out.update({k: v for k, v in scores.figures().items() if k.startswith("test_")})
        out["majority_rate"] = scores.majority
    positive, negative = _held_pairs(data, holdout, seed)
    links = pair_figures(_cosine(z, positive), _cosine(z, negative))
    out.update(link_auc=links["auc"], link_ap=links["ap"])
    return out
