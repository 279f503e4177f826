"""The dense path at theta_max < 1: the schedule as 0 / 1 weights on chunks of the blocks it
computes anyway (edgegcl.contrast.masks, edgegcl.contrast.dense.DenseTerms)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from helpers import views
from test_loss import loop_loss

from edgegcl.contrast import dense as dense_module
from edgegcl.contrast.dense import DenseTerms, similarities
from edgegcl.contrast.loss import scheduled_info_nce
from edgegcl.contrast.masks import BlockMasks, ColumnMasks, chunk_masks
from edgegcl.contrast.negatives import ActiveNegatives, pool_sizes
from edgegcl.contrast.sampled import draw_sample, schedule_sampled
from edgegcl.contrast.pairs import pair_similarities

RATIOS = {"hard": 0.3, "inter": 0.5, "easy": 0.2}
TAU = 0.5


def uniform_draw(sims, size: int, block: int, candidates: str, compact: bool, seed: int = 0):
    """Both directions' uncategorised sampled draws, as the selector makes them once HANS is
    saturated (whole sampled pools, not ranked)."""
    g = torch.Generator().manual_seed(seed)
    b = sims.num_anchors
    out = []
    for d in (0, 1):
        sample = draw_sample(b, size, g, sims.device, block=block, candidates=candidates)
        out.append(schedule_sampled(sims.candidate_values(d), b, sims.device, RATIOS,
                                    pool_sizes(size, RATIOS), 0, sample, grouped=False,
                                    keep_values=sims.keeps_values, compact=compact))
    return tuple(out)


@pytest.mark.parametrize("candidates", ["both", "inter"])
@pytest.mark.parametrize("chunk", [1 << 6, 1 << 19])  # chunks of a few rows, and one chunk
def test_block_masks_give_the_loop_loss_and_gradients(candidates, chunk, monkeypatch):
    """Blocks of 8 anchors with a short last one (b = 29); own columns in the sample or not."""
    monkeypatch.setattr(dense_module, "DENSE_CHUNK_ELEMENTS", chunk)
    h1, h2 = views(b=29, d=6, seed=7)
    sims = similarities(h1, h2, TAU, candidates)
    active = uniform_draw(sims, 11, 8, candidates, compact=True)
    assert all(a.left_out is not None and a.cols.numel() == 0 for a in active)
    assert isinstance(chunk_masks(active, 29, sims.intra), BlockMasks)
    out = scheduled_info_nce(sims, active)
    cols = [a.columns() for a in active]
    assert all(c.shape == (29, 11) for c in cols)
    ref = loop_loss(h1, h2, TAU, [c.tolist() for c in cols])  # inter-view columns: same layout
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-10)
    for a, b in zip(torch.autograd.grad(out.loss, (h1, h2)), torch.autograd.grad(ref, (h1, h2))):
        assert torch.allclose(a, b, atol=1e-10)


@pytest.mark.parametrize("kept", [False, True])
def test_a_compact_draw_gives_the_same_loss_and_gradients_on_every_path(kept):
    """The same sample stream gives the same active sets as index columns and as samples with
    left-out columns, and the same loss and gradients on the dense blocks, on the pairs path
    from its columns, and on the pairs path from every sampled column (``kept``: values
    recomputed, as for an active set kept from an earlier step)."""
    h1, h2 = views(b=40, d=5, seed=8)
    dense = similarities(h1, h2, TAU)
    pairs = pair_similarities(h1, h2, TAU)
    masked = uniform_draw(dense, 17, 16, "both", compact=True)
    packed = uniform_draw(pairs, 17, 16, "both", compact=True)
    listed = uniform_draw(pairs, 17, 16, "both", compact=False)
    for m, p, c in zip(masked, packed, listed):
        assert torch.equal(m.columns().sort(1).values, c.cols.sort(1).values)
        assert torch.equal(p.columns(), m.columns())
        assert p.cols.numel() == 0 and p.values.shape == (40, 19)  # every sampled column
    if kept:
        packed = tuple(replace(a, values=None) for a in packed)
    outs = [scheduled_info_nce(s, a).loss for s, a in
            ((dense, masked), (pairs, packed), (pairs, listed))]
    grads = [torch.autograd.grad(out, (h1, h2), retain_graph=True) for out in outs]
    for out, grad in zip(outs[1:], grads[1:]):
        assert out.item() == pytest.approx(outs[0].item(), rel=1e-10)
        for a, b in zip(grad, grads[0]):
            assert torch.allclose(a, b, atol=1e-10)


def test_column_masks_equal_block_masks():
    h1, h2 = views(b=33, d=4, seed=9)
    sims = similarities(h1, h2, TAU)
    active = uniform_draw(sims, 20, 8, "both", compact=True)
    listed = tuple(ActiveNegatives(a.columns(), a.sizes, a.num_cand, grouped=False)
                   for a in active)
    assert isinstance(chunk_masks(listed, 33, True, torch.float64), ColumnMasks)
    block = DenseTerms.apply(sims.s12, sims.s11, sims.s22, chunk_masks(active, 33, True, torch.float64))
    column = DenseTerms.apply(sims.s12, sims.s11, sims.s22, chunk_masks(listed, 33, True, torch.float64))
    for a, b in zip(block, column):
        assert torch.allclose(a, b, rtol=1e-12)


def test_the_dense_path_keeps_no_tensor_that_grows_with_fewer_negatives():
    """What the dense path holds from forward to backward is the same at theta_max = 1 and
    below: the three blocks, and for a draw the samples and left-out columns, not a B x K
    index tensor or an exp of each block."""
    h1, h2 = views(b=64, d=4, seed=10)
    sims = similarities(h1, h2, TAU)
    active = uniform_draw(sims, 30, 16, "both", compact=True)
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        scheduled_info_nce(sims, active)
    big = [t for t in saved if t.numel() >= 64 * 30]
    assert all(t.shape == (64, 64) for t in big)
    assert len(big) == 3
