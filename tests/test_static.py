"""Static checks over the code a user or the suite runs: no module uses a name it neither
defines nor imports (pyflakes' undefined-name checks), so a NameError cannot wait in a path
that no test takes (the torchrun graph share once used ``Path`` without importing it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

checker = pytest.importorskip("pyflakes.checker")
messages = pytest.importorskip("pyflakes.messages")

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("edgegcl", "edgegcl_embed", "bench", "tests")
UNDEFINED = (messages.UndefinedName, messages.UndefinedExport, messages.UndefinedLocal,
             messages.ImportStarUsed)
"""What makes a name undefined, or undetectable (a star import hides what it defines)."""


def _undefined(source: str, filename: str) -> list[str]:
    found = checker.Checker(ast.parse(source, filename), filename=filename).messages
    return [str(m) for m in found if isinstance(m, UNDEFINED)]


def test_the_check_finds_a_name_used_without_its_import() -> None:
    code = "import os\n\ndef share():\n    return Path(os.sep)\n"
    assert _undefined(code, "share.py") == ["share.py:4:12: undefined name 'Path'"]
    assert _undefined("from pathlib import Path\n" + code, "share.py") == []


def test_no_module_uses_an_undefined_name() -> None:
    files = sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")
                   if "__pycache__" not in p.parts)
    assert len(files) > 100
    found = [line for p in files
             for line in _undefined(p.read_text(), str(p.relative_to(ROOT)))]
    assert found == []
