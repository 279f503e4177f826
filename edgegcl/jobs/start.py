"""What every job does with its plan before its work: the device, the graph (loaded, or given
in Python and checked, with the size of each encoder the run may train checked against it),
a resumed run's files checked to continue, and the thread count: a ``Start``.

``Start`` is a frozen value: a job that changes the configuration (the auto-budget's choice)
makes a new one. The plan (edgegcl.jobs.plan) has settled and checked the configuration; this
module does not check it again.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch_geometric.data import Data

from edgegcl.budget.profiles import DeviceProfile
from edgegcl.data import check_recorded_paths, load_graph
from edgegcl.data.identity import PYTHON
from edgegcl.data.validation import validate_graph
from edgegcl.errors import UsageError
from edgegcl.jobs.plan import Plan
from edgegcl.jobs.ranks import world_size
from edgegcl.memory import reuse_freed_memory
from edgegcl.nn.config import AUTO
from edgegcl.nn.family import check_model_size
from edgegcl.training.config import TrainConfig
from edgegcl.training.placement import resolve_device
from edgegcl.training.resume import check_resume
from edgegcl.training.task import task_named
from edgegcl.training.threads import ThreadChoice, resolve_threads


@dataclass(frozen=True)
class Start:
    """A job ready for its work: the checked configuration, the graph (None until it is
    loaded: under torchrun after the ranks have joined), the device, the device profile and
    the dataset's tuned defaults the configuration started from; ``source``: where the graph
    comes from, as the run directory records it (edgegcl.data.identity)."""

    cfg: TrainConfig
    data: Data | None
    device: torch.device
    profile: DeviceProfile | None
    tuned: Path | None = None
    remeasure: bool = False
    source: str = PYTHON

    def with_data(self, data: Data, device: torch.device | None = None) -> Start:
        return replace(self, data=data, device=self.device if device is None else device)


def start(plan: Plan, graph: Data | None = None, load: bool = True) -> Start:
    """The plan's device and graph (``graph``, checked, else loaded from the configuration
    unless ``load`` is false: under torchrun it loads once the ranks have joined); the
    allocator set to reuse freed pages (edgegcl.memory.reuse_freed_memory). A resumed run is
    refused if its files cannot continue (edgegcl.training.resume.check_resume)."""
    cfg = plan.cfg
    reuse_freed_memory()
    device = resolve_device(cfg.run.device)
    if graph is None and plan.source is not None:  # a file's paths are read only where named
        check_recorded_paths(cfg.data.dataset, cfg.data.root, plan.source,
                             dataset_named="dataset" in plan.named,
                             root_named="root" in plan.named, node_table=cfg.data.node_table,
                             node_table_named="node_table" in plan.named)
    data = None
    if graph is not None:
        data = checked_graph(cfg, graph)
    elif load:
        data = load_data(cfg)
    if plan.resume is not None:  # refused here, before the run is announced
        check_resume(plan.resume, cfg, None if data is None else data.x.size(1), world_size())
    return Start(cfg, data, device, plan.profile, plan.tuned, plan.remeasure,
                 PYTHON if graph is not None else cfg.data.dataset)


def load_data(cfg: TrainConfig) -> Data:
    """The run's graph, and the size of each built-in encoder it may train checked against it
    (one line each)."""
    return _check_models(cfg, load_graph(cfg.data.dataset, cfg.data.root or None,
                                         cfg.synthetic_spec(), cfg.data.node_table or None,
                                         cfg.data.edges))


def checked_graph(cfg: TrainConfig, graph: Data) -> Data:
    """A graph given in Python, checked as a loaded one is (edgegcl.data.validation)."""
    return _check_models(cfg, validate_graph(graph))


def _check_models(cfg: TrainConfig, data: Data) -> Data:
    model = cfg.model
    names = model.candidates() if model.encoder == AUTO else [model.built_in]
    if getattr(data, "folder", None) is not None:  # a graph on disk (edgegcl.data.folder)
        problem = task_named(cfg.run.task).folder_problem
        if problem:
            raise UsageError(f"{data.name} is a graph folder, and {problem}")
        if model.user_encoder:
            raise UsageError(f"{data.name} is a graph folder, and an encoder of your own runs "
                             "on the whole graph in memory; use --encoder gcn, ego or poly")
    for name in names:
        if name is not None:
            check_model_size(data.x.size(1), model, name)
    return data


def choose_threads(s: Start, main: bool = True) -> ThreadChoice:
    """How this run sets torch's threads: ``threads`` of the configuration, else the
    profile's, else edgegcl.training.threads.resolve_threads's default; its line printed
    (rank 0) unless the count is still to be measured (then the line comes once it is)."""
    count = s.cfg.run.threads or (s.profile.threads if s.profile is not None else 0)
    choice = resolve_threads(count, s.device)
    if choice.picker is None and main:
        print(f"edgegcl: {choice.line()}", file=sys.stderr)
    return choice
