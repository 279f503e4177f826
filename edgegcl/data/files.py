"""User graph files: ``.pt`` (a PyG ``Data``, loaded without executing pickled code) and
``.npz`` (plain arrays)."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
from torch_geometric.data.storage import GlobalStorage

from edgegcl.data.validation import validate_graph
from edgegcl.errors import UsageError, first_line


# The classes a pickled homogeneous ``Data`` references; nothing else may be unpickled.
_SAFE_PT_GLOBALS: list[Any] = [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage]


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
