"""A run knows the graph it trained on (RUN_DIR/graph.json, edgegcl.data.identity): embedding,
resuming and exporting use that graph or refuse in one line, never another graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import edgegcl
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.data.identity import PYTHON, inputs_hash, labels_hash, read_identity
from edgegcl.errors import UsageError

SMALL = {"epochs": 2, "eval_every": 1, "seeds": 1, "hidden_dim": 16, "out_dim": 8,
         "proj_dim": 8, "encoder": "gcn"}


def _graph(seed: int = 0, nodes: int = 150):
    return synthetic_graph(SyntheticSpec(num_nodes=nodes, num_features=12, seed=seed))


def test_a_python_graph_is_given_again_or_refused(tmp_path: Path) -> None:
    """Trained from a Data in Python (with settings naming Cora, which it is not): the record
    says so, and embed(), load_run's embed() and export without --graph ask for the graph in
    one line instead of rebuilding another; given again, the graph embeds."""
    data = _graph()
    run = edgegcl.train(graph=data, settings={**SMALL, "dataset": "Cora"},
                        out=tmp_path / "run")
    record = read_identity(run.path)
    assert record is not None and record["source"] == PYTHON
    assert record["nodes"] == 150 and record["inputs_sha256"] == inputs_hash(data)
    assert record["labels_sha256"] == labels_hash(data)
    for loaded in (run, edgegcl.load_run(run.path)):
        with pytest.raises(UsageError, match=f"trained on {PYTHON}: pass the graph"):
            loaded.embed()
        assert loaded.embed(data).shape == (150, 8)
    with pytest.raises(UsageError, match="save it as a graph file and pass it with graph="):
        edgegcl.export(tmp_path / "m.onnx", run=run.path)
    assert not (tmp_path / "m.onnx").exists()


def test_a_graph_file_changed_after_training_is_refused(tmp_path: Path) -> None:
    """The same file name with other content: --resume and export each refuse in one line
    (run.embed() asks for the file by name, as any path a run records, and embeds whatever
    graph it is given); the unchanged file resumes and exports."""
    data = _graph()
    path = tmp_path / "g.npz"
    np.savez(path, x=data.x.numpy(), edge_index=data.edge_index.numpy(), y=data.y.numpy())
    run = edgegcl.train(settings={**SMALL, "dataset": str(path)}, out=tmp_path / "run")
    assert read_identity(run.path)["source"] == str(path)
    with pytest.raises(UsageError, match="pass graph="):
        run.embed()
    other = _graph(seed=1)  # same size and features, other content
    np.savez(path, x=other.x.numpy(), edge_index=other.edge_index.numpy(), y=other.y.numpy())
    with pytest.raises(UsageError, match="not the one .* trained on \\(.*\\): its (size differs|features or "
                                         "edges differ)"):
        edgegcl.train(resume=run.path, settings={"epochs": 3, "dataset": str(path)})
    with pytest.raises(UsageError, match="export: the graph is not the one"):
        edgegcl.export(tmp_path / "m.onnx", run=run.path, graph=str(path))
    assert not (tmp_path / "m.onnx").exists()
    np.savez(path, x=data.x.numpy(), edge_index=data.edge_index.numpy(), y=data.y.numpy())
    edgegcl.train(resume=run.path, settings={"epochs": 3, "dataset": str(path)})
    assert edgegcl.export(tmp_path / "m.onnx", run=run.path, graph=str(path))
    assert edgegcl.load_run(run.path).embed(str(path)).shape == (150, 8)


def test_a_rebuilt_graph_must_be_the_one_trained_on(tmp_path: Path) -> None:
    """A run on the generated graph rebuilds it from its configuration for run.embed(); a record
    whose hash no longer matches what the configuration rebuilds is refused in one line."""
    import json

    run = edgegcl.train(settings={**SMALL, "nodes": 120, "features": 12}, out=tmp_path / "run")
    assert run.embed().shape == (120, 8)  # rebuilt, and the same graph
    record = read_identity(run.path)
    (run.path / "graph.json").write_text(json.dumps({**record, "inputs_sha256": "0" * 64}))
    with pytest.raises(UsageError, match="run.embed\\(\\): the graph is not the one .*: its "
                                         "features or edges differ \\(what the model reads\\)"):
        edgegcl.load_run(run.path).embed()
    # what evaluates the model is not what it reads: embedding and export do not look at it
    (run.path / "graph.json").write_text(json.dumps({**record, "labels_sha256": "0" * 64}))
    assert edgegcl.load_run(run.path).embed().shape == (120, 8)


def test_train_seeds_records_a_python_graph_and_refuses_another_on_resume(
        tmp_path: Path) -> None:
    data = _graph()
    cfg = edgegcl.TrainConfig(**SMALL)
    stopped = iter([False, True])
    with pytest.raises(edgegcl.Stopped):
        edgegcl.train_seeds(cfg, data, tmp_path, torch.device("cpu"),
                            stop=lambda: next(stopped, True))
    assert read_identity(tmp_path)["source"] == PYTHON
    with pytest.raises(UsageError, match="resume: the graph is not the one .*: its size differs"):
        edgegcl.train_seeds(cfg, _graph(nodes=160), tmp_path, torch.device("cpu"), resume=True)
    edgegcl.train_seeds(cfg, data, tmp_path, torch.device("cpu"), resume=True)
    assert (tmp_path / "metrics.json").is_file()  # the same graph continues to the end


def test_a_graph_without_its_labels_exports_and_a_relabelled_one_does_not_resume(
        tmp_path: Path) -> None:
    """The record keeps what the model reads apart from what evaluates it: the training graph
    saved without labels (as edgegcl_embed.graph.save_npz hands it to the runtime) exports and
    embeds; the same graph with other labels is refused by --resume, naming the labels."""
    from edgegcl_embed.graph import save_npz

    data = _graph()
    path = tmp_path / "g.npz"
    np.savez(path, x=data.x.numpy(), edge_index=data.edge_index.numpy(), y=data.y.numpy())
    run = edgegcl.train(settings={**SMALL, "dataset": str(path)}, out=tmp_path / "run")
    bare = tmp_path / "bare.npz"
    save_npz(bare, data.x.numpy(), data.edge_index.numpy())
    assert run.embed(bare).shape == (data.num_nodes, 8)
    assert edgegcl.export(tmp_path / "m.onnx", run=run.path, graph=str(bare))
    stopped = iter([False, True])
    with pytest.raises(edgegcl.Stopped):
        edgegcl.train(settings={**SMALL, "dataset": str(path)}, out=tmp_path / "stopped",
                      stop=lambda: next(stopped, True))
    np.savez(path, x=data.x.numpy(), edge_index=data.edge_index.numpy(),
             y=np.roll(data.y.numpy(), 1))
    with pytest.raises(UsageError, match="its labels or split masks differ \\(what evaluates"):
        edgegcl.train(resume=tmp_path / "stopped", settings={"dataset": str(path)})


def test_the_graph_record_is_required_and_its_own_runs(tmp_path: Path) -> None:
    """A run without its graph.json, or with another run's, is not resumed or exported on a
    graph nothing checks: one line that asks for the record back, never to remove it."""
    import shutil

    data = _graph()
    path = tmp_path / "g.npz"
    np.savez(path, x=data.x.numpy(), edge_index=data.edge_index.numpy(), y=data.y.numpy())
    runs = {}
    for name, theta in (("a", 0.1), ("b", 0.2)):
        stopped = iter([False, True])
        with pytest.raises(edgegcl.Stopped):
            edgegcl.train(settings={**SMALL, "theta_max": theta, "dataset": str(path)},
                          out=tmp_path / name, stop=lambda: next(stopped, True))
        runs[name] = tmp_path / name
    done = edgegcl.train(settings={**SMALL, "dataset": str(path)}, out=tmp_path / "done")
    shutil.copy(runs["b"] / "graph.json", runs["a"] / "graph.json")  # another run's record
    with pytest.raises(UsageError, match="records another run's graph") as refused:
        edgegcl.train(resume=runs["a"], settings={"dataset": str(path)})
    assert "remove" not in str(refused.value)
    (runs["a"] / "graph.json").unlink()
    with pytest.raises(UsageError, match="has no graph.json, the record of the graph") as refused:
        edgegcl.train(resume=runs["a"], settings={"dataset": str(path)})
    assert "remove" not in str(refused.value)
    (done.path / "graph.json").unlink()
    with pytest.raises(UsageError, match="has no graph.json"):
        edgegcl.export(tmp_path / "m.onnx", run=done.path, graph=str(path))
    assert not (tmp_path / "m.onnx").exists()
