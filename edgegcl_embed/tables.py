"""Graphs as users hold them: an edge list as CSV, TSV or Parquet, with an optional node table.

A CSV / TSV table has a header row, a Parquet table its column names (an edge list written
without one, its first row numbers alone, is read from that row; a node table needs its
header, which names the label column); the edge list's first two columns are the two ends of
each edge (ids of
any kind: numbers, names, hashes) and a third column, if any, a weight, which the GCN does not
use. Each edge is undirected and read both ways, once (``reading = "directed"``: one way, from
the first column's node to the second's). The node table, if given: its first
column is the node's id, a column named ``label`` (or ``y``) its class (integers keep their
numbers, other values map to 0, 1, 2, ... in sorted order; an empty cell: a node without a
label, ``UNLABELLED``), the other columns its features
(numbers; in Parquet a column may also hold each node's feature vector as a list of numbers of
one length). Parquet is read by pyarrow (``pip install pyarrow``, or the ``parquet`` extra):
the file's bytes are read and bounded here first, then parsed from memory, and only plain
columns are taken (pyarrow never unpickles an extension type since 14.0.1, which the extra
requires).
Nodes are numbered in the node table's order, or, without one, in the sorted order of the ids
the edges name; ``TableGraph.ids`` gives each row's id back, so that embeddings can be matched
to the user's ids. A graph without feature columns gets structural features computed from its
edges (``structural_features``), the same in training and on the device. What x's columns are
(the feature columns' names and widths, or the structural features) comes with it, so that a
model trained on one table is fed another by column name (``edgegcl_embed.columns``).

Both ``edgegcl train`` and ``edgegcl-embed`` read tables through ``read_tables``.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .columns import MAX_RECORD_BYTES, STRUCTURAL, FeatureColumns
from .errors import InputError, shown
from .files import open_regular, read_regular, refuse_holes
from .folder import edge_chunks
from .graph import both_ways, check_file, reads_both_ways

__all__ = ["TABLE_SUFFIXES", "STRUCTURAL_FEATURES", "UNLABELLED", "NodeTable", "Numbering", "TableGraph",
           "check_ids", "delimited_chunks", "edge_id_chunks", "read_node_table", "read_tables",
           "structural_features"]

TABLE_SUFFIXES: tuple[str, ...] = (".csv", ".tsv", ".parquet")
STRUCTURAL_FEATURES = ("one", "log_degree", "log_degree_squared", "mean_neighbour_log_degree")
"""The features of a node without any: its degree on a log scale, squared, and its
neighbours' mean, beside a constant."""
LABEL_COLUMNS = ("label", "y")
"""The names (any case) of a node table's label column."""
UNLABELLED = -1
"""The class number of a node whose label cell is empty: a node without a label, which no
split holds (it is embedded all the same)."""
MAX_TABLE_BYTES = 1 << 34
"""The largest table read (16 GiB): the bytes read are counted, never a size trusted."""


@dataclass(frozen=True)
class TableGraph:
    """A graph read from tables: features x [N, F] float32, edges [2, E] int64 (both ways unless read as directed),
    labels y [N] int64 or None, each row's id (str), the label names, and what x's columns
    are (``feature_columns``: the node table's feature columns, or the structural ones)."""

    x: np.ndarray
    edge_index: np.ndarray
    y: np.ndarray | None
    ids: np.ndarray
    classes: list[str]
    feature_columns: FeatureColumns


def _columns(path: Path) -> tuple[list[str], list[np.ndarray]]:
    """A table's column names and columns (each a numpy array of one value per row; CSV / TSV
    values are strings, Parquet ones keep their type, a list column is [rows, width])."""
    check_file(path, "table", "check the path")
    raw = read_regular(path, "table", "split it into smaller tables", MAX_TABLE_BYTES,
                       text=path.suffix.lower() != ".parquet")
    header, columns = (_parquet(raw, path) if path.suffix.lower() == ".parquet"
                       else _delimited(raw, path))
    if not columns or len(columns[0]) == 0:
        raise InputError(f"table {path} has no rows under its header; the first row names the "
                         "columns and each row after it is one edge (or node)")
    return header, columns


def _delimited(raw: bytes, path: Path) -> tuple[list[str], list[np.ndarray]]:
    """CSV / TSV: a header row, then one row per edge (or node), every row as wide."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _unreadable(path, exc) from None
    # all rows at once: one chunk
    header, table = next(delimited_chunks(io.StringIO(text, newline=""), path, None))
    if table.shape[0] == 0:
        return header, []
    return header, [table[:, i] for i in range(len(header))]


def delimited_chunks(text: Iterable[str], path: Path, rows: int | None
                     ) -> Iterator[tuple[list[str], np.ndarray]]:
    """A CSV / TSV table's header and its rows, ``rows`` at a time (all at once for None), as
    [rows, columns] arrays of strings: blank lines skipped, every row as wide as the header
    (else one InputError line naming the row); at least one, maybe empty, chunk. A first row
    of numbers alone is data, not names (an edge list written without a header): its header
    is then empty names (``""``), and the row is the table's first."""
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    reader = csv.reader(text, delimiter=delimiter)
    try:
        header = next((row for row in reader if row), [])
        chunk: list[list[str]] = []
        if header and all(_number(cell) for cell in header):
            chunk, header = [header], [""] * len(header)
        number, yielded = 1, False
        for row in reader:
            if not row:
                continue
            number += 1
            if len(row) != len(header):
                raise InputError(f"table {path}: row {number} has another number of columns "
                                 f"than its header ({len(header)}); every row needs one value "
                                 "per column")
            chunk.append(row)
            if rows is not None and len(chunk) == rows:
                yield header, np.asarray(chunk, dtype=str)
                chunk, yielded = [], True
        if chunk or not yielded:
            yield header, np.asarray(chunk, dtype=str).reshape(len(chunk), len(header))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise _unreadable(path, exc) from None


def _number(cell: str) -> bool:
    """Whether a CSV cell reads as a number (an id or a value, never a column's name)."""
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _unreadable(path: Path, exc: Exception) -> InputError:
    kind = "TSV" if path.suffix.lower() == ".tsv" else "CSV"
    return InputError(f"table {path} cannot be read as {kind} ({shown(str(exc), 120)}); save "
                      "it as UTF-8 text")


def _parquet(raw: bytes, path: Path) -> tuple[list[str], list[np.ndarray]]:
    """Parquet through pyarrow, parsed from the bytes already read: each column as numpy;
    a column of lists of numbers, all of one length, as [rows, width]."""
    try:
        import pyarrow as pa  # optional: only Parquet tables need it
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"table {path} is Parquet, which needs pyarrow: pip install pyarrow "
                         "(or the 'parquet' extra), or save the table as CSV") from None
    try:
        table = pq.read_table(pa.BufferReader(raw))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InputError(f"table {path} cannot be read as Parquet ({shown(str(exc), 120)}); "
                         "write it again with pyarrow, pandas or polars") from None
    columns = []
    for name, column in zip(table.column_names, table.columns):
        if column.null_count and name.strip().lower() in LABEL_COLUMNS and (
                pa.types.is_integer(column.type) or pa.types.is_floating(column.type)
                or pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            # a label column's missing values: nodes without a label, as a CSV's empty cells
            columns.append(np.asarray(pc.fill_null(column.cast(pa.string()), "")
                                      .to_numpy(zero_copy_only=False), dtype=str))
            continue
        if column.null_count:
            raise InputError(f"table {path}: column {shown(name, 40)} has missing values; "
                             "fill them")
        kind = column.type
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or \
                pa.types.is_fixed_size_list(kind):
            chunk = column.combine_chunks()
            lengths = np.asarray(chunk.value_lengths())
            flat = np.asarray(chunk.flatten())
            if lengths.size == 0 or (lengths != lengths[0]).any() or flat.dtype.kind not in "iuf":
                raise InputError(f"table {path}: column {shown(name, 40)} holds lists of "
                                 "another length or kind on some rows; every node's feature "
                                 "vector needs one length of numbers")
            columns.append(flat.reshape(lengths.size, int(lengths[0])))
        elif pa.types.is_integer(kind) or pa.types.is_floating(kind) or \
                pa.types.is_boolean(kind) or pa.types.is_string(kind) or \
                pa.types.is_large_string(kind):
            columns.append(column.to_numpy())
        else:
            raise InputError(f"table {path}: column {shown(name, 40)} is of type "
                             f"{shown(str(kind), 40)}; use numbers or strings")
    return [str(n) for n in table.column_names], columns


def _ids(column: np.ndarray) -> np.ndarray:
    """A column of ids as strings (an integer id 7 is "7" whichever format held it)."""
    return np.char.mod("%d", column) if column.dtype.kind in "iu" else column.astype(str)


def _vectors(column: np.ndarray, name: str, path: Path) -> np.ndarray | None:
    """A CSV / TSV column whose every cell is a bracketed vector (``[0.1, 0.2]`` as pandas
    writes a list column, or ``[0.1 0.2]`` as numpy prints one) as [rows, width] float64; None
    when it is not one. Vectors of other lengths, or cells that are not numbers, are one line
    naming the column."""
    if column.dtype.kind != "U" or not (np.char.startswith(column, "[")
                                         & np.char.endswith(column, "]")).all():
        return None
    cells = np.char.strip(np.char.strip(column, "[]"))
    split = np.char.split(np.char.replace(cells, ",", " "))  # one list of strings per cell
    widths = np.fromiter((len(cell) for cell in split), np.int64, len(split))
    if widths.size == 0 or (widths != widths[0]).any() or widths[0] == 0:
        raise InputError(f"table {path}: column {shown(name, 40)} holds vectors of different "
                         "lengths; every node's feature vector needs one length")
    try:
        return np.array(np.concatenate(split), dtype=np.float64).reshape(widths.size,
                                                                          int(widths[0]))
    except ValueError:
        raise InputError(f"table {path}: column {shown(name, 40)} holds vectors of something "
                         "other than numbers; write the numbers alone") from None


def _numbers(columns: list[np.ndarray], names: list[str], path: Path
             ) -> tuple[np.ndarray, FeatureColumns]:
    """Feature columns as [rows, features] float32 and their record (names and widths, in
    x's order): numbers, or vectors (a Parquet list column, a CSV column of bracketed vectors)
    that give their width; one line naming the first column that is neither, or a name
    given twice (columns are matched by name)."""
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise InputError(f"table {path} names the feature column {shown(twice, 40)} twice; "
                         "give each column its own name (a model's columns are matched by name)")
    parts = []
    for column, name in zip(columns, names):
        vectors = _vectors(column, name, path)
        try:
            parts.append(vectors if vectors is not None else
                         np.asarray(column, dtype=np.float64).reshape(len(column), -1))
        except ValueError:
            raise InputError(f"table {path}: feature column {shown(name, 40)} must hold numbers "
                             "(or one vector per row, [0.1, 0.2, ...]); keep ids and labels in "
                             "their own columns") from None
    out = np.concatenate(parts, axis=1)
    if not np.isfinite(out).all():
        raise InputError(f"table {path}: its feature columns hold NaN or infinite values; "
                         "fill them")
    record = FeatureColumns.of_table(names, [p.shape[1] for p in parts])
    if len(record.to_text()) > MAX_RECORD_BYTES:
        raise InputError(f"table {path}: its {len(names)} feature columns' names take more than "
                         f"{MAX_RECORD_BYTES >> 20} MiB to record; put the features in one vector "
                         "column ([0.1, 0.2, ...] per row)")
    return out.astype(np.float32), record


def structural_features(edge_index: np.ndarray, num_nodes: int) -> np.ndarray:
    """STRUCTURAL_FEATURES of each node from its edges (each undirected edge listed both
    ways), a chunk of edges at a time (``edge_chunks``): [N, 4] float32. The sums run chunk
    by chunk in the edges' order, so edges read from disk give the same floats as edges in
    memory."""
    degree = np.zeros(num_nodes, np.float64)
    for lo, hi in edge_chunks(edge_index.shape[1]):
        degree += np.bincount(np.asarray(edge_index[0, lo:hi]), minlength=num_nodes)
    log_degree = np.log1p(degree)
    neighbours = np.zeros(num_nodes, np.float64)
    for lo, hi in edge_chunks(edge_index.shape[1]):
        src, dst = np.asarray(edge_index[0, lo:hi]), np.asarray(edge_index[1, lo:hi])
        neighbours += np.bincount(src, weights=log_degree[dst], minlength=num_nodes)
    neighbours /= np.maximum(degree, 1.0)
    return np.stack([np.ones(num_nodes), log_degree, log_degree ** 2 / 10.0, neighbours],
                    axis=1).astype(np.float32)


@dataclass(frozen=True)
class NodeTable:
    """What a node table says: each row's id (str), its features [N, F] float32 (None without
    feature columns) and what their columns are (None without), its labels [N] int64 (None
    without a label column; ``UNLABELLED`` for a node without one) and their names."""

    ids: np.ndarray
    x: np.ndarray | None
    y: np.ndarray | None
    classes: list[str]
    feature_columns: FeatureColumns | None = None


def read_node_table(nodes: str | Path) -> NodeTable:
    """The node table ``nodes`` (the module's docstring: its columns), read whole."""
    nodes = Path(nodes)
    node_header, node_columns = _columns(nodes)
    if not any(node_header):
        raise InputError(f"table {nodes} has no header row (its first row is numbers); add one "
                         "that names the columns: the id first, the features, and label")
    if node_columns[0].ndim != 1:
        raise InputError(f"table {nodes}: its first column must be the node ids, one per row")
    ids = _ids(node_columns[0])
    if np.unique(ids).size != ids.size:
        raise InputError(f"table {nodes} lists an id twice; give each node one row")
    check_ids(ids, nodes)
    label_at = next((i for i, h in enumerate(node_header[1:], 1)
                     if h.strip().lower() in LABEL_COLUMNS), None)
    feature_at = [i for i in range(1, len(node_header)) if i != label_at]
    x, features = (_numbers([node_columns[i] for i in feature_at],
                            [node_header[i] for i in feature_at], nodes)
                   if feature_at else (None, None))
    y, classes = (None, []) if label_at is None else _labels(_ids(node_columns[label_at]),
                                                               nodes)
    return NodeTable(ids, x, y, classes, features)


def _labels(labels: np.ndarray, table: Path) -> tuple[np.ndarray, list[str]]:
    """Labels as class numbers (``UNLABELLED`` where a cell is empty: a node without a label,
    in no split) and the classes' names. Numbers (``7``, ``"7"``, ``"7.0"``) are class
    numbers, as a graph file's labels are: whole, 0 or more, below the number of labelled
    rows, and every class 0 .. C-1 held by a node (checked before anything is made per
    class); other values (names) map to 0, 1, 2, ... in sorted order. A negative or a
    fractional label, classes with gaps and a column without a label are each one line: a
    label is never read as another class than the user meant."""
    given = np.ones(labels.shape[0], bool)
    if labels.dtype.kind in "US":
        given = np.char.strip(labels.astype(str)) != ""
        if not given.any():
            raise InputError(f"table {table}: its label column holds no label; give nodes "
                             "their classes, or drop the label column to train without labels")
    y = np.full(labels.shape[0], UNLABELLED, np.int64)
    y[given], classes = _classes(labels[given], table)
    return y, classes


def _classes(labels: np.ndarray, table: Path) -> tuple[np.ndarray, list[str]]:
    """``_labels`` of the rows that have one: class numbers and the classes' names."""
    try:
        values = labels.astype(np.float64)
    except (ValueError, OverflowError):
        values = None
    if values is None:
        names, y = np.unique(labels, return_inverse=True)
        return y.astype(np.int64), [str(n) for n in names]
    whole = np.isfinite(values) & (values == np.floor(values))
    if not whole.all():
        raise InputError(f"table {table}: label {shown(str(labels[~whole][0]), 40)} is not a "
                         "class number; number the classes 0, 1, 2, ... or give them names")
    if values.size and values.min() < 0:
        raise InputError(f"table {table}: label {values.min():.0f} is negative; number the "
                         "classes 0, 1, 2, ... (a node without a label: leave its cell empty)")
    if values.size and values.max() >= values.size:
        raise InputError(f"table {table}: label {values.max():.0f} is not below the number of "
                         f"labelled nodes ({values.size}); number the classes 0, 1, 2, ... or "
                         "give them names")
    y = values.astype(np.int64)
    present = np.unique(y)
    if present.size and present.size != int(present[-1]) + 1:
        gap = int(np.setdiff1d(np.arange(int(present[-1]) + 1), present)[0])
        raise InputError(f"table {table}: no node has class {gap}, though the labels go up to "
                         f"{int(present[-1])}; number the {present.size} classes 0 .. "
                         f"{present.size - 1}, or give them names")
    return y, [str(c) for c in range(int(present[-1]) + 1 if present.size else 0)]


def check_ids(ids: np.ndarray, table: Path) -> None:
    """Ids are one line each (embeddings are matched back to them line by line)."""
    if any("\n" in i or "\r" in i for i in ids.tolist()):
        raise InputError(f"table {table}: an id holds a line break; keep each id on one line")


@dataclass(frozen=True)
class Numbering:
    """Node numbers of ids: the ids sorted (``sorted_ids``) and each one's node number
    (``number``: the node table's row, or, without one, its place in the sort)."""

    sorted_ids: np.ndarray
    number: np.ndarray

    @staticmethod
    def of(ids: np.ndarray) -> Numbering:
        """Ids numbered in the order given (a node table's rows)."""
        order = np.argsort(ids, kind="stable")
        return Numbering(ids[order], order.astype(np.int64))

    def edges(self, ends: np.ndarray, edges: Path, nodes: Path | None) -> np.ndarray:
        """[2, m] ids as node numbers, self-loops dropped; an id no row lists is one line."""
        at = np.searchsorted(self.sorted_ids, ends)
        found = (at < self.sorted_ids.size) & (
            self.sorted_ids[np.minimum(at, self.sorted_ids.size - 1)] == ends)
        if not found.all():
            missing = ends[~found][0]
            raise InputError(f"table {edges} names node {shown(str(missing), 60)}, which the "
                             f"node table {nodes} does not list; add a row for it")
        numbered = self.number[at]
        return numbered[:, numbered[0] != numbered[1]]


def read_tables(edges: str | Path, nodes: str | Path | None = None,
                reading: str = "auto") -> TableGraph:
    """The graph of an edge table and an optional node table (the module's docstring: the
    columns), its edges read as ``reading`` says (edgegcl_embed.graph.EDGE_READINGS: both ways
    unless ``directed``); every problem one InputError line naming the table and the fix."""
    edges = Path(edges)
    both = reads_both_ways(reading, True)
    header, columns = _columns(edges)
    if len(header) < 2 or columns[0].ndim != 1 or columns[1].ndim != 1:
        raise _too_narrow(edges, len(header))
    ends = np.stack([_ids(columns[0]), _ids(columns[1])])
    if nodes is not None:
        table = read_node_table(nodes)
        numbering = Numbering.of(table.ids)
    else:
        table = NodeTable(np.unique(ends), None, None, [])
        check_ids(table.ids, edges)
        numbering = Numbering(table.ids, np.arange(table.ids.size, dtype=np.int64))
    edge_index = numbering.edges(ends, edges, None if nodes is None else Path(nodes))
    edge_index = (both_ways(edge_index) if both else np.unique(edge_index, axis=1)
                  if edge_index.size else edge_index.reshape(2, 0))  # once each, sorted
    if table.x is None or table.feature_columns is None:
        x, columns = structural_features(edge_index, table.ids.size), FeatureColumns(STRUCTURAL)
    else:
        x, columns = table.x, table.feature_columns
    return TableGraph(x, edge_index, table.y, table.ids, table.classes, columns)


def _too_narrow(edges: Path, columns: int) -> InputError:
    return InputError(f"table {edges} has {columns} column(s); an edge list needs two "
                      "(source, target) and may have a third (weight)")


def edge_id_chunks(edges: str | Path, rows: int) -> Iterator[tuple[np.ndarray, float]]:
    """A CSV / TSV edge table's [2, m] ids (str), ``rows`` edges at a time, each with the
    share of the file read so far: what reads an edge list larger than memory (the module's
    docstring: the columns). At least one edge, else one InputError line."""
    edges = Path(edges)
    check_file(edges, "table", "check the path")
    with open_regular(edges, "table", "split it into smaller tables", MAX_TABLE_BYTES) as fh:
        refuse_holes(fh, edges, "table")
        size = max(1, os.fstat(fh.fileno()).st_size)
        text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
        total = 0
        for header, table in delimited_chunks(text, edges, rows):
            if len(header) < 2:
                raise _too_narrow(edges, len(header))
            total += table.shape[0]
            if total == 0:
                raise InputError(f"table {edges} has no rows under its header; the first row "
                                 "names the columns and each row after it is one edge")
            yield np.stack([table[:, 0], table[:, 1]]), min(1.0, fh.tell() / size)
