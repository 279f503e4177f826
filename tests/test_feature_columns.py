"""A model trained from a node table records its feature columns by name (edgegcl_embed.columns):
every way of feeding it a graph again (edgegcl-embed, run.embed(), export, --resume, a graph
folder) matches a table's columns by name, reorders them, and refuses in one line what is
not the model's: other columns, structural features for a model trained on features, or a
table's features for a model trained on structural ones."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from torch_geometric.data import Data

import edgegcl
from edgegcl.cli.main import main
from edgegcl.data.validation import validate_graph
from edgegcl.errors import UsageError
from edgegcl_embed.columns import MATRIX, STRUCTURAL, TABLE, FeatureColumns
from edgegcl_embed.embed import main as embed_main
from edgegcl_embed.errors import InputError
from edgegcl_embed.folder import read_folder
from edgegcl_embed.runtime import EncoderSession
from edgegcl_embed.tables import read_tables
from helpers import capture

SMALL = {"epochs": 2, "eval_every": 1, "seeds": 1, "hidden_dim": 16, "out_dim": 8,
         "proj_dim": 8, "encoder": "gcn"}
N = 90


def _write(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An edge list and node tables of one graph: the columns a, b, v (a vector of 3) in
    order, the same columns in another order, one column renamed, labels only."""
    root = tmp_path_factory.mktemp("tables")
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, N)
    x = rng.normal(size=(N, 5)) + y[:, None]
    ids = [f"n{i}" for i in range(N)]
    vec = [f"[{r[2]:.5f}, {r[3]:.5f}, {r[4]:.5f}]" for r in x]
    a, b = (np.round(x[:, 0], 5), np.round(x[:, 1], 5))
    edges = {(int(u), int(v)) for u, v in rng.integers(0, N, (400, 2)) if u != v}
    return {
        "edges": _write(root / "edges.csv", ["src", "dst"],
                        [[ids[u], ids[v]] for u, v in sorted(edges)]),
        "nodes": _write(root / "nodes.csv", ["id", "a", "b", "v", "label"],
                        [[ids[i], a[i], b[i], vec[i], y[i]] for i in range(N)]),
        "swapped": _write(root / "swapped.csv", ["id", "v", "label", "b", "a"],
                          [[ids[i], vec[i], y[i], b[i], a[i]] for i in range(N)]),
        "renamed": _write(root / "renamed.csv", ["id", "a", "c", "v", "label"],
                          [[ids[i], a[i], b[i], vec[i], y[i]] for i in range(N)]),
        "labels": _write(root / "labels.csv", ["id", "label"],
                         [[ids[i], y[i]] for i in range(N)]),
    }


@pytest.fixture(scope="module")
def trained(tables: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run trained on the edge list and its node table, exported to RUN/model.onnx."""
    root = tmp_path_factory.mktemp("trained")
    run = edgegcl.train(settings={**SMALL, "dataset": str(tables["edges"]),
                                  "node_table": str(tables["nodes"])}, out=root / "run")
    assert edgegcl.export(run.path / "model.onnx", run=run.path, graph=str(tables["edges"]),
                          node_table=tables["nodes"])
    return run.path


def test_the_record_reads_back_and_refuses_what_it_cannot_be() -> None:
    record = FeatureColumns.of_table(["a", "b", "v"], [1, 1, 3])
    assert record.width == 5 and FeatureColumns.from_text(record.to_text()) == record
    assert FeatureColumns(STRUCTURAL).width is None
    for text, needle in (("{", "not JSON"), ('{"kind": "table", "columns": []}', "none for"),
                         ('{"kind": "matrix", "columns": [["a", 1]]}', "columns for"),
                         ('{"kind": "table", "columns": [["a", 1], ["a", 2]]}', "twice"),
                         ('{"kind": "table", "columns": [["a", 0]]}', "not a column"),
                         ('{"kind": "table", "columns": [["a", true]]}', "not a column"),
                         ('{"kind": "other", "columns": []}', "not {"),
                         (" " * (1 << 23), "longer than")):
        with pytest.raises(ValueError, match=needle):
            FeatureColumns.from_text(text)


def test_columns_are_matched_by_name_and_reordered() -> None:
    model = FeatureColumns.of_table(["a", "b", "v"], [1, 1, 3])
    found = FeatureColumns.of_table(["v", "b", "a"], [3, 1, 1])
    x = np.array([[2.0, 3.0, 4.0, 1.0, 0.0]])  # v = (2, 3, 4), b = 1, a = 0
    assert model.conform(found, x, "t").tolist() == [[0.0, 1.0, 2.0, 3.0, 4.0]]
    assert model.conform(model, x, "t") is x
    assert FeatureColumns(MATRIX).conform(found, x, "t") is x  # nothing to match by
    refusals = ((FeatureColumns.of_table(["a", "c", "v"], [1, 1, 3]), "it lacks b and it has c"),
                (FeatureColumns.of_table(["a", "b", "v"], [1, 1, 2]), "v holds 2 value"),
                (FeatureColumns(STRUCTURAL), "structural ones, but the model was trained on "
                                             "feature columns a, b, v"))
    for other, needle in refusals:
        with pytest.raises(InputError, match=needle):
            model.conform(other, x, "t")
    with pytest.raises(InputError, match="trained on structural features"):
        FeatureColumns(STRUCTURAL).conform(found, x, "t")
    with pytest.raises(InputError, match="trained on a feature matrix"):
        FeatureColumns(MATRIX).conform(FeatureColumns(STRUCTURAL), x, "t")


def test_a_table_records_its_columns_and_refuses_a_name_twice(tables: dict[str, Path],
                                                               tmp_path: Path) -> None:
    read = read_tables(tables["edges"], tables["swapped"])
    assert read.feature_columns == FeatureColumns.of_table(["v", "b", "a"], [3, 1, 1])
    assert read_tables(tables["edges"], tables["labels"]).feature_columns.kind == STRUCTURAL
    twice = _write(tmp_path / "twice.csv", ["id", "a", "a"], [["n0", 1, 2], ["n1", 3, 4]])
    with pytest.raises(InputError, match="names the feature column a twice"):
        read_tables(tables["edges"], twice)


def test_the_run_the_checkpoint_and_the_model_record_the_columns(trained: Path) -> None:
    expected = FeatureColumns.of_table(["a", "b", "v"], [1, 1, 3])
    record = json.loads((trained / "graph.json").read_text())
    assert FeatureColumns.from_value(record["feature_columns"]) == expected
    assert edgegcl.load_run(trained).feature_columns == expected
    assert EncoderSession(trained / "model.onnx").metadata.feature_columns == expected


def test_edgegcl_embed_matches_a_table_by_name(trained: Path, tables: dict[str, Path],
                                              tmp_path: Path) -> None:
    out = {}
    for name in ("nodes", "swapped"):
        out[name] = tmp_path / f"{name}.npy"
        code, _, err = capture(embed_main, [str(trained / "model.onnx"), "--graph",
                                            str(tables["edges"]), "--node-table",
                                            str(tables[name]), "--out", str(out[name])])
        assert code == 0, err
    # the same numbers in the same places: the same embeddings
    assert np.array_equal(np.load(out["nodes"]), np.load(out["swapped"]))
    for args, needle in (
            (["--node-table", str(tables["renamed"])], "lacks b and it has c, which the model"),
            ([], "has no feature columns, so its features would be structural ones, but the "
                 "model was trained on feature columns a, b, v \\(3 values\\)"),
            (["--node-table", str(tables["labels"])], "structural ones")):
        code, _, err = capture(embed_main, [str(trained / "model.onnx"), "--graph",
                                            str(tables["edges"]), *args,
                                            "--out", str(tmp_path / "no.npy")])
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert re.search(needle, err), err
        assert not (tmp_path / "no.npy").exists()


def test_run_embed_export_and_resume_match_a_table_by_name(trained: Path,
                                                           tables: dict[str, Path],
                                                           tmp_path: Path) -> None:
    run = edgegcl.load_run(trained)
    z = run.embed(tables["edges"], node_table=tables["nodes"])
    assert torch.equal(run.embed(tables["edges"], node_table=tables["swapped"]), z)
    with pytest.raises(UsageError, match="lacks b and it has c"):
        run.embed(tables["edges"], node_table=tables["renamed"])
    with pytest.raises(UsageError, match="would be structural ones"):
        run.embed(tables["edges"], node_table=tables["labels"])
    assert edgegcl.export(tmp_path / "m.onnx", run=trained, graph=str(tables["edges"]),
                          node_table=tables["swapped"])
    with pytest.raises(UsageError, match="lacks b and it has c"):
        edgegcl.export(tmp_path / "m2.onnx", run=trained, graph=str(tables["edges"]),
                       node_table=tables["renamed"])
    assert not (tmp_path / "m2.onnx").exists()
    table = tmp_path / "table.csv"  # the run's node table, rewritten in another order
    table.write_bytes(tables["nodes"].read_bytes())
    settings = {**SMALL, "dataset": str(tables["edges"]), "node_table": str(table)}
    stopped = iter([False, True])
    with pytest.raises(edgegcl.Stopped):
        edgegcl.train(settings=settings, out=tmp_path / "stopped",
                      stop=lambda: next(stopped, True))
    table.write_bytes(tables["renamed"].read_bytes())
    with pytest.raises(UsageError, match="lacks b and it has c"):
        edgegcl.train(resume=tmp_path / "stopped", settings=settings)
    table.write_bytes(tables["swapped"].read_bytes())
    assert edgegcl.train(resume=tmp_path / "stopped", settings=settings).metrics is not None


def test_a_model_trained_on_structural_features_refuses_a_tables_features(
        tables: dict[str, Path], tmp_path: Path) -> None:
    run = edgegcl.train(settings={**SMALL, "dataset": str(tables["edges"]),
                                  "node_table": str(tables["labels"])}, out=tmp_path / "run")
    assert run.feature_columns == FeatureColumns(STRUCTURAL)
    with pytest.raises(UsageError, match="has feature columns a, b, v .* but the model was "
                                         "trained on structural features"):
        run.embed(tables["edges"], node_table=tables["nodes"])
    assert run.embed(tables["edges"], node_table=tables["labels"]).shape == (N, 8)


def test_a_graph_folder_keeps_its_columns_and_is_never_reordered_in_place(
        trained: Path, tables: dict[str, Path], tmp_path: Path) -> None:
    run = edgegcl.load_run(trained)
    for name in ("nodes", "swapped"):
        code, _, err = capture(main, ["convert", str(tables["edges"]), "--node-table",
                                      str(tables[name]), "--out", str(tmp_path / name)])
        assert code == 0, err
        assert read_folder(tmp_path / name).feature_columns == read_tables(
            tables["edges"], tables[name]).feature_columns
    assert torch.allclose(run.embed(tmp_path / "nodes"),
                          run.embed(tables["edges"], node_table=tables["nodes"]), atol=1e-5)
    with pytest.raises(UsageError, match="in another order, and a graph folder's features are "
                                         "read in place"):
        run.embed(tmp_path / "swapped")
    code, _, err = capture(embed_main, [str(trained / "model.onnx"), "--graph",
                                        str(tmp_path / "swapped"), "--out",
                                        str(tmp_path / "z.npy")])
    assert code == 2 and "convert the node table again" in err
    meta = json.loads((tmp_path / "nodes" / "metadata.json").read_text())
    meta["features"]["columns"][0][1] = 4  # a forged width
    (tmp_path / "nodes" / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match="names feature columns 8 values wide in all, but "
                                         "x.npy has 5"):
        read_folder(tmp_path / "nodes")


@pytest.mark.parametrize("features, needle", [
    ("{", "the feature record is not JSON"),
    ('{"kind": "table", "columns": [["a", 2]]}', "names feature columns 2 values wide, but "
                                                 "edgegcl.in_dim is 5"),
])
def test_a_forged_feature_record_in_a_model_is_refused(trained: Path, tmp_path: Path,
                                                       features: str, needle: str) -> None:
    model = onnx.load(str(trained / "model.onnx"))
    for prop in model.metadata_props:
        if prop.key == "edgegcl.features":
            prop.value = features
    onnx.save(model, str(tmp_path / "forged.onnx"))
    with pytest.raises(InputError, match=needle):
        EncoderSession(tmp_path / "forged.onnx")


def test_a_graph_in_python_with_a_record_of_another_width_is_refused() -> None:
    data = Data(x=torch.ones(3, 2), edge_index=torch.tensor([[0, 1], [1, 2]]))
    data.feature_columns = FeatureColumns.of_table(["a"], [1])
    with pytest.raises(UsageError, match="feature_columns names 1 values per node but x has 2"):
        validate_graph(data)
    data.feature_columns = FeatureColumns(TABLE, (("a", 1), ("b", 1)))
    assert validate_graph(data).feature_columns == data.feature_columns


def test_a_table_of_many_columns_is_recorded_whole_or_refused(tables: dict[str, Path],
                                                              tmp_path: Path) -> None:
    """Names longer in all than one record holds (4 MiB) are one line pointing to a vector
    column; 2500 long names (more than 64 KiB to record) train, convert and read back."""
    from edgegcl.data.identity import read_identity
    from edgegcl_embed.columns import MAX_RECORD_BYTES

    ids = [f"n{i}" for i in range(N)]
    width = MAX_RECORD_BYTES // 4000 + 2
    huge = _write(tmp_path / "huge.csv", ["id", *(f"{i:04d}" + "x" * 3996 for i in range(width))],
                  [[i, *([0] * width)] for i in ids])
    with pytest.raises(InputError, match="feature columns' names take more than 4 MiB to "
                                         "record; put the features in one vector column"):
        read_tables(tables["edges"], huge)
    names = [f"a_rather_long_feature_name_{i:05d}" for i in range(2500)]
    rng = np.random.default_rng(1)
    many = _write(tmp_path / "many.csv", ["id", *names],
                  [[i, *np.round(rng.normal(size=len(names)), 2)] for i in ids])
    expected = FeatureColumns.of_table(names, [1] * len(names))
    assert len(expected.to_text()) > 1 << 16
    run = edgegcl.train(settings={**SMALL, "epochs": 1, "dataset": str(tables["edges"]),
                                  "node_table": str(many)}, out=tmp_path / "run")
    assert FeatureColumns.from_value(read_identity(run.path)["feature_columns"]) == expected
    code, _, err = capture(main, ["convert", str(tables["edges"]), "--node-table", str(many),
                                  "--out", str(tmp_path / "folder")])
    assert code == 0, err
    assert read_folder(tmp_path / "folder").feature_columns == expected
