"""Every script in bench/ still starts: it imports, its ``--help`` answers, and every name it
imports from edgegcl or bench (at the top or inside a function) exists, so a renamed library
function breaks CI instead of the next person's benchmark."""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import io
import pkgutil
import sys
from pathlib import Path

import pytest

import bench

MODULES = sorted(m.name for m in pkgutil.iter_modules(bench.__path__))


def _imported_names(path: Path) -> list[tuple[str, str, int]]:
    """(module, name, line) of each ``from edgegcl... / bench... import name`` in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] in ("edgegcl", "edgegcl_embed", "bench"):
            found += [(node.module, alias.name, node.lineno) for alias in node.names]
    return found


@pytest.mark.parametrize("name", MODULES)
def test_a_bench_script_imports_what_exists(name: str) -> None:
    missing = []
    for module, attr, line in _imported_names(Path(bench.__path__[0]) / f"{name}.py"):
        target = importlib.import_module(module)
        if not hasattr(target, attr):
            try:  # a submodule imported by name
                importlib.import_module(f"{module}.{attr}")
            except ImportError:
                missing.append(f"line {line}: {module}.{attr}")
    assert not missing, f"bench/{name}.py imports names that do not exist: {missing}"


@pytest.mark.parametrize("name", MODULES)
def test_a_bench_script_answers_help(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module(f"bench.{name}")
    main = getattr(module, "main", None)
    if main is None or name == "__main__":  # a library of the scripts; the dispatcher (below)
        return
    monkeypatch.setattr(sys, "argv", [name, "--help"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 0 and "usage:" in out.getvalue()


def test_sweep_records_keep_the_ratios_as_the_results_files_do() -> None:
    from bench.sweep import ratios_text

    assert ratios_text({"hard": 30.0, "inter": 50.0, "easy": 20.0}) == "20,30,50"  # easy first


@pytest.mark.parametrize("name", MODULES)
def test_a_bench_script_uses_the_public_api_and_the_harness_writer(name: str) -> None:
    """What a benchmark imports of the library is public (no leading underscore; in the
    module's ``__all__`` where it has one), and it writes its results through
    ``bench.harness`` alone (one way to write: atomically, where results go)."""
    private = []
    for module, attr, line in _imported_names(Path(bench.__path__[0]) / f"{name}.py"):
        if module.split(".")[0] == "bench":
            continue
        target = importlib.import_module(module)
        public = getattr(target, "__all__", None)
        submodule = importlib.util.find_spec(f"{module}.{attr}") is not None \
            if hasattr(target, "__path__") else False
        if attr.startswith("_") or (public is not None and attr not in public
                                    and not submodule):
            private.append(f"line {line}: {module}.{attr}")
        if attr == "write_atomic" and name != "harness":
            private.append(f"line {line}: writes with {module}.write_atomic, not bench.harness")
    assert not private, f"bench/{name}.py: {private}"


def test_python_m_bench_lists_and_runs_every_benchmark(capsys: pytest.CaptureFixture,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.__main__ import benchmarks, main

    listed = benchmarks()
    scripts = {m for m in MODULES if hasattr(importlib.import_module(f"bench.{m}"), "main")
               and m != "__main__"}
    assert set(listed) == scripts and all(listed.values())
    assert main([]) == 0
    shown = capsys.readouterr().out
    assert all(name in shown for name in listed)
    monkeypatch.setattr(sys, "argv", sys.argv)  # restored after main sets it
    with pytest.raises(SystemExit) as stop:
        main(["threads", "--help"])
    assert stop.value.code == 0 and "usage: python -m bench threads" in capsys.readouterr().out
    assert main(["no-such-bench"]) == 2 and "lists them" in capsys.readouterr().err


SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"
TINY_RUNS = {
    "sampler_speed": (["--nodes", "2000", "--batches", "2", "--rounds", "1"], ["sampler.md"]),
    "scaling": (["--sizes", "1000", "--batch-size", "64", "--batches", "4",
                 "--full-up-to", "0", "--out", "{out}/scaling.md"], ["scaling.md"]),
    "embed_kernels": (["--nodes", "2000", "--rounds", "1", "--name", "kernels"],
                      ["kernels.md", "kernels.json"]),
    "graph_folder": (["--nodes", "600", "--features", "16", "--batch-size", "128",
                      "--csv-edges", "2000", "--csv-nodes", "300", "--name", "folder"],
                     ["folder.md", "folder.json"]),
    "folder_memory": (["--sizes", "300,600", "--features", "8", "--batch-size", "128",
                       "--name", "growth"], ["growth.md", "growth.json"]),
    "scaling --degree-exponent": (["--sizes", "1000,2000", "--batch-size", "64", "--batches", "2",
                                   "--full-up-to", "0", "--degree-exponent", "2.5",
                                   "--out", "{out}/scaling-power-law.md"],
                                  ["scaling-power-law.md"]),
    "full_graph_memory": (["--sizes", "300", "--thetas", "0.1", "--edge-sizes", "300",
                           "--name", "full"], ["full.md", "full.json"]),
    "external_maskgae": (["--root", str(SHARED), "--graphs", "Cora", "--splits", "1",
                          "--seeds", "1", "--methods", "edgegcl", "--name", "maskgae",
                          "--extra", "--epochs 2 --eval-every 1 --encoder gcn --hidden-dim 16"],
                         ["maskgae.json", "maskgae.md"]),
    "wall_time": (["--graphs", "csv-300k", "--csv-nodes", "300", "--name", "wall",
                   "--extra", "--epochs 4 --eval-every 2 --hidden-dim 16 --time-budget 1m"],
                  ["wall.json", "wall.md"]),
    "hardness": (["--root", str(SHARED), "--datasets", "Cora", "--cells", "random@0.1",
                  "--seeds", "1", "--epochs", "2", "--name", "tiny"],
                 ["tiny.json", "tiny.md"]),  # through bench.sweep's runner
}
REPORTS = {
    "paper_tables": ["--root", "{out}"], "hardness": ["--root", "{out}"],
    "threads": ["--root", "{out}"], "embed_floor": [],
    "budget_cost": ["--root", "{out}", "--name", "budget-cost-cora"]}
"""Benchmarks whose ``--report-only`` rewrites a report from its committed results."""
for _name, _args in REPORTS.items():
    TINY_RUNS[f"{_name} --report-only"] = ([*_args, "--report-only"], [])
"""Benchmarks that run in seconds at a tiny size, as a user starts them, into a folder of
their own (``EDGEGCL_BENCH_RESULTS``): a script broken past its --help fails here."""


@pytest.mark.parametrize("name", sorted(TINY_RUNS))
def test_a_bench_script_runs_at_a_tiny_size(name: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture) -> None:
    import shutil

    from bench import harness
    from bench.__main__ import main

    args, written = TINY_RUNS[name]
    if str(SHARED) in args and not (SHARED / "Cora").is_dir():
        pytest.skip("needs the shared Planetoid files")
    before: set[Path] = set()
    if name.endswith("--report-only"):  # the committed results, in a folder of its own
        for result in (Path(bench.__path__[0]) / "results").glob("*.json"):
            shutil.copy(result, tmp_path)
        before = set(tmp_path.glob("*.md"))
    # in this process (the script's own workers, if any, read the variable)
    monkeypatch.setenv("EDGEGCL_BENCH_RESULTS", str(tmp_path))
    monkeypatch.setattr(harness, "RESULTS", tmp_path)
    monkeypatch.setattr(sys, "argv", sys.argv)
    monkeypatch.chdir(Path(bench.__path__[0]).parent)
    import torch

    threads = torch.get_num_threads()  # a script may set its own
    try:
        assert main([name.split()[0], *(a.replace("{out}", str(tmp_path)) for a in args)]) == 0
    finally:
        torch.set_num_threads(threads)
    if name.endswith("--report-only"):  # one report written from the results
        assert set(tmp_path.glob("*.md")) - before, capsys.readouterr().err[-500:]
    else:
        assert all((tmp_path / f).is_file() for f in written), sorted(p.name for p in
                                                                      tmp_path.iterdir())


def test_budget_cost_refuses_a_per_seed_encoder_before_measuring(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its held budgets and whole runs time one encoder: with ``encoder = auto`` (the tuned
    defaults') it says which flag names one, before loading or measuring anything."""
    from bench import budget_cost

    monkeypatch.setattr(sys, "argv", ["budget_cost", "--root", str(tmp_path / "none"),
                                      "--dataset", "Cora", "--name", "t"])
    with pytest.raises(SystemExit, match="--flags encoder=gcn"):
        budget_cost.main()
    assert list(tmp_path.iterdir()) == []


def test_python_m_bench_with_bad_arguments_is_one_line(capsys: pytest.CaptureFixture,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """A bad flag, or a graph the run refuses, ends `python -m bench NAME` in one line and
    exit code 2 (no traceback)."""
    from bench.__main__ import main

    monkeypatch.setattr(sys, "argv", sys.argv)
    with pytest.raises(SystemExit) as stop:
        main(["hardness", "--seeds", "abc"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "--seeds" in err
    assert main(["homophily", "--files", str(tmp_path), "--graphs", "nosuch.npz"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as stop:
        main(["run_memory", "--sizes", "abc"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "not comma-separated" in err
    assert main(["nosuch"]) == 2
    assert capsys.readouterr().err.startswith("python -m bench: error: no benchmark")


FAKE_MASKGAE = {
    "model.py": """
import torch
from torch import nn
from torch_sparse import SparseTensor  # the stand-in: edge_index passed on
from sklearn.metrics import roc_auc_score, average_precision_score  # noqa: F401


class GNNEncoder(nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, num_layers=1, dropout=0.5,
                 bn=False, layer="gcn", activation="elu"):
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels)

    def forward(self, x, edge_index):
        edge_index = SparseTensor.from_edge_index(edge_index, sparse_sizes=None).to("cpu")
        h = self.lin(x)
        return h.index_add(0, edge_index[1], h[edge_index[0]])


class EdgeDecoder(nn.Module):
    def __init__(self, in_channels, hidden_channels, num_layers=2, dropout=0.5):
        super().__init__()
        self.lin = nn.Linear(in_channels, 1)

    def forward(self, z, edge, sigmoid=True):
        out = self.lin(z[edge[0]] * z[edge[1]])
        return out.sigmoid() if sigmoid else out


DegreeDecoder = EdgeDecoder


class MaskGAE(nn.Module):
    def __init__(self, encoder, edge_decoder, degree_decoder=None, mask=None):
        super().__init__()
        self.encoder, self.edge_decoder, self.mask = encoder, edge_decoder, mask

    def forward(self, x, edge_index):
        return self.encoder(x, edge_index)

    def train_step(self, data, optimizer, alpha=0.002, batch_size=2 ** 16, grad_norm=1.0):
        self.train()
        kept, masked = self.mask(data.edge_index)
        z = self.encoder(data.x, kept)
        neg = torch.randint(0, data.num_nodes, masked.shape)
        pos, negative = self.edge_decoder(z, masked, False), self.edge_decoder(z, neg, False)
        loss = (nn.functional.softplus(-pos) + nn.functional.softplus(negative).mean()).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    @torch.no_grad()
    def batch_predict(self, z, edges, batch_size=2 ** 16):
        return self.edge_decoder(z, edges).squeeze(-1)
""",
    "mask.py": """
import torch


class MaskEdge:
    def __init__(self, p=0.7):
        self.p = p

    def __call__(self, edge_index):
        m = torch.rand(edge_index.size(1)) < self.p
        return edge_index[:, ~m], edge_index[:, m]
""",
}
"""A checkout with MaskGAE's interface (what bench.external_maskgae calls of it), to run the
harness without its code."""


def test_external_maskgae_runs_a_checkout_on_the_split_file(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """The harness writes PyG's RandomLinkSplit as a file edgegcl reads, and trains a MaskGAE
    checkout on it (here one with its interface), scored on the file's own pairs."""
    import numpy as np

    from bench.external_maskgae import maskgae_run, split_file

    if not (SHARED / "Cora").is_dir():
        pytest.skip("needs the shared Planetoid files")
    checkout = tmp_path / "MaskGAE" / "maskgae"
    checkout.mkdir(parents=True)
    for name, text in FAKE_MASKGAE.items():
        (checkout / name).write_text(text)
    monkeypatch.setattr(sys, "path", list(sys.path))
    split_file("Cora", str(SHARED), 0, tmp_path / "split.npz")
    arrays = np.load(tmp_path / "split.npz")
    assert arrays["test_pos"].shape[0] == 2 and arrays["test_pos"].shape == arrays["test_neg"].shape
    import random

    random.random(), np.random.rand()  # streams moved on: the same seed gives the same file
    split_file("Cora", str(SHARED), 0, tmp_path / "again.npz")
    again = np.load(tmp_path / "again.npz")
    assert all(np.array_equal(arrays[k], again[k]) for k in arrays.files)
    import torch

    before, threads = set(sys.modules), torch.get_num_threads()
    try:
        run = maskgae_run(str(checkout.parent), tmp_path / "split.npz", 0, 20, 1)
    finally:  # the checkout's modules and the stand-ins leave with the test
        for name in set(sys.modules) - before:
            del sys.modules[name]
        torch.set_num_threads(threads)
    assert 0 <= run["test_auc"] <= 100 and run["epoch"] in (10, 20)
