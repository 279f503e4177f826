"""A graph's feature columns as edgegcl's graphs carry them: what a reader recorded
(edgegcl_embed.columns: a node table's columns by name, the structural features, a matrix
without names) and a graph conformed to what a model was trained on (``conform``): its
columns reordered by name, or one line where they are not the model's."""

from __future__ import annotations

import torch
from torch_geometric.data import Data

from edgegcl.errors import UsageError
from edgegcl_embed.columns import MATRIX, FeatureColumns
from edgegcl_embed.errors import InputError

__all__ = ["conform", "feature_columns"]


def feature_columns(data: Data) -> FeatureColumns:
    """What ``data``'s feature columns are: what its reader recorded (a node table's columns,
    the structural features), else a matrix without names."""
    columns = getattr(data, "feature_columns", None)
    return columns if isinstance(columns, FeatureColumns) else FeatureColumns(MATRIX)


def conform(data: Data, expected: FeatureColumns) -> Data:
    """``data`` with the features a model trained on ``expected`` takes: its columns matched
    by name and reordered where they stand in another order (a graph folder's are mapped, so
    they are never copied: it is converted again instead), else as it is; one UsageError
    line where they are not the model's."""
    found = feature_columns(data)
    where = f"graph {getattr(data, 'name', None) or 'given'}"
    try:
        if getattr(data, "folder", None) is not None:  # mapped: read in place
            expected.check_in_place(found, where)
            return data
        order = expected.order(found, where)
    except InputError as exc:
        raise UsageError(str(exc)) from None
    if order is None:
        return data
    data.x = data.x.index_select(1, torch.from_numpy(order))
    data.feature_columns = expected
    return data
