"""End-to-end tests of the ``edgegcl`` command line (edgegcl.cli.main), on tiny synthetic graphs."""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import capture

from edgegcl.cli.main import main
from edgegcl.training.config import TrainConfig, build, load_toml
from edgegcl.errors import UsageError
from edgegcl.nn.model import GCNEncoder, ModelConfig

# A graph and model small enough that a seed trains in well under a second.
TINY_AUTO = ["--nodes", "120", "--features", "16", "--hidden-dim", "16", "--out-dim", "8",
             "--proj-dim", "8", "--epochs", "6", "--eval-every", "3", "--T-init", "2",
             "--T-int", "2", "--device", "cpu"]
"""The default encoder (auto: a search per seed), as the shared two-seed run trains."""
TINY = [*TINY_AUTO, "--encoder", "gcn"]
"""The rest name the encoder: what they test is not its choice, and the search's epochs add up."""
ON_A_FILE = TINY[4:]
"""``TINY`` for a graph that is not the generated one (whose shape --nodes and --features set)."""

SEED_KEYS = {"seed", "epoch_time_s", "train_time_s", "epochs_trained", "final_eta",
             "saturated_at_epoch",
             "final_epoch_time_s", "peak_memory_bytes",
             "selected_epoch", "val_micro_f1", "val_macro_f1", "test_micro_f1", "test_macro_f1",
             "probe_weight_decay", "authors_protocol", "checkpoint_probe", "history",
             "encoder", "encoder_choice", "raw_features", "metric", "majority_rate"}
F1_KEYS = ("val_micro_f1", "val_macro_f1", "test_micro_f1", "test_macro_f1")
SUMMARY_KEYS = {"epoch_time_s", "train_time_s", "peak_memory_bytes", *F1_KEYS,
                "authors_protocol_test_micro_f1", "authors_protocol_test_macro_f1",
                "majority_rate", *(f"raw_features_{k}" for k in F1_KEYS)}
TOP_KEYS = {"edgegcl_version", "dataset", "num_nodes", "num_edges", "mode", "device", "threads",
            "labelled",
            "checkpoint_seed", "seeds", "summary"}


@pytest.fixture(autouse=True)
def _private_data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch ~/.cache or the working directory's runs/ from a test."""
    monkeypatch.setenv("EDGEGCL_DATA", str(tmp_path / "data-cache"))
    monkeypatch.chdir(tmp_path)


_run_main = partial(capture, main)


@pytest.fixture(scope="module")
def two_seed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str, str]:
    """One 2-seed training run shared by the tests that inspect the run directory."""
    base = tmp_path_factory.mktemp("cli-run")
    run_dir = base / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGEGCL_DATA", str(base / "data-cache"))
        mp.chdir(base)
        code, out, err = _run_main(["train", *TINY_AUTO, "--seeds", "2", "--protocol", "both",
                                    "--out", str(run_dir)])
    return run_dir, code, out, err


@pytest.fixture(scope="module")
def metrics(two_seed_run) -> dict:
    run_dir, code, _, err = two_seed_run
    assert code == 0, err
    return json.loads((run_dir / "metrics.json").read_text())


# --------------------------------------------------------------------------- successful training

def test_train_exit_code_and_output(two_seed_run) -> None:
    run_dir, code, out, err = two_seed_run
    assert code == 0, err
    assert "Traceback" not in err
    lines = out.splitlines()
    assert any(line.startswith("test micro-F1") for line in lines), out
    assert any(line.startswith("authors' protocol (optimistic") for line in lines), out
    assert any("mean epoch time" in line and str(run_dir) in line for line in lines), out


def test_run_directory_layout(two_seed_run) -> None:
    run_dir, code, _, err = two_seed_run
    assert code == 0, err
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "checkpoint.pt", "config.toml", "graph.json", "metrics.json", "seed-0", "seed-1"]
    for seed in (0, 1):
        seed_dir = run_dir / f"seed-{seed}"
        assert sorted(p.name for p in seed_dir.iterdir()) == [
            "checkpoint.pt", "epochs.csv", "hans_events.jsonl", "result.pt", "state.pt"]


def test_metrics_keys(metrics: dict) -> None:
    assert set(metrics) == TOP_KEYS
    assert metrics["dataset"] == "synthetic"
    assert metrics["num_nodes"] == 120
    assert metrics["num_edges"] > 0
    assert metrics["mode"] == "full" and metrics["device"] == "cpu"
    assert metrics["labelled"] is True
    assert metrics["checkpoint_seed"] in (0, 1)
    assert [s["seed"] for s in metrics["seeds"]] == [0, 1]
    for s in metrics["seeds"]:
        assert set(s) == SEED_KEYS
        assert set(s["epoch_time_s"]) == {"mean", "median"}
        assert set(s["authors_protocol"]) == {"label", "epoch", "test_micro_f1", "test_macro_f1",
                                              "history"}
        assert set(s["final_eta"]) == {"hard", "inter", "easy"}
        assert [h["epoch"] for h in s["history"]] == [3, 6]
        assert s["train_time_s"] > 0 and s["epoch_time_s"]["mean"] > 0
        assert s["train_time_s"] == pytest.approx(6 * s["epoch_time_s"]["mean"])
        for key in F1_KEYS:
            assert 0.0 <= s[key] <= 100.0
    assert set(metrics["summary"]) == SUMMARY_KEYS | {"metric"}
    assert metrics["summary"]["metric"] == "micro_f1"
    for key in SUMMARY_KEYS - {"peak_memory_bytes"}:
        assert set(metrics["summary"][key]) == {"mean", "std"}
    peak = metrics["summary"]["peak_memory_bytes"]
    assert set(peak) == {"mean", "std", "max"}
    assert peak["max"] == max(s["peak_memory_bytes"] for s in metrics["seeds"])


def test_summary_is_mean_and_std_of_seeds(metrics: dict) -> None:
    seeds, summary = metrics["seeds"], metrics["summary"]
    for key in F1_KEYS:
        values = [s[key] for s in seeds]
        assert summary[key]["mean"] == pytest.approx(statistics.fmean(values))
        assert summary[key]["std"] == pytest.approx(statistics.pstdev(values))
    for key in ("test_micro_f1", "test_macro_f1"):
        values = [s["authors_protocol"][key] for s in seeds]
        assert summary[f"authors_protocol_{key}"]["mean"] == pytest.approx(statistics.fmean(values))
    assert summary["train_time_s"]["mean"] == pytest.approx(
        statistics.fmean(s["train_time_s"] for s in seeds))
    assert summary["epoch_time_s"]["mean"] == pytest.approx(
        statistics.fmean(s["epoch_time_s"]["mean"] for s in seeds))


def test_selection_and_authors_protocol(metrics: dict) -> None:
    for s in metrics["seeds"]:
        history = s["history"]
        by_epoch = {h["epoch"]: h for h in history}
        assert s["selected_epoch"] in by_epoch
        chosen = by_epoch[s["selected_epoch"]]
        assert s["val_micro_f1"] == chosen["val_micro"] == max(h["val_micro"] for h in history)
        assert s["test_micro_f1"] == chosen["test_micro"]
        authors = s["authors_protocol"]
        assert "optimistic" in authors["label"]
        evaluations = authors["history"]
        assert [a["epoch"] for a in evaluations] == [h["epoch"] for h in history]
        assert authors["test_micro_f1"] == max(a["test_micro_f1"] for a in evaluations)
        assert {a["epoch"]: a for a in evaluations}[authors["epoch"]]["test_micro_f1"] == \
            authors["test_micro_f1"]
        assert all(a["classifier_epoch"] % 20 == 0 for a in evaluations)


def test_seeds_are_independent(two_seed_run, metrics: dict) -> None:
    run_dir = two_seed_run[0]
    s0, s1 = metrics["seeds"]
    assert s0["history"] != s1["history"]
    enc0 = torch.load(run_dir / "seed-0" / "checkpoint.pt", weights_only=True)["encoder"]
    enc1 = torch.load(run_dir / "seed-1" / "checkpoint.pt", weights_only=True)["encoder"]
    assert not torch.equal(enc0["conv1.lin.weight"], enc1["conv1.lin.weight"])


def test_checkpoints_load_into_the_encoder(two_seed_run, metrics: dict) -> None:
    run_dir = two_seed_run[0]
    paths = [run_dir / "checkpoint.pt", run_dir / "seed-0" / "checkpoint.pt",
             run_dir / "seed-1" / "checkpoint.pt"]
    loaded = [torch.load(p, weights_only=True) for p in paths]
    for ckpt in loaded:
        assert {"format", "config", "in_dim", "encoder"} <= set(ckpt)
        assert ckpt["format"].startswith("edgegcl-checkpoint")
        assert ckpt["in_dim"] == 16
        cfg = ckpt["config"]
        encoder = GCNEncoder(ckpt["in_dim"], ModelConfig(cfg["hidden_dim"], cfg["out_dim"],
                                                          cfg["proj_dim"], cfg["activation"]))
        encoder.load_state_dict(ckpt["encoder"])  # strict: every key and shape must match
        z = encoder(torch.randn(5, 16), torch.tensor([[0, 1, 2], [1, 2, 3]]))
        assert z.shape == (5, 8)
    # The run-level checkpoint is the chosen seed's.
    top, per_seed = loaded[0], loaded[1:]
    chosen = per_seed[metrics["checkpoint_seed"]]
    assert top["seed"] == metrics["checkpoint_seed"]
    assert all(torch.equal(top["encoder"][k], chosen["encoder"][k]) for k in chosen["encoder"])
    for seed, ckpt in enumerate(per_seed):
        assert ckpt["epoch"] == metrics["seeds"][seed]["selected_epoch"]
    best_val = max(s["val_micro_f1"] for s in metrics["seeds"])
    assert metrics["seeds"][metrics["checkpoint_seed"]]["val_micro_f1"] == best_val


def test_config_toml_reloads(two_seed_run) -> None:
    run_dir = two_seed_run[0]
    cfg = build(load_toml(run_dir / "config.toml"), {})
    expected = TrainConfig(nodes=120, features=16, hidden_dim=16, out_dim=8, proj_dim=8, epochs=6,
                           eval_every=3, T_init=2, T_int=2, device="cpu", seeds=2,
                           out=str(run_dir), protocol="both",
                           mode="full")  # --mode auto's choice, kept for --resume
    assert cfg == expected
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    chosen = metrics["seeds"][metrics["checkpoint_seed"]]["encoder"]  # auto: the seed's choice
    assert ckpt["config"] == expected.with_encoder(chosen).to_dict()


def test_hans_event_logs(two_seed_run, metrics: dict) -> None:
    run_dir = two_seed_run[0]
    for seed in (0, 1):
        lines = (run_dir / f"seed-{seed}" / "hans_events.jsonl").read_text().splitlines()
        assert lines
        events = [json.loads(line) for line in lines]
        last_eta = {}
        for ev in events:
            assert isinstance(ev, dict)
            assert set(ev) == {"epoch", "category", "delta_eta", "eta", "reason"}
            assert isinstance(ev["epoch"], int) and 0 <= ev["epoch"] <= 6
            # "all": a decision about every category (gate, saturation, swap), whose eta is
            # the share of theta_max in use
            assert ev["category"] in {"hard", "inter", "easy", "all"}
            assert isinstance(ev["reason"], str) and ev["reason"]
            assert 0.0 <= ev["eta"] <= 1.0 and math.isfinite(ev["delta_eta"])
            if ev["category"] != "all":
                last_eta[ev["category"]] = ev["eta"]
        epochs = [ev["epoch"] for ev in events]
        assert epochs == sorted(epochs)
        assert {ev["category"] for ev in events if ev["epoch"] == 0} == {"hard", "inter", "easy"}
        final = metrics["seeds"][seed]["final_eta"]
        assert last_eta == pytest.approx(final)


# --------------------------------------------------------------------------- config file + flags

def test_config_file_with_flag_override(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg_file = tmp_path / "my.toml"
    cfg_file.write_text('[run]\nepochs = 4\neval_every = 2\n[schedule]\ntheta_max = 0.5\n'
                        'ratios = "easy=10,hard=40,inter=50"\n[synthetic]\nnodes = 80\n[contrast]\ntau = 0.3\n')
    out = tmp_path / "run"
    i = TINY.index("--nodes")
    flags = TINY[:i] + TINY[i + 2:]  # no --nodes flag: the file's value must be used
    code = main(["train", *flags, "--config", str(cfg_file), "--theta-max", "0.7",
                 "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    resolved = load_toml(out / "config.toml")
    assert resolved["theta_max"] == 0.7      # flag beats file
    assert resolved["ratios"] == {"easy": 10.0, "hard": 40.0, "inter": 50.0}  # file beats default
    assert resolved["nodes"] == 80           # file beats default
    assert resolved["tau"] == 0.3            # file beats default
    assert resolved["epochs"] == 6           # TINY's --epochs 6 beats the file's 4
    assert resolved["eval_every"] == 3       # TINY's --eval-every 3 beats the file's 2
    assert resolved["lr"] == TrainConfig().run.lr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["num_nodes"] == 80
    assert [h["epoch"] for h in metrics["seeds"][0]["history"]] == [3, 6]


# --------------------------------------------------------------------------- user graph without labels

def test_npz_graph_without_labels(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rng = np.random.default_rng(0)
    n = 60
    x = rng.standard_normal((n, 10)).astype(np.float32)
    src = rng.integers(0, n, 300)
    dst = rng.integers(0, n, 300)
    graph = tmp_path / "g.npz"
    np.savez(graph, x=x, edge_index=np.stack([np.concatenate([src, dst]),
                                              np.concatenate([dst, src])]))
    out = tmp_path / "run"
    code = main(["train", *ON_A_FILE, "--dataset", str(graph), "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "test micro-F1" not in captured.out
    assert "mean epoch time" in captured.out
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["labelled"] is False
    assert metrics["num_nodes"] == n and metrics["dataset"] == "g.npz"
    assert set(metrics["summary"]) == {"epoch_time_s", "train_time_s", "peak_memory_bytes"}
    seed = metrics["seeds"][0]
    assert not any(key in seed for key in (*F1_KEYS, "authors_protocol", "history", "selected_epoch"))
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
    assert ckpt["in_dim"] == 10 and ckpt["epoch"] == 6
    assert (out / "seed-0" / "hans_events.jsonl").read_text().strip()


# --------------------------------------------------------------------------- usage errors

def _assert_usage_error(code: int, out: str, err: str) -> str:
    assert code == 2, (code, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].strip(), repr(err)
    assert lines[0].startswith("edgegcl: error:"), repr(err)
    assert "Traceback" not in err
    assert out == ""
    return lines[0]


def _expect_usage_error(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    return _assert_usage_error(code, captured.out, captured.err)


@pytest.mark.parametrize("extra, needle", [
    (["--dataset", "NoSuchDataset"], "NoSuchDataset"),
    (["--ratios", "10,10,10"], "ratios"),
    (["--theta-max", "1.5"], "theta"),
    (["--tau", "0.001"], "tau"),
])
def test_bad_values(tmp_path: Path, capsys: pytest.CaptureFixture, extra: list[str],
                    needle: str) -> None:
    out = tmp_path / "run"
    line = _expect_usage_error(["train", *TINY, *extra, "--out", str(out)], capsys)
    assert needle in line
    assert not out.exists(), "nothing may be written on a usage error"


@pytest.mark.parametrize("argv", [
    ["train", "--epochs", "abc"],
    ["train", "--no-such-flag"],
    ["fly"],
    [],
])
def test_argparse_errors_are_one_line(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    captured = capsys.readouterr()
    line = _assert_usage_error(info.value.code, captured.out, captured.err)
    if "abc" in argv:
        assert "epochs" in line and "abc" in line


def test_unknown_key_in_config_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg_file = tmp_path / "bad.toml"
    cfg_file.write_text("[run]\nepochs = 3\nlearning_rate = 0.1\n")
    out = tmp_path / "run"
    line = _expect_usage_error(["train", *TINY, "--config", str(cfg_file), "--out", str(out)], capsys)
    assert "learning_rate" in line
    assert not out.exists()


def test_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    line = _expect_usage_error(["train", *TINY, "--config", str(tmp_path / "absent.toml"),
                                "--out", str(out)], capsys)
    assert "absent.toml" in line
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_without_cuda(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    line = _expect_usage_error(["train", *TINY, "--device", "cuda", "--out", str(out)], capsys)
    assert "cuda" in line
    assert not out.exists()


def test_npz_with_out_of_range_edge(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    graph = tmp_path / "bad.npz"
    np.savez(graph, x=np.ones((5, 3), dtype=np.float32),
             edge_index=np.array([[0, 1, 2], [1, 2, 7]]), y=np.zeros(5, dtype=np.int64))
    out = tmp_path / "run"
    line = _expect_usage_error(["train", *ON_A_FILE, "--dataset", str(graph), "--out", str(out)],
                               capsys)
    assert "7" in line and "bad.npz" in line
    assert not out.exists()


def test_existing_non_empty_out_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    out.mkdir()
    keep = out / "results.txt"
    payload = b"precious results\x00\xff\n"
    keep.write_bytes(payload)
    mtime = keep.stat().st_mtime_ns
    line = _expect_usage_error(["train", *TINY, "--out", str(out)], capsys)
    assert str(out) in line
    assert keep.read_bytes() == payload and keep.stat().st_mtime_ns == mtime
    assert [p.name for p in out.iterdir()] == ["results.txt"]


def test_existing_empty_out_is_used(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    out.mkdir()
    code = main(["train", *TINY, "--epochs", "3", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert (out / "metrics.json").is_file()


def test_missing_planetoid_dataset_fails_fast(tmp_path: Path, capsys: pytest.CaptureFixture,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.setenv("EDGEGCL_DATA", str(cache))
    out = tmp_path / "run"
    start = time.monotonic()
    line = _expect_usage_error(["train", *ON_A_FILE, "--dataset", "Cora", "--root", str(root),
                                "--out", str(out)], capsys)
    assert time.monotonic() - start < 30.0, "an offline machine must fail fast"
    assert "Cora" in line and str(root) in line
    assert not out.exists()
    assert not cache.exists() or not any(cache.iterdir()), "nothing may be written to the cache"
    written = [p for p in root.rglob("*") if p.is_file()]
    assert written == [], written


# --------------------------------------------------------------------------- the installed script

def test_console_script(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("edgegcl")
    cmd = [str(script)] if script.exists() else None
    if cmd is None:
        found = shutil.which("edgegcl")
        cmd = [found] if found else [sys.executable, "-m", "edgegcl.cli.main"]
    env = {**os.environ, "EDGEGCL_DATA": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "run"
    proc = subprocess.run([*cmd, "train", *TINY, "--epochs", "3", "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert any("test micro-F1" in line for line in proc.stdout.splitlines()), proc.stdout
    assert (out / "metrics.json").is_file()


def test_python_dash_m_edgegcl_reports_bad_input_in_one_line() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "edgegcl", "train", "--ratios", "1,2"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgegcl: error:") and "--ratios" in lines[0]


def test_a_named_dataset_starts_from_its_tuned_defaults(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``--dataset CiteSeer`` without --config trains with presets/CiteSeer.toml under the
    flags, and says so; --config replaces the tuned file."""
    import edgegcl.jobs.start
    from edgegcl.data import SyntheticSpec, synthetic_graph

    monkeypatch.setattr(edgegcl.jobs.start, "load_graph",  # CiteSeer's settings on a tiny graph
                        lambda *a, **k: synthetic_graph(SyntheticSpec(num_nodes=120, num_features=16)))
    code, _, err = _run_main(["train", "--dataset", "citeseer", *ON_A_FILE, "--out", "tuned"])
    assert code == 0, err
    assert "tuned defaults, CiteSeer.toml" in err
    cfg = build(load_toml(tmp_path / "tuned" / "config.toml"), {})
    assert (cfg.contrast.tau, cfg.model.hidden_dim, cfg.run.epochs) == (0.9, 16, 6)  # the file's tau, the flags
    (tmp_path / "plain.toml").write_text("[run]\neval_every = 3\n")
    code, _, err = _run_main(["train", "--dataset", "citeseer", *ON_A_FILE, "--out", "plain",
                              "--config", "plain.toml"])
    assert code == 0 and "tuned defaults" not in err, err
    assert load_toml(tmp_path / "plain" / "config.toml")["tau"] == TrainConfig().contrast.tau


def test_hardest_pick_with_sampled_strata_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "edgegcl", "train", "--scheduler", "hans",
                           "--pick", "hardest", "--stratify", "sampled",
                           "--out", str(tmp_path / "r")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--stratify exact" in proc.stderr and not (tmp_path / "r").exists()


# --------------------------------------------------------------------------- start-up and flags

def test_ctrl_c_while_starting_up_is_one_line_and_130(tmp_path: Path) -> None:
    """SIGINT while torch and the rest load (before the first epoch): no traceback."""
    import signal

    env = {**os.environ, "OMP_NUM_THREADS": "1", "EDGEGCL_DATA": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "edgegcl", "train",
                             *TINY, "--out", str(tmp_path / "run")], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # importtime reports each module as its import ends
        if line.rstrip().endswith("| edgegcl.cli.main"):
            break
    time.sleep(0.2)  # main() is importing torch now
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    lines = [line for line in err.splitlines() if not line.startswith("import time:")]
    assert proc.returncode == 130 and lines == ["edgegcl: interrupted"], err[-3000:]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("module", ["edgegcl", "edgegcl_embed.embed"])
def test_ctrl_c_inside_exec_still_exits_130(tmp_path: Path, module: str) -> None:
    """A Ctrl-C that lands in ``exec`` of a string (a dataclass being built while modules
    import) and is handled still ends ``python -m`` with 130, not killed by SIGINT."""
    (tmp_path / "sitecustomize.py").write_text(
        "import argparse\n"
        "def _parse(self, *a, **k):\n"
        "    exec('raise KeyboardInterrupt')\n"
        "argparse.ArgumentParser.parse_args = _parse\n")
    path = [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130 and proc.stderr.strip().endswith(": interrupted"), proc.stderr


@pytest.mark.parametrize("form", [["--fanout", "-1,5"], ["--fanout=-1,5"]])
def test_a_negative_fanout_is_a_value(tmp_path: Path, form: list[str]) -> None:
    code, _, err = _run_main(["train", *TINY, "--epochs", "2", "--mode", "minibatch",
                              "--batch-size", "32", *form, "--out", "run"])
    assert code == 0, err
    assert load_toml(tmp_path / "run" / "config.toml")["fanout"] == [-1, 5]


def test_a_batch_of_one_anchor_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    line = _expect_usage_error(["train", *TINY, "--mode", "minibatch", "--batch-size", "1",
                                "--out", "run"], capsys)
    assert "--batch-size must be in [2, " in line and "no negatives" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("code", ["ENOSPC", "EROFS", "EDQUOT"])
@pytest.mark.parametrize("as_torch", [False, True])
def test_export_onto_a_refusing_disk_is_one_line_and_keeps_the_previous_file(
        two_seed_run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str,
        as_torch: bool) -> None:
    import errno

    import onnx

    run_dir = two_seed_run[0]
    number = getattr(errno, code)
    target = tmp_path / "model.onnx"
    target.write_bytes(b"previous model")

    def refused(model, path, *args, **kwargs):
        Path(path).write_bytes(b"partial")
        if as_torch:
            raise RuntimeError(f"file write failed: [Errno {number}] {os.strerror(number)}")
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(onnx, "save", refused)
    exit_code, out, err = _run_main(["export", str(target), "--run", str(run_dir), "--force"])
    errors = [line for line in err.splitlines() if "error" in line or "Traceback" in line]
    assert exit_code == 2 and out == "" and len(errors) == 1, err
    assert f"cannot write {target} ({os.strerror(number)})" in errors[0]
    assert target.read_bytes() == b"previous model"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary


@pytest.mark.parametrize("argv, named", [
    (["--pick", "hardest"], "--pick"),  # the default scheduler is random: no strata
    (["--gate", "any", "--category-loss", "sum"], "--gate, --category-loss"),
    (["--scheduler", "none", "--theta-max", "0.5"], "--theta-max"),
])
def test_an_option_the_scheduler_does_not_use_is_refused(tmp_path: Path, argv: list[str],
                                                         named: str) -> None:
    code, _, err = _run_main(["train", *TINY, *argv, "--out", str(tmp_path / "r")])
    assert code == 2 and err.count("\n") == 1 and named in err and "--scheduler hans" in err
    assert not (tmp_path / "r").exists()
    if argv[0] != "--scheduler":  # with HANS the same options train
        code, _, err = _run_main(["train", *TINY, "--scheduler", "hans", *argv,
                                  "--out", str(tmp_path / "ok")])
        assert code == 0, err


# --------------------------------------------------------------------------- a failed start

def test_a_failed_start_leaves_no_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from edgegcl.data.sampling import pyg_sampler_available
    from edgegcl.training import seeds as run_module

    if not pyg_sampler_available():  # the real case: a sampler that is not installed
        out = tmp_path / "pyg"
        code = main(["train", *TINY, "--mode", "minibatch", "--batch-size", "32",
                     "--sampler", "pyg", "--out", str(out)])
        assert code == 2 and "sampler 'pyg' needs" in capsys.readouterr().err
        assert not out.exists()

    def refuse(*args: object, **kwargs: object) -> None:
        raise UsageError("refused before the first epoch")
    monkeypatch.setattr(run_module, "train_seed", refuse)
    assert main(["train", *TINY, "--out", str(tmp_path / "new")]) == 2
    assert not (tmp_path / "new").exists()
    assert main(["train", *TINY]) == 2 and not (tmp_path / "runs").exists()
    given = tmp_path / "given"  # an empty directory the user made stays, empty
    given.mkdir()
    assert main(["train", *TINY, "--out", str(given)]) == 2
    assert given.is_dir() and list(given.iterdir()) == []


def test_a_crash_after_an_epoch_keeps_the_run_directory(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the first epoch a run can be resumed: its directory is kept."""
    from edgegcl.training import seeds as run_module
    from edgegcl.training.hooks import Hook

    real = run_module.train_seed

    class Crash(Hook):  # after the command's own hooks, before the state is saved
        def epoch_end(self, seed: object, row: object, events: object) -> None:
            raise RuntimeError("power cut")

    def crash_after_one_epoch(*args: object, hooks: list[Hook], **kwargs: object):
        return real(*args, hooks=[*hooks, Crash()], **kwargs)
    monkeypatch.setattr(run_module, "train_seed", crash_after_one_epoch)
    with pytest.raises(RuntimeError, match="power cut"):
        main(["train", *TINY, "--out", str(tmp_path / "run")])
    assert (tmp_path / "run" / "config.toml").is_file()


def test_run_directories_are_named_by_the_canonical_dataset_name(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from edgegcl.jobs.rundir import run_name

    assert [run_name(n) for n in ("cora", "CITESEER", "amazon_photo", "SYNTHETIC",
                                   "graphs/my.graph.npz")] == \
        ["Cora", "CiteSeer", "Amazon-Photo", "synthetic", "my.graph"]
    assert main(["train", *TINY, "--epochs", "2", "--dataset", "Synthetic"]) == 0
    rng = np.random.default_rng(0)
    edges = rng.integers(0, 40, (2, 200))
    np.savez(tmp_path / "my.graph.npz", x=rng.standard_normal((40, 8)).astype(np.float32),
             edge_index=np.concatenate([edges, edges[::-1]], axis=1))
    assert main(["train", *ON_A_FILE, "--epochs", "2", "--dataset",
                 str(tmp_path / "my.graph.npz")]) == 0
    made = sorted(p.name.rsplit("-", 2)[0] for p in (tmp_path / "runs").iterdir())
    assert made == ["my.graph", "synthetic"], made


def test_one_seed_prints_no_spread(tmp_path: Path, capsys: pytest.CaptureFixture,
                                   two_seed_run) -> None:
    assert main(["train", *TINY, "--epochs", "2", "--out", str(tmp_path / "one")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("test micro"))
    assert "±" not in line and "seeds" not in line
    _, _, out, _ = two_seed_run
    line = next(x for x in out.splitlines() if x.startswith("test micro"))
    assert "±" in line and "over 2 seeds" in line


def test_a_file_setting_what_the_run_does_not_read_is_refused_as_a_flag_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HANS's gate window set in a file that runs the random subset does nothing: one line
    naming the key and the file, nothing written; a run's own config.toml, whose unread keys
    hold their defaults, is taken as it is."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gate.toml").write_text('[schedule]\nscheduler = "random"\n[hans]\ne = 3\n')
    code, _, err = capture(main, ["train", "--config", "gate.toml", *TINY, "--out", "r"])
    assert code == 2 and err.count("\n") == 1, err
    assert "--e (set in gate.toml): --scheduler random does not use it" in err
    assert not (tmp_path / "r").exists()
    code, _, err = capture(main, ["train", *TINY, "--epochs", "1", "--out", "first"])
    assert code == 0, err
    code, _, err = capture(main, ["train", "--config", "first/config.toml", "--out", "again",
                                  "--epochs", "1"])
    assert code == 0, err
