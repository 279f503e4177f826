"""Graph folders (edgegcl.data.folder): written by edgegcl convert or by numpy alone, read
memory-mapped, trained on as the same graph in memory is, and refused in one line when they
do not hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.sampler import NodeSamplerInput

from edgegcl.cli.main import main as edgegcl_main
from edgegcl.data import SyntheticSpec, load_graph, synthetic_graph
from edgegcl.data.folder import open_folder, write_folder
from edgegcl_embed import folder as folder_module
from edgegcl_embed.folder import INDEX_FILES, build_index
from edgegcl.data.identity import content_hash
from edgegcl.data.sampling import CSRNeighborSampler
from edgegcl.errors import UsageError
from edgegcl.nn.config import ModelConfig
from edgegcl.nn.adjacency import chunked_adjacency
from edgegcl.nn.model import AdNGCL
from edgegcl.training.placement import on_disk
from helpers import capture

_cli = partial(capture, edgegcl_main)


@pytest.fixture(scope="module")
def graph() -> Data:
    return synthetic_graph(SyntheticSpec(num_nodes=400, num_features=16, avg_degree=6))


def _numpy_folder(where: Path, data: Data, **extra: np.ndarray) -> Path:
    """A graph folder written as docs/graph-folder.md says, with numpy alone."""
    where.mkdir()
    np.save(where / "x.npy", data.x.numpy())
    np.save(where / "edge_index.npy", data.edge_index.numpy())
    np.save(where / "y.npy", data.y.numpy())
    for name, array in extra.items():
        np.save(where / f"{name}.npy", array)
    (where / "metadata.json").write_text(json.dumps({
        "format": "edgegcl graph folder", "version": 1,
        "num_nodes": int(data.num_nodes), "num_edges": int(data.edge_index.size(1))}))
    return where


def _mapped_from(tensor: torch.Tensor) -> Path | None:
    """The file whose mapping holds ``tensor``'s memory (/proc/self/maps), None for memory of
    the process's own."""
    address = tensor.data_ptr()
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        lo, hi = (int(v, 16) for v in fields[0].split("-"))
        if lo <= address < hi:
            return Path(fields[5]) if len(fields) == 6 and fields[5].startswith("/") else None
    return None


def _in_memory_index(edge_index: torch.Tensor, n: int) -> tuple[np.ndarray, ...]:
    """The index the folder must hold, computed whole: non-loop edges by target (stable) and
    by source."""
    src, dst = edge_index.numpy()
    eid = np.nonzero(src != dst)[0]
    by_dst = eid[np.argsort(dst[eid], kind="stable")]
    by_src = eid[np.argsort(src[eid], kind="stable")]
    in_ptr = np.concatenate([[0], np.cumsum(np.bincount(dst[eid], minlength=n))])
    out_ptr = np.concatenate([[0], np.cumsum(np.bincount(src[eid], minlength=n))])
    return in_ptr, src[by_dst], by_dst, out_ptr, dst[by_src]


def test_written_folder_reads_back_as_the_graph(tmp_path: Path, graph: Data) -> None:
    write_folder(graph, tmp_path / "g")
    data = load_graph(str(tmp_path / "g"), None)
    assert torch.equal(data.x, graph.x) and torch.equal(data.edge_index, graph.edge_index)
    assert torch.equal(data.y, graph.y)
    assert content_hash(data) == content_hash(graph)  # the same graph, the same record
    assert data.folder.path == tmp_path / "g"
    # x and the edges are the files' pages, not copies
    assert _mapped_from(data.x) == tmp_path / "g" / "x.npy"
    assert _mapped_from(data.edge_index) == tmp_path / "g" / "edge_index.npy"


def test_half_features_are_float16_on_disk_and_float32_in_steps(tmp_path: Path,
                                                                graph: Data) -> None:
    write_folder(graph, tmp_path / "g", half=True)
    data = open_folder(tmp_path / "g")
    assert data.x.dtype == torch.float16
    assert torch.equal(data.x.float(), graph.x.half().float())


@pytest.mark.parametrize("chunk_bytes", [64, 1 << 26])
def test_index_built_in_chunks_equals_the_whole_sort(tmp_path: Path, graph: Data,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     chunk_bytes: int) -> None:
    """The out-of-core counting sort: the same arrays as sorting every edge at once, self-loops
    left out, a node's edges in edge_index order, however the edges are cut into chunks."""
    edges = graph.edge_index.clone()
    edges[:, :5] = torch.tensor([[3, 3, 7, 7, 9]] * 2)  # self-loops among the edges
    monkeypatch.setattr(folder_module, "EDGE_CHUNK_BYTES", chunk_bytes)
    tmp_path.joinpath("i").mkdir()
    build_index(edges.numpy(), graph.num_nodes, tmp_path / "i")
    for name, expected in zip(INDEX_FILES, _in_memory_index(edges, graph.num_nodes)):
        assert np.array_equal(np.load(tmp_path / "i" / f"{name}.npy"), expected), name


def test_numpy_written_folder_trains_as_it_is(tmp_path: Path, graph: Data) -> None:
    """No edgegcl involved in writing it, no index: the index is built for the run, in a
    temporary that is gone once mapped, and the graph is the same."""
    where = _numpy_folder(tmp_path / "np", graph)
    before = sorted(os.listdir(where))
    code, out, err = _cli(["train", "--dataset", str(where), "--mode", "minibatch",
                           "--epochs", "2", "--eval-every", "1", "--encoder", "gcn",
                           "--batch-size", "128", "--out", str(tmp_path / "run")])
    assert code == 0, err
    assert "has no sampler index; building it" in err and "test micro-F1" in out + err
    assert sorted(os.listdir(where)) == before  # nothing written into the user's folder


def test_folder_and_memory_give_the_same_run(tmp_path: Path, graph: Data) -> None:
    """The same seed on the folder and on the same graph in an .npz: the same test figure
    (the sampler draws the same neighbours from the same index order, and the steps read the
    same rows)."""
    np.savez(tmp_path / "g.npz", x=graph.x.numpy(), edge_index=graph.edge_index.numpy(),
             y=graph.y.numpy())
    write_folder(graph, tmp_path / "g")
    figures = []
    for name in ("g.npz", "g"):
        code, _, err = _cli(["train", "--dataset", str(tmp_path / name), "--mode",
                             "minibatch", "--epochs", "3", "--eval-every", "1", "--encoder",
                             "gcn", "--batch-size", "128", "--out", str(tmp_path / f"r-{name}")])
        assert code == 0, err
        metrics = json.loads((tmp_path / f"r-{name}" / "metrics.json").read_text())
        figures.append(metrics["summary"]["test_micro_f1"]["mean"])
    # one test node is 1/320 of the figure: float summation order may move at most a node
    assert abs(figures[0] - figures[1]) <= 100 / 320 + 1e-9


def test_sampler_draws_the_same_from_the_folder(tmp_path: Path, graph: Data) -> None:
    write_folder(graph, tmp_path / "g")
    data = open_folder(tmp_path / "g")
    seeds = NodeSamplerInput(None, torch.arange(50))
    ours = CSRNeighborSampler(data, [5, 5], seed=3, index=data.folder.index)
    whole = CSRNeighborSampler(graph, [5, 5], seed=3)
    a, b = ours.sample_from_nodes(seeds), whole.sample_from_nodes(seeds)
    assert torch.equal(a.node, b.node) and torch.equal(a.edge, b.edge)
    assert torch.equal(a.row, b.row) and torch.equal(a.col, b.col)


@pytest.mark.parametrize("half", [False, True])
def test_all_node_embeddings_from_the_mapped_index(tmp_path: Path, graph: Data,
                                                   half: bool) -> None:
    """Embeddings read through the folder's mapped index (float16 rows widened as read) equal
    those of the graph in memory with the same features, up to float32 summation order."""
    write_folder(graph, tmp_path / "g", half=half)
    data = open_folder(tmp_path / "g")
    torch.manual_seed(0)
    model = AdNGCL(16, ModelConfig(32, 8, 8, "prelu"))
    x = graph.x.half().float() if half else graph.x
    expected = model.embed(x, graph.edge_index)
    on_disk(data)  # its edges carry the mapped index's adjacency: nothing edge-sized built
    assert chunked_adjacency(data.edge_index, data.num_nodes).in_src is data.folder.index.in_src
    found = model.embed(data.x, data.edge_index, chunk_rows=37)
    tolerance = 1e-5 * float(expected.abs().max())
    assert torch.allclose(found, expected, atol=tolerance, rtol=0)


def test_convert_refuses_an_existing_folder_before_reading(tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    code, _, err = _cli(["convert", "no-such-file.npz", "--out", str(out)])
    assert code == 2 and "already exists" in err and "Traceback" not in err
    assert (out / "mine.txt").read_text() == "keep" and len(os.listdir(out)) == 1


def test_convert_then_train(tmp_path: Path) -> None:
    code, out, err = _cli(["convert", "synthetic", "--out", str(tmp_path / "s"), "--half"])
    assert code == 0, err
    assert (tmp_path / "s" / "metadata.json").exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temporary left
    data = open_folder(tmp_path / "s")
    assert data.x.dtype == torch.float16 and data.num_nodes == 2000


# ------------------------------------------------------------------ folders that do not hold


def _damage(where: Path, how: str) -> None:
    meta = json.loads((where / "metadata.json").read_text())
    if how == "missing x":
        (where / "x.npy").unlink()
    elif how == "truncated x":
        with open(where / "x.npy", "r+b") as fh:
            fh.truncate(os.path.getsize(where / "x.npy") - 4)
    elif how == "x of float64":
        np.save(where / "x.npy", np.load(where / "x.npy").astype(np.float64))
    elif how == "x 1-D":
        np.save(where / "x.npy", np.load(where / "x.npy").reshape(-1))
    elif how == "x with NaN":
        x = np.load(where / "x.npy")
        x[7, 2] = np.nan
        np.save(where / "x.npy", x)
    elif how == "x pickled":
        np.save(where / "x.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    elif how == "edge out of range":
        edges = np.load(where / "edge_index.npy")
        edges[1, 3] = meta["num_nodes"]
        np.save(where / "edge_index.npy", edges)
    elif how == "edges of int32":
        np.save(where / "edge_index.npy", np.load(where / "edge_index.npy").astype(np.int32))
    elif how == "metadata lies about N":
        meta["num_nodes"] += 1
        (where / "metadata.json").write_text(json.dumps(meta))
    elif how == "metadata lies about E":
        meta["num_edges"] -= 1
        (where / "metadata.json").write_text(json.dumps(meta))
    elif how == "metadata not JSON":
        (where / "metadata.json").write_text("num_nodes: 3")
    elif how == "metadata of another version":
        meta["version"] = 2
        (where / "metadata.json").write_text(json.dumps(meta))
    elif how == "x a symlink":
        (where / "x.npy").rename(where.parent / "elsewhere.npy")
        (where / "x.npy").symlink_to(where.parent / "elsewhere.npy")
    elif how == "x a FIFO":
        (where / "x.npy").unlink()
        os.mkfifo(where / "x.npy")
    elif how == "index disagrees":
        src = np.load(where / "in_src.npy")
        src[0] = (src[0] + 1) % meta["num_nodes"]
        np.save(where / "in_src.npy", src)
    elif how == "index partly there":
        (where / "out_dst.npy").unlink()
    elif how == "labels of another length":
        np.save(where / "y.npy", np.load(where / "y.npy")[:-1])
    elif how == "labels too many":
        y = np.load(where / "y.npy")
        y[0] = 10 ** 12
        np.save(where / "y.npy", y)
    else:
        raise AssertionError(how)


DAMAGES = ["missing x", "truncated x", "x of float64", "x 1-D", "x with NaN", "x pickled",
           "edge out of range", "edges of int32", "metadata lies about N",
           "metadata lies about E", "metadata not JSON", "metadata of another version",
           "x a symlink", "x a FIFO", "index disagrees", "index partly there",
           "labels too many", "labels of another length"]


@pytest.mark.parametrize("how", DAMAGES)
def test_a_folder_that_does_not_hold_is_one_line(tmp_path: Path, graph: Data,
                                                 how: str) -> None:
    where = write_folder(graph, tmp_path / "g")
    _damage(where, how)
    with pytest.raises(UsageError) as info:
        open_folder(where)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"graph folder {where}")
    code, _, err = _cli(["train", "--dataset", str(where), "--epochs", "1",
                         "--out", str(tmp_path / "run")])
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("edgegcl: error: graph folder")
    assert "Traceback" not in err and not (tmp_path / "run").exists()


def test_docs_blocks(tmp_path: Path) -> None:
    """docs/graph-folder.md's blocks as a user pastes them: the folder written by numpy alone,
    then converted (through an .npz of it) and trained on."""
    from docblocks import Shell, block, replaced

    proc = subprocess.run([sys.executable, "-c", block("folder-numpy").text], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = open_folder(tmp_path / "my_graph")
    np.savez(tmp_path / "my_graph.npz", x=data.x.numpy(), edge_index=data.edge_index.numpy(),
             y=data.y.numpy())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    shell = Shell(tmp_path, env | {"OMP_NUM_THREADS": "1"})
    for command in replaced(block("folder-commands").text, {
            "--batch-size 256": "--batch-size 256 --epochs 2 --eval-every 1 --encoder gcn"
                                " --hidden-dim 16 --out-dim 8 --proj-dim 8"}).splitlines():
        if command.strip():
            shell.run(command)
    assert "test micro-F1" in "".join(r.out + r.err for r in shell.ran)


def test_labels_larger_than_memory_are_refused_before_they_are_read(
        tmp_path: Path, graph: Data, monkeypatch: pytest.MonkeyPatch) -> None:
    """A y whose size the header declares beyond what memory allows is one line, before a
    byte of it is copied."""
    where = write_folder(graph, tmp_path / "g")
    np.save(where / "y.npy", np.zeros((graph.num_nodes, 50), dtype=np.uint8))
    monkeypatch.setattr(folder_module, "memory_total", lambda: 2 * 8 * graph.num_nodes * 49)
    with pytest.raises(UsageError, match=r"y\.npy holds 20000 values .* more than half"):
        open_folder(where)


def test_features_larger_than_memory_are_read_ahead(tmp_path: Path, graph: Data,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Where x exceeds half the memory the process may use, each batch and each embedding
    chunk asks for its rows first (MADV_WILLNEED over their pages), and reads the same values."""
    from edgegcl.training.config import RunConfig
    from edgegcl.training.placement import structure_loader

    write_folder(graph, tmp_path / "g")
    # x (400 x 16 float32: 25 600 bytes) beyond half of it, the labels (3 200 bytes) within
    monkeypatch.setattr(folder_module, "memory_total", lambda: 8192)
    data = open_folder(tmp_path / "g")
    assert data.folder.read_ahead and data.folder.prefetch is not None
    asked: list[torch.Tensor] = []
    real = data.folder.features.prefetch
    monkeypatch.setattr(folder_module.MappedRows, "prefetch",
                        lambda self, ids: (asked.append(ids.clone()), real(ids))[1])
    on_disk(data)
    batch = next(iter(structure_loader(data, RunConfig(batch_size=64), seed=0)))
    assert torch.equal(asked[0], batch.n_id)
    torch.manual_seed(0)
    model = AdNGCL(16, ModelConfig(32, 8, 8, "prelu"))
    found = model.embed(data.x, data.edge_index, chunk_rows=50)
    assert len(asked) > 1  # every chunk asked for the rows it pulls
    expected = model.embed(graph.x, graph.edge_index)
    assert torch.allclose(found, expected, atol=1e-5 * float(expected.abs().max()), rtol=0)


def test_edgegcl_embed_reads_a_folder_a_batch_at_a_time(tmp_path: Path, graph: Data) -> None:
    """The torch-free runtime embeds a graph folder from its mapped files (features widened
    from float16 as read) and gives what it gives for the same graph as an .npz; a folder that
    does not hold is its one line."""
    from edgegcl_embed.embed import main as embed_main

    write_folder(graph, tmp_path / "g", half=True)
    code, _, err = _cli(["train", "--dataset", str(tmp_path / "g"), "--mode", "minibatch",
                         "--epochs", "1", "--eval-every", "1", "--encoder", "gcn",
                         "--hidden-dim", "16", "--out-dim", "8", "--proj-dim", "8",
                         "--out", str(tmp_path / "run")])
    assert code == 0, err
    code, _, err = _cli(["export", str(tmp_path / "m.onnx"), "--run", str(tmp_path / "run"),
                         "--graph", str(tmp_path / "g"), "--graph-out",
                         str(tmp_path / "g.npz")])
    assert code == 0, err
    for graph_arg, out in ((tmp_path / "g", "folder.npy"), (tmp_path / "g.npz", "npz.npy")):
        code, _, err = capture(embed_main, [str(tmp_path / "m.onnx"), "--graph", str(graph_arg),
                                            "--out", str(tmp_path / out), "--batch-size", "64"])
        assert code == 0, err
    a, b = np.load(tmp_path / "folder.npy"), np.load(tmp_path / "npz.npy")
    assert a.shape == (400, 8) and np.allclose(a, b, atol=1e-5 * np.abs(b).max(), rtol=0)
    _damage(tmp_path / "g", "truncated x")
    code, _, err = capture(embed_main, [str(tmp_path / "m.onnx"), "--graph",
                                        str(tmp_path / "g"), "--out", str(tmp_path / "x.npy")])
    assert code == 2 and err.strip().startswith("edgegcl-embed: error: graph folder")
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "x.npy").exists()


def test_convert_reads_an_uncompressed_npz_mapped(tmp_path: Path, graph: Data) -> None:
    """np.savez's members are mapped from the file (convert then holds a chunk at a time);
    np.savez_compressed's are read whole; both convert to the same folder; a member whose
    values do not hold is one line."""
    from edgegcl.data.files import mapped_npz
    from edgegcl.jobs.convert import convert

    arrays = {"x": graph.x.numpy(), "edge_index": graph.edge_index.numpy().astype(np.int32),
              "y": graph.y.numpy()}
    np.savez(tmp_path / "plain.npz", **arrays)
    np.savez_compressed(tmp_path / "small.npz", **arrays)
    data = mapped_npz(tmp_path / "plain.npz")
    assert data is not None and _mapped_from(data.x) == tmp_path / "plain.npz"
    assert torch.equal(data.x, graph.x) and torch.equal(data.y, graph.y)
    assert mapped_npz(tmp_path / "small.npz") is None
    for name in ("plain", "small"):
        convert(tmp_path / f"{name}.npz", tmp_path / f"{name}-folder")
    a, b = (open_folder(tmp_path / f"{n}-folder") for n in ("plain", "small"))
    assert content_hash(a) == content_hash(b) == content_hash(graph)
    bad = dict(arrays, edge_index=arrays["edge_index"].copy())
    bad["edge_index"][0, 5] = 10_000
    np.savez(tmp_path / "bad.npz", **bad)
    with pytest.raises(UsageError) as info:
        convert(tmp_path / "bad.npz", tmp_path / "bad-folder")
    assert str(info.value).startswith(f"graph file {tmp_path / 'bad.npz'}: edge_index holds "
                                      "node 10000") and not (tmp_path / "bad-folder").exists()


def test_torchrun_ranks_map_the_folder(tmp_path: Path, graph: Data) -> None:
    """Under torchrun every rank maps the folder itself (each says it builds the index of a
    folder without one; local rank 0 alone would load and share a graph in memory), and the
    run trains."""
    _numpy_folder(tmp_path / "g", graph)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", "-m", "edgegcl", "train", "--dataset",
                           str(tmp_path / "g"), "--mode", "minibatch", "--epochs", "1",
                           "--eval-every", "1", "--encoder", "gcn", "--batch-size", "64",
                           "--hidden-dim", "16", "--out-dim", "8", "--proj-dim", "8",
                           "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "run" / "metrics.json").is_file()
    assert proc.stderr.count("has no sampler index; building it") == 2, proc.stderr[-3000:]
