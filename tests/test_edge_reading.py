"""How a graph's edges are read is the data's and the user's (``--edges``), never a file's
name: every format read under every name gives the same graph, the start line and the run's
graph record say how the edges were read, and edgegcl-embed and convert read them alike."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from edgegcl.cli.main import main
from edgegcl.config import choices
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.data.config import EdgeReading
from edgegcl.data.datasets import load_graph
from edgegcl.data.files import EDGES_AS_STORED, EDGES_BOTH_WAYS, edge_reading
from edgegcl.data.identity import differs, identity
from edgegcl.errors import UsageError
from edgegcl.jobs.convert import convert
from edgegcl_embed.graph import EDGE_READINGS, load_npz
from edgegcl_embed.tables import read_tables
from helpers import capture

NAMES = ["graph", "graph_directed", "graph_undirected", "directed", "UNDIRECTED-copy",
         "chameleon_filtered_directed"]
"""Names a user may save a graph under: none may change how it is read."""


def _graph() -> Data:
    return synthetic_graph(SyntheticSpec(num_nodes=60, num_features=5, num_classes=3, seed=4))


def _one_way(g: Data) -> np.ndarray:
    """Each undirected edge of ``g`` once, as (lower, higher) columns [2, E/2]."""
    return g.edge_index[:, g.edge_index[0] < g.edge_index[1]].numpy()


def _pairs(edge_index: torch.Tensor | np.ndarray) -> set[tuple[int, int]]:
    return {tuple(e) for e in np.asarray(edge_index).T.tolist()}


def _write(fmt: str, g: Data, path: Path) -> Path:
    """``g`` as a file of ``fmt`` at ``path`` (suffix added), each undirected edge listed once."""
    half = _one_way(g)
    if fmt == "benchmark":
        path = path.with_suffix(".npz")
        np.savez(path, node_features=g.x.numpy(), node_labels=g.y.numpy(), edges=half.T)
    elif fmt == "npz":
        path = path.with_suffix(".npz")
        np.savez(path, x=g.x.numpy(), edge_index=half, y=g.y.numpy())
    elif fmt == "pt":
        path = path.with_suffix(".pt")
        torch.save(Data(x=g.x, edge_index=torch.from_numpy(half), y=g.y), path)
    else:
        path = path.with_suffix(".csv")
        path.write_text("src,dst\n" + "".join(f"n{a},n{b}\n" for a, b in half.T))
    return path


@pytest.mark.parametrize("fmt", ["benchmark", "npz", "pt", "csv"])
@pytest.mark.parametrize("reading", ["auto", "undirected", "directed"])
def test_a_files_name_never_changes_the_graph(tmp_path: Path, fmt: str, reading: str) -> None:
    g = _graph()
    loaded = [load_graph(str(_write(fmt, g, tmp_path / name)), None, edges=reading)
              for name in NAMES]
    for other in loaded[1:]:
        assert torch.equal(other.edge_index, loaded[0].edge_index)
        assert torch.equal(other.x, loaded[0].x)
    half, both = _pairs(_one_way(g)), _pairs(g.edge_index)
    listed_once = fmt in ("benchmark", "csv")  # the formats that list an undirected edge once
    want_both = reading == "undirected" or (reading == "auto" and listed_once)
    got = _pairs(loaded[0].edge_index)
    if fmt == "csv":  # numbered in the sorted order of the ids: compare through the ids
        ids = [int(i[1:]) for i in loaded[0].ids]
        got = {(ids[a], ids[b]) for a, b in got}
    assert got == (both if want_both else half)
    assert loaded[0].edge_index.size(1) == len(got)  # each edge once
    assert edge_reading(loaded[0]) == (EDGES_BOTH_WAYS if want_both else EDGES_AS_STORED)


@pytest.mark.parametrize("reading", EDGE_READINGS)
def test_the_runtime_reads_edges_as_training_does(tmp_path: Path, reading: str) -> None:
    g = _graph()
    for fmt in ("benchmark", "npz"):
        path = _write(fmt, g, tmp_path / f"{fmt}_directed")
        _, edges = load_npz(path, reading)
        assert np.array_equal(edges, load_graph(str(path), None, edges=reading).edge_index.numpy())
    path = _write("csv", g, tmp_path / "table_undirected")
    assert np.array_equal(read_tables(path, None, reading).edge_index,
                          load_graph(str(path), None, edges=reading).edge_index.numpy())
    assert choices(EdgeReading) == EDGE_READINGS  # the flag's choices are the runtime's


def test_named_graphs_and_folders(tmp_path: Path) -> None:
    g = load_graph("synthetic", None)
    assert edge_reading(g) == EDGES_AS_STORED
    both = load_graph("synthetic", None, edges="undirected")
    assert torch.equal(both.edge_index, g.edge_index) and edge_reading(both) == EDGES_BOTH_WAYS
    path = _write("csv", _graph(), tmp_path / "t")
    folder = convert(path, tmp_path / "one_way", edges="directed")
    assert np.array_equal(load_graph(str(folder), None).edge_index.numpy(),
                          read_tables(path, None, "directed").edge_index)
    with pytest.raises(UsageError, match="convert the graph again with --edges undirected"):
        load_graph(str(folder), None, edges="undirected")
    with pytest.raises(UsageError, match="not a way to read edges"):
        load_graph("synthetic", None, edges="both")


def test_the_start_line_and_the_record_say_how_edges_were_read(tmp_path: Path,
                                                               monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = _write("benchmark", _graph(), tmp_path / "g_undirected")
    tiny = ["--hidden-dim", "8", "--out-dim", "8", "--proj-dim", "8", "--encoder", "gcn",
            "--epochs", "1", "--seeds", "1", "--eval-every", "1"]
    code, _, err = capture(main, ["train", "--dataset", str(path), "--edges", "directed", *tiny,
                                  "--out", "run"])
    assert code == 0, err
    edges = _one_way(_graph()).shape[1]
    assert f"60 nodes, {edges} edges, {EDGES_AS_STORED})" in err
    record = json.loads((tmp_path / "run" / "graph.json").read_text())
    assert record["read"] == EDGES_AS_STORED and record["edges"] == edges
    both = load_graph(str(path), None)
    assert differs(record, both) == (f"how its edges were read: {EDGES_BOTH_WAYS}, not "
                                     f"{EDGES_AS_STORED}")
    assert differs(identity(load_graph(str(path), None, edges="directed"), str(path)) | {
        "source": record["source"]}, load_graph(str(path), None, edges="directed")) is None


def test_edgegcl_embed_reads_edges_as_the_model_was_trained(tmp_path: Path,
                                                            monkeypatch) -> None:
    """A run trained with --edges directed records it in its model (``edgegcl.edges``), and
    edgegcl-embed reads an edge list that way unless told otherwise: the embeddings the run
    gives itself, not those of a graph read both ways."""
    import edgegcl
    from edgegcl_embed.embed import main as embed_main
    from edgegcl_embed.runtime import EncoderSession

    monkeypatch.chdir(tmp_path)
    path = _write("csv", _graph(), tmp_path / "g")
    tiny = {"hidden_dim": 8, "out_dim": 8, "proj_dim": 8, "encoder": "gcn", "epochs": 1,
            "seeds": 1, "eval_every": 1, "dataset": str(path), "edges": "directed"}
    run = edgegcl.train(settings=tiny, out=tmp_path / "run")
    assert edgegcl.export(tmp_path / "m.onnx", run=run.path, graph=str(path))
    assert EncoderSession(tmp_path / "m.onnx").metadata.edges == "directed"
    expected = run.embed(str(path)).numpy()
    for flags, same in (([], True), (["--edges", "undirected"], False)):
        out = tmp_path / f"z{len(flags)}.npy"
        code, _, err = capture(embed_main, [str(tmp_path / "m.onnx"), "--graph", str(path),
                                            *flags, "--out", str(out)])
        assert code == 0, err
        assert np.allclose(np.load(out), expected, atol=1e-5) is same
    import onnx

    from edgegcl_embed.errors import InputError
    model = onnx.load(str(tmp_path / "m.onnx"))
    for prop in model.metadata_props:
        if prop.key == "edgegcl.edges":
            prop.value = "sideways"
    onnx.save(model, str(tmp_path / "forged.onnx"))
    with pytest.raises(InputError, match="edgegcl.edges='sideways' is not one of auto, "
                                         "undirected, directed"):
        EncoderSession(tmp_path / "forged.onnx")
