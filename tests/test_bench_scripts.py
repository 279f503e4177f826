"""Every script in bench/ still starts: it imports, its ``--help`` answers, and every name it
imports from edgegcl or bench (at the top or inside a function) exists, so a renamed library
function breaks CI instead of the next person's benchmark."""

from __future__ import annotations

import ast
import contextlib
import importlib
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
    if main is None:  # a library of the scripts (harness, machine, sweep)
        return
    monkeypatch.setattr(sys, "argv", [name, "--help"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 0 and "usage:" in out.getvalue()


def test_sweep_records_keep_the_ratios_as_the_results_files_do() -> None:
    from bench.sweep import ratios_text

    assert ratios_text({"hard": 30.0, "inter": 50.0, "easy": 20.0}) == "20,30,50"  # easy first
