"""Nothing is written outside the paths the user named: a training run and an edgegcl-embed
run leave an empty HOME empty (onnxruntime's telemetry, which writes a device id and an event
queue under ~/.cache/Microsoft when it loads, is off before it loads; training does not load
it at all)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np


def _run(argv: list[str], home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ORT_DISABLE_TELEMETRY", "ORT_TELEMETRY_DISABLED")}
    env.update(HOME=str(home), OMP_NUM_THREADS="1", XDG_CACHE_HOME=str(home / ".cache"))
    return subprocess.run([sys.executable, "-c", argv[0], *argv[1:]], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


def test_train_and_embed_leave_an_empty_home_empty(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    train = ("import sys; from edgegcl.cli.main import main; code = main(sys.argv[1:]); "
             "print('onnxruntime' in sys.modules); sys.exit(code)")
    done = _run([train, "train", "--nodes", "150", "--features", "16", "--epochs", "2", "--out",
                 "run"], home, work)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"  # training never loads the runtime
    assert list(home.rglob("*")) == []
    done = _run([train, "export", "m.onnx", "--run", "run"], home, work)
    assert done.returncode == 0, done.stderr
    rng = np.random.default_rng(0)
    np.savez(work / "g.npz", x=rng.normal(size=(30, 16)).astype(np.float32),
             edge_index=np.array([[0, 1, 2], [1, 2, 3]]))
    embed = "import sys; from edgegcl_embed.embed import main; sys.exit(main(sys.argv[1:]))"
    done = _run([embed, "m.onnx", "--graph", "g.npz", "--out", "z.npy"], home, work)
    assert done.returncode == 0, done.stderr
    assert list(home.rglob("*")) == [] and (work / "z.npy").is_file()
