"""What a run's embeddings are judged on (``--task``), as one family: the base every task
derives from and the registry.

A task says, for a run and each of its seeds: the validation figures that may choose
(``metrics``) and what ``--objective auto`` trains with; the preset a run of it starts from;
the line it says before training; what it holds out of the graph (``held_out``: the link
task's held-out edges, nothing for node labels) and the graph the encoder then trains on;
the prober that judges each checkpoint (the interface of edgegcl.training.prober.Prober:
``probe``, ``selection``, ``baselines``, ``standard_error``, the best checkpoint, a state
dict); and its part of ``encoder = "auto"`` (whether a search can choose, and where a signal
chooses without one).

Members (``MEMBERS``): ``node`` (node labels, edgegcl.training.nodetask) and ``link``
(which pairs connect, edgegcl.training.linktask). A new task is a module with a
``@register``-ed subclass and its module's name in ``MEMBERS``: ``--task NAME``, config
files, the encoder search, the checkpoints, the run's summary and the command line's checks
follow from the class (docs/contributing.md). This module and its members import no torch at
import time: the configuration refuses a task's foreign ``--metric`` before torch loads, so a
member imports its torch-side collaborators inside the methods that use them.

Example:
    >>> task_named("link").objective, task_named("node").objective
    ('edges', 'views')
    >>> metric_problem("auc", "node")[:40]
    "--metric auc scores links, but this run's"
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

if TYPE_CHECKING:  # the torch side, for annotations only
    import torch
    from torch import Tensor, nn
    from torch_geometric.data import Data

    from edgegcl.evaluation.probe import Selection
    from edgegcl.training.prober import Baselines
    from edgegcl.training.results import EncoderChoice

__all__ = ["MEMBERS", "Task", "TaskProber", "metric_problem", "register", "task_named",
           "task_names"]

MEMBERS = ("edgegcl.training.nodetask", "edgegcl.training.linktask")
"""The modules whose ``@register``-ed classes are the tasks, in ``--help`` order."""


class TaskProber(Protocol):
    """What the seed loop, its hooks and the encoder search read of a task's prober."""

    metric: str
    history: list[tuple[int, Any]]
    best_val: float
    best_epoch: int
    best_state: dict[str, Tensor] | None
    authors: list[Any]

    def probe(self, epoch: int, model: nn.Module, x: Tensor, edge_index: Tensor,
              last: bool) -> dict[str, float]: ...

    def selection(self, model: nn.Module, x: Tensor, edge_index: Tensor
                  ) -> Selection | None: ...

    def baselines(self, model: nn.Module, x: Tensor, edge_index: Tensor) -> Baselines: ...

    def standard_error(self, value: float) -> float: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Task:
    """One task; a member sets the class attributes and overrides what differs.

    ``judges``: what it scores, in words (``node labels``); ``scored_by``: how
    ``score_embeddings`` judges frozen embeddings, in words; ``metrics``: the validation
    figures that may choose its checkpoints and encoder, besides ``auto``; ``objective``: what
    ``--objective auto`` trains with; ``search_share``: the share of a seed's epochs each
    candidate of the encoder search trains; ``authors_protocol``: whether ``--protocol both``
    has a counterpart; ``folder_problem``: why a graph folder cannot train it (empty: it can).
    """

    name: ClassVar[str] = ""
    judges: ClassVar[str] = ""
    scored_by: ClassVar[str] = ""
    metrics: ClassVar[tuple[str, ...]] = ()
    objective: ClassVar[str] = "views"
    search_share: ClassVar[float] = 0.25
    authors_protocol: ClassVar[bool] = False
    folder_problem: ClassVar[str] = ""

    def preset(self, dataset: str) -> str | None:
        """The stem of the presets file a run of this task on ``dataset`` starts from (None:
        the global defaults)."""
        return None

    def preset_owner(self, dataset: str) -> str:
        """Whose tuned defaults those are, for the start line."""
        return f"the {self.name} task"

    def start_line(self, data: Data, metric: str) -> str | None:
        """What the run says before training about what judges it (None: nothing)."""
        return None

    def held_out(self, data: Data, seed: int) -> Any:
        """What seed ``seed`` holds out of ``data`` before training (None: nothing)."""
        return None

    def training_graph(self, data: Data, held: Any) -> Data:
        """The graph the encoder of a seed that held out ``held`` trains on."""
        return data

    def prober(self, data: Data, held: Any, seed: int, device: torch.device, metric: str,
               protocol: str, scratch: Path | None) -> TaskProber:
        """The prober that judges seed ``seed``'s checkpoints (``data``: its training graph;
        ``metric``, ``protocol``: the run's ``--metric`` and ``--protocol``; ``scratch``: the
        folder where a graph on disk puts its all-node layers)."""
        raise NotImplementedError

    def score_embeddings(self, z: Tensor, data: Data, metric: str, seed: int
                         ) -> tuple[str, float] | None:
        """Frozen embeddings ``z`` of ``data`` judged as this task judges a run, on seed
        ``seed``'s split: the figure's name (``metric`` resolved) and its test value (%);
        None where ``data`` cannot be judged (no labels). What an export's INT8 check compares
        (edgegcl.onnx.quantize)."""
        return None

    def labelled(self, data: Data) -> bool:
        """Whether ``data`` has what the encoder search reads (else a label-free signal picks
        the encoder)."""
        return True

    def clear_choice(self, data: Data, candidates: Sequence[str], seed: int
                     ) -> EncoderChoice | None:
        """The encoder chosen without a search among ``candidates`` (the search's, in order),
        where a measured signal settles it; None: search."""
        return None


_T = TypeVar("_T", bound=type[Task])
_REGISTRY: dict[str, Task] = {}


def register(cls: _T) -> _T:
    """Class decorator: make ``cls`` the task ``--task cls.name`` judges by."""
    if not cls.name or cls.name in _REGISTRY and type(_REGISTRY[cls.name]) is not cls:
        raise ValueError(f"a task needs a new name, got {cls.name!r}")
    _REGISTRY[cls.name] = cls()
    return cls


def _load() -> dict[str, Task]:
    """Every registered task: ``MEMBERS``' in their order, then others (a test's) as
    registered."""
    for module in MEMBERS:
        importlib.import_module(module)
    rank = {module: i for i, module in enumerate(MEMBERS)}
    return dict(sorted(_REGISTRY.items(),
                       key=lambda kv: rank.get(type(kv[1]).__module__, len(MEMBERS))))


def task_names() -> tuple[str, ...]:
    """Every registered task's name, ``MEMBERS`` first."""
    return tuple(_load())


def task_named(name: str) -> Task:
    """The task ``--task name`` judges by; a ValueError naming the choices otherwise."""
    members = _load()
    if name not in members:
        raise ValueError(f"task must be one of {', '.join(members)}, got {name!r}")
    return members[name]


def metric_problem(metric: str, task: str) -> str | None:
    """Why ``metric`` cannot choose on ``task``, in one line with the fix; None when it can
    (``auto`` always can)."""
    own = task_named(task)
    if metric == "auto" or metric in own.metrics:
        return None
    other = next((t for t in _load().values() if metric in t.metrics), None)
    what = (f"does not score {own.judges}, this run's task" if other is None else
            f"scores {other.judges}, but this run's task is {own.judges}")
    also = "" if other is None else f", or --task {other.name}"
    return f"--metric {metric} {what}; use one of {', '.join(own.metrics)} (or auto){also}"
