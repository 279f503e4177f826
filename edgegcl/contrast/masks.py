"""Which entries of the dense similarity blocks are active negatives, a chunk of rows at a time.

The dense path (edgegcl.contrast.loss.DenseTerms) computes every similarity whatever theta_max
is, and applies the schedule as 0 / 1 weights on a chunk of rows at once, so a smaller budget
never costs more than every negative. Each chunk's weights come as four float [rows, B]
tensors, aligned with the blocks' rows:

- direction 1's inter-view (rows of s12) and intra-view (rows of s11) columns;
- direction 2's inter-view columns transposed (row j, column i: whether candidate j of the
  other view is active for view-2 anchor i, aligned with s12's rows), and its intra-view
  (rows of s22);

the intra-view ones None with inter-view candidates only. Two sources:

- ``BlockMasks``: a uniform draw from sampled strata (``ActiveNegatives.left_out``): the
  anchors of a block share a sample, so a chunk is the block's row repeated and its anchors'
  own left-out columns cleared. Nothing B x B is stored.
- ``ColumnMasks``: any other active set: its columns scattered into uint8 masks once (B x 2B
  bytes per direction), each chunk cast to float when used.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from edgegcl.contrast.negatives import ActiveNegatives

Part = tuple[Tensor, "tuple[Tensor, Tensor] | None"]
"""One block's weights for a chunk of rows: 0 / 1 floats broadcastable to [rows, B], and the
(row in the chunk, column) entries of the product to zero after multiplying (None: none)."""

ChunkWeights = tuple[Part, "Part | None", Part, "Part | None"]
"""One chunk's weights: direction 1 inter and intra, direction 2 inter (transposed) and intra
(see the module)."""


def masked(e: Tensor, part: Part) -> Tensor:
    """``e`` times ``part``'s weights, in place, its listed entries then zeroed."""
    w, zero = part
    e.mul_(w)
    if zero is not None:
        e.index_put_(zero, e.new_zeros(()))
    return e


class ChunkMasks(Protocol):
    """The active entries of the dense blocks, a chunk of rows at a time."""

    align: int
    """Chunks start at multiples of this many rows and never span two of them."""

    def chunk(self, start: int, stop: int) -> ChunkWeights:
        """Weights of rows ``start .. stop - 1`` of the four blocks (see the module)."""
        ...


class ColumnMasks:
    """Active negatives given as columns (``ActiveNegatives.cols``), scattered into uint8
    masks: a uint8 mask is as small as a bool one, and a chunk of it casts to float several
    times faster than ``torch.where`` selects with a bool one on a CPU."""

    align = 1

    def __init__(self, active: tuple[ActiveNegatives, ActiveNegatives], num_anchors: int,
                 intra: bool) -> None:
        b = num_anchors
        full = []
        for a in active:
            m = torch.zeros(b, (2 if intra else 1) * b, dtype=torch.uint8, device=a.cols.device)
            full.append(m.scatter_(1, a.cols, 1))
        m1, m2 = full
        self.parts = (m1[:, :b].contiguous(), m1[:, b:].contiguous() if intra else None,
                      m2[:, :b].t().contiguous(), m2[:, b:].contiguous() if intra else None)

    def chunk(self, start: int, stop: int) -> ChunkWeights:
        return tuple(None if m is None else (m[start:stop].float(), None)  # type: ignore[return-value]
                     for m in self.parts)


class BlockMasks:
    """A uniform draw from sampled strata (``ActiveNegatives.left_out`` in both directions):
    the active set of anchor i is its block's sampled columns without its ``left_out``
    columns. Chunks lie inside one block of anchors, so the anchors' weights are their
    block's row, broadcast (no copy), with their left-out entries zeroed; direction 2's
    transposed weights are the blocks' entries repeated along the row (one copy per chunk)."""

    def __init__(self, active: tuple[ActiveNegatives, ActiveNegatives], num_anchors: int,
                 intra: bool) -> None:
        b = self.num_anchors = num_anchors
        self.intra = intra
        self.align = active[0].sample.block  # type: ignore[union-attr]
        rows, self.left_out = [], []
        for a in active:
            sample = a.sample
            if sample is None or a.left_out is None or sample.block != self.align:
                raise ValueError("BlockMasks need both directions drawn as sampled blocks "
                                 "of one size with their left-out columns")
            rows.append(torch.zeros(sample.cols.size(0), (2 if intra else 1) * b,
                                    device=sample.cols.device).scatter_(1, sample.cols, 1.0))
            self.left_out.append(a.left_out)
        self.rows_1, self.rows_2 = rows
        self.inter_2t = rows[1][:, :b].t().contiguous()  # [B, blocks]: candidate j by block
        # the left-out entries of each part as (row, column) pairs sorted by row
        self.zeros = [_entries(self.left_out[0], b, inter=True),
                      _entries(self.left_out[0], b, inter=False),
                      _entries(self.left_out[1], b, inter=True, transpose=True),
                      _entries(self.left_out[1], b, inter=False)]
        self._bounds: dict[tuple[int, int], list[int]] = {}

    def chunk(self, start: int, stop: int) -> ChunkWeights:
        b, k = self.num_anchors, start // self.align
        bounds = self._bounds.get((start, stop))
        if bounds is None:  # the backward asks for the forward's chunks again
            edges = torch.tensor([start, stop], device=self.inter_2t.device)
            bounds = self._bounds[start, stop] = [
                i for rows, _ in self.zeros for i in torch.searchsorted(rows, edges).tolist()]
        zero = [(rows[lo:hi] - start, cols[lo:hi]) for (rows, cols), lo, hi
                in zip(self.zeros, bounds[::2], bounds[1::2])]
        inter_2t = self.inter_2t[start:stop].repeat_interleave(self.align, dim=1)[:, :b]
        if not self.intra:
            return (self.rows_1[k:k + 1], zero[0]), None, (inter_2t, zero[2]), None
        return ((self.rows_1[k:k + 1, :b], zero[0]), (self.rows_1[k:k + 1, b:], zero[1]),
                (inter_2t, zero[2]), (self.rows_2[k:k + 1, b:], zero[3]))


def _entries(left_out: Tensor, b: int, inter: bool, transpose: bool = False
             ) -> tuple[Tensor, Tensor]:
    """The (row, column) entries of one block that ``left_out`` ([B, own] candidate columns)
    clears, sorted by row: its inter-view columns (< B) or its intra-view ones (- B), with the
    anchor as the row, or as the column when ``transpose``."""
    cols = left_out.reshape(-1)
    anchors = torch.arange(b, device=cols.device).repeat_interleave(left_out.size(1))
    keep = cols < b if inter else cols >= b
    cols, anchors = cols[keep] - (0 if inter else b), anchors[keep]
    if not transpose:
        return anchors, cols
    order = cols.argsort()
    return cols[order], anchors[order]

def chunk_masks(active: tuple[ActiveNegatives, ActiveNegatives], num_anchors: int,
                intra: bool) -> ChunkMasks:
    """``BlockMasks`` for a sampled uniform draw in both directions, else ``ColumnMasks``."""
    if all(a.left_out is not None and a.sample is not None for a in active):
        return BlockMasks(active, num_anchors, intra)
    return ColumnMasks(active, num_anchors, intra)
