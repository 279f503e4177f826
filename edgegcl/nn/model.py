"""Encoder and projection head ("Learning" in the paper, Eqs. 4-5).

f: a 2-layer GCN, Z^(l+1) = sigma(D^-1/2 (A + I) D^-1/2 Z^(l) W^(l)) (Eq. 4).
g: the projection head H = g(Z) (Eq. 5), Linear -> ELU -> Linear as in GRACE.
Only the encoder is kept for embeddings and export; the head exists for the loss.
Embeddings of every node (probes, evaluation) are computed a chunk of nodes at a time
(``GCNEncoder.embed_nodes``), so their memory is the output's plus the graph's indices.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn
from torch_geometric.nn.inits import glorot

from edgegcl.nn.config import ACTIVATIONS, ModelConfig
from edgegcl.nn.adjacency import (ChunkedAdjacency, LayerAdjacency, chunked_adjacency,
                                   gcn_adjacency)
from edgegcl.nn.prelu import PReLU
from edgegcl.scratch import Scratch, in_memory
from edgegcl.nn.sparse import TransposeCache, row_sums

EMBED_CHUNK_FLOATS = 1 << 23
"""Floats a chunk of ``GCNEncoder.embed_nodes`` may hold (32 MiB): its rows are this over the
widths a row passes through (input, hidden twice, output)."""

EMBED_EDGE_BLOCK = 1 << 15
"""Edges per block when ``GCNEncoder.embed_nodes`` pushes layer 2's messages (one out_dim-wide
row each: 32 MiB at out_dim 256)."""


def make_activation(name: str, channels: int) -> nn.Module:
    """The encoder's sigma by name; PReLU gets one slope per channel."""
    if name == "relu":
        return nn.ReLU()
    if name == "prelu":
        return PReLU(channels)
    if name == "elu":
        return nn.ELU()
    if name == "rrelu":
        return nn.RReLU()
    raise ValueError(f"unknown activation {name!r}; choose one of {', '.join(ACTIVATIONS)}")


class GCNLayer(nn.Module):
    """One GCN layer of Eq. 4 before its activation: A_hat H W + b.

    The product is taken in the order with fewer multiply-adds (``aggregate_first``): with T
    output rows, S input rows and nnz edges, (A_hat H) W costs nnz d_in + T d_in d_out and
    A_hat (H W) costs S d_in d_out + nnz d_out. Full graph (T = S): aggregate first exactly
    when the input is the narrower side (128 synthetic features into 512 hidden units). A
    layer-trimmed mini-batch layer (T much smaller than S) aggregates first whatever the
    widths, which also keeps autograd from saving the S-row input for the weight gradient
    (it saves the T-row aggregate). Sparse CSR input (bag-of-words features) is always
    transformed first. Parameter names match PyG's ``GCNConv`` (``lin.weight``, ``bias``),
    with its glorot / zero initialisation. ``columns_first`` stores W column by column (W^T
    contiguous; same shape and values), so the first layer's sparse row sums read W^T without
    a transposed copy of it, and of its gradient, at every step.
    """

    def __init__(self, in_dim: int, out_dim: int, columns_first: bool = False) -> None:
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))
        glorot(self.lin.weight)
        if columns_first:  # drawn as before, then laid out by column
            self.lin.weight = nn.Parameter(self.lin.weight.detach().t().contiguous().t())
        self._sparse_input = TransposeCache()  # sparse features: the backward's X^T pattern

    def forward(self, adj: LayerAdjacency, h: Tensor, in_keep: Tensor | None = None) -> Tensor:
        """A_hat (H o in_keep) W + b; ``in_keep`` (one 0/1 per input column, Eq. 2's nu_1)
        masks the columns of W instead of H: (H o nu) W^T = H (W o nu)^T, gradients included."""
        weight = self.lin.weight if in_keep is None else self.lin.weight * in_keep
        if h.layout == torch.sparse_csr:  # X W^T as row sums of W^T (edgegcl.nn.sparse)
            t = self._sparse_input.get(h) if weight.requires_grad else None
            return adj.propagate(row_sums(h, weight.t(), t)).add_(self.bias)
        if h.layout == torch.strided and aggregate_first(adj, h.size(0), *weight.shape[::-1]):
            return nn.functional.linear(adj.propagate(h), weight, self.bias)
        return adj.propagate(nn.functional.linear(h, weight)).add_(self.bias)


def aggregate_first(adj: LayerAdjacency, num_inputs: int, d_in: int, d_out: int) -> bool:
    """Whether (A_hat H) W takes fewer multiply-adds than A_hat (H W) (see ``GCNLayer``)."""
    nnz, t = adj.matrix.values().numel(), adj.num_targets
    return nnz * d_in + t * d_in * d_out < num_inputs * d_in * d_out + nnz * d_out


def layer_widths(in_dim: int, cfg: ModelConfig) -> list[int]:
    """The widths a stack of ``cfg.num_layers`` layers maps through: in_dim -> hidden_dim ->
    ... -> out_dim."""
    return [in_dim] + [cfg.hidden_dim] * (cfg.num_layers - 1) + [cfg.out_dim]


def hop_targets(num_nodes: int, hops: int,
                num_sampled_nodes: Sequence[int] | None = None) -> list[int]:
    """The rows each of ``hops`` aggregations computes: every node of a whole graph; on a
    sampled subgraph (a sampler's per-hop node counts, seeds first) hop l the nodes within
    ``hops - l`` hops of the seeds, which is what hop l + 1 reads (edgegcl.nn.adjacency)."""
    if num_sampled_nodes is None:
        return [num_nodes] * hops
    counts = list(num_sampled_nodes)
    return [sum(counts[: hops - layer]) for layer in range(hops)]


class GCNEncoder(nn.Module):
    """f in the paper: GCN layers (Eq. 4; two by default, ``cfg.num_layers``), each followed by
    the activation sigma. Layer i is ``conv{i}`` with ``act{i}``: in_dim -> hidden_dim -> ...
    -> out_dim.

    Args:
        in_dim: feature dimension of the graph.
        cfg: layer sizes, count and activation (its head sizes are not used here).

    Example:
        >>> import torch
        >>> enc = GCNEncoder(8, ModelConfig(16, 4, 4, "prelu"))
        >>> enc(torch.randn(5, 8), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
        torch.Size([5, 4])
    """

    def __init__(self, in_dim: int, cfg: ModelConfig) -> None:
        super().__init__()
        self.num_layers = cfg.num_layers
        widths = layer_widths(in_dim, cfg)
        self.normalised = cfg.norm == "batch"
        for i in range(1, cfg.num_layers + 1):
            setattr(self, f"conv{i}", GCNLayer(widths[i - 1], widths[i], columns_first=i == 1))
            if self.normalised:
                setattr(self, f"norm{i}", nn.BatchNorm1d(widths[i]))
            setattr(self, f"act{i}", make_activation(cfg.activation, widths[i]))

    def layer(self, i: int) -> tuple[GCNLayer, nn.Module]:
        """Layer i's (1-based) convolution and activation."""
        return getattr(self, f"conv{i}"), getattr(self, f"act{i}")

    def affine(self, i: int) -> tuple[Tensor, Tensor]:
        """Layer i's weight and bias with its batch normalisation at inference folded in:
        BN(A_hat H W^T + b) = A_hat H (W^T s) + (b - mu) s + beta, s = gamma / sqrt(var +
        eps) per channel (the running statistics; the layer's own weights without ``norm``)."""
        conv = getattr(self, f"conv{i}")
        if not self.normalised:
            return conv.lin.weight, conv.bias
        bn = getattr(self, f"norm{i}")
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        return (conv.lin.weight * scale.unsqueeze(1),
                (conv.bias - bn.running_mean) * scale + bn.bias)

    def folded_state_dict(self) -> dict[str, Tensor]:
        """The state dict with each batch normalisation folded into its layer (``affine``):
        the plain GCN's keys, what the export's stages read (edgegcl.onnx.module)."""
        state = {k: v for k, v in self.state_dict().items() if not k.startswith("norm")}
        for i in range(1, self.num_layers + 1):
            weight, bias = self.affine(i)
            state[f"conv{i}.lin.weight"], state[f"conv{i}.bias"] = weight.detach(), bias.detach()
        return state

    def forward(self, x: Tensor, edge_index: Tensor,
                num_sampled_nodes: Sequence[int] | None = None,
                feature_keep: Tensor | None = None) -> Tensor:
        """Embeddings Z (self-loops added as in Eq. 4) of the features x o ``feature_keep``.

        Without ``num_sampled_nodes``: of every node of the graph (x, edge_index). With a
        sampler's per-hop node counts (seeds first; one hop per layer for the seeds' exact
        embeddings on the subgraph, fewer truncates the outer neighbourhoods): of the seed
        nodes only, each layer computed just for the nodes the next one reads
        (edgegcl.nn.adjacency). ``feature_keep`` (view 1's column mask, edgegcl.nn.augment) is
        applied to the first layer's weights.
        """
        n = x.size(0)
        targets = hop_targets(n, self.num_layers, num_sampled_nodes)
        z = x
        for i, adj in enumerate(gcn_adjacency(edge_index, n, targets), start=1):
            conv, act = self.layer(i)
            z = conv(adj, z, feature_keep if i == 1 else None)
            z = act(getattr(self, f"norm{i}")(z) if self.normalised else z)
        return z

    @torch.no_grad()
    def embed_nodes(self, x: Tensor, edge_index: Tensor, out: Tensor | None = None,
                    chunk_rows: int | None = None, edge_block: int = EMBED_EDGE_BLOCK,
                    scratch: Scratch | None = None) -> Tensor:
        """``forward(x, edge_index)`` (every node), without autograd, a chunk of rows at a time.

        The last two layers: the first of them is pulled per chunk c of target rows and taken
        straight through the last one's weights, P_c = sigma(A_hat[c] Z W + b) W' (out_dim
        wide); the last layer is pushed: P_c is added along the edges out of c into ``out``,
        and when every chunk is in, out = sigma(out + b') chunk by chunk. With the default two
        layers Z is X, and no N x hidden tensor and no whole P exist: besides ``out`` the
        graph-sized memory is ``ChunkedAdjacency``'s index arrays; layers before the last two
        are pulled whole, N x hidden each. ``x`` dense or sparse CSR. ``out``: a preallocated
        [N, out_dim] tensor to fill (e.g. ``npy_embeddings``), else one is allocated.
        ``chunk_rows``: rows per chunk (default from EMBED_CHUNK_FLOATS). ``scratch``: where
        whole layers go instead (``edgegcl.scratch.mapped_scratch``: files, for a graph on
        disk), P too: it is written front to back, then the last layer is pulled from it,
        out_c = sigma(A_hat[c] P + b'), so neither the buffers nor ``out`` are ever written
        at random, and what is read at random is out_dim wide. Equal to ``forward`` up to
        float summation order.
        """
        n, k = x.size(0), self.num_layers
        out_dim = self.layer(k)[0].lin.out_features
        out = embed_output(n, out_dim, x, out)
        widest = max(self.layer(i)[0].lin.out_features for i in range(1, k + 1))
        chunks = row_chunks(n, chunk_rows, x.size(1) + 2 * widest + out_dim, edge_block)
        adj = chunked_adjacency(edge_index, n)

        def pulled(i: int, z: Tensor, lo: int, hi: int) -> Tensor:  # layer i's rows lo..hi-1
            weight, bias = self.affine(i)
            return self.layer(i)[1](nn.functional.linear(adj.pull(lo, hi, z), weight, bias))

        def width(i: int) -> int:
            return self.layer(i)[0].lin.out_features

        z = pulled_layers(pulled, x, k - 2, chunks, width, scratch or in_memory(x.device))
        if k == 1:
            for lo, hi in chunks:
                out[lo:hi] = pulled(1, z, lo, hi)
            return out
        act = self.layer(k)[1]
        last_weight, last_bias = self.affine(k)
        p = None if scratch is None else scratch(n, out_dim)
        for lo, hi in chunks:
            p_c = nn.functional.linear(pulled(k - 1, z, lo, hi), last_weight).to(out.dtype)
            if p is None:
                push_rows(adj, p_c, out, lo, hi, edge_block)
            else:
                p[lo:hi] = p_c
        bias = last_bias.to(out.dtype)
        for lo, hi in chunks:
            rows = out[lo:hi]
            if p is not None:
                rows.copy_(adj.pull(lo, hi, p))
            rows.copy_(act(rows.add_(bias)))
        return out


def pulled_layers(pulled: Callable[[int, Tensor, int, int], Tensor], x: Tensor, layers: int,
                  chunks: Sequence[tuple[int, int]], width: Callable[[int], int],
                  scratch: Scratch) -> Tensor:
    """Layers 1..``layers`` of every node, each pulled a chunk of rows at a time
    (``pulled(i, z, lo, hi)``: layer i's rows lo..hi-1 from the whole layer before, z) into a
    ``scratch`` buffer ``width(i)`` wide; the last one's buffer (x itself for none)."""
    z = x
    for i in range(1, layers + 1):
        z_next = scratch(x.size(0), width(i))
        for lo, hi in chunks:
            z_next[lo:hi] = pulled(i, z, lo, hi)
        z = z_next
    return z


def push_rows(adj: ChunkedAdjacency, p: Tensor, out: Tensor, lo: int, hi: int,
              edge_block: int = EMBED_EDGE_BLOCK) -> None:
    """Add A_hat[:, lo:hi] p into ``out``: rows lo..hi-1 of a layer's transformed input pushed
    along the edges out of them (and their self-loops), ``edge_block`` edges at a time."""
    for src, dst, weight in adj.columns(lo, hi, edge_block):
        out.index_add_(0, dst, p.index_select(0, src).mul_(weight.unsqueeze(1)))
    out[lo:hi].addcmul_(adj.self_weight(lo, hi).unsqueeze(1), p)


def row_chunks(n: int, chunk_rows: int | None, floats_per_row: int,
               edge_block: int = EMBED_EDGE_BLOCK) -> list[tuple[int, int]]:
    """The (lo, hi) row ranges an ``embed_nodes`` walks: ``chunk_rows`` rows each, by default
    as many as EMBED_CHUNK_FLOATS floats of ``floats_per_row`` allow (at least one)."""
    if chunk_rows is None:
        chunk_rows = max(1, EMBED_CHUNK_FLOATS // floats_per_row)
    if chunk_rows < 1 or edge_block < 1:
        raise ValueError(f"need chunk_rows >= 1 and edge_block >= 1, got {chunk_rows}, "
                         f"{edge_block}")
    return [(lo, min(lo + chunk_rows, n)) for lo in range(0, n, chunk_rows)]


def embed_output(n: int, width: int, x: Tensor, out: Tensor | None) -> Tensor:
    """The [n, width] tensor an ``embed_nodes`` writes: ``out`` checked and zeroed, or a new
    one on x's device."""
    if out is None:
        return torch.zeros(n, width, device=x.device)
    if out.shape != (n, width) or out.device != x.device:
        raise ValueError(f"out must be [{n}, {width}] on {x.device}, "
                         f"got {tuple(out.shape)} on {out.device}")
    return out.zero_()


class ProjectionHead(nn.Module):
    """g in the paper (Eq. 5): Linear -> ELU -> Linear, used only by the contrastive loss."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.out_dim, cfg.proj_dim)
        self.fc2 = nn.Linear(cfg.proj_dim, cfg.out_dim)

    def forward(self, z: Tensor) -> Tensor:
        return self.fc2(nn.functional.elu(self.fc1(z)))


class AdNGCL(nn.Module):
    """Encoder f plus projection head g; ``forward`` gives embeddings, ``project`` the loss space.

    Args:
        in_dim: feature dimension of the graph.
        cfg: layer sizes and activation.
        encoder: a built-in encoder (edgegcl.nn.family) built for ``cfg``; default the GCN.

    Example:
        >>> import torch
        >>> model = AdNGCL(8, ModelConfig(16, 4, 4, "prelu"))
        >>> x, edges = torch.randn(5, 8), torch.tensor([[0, 1, 2], [1, 2, 3]])
        >>> model.project(model(x, edges)).shape, model.embed(x, edges).shape
        (torch.Size([5, 4]), torch.Size([5, 4]))
    """

    def __init__(self, in_dim: int, cfg: ModelConfig, encoder: nn.Module | None = None) -> None:
        super().__init__()
        self.encoder = GCNEncoder(in_dim, cfg) if encoder is None else encoder
        self.head = ProjectionHead(cfg)

    def forward(self, x: Tensor, edge_index: Tensor,
                num_sampled_nodes: Sequence[int] | None = None,
                feature_keep: Tensor | None = None) -> Tensor:
        return self.encoder(x, edge_index, num_sampled_nodes, feature_keep)

    def project(self, z: Tensor) -> Tensor:
        return self.head(z)

    def embed(self, x: Tensor, edge_index: Tensor, *, out: Tensor | None = None,
              chunk_rows: int | None = None, scratch: Scratch | None = None) -> Tensor:
        """Frozen embeddings H = f*(A, X) of every node of the original graph (the paper's
        output), in eval mode and without autograd, a chunk of nodes at a time
        (the encoder's ``embed_nodes``): memory a few N x out_dim plus O(E) indices, never
        N x hidden.
        ``out``: a preallocated [N, out_dim] tensor to write into (e.g. ``npy_embeddings``);
        ``scratch``: where whole layers go (``edgegcl.scratch.mapped_scratch``; the encoder's
        ``embed_nodes``)."""
        was_training = self.training
        self.eval()
        try:
            return self.encoder.embed_nodes(x, edge_index, out, chunk_rows, scratch=scratch)
        finally:
            self.train(was_training)


def npy_embeddings(path: str | Path, num_nodes: int, out_dim: int) -> Tensor:
    """A float32 [num_nodes, out_dim] tensor backed by a new memory-mapped ``.npy`` file, as
    ``out`` for ``AdNGCL.embed``: the embeddings go to the file (``np.load(path)`` reads them)
    through file-backed pages, which the kernel may write back and drop under memory pressure,
    instead of anonymous memory. The mapping is closed when the tensor is freed."""
    array = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32,
                                      shape=(num_nodes, out_dim))
    return torch.from_numpy(array)
