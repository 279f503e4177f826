"""The package's layout as docs/contributing.md states it: every module is named in its
layout block, and no module imports a layer above its own (function-level and
type-checking imports included)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {
    "base": 0, "data": 1, "nn": 1, "contrast": 1, "evaluation": 1, "training": 2,
    "budget": 3, "onnx": 3, "jobs": 4, "cli": 5}
"""Each folder of edgegcl/ by its height; the top-level modules are the base. A layer may
import its own and the ones below, not another of its height."""


def _modules(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts)


def _layout_block() -> str:
    from docblocks import block

    return block("layout").text


def _layer(path: Path) -> str:
    rel = path.relative_to(ROOT / "edgegcl")
    return rel.parts[0] if len(rel.parts) > 1 else "base"


def test_the_layout_names_every_module() -> None:
    block = _layout_block()
    sections = re.split(r"^(?=\S)", block, flags=re.M)  # a line at the left starts a folder
    missing = []
    for package in ("edgegcl", "edgegcl_embed"):
        for path in _modules(package):
            rel = path.relative_to(ROOT)
            if len(rel.parts) == 2 and package == "edgegcl":  # a top-level module: its own line
                if f"edgegcl/{path.name}" not in block and path.name != "__main__.py":
                    missing.append(str(rel))
                continue
            folder = "/".join(rel.parts[:-1]) + "/"
            named = [s for s in sections if s.startswith(folder)]
            if not any(re.search(rf"(?<![\w.]){re.escape(path.name)}", s) for s in named):
                missing.append(str(rel))
    assert missing == [], f"docs/contributing.md's layout does not name {missing}"


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = []
    for path in _modules("edgegcl"):
        here = "cli" if path.name == "__main__.py" else _layer(path)
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                parts = name.split(".")
                if parts[0] != "edgegcl" or len(parts) < 2:
                    continue
                there = parts[1] if parts[1] in LAYERS else "base"
                sibling = there != here and LAYERS[there] == LAYERS[here] and here != "base"
                if LAYERS[there] > LAYERS[here] or sibling:
                    upward.append(f"{path.relative_to(ROOT)} imports {name}")
    assert upward == [], upward
    for path in _modules("edgegcl_embed"):  # the runtime installs alone
        assert "import edgegcl." not in path.read_text() and \
            "from edgegcl." not in path.read_text().replace("from edgegcl_embed", ""), path
