"""Graph loading by name: public benchmark datasets through PyG, the synthetic graph, and
user files, each validated (edgegcl.data.validation)."""

from __future__ import annotations

import importlib.util
import os
import pickle
import socket
import stat
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec.config
import numpy as np
from torch_geometric.data import Data, InMemoryDataset
import torch_geometric.datasets
from torch_geometric.utils import coalesce, remove_self_loops

from edgegcl.data.config import DATASETS, GRAPH_FILES, PYG_SOURCES, SyntheticSpec, canonical_name
from edgegcl.data.files import is_graph_file, load_file, read_as
from edgegcl.data.folder import is_graph_folder, open_folder
from edgegcl.data.synthetic import synthetic_graph
from edgegcl.data.validation import SPLIT_MASKS, validate_graph
from edgegcl.errors import PathNotNamed, UsageError, first_line
from edgegcl_embed.errors import shown
from edgegcl_embed.files import read_regular
from edgegcl_embed.graph import EDGE_READINGS


# ---------------------------------------------------------------------------------------
# PyG benchmark datasets
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PygSource:
    """How to build one benchmark dataset with its PyG class.

    ``subdir`` is appended to the root for classes (WikiCS, Actor) that keep ``raw/``
    directly under the root they are given, so every dataset gets its own folder.
    """

    cls: str  # the class's name in torch_geometric.datasets
    subdir: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    def build(self, root: Path, *, probe: bool = False, force_reload: bool = False) -> InMemoryDataset:
        """Instantiate the dataset under ``root``; a probe only computes paths and touches no files."""
        found = getattr(torch_geometric.datasets, self.cls)
        cls = _probe_class(found) if probe else found
        where = root / self.subdir if self.subdir else root
        return cls(str(where), force_reload=force_reload, **self.kwargs)


_PYG_SOURCES: dict[str, _PygSource] = {
    name: _PygSource(cls, subdir, kwargs) for name, (cls, subdir, kwargs) in PYG_SOURCES.items()}


# Upper bound on a single network stall while PyG tries to download raw files, so an
# offline machine with a black-holing firewall fails in seconds rather than minutes.
_DOWNLOAD_TIMEOUT_S = 20.0


def default_data_root() -> Path:
    """Where datasets are stored when no root is given: ``$EDGEGCL_DATA`` or ``~/.cache/edgegcl/datasets``."""
    env = os.environ.get("EDGEGCL_DATA")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "edgegcl" / "datasets"


def load_graph(name: str | Path | None, root: str | Path | None = None,
               synthetic: SyntheticSpec = SyntheticSpec(),
               node_table: str | Path | None = None, edges: str = "auto") -> Data:
    """Load a graph by dataset name, file path, or ``None``/``"synthetic"`` for a generated one.

    ``root`` only matters for the named benchmark datasets (``None`` means
    :func:`default_data_root`); ``synthetic`` only matters for the generated graph.
    Names are matched case-insensitively, ignoring ``-``/``_``/spaces, and the short names
    ``Computers``, ``Photo`` and ``CS`` are accepted.

    Args:
        name: a name of DATASETS, a graph file (``GRAPH_FILES``), a graph folder
            (edgegcl.data.folder), or None for the generated graph.
        root: directory holding the benchmark datasets (None: ``default_data_root()``).
        synthetic: the generated graph's parameters.
        node_table: a CSV / TSV / Parquet edge list's node table (edgegcl_embed.tables).
        edges: how its edges are read (edgegcl_embed.graph.EDGE_READINGS): ``auto``, as its
            format says; ``undirected``, each edge both ways; ``directed``, as stored. A named
            dataset and the generated graph list each undirected edge both ways already; a
            graph folder's edges are read as they were converted.

    Example:
        >>> load_graph("synthetic").num_nodes
        2000
        >>> load_graph("graph.npz")  # doctest: +SKIP
        >>> load_graph("Cora", "/path/to/datasets")  # doctest: +SKIP
    """
    name = None if name is None else str(name)  # a path as given, or a dataset's name
    if edges not in EDGE_READINGS:
        raise UsageError(f"--edges {shown(str(edges), 40)} is not a way to read edges; use one "
                         f"of {', '.join(EDGE_READINGS)}")
    if node_table and (name is None or not is_graph_file(name)):
        raise UsageError("--node-table goes with a CSV / TSV / Parquet edge list as --dataset, "
                         f"not {shown(name or 'synthetic', 80)}; drop it")
    if name is None or name.strip().lower() == "synthetic":
        return read_as(synthetic_graph(synthetic), edges == "undirected")
    if is_graph_file(name):
        return load_file(Path(name).expanduser(),
                         None if not node_table else Path(node_table).expanduser(), edges)
    canonical = canonical_name(name)
    if canonical is None and is_graph_folder(name):
        if edges == "undirected":
            raise UsageError(f"{shown(name, 80)} is a graph folder, whose edges are read as "
                             "they were converted (its pages are never rewritten); convert "
                             "the graph again with --edges undirected, or drop --edges")
        return open_folder(name)
    if canonical is None:
        raise UsageError(
            f"unknown dataset {name!r}; use one of {', '.join(DATASETS)}, or a path to a "
            f"{' or '.join(GRAPH_FILES)} graph file, or a graph folder (docs/graph-folder.md)"
        )
    if canonical == "synthetic":
        return read_as(synthetic_graph(synthetic), edges == "undirected")
    return read_as(_load_pyg(canonical, default_data_root() if root is None
                             else Path(root).expanduser()), edges == "undirected")


def check_recorded_paths(dataset: str, root: str, source: str | Path, *,
                         dataset_named: bool = False, root_named: bool = False,
                         dataset_arg: str = "dataset", node_table: str = "",
                         node_table_named: bool = False) -> None:
    """Refuse, in one line, the paths a configuration read from ``source`` (a config file, a
    run directory, a checkpoint) would choose: a graph file as its ``dataset`` and its
    ``node_table``, both at once, or a ``root`` for a named benchmark other than
    ``default_data_root()`` (the user's own setting). A file someone else made must not
    decide what is read or where a download is written; the ``PathNotNamed`` line names the
    arguments (``dataset_arg``: the graph's, ``dataset`` or ``graph``) that make them the
    user's choice. ``dataset_named`` / ``root_named`` / ``node_table_named``: the user named
    that value, so it is not checked.
    """
    missing = []
    if not dataset_named and (is_graph_file(dataset) or is_graph_folder(dataset)):
        missing.append(("the graph file", dataset_arg, dataset))
    if node_table and not node_table_named:
        missing.append(("the node table", "node_table", node_table))
    if missing:
        raise PathNotNamed(source, "names " + " and ".join(f"{what} {shown(value, 120)}"
                                                          for what, _, value in missing),
                           [(arg, value) for _, arg, value in missing])
    if root_named or not root or is_graph_file(dataset) or is_graph_folder(dataset):
        return
    if canonical_name(dataset) in (None, "synthetic"):
        return
    if Path(root).expanduser().resolve() != default_data_root().resolve():
        raise PathNotNamed(source, f"reads {shown(dataset)} from the dataset root "
                           f"{shown(root, 120)}", [("root", root)],
                           "nothing was read or written there")


def load_recorded(dataset: str, root: str, synthetic: SyntheticSpec, source: str | Path, *,
                  graph: str | Path | None = None, user_root: str | Path | None = None,
                  node_table: str | Path | None = None, recorded_node_table: str = "",
                  edges: str = "auto") -> Data:
    """The graph of a configuration read from ``source``: ``graph`` when the user names one
    (a dataset name or graph file), else the recorded ``dataset``; read under ``user_root``
    when given, else the recorded ``root``; the recorded paths only after
    ``check_recorded_paths`` (the graph file and its node table asked for together); a node
    table only when the user names it (``node_table``); its edges read as the run read them
    (``edges``, the recorded ``[data] edges``)."""
    name = str(graph) if graph is not None else dataset
    table = (recorded_node_table if recorded_node_table and node_table is None
             and is_graph_file(name) else "")
    check_recorded_paths(name, root, source, dataset_named=graph is not None,
                         root_named=user_root is not None, dataset_arg="graph", node_table=table)
    return load_graph(name, user_root if user_root is not None else (root or None), synthetic,
                      node_table, edges)


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
    """Load benchmark ``name`` from its raw files under ``root``, parsed in memory.

    Nothing under ``root/.../processed`` is read and nothing is written there: PyG would
    unpickle its processed files with ``weights_only=False`` when the safe load fails
    (``torch_geometric.io.fs.torch_load``) and its ``pre_transform.pt`` always, so a dataset
    folder could run code. The raw files are parsed by the dataset class's own ``process``
    (its ``save`` captured), Planetoid's pickled raw arrays through an unpickler that admits
    only the numpy / scipy / builtin types those files hold (``_RawUnpickler``). If raw files
    are missing and the root is writable, PyG's download is tried (bounded by a timeout);
    otherwise, or when it fails, the error says which files to put where.
    """
    source = _PYG_SOURCES[name]
    probe = source.build(root, probe=True)
    if not _all_exist(probe.raw_paths):
        if not _is_writable(Path(probe.raw_dir)):
            raise UsageError(_missing_message(name, probe, root, "the root is read-only"))
        os.makedirs(probe.raw_dir, exist_ok=True)
        try:
            with _bounded_network():
                probe.download()
        except (OSError, ImportError) as exc:
            raise UsageError(_missing_message(name, probe, root, f"download failed: {first_line(exc)}")) from exc
        if not _all_exist(probe.raw_paths):
            raise UsageError(_missing_message(name, probe, root, "download incomplete"))
    graph = _parse_raw(name, probe)
    edge_index, _ = remove_self_loops(graph.edge_index)
    edge_index = coalesce(edge_index, num_nodes=graph.num_nodes)
    masks = {key: getattr(graph, key, None) for key in SPLIT_MASKS}  # the published splits
    return validate_graph(Data(x=graph.x, edge_index=edge_index, y=graph.y, name=name, **masks))


_RAW_GLOBALS = frozenset({
    ("__builtin__", "list"), ("builtins", "list"), ("collections", "defaultdict"),
    ("numpy", "dtype"), ("numpy", "ndarray"), ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"), ("scipy.sparse.csr", "csr_matrix"),
    ("scipy.sparse._csr", "csr_matrix"), ("scipy.sparse", "csr_matrix"),
})
"""Every global the Planetoid raw files (``ind.<name>.x``, ``.graph``, ...) reference: arrays,
sparse matrices and the graph's dict of lists. Nothing that can run code."""


PLANETOID_SHAPES = {"Cora": (2708, 1433, 7), "CiteSeer": (3327, 3703, 6),
                    "PubMed": (19717, 500, 3)}
"""(nodes, features, classes) of the Planetoid datasets: every raw array is checked against
them before PyG sizes anything by it (a 20 KB file may declare a matrix of any shape)."""


class _RawUnpickler(pickle._Unpickler):  # the Python unpickler: its BUILD can be checked
    """An unpickler that builds only ``_RAW_GLOBALS``; any other global is refused, and a
    ``numpy.dtype``'s state must be a plain one (numpy trusts it, and a forged one reads
    memory out of bounds)."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _RAW_GLOBALS:
            raise pickle.UnpicklingError(f"it references {module}.{name}, which a dataset file "
                                         "has no reason to")
        with warnings.catch_warnings():  # scipy's and numpy's deprecated module paths
            warnings.simplefilter("ignore", DeprecationWarning)
            return super().find_class(module, name)

    def load_build(self) -> None:
        state, inst = self.stack[-1], self.stack[-2]
        if isinstance(inst, np.dtype):
            plain = inst.__reduce__()[2]
            if not (isinstance(state, tuple) and len(state) == len(plain)
                    and state[0] == plain[0] and state[1] in ("<", ">", "|", "=")
                    and state[2:] == plain[2:]):
                raise pickle.UnpicklingError("it holds a numpy dtype with a forged state")
        super().load_build()

    dispatch[pickle.BUILD[0]] = load_build


def _check_raw(name: str, obj: Any) -> Any:
    """A Planetoid raw object whose shapes and indices fit dataset ``name``, else an error
    (raised before PyG densifies or indexes by it)."""
    import scipy.sparse  # only the Planetoid reader needs scipy here

    nodes, features, classes = PLANETOID_SHAPES[name]
    if isinstance(obj, dict):  # the graph: node -> neighbours
        for node, neighbours in obj.items():
            if not (isinstance(node, int) and 0 <= node < nodes
                    and all(isinstance(v, int) and 0 <= v < nodes for v in neighbours)):
                raise ValueError(f"its graph names a node outside 0..{nodes - 1}")
        return obj
    shape = getattr(obj, "shape", None)
    if not (isinstance(shape, tuple) and len(shape) == 2 and 0 <= shape[0] <= nodes
            and shape[1] in (features, classes)):
        raise ValueError(f"it holds an array of shape {shape}, not up to {nodes} rows of "
                         f"{features} features or {classes} classes")
    if scipy.sparse.issparse(obj):
        obj.check_format(full_check=True)  # indices within the shape, before todense
    return obj


class _RawPickle:
    """Stands in for the ``pickle`` module inside PyG's Planetoid reader, whose ``read_file``
    calls ``pickle.load(f, encoding="latin1")``."""

    UnpicklingError = pickle.UnpicklingError
    dataset = "Cora"

    @classmethod
    def load(cls, file: Any, **kwargs: Any) -> Any:
        return _check_raw(cls.dataset, _RawUnpickler(file, **kwargs).load())


@contextmanager
def _restricted_raw_pickles(name: str) -> Iterator[None]:
    """PyG's Planetoid reader unpickles with ``_RawPickle`` instead of ``pickle``."""
    import torch_geometric.io.planetoid as planetoid  # loaded only to read Planetoid files

    real = planetoid.pickle
    _RawPickle.dataset = name
    planetoid.pickle = _RawPickle  # type: ignore[assignment]
    try:
        yield
    finally:
        planetoid.pickle = real


def _check_test_index(name: str, probe: InMemoryDataset) -> None:
    """The Planetoid test index file: integers within the dataset's nodes (PyG allocates a
    matrix as tall as their range)."""
    nodes = PLANETOID_SHAPES[name][0]
    path = Path(probe.raw_dir) / f"ind.{name.lower()}.test.index"
    text = read_regular(path, "raw file", "replace it with the dataset's original file",
                        1 << 20, UsageError).decode("ascii", errors="replace")
    values = text.split()
    if not all(v.isdigit() and int(v) < nodes for v in values):
        raise ValueError(f"{path.name} holds an index outside 0..{nodes - 1}")


def _parse_raw(name: str, probe: InMemoryDataset) -> Data:
    """The dataset's graph from its raw files, by the class's own ``process``, kept in memory."""
    captured: list[Data] = []
    probe.save = lambda data_list, path: captured.extend(data_list)  # type: ignore[method-assign]
    try:
        planetoid = name in PLANETOID_SHAPES
        if planetoid:
            _check_test_index(name, probe)
        with _restricted_raw_pickles(name if planetoid else "Cora"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            probe.process()
    except (pickle.UnpicklingError, EOFError, OSError, ValueError, KeyError, IndexError,
            TypeError, AttributeError, RuntimeError, MemoryError, UnicodeDecodeError) as exc:
        raise UsageError(f"dataset {name}: the raw files in {probe.raw_dir} cannot be read "
                         f"({type(exc).__name__}: {first_line(exc)}); replace them with the "
                         "dataset's original files") from None
    if len(captured) != 1:
        raise UsageError(f"dataset {name}: the raw files in {probe.raw_dir} did not give one "
                         "graph; replace them with the dataset's original files")
    return captured[0]


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
