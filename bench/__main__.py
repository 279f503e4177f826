"""``python -m bench NAME [ARGS...]``: run the benchmark ``bench/NAME.py`` (its ``main``) with
ARGS, as ``python -m bench.NAME ARGS`` does; ``python -m bench`` lists every benchmark with
the first line of its description. Each writes bench/results/ through ``bench.harness``."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from pathlib import Path

import bench
from bench import harness
from edgegcl.errors import UsageError
from edgegcl_embed.errors import InputError

HERE = Path(bench.__path__[0])


def benchmarks() -> dict[str, str]:
    """Every benchmark (a module of bench/ with a ``main``) by name, with the first line of
    its docstring; read from the source, so listing them imports nothing."""
    found = {}
    for module in pkgutil.iter_modules(bench.__path__):
        if module.name.startswith("_"):
            continue
        tree = ast.parse((HERE / f"{module.name}.py").read_text())
        if any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
            doc = (ast.get_docstring(tree) or "").strip().splitlines()
            found[module.name] = doc[0] if doc else ""
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    known = benchmarks()
    if not args or args[0] in ("-h", "--help"):
        width = max(map(len, known))
        print("usage: python -m bench NAME [ARGS...]   (python -m bench NAME --help: its "
              "options)\n")
        print("\n".join(f"  {name:<{width}}  {line}" for name, line in known.items()))
        return 0
    name, rest = args[0].replace("-", "_"), args[1:]
    if name not in known:
        print(f"python -m bench: error: no benchmark {args[0]!r}; 'python -m bench' lists them",
              file=sys.stderr)
        return 2
    sys.argv = [f"python -m bench {name}", *rest]
    try:
        result = importlib.import_module(f"bench.{name}").main()
    except (UsageError, InputError) as exc:  # a bad graph, root or option: one line
        print(f"python -m bench {name}: error: {exc}", file=sys.stderr)
        return 2
    except harness.Refused:  # the command it ran said why, in its one line
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
