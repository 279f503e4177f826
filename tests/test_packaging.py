"""The package as it would be published: ``python -m build`` makes a wheel and an sdist of
edgegcl and of the torch-free runtime, and the built edgegcl wheel installs into a fresh
virtual environment and runs (``--version`` and a one-epoch ``train``), from a directory that
is not the repository."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from helpers import copy_sources



def _build(source: Path, out: Path) -> tuple[Path, Path]:
    """``python -m build`` (offline: the build backend of this environment) into ``out``."""
    pytest.importorskip("build")
    pytest.importorskip("setuptools", minversion="77")
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                           str(out), str(source)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    wheel, = out.glob("*.whl")
    sdist, = out.glob("*.tar.gz")
    return wheel, sdist


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("build")
    source = copy_sources(root / "edgegcl-src")  # a copy: a build writes into its folder
    return {"edgegcl": _build(source, root / "dist"),
            "edgegcl-embed": _build(source / "edgegcl_embed", root / "dist-embed")}


def test_the_wheels_and_sdists_hold_the_package_and_its_metadata(
        built: dict[str, tuple[Path, Path]]) -> None:
    wheel, sdist = built["edgegcl"]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    for needed in ("edgegcl/cli/main.py", "edgegcl/device_profiles/cpu.toml",
                   "edgegcl/presets/paper-Cora.toml", "edgegcl_embed/runtime.py",
                   "edgegcl/py.typed"):
        assert needed in names, needed
    assert not [n for n in names if n.startswith(("tests/", "bench/"))]
    assert "edgegcl = edgegcl.cli.main:main" in entry and "edgegcl-embed" in entry
    for field in ("License-Expression: MIT", "Classifier: Programming Language :: Python :: 3",
                  "Requires-Dist: torch", "Requires-Dist: onnxruntime", "Requires-Python: >=3.10",
                  "Description-Content-Type: text/markdown", "License-File: LICENSE"):
        assert field in meta, field
    with tarfile.open(sdist) as t:
        members = t.getnames()
    for needed in ("LICENSE", "README.md", "pyproject.toml", "profiles/cpu.toml",
                   "edgegcl/training/hooks.py"):
        assert any(m.endswith("/" + needed) for m in members), needed
    runtime_wheel, _ = built["edgegcl-embed"]
    with zipfile.ZipFile(runtime_wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "edgegcl_embed/embed.py" in names and not [n for n in names if "edgegcl/" in n]
    assert "Requires-Dist: torch" not in meta and "Requires-Dist: onnxruntime" in meta


def test_the_built_wheel_installs_and_trains_in_a_fresh_venv(
        built: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")],
                   check=True, capture_output=True)
    python = tmp_path / "venv" / "bin" / "python"
    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    # its dependencies from this environment (no index here); edgegcl only from the wheel
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel, _ = built["edgegcl"]
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--no-deps", "--no-index", "--quiet", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    command = tmp_path / "venv" / "bin" / "edgegcl"
    work = tmp_path / "work"
    work.mkdir()
    version = subprocess.run([str(command), "--version"], capture_output=True, text=True,
                             cwd=work, env=env, timeout=120)
    assert version.returncode == 0 and version.stdout.startswith("edgegcl "), version.stderr
    train = subprocess.run([str(command), "train", "--nodes", "120", "--features", "8",
                            "--hidden-dim", "8", "--out-dim", "4", "--proj-dim", "4",
                            "--epochs", "1", "--out", "run"], capture_output=True, text=True,
                           cwd=work, env=env, timeout=300)
    assert train.returncode == 0, train.stderr[-2000:]
    assert (work / "run" / "metrics.json").is_file()
    where = subprocess.run([str(python), "-c", "import edgegcl, edgegcl_embed; "
                            "print(edgegcl.__file__); print(edgegcl_embed.__file__)"],
                           capture_output=True, text=True, cwd=work, env=env, check=True)
    assert all(Path(p).is_relative_to(site) for p in where.stdout.split())
