"""Graph loading by name: public benchmark datasets through PyG, the synthetic graph, and
user files, each validated (edgegcl.data.validation)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec.config
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.datasets import Actor, Amazon, CitationFull, Coauthor, Planetoid, WikiCS
from torch_geometric.utils import coalesce, remove_self_loops

from edgegcl.data.files import _load_file
from edgegcl.data.synthetic import SyntheticSpec, synthetic_graph
from edgegcl.data.validation import validate_graph
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


# Upper bound on a single network stall while PyG tries to download raw files, so an
# offline machine with a black-holing firewall fails in seconds rather than minutes.
_DOWNLOAD_TIMEOUT_S = 20.0


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

    Args:
        name: a name of DATASETS, a ``.pt`` / ``.npz`` graph file, or None for the generated graph.
        root: directory holding the benchmark datasets (None: ``default_data_root()``).
        synthetic: the generated graph's parameters.

    Example:
        >>> load_graph("synthetic", None).num_nodes
        2000
        >>> load_graph("Cora", "/path/to/datasets")  # doctest: +SKIP
    """
    if name is None or name.strip().lower() == "synthetic":
        return synthetic_graph(synthetic)
    if name.lower().endswith((".pt", ".npz")):
        return _load_file(Path(name).expanduser())
    canonical = canonical_name(name)
    if canonical is None:
        raise UsageError(
            f"unknown dataset {name!r}; use one of {', '.join(DATASETS)}, or a path to a .pt or .npz graph file"
        )
    if canonical == "synthetic":
        return synthetic_graph(synthetic)
    return _load_pyg(canonical, default_data_root() if root is None else Path(root).expanduser())


def canonical_name(name: str) -> str | None:
    """The DATASETS spelling of a benchmark dataset's name or alias (``"citeseer"`` ->
    ``"CiteSeer"``), or None for anything else (a file, ``synthetic``)."""
    return _DATASET_KEYS.get(_normalise(name))


def _normalise(name: str) -> str:
    """Key for forgiving name matching: lower case, separators removed."""
    return "".join(ch for ch in name.lower() if ch not in "-_ ")


_DATASET_KEYS: dict[str, str] = {_normalise(d): d for d in DATASETS} | {
    "computers": "Amazon-Computers",
    "photo": "Amazon-Photo",
    "cs": "Coauthor-CS",
}


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
