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
from edgegcl.data.identity import identity
from edgegcl.data.sampling import CSRNeighborSampler
from edgegcl.errors import UsageError
from edgegcl.nn.config import ModelConfig
from edgegcl.nn.adjacency import chunked_adjacency
from edgegcl.evaluation import probe as probe_module
from edgegcl.evaluation.probe import ProbeScores, linear_probe, random_split
from edgegcl.nn.family import build_encoder
from edgegcl.nn.model import AdNGCL
from edgegcl.scratch import mapped_scratch
from edgegcl.training.placement import on_disk
from edgegcl.training.prober import Prober
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
    assert identity(data, "g") == identity(graph, "g")  # the same graph, the same record
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


@pytest.mark.parametrize("name,hidden", [("gcn", 8), ("gcn", 32), ("ego", 32), ("poly", 32)])
def test_the_runtime_embeds_a_folder_layer_by_layer(tmp_path: Path, graph: Data, name: str,
                                                    hidden: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """edgegcl-embed's runtime embeds a folder one stage over every node at a time, for every
    encoder (gcn transforming first, 16 -> 8, or aggregating first, 16 -> 32; ego; poly), from
    float16 features, in blocks of 37 rows on 1 or 2 threads: the whole graph's numbers up to
    float32 summation order; its layers are unlinked files (the scratch folder stays empty),
    read ahead only where larger than half the memory allowed; progress ends at its total."""
    from edgegcl.onnx.export import export_encoder
    from edgegcl.training.checkpoint import Checkpoint
    from edgegcl.training.config import TrainConfig
    import edgegcl_embed.scratch as scratch_module
    from edgegcl_embed.folder import MappedRows, read_folder
    from edgegcl_embed.runtime import EncoderSession

    torch.manual_seed(0)
    encoder = build_encoder(name, 16, ModelConfig(hidden, 8, 8, "prelu", encoder=name)).eval()
    config = TrainConfig(encoder=name, hidden_dim=hidden, out_dim=8, proj_dim=8)
    export_encoder(Checkpoint(encoder, config, 16, 0, 0), tmp_path / "m.onnx")
    write_folder(graph, tmp_path / "g", half=True)
    folder = read_folder(tmp_path / "g", labels=False)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    offsets: list[int] = []  # the mappings asked to read ahead: 0 is a layer's, x's is past its header
    monkeypatch.setattr(MappedRows, "prefetch", lambda self, ids: offsets.append(self.offset))
    for threads, total in ((1, 1 << 40), (2, 1024)):
        monkeypatch.setattr(scratch_module, "memory_total", lambda: total)
        session = EncoderSession(tmp_path / "m.onnx", threads=threads)
        expected = session.embed(np.asarray(folder.x, dtype=np.float32),
                                 graph.edge_index.numpy())
        offsets.clear()
        reported: list[tuple[int, int]] = []
        found = session.embed_folder(folder, 37, lambda *a: reported.append(a),
                                     scratch=scratch)
        np.testing.assert_allclose(found, expected, atol=1e-5 * np.abs(expected).max(), rtol=0)
        assert list(scratch.iterdir()) == []
        assert (0 in offsets) is (total == 1024)
        done = [d for d, _ in reported]
        assert done == sorted(done) and reported[-1][0] == reported[-1][1] >= graph.num_nodes


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
    assert identity(a, "g") == identity(b, "g") == identity(graph, "g")
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


def _recording(folder: Path, made: list[torch.Tensor]):
    """``mapped_scratch(folder)`` that keeps every buffer it makes in ``made``."""
    allocate = mapped_scratch(folder)

    def record(rows: int, cols: int) -> torch.Tensor:
        made.append(allocate(rows, cols))
        return made[-1]
    return record


@pytest.mark.parametrize("name", ["gcn", "ego", "poly"])
def test_all_node_layers_go_to_unlinked_files(tmp_path: Path, graph: Data, name: str) -> None:
    """With a scratch, every whole layer of an all-node embedding is a mapped file (unlinked:
    the folder is empty), written front to back and pulled from, and the embeddings are the
    full forward pass's up to float32 summation order."""
    torch.manual_seed(0)
    encoder = build_encoder(name, 16, ModelConfig(32, 8, 8, "prelu", encoder=name))
    with torch.no_grad():
        expected = encoder(graph.x, graph.edge_index)
    made: list[torch.Tensor] = []
    found = encoder.embed_nodes(graph.x, graph.edge_index, chunk_rows=37,
                                scratch=_recording(tmp_path, made))
    torch.testing.assert_close(found, expected, atol=1e-5 * float(expected.abs().max()),
                               rtol=0)
    assert made and all(t.size(0) == graph.num_nodes for t in made)
    assert all(str(_mapped_from(t)).endswith("(deleted)") for t in made)
    assert list(tmp_path.iterdir()) == []


def test_probe_training_rows_in_a_file_score_the_same(tmp_path: Path, graph: Data) -> None:
    """The probe's training rows written to a mapped file are the rows it trains on in
    memory: the same classifier, the same scores (the arithmetic is the same)."""
    z = torch.randn(graph.num_nodes, 8, generator=torch.Generator().manual_seed(1))
    z += torch.nn.functional.one_hot(graph.y, 8).float()
    split = random_split(graph.num_nodes, 0)
    made: list[torch.Tensor] = []
    in_file = linear_probe(z, graph.y, split, scratch=_recording(tmp_path, made))
    assert [tuple(t.shape) for t in made] == [(split.train.numel(), 8)]
    _same_scores(in_file, linear_probe(z, graph.y, split))


def _same_scores(a: ProbeScores, b: ProbeScores) -> None:
    """The same rows, the same arithmetic: the same figures, up to one node of each set (a
    prediction at a tie may round the other way where BLAS sums in another order)."""
    assert abs(a.val_micro - b.val_micro) <= 100 / a.num_val + 1e-9
    assert abs(a.test_micro - b.test_micro) <= 100 / a.num_test + 1e-9


def test_the_chosen_checkpoint_is_embedded_once(tmp_path: Path, graph: Data,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """On a graph on disk, when the checkpoint chosen on a sample of the split is the last one
    probed, its embeddings (kept in a file) are probed on the whole split without embedding
    the graph again, and score what a fresh embedding scores."""
    monkeypatch.setattr(probe_module, "CHECKPOINT_PROBE_MAX_LABELLED", 20)
    torch.manual_seed(0)
    model = AdNGCL(16, ModelConfig(32, 8, 8, "prelu"))
    prober = Prober(graph, seed=0, device=torch.device("cpu"), protocol="honest",
                    scratch=tmp_path)
    calls = []
    embed = model.embed
    monkeypatch.setattr(model, "embed", lambda *a, **k: calls.append(1) or embed(*a, **k))
    prober.probe(1, model, graph.x, graph.edge_index, last=True)
    selection = prober.selection(model, graph.x, graph.edge_index)
    assert len(calls) == 1 and selection is not None
    fresh = linear_probe(embed(graph.x, graph.edge_index), graph.y,
                         random_split(graph.num_nodes, 0))
    _same_scores(selection.scores, fresh)  # embeddings up to float summation order


def test_poly_trains_on_a_folder_and_own_encoders_are_refused(tmp_path: Path,
                                                              graph: Data) -> None:
    write_folder(graph, tmp_path / "g")
    code, out, err = _cli(["train", "--dataset", str(tmp_path / "g"), "--mode", "minibatch",
                           "--epochs", "1", "--eval-every", "1", "--encoder", "poly",
                           "--batch-size", "128", "--out", str(tmp_path / "run")])
    assert code == 0, err
    assert not [p for p in (tmp_path / "run").rglob(".scratch-*")]
    (tmp_path / "enc.py").write_text("def make(in_dim):\n    import torch\n"
                                     "    return torch.nn.Linear(in_dim, 4)\n")
    code, _, err = _cli(["train", "--dataset", str(tmp_path / "g"), "--encoder",
                         f"{tmp_path / 'enc.py'}:make", "--out", str(tmp_path / "own")])
    assert code == 2 and "an encoder of your own runs on the whole graph" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "own").exists()


def _edge_table(where: Path, suffix: str = ".csv", nodes: bool = False) -> tuple[Path, Path | None]:
    """An edge list of named nodes with repeats, both directions and self-loops (and, with
    ``nodes``, a node table of 3 features and a label, in an order of its own)."""
    rng = np.random.default_rng(0)
    ends = rng.integers(0, 300, size=(2500, 2))
    ends[:5, 1] = ends[:5, 0]  # self-loops
    ends = np.concatenate([ends, ends[:40, ::-1], ends[:40]])  # both ways, repeated
    sep = "\t" if suffix == ".tsv" else ","
    edges = where / f"edges{suffix}"
    edges.write_text(f"source{sep}target\n" + "".join(f"n{a}{sep}n{b}\n" for a, b in ends))
    if not nodes:
        return edges, None
    table = where / "nodes.csv"
    order = rng.permutation(300)
    table.write_text("id,f1,f2,f3,label\n" + "".join(
        f"n{i},{rng.normal():.6f},{i % 7},{rng.normal():.3f},{i % 4}\n" for i in order))
    return edges, table


@pytest.mark.parametrize("suffix,nodes", [(".csv", False), (".tsv", False), (".csv", True)])
def test_an_edge_table_converts_a_chunk_at_a_time_to_the_graph_in_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str, nodes: bool) -> None:
    """Read in chunks of 500 rows and sorted in runs of 700 edges, the folder holds the arrays
    the whole table gives in memory (ids numbered alike, repeats and self-loops dropped,
    structural features or the node table's, labels), and trains."""
    from edgegcl_embed import table_folder
    from edgegcl_embed.tables import read_tables

    monkeypatch.setattr(table_folder, "TABLE_CHUNK_ROWS", 500)
    monkeypatch.setattr(table_folder, "EDGE_CHUNK_BYTES", 16 * 700)
    monkeypatch.setattr(folder_module, "EDGE_CHUNK_BYTES", 16 * 700)
    edges, table = _edge_table(tmp_path, suffix, nodes)
    args = ["convert", str(edges), "--out", str(tmp_path / "g")]
    code, _, err = _cli(args + (["--node-table", str(table)] if table else []))
    assert code == 0, err
    assert ("structural ones" in err) is not nodes
    whole = read_tables(edges, table)
    for name, expected in (("x", whole.x), ("edge_index", whole.edge_index),
                           *((("y", whole.y),) if nodes else ())):
        assert np.array_equal(np.load(tmp_path / "g" / f"{name}.npy"), expected), name
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == sorted(
        ["metadata.json", "x.npy", "edge_index.npy", *(f"{f}.npy" for f in INDEX_FILES),
         *(["y.npy"] if nodes else [])])
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    if nodes:
        code, _, err = _cli(["train", "--dataset", str(tmp_path / "g"), "--mode", "minibatch",
                             "--epochs", "1", "--eval-every", "1", "--encoder", "gcn",
                             "--batch-size", "128", "--out", str(tmp_path / "run")])
        assert code == 0, err


def test_a_table_that_does_not_hold_converts_to_nothing(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad row past the first chunk, or an id the node table lacks: one line, exit 2, and
    neither the folder nor a temporary is left."""
    from edgegcl_embed import table_folder

    monkeypatch.setattr(table_folder, "TABLE_CHUNK_ROWS", 100)
    edges, table = _edge_table(tmp_path, nodes=True)
    lines = edges.read_text().splitlines()
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines[:300] + ["n1,n2,n3"] + lines[300:]) + "\n")
    missing = tmp_path / "missing.csv"
    missing.write_text(edges.read_text() + "n1,nowhere\n")
    for graph, extra, needle in ((bad, [], "row 301 has another number of columns"),
                                 (missing, ["--node-table", str(table)],
                                  "names node nowhere, which the node table")):
        code, _, err = _cli(["convert", str(graph), "--out", str(tmp_path / "g"), *extra])
        assert code == 2 and needle in err, err
        assert len([ln for ln in err.splitlines() if ln.startswith("edgegcl: error")]) == 1
        assert not (tmp_path / "g").exists()
        assert [p for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_large_layers_are_read_ahead_and_small_ones_are_not(tmp_path: Path, graph: Data,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """A mapped layer larger than half the memory the process may use has the rows each chunk
    pulls asked for first (and gives the same embeddings); one that fits is read as it is."""
    import edgegcl_embed.scratch as scratch_module
    from edgegcl_embed.folder import MappedRows

    asked: list[int] = []
    monkeypatch.setattr(MappedRows, "prefetch", lambda self, ids: asked.append(len(ids)))
    torch.manual_seed(0)
    model = AdNGCL(16, ModelConfig(32, 8, 8, "prelu"))
    expected = model.embed(graph.x, graph.edge_index)
    for total, read_ahead in ((1 << 40, False), (1024, True)):
        monkeypatch.setattr(scratch_module, "memory_total", lambda: total)
        asked.clear()
        found = model.embed(graph.x, graph.edge_index, chunk_rows=50,
                            scratch=mapped_scratch(tmp_path))
        torch.testing.assert_close(found, expected, atol=1e-5 * float(expected.abs().max()),
                                   rtol=0)
        assert bool(asked) is read_ahead
