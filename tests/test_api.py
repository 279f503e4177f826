"""The public API: what ``import edgegcl`` exposes, and docs/python-api.md's example run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import edgegcl

ROOT = Path(__file__).resolve().parents[1]


def test_public_names_resolve_and_are_listed() -> None:
    names = set(edgegcl.__all__)
    assert {"HANS", "ScheduledContrast", "Trainer", "AdNGCL", "make_loader", "load_graph"} <= names
    for name in names - {"__version__"}:
        assert getattr(edgegcl, name).__module__.startswith("edgegcl.")


def test_import_is_light() -> None:
    """Names load on first use: importing the package does not import torch."""
    code = "import sys, edgegcl; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_api_example_runs_as_written() -> None:
    """docs/python-api.md's own loop with PyG's GraphSAGE, as a user pastes it."""
    from docblocks import block

    code = block("api-example").text
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == [f"epoch {e}" for e in range(6)]
    micro = float(re.search(r"test_micro=([\d.]+)", lines[-1]).group(1))
    assert micro > 60.0  # 5 planted classes: chance is 20 %


def test_public_objects_document_args_and_a_running_example() -> None:
    """Every public object's docstring has an Example, and the examples run (doctest)."""
    import doctest

    for name in sorted(set(edgegcl.__all__) - {"__version__"}):
        obj = getattr(edgegcl, name)
        assert obj.__doc__ and "Example" in obj.__doc__, f"{name} has no Example"
        finder = doctest.DocTestFinder(recurse=False)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        module = sys.modules[obj.__module__]
        for test in finder.find(obj, name, module=module, globs=dict(vars(module))):
            result = runner.run(test)
            assert result.failed == 0, f"{name}'s example failed"
