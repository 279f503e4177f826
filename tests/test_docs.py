"""Every code block of the README and docs/ runs as written, or is checked against what the
tool does (tests/docblocks.py: the blocks, their tags and the shell that runs them).

``COVERED`` names the test of each block. The shell blocks run command by command in a work
folder that is a copy of the repository (``pip install -e .`` installs that copy into a
sandbox); every ``edgegcl train`` is shortened with SMALL (appended flags win, as the README
says) and the blocks' big inputs are replaced by small ones, each replacement literal and
checked. CUDA commands are skipped with the reason where no GPU is present.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import copy_sources
from docblocks import ROOT, SHARED_DATASETS, Sandbox, Shell, block, blocks, commands, \
    replaced, variants

COVERED: dict[str, str] = {
    "quickstart": "test_docs.py::test_quickstart",
    "train-examples": "test_docs.py::test_train_examples",
    "config-file": "test_docs.py::test_train_examples",
    "api-example": "test_api.py::test_api_example_runs_as_written",
    "load-run": "test_docs.py::test_python_blocks",
    "train-python": "test_docs.py::test_python_blocks",
    "deploy": "test_docs.py::test_deploy",
    "pick-budget": "test_docs.py::test_pick_budget",
    "torchrun": "test_docs.py::test_torchrun_one_machine",
    "install-cpu": "test_docs.py::test_install_blocks",
    "install-gpu": "test_docs.py::test_install_gpu",  # and test_gpu_commands_train_on_the_gpu
    "install-jetson": "test_docs.py::test_install_blocks",
    "install-raspberry-pi": "test_docs.py::test_install_blocks",
    "layout": "test_layout.py::test_the_layout_names_every_module",
    "encoders-train": "test_docs.py::test_encoders_block",
    "encoders-choice-lines": "test_docs.py::test_encoders_block",
    "export-commands": "test_docs.py::test_export_commands",
    "export-javascript": "test_docs.py::test_export_javascript",
    "profiler-commands": "test_docs.py::test_pick_budget",
    "profiler-target": "test_docs.py::test_pick_budget",
    "run-directory-files": "test_docs.py::test_run_directory_files",
    "tasks-labels-line": "test_docs.py::test_tasks_labels_line",
    "embed-install": "test_docs.py::test_install_blocks",
    "embed-python": "test_docs.py::test_python_blocks",
    "folder-numpy": "test_folder.py::test_docs_blocks",
    "folder-commands": "test_folder.py::test_docs_blocks",
    "link-split-file": "test_tasks.py::test_the_split_file_block_trains",
    "link-scorer": "test_edges.py::test_the_link_scorer_block_runs_as_written",
}
"""Each block's tag -> the test that runs it (file::function)."""

SMALL = ["--epochs", "2", "--eval-every", "1", "--seeds", "1", "--hidden-dim", "16",
         "--out-dim", "8", "--proj-dim", "8"]
"""Appended to every ``edgegcl train`` a block runs: 2 epochs of one seed, narrow layers."""
BENCH_IGNORES = ("--eval-every", "--seeds")
"""Of SMALL, the flags ``edgegcl bench budgets`` does not take (they change no measurement)."""
NO_GPU = "needs a CUDA GPU (torch.cuda.is_available() is False here)"


# --------------------------------------------------------------------------------------------
# every block is tagged and covered
# --------------------------------------------------------------------------------------------


def test_every_block_is_tagged_and_covered_by_a_named_test() -> None:
    found = blocks()
    untagged = [b.where() for b in found if b.name is None]
    assert untagged == [], f"blocks without a <!-- block: NAME --> tag: {untagged}"
    names = [b.name for b in found]
    assert len(names) == len(set(names)), "two blocks share a tag"
    assert sorted(names) == sorted(COVERED), "COVERED does not list exactly the docs' blocks"
    for name, test in COVERED.items():
        module, function = test.split("::")
        tree = ast.parse((ROOT / "tests" / module).read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert function in defined, f"{name}: {test} does not exist"


# --------------------------------------------------------------------------------------------
# fixtures: a work folder, the datasets, a graph file, a finished run
# --------------------------------------------------------------------------------------------


def _fake_actor(raw: Path, nodes: int = 90, features: int = 24, classes: int = 5) -> None:
    """Actor's raw files as geom-gcn ships them (PyG's Actor reads them), for a small graph."""
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    y = rng.integers(0, classes, nodes)
    rows = ["node_id\tfeature\tlabel"]
    for n in range(nodes):
        cols = sorted({int(y[n]) * 4 + int(c) for c in rng.integers(0, 4, 3)} | {features - 1})
        rows.append(f"{n}\t{','.join(map(str, cols))}\t{y[n]}")
    (raw / "out1_node_feature_label.txt").write_text("\n".join(rows) + "\n")
    edges = {(int(a), int(b)) for a, b in rng.integers(0, nodes, (4 * nodes, 2)) if a != b}
    (raw / "out1_graph_edges.txt").write_text(
        "node_id\tnode_id\n" + "".join(f"{a}\t{b}\n" for a, b in sorted(edges)))
    for i in range(10):
        order = rng.permutation(nodes)
        masks = {k: np.zeros(nodes, bool) for k in ("train_mask", "val_mask", "test_mask")}
        masks["train_mask"][order[:54]] = True
        masks["val_mask"][order[54:72]] = True
        masks["test_mask"][order[72:]] = True
        np.savez(raw / f"film_split_0.6_0.2_{i}.npz", **masks)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A datasets root: the shared Planetoid files of Cora and CiteSeer, and a small Actor."""
    if not (SHARED_DATASETS / "Cora" / "raw").is_dir():
        pytest.skip("needs the shared Planetoid files of Cora and CiteSeer")
    root = tmp_path_factory.mktemp("datasets")
    for name in ("Cora", "CiteSeer"):
        shutil.copytree(SHARED_DATASETS / name / "raw", root / name / "raw")
    _fake_actor(root / "Actor" / "raw")
    return root


def _shell(work: Path, datasets: Path | None = None, sandbox: Sandbox | None = None) -> Shell:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["OMP_NUM_THREADS"] = "1"
    if datasets is not None:
        env["EDGEGCL_DATA"] = str(datasets)  # where a run without --root looks
    return Shell(work, env, sandbox)


def _graph_npz(path: Path, nodes: int = 200, *, labels: bool = True,
               homophily: float = 0.9) -> Path:
    from edgegcl.data.synthetic import SyntheticSpec, synthetic_graph

    data = synthetic_graph(SyntheticSpec(num_nodes=nodes, num_features=16, homophily=homophily))
    arrays = {"x": data.x.numpy(), "edge_index": data.edge_index.numpy()}
    if labels:
        arrays["y"] = data.y.numpy()
    np.savez(path, **arrays)
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run on a small graph: what the blocks' run directories stand for."""
    work = tmp_path_factory.mktemp("run")
    _shell(work).run(shlex_join(["edgegcl", "train", "--nodes", "200", "--features", "16",
                                 *SMALL, "--seeds", "2", "--out", "run"]))
    return work / "run"


def shlex_join(argv: list[str]) -> str:
    import shlex

    return shlex.join(argv)


def _gpu(command: str) -> bool:
    """Whether a command needs a CUDA GPU: it says cuda, or names a GPU device profile."""
    return bool(re.search(r"--device cuda|cuda\.is_available|--profile (rtx4090|jetson)",
                          command))


GPU_BLOCKS = ("pick-budget", "profiler-commands", "install-gpu", "install-jetson")
"""The blocks with commands that need a CUDA GPU."""


def _run_block(shell: Shell, text: str, *, train: list[str] = SMALL) -> list[str]:
    """Every command of a shell block, each optional part both ways; training shortened.
    Without a GPU, a command that needs one must be refused in one line that says CUDA (exit
    2), as a user without one sees it; returns those commands."""
    gpu = []
    for command in commands(text):
        needs = _gpu(command) and not torch.cuda.is_available()
        gpu += [command] if needs else []
        for variant in variants(command):
            if needs and "cuda.is_available" in command:  # it prints whether there is one
                assert shell.run(variant)[-1].out.strip() == "False"
            elif needs:
                (refused,) = shell.run(variant, expect=2)
                assert refused.err.count("\n") == 1 and "CUDA" in refused.err, refused.err
                assert refused.err.startswith("edgegcl: error: ")
            else:
                shell.run(_shortened(variant, train))
    return gpu


def _shortened(command: str, train: list[str]) -> str:
    """``command`` with ``train`` after the own flags of each part that trains or measures
    training (``edgegcl train``, ``profile``, ``bench budgets``)."""
    import shlex

    parts = re.split(r"\s+&&\s+", command)
    out = []
    for part in parts:
        argv = shlex.split(part, comments=True)
        at = next((i for i, a in enumerate(argv) if a in ("train", "profile", "bench")), None)
        if at is not None and any(a.endswith("edgegcl") for a in argv[:at]):
            if argv[at] == "bench":  # what a measurement ignores is not among its flags
                train = [a for a, prev in zip(train, ["", *train])
                         if a not in BENCH_IGNORES and prev not in BENCH_IGNORES]
            argv = [*argv, *train]
        out.append(shlex.join(argv))
    return " && ".join(out)


# --------------------------------------------------------------------------------------------
# README
# --------------------------------------------------------------------------------------------


def test_quickstart(tmp_path: Path) -> None:
    """Command 1 installs edgegcl (into the sandbox) and runs the main job on its offline
    default (shortened); command 2 is what CI runs (.ci/run), word for word; command 3 installs
    the plot extra and writes the budget table, CSV and plot into budgets/ (one repeat)."""
    text = block("quickstart").text
    one, two, three = commands(text)
    ci = (ROOT / ".ci" / "run").read_text()
    assert two in ci.splitlines()  # CI runs the README's test command as written
    work = copy_sources(tmp_path / "edgegcl")
    shell = _shell(work, sandbox=Sandbox(tmp_path))
    shell.run(_shortened(one, SMALL))
    assert shell.sandbox.where("edgegcl").is_relative_to(work)
    runs = list((work / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "metrics.json").is_file()
    assert "raw features" in shell.ran[-1].out
    shell.run(replaced(three, {"budgets --out budgets":
                               "budgets --out budgets --nodes 300 --repeats 1 --thetas 0.5"}))
    assert sorted(p.name for p in (work / "budgets").iterdir()) == [
        "budgets.csv", "budgets.md", "budgets.png"]


def test_train_examples(tmp_path: Path, datasets: Path) -> None:
    """Every line of the train block: Cora and the paper preset from the datasets root, a
    graph file, a time budget, the README's TOML file with a flag over it, the baseline, --help. PubMed
    (19 717 nodes) is CiteSeer here, from the same root."""
    _graph_npz(tmp_path / "my_graph.npz")
    (tmp_path / "run.toml").write_text(block("config-file").text)
    text = replaced(block("train-examples").text, {
        "/path/to/datasets": str(datasets), "--dataset PubMed": "--dataset CiteSeer"})
    shell = _shell(tmp_path, datasets)
    assert _run_block(shell, text) == []
    outs = [r.out for r in shell.ran]
    assert sum("raw features" in out for out in outs) == 7  # seven trainings, each with its line
    assert any("time budget 10m" in r.err for r in shell.ran)
    assert "\nschedule: " in outs[-1] and "--theta-max" in outs[-1]  # --help: the sections
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == 7
    (from_file,) = [r for r in runs if r.name.startswith("synthetic-")]  # run.toml's
    config = (from_file / "config.toml").read_text()
    for line in ('mode = "minibatch"', "theta_max = 0.6", "hard = 40"):  # file + flag
        assert line in config, line


def test_python_blocks(tmp_path: Path, datasets: Path, run_dir: Path) -> None:
    """The README's Python blocks (a finished run back; training, resuming and exporting from
    Python) and the runtime's, each run as a script. The run directory the first names is a
    finished one; the second trains Cora (shortened through its settings)."""
    _graph_npz(tmp_path / "other.npz")
    scripts = {
        "load-run": replaced(block("load-run").text, {
            "runs/Cora-20261127-120000": str(run_dir)}),
        "train-python": replaced(block("train-python").text, {
            '"theta_max": 0.2}': '"theta_max": 0.2, "epochs": 2, "eval_every": 1, "seeds": 1, '
                                 '"encoder": "gcn", "hidden_dim": 16, "out_dim": 8, '
                                 '"proj_dim": 8}',
            '"epochs": 600': '"epochs": 3'}),
    }
    env = _shell(tmp_path, datasets).env
    for name, code in scripts.items():
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=600)
        assert proc.returncode == 0, f"{name}:\n{proc.stderr[-3000:]}"
        if name == "load-run":  # theta_max, then the test figure as mean +- std
            assert re.fullmatch(r"[\d.]+ \d+\.\d\d \+- \d+\.\d\d", proc.stdout.splitlines()[0])
        if name == "train-python":
            # the hook was given to the first call only; the resumed run trains epoch 3
            assert re.findall(r"^epoch (\d+): loss", proc.stdout, re.M) == ["1", "2"]
            rows = (tmp_path / "runs" / "mine" / "seed-0" / "epochs.csv").read_text()
            assert len(rows.splitlines()) == 1 + 3
    assert (tmp_path / "model.int8.onnx").is_file() or (tmp_path / "model.onnx").is_file()
    shell = _shell(tmp_path)
    shell.run(f"edgegcl export model.onnx --run {run_dir} --graph-out graph.npz --force")
    proc = subprocess.run([sys.executable, "-c", block("embed-python").text + "\nprint(z.shape)"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "(200, 8)", proc.stderr[-2000:]


def test_deploy(tmp_path: Path, run_dir: Path) -> None:
    """Export a run with its graph (fp32, then INT8), install the runtime alone into the
    sandbox, embed with it (all cores, then one thread: the same numbers)."""
    work = copy_sources(tmp_path / "edgegcl")
    shell = _shell(work, sandbox=Sandbox(tmp_path))
    text = replaced(block("deploy").text, {"runs/Cora-20261125-230634": str(run_dir),
                                          "--threads N": "--threads 1"})
    export, install, embed = commands(text)
    shell.run(replaced(export, {" [--quantize int8]": ""}))
    shell.run(replaced(export, {"[--quantize int8]": "--quantize int8 --force"}))
    assert (work / "model.onnx").is_file() and (work / "model.int8.onnx").is_file()
    shell.run(install)
    assert shell.sandbox.where("edgegcl_embed").is_relative_to(shell.sandbox.venv)
    shell.run(replaced(embed, {" [--threads 1]": ""}))
    every = np.load(work / "embeddings.npy")
    shell.run(replaced(embed, {"[--threads 1]": "--threads 1 --force"}))
    assert np.array_equal(np.load(work / "embeddings.npy"), every)
    assert every.shape == (200, 8)


def test_pick_budget(tmp_path: Path, datasets: Path) -> None:
    """The budget blocks of the README and docs/profiles.md on Cora: bench budgets (one
    repeat of one theta_max), the profiler's table and choice (measured once: the second
    profile and --auto-budget read the cache, as a user's would), and --auto-budget with a
    target epoch time; the GPU profiles' lines are skipped without a GPU."""
    shell = _shell(tmp_path, datasets)
    sub = {"--root ROOT": f"--root {datasets}", "--root DIR": f"--root {datasets}",
           "--out DIR": "--out budgets"}
    readme = replaced(block("pick-budget").text, sub)
    readme = replaced(readme, {"--root " + str(datasets) + "       #":
                               f"--root {datasets} --repeats 1 --thetas 0.5 #"})
    skipped = _run_block(shell, readme)
    skipped += _run_block(shell, replaced(block("profiler-commands").text,
                                          {"--root DIR": f"--root {datasets}"}))
    skipped += _run_block(shell, replaced(block("profiler-target").text,
                                          {"--dataset Cora": f"--dataset Cora --root {datasets}"}))
    assert (tmp_path / "budgets" / "budgets.md").is_file()
    assert sum("theta_max" in r.out for r in shell.ran) >= 3
    if not torch.cuda.is_available():
        assert len(skipped) == 2 and all("rtx4090" in c for c in skipped), skipped


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_one_machine(tmp_path: Path, datasets: Path) -> None:
    """The torchrun block on this machine: two gloo ranks for PubMed's line (a 1200-node
    graph here) and Cora's, and the two-machine line as two node processes on the loopback.
    Each run directory records the world and one event log per seed."""
    text = block("torchrun").text
    one, two, three = commands(text)
    small = ["--epochs", "2", "--eval-every", "1", "--seeds", "1", "--encoder", "gcn",
             "--hidden-dim", "16", "--out-dim", "8", "--proj-dim", "8"]
    shell = _shell(tmp_path, datasets)
    shell.run(_shortened(replaced(one, {"--nproc-per-node 4": "--nproc-per-node 2",
                                        "--dataset PubMed": "--nodes 1200",
                                        "--batch-size 1024": "--batch-size 128"}),
                         [*small, "--out", "one"]))
    shell.run(_shortened(replaced(two, {"--dataset Cora": f"--dataset Cora --root {datasets}"}),
                         [*small, "--batch-size", "512", "--out", "two"]))
    for name, world, negatives in (("one", 2, "local"), ("two", 2, "global")):
        metrics = json.loads((tmp_path / name / "metrics.json").read_text())
        assert (metrics["world_size"], metrics["negatives"]) == (world, negatives)
        assert [p.name for p in (tmp_path / name).glob("seed-*/hans_events.jsonl")] == [
            "hans_events.jsonl"]
    port = _free_port()
    node = replaced(three, {"--nproc-per-node 8": "--nproc-per-node 1",
                            "HOST:29500": f"127.0.0.1:{port}",
                            "train ...": "train " + " ".join(
                                [*small, "--nodes", "600", "--mode", "minibatch",
                                 "--batch-size", "64", "--out", "three"])})
    node = node.split("#")[0].strip()
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *__import__(
        "shlex").split(node.replace("--node-rank 0", f"--node-rank {r}"))[1:]],
        cwd=tmp_path, env=shell.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-3000:] + outs[1][1][-3000:]
    metrics = json.loads((tmp_path / "three" / "metrics.json").read_text())
    assert metrics["world_size"] == 2


# --------------------------------------------------------------------------------------------
# install blocks
# --------------------------------------------------------------------------------------------


def test_install_blocks(tmp_path: Path, datasets: Path, run_dir: Path) -> None:
    """The CPU, Jetson and Raspberry Pi install blocks, and the runtime's own: every pip line
    installs into the sandbox without an index (its dependencies this environment's, so the
    CPU index URL is never reached); the Jetson line that trains on CUDA is skipped without a
    GPU; the runtime embeds the exported model."""
    work = copy_sources(tmp_path / "edgegcl")
    shell = _shell(work, datasets, Sandbox(tmp_path))
    shell.run(f"edgegcl export model.onnx --run {run_dir} --graph-out graph.npz")
    skipped = []
    for name in ("install-cpu", "install-jetson", "install-raspberry-pi", "embed-install"):
        text = block(name).text.replace("--threads N", "--threads 1").replace(
            "--batch-size B", "--batch-size 64")
        text = text.replace("--out embeddings.npy", "--out embeddings.npy --force")
        skipped += _run_block(shell, text)
        if name == "install-cpu":
            assert shell.sandbox.where("edgegcl").is_relative_to(work)
        if name == "install-raspberry-pi":
            assert shell.sandbox.where("edgegcl_embed").is_relative_to(shell.sandbox.venv)
    assert np.load(work / "embeddings.npy").shape == (200, 8)
    if not torch.cuda.is_available():
        assert skipped == [c for c in commands(block("install-jetson").text) if "jetson" in c]


def test_install_gpu(tmp_path: Path, datasets: Path) -> None:
    """The GPU block: its pip lines install into the sandbox (torch already there), then torch
    says whether it sees a GPU and Cora trains on it; without one, the training line is
    refused in one line."""
    work = copy_sources(tmp_path / "edgegcl")
    shell = _shell(work, datasets, Sandbox(tmp_path))
    gpu = _run_block(shell, replaced(block("install-gpu").text, {
        "--dataset Cora": f"--dataset Cora --root {datasets}"}))
    assert shell.sandbox.where("edgegcl").is_relative_to(work)
    if not torch.cuda.is_available():
        assert len(gpu) == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
@pytest.mark.parametrize("name", GPU_BLOCKS)
def test_gpu_commands_train_on_the_gpu(name: str, tmp_path: Path, datasets: Path) -> None:
    """Each block's CUDA commands on a GPU, shortened (PubMed is CiteSeer here)."""
    shell = _shell(tmp_path, datasets)
    for command in commands(block(name).text):
        if _gpu(command) and "cuda.is_available" not in command:
            command = command.replace("--dataset PubMed", "--dataset CiteSeer")
            shell.run(_shortened(command, SMALL))


# --------------------------------------------------------------------------------------------
# docs/
# --------------------------------------------------------------------------------------------


def test_encoders_block(tmp_path: Path, datasets: Path) -> None:
    """docs/encoders.md: its four commands (Actor and Cora from the root, a graph file with the
    ego encoder, a narrowed search), and the three lines it shows, as runs print them: a
    homophilous labelled graph's (Cora: no search), a searched one's and an unlabelled one's."""
    _graph_npz(tmp_path / "my_graph.npz")
    shell = _shell(tmp_path, datasets)
    _run_block(shell, replaced(block("encoders-train").text, {"--root DIR": f"--root {datasets}"}))
    _graph_npz(tmp_path / "unlabelled.npz", labels=False, homophily=0.1)
    shell.run(_shortened("edgegcl train --dataset unlabelled.npz", SMALL))
    shell.run(_shortened(f"edgegcl train --dataset Cora --root {datasets}", SMALL))  # homophilous
    printed = [line for r in shell.ran for line in r.err.splitlines()]
    for shown in block("encoders-choice-lines").text.splitlines():
        pattern = re.escape(shown)
        pattern = re.sub(r"\d+(\\\.\d+)?", r"-?[\\d.]+", pattern)
        pattern = re.sub(r"\b(gcn|ego|poly)\b", r"\\w+", pattern)  # any order, any choice
        pattern = pattern.replace("epochs", "epochs?")  # a short run's search: "1 epoch each"
        assert any(re.fullmatch(pattern, line) for line in printed), (
            shown, [line for line in printed if ": encoder " in line])


def test_export_commands(tmp_path: Path, run_dir: Path) -> None:
    """docs/export.md's commands: the newest run under runs/, a named run with its graph, INT8
    reusing the fp32 file, a seed's checkpoint at opset 18, the runtime (installed into the
    sandbox) at a batch size, one thread, sparse features, and through ``python -m``."""
    from scipy.sparse import csr_matrix

    from edgegcl_embed.graph import load_npz, save_npz

    work = copy_sources(tmp_path / "edgegcl")
    shutil.copytree(run_dir, work / "runs" / run_dir.name)
    shell = _shell(work, sandbox=Sandbox(tmp_path))
    text = replaced(block("export-commands").text, {
        "runs/Cora-20261125-230634": f"runs/{run_dir.name}",
        "run/seed-2/checkpoint.pt": f"runs/{run_dir.name}/seed-1/checkpoint.pt",
        "--out embeddings.npy": "--out embeddings.npy --force",
        "--out emb.npy": "--out emb.npy --force",
        "model.onnx ...": "model.onnx --graph graph.npz --out emb.npy --force"})
    lines = commands(text)
    for i, command in enumerate(lines):
        if "sparse.npz" in command:  # the training graph with x stored as CSR
            x, edges = load_npz(work / "graph.npz")
            save_npz(work / "sparse.npz", csr_matrix(x), edges)
        if i in (1, 2):  # the second export replaces the first's file
            command = command.replace("--graph-out graph.npz", "--graph-out graph.npz --force")
        shell.run(command)
    assert "runs/" in shell.ran[0].out + shell.ran[0].err  # it says which run
    got = np.load(work / "emb.npy")
    assert got.shape == (200, 8) and np.isfinite(got).all()


def test_export_javascript(tmp_path: Path, run_dir: Path) -> None:
    """docs/export.md's JavaScript lines, in node with onnxruntime-node, where both exist."""
    node = shutil.which("node")
    found = node and subprocess.run([node, "-e", "require('onnxruntime-node')"],
                                    capture_output=True, cwd=tmp_path).returncode == 0
    if not found:
        pytest.skip("needs node and the onnxruntime-node package")
    _shell(tmp_path).run(f"edgegcl export model.onnx --run {run_dir}")
    script = ("(async () => {\nconst numNodes = 3, inDim = 16;\n"
              "const x = new Float32Array(numNodes * inDim).fill(0.5);\n"
              "const edgeIndex = BigInt64Array.from([0n, 1n, 1n, 2n]), numEdges = 2;\n"
              + block("export-javascript").text
              + "\nconsole.log(embeddings.dims.join(','));\n})();\n")
    proc = subprocess.run([node, "-e", script], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "3,8", proc.stderr


def test_run_directory_files(run_dir: Path) -> None:
    """docs/run-directory.md's listing: every file a run writes is in it, and what it lists
    that this run did not write is one of the options it names."""
    listed = {line.split()[0] for line in block("run-directory-files").text.splitlines()
              if line and not line.startswith(" ")}
    written = {("seed-K/" + p.name if p.parent != run_dir else p.name)
               for p in run_dir.rglob("*") if p.is_file()}
    assert written - listed == set()
    optional = {"embeddings.npy", "seed-K/events.out.tfevents.*", "profile.json",
                "node_ids.txt", ".edgegcl.lock", "seed-K/search.json"}
    assert listed - written == optional


def test_tasks_labels_line(tmp_path: Path) -> None:
    """docs/tasks.md's line, as a run on binary labels prints it (its share is the graph's)."""
    from edgegcl.data.synthetic import SyntheticSpec, synthetic_graph

    data = synthetic_graph(SyntheticSpec(num_nodes=200, num_features=16))
    np.savez(tmp_path / "binary.npz", x=data.x.numpy(), edge_index=data.edge_index.numpy(),
             y=(data.y == 0).long().numpy())
    shell = _shell(tmp_path)
    shell.run(_shortened("edgegcl train --dataset binary.npz --encoder gcn", SMALL))
    (shown,) = block("tasks-labels-line").text.splitlines()
    pattern = re.sub(r"\d+\\.\d+", r"[\\d.]+", re.escape(shown))
    assert any(re.fullmatch(pattern, line) for line in shell.ran[-1].err.splitlines()), shown
