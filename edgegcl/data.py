"""Graph loading: public benchmark datasets, a planted-class synthetic graph, and user files.

Every entry point returns a ``torch_geometric.data.Data`` that has been through
:func:`validate_graph`, so the rest of edgegcl can rely on one shape contract:
``x`` float32 ``[N, F]``, ``edge_index`` int64 ``[2, E]`` with indices in ``[0, N)``,
``y`` int64 ``[N]`` or ``None``, and a ``name`` string used in messages and run records.
Anything wrong with what the user handed us becomes a one-line :class:`UsageError`.
"""

from __future__ import annotations

import importlib.util
import math
import os
import pickle
import shutil
import socket
import stat
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec.config
import numpy as np
import torch
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
from torch_geometric.data.storage import GlobalStorage
from torch_geometric.datasets import Actor, Amazon, CitationFull, Coauthor, Planetoid, WikiCS
from torch_geometric.utils import coalesce, remove_self_loops

from edgegcl.errors import UsageError, first_line

DATASETS: tuple[str, ...] = (
    "Cora",
    "CiteSeer",
    "PubMed",
    "DBLP",
    "WikiCS",
    "Amazon-Computers",
    "Amazon-Photo",
    "Coauthor-CS",
    "Actor",
    "synthetic",
)

# Norm of each class's mean feature vector, in units of the per-dimension noise std.
# Means point in random directions, so two classes sit about 1.5 * sqrt(2) apart:
# a linear probe on raw features lands far above chance yet far below 100 %, which
# leaves room for the graph (and contrastive pre-training) to matter.
_CLASS_SIGNAL = 1.5

# Rows per step when adding class means to the noise, so a million-node graph does
# not need a second full-size feature matrix.
_FEATURE_CHUNK_ROWS = 1 << 16

# Upper bound on a single network stall while PyG tries to download raw files, so an
# offline machine with a black-holing firewall fails in seconds rather than minutes.
_DOWNLOAD_TIMEOUT_S = 20.0

# The classes a pickled homogeneous ``Data`` references; nothing else may be unpickled.
_SAFE_PT_GLOBALS: list[Any] = [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage]


@dataclass(frozen=True)
class SyntheticSpec:
    """Parameters of the planted-class synthetic graph (a stochastic block model variant).

    ``homophily`` is the fraction of edges whose two ends share a class; the rest join
    nodes of different classes. The same spec always yields the same graph.
    """

    num_nodes: int = 2000
    num_classes: int = 5
    num_features: int = 128
    avg_degree: float = 10.0
    homophily: float = 0.8
    seed: int = 0

    def __post_init__(self) -> None:
        """Reject specs that cannot produce a usable graph, before any work is done."""
        if self.num_nodes < 2:
            raise UsageError(f"synthetic num_nodes must be at least 2 (got {self.num_nodes}); ask for more nodes")
        if not 1 <= self.num_classes <= self.num_nodes:
            raise UsageError(
                f"synthetic num_classes must be between 1 and num_nodes={self.num_nodes} "
                f"(got {self.num_classes}); pick a class count in that range"
            )
        if self.num_features < 1:
            raise UsageError(
                f"synthetic num_features must be at least 1 (got {self.num_features}); ask for more features"
            )
        if not (math.isfinite(self.avg_degree) and self.avg_degree > 0):
            raise UsageError(f"synthetic avg_degree must be a positive number (got {self.avg_degree}); pass e.g. 10")
        if not 0.0 <= self.homophily <= 1.0:
            raise UsageError(f"synthetic homophily must be in [0, 1] (got {self.homophily}); pass e.g. 0.8")
        if self.num_classes == 1 and self.homophily < 1.0:
            raise UsageError(
                "synthetic homophily below 1 needs at least two classes for cross-class edges; "
                "raise num_classes or set homophily to 1"
            )


def default_data_root() -> Path:
    """Where datasets are stored when no root is given: ``$EDGEGCL_DATA`` or ``~/.cache/edgegcl/datasets``.

    The same directory is the writable cache that read-only roots are mirrored into.
    """
    env = os.environ.get("EDGEGCL_DATA")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "edgegcl" / "datasets"


def load_graph(name: str | None, root: str | Path | None, synthetic: SyntheticSpec = SyntheticSpec()) -> Data:
    """Load a graph by dataset name, file path, or ``None``/``"synthetic"`` for a generated one.

    ``root`` only matters for the named benchmark datasets (``None`` means
    :func:`default_data_root`); ``synthetic`` only matters for the generated graph.
    Names are matched case-insensitively, ignoring ``-``/``_``/spaces, and the aliases
    ``Computers``, ``Photo`` and ``CS`` are accepted.
    """
    if name is None or name.strip().lower() == "synthetic":
        return synthetic_graph(synthetic)
    if name.lower().endswith((".pt", ".npz")):
        return _load_file(Path(name).expanduser())
    canonical = _DATASET_KEYS.get(_normalise(name))
    if canonical is None:
        raise UsageError(
            f"unknown dataset {name!r}; use one of {', '.join(DATASETS)}, or a path to a .pt or .npz graph file"
        )
    if canonical == "synthetic":
        return synthetic_graph(synthetic)
    return _load_pyg(canonical, default_data_root() if root is None else Path(root).expanduser())


def synthetic_graph(spec: SyntheticSpec) -> Data:
    """Generate the planted-class graph described by ``spec``, fully vectorised and seeded.

    Classes are balanced and randomly placed. For each of ``N * avg_degree / 2`` edges a
    uniform source is drawn; with probability ``homophily`` the target is uniform over
    the source's class, otherwise uniform over all other classes. Self-loops are dropped
    and the edge set is made undirected and coalesced, so the realised degree and
    homophily sit slightly below the requested values. Features are a per-class random
    mean of norm ``_CLASS_SIGNAL`` plus unit Gaussian noise.
    """
    gen = torch.Generator().manual_seed(spec.seed)
    n, c = spec.num_nodes, spec.num_classes
    y = torch.randperm(n, generator=gen) % c

    # Nodes sorted by class: class k occupies positions [start[k], start[k] + count[k]).
    order = torch.argsort(y, stable=True)
    count = torch.bincount(y, minlength=c)
    start = torch.cumsum(count, 0) - count

    num_edges = max(1, round(n * spec.avg_degree / 2))
    src = torch.randint(n, (num_edges,), generator=gen)
    src_class = y[src]
    same = torch.rand(num_edges, generator=gen) < spec.homophily
    u = torch.rand(num_edges, generator=gen, dtype=torch.float64)
    own_size = count[src_class]
    in_class = start[src_class] + (u * own_size).long().clamp_max(own_size - 1)
    # Index into the sorted order with the source's own class block cut out.
    other_size = (n - own_size).clamp_min(1)
    k = (u * other_size).long().clamp_max(other_size - 1)
    cross_class = k + own_size * (k >= start[src_class])
    dst = order[torch.where(same, in_class, cross_class)]

    edge_index = _undirected_coalesced(src, dst, n)

    means = torch.randn(c, spec.num_features, generator=gen)
    means = means / means.norm(dim=1, keepdim=True).clamp_min(1e-12) * _CLASS_SIGNAL
    x = torch.randn(n, spec.num_features, generator=gen)
    for lo in range(0, n, _FEATURE_CHUNK_ROWS):
        hi = min(lo + _FEATURE_CHUNK_ROWS, n)
        x[lo:hi] += means[y[lo:hi]]

    return validate_graph(Data(x=x, edge_index=edge_index, y=y, name="synthetic"))


def _undirected_coalesced(src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Both directions of every non-loop pair, sorted by (row, col) and deduplicated.

    Same result as ``remove_self_loops`` + ``to_undirected``, but with a single sort of
    ``row * N + col`` keys, which is several times faster on million-node graphs.
    """
    keep = src != dst
    src, dst = src[keep], dst[keep]
    keys = torch.sort(torch.cat([src * num_nodes + dst, dst * num_nodes + src])).values
    first = torch.ones_like(keys, dtype=torch.bool)
    first[1:] = keys[1:] != keys[:-1]
    keys = keys[first]
    return torch.stack([keys // num_nodes, keys % num_nodes])


def validate_graph(data: Data) -> Data:
    """Check the shape contract every edgegcl graph must meet and normalise dtypes.

    Returns a new ``Data`` holding only ``x`` (float32), ``edge_index`` (int64),
    ``y`` (int64 or ``None``) and ``name``; extra attributes are dropped so that
    downstream code never depends on dataset-specific fields.
    """
    name = str(getattr(data, "name", None) or "graph")
    x = _tensor_attr(data, "x", name)
    if x is None:
        raise UsageError(f"{name}: has no node features x; store an [num_nodes, num_features] array as x")
    if x.dim() != 2:
        raise UsageError(f"{name}: x must be 2-D [num_nodes, num_features] but has shape {tuple(x.shape)}; reshape x")
    if x.dtype.is_complex or x.dtype == torch.bool:
        raise UsageError(f"{name}: x must hold real numbers but has dtype {x.dtype}; store x as float32")
    n = x.size(0)
    if n < 2:
        raise UsageError(f"{name}: the graph has {n} node(s) (x has {n} rows); a graph needs at least two nodes")
    if x.size(1) < 1:
        raise UsageError(f"{name}: x has no feature columns; give every node at least one feature")
    x = x.to(torch.float32)
    # The sum is non-finite whenever an entry is, so the exact (memory-hungry) scan only
    # runs when something may be wrong; it also clears sums that merely overflowed.
    if not math.isfinite(float(x.sum())) and not bool(torch.isfinite(x).all()):
        bad_row = int((~torch.isfinite(x)).any(dim=1).nonzero()[0, 0])
        raise UsageError(f"{name}: x holds NaN or inf (first in row {bad_row}); replace non-finite features")

    edge_index = _tensor_attr(data, "edge_index", name)
    if edge_index is None:
        raise UsageError(f"{name}: has no edge_index; store the edges as a [2, num_edges] integer array edge_index")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise UsageError(
            f"{name}: edge_index must have shape [2, num_edges] but has {tuple(edge_index.shape)}; "
            "transpose or reshape it"
        )
    if not _is_integer(edge_index.dtype):
        raise UsageError(f"{name}: edge_index must hold integers but has dtype {edge_index.dtype}; store it as int64")
    edge_index = edge_index.to(torch.int64)
    if edge_index.numel() > 0:
        lo, hi = int(edge_index.min()), int(edge_index.max())
        if lo < 0:
            raise UsageError(f"{name}: edge_index holds negative node index {lo}; node indices must be 0..{n - 1}")
        if hi >= n:
            raise UsageError(
                f"{name}: edge_index holds node {hi} but the graph has {n} nodes (x has {n} rows); fix the indices or x"
            )

    y = _tensor_attr(data, "y", name)
    if y is not None:
        if y.dim() != 1 or y.size(0) != n:
            raise UsageError(
                f"{name}: y must be 1-D with one label per node ({n}) but has shape {tuple(y.shape)}; "
                "store one integer class per node"
            )
        if not _is_integer(y.dtype):
            raise UsageError(f"{name}: y must hold integer class ids but has dtype {y.dtype}; store y as int64")
        y = y.to(torch.int64)
        if y.numel() > 0 and int(y.min()) < 0:
            raise UsageError(f"{name}: y holds negative label {int(y.min())}; class ids must be 0, 1, 2, ...")

    return Data(x=x, edge_index=edge_index, y=y, name=name)


def _tensor_attr(data: Data, key: str, name: str) -> torch.Tensor | None:
    """Fetch ``data[key]`` if present, insisting that it is a dense tensor."""
    value = getattr(data, key, None)
    if value is None:
        return None
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        raise UsageError(
            f"{name}: {key} must be a dense torch tensor, not {type(value).__name__}; convert it with torch.as_tensor"
        )
    return value


def _is_integer(dtype: torch.dtype) -> bool:
    """True for integer dtypes (bool excluded: it is never a valid index or class id)."""
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def _normalise(name: str) -> str:
    """Key for forgiving name matching: lower case, separators removed."""
    return "".join(ch for ch in name.lower() if ch not in "-_ ")


_DATASET_KEYS: dict[str, str] = {_normalise(d): d for d in DATASETS} | {
    "computers": "Amazon-Computers",
    "photo": "Amazon-Photo",
    "cs": "Coauthor-CS",
}


# ---------------------------------------------------------------------------------------
# User files
# ---------------------------------------------------------------------------------------


def _load_file(path: Path) -> Data:
    """Load a user graph from ``.pt`` (a pickled ``Data``) or ``.npz`` (plain arrays)."""
    if not path.is_file():
        raise UsageError(f"graph file {path} does not exist; check the path")
    if path.suffix.lower() == ".pt":
        data = _load_pt(path)
    else:
        data = _load_npz(path)
    data.name = path.name
    return validate_graph(data)


def _load_pt(path: Path) -> Data:
    """Unpickle ``path`` with torch's weights-only loader, allowing only PyG's ``Data`` classes.

    Anything else in the pickle (a function call, an arbitrary class) is refused by the
    loader before it runs, so a hostile file cannot execute code here.
    """
    try:
        with torch.serialization.safe_globals(_SAFE_PT_GLOBALS):
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UsageError(
            f"{path} is not a plain torch_geometric Data file (it references {_disallowed_globals(path)}, "
            "refused unexecuted); save it with torch.save(Data(x=..., edge_index=..., y=...), path) or use .npz"
        ) from exc
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as exc:
        raise UsageError(
            f"{path} cannot be read as a torch file ({first_line(exc)}); re-save it with torch.save"
        ) from exc
    if not isinstance(obj, Data):
        raise UsageError(
            f"{path} holds a {type(obj).__name__}, not a torch_geometric Data; "
            "save it with torch.save(Data(x=..., edge_index=..., y=...), path)"
        )
    return Data(x=obj.x, edge_index=obj.edge_index, y=obj.y)


def _disallowed_globals(path: Path) -> str:
    """Name the classes/functions in a rejected pickle, read statically (nothing is executed)."""
    allowed = {f"{obj.__module__}.{obj.__qualname__}" for obj in _SAFE_PT_GLOBALS}
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except (RuntimeError, ValueError, pickle.UnpicklingError):
        return "objects other than tensors and Data"
    return ", ".join(name for name in names if name not in allowed) or "objects other than tensors and Data"


def _load_npz(path: Path) -> Data:
    """Read ``x``, ``edge_index`` and optional ``y`` arrays from an ``.npz`` file without pickle."""
    unreadable = (ValueError, OSError, EOFError, zipfile.BadZipFile)
    fix = "save it with np.savez(path, x=..., edge_index=..., y=...)"
    try:
        loaded = np.load(path, allow_pickle=False)
    except unreadable as exc:
        raise UsageError(f"{path} cannot be read as an .npz archive of plain arrays ({first_line(exc)}); {fix}") from exc
    if not isinstance(loaded, np.lib.npyio.NpzFile):  # a bare .npy array renamed to .npz
        raise UsageError(f"{path} is a single array, not an .npz archive; {fix}")
    with loaded:
        try:
            arrays = {key: loaded[key] for key in ("x", "edge_index", "y") if key in loaded.files}
        except unreadable as exc:  # e.g. an object array, which would need pickle
            raise UsageError(f"{path} holds an array that is not plain numbers ({first_line(exc)}); {fix}") from exc
    missing = [key for key in ("x", "edge_index") if key not in arrays]
    if missing:
        raise UsageError(f"{path} lacks array(s) {', '.join(missing)}; {fix}")
    tensors: dict[str, torch.Tensor] = {}
    for key, array in arrays.items():
        if array.dtype.kind not in "biuf":
            raise UsageError(f"{path}: {key} has non-numeric dtype {array.dtype}; store it as numbers")
        tensors[key] = torch.from_numpy(np.ascontiguousarray(array))
    return Data(**tensors)


# ---------------------------------------------------------------------------------------
# PyG benchmark datasets
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PygSource:
    """How to build one benchmark dataset with its PyG class.

    ``subdir`` is appended to the root for classes (WikiCS, Actor) that keep ``raw/``
    directly under the root they are given, so every dataset gets its own folder.
    """

    cls: type[InMemoryDataset]
    subdir: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    def build(self, root: Path, *, probe: bool = False, force_reload: bool = False) -> InMemoryDataset:
        """Instantiate the dataset under ``root``; a probe only computes paths and touches no files."""
        cls = _probe_class(self.cls) if probe else self.cls
        where = root / self.subdir if self.subdir else root
        return cls(str(where), force_reload=force_reload, **self.kwargs)


_PYG_SOURCES: dict[str, _PygSource] = {
    "Cora": _PygSource(Planetoid, kwargs={"name": "Cora"}),
    "CiteSeer": _PygSource(Planetoid, kwargs={"name": "CiteSeer"}),
    "PubMed": _PygSource(Planetoid, kwargs={"name": "PubMed"}),
    "DBLP": _PygSource(CitationFull, kwargs={"name": "DBLP"}),
    "WikiCS": _PygSource(WikiCS, "WikiCS", {"is_undirected": True}),
    "Amazon-Computers": _PygSource(Amazon, kwargs={"name": "Computers"}),
    "Amazon-Photo": _PygSource(Amazon, kwargs={"name": "Photo"}),
    "Coauthor-CS": _PygSource(Coauthor, kwargs={"name": "CS"}),
    "Actor": _PygSource(Actor, "Actor"),
}


def _probe_class(cls: type[InMemoryDataset]) -> type[InMemoryDataset]:
    """Subclass of ``cls`` whose constructor neither downloads, processes nor loads.

    Its instances expose PyG's own ``raw_dir``, ``raw_paths`` and ``processed_paths``,
    so the raw layout comes from the installed PyG rather than a copy kept here.
    """

    class Probe(cls):  # type: ignore[valid-type, misc]
        def _download(self) -> None:
            pass

        def _process(self) -> None:
            pass

        def load(self, path: str, data_cls: type = Data) -> None:
            pass

    Probe.__name__ = Probe.__qualname__ = f"{cls.__name__}Probe"
    return Probe


def _load_pyg(name: str, root: Path) -> Data:
    """Load benchmark ``name`` from ``root``, without ever writing into a read-only root.

    Raw files under ``root`` are used as they are. If PyG still has to process them and
    ``root`` is read-only, the raw files are mirrored into :func:`default_data_root` and
    processed there. If raw files are missing, PyG's download is tried (bounded by a
    timeout); when that fails the error says which files to put where.
    """
    source = _PYG_SOURCES[name]
    probe = source.build(root, probe=True)
    raw_ok = _all_exist(probe.raw_paths)
    processed_ok = _all_exist(probe.processed_paths)
    writable = _is_writable(Path(probe.raw_dir)) and _is_writable(Path(probe.processed_dir))

    if not raw_ok:
        if not writable:
            raise UsageError(_missing_message(name, probe, root, "the root is read-only"))
        os.makedirs(probe.raw_dir, exist_ok=True)
        try:
            with _bounded_network():
                probe.download()
        except (OSError, ImportError) as exc:
            raise UsageError(_missing_message(name, probe, root, f"download failed: {first_line(exc)}")) from exc
        if not _all_exist(probe.raw_paths):
            raise UsageError(_missing_message(name, probe, root, "download incomplete"))
        dataset = source.build(root)
    elif processed_ok or writable:
        dataset = source.build(root)
    else:
        dataset = _build_in_cache(name, source, probe)

    graph = dataset[0]
    edge_index, _ = remove_self_loops(graph.edge_index)
    edge_index = coalesce(edge_index, num_nodes=graph.num_nodes)
    return validate_graph(Data(x=graph.x, edge_index=edge_index, y=graph.y, name=name))


def _build_in_cache(name: str, source: _PygSource, probe: InMemoryDataset) -> InMemoryDataset:
    """Mirror the raw files of a read-only root into the writable cache and process them there.

    Files already mirrored (same size and mtime) are not copied again; if any file had
    to be copied, PyG is told to reprocess so stale processed data is never reused.
    """
    cache = default_data_root()
    cache_probe = source.build(cache, probe=True)
    if Path(cache_probe.raw_dir).resolve() == Path(probe.raw_dir).resolve() or not _is_writable(
        Path(cache_probe.processed_dir)
    ):
        raise UsageError(
            f"dataset {name} needs processing but neither {probe.root} nor the cache {cache} is writable; "
            "set EDGEGCL_DATA to a writable directory"
        )
    copied = False
    for src, dst in zip(probe.raw_paths, cache_probe.raw_paths):
        copied |= _mirror_file(Path(src), Path(dst))
    return source.build(cache, force_reload=copied)


def _mirror_file(src: Path, dst: Path) -> bool:
    """Copy ``src`` to ``dst`` atomically unless an identical-looking copy is there; True if copied."""
    src_stat = src.stat()
    if dst.exists():
        dst_stat = dst.stat()
        if dst_stat.st_size == src_stat.st_size and dst_stat.st_mtime_ns == src_stat.st_mtime_ns:
            return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    shutil.copy2(src, tmp)
    # Sources are often mode r--r--r--; the cache copy must stay replaceable by us.
    tmp.chmod(stat.S_IMODE(tmp.stat().st_mode) | stat.S_IWUSR)
    os.utime(tmp, ns=(src_stat.st_atime_ns, src_stat.st_mtime_ns))
    os.replace(tmp, dst)
    return True


def _all_exist(paths: list[str]) -> bool:
    """PyG's own criterion for a complete file set: non-empty and every file present."""
    return len(paths) > 0 and all(os.path.exists(p) for p in paths)


def _is_writable(path: Path) -> bool:
    """Whether we may create files at ``path`` (or at its nearest existing ancestor).

    Besides ``os.access`` the mode bits must allow writing: root passes every access
    check, but a directory marked ``r-x`` is a read-only share we must not write into.
    """
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    mode = existing.stat().st_mode
    return os.access(existing, os.W_OK | os.X_OK) and bool(mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _missing_message(name: str, probe: InMemoryDataset, root: Path, reason: str) -> str:
    """One line telling the user which raw files to put into which directory."""
    files = ", ".join(probe.raw_file_names if isinstance(probe.raw_file_names, list) else [probe.raw_file_names])
    return (
        f"dataset {name} not found under {root} ({reason}): put {files} into {probe.raw_dir} "
        "(or pass --root DIR pointing at a copy)"
    )


@contextmanager
def _bounded_network() -> Iterator[None]:
    """Cap connection and read stalls for PyG downloads, restoring global settings after.

    PyG fetches via ``urllib`` (bounded by the socket default timeout) or via fsspec's
    aiohttp backend (bounded by fsspec's per-protocol ``client_kwargs``).
    """
    old_socket_timeout = socket.getdefaulttimeout()
    old_conf = {proto: fsspec.config.conf.get(proto) for proto in ("http", "https")}
    socket.setdefaulttimeout(_DOWNLOAD_TIMEOUT_S)
    if importlib.util.find_spec("aiohttp") is not None:  # without it fsspec cannot fetch http at all
        import aiohttp

        timeout = aiohttp.ClientTimeout(sock_connect=_DOWNLOAD_TIMEOUT_S, sock_read=_DOWNLOAD_TIMEOUT_S)
        for proto, conf in old_conf.items():
            merged = dict(conf or {})
            merged["client_kwargs"] = {**merged.get("client_kwargs", {}), "timeout": timeout}
            fsspec.config.conf[proto] = merged
    try:
        yield
    finally:
        socket.setdefaulttimeout(old_socket_timeout)
        for proto, conf in old_conf.items():
            if conf is None:
                fsspec.config.conf.pop(proto, None)
            else:
                fsspec.config.conf[proto] = conf
