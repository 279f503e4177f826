"""The node task (``--task node``): the embeddings judged on the nodes' labels by a linear
probe (multi-class, binary or multi-label; edgegcl.training.prober), on each seed's random
split of the nodes (or the graph's published splits beside it). The encoder trains on the
whole graph: nothing is held out of it. A clearly homophilous labelled graph keeps the GCN
without an encoder search (edgegcl.training.choice)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from edgegcl.data.config import canonical_name
from edgegcl.evaluation.names import NODE_METRICS
from edgegcl.training.task import Task, TaskProber, register

if TYPE_CHECKING:
    import torch
    from torch import Tensor
    from torch_geometric.data import Data

    from edgegcl.training.results import EncoderChoice

__all__ = ["NodeTask"]


@register
class NodeTask(Task):
    """Node labels, scored by the probe's micro- or macro-F1 or ROC-AUC."""

    name = "node"
    judges = "node labels"
    scored_by = "the linear probe's test figure on random 10/10/80 node splits"
    metrics = NODE_METRICS
    objective = "views"
    search_share = 0.25
    authors_protocol = True

    def preset(self, dataset: str) -> str | None:
        """A named benchmark dataset's own preset (``presets/CiteSeer.toml``)."""
        return canonical_name(dataset)

    def preset_owner(self, dataset: str) -> str:
        return dataset

    def start_line(self, data: Data, metric: str) -> str | None:
        """The labels and the figure that chooses; a note where the graph brings held-out
        pairs this task does not read."""
        # torch-side: this module is read before torch loads (edgegcl.training.task)
        from edgegcl.data.validation import brings_link_pairs
        from edgegcl.evaluation.metrics import labels_line
        if brings_link_pairs(data):
            return (f"note: {data.name} holds held-out pairs for the link task, which --task "
                    "node does not read (--task link does)")
        if self.labelled(data):
            return labels_line(data.y, metric)
        return None

    def training_graph(self, data: Data, held: None) -> Data:
        """The whole graph (a graph folder's carrying the adjacency of its mapped index)."""
        from edgegcl.training.placement import on_disk  # torch-side (edgegcl.training.task)
        return on_disk(data)

    def prober(self, data: Data, held: None, seed: int, device: torch.device,
               metric: str, protocol: str, scratch: Path | None) -> TaskProber:
        from edgegcl.training.prober import Prober  # torch-side (edgegcl.training.task)
        return Prober(data, seed, device, protocol, metric, scratch=scratch)

    def score_embeddings(self, z: Tensor, data: Data, metric: str, seed: int
                         ) -> tuple[str, float] | None:
        """The linear probe's test figure on seed ``seed``'s random split (weight decay chosen
        on its validation nodes)."""
        if not self.labelled(data):
            return None
        # torch-side (edgegcl.training.task)
        from edgegcl.evaluation.probe import labelled_split, linear_probe
        scores = linear_probe(z, data.y, labelled_split(data.y, seed), seed=seed, metric=metric)
        return scores.metric, scores.test_score

    def labelled(self, data: Data) -> bool:
        """Labels on at least MIN_LABELLED_NODES nodes (one each to train, validate, test)."""
        from edgegcl.evaluation.probe import labelled_nodes  # torch-side (as above)
        from edgegcl.training.prober import MIN_LABELLED_NODES
        y = getattr(data, "y", None)
        if y is None:
            return False
        ids = labelled_nodes(y)
        return (data.num_nodes if ids is None else ids.numel()) >= MIN_LABELLED_NODES

    def clear_choice(self, data: Data, candidates: Sequence[str], seed: int
                     ) -> EncoderChoice | None:
        """The GCN without a search, where the seed's training and validation nodes (its
        random split's: what the search would read) are clearly homophilous (adjusted
        homophily less two standard errors at least HOMOPHILY_THRESHOLD); None otherwise, and
        for multi-label targets or a candidate list that does not start with the GCN."""
        # torch-side (edgegcl.training.task)
        import torch

        from edgegcl.data.homophily import adjusted_homophily
        from edgegcl.evaluation.probe import labelled_split
        from edgegcl.training.results import HOMOPHILY_THRESHOLD, EncoderChoice
        y = data.y
        if (y.dim() != 1 or y.dtype.is_floating_point
                or candidates[0] != "gcn"):
            return None
        split = labelled_split(y, seed)
        found = adjusted_homophily(y, data.edge_index, torch.cat([split.train, split.val]))
        if found is None or found.value - 2 * found.standard_error < HOMOPHILY_THRESHOLD:
            return None
        return EncoderChoice("gcn", "homophily", margin=found.standard_error,
                             homophily=found.value)
