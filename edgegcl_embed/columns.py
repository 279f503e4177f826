"""What a model's input features are, by name: the record that keeps a table's columns apart.

A model trained from a node table learns one weight row per feature column, in the table's
column order; the same table with two columns swapped has the same width and would embed
without a word, every node moved. So the run records its features (``FeatureColumns``): a
node table's feature columns by name and width, in x's order (``TABLE``); the structural
features of an edge list without feature columns (``STRUCTURAL``, ``tables.STRUCTURAL_FEATURES``);
or a feature matrix without column names (``MATRIX``: a graph file, a named dataset, a graph
given in Python). The checkpoint, the ONNX file (``edgegcl.features``) and a graph folder
converted from tables carry it, and whatever feeds the model a graph again conforms the
graph's features to it (``FeatureColumns.conform``):

- a table whose feature columns have the recorded names is reordered into the recorded order;
  other names, or another width of a vector column, are one line naming the difference;
- a model trained on features is never given structural ones (an edge list without its node
  table), nor a model trained on structural ones a table's feature columns;
- a matrix without names is taken by its width alone: there is nothing to match it by.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import InputError, shown

__all__ = ["TABLE", "STRUCTURAL", "MATRIX", "FeatureColumns", "MAX_RECORD_BYTES",
           "MAX_RECORD_FILE_BYTES"]

TABLE = "table"
STRUCTURAL = "structural"
MATRIX = "matrix"
KINDS = (TABLE, STRUCTURAL, MATRIX)
MAX_RECORD_BYTES = 1 << 22
"""The longest record, as compact JSON (``to_text``; 4 MiB: about 100 000 named columns): the
most read from a file, and a table whose columns' names take more is refused (a vector
column holds any number of values under one name)."""
MAX_RECORD_FILE_BYTES = 6 * MAX_RECORD_BYTES
"""The most bytes the record takes in a JSON file written with indentation (graph.json, a
graph folder's metadata.json: a column on up to four lines), what such a file is read for."""
MAX_NAME = 4096
"""The longest column name a record may hold."""


@dataclass(frozen=True)
class FeatureColumns:
    """A model's input features: ``kind`` (TABLE, STRUCTURAL or MATRIX) and, for TABLE, each
    feature column's name and width (1 for a number, the vector's length for a vector
    column) in the order of x's columns."""

    kind: str
    columns: tuple[tuple[str, int], ...] = ()

    @staticmethod
    def of_table(names: Sequence[str], widths: Sequence[int]) -> FeatureColumns:
        """A node table's feature columns, in x's order."""
        return FeatureColumns(TABLE, tuple((str(n), int(w)) for n, w in zip(names, widths)))

    @property
    def width(self) -> int | None:
        """The values per node a TABLE's columns hold in all; None for the other kinds."""
        return sum(w for _, w in self.columns) if self.kind == TABLE else None

    def describe(self) -> str:
        """What the features are, as a message says it."""
        if self.kind == STRUCTURAL:
            return "structural features (an edge list without feature columns)"
        if self.kind == MATRIX:
            return "a feature matrix without column names"
        return f"feature column{'s' if len(self.columns) > 1 else ''} {_listed(self.columns)}"

    def to_text(self) -> str:
        """The record as one line of JSON (``{"kind": ..., "columns": [[name, width], ...]}``)."""
        return json.dumps({"kind": self.kind, "columns": [list(c) for c in self.columns]},
                          ensure_ascii=False, separators=(",", ":"))

    @staticmethod
    def from_text(text: str) -> FeatureColumns:
        """A record read from a file someone else made: ValueError naming what does not hold
        (its size, its JSON, a kind, a name, a width) before anything is sized by it."""
        if len(text) > MAX_RECORD_BYTES:
            raise ValueError(f"the feature record is longer than {MAX_RECORD_BYTES} characters")
        try:
            value = json.loads(text)
        except ValueError:
            raise ValueError("the feature record is not JSON") from None
        return FeatureColumns.from_value(value)

    @staticmethod
    def from_value(value: object) -> FeatureColumns:
        """A record already parsed from JSON (``to_text``'s shape), every part checked:
        ValueError naming the first that does not hold."""
        if not isinstance(value, dict) or set(value) != {"kind", "columns"} or \
                value["kind"] not in KINDS or not isinstance(value["columns"], list):
            raise ValueError("the feature record is not {\"kind\": table / structural / matrix, "
                             "\"columns\": [[name, width], ...]}")
        columns = []
        for item in value["columns"]:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                    and len(item[0]) <= MAX_NAME and type(item[1]) is int
                    and 1 <= item[1] < 1 << 31):
                raise ValueError(f"the feature record holds {shown(str(item), 60)}, not a "
                                 "column's [name, width]")
            columns.append((item[0], item[1]))
        if (value["kind"] == TABLE) != bool(columns):
            raise ValueError("the feature record names columns for features that have none, "
                             "or none for a table's")
        if len({name for name, _ in columns}) != len(columns):
            raise ValueError("the feature record names a column twice")
        return FeatureColumns(value["kind"], tuple(columns))

    def order(self, found: FeatureColumns, where: str) -> np.ndarray | None:
        """Which of a graph's feature columns (its ``found`` record) feed this record's, in
        its order: None when they are as they stand, else the column indices, matched by
        name (the module's docstring: refused where the names or kinds differ; a matrix
        without names as it is). ``where`` names the graph in the one InputError line."""
        if found.kind == MATRIX or (self.kind == MATRIX and found.kind == TABLE):
            return None  # nothing to match by: its width is checked where it is fed
        if self.kind == found.kind == STRUCTURAL:
            return None
        if self.kind == MATRIX:
            raise InputError(f"{where} has no feature columns, so its features would be "
                             "structural ones, but the model was trained on a feature matrix; "
                             "pass a node table with the training graph's features")
        if found.kind == STRUCTURAL:
            raise InputError(f"{where} has no feature columns, so its features would be "
                             f"structural ones, but the model was trained on {self.describe()}; "
                             "pass the node table that holds them")
        if self.kind == STRUCTURAL:
            raise InputError(f"{where} has {found.describe()}, but the model was trained on "
                             f"{self.describe()}; pass a node table without feature columns "
                             "(ids and labels only), or none")
        return self._by_name(found, where)

    def conform(self, found: FeatureColumns, x: np.ndarray, where: str) -> np.ndarray:
        """``x``, whose columns are ``found``, as the features this record names (``order``)."""
        order = self.order(found, where)
        return x if order is None else np.ascontiguousarray(x[:, order])

    def check_in_place(self, found: FeatureColumns, where: str) -> None:
        """``order``'s refusals for features that are read where they lie (a graph folder's,
        mapped), and one line where they would have to be reordered: they are never copied
        to be."""
        if self.order(found, where) is not None:
            raise InputError(f"{where} holds the model's {self.describe()} in another order, "
                             "and a graph folder's features are read in place, not copied to "
                             "reorder them; convert the node table again with its columns in "
                             "the model's order")

    def _by_name(self, found: FeatureColumns, where: str) -> np.ndarray | None:
        """A table's columns in this record's order, matched by name (None: as they stand)."""
        if found.columns == self.columns:
            return None
        theirs = dict(found.columns)
        missing = [c for c in self.columns if c[0] not in theirs]
        extra = [c for c in found.columns if c[0] not in dict(self.columns)]
        if missing or extra:
            parts = ([f"it lacks {_listed(missing)}"] if missing else []) + (
                [f"it has {_listed(extra)}, which the model was not trained on"]
                if extra else [])
            raise InputError(f"{where} does not hold the model's {self.describe()}: "
                             f"{' and '.join(parts)}; pass a node table with these columns "
                             "(in any order)")
        for name, width in self.columns:
            if theirs[name] != width:
                raise InputError(f"{where}: column {shown(name, 40)} holds {theirs[name]} "
                                 f"value(s) per node, but the model was trained on {width}; "
                                 "pass the node table the model was trained on")
        start = np.cumsum([0] + [w for _, w in found.columns])
        at = {name: int(s) for (name, _), s in zip(found.columns, start)}
        return np.concatenate([np.arange(at[name], at[name] + width)
                               for name, width in self.columns])


def _listed(columns: Sequence[tuple[str, int]], most: int = 8) -> str:
    """Columns as a message lists them: names (a vector column's width beside it), the
    first ``most`` of them."""
    names = [shown(name, 40) + ("" if width == 1 else f" ({width} values)")
             for name, width in columns[:most]]
    more = len(columns) - most
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")
