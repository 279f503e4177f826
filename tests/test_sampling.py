"""Neighbour sampling: the built-in CSR sampler, the loader factory, and parity with PyG."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import NodeSamplerInput, SamplerOutput
from torch_geometric.utils import coalesce

from edgegcl.data import sampling
from edgegcl.errors import UsageError
from edgegcl.data.sampling import SAMPLERS, CSRNeighborSampler, make_loader, pyg_sampler_available

BATCH_FIELDS = (
    "x",
    "y",
    "edge_index",
    "n_id",
    "e_id",
    "batch_size",
    "input_id",
    "num_sampled_nodes",
    "num_sampled_edges",
)


def random_graph(num_nodes: int = 300, num_edges: int = 2400, seed: int = 0) -> Data:
    """Directed random graph without self-loops or parallel edges, plus a few isolated nodes."""
    g = torch.Generator().manual_seed(seed)
    # Only the first num_nodes - 5 nodes get edges, so the last five are isolated.
    ei = torch.randint(0, num_nodes - 5, (2, num_edges), generator=g)
    ei = ei[:, ei[0] != ei[1]]
    ei = coalesce(ei, num_nodes=num_nodes)
    ei = ei[:, torch.randperm(ei.size(1), generator=g)]  # unsorted, like real inputs
    return Data(
        x=torch.randn(num_nodes, 4, generator=g),
        y=torch.randint(0, 3, (num_nodes,), generator=g),
        edge_index=ei,
        edge_attr=torch.arange(ei.size(1), dtype=torch.float).view(-1, 1),
        num_nodes=num_nodes,
    )


def star_graph(centres: int, leaves: int) -> Data:
    """``centres`` stars, centre k (node k) with ``leaves`` private in-neighbours: leaf j of
    centre k is node centres + k * leaves + j, and its edge is edge k * leaves + j."""
    centre = torch.arange(centres).repeat_interleave(leaves)
    leaf = centres + torch.arange(centres * leaves)
    return Data(edge_index=torch.stack([leaf, centre]), num_nodes=centres * (leaves + 1))


def sample(sampler: CSRNeighborSampler, seeds: list[int] | torch.Tensor) -> SamplerOutput:
    return sampler.sample_from_nodes(NodeSamplerInput(None, torch.as_tensor(seeds, dtype=torch.long)))


def in_neighbours(data: Data, v: int) -> set[int]:
    src, dst = data.edge_index
    return set(src[dst == v].tolist())


def edge_set(edge_index: torch.Tensor) -> set[tuple[int, int]]:
    return set(map(tuple, edge_index.t().tolist()))


def hop_slices(out: SamplerOutput) -> list[tuple[range, slice]]:
    """For hop k: (local ids of the frontier that sampled at hop k, slice of its edges)."""
    node_ends = torch.tensor(out.num_sampled_nodes).cumsum(0).tolist()
    edge_ends = [0] + torch.tensor(out.num_sampled_edges).cumsum(0).tolist()
    node_starts = [0] + node_ends[:-1]
    return [
        (range(node_starts[k], node_ends[k]), slice(edge_ends[k], edge_ends[k + 1]))
        for k in range(len(out.num_sampled_edges))
    ]


# -- the sampler ----------------------------------------------------------------------------


def test_every_sampled_edge_exists_with_its_edge_id_and_direction():
    data = random_graph()
    sampler = CSRNeighborSampler(data, [4, 3], seed=1)
    original = edge_set(data.edge_index)
    for seeds in (list(range(0, 40)), list(range(250, 300)), [7, 3, 299, 100]):
        out = sample(sampler, seeds)
        glob = torch.stack([out.node[out.row], out.node[out.col]])
        assert out.row.numel() > 0
        assert edge_set(glob) <= original
        # e_id points at exactly that edge of data.edge_index (source, target)
        assert torch.equal(data.edge_index[:, out.edge], glob)


def test_per_hop_fanout_and_low_degree_nodes_take_all():
    data = random_graph()
    fanouts = [5, 3]
    out = sample(CSRNeighborSampler(data, fanouts, seed=2), list(range(0, 64)))
    assert len(out.num_sampled_nodes) == len(fanouts) + 1
    assert len(out.num_sampled_edges) == len(fanouts)
    assert sum(out.num_sampled_nodes) == out.node.numel()
    assert sum(out.num_sampled_edges) == out.row.numel()
    in_deg = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    saw_capped = saw_full = False
    for (frontier, edges), fanout in zip(hop_slices(out), fanouts):
        col = out.col[edges]
        assert col.numel() == 0 or (col.min() >= frontier.start and col.max() < frontier.stop)
        counts = torch.bincount(col - frontier.start, minlength=len(frontier))
        deg = in_deg[out.node[frontier.start : frontier.stop]]
        assert torch.all(counts <= fanout)
        assert torch.equal(counts, deg.clamp(max=fanout))  # fewer than fanout: all of them
        saw_capped |= bool((deg > fanout).any())
        saw_full |= bool(((deg > 0) & (deg <= fanout)).any())
    assert saw_capped and saw_full  # the graph exercises both branches


def test_low_degree_node_gets_exactly_its_in_neighbours():
    data = random_graph()
    in_deg = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    v = int(torch.nonzero((in_deg > 0) & (in_deg <= 6))[0])
    out = sample(CSRNeighborSampler(data, [6], seed=0), [v])
    assert set(out.node[out.row].tolist()) == in_neighbours(data, v)
    assert set(out.node[out.col].tolist()) == {v}


def test_fanout_minus_one_takes_all_and_zero_takes_none():
    data = random_graph()
    seeds = list(range(10))
    out = sample(CSRNeighborSampler(data, [-1], seed=0), seeds)
    expected = {(u, v) for v in seeds for u in in_neighbours(data, v)}
    assert edge_set(torch.stack([out.node[out.row], out.node[out.col]])) == expected
    out = sample(CSRNeighborSampler(data, [0, 3], seed=0), seeds)
    assert out.row.numel() == 0 and out.num_sampled_edges == [0, 0]
    assert out.node.tolist() == seeds


def test_seeds_first_in_input_order_and_no_duplicates():
    data = random_graph()
    seeds = [299, 5, 120, 0, 77, 296, 31]
    out = sample(CSRNeighborSampler(data, [6, 6], seed=3), seeds)
    assert out.node[: len(seeds)].tolist() == seeds
    assert out.num_sampled_nodes[0] == len(seeds)
    assert out.metadata[0].tolist() == list(range(len(seeds)))  # input_id
    assert out.node.unique().numel() == out.node.numel()
    assert out.edge.unique().numel() == out.edge.numel()
    pairs = torch.stack([out.row, out.col])
    assert pairs.unique(dim=1).size(1) == pairs.size(1)


def test_duplicate_seed_keeps_its_slots_but_expands_once():
    data = random_graph()
    out = sample(CSRNeighborSampler(data, [-1], seed=0), [4, 4, 9])
    assert out.node[:3].tolist() == [4, 4, 9]
    assert out.node[3:].unique().numel() == out.node[3:].numel()
    assert out.edge.unique().numel() == out.edge.numel()
    assert out.row.numel() == len(in_neighbours(data, 4)) + len(in_neighbours(data, 9))


def test_reproducible_under_seed_and_different_under_another():
    data = random_graph()
    seeds = list(range(50))

    def draw(seed: int) -> list[torch.Tensor]:
        s = CSRNeighborSampler(data, [3, 2], seed=seed)
        outs = [sample(s, seeds), sample(s, seeds)]
        return [t for o in outs for t in (o.node, o.row, o.col, o.edge)]

    a, b, c = draw(7), draw(7), draw(8)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))
    # the stream advances between calls (fresh neighbourhoods each epoch) ...
    assert not torch.equal(a[3], a[7])
    # ... and manual_seed restarts it
    s = CSRNeighborSampler(data, [3, 2], seed=123)
    sample(s, seeds)
    s.manual_seed(7)
    assert torch.equal(sample(s, seeds).edge, a[3])


def test_isolated_nodes_and_directed_edges():
    # 0 -> 1 -> 2, 4 -> 1, node 3 isolated; in-neighbours: 1: {0, 4}, 2: {1}, 0/3/4: none
    data = Data(x=torch.zeros(5, 1), edge_index=torch.tensor([[0, 1, 4], [1, 2, 1]]), num_nodes=5)
    sampler = CSRNeighborSampler(data, [-1, -1], seed=0)
    out = sample(sampler, [3])
    assert out.node.tolist() == [3] and out.row.numel() == 0
    assert out.num_sampled_nodes == [1, 0, 0] and out.num_sampled_edges == [0, 0]
    out = sample(sampler, [2, 3])
    assert out.node[:2].tolist() == [2, 3]
    assert set(out.node.tolist()) == {0, 1, 2, 3, 4}
    glob = edge_set(torch.stack([out.node[out.row], out.node[out.col]]))
    assert glob == {(1, 2), (0, 1), (4, 1)}  # in-edges only: 2 never pulls its out-neighbours
    out = sample(sampler, [0])  # 0 has only an out-edge: nothing to sample
    assert out.node.tolist() == [0] and out.row.numel() == 0


def test_sampling_is_uniform_over_neighbours():
    # 100 stars, each centre with 20 private in-neighbours; fanout 5 => each neighbour
    # should be drawn with probability 5/20 regardless of its position in the edge list.
    stars, leaves, fanout, rounds = 100, 20, 5, 200
    sampler = CSRNeighborSampler(star_graph(stars, leaves), [fanout], seed=0)
    hits = torch.zeros(stars * leaves)
    for _ in range(rounds):
        out = sample(sampler, torch.arange(stars))
        assert torch.equal(torch.bincount(out.col, minlength=stars), torch.full((stars,), fanout))
        hits[out.node[out.row] - stars] += 1
    draws = stars * rounds
    freq_by_position = hits.view(stars, leaves).sum(0) / draws
    # binomial sd = sqrt(.25 * .75 / 20000) ~ 0.003, so 0.015 is 5 sd
    assert torch.allclose(freq_by_position, torch.full((leaves,), fanout / leaves), atol=0.015)
    # each single neighbour: 200 draws, sd ~ 0.031, so 0.2 is 6.5 sd over 2000 neighbours
    # (torch's generator seeded with 0 really does put one of them at 5.9 sd); a neighbour
    # that is never or always drawn (0 or 1) still fails.
    per_neighbour = hits / rounds
    assert (per_neighbour - fanout / leaves).abs().max() < 0.2


@pytest.mark.parametrize("draws", [sampling.HUB_DRAWS, 1])
def test_hubs_draw_uniformly_without_listing_their_edges(draws: int,
                                                         monkeypatch: pytest.MonkeyPatch):
    # 20 hubs with 500 private in-neighbours each (past HUB_DEGREE and HUB_FANOUTS fanouts),
    # fanout 10: each neighbour is drawn with probability 10/500 per round. With one draw
    # per fanout about 9 % of the hubs meet a repeat and are drawn again by listing: the same
    # law must hold through that path.
    monkeypatch.setattr(sampling, "HUB_DRAWS", draws)
    hubs, leaves, fanout, rounds = 20, 500, 10, 400
    assert leaves >= max(sampling.HUB_DEGREE, sampling.HUB_FANOUTS * fanout)
    sampler = CSRNeighborSampler(star_graph(hubs, leaves), [fanout], seed=0)
    hits = torch.zeros(hubs * leaves)
    for _ in range(rounds):
        out = sample(sampler, torch.arange(hubs))
        assert torch.equal(out.col, torch.arange(hubs).repeat_interleave(fanout))  # grouped
        drawn = out.node[out.row]
        assert torch.equal((drawn - hubs) // leaves, out.col)  # each hub's own in-neighbours
        assert drawn.unique().numel() == drawn.numel()  # without replacement
        assert torch.equal(out.edge, drawn - hubs)  # edge ids: leaf k's edge is edge k
        hits[drawn - hubs] += 1
    # per position over hubs: binomial sd = sqrt(.02 * .98 / 8000) ~ 0.0016; 0.008 is 5 sd
    freq_by_position = hits.view(hubs, leaves).sum(0) / (hubs * rounds)
    assert torch.allclose(freq_by_position, torch.full((leaves,), fanout / leaves), atol=0.008)
    # per hub: the draws spread over all of its neighbours (none always or never drawn by
    # a bias): 400 rounds, p = 0.02, so a neighbour drawn 30 times would be 5.7 sd out
    assert int(hits.max()) < 30 and (hits > 0).float().mean() > 0.95


def test_sampler_rejects_what_it_cannot_do():
    data = random_graph()
    sampler = CSRNeighborSampler(data, [2], seed=0)
    assert sampler.edge_permutation is None
    with pytest.raises(NotImplementedError):
        sampler.sample_from_edges(None)
    with pytest.raises(UsageError):
        sample(sampler, [data.num_nodes])
    with pytest.raises(UsageError):
        CSRNeighborSampler(data, [2, -3])
    with pytest.raises(UsageError):
        CSRNeighborSampler(Data(edge_index=torch.tensor([[0], [9]]), num_nodes=3), [2])
    # the failed call left the sampler usable and unpolluted
    out = sample(sampler, [0, 1])
    assert out.node.unique().numel() == out.node.numel()


def test_large_graph_shapes_vectorised():
    # Not a timing assertion: a per-node Python loop would take far longer than this test.
    g = torch.Generator().manual_seed(0)
    n = 100_000
    data = Data(edge_index=torch.randint(0, n, (2, 10 * n), generator=g), num_nodes=n)
    sampler = CSRNeighborSampler(data, [10, 10], seed=0)
    out = sample(sampler, torch.randperm(n, generator=g)[:1024])
    assert out.num_sampled_nodes[0] == 1024
    assert out.num_sampled_edges[0] <= 10 * 1024
    assert sum(out.num_sampled_edges) == out.row.numel() == out.col.numel() == out.edge.numel()
    assert sum(out.num_sampled_nodes) == out.node.numel() > 1024
    assert int(out.row.max()) < out.node.numel() and int(out.col.max()) < out.node.numel()


# -- the loader -----------------------------------------------------------------------------


def test_builtin_loader_covers_every_node_once_per_epoch_with_full_batches():
    data = random_graph(num_nodes=250)
    loader = make_loader(data, 64, [3, 2], sampler="builtin", shuffle=True, seed=0)
    assert isinstance(loader, NodeLoader)
    assert isinstance(loader.node_sampler, CSRNeighborSampler)
    for _epoch in range(2):
        seeds = []
        for batch in loader:
            assert isinstance(batch, Data)
            for field in BATCH_FIELDS:
                assert field in batch, field
            bs = batch.batch_size
            assert bs == batch.input_id.numel() <= 64
            assert torch.equal(batch.n_id[:bs], batch.input_id)  # all nodes: input_id = node id
            assert torch.equal(batch.x, data.x[batch.n_id])
            assert torch.equal(batch.y, data.y[batch.n_id])
            assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
            glob = torch.stack([batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]])
            assert torch.equal(glob, data.edge_index[:, batch.e_id])
            seeds.append(batch.n_id[:bs])
        seeds = torch.cat(seeds)
        assert torch.equal(seeds.sort().values, torch.arange(250))
        assert not torch.equal(seeds, torch.arange(250))  # shuffled


def test_loader_shuffle_reproducible_under_seed():
    data = random_graph()

    def seed_order(seed: int) -> torch.Tensor:
        loader = make_loader(data, 50, [2], sampler="builtin", seed=seed)
        return torch.cat([b.n_id[: b.batch_size] for b in loader])

    assert torch.equal(seed_order(3), seed_order(3))
    assert not torch.equal(seed_order(3), seed_order(4))
    unshuffled = make_loader(data, 50, [2], sampler="builtin", shuffle=False)
    assert torch.equal(torch.cat([b.n_id[: b.batch_size] for b in unshuffled]), torch.arange(300))


def test_loader_input_nodes_index_and_mask():
    data = random_graph()
    subset = torch.tensor([5, 17, 250, 3, 299])
    loader = make_loader(data, 2, [2], sampler="builtin", shuffle=False, input_nodes=subset)
    batches = list(loader)
    assert [b.batch_size for b in batches] == [2, 2, 1]
    assert torch.equal(torch.cat([b.n_id[: b.batch_size] for b in batches]), subset)
    mask = torch.zeros(data.num_nodes, dtype=torch.bool)
    mask[subset] = True
    loader = make_loader(data, 10, [2], sampler="builtin", input_nodes=mask)
    (batch,) = list(loader)
    assert set(batch.n_id[: batch.batch_size].tolist()) == set(subset.tolist())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sampler": "dgl"},
        {"batch_size": 0},
        {"num_neighbors": [2, -2]},
        {"num_neighbors": 10},
        {"input_nodes": torch.tensor([1, 1, 2])},
        {"input_nodes": torch.tensor([0, 300])},
        {"input_nodes": torch.tensor([0.0, 1.0])},
        {"input_nodes": torch.zeros(7, dtype=torch.bool)},
    ],
)
def test_make_loader_rejects_bad_input(kwargs):
    args = {"batch_size": 8, "num_neighbors": [2], "sampler": "builtin"} | kwargs
    with pytest.raises(UsageError):
        make_loader(random_graph(), **args)


def test_samplers_constant():
    assert SAMPLERS == ("auto", "builtin", "pyg")


@pytest.mark.skipif(pyg_sampler_available(), reason="pyg-lib or torch-sparse is installed")
def test_pyg_sampler_without_backend_is_a_usage_error():
    with pytest.raises(UsageError, match="torch-sparse"):
        make_loader(random_graph(), 8, [2], sampler="pyg")


def test_auto_falls_back_to_builtin_without_backend(monkeypatch):
    monkeypatch.setattr(sampling, "pyg_sampler_available", lambda: False)
    loader = make_loader(random_graph(), 8, [2], sampler="auto")
    assert isinstance(loader.node_sampler, CSRNeighborSampler)
    with pytest.raises(UsageError, match="--sampler builtin"):
        make_loader(random_graph(), 8, [2], sampler="pyg")


@pytest.mark.skipif(not pyg_sampler_available(), reason="needs pyg-lib or torch-sparse")
def test_builtin_matches_pyg_neighbor_loader():
    data = random_graph()
    in_deg = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    seeds = torch.arange(0, 300, 7)

    def first_batch(sampler: str, fanouts: list[int]) -> Data:
        loader = make_loader(data, seeds.numel(), fanouts, sampler=sampler, shuffle=False, input_nodes=seeds)
        return next(iter(loader))

    ours, theirs = first_batch("builtin", [3, 2]), first_batch("pyg", [3, 2])
    for field in BATCH_FIELDS:
        assert (field in ours) == (field in theirs), field
    for batch in (ours, theirs):
        assert torch.equal(batch.n_id[: batch.batch_size], seeds)
        hop1 = batch.edge_index[:, : batch.num_sampled_edges[0]]
        per_seed = torch.bincount(hop1[1], minlength=batch.batch_size)[: batch.batch_size]
        assert torch.equal(per_seed, in_deg[seeds].clamp(max=3))
        glob = torch.stack([batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]])
        assert torch.equal(glob, data.edge_index[:, batch.e_id])
    assert list(ours.num_sampled_nodes)[0] == list(theirs.num_sampled_nodes)[0]
    assert list(ours.num_sampled_edges)[0] == list(theirs.num_sampled_edges)[0]

    ours, theirs = first_batch("builtin", [-1, -1]), first_batch("pyg", [-1, -1])
    assert set(ours.n_id.tolist()) == set(theirs.n_id.tolist())
    assert set(ours.e_id.tolist()) == set(theirs.e_id.tolist())
    assert list(ours.num_sampled_nodes) == list(theirs.num_sampled_nodes)
    assert list(ours.num_sampled_edges) == list(theirs.num_sampled_edges)


@pytest.mark.parametrize("fanouts", [[3, 2], [2, 2, 2], [-1]])
def test_hop_counts_recovers_the_builtin_samplers_counts(fanouts):
    from edgegcl.data.sampling import hop_counts, with_hop_counts

    data = random_graph()
    batch = next(iter(make_loader(data, 20, fanouts, sampler="builtin", seed=3)))
    got = hop_counts(batch.edge_index, batch.num_nodes, batch.batch_size, len(fanouts))
    assert got == (list(batch.num_sampled_nodes), list(batch.num_sampled_edges))
    # The same batch without its counts (as torch-sparse's sampler leaves it) gets them back;
    # with its edges out of hop order it gets the exact "seeds, then the rest" fallback.
    del batch.num_sampled_nodes, batch.num_sampled_edges
    assert list(with_hop_counts(batch.clone(), len(fanouts)).num_sampled_nodes) == got[0]
    shuffled = batch.clone()
    shuffled.edge_index = batch.edge_index.flip(1)  # hop-2 edges first: not a BFS layout
    counts = list(with_hop_counts(shuffled, len(fanouts)).num_sampled_nodes)
    if len(fanouts) > 1:
        assert hop_counts(shuffled.edge_index, batch.num_nodes, 20, len(fanouts)) is None
        assert counts == [20, batch.num_nodes - 20]
    else:  # one hop: every edge goes into a seed, so edge order cannot matter
        assert counts == got[0]


def test_shuffled_indices_are_a_new_permutation_each_epoch_and_reproducible():
    from edgegcl.data.sampling import ShuffledIndices

    n = 3 * ShuffledIndices.BLOCK + 5  # several blocks and a partial one
    order = ShuffledIndices(n, torch.Generator().manual_seed(0))
    first, second = list(order), list(order)
    assert len(order) == n and sorted(first) == list(range(n)) and sorted(second) == sorted(first)
    assert first != second and first != list(range(n))
    assert list(ShuffledIndices(n, torch.Generator().manual_seed(0))) == first
