"""The one shape contract every loaded graph meets (``validate_graph``)."""

from __future__ import annotations

import math
import sys

import torch
from torch import Tensor
from torch_geometric.data import Data

from edgegcl.errors import UsageError
from edgegcl_embed.columns import FeatureColumns
from edgegcl_embed.folder import MAX_LABELS, SPLIT_MASKS
from edgegcl_embed.tables import UNLABELLED
from edgegcl_embed.graph import overflow_bound

FLOAT32_MAX = float(torch.finfo(torch.float32).max)
PLAIN_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64,
                          torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                          torch.bool, torch.complex64, torch.complex128})
"""Dtypes a graph's tensors may arrive in (bool and complex get their own refusal below);
quantized and other special dtypes are refused in one line."""


def validate_graph(data: Data) -> Data:
    """Check the shape contract every edgegcl graph must meet and normalise dtypes.

    Returns a new ``Data`` holding only ``x`` (float32), ``edge_index`` (int64),
    ``y`` (int64 or ``None``), ``name`` and, when the graph carries published splits,
    ``train_mask``, ``val_mask`` and ``test_mask`` (bool ``[S, N]``, one row per split;
    ``published_splits``), and when it carries held-out pairs for the link task,
    ``LINK_PAIRS`` (``link_pairs``), what its feature columns are (``feature_columns``:
    what a table or folder reader recorded), and ``partly_labelled`` where some nodes have no
    label (``UNLABELLED`` in ``y``: a node table's empty cells; no split holds them); other
    attributes are dropped so that downstream code never
    depends on dataset-specific fields. Features large enough for
    float32 products to overflow are kept, with a one-line warning on stderr.
    """
    name = str(getattr(data, "name", None) or "graph")
    x = _checked_features(data, name)
    n = x.size(0)
    edge_index = _checked_edges(data, name, n)
    partial = getattr(data, "partly_labelled", False) is True
    y = checked_labels(data, name, n, partial)
    masks = split_masks(data, n, y, name)
    partial = partly_labelled(y, partial)
    pairs = link_pairs(data, edge_index, n, name)
    # what x's columns are (a table's by name, structural ones): the run records it, and a
    # task that holds edges out computes structural ones again from the edges it trains on
    # (edgegcl.training.linkprober)
    columns = getattr(data, "feature_columns", None)
    kept: dict[str, object] = {"partly_labelled": True} if partial else {}
    if isinstance(columns, FeatureColumns):
        if columns.width not in (None, x.size(1)):
            raise UsageError(f"{name}: feature_columns names {columns.width} values per node "
                             f"but x has {x.size(1)} columns; drop feature_columns or give x "
                             "its columns")
        kept["feature_columns"] = columns
    _warn_if_overflowing(x, name)  # last: a graph refused above gets its one line only
    return Data(x=x, edge_index=edge_index, y=y, name=name, **masks, **pairs, **kept)


def _checked_features(data: Data, name: str) -> Tensor:
    """``x`` as float32 [N, F], N >= 2 and F >= 1, every entry finite (one line otherwise)."""
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
    wider = x.dtype.is_floating_point and torch.finfo(x.dtype).max > FLOAT32_MAX
    x = x.to(torch.float32)
    # The sum is non-finite whenever an entry is, so the exact (memory-hungry) scan only
    # runs when something may be wrong; it also clears sums that merely overflowed.
    if not math.isfinite(float(x.sum())) and not bool(torch.isfinite(x).all()):
        bad_row = int((~torch.isfinite(x)).any(dim=1).nonzero()[0, 0])
        beyond = f" as float32 (values beyond +-{FLOAT32_MAX:.3g} become inf)" if wider else ""
        raise UsageError(f"{name}: x holds NaN or inf (first in row {bad_row}){beyond}; replace "
                         "non-finite features")
    return x


def _checked_edges(data: Data, name: str, n: int) -> Tensor:
    """``edge_index`` as int64 [2, E], every index in 0..n-1 (one line otherwise)."""
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
    return edge_index


def partly_labelled(y: Tensor | None, declared: bool) -> bool:
    """Whether a graph that says some nodes have no label (``declared``: a node table's empty
    cells, a folder's ``unlabelled``) has any: class ids of ``UNLABELLED`` in ``y``."""
    return declared and y is not None and y.dim() == 1 and bool((y == UNLABELLED).any())


def checked_labels(data: Data, name: str, n: int, partial: bool = False) -> Tensor | None:
    """``y`` as int64 class ids [n] (0, 1, 2, ..., fewer classes than nodes) or an [n, C] 0 / 1
    multi-label target, or None (one line otherwise). ``partial``: the graph says that some
    nodes have no label (``partly_labelled``, a node table's empty label cells), each marked
    ``UNLABELLED``; a negative label is refused otherwise."""
    y = _tensor_attr(data, "y", name)
    if y is not None and y.dim() == 2 and y.size(0) == n:
        y = _multilabel(y, name)
    elif y is not None:
        if y.dim() != 1 or y.size(0) != n:
            raise UsageError(
                f"{name}: y must be 1-D with one label per node ({n}), or [{n}, labels] 0 / 1 for "
                f"multi-label targets, but has shape {tuple(y.shape)}; store one integer class "
                "per node"
            )
        if not _is_integer(y.dtype):
            raise UsageError(f"{name}: y must hold integer class ids but has dtype {y.dtype}; store y as int64")
        y = y.to(torch.int64)
        if y.numel() > 0 and int(y.min()) < (UNLABELLED if partial else 0):
            raise UsageError(f"{name}: y holds negative label {int(y.min())}; class ids must be 0, 1, 2, ...")
        if partial and y.numel() > 0 and int(y.max()) == UNLABELLED:
            raise UsageError(f"{name}: no node has a label (y = {UNLABELLED} everywhere); give "
                             "nodes their classes, or drop y to train without labels")
        # the probes size one-hot targets and counts by the number of classes, max(y) + 1:
        # more classes than nodes means a label is an id or a typo, not a class
        if y.numel() > 0 and int(y.max()) >= n:
            raise UsageError(f"{name}: y holds label {int(y.max())} but the graph has {n} nodes, so at "
                             f"most {n} classes; number the classes 0, 1, 2, ... (below {n})")
    return y


# SPLIT_MASKS (a graph's published splits: one boolean mask per set, [N] for one split,
# [N, S] as PyG lays them out or [S, N] for S of them) and MAX_LABELS (the most labels a
# multi-label target may have: its probe holds [N, labels] floats) are the runtime's, which
# a graph folder's reader checks against too


def _multilabel(y: torch.Tensor, name: str) -> torch.Tensor:
    """A multi-label target [N, C]: 0 / 1 values of any integer, bool or float type, as int64
    (the probe's one-vs-rest classifiers read it; edgegcl.evaluation.metrics.label_kind)."""
    if y.size(1) < 1 or y.size(1) > MAX_LABELS:
        raise UsageError(f"{name}: a multi-label y needs 1 to {MAX_LABELS} label columns but has "
                         f"{y.size(1)}; store y as [nodes, labels] of 0 / 1")
    if y.dtype.is_complex or not bool(((y == 0) | (y == 1)).all()):
        raise UsageError(f"{name}: a 2-D y is a multi-label target and must hold only 0 and 1; "
                         "store class ids as a 1-D y instead")
    return y.to(torch.int64)


def split_masks(data: Data, n: int, y: Tensor | None, name: str) -> dict[str, torch.Tensor]:
    """The graph's split masks as bool ``[S, N]`` each, or ``{}`` when it carries none (or not
    all three: a warning line); one UsageError line for masks that cannot be a split (a
    shape, values other than 0 / 1, overlapping or empty sets, no labels ``y`` to evaluate
    on, a node without a label in a set)."""
    labelled = y is not None
    given = {key: _tensor_attr(data, key, name) for key in SPLIT_MASKS}
    present = [key for key, mask in given.items() if mask is not None]
    if not present:
        return {}
    if len(present) < len(SPLIT_MASKS):  # not a split to evaluate on: kept out, and said
        missing = ", ".join(key for key in SPLIT_MASKS if key not in present)
        print(f"edgegcl: warning: {name}: has {', '.join(present)} but no {missing}, so its "
              "split is not used; give all three masks to be evaluated on it", file=sys.stderr,
              flush=True)
        return {}
    if not labelled:
        raise UsageError(f"{name}: has split masks but no labels y to evaluate on them; add y "
                         "or drop the masks")
    rows: dict[str, torch.Tensor] = {}
    for key, mask in given.items():
        assert mask is not None
        if mask.dtype.is_floating_point or mask.dtype.is_complex or not bool(
                ((mask == 0) | (mask == 1)).all()):
            raise UsageError(f"{name}: {key} must hold booleans (or 0 / 1), not {mask.dtype} "
                             "values; store one True per node in the set")
        mask = mask.to(torch.bool)
        if mask.dim() == 1 and mask.size(0) == n:
            mask = mask.unsqueeze(0)
        elif mask.dim() == 2 and mask.size(0) == n and mask.size(1) != n:
            mask = mask.t()  # PyG's [N, S]
        elif not (mask.dim() == 2 and mask.size(1) == n):
            raise UsageError(f"{name}: {key} has shape {tuple(mask.shape)}, not [{n}], "
                             f"[{n}, splits] or [splits, {n}]; store one mask per split")
        rows[key] = mask.contiguous()
    splits = max(mask.size(0) for mask in rows.values())
    if splits == 0:
        raise UsageError(f"{name}: the split masks hold no split (shape [0, {n}]); give at "
                         "least one, or drop the masks")
    for key, mask in rows.items():  # one mask shared by every split (WikiCS's test set)
        if mask.size(0) not in (1, splits):
            counts = ", ".join(str(m.size(0)) for m in rows.values())
            raise UsageError(f"{name}: the split masks hold {counts} splits; give each set the "
                             "same number of splits (or one, shared by all)")
        rows[key] = mask.expand(splits, n).contiguous()
    train, val, test = (rows[key] for key in SPLIT_MASKS)
    for (a, b), (ka, kb) in zip(((train, val), (train, test), (val, test)),
                                (("train", "val"), ("train", "test"), ("val", "test"))):
        both = (a & b).nonzero()
        if both.numel():
            split, node = (int(v) for v in both[0])
            raise UsageError(f"{name}: split {split} puts node {node} in both its {ka} and "
                             f"{kb} sets; the sets of a split must be disjoint")
    for key, mask in rows.items():
        empty = (~mask.any(dim=1)).nonzero()
        if empty.numel():
            raise UsageError(f"{name}: split {int(empty[0, 0])}'s {key} selects no node; every "
                             "set of a split needs at least one")
    if y is not None and y.dim() == 1 and any(bool((m & (y == UNLABELLED)).any())
                                              for m in rows.values()):
        raise UsageError(f"{name}: a split mask holds a node without a label (y = "
                         f"{UNLABELLED}); leave such nodes out of the masks")
    return rows


LINK_PAIRS = ("val_pos", "val_neg", "test_pos", "test_neg")
"""A graph's own held-out pairs for the link task, [2, K] node pairs each (OGB's link datasets,
PyG's ``RandomLinkSplit(split_labels=True)``): validation and test edges removed from
``edge_index``, and as many non-edges, or any number."""


def brings_link_pairs(data: Data) -> bool:
    """Whether ``data`` carries its own held-out pairs (every one of ``LINK_PAIRS``)."""
    return all(getattr(data, key, None) is not None for key in LINK_PAIRS)


def link_pairs(data: Data, edge_index: Tensor, n: int, name: str) -> dict[str, Tensor]:
    """The graph's ``LINK_PAIRS`` as int64 [2, K] each with row 0 < row 1, or ``{}`` when it
    carries none; one UsageError line when only some are given, or a set is not [2, K] pairs
    of distinct nodes in range, or a pair is an edge of ``edge_index`` (the training graph)
    either way."""
    given = {key: _tensor_attr(data, key, name) for key in LINK_PAIRS}
    present = [key for key, pairs in given.items() if pairs is not None]
    if not present:
        return {}
    if len(present) < len(LINK_PAIRS):
        missing = ", ".join(key for key in LINK_PAIRS if key not in present)
        raise UsageError(f"{name}: has {', '.join(present)} but no {missing}; give all four "
                         "held-out pair sets of the link task, or none")
    train = _undirected_keys(edge_index, n)
    out: dict[str, Tensor] = {}
    for key, pairs in given.items():
        assert pairs is not None
        if pairs.dim() != 2 or pairs.size(0) != 2 or pairs.size(1) < 1:
            raise UsageError(f"{name}: {key} has shape {tuple(pairs.shape)}, not [2, pairs] "
                             "with at least one pair; store node pairs as columns (transpose "
                             "a [pairs, 2] array)")
        if not _is_integer(pairs.dtype):
            raise UsageError(f"{name}: {key} must hold integer node ids but has dtype "
                             f"{pairs.dtype}; store it as int64")
        pairs = pairs.to(torch.int64)
        lo, hi = torch.minimum(pairs[0], pairs[1]), torch.maximum(pairs[0], pairs[1])
        if int(lo.min()) < 0 or int(hi.max()) >= n:
            bad = int(lo.min()) if int(lo.min()) < 0 else int(hi.max())
            raise UsageError(f"{name}: {key} holds node {bad} but the graph has {n} nodes "
                             f"(0..{n - 1}); fix the pairs or x")
        loops = (lo == hi).nonzero()
        if loops.numel():
            raise UsageError(f"{name}: {key} pairs node {int(lo[loops[0, 0]])} with itself; "
                             "a held-out pair joins two distinct nodes")
        keys = lo * n + hi
        at = torch.searchsorted(train, keys).clamp_max(max(train.numel() - 1, 0))
        seen = (train[at] == keys).nonzero() if train.numel() else at[:0, None]
        if seen.numel():
            i = int(seen[0, 0])
            raise UsageError(f"{name}: {key} pair ({int(pairs[0, i])}, {int(pairs[1, i])}) is "
                             "also an edge of edge_index, which the encoder trains on; remove "
                             "held-out pairs from edge_index")
        out[key] = torch.stack([lo, hi])
    return out


def _undirected_keys(edge_index: Tensor, n: int) -> Tensor:
    """Each edge as the sorted key lo * n + hi, whichever way it is listed."""
    lo = torch.minimum(edge_index[0], edge_index[1])
    hi = torch.maximum(edge_index[0], edge_index[1])
    return torch.unique(lo * n + hi)


def _warn_if_overflowing(x: torch.Tensor, name: str) -> None:
    """One line on stderr when x is large enough for float32 products of features to overflow
    (training on such features runs at a constant, meaningless loss)."""
    low, high = torch.aminmax(x)
    largest, bound = max(-float(low), float(high)), overflow_bound(x.size(1))
    if largest > bound:
        print(f"edgegcl: warning: {name}: x holds |values| up to {largest:.3g}, above "
              f"{bound:.3g} = sqrt(float32 max / {x.size(1)} features), where float32 products "
              "of features overflow to inf; scale or standardise x", file=sys.stderr, flush=True)


def _tensor_attr(data: Data, key: str, name: str) -> torch.Tensor | None:
    """Fetch ``data[key]`` if present, insisting that it is a dense tensor of plain numbers on
    the CPU (without its autograd history)."""
    value = getattr(data, key, None)
    if value is None:
        return None
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        raise UsageError(
            f"{name}: {key} must be a dense torch tensor, not {type(value).__name__}; convert it with torch.as_tensor"
        )
    if value.is_quantized or value.dtype not in PLAIN_DTYPES:
        raise UsageError(f"{name}: {key} has dtype {value.dtype}, not plain numbers; store it "
                         "as float32 (x) or int64 (edge_index, y)")
    if value.device.type != "cpu":
        raise UsageError(f"{name}: {key} is on the {value.device.type} device; give the graph on "
                         "the CPU (.cpu(): the run moves it to its own device)")
    return value.detach()


def _is_integer(dtype: torch.dtype) -> bool:
    """True for integer dtypes (bool excluded: it is never a valid index or class id)."""
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool
