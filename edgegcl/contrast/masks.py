"""Which entries of the dense similarity blocks are active negatives, applied a chunk of rows at
a time.

The dense path (edgegcl.contrast.dense.DenseTerms) computes every similarity whatever theta_max
is and applies the schedule as 0 / 1 weights on a chunk of rows of exp(s12), exp(s11) and
exp(s22) at once, so a smaller budget never costs more than every negative. The weights are:

- direction 1 (view-1 anchors): the rows of s12 (inter-view) and of s11 (intra-view);
- direction 2 (view-2 anchors): the columns of s12 (inter-view, s21 = s12^T) and the rows of
  s22 (intra-view);

the intra-view ones absent with inter-view candidates only. A mask object gives a chunk's
masked sums (``sums``) and writes its gradients (``grads``). Two kinds:

- ``BlockMasks``: a uniform draw from sampled strata (``ActiveNegatives.left_out``): the
  anchors of a block share a sample, so a chunk (inside one block of anchors) is weighted by
  its block's row, and direction 2's columns each by its own block's weights (one pass over
  the chunk): matrix-vector products over exp, no weight matrix of the chunk's size in the
  forward; each anchor's left-out entries are then taken back out. Nothing B x B is stored.
- ``ColumnMasks``: any other active set: its columns scattered into uint8 masks once (B x 2B
  bytes per direction), a chunk cast to float when used (on a CPU several times faster than
  ``torch.where`` with a bool mask, and as small).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from edgegcl.contrast.negatives import ActiveNegatives

Sums = tuple[Tensor, Tensor, Tensor]
"""A chunk's masked sums of exp: direction 1's per row of the chunk (s12 and s11 rows),
direction 2's per column of s12 ([B]), and direction 2's per row of the chunk (s22 rows;
zeros without intra-view candidates)."""


class ChunkMasks(Protocol):
    """The active entries of the dense blocks, applied a chunk of rows at a time."""

    align: int
    """Chunks start at multiples of this many rows and never span two of them."""

    def sums(self, start: int, stop: int, e12: Tensor, e11: Tensor | None,
             e22: Tensor | None) -> Sums:
        """Masked sums of rows ``start .. stop - 1`` of exp(s12), exp(s11), exp(s22)."""
        ...

    def grads(self, start: int, stop: int, e: tuple[Tensor, Tensor | None, Tensor | None],
              g1: Tensor, g2: Tensor, out: tuple[Tensor, Tensor | None, Tensor | None]
              ) -> None:
        """Write the chunk's gradients of the masked sums into ``out`` (rows of the blocks'
        gradients), given the sums' incoming gradients ``g1`` (direction 1) and ``g2``
        (direction 2), each [B]."""
        ...


class ColumnMasks:
    """Active negatives given as columns (``ActiveNegatives.cols``), scattered into uint8
    masks once."""

    align = 1

    def __init__(self, active: tuple[ActiveNegatives, ActiveNegatives], num_anchors: int,
                 intra: bool, dtype: torch.dtype = torch.float32) -> None:
        b, self.dtype = num_anchors, dtype
        full = []
        for a in active:
            m = torch.zeros(b, (2 if intra else 1) * b, dtype=torch.uint8, device=a.cols.device)
            full.append(m.scatter_(1, a.cols, 1))
        m1, m2 = full
        self.parts = (m1[:, :b].contiguous(), m1[:, b:].contiguous() if intra else None,
                      m2[:, :b].t().contiguous(), m2[:, b:].contiguous() if intra else None)

    def _chunk(self, k: int, start: int, stop: int) -> Tensor:
        return self.parts[k][start:stop].to(self.dtype)  # type: ignore[index]

    def sums(self, start: int, stop: int, e12: Tensor, e11: Tensor | None,
             e22: Tensor | None) -> Sums:
        n1 = (e12 * self._chunk(0, start, stop)).sum(1)
        n2_cols = (e12 * self._chunk(2, start, stop)).sum(0)
        n2 = e12.new_zeros(stop - start)
        if e11 is not None and e22 is not None:
            n1 += (e11 * self._chunk(1, start, stop)).sum(1)
            n2 = (e22 * self._chunk(3, start, stop)).sum(1)
        return n1, n2_cols, n2

    def grads(self, start: int, stop: int, e: tuple[Tensor, Tensor | None, Tensor | None],
              g1: Tensor, g2: Tensor, out: tuple[Tensor, Tensor | None, Tensor | None]
              ) -> None:
        w = self._chunk(0, start, stop).mul_(g1[start:stop].unsqueeze(1))
        w.addcmul_(self._chunk(2, start, stop), g2.unsqueeze(0))
        torch.mul(e[0], w, out=out[0])
        for k, g in ((1, g1), (2, g2)):
            if e[k] is not None:
                w = self._chunk(2 * k - 1, start, stop).mul_(g[start:stop].unsqueeze(1))
                torch.mul(e[k], w, out=out[k])  # type: ignore[arg-type]


class BlockMasks:
    """A uniform draw from sampled strata (``ActiveNegatives.left_out`` in both directions):
    the active set of anchor i is its block's sampled columns without its ``left_out``
    columns (see the module)."""

    def __init__(self, active: tuple[ActiveNegatives, ActiveNegatives], num_anchors: int,
                 intra: bool, dtype: torch.dtype = torch.float32) -> None:
        b = self.num_anchors = num_anchors
        self.intra = intra
        self.align = active[0].sample.block  # type: ignore[union-attr]
        rows = []
        for a in active:
            sample = a.sample
            if sample is None or a.left_out is None or sample.block != self.align:
                raise ValueError("BlockMasks need both directions drawn as sampled blocks "
                                 "of one size with their left-out columns")
            rows.append(torch.zeros(sample.cols.size(0), (2 if intra else 1) * b, dtype=dtype,
                                    device=sample.cols.device).scatter_(1, sample.cols, 1.0))
        self.rows_1, self.rows_2 = rows
        self.inter_2t = rows[1][:, :b].t().contiguous()  # [B, blocks]: candidate j by block
        self.block_of = torch.arange(b, device=self.inter_2t.device) // self.align
        # the left-out entries of each block as (row, column) pairs sorted by row
        left_1, left_2 = active[0].left_out, active[1].left_out
        self.zeros = [_entries(left_1, b, inter=True), _entries(left_1, b, inter=False),  # type: ignore[arg-type]
                      _entries(left_2, b, inter=True, transpose=True),  # type: ignore[arg-type]
                      _entries(left_2, b, inter=False)]  # type: ignore[arg-type]
        self._bounds: dict[tuple[int, int], list[int]] = {}

    def _left(self, k: int, start: int, stop: int) -> tuple[Tensor, Tensor]:
        """Part ``k``'s left-out entries in rows start..stop-1, rows local to the chunk."""
        bounds = self._bounds.get((start, stop))
        if bounds is None:  # the backward asks for the forward's chunks again
            edges = torch.tensor([start, stop], device=self.inter_2t.device)
            bounds = self._bounds[start, stop] = [
                i for rows, _ in self.zeros for i in torch.searchsorted(rows, edges).tolist()]
        rows, cols = self.zeros[k]
        lo, hi = bounds[2 * k], bounds[2 * k + 1]
        return rows[lo:hi] - start, cols[lo:hi]

    def _weighted(self, e: Tensor, weights: Tensor, g2: Tensor, g1: Tensor, row: Tensor,
                  out: Tensor) -> None:
        """out[i, j] = e[i, j] (weights[i, block(j)] g2[j] + g1[i] row[j]): the weights of
        each column's own block broadcast over its ``align`` columns (three passes over the
        chunk, no weight matrix gathered)."""
        rows, b = e.shape
        whole = b // self.align
        full = whole * self.align

        def part(lo: int, hi: int, w: Tensor, shape: tuple[int, ...]) -> None:
            cols = slice(lo, hi)
            t = torch.mul(w, g2[cols].view(1, *shape))
            t.addcmul_(g1.view(rows, *([1] * len(shape))), row[cols].view(1, *shape))
            torch.mul(t, e[:, cols].view(rows, *shape), out=out[:, cols].view(rows, *shape))

        if full:
            part(0, full, weights[:, :whole].unsqueeze(2), (whole, self.align))
        if full < b:  # the last, shorter block
            part(full, b, weights[:, whole:whole + 1], (b - full,))

    def _column_sums(self, e: Tensor, weights: Tensor) -> Tensor:
        """[B]: sum_i e[i, j] weights[i, block(j)], each column against its own block's
        weights only (``align`` columns a block): one pass over ``e``, where a [blocks, rows]
        x [rows, B] product would weigh every column by every block."""
        rows, b = e.shape
        whole = b // self.align
        full = whole * self.align
        out = e.new_empty(b)
        out[:full] = (e[:, :full].view(rows, whole, self.align)
                      * weights[:, :whole].unsqueeze(2)).sum(0).reshape(-1)
        if full < b:  # the last, shorter block
            out[full:] = weights[:, whole] @ e[:, full:]
        return out

    def sums(self, start: int, stop: int, e12: Tensor, e11: Tensor | None,
             e22: Tensor | None) -> Sums:
        b, k = self.num_anchors, start // self.align
        r, c = self._left(0, start, stop)
        n1 = torch.mv(e12, self.rows_1[k, :b]).index_add_(0, r, e12[r, c], alpha=-1)
        # direction 2: column j of s12 weighted by its own block's row of the chunk
        n2_cols = self._column_sums(e12, self.inter_2t[start:stop])
        r, c = self._left(2, start, stop)
        n2_cols.index_add_(0, c, e12[r, c], alpha=-1)
        n2 = e12.new_zeros(stop - start)
        if e11 is not None and e22 is not None:
            r, c = self._left(1, start, stop)
            n1 += torch.mv(e11, self.rows_1[k, b:]).index_add_(0, r, e11[r, c], alpha=-1)
            r, c = self._left(3, start, stop)
            n2 = torch.mv(e22, self.rows_2[k, b:]).index_add_(0, r, e22[r, c], alpha=-1)
        return n1, n2_cols, n2

    def grads(self, start: int, stop: int, e: tuple[Tensor, Tensor | None, Tensor | None],
              g1: Tensor, g2: Tensor, out: tuple[Tensor, Tensor | None, Tensor | None]
              ) -> None:
        b, k = self.num_anchors, start // self.align
        e12, rows = e[0], slice(start, stop)
        # weights: g1_i on its block's row, plus g2_j where anchor j's block drew candidate i,
        # then times exp
        self._weighted(e12, self.inter_2t[rows], g2, g1[rows], self.rows_1[k, :b], out[0])
        r, c = self._left(0, start, stop)  # left out of direction 1: no g1 there
        out[0].index_put_((r, c), -(e12[r, c] * g1[rows][r]), accumulate=True)
        r, c = self._left(2, start, stop)  # left out of direction 2: no g2 there
        out[0].index_put_((r, c), -(e12[r, c] * g2[c]), accumulate=True)
        for part, (blk, row, g) in enumerate(((1, self.rows_1, g1), (2, self.rows_2, g2)),
                                             start=1):
            if e[blk] is None:
                continue
            torch.mul(e[blk], row[k, b:], out=out[blk])  # type: ignore[arg-type]
            out[blk].mul_(g[rows].unsqueeze(1))  # type: ignore[union-attr]
            r, c = self._left(2 * part - 1, start, stop)
            out[blk].index_put_((r, c), e12.new_zeros(()))  # type: ignore[union-attr]


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
                intra: bool, dtype: torch.dtype = torch.float32) -> ChunkMasks:
    """``BlockMasks`` for a sampled uniform draw in both directions, else ``ColumnMasks``;
    ``dtype``: the similarities'."""
    if all(a.left_out is not None and a.sample is not None for a in active):
        return BlockMasks(active, num_anchors, intra, dtype)
    return ColumnMasks(active, num_anchors, intra, dtype)
