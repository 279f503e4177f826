"""The link task (``--task link``): the embeddings judged on which pairs connect. Each seed
holds out 5 % / 10 % of the edges for validation / test with as many non-edges (or every seed
reads the graph file's own held-out pairs), the encoder trains on the remaining edges only,
and the validation pairs' AUC (or AP, Hits@K) chooses checkpoints and the encoder
(edgegcl.training.linkprober). ``--objective auto`` learns from the edges (masked edges
scored back against non-edges), as measured (docs/tasks.md)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from edgegcl.evaluation.names import LINK_METRICS
from edgegcl.training.task import Task, TaskProber, register

if TYPE_CHECKING:
    import torch
    from torch import Tensor
    from torch_geometric.data import Data

    from edgegcl.evaluation.links import LinkSplit
    from edgegcl.training.results import EncoderChoice

__all__ = ["LinkTask"]


@register
class LinkTask(Task):
    """Links, scored by the validation pairs' ROC-AUC, AP or Hits@K.

    ``search_share``: each candidate of the encoder search trains a tenth of the run's
    epochs, so that its three candidates cost at most about 0.3 of the run."""

    name = "link"
    judges = "links"
    scored_by = ("the held-out pairs of seeded 85/5/10 edge splits, the scorer chosen on "
                 "validation (the graph embedded whole: its held-out edges included)")
    metrics = LINK_METRICS
    objective = "edges"
    search_share = 0.1
    folder_problem = ("the link task splits its edges in memory; train --task link on an .npz "
                      "of the graph")

    def preset(self, dataset: str) -> str | None:
        """``presets/link.toml`` whatever the graph (the edge objective's model and optimiser,
        chosen on validation AUC)."""
        return "link"

    def start_line(self, data: Data, metric: str) -> str | None:
        """Where the held-out pairs come from and the figure that chooses."""
        # torch-side: this module is read before torch loads (edgegcl.training.task)
        from edgegcl.data.validation import brings_link_pairs
        from edgegcl.evaluation.metrics import metric_name
        from edgegcl.training.linkprober import resolve_link_metric
        given = brings_link_pairs(data)
        held = ("the graph file's own held-out pairs are validation and test (val_pos / "
                "val_neg, test_pos / test_neg); every seed trains on its edge_index" if given else
                "each seed holds out 5 % / 10 % of the edges for validation / test (with as "
                "many non-edges) and trains on the rest")
        return (f"task: link; {held}; checkpoints and the encoder chosen on validation "
                f"{metric_name(resolve_link_metric(metric))} (--metric)")

    def held_out(self, data: Data, seed: int) -> LinkSplit:
        """The graph file's own split, else seed ``seed``'s split of the edges (85 / 5 / 10)."""
        from edgegcl.training.linkprober import seed_link_split  # torch-side (as above)
        return seed_link_split(data, seed)

    def training_graph(self, data: Data, held: LinkSplit) -> Data:
        """``data`` with its training edges only: no held-out edge reaches message passing,
        the views or the negatives."""
        from edgegcl.training.linkprober import training_graph  # torch-side (as above)
        return training_graph(data, held)

    def prober(self, data: Data, held: LinkSplit, seed: int, device: torch.device,
               metric: str, protocol: str, scratch: Path | None) -> TaskProber:
        from edgegcl.training.linkprober import LinkProber  # torch-side (as above)
        return LinkProber(held, data.x, seed, device, metric)

    def score_embeddings(self, z: Tensor, data: Data, metric: str, seed: int
                         ) -> tuple[str, float] | None:
        """The test figure of seed ``seed``'s held-out pairs, by the scorer chosen on its
        validation pairs."""
        # torch-side (edgegcl.training.task)
        from edgegcl.evaluation.links import link_scores
        from edgegcl.training.linkprober import resolve_link_metric
        scores = link_scores(z, self.held_out(data, seed), resolve_link_metric(metric), seed)
        return scores.metric, scores.test_score

    def clear_choice(self, data: Data, candidates: Sequence[str], seed: int
                     ) -> EncoderChoice | None:
        """The GCN without a search, where the features of the seed's training edges'
        endpoints clearly agree (feature agreement at least AGREEMENT_THRESHOLD: the citation
        graphs, where the link search always kept the GCN, docs/encoders.md); None otherwise,
        and for a candidate list that does not start with the GCN."""
        # torch-side (edgegcl.training.task)
        from edgegcl.data.homophily import feature_agreement
        from edgegcl.training.results import AGREEMENT_THRESHOLD, EncoderChoice
        if candidates[0] != "gcn":
            return None
        agreement = feature_agreement(data.x, self.held_out(data, seed).train, seed)
        if agreement < AGREEMENT_THRESHOLD:
            return None
        return EncoderChoice("gcn", "agreement", agreement=agreement)
