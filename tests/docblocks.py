"""The code blocks of the README and docs/ as a user would paste them, and a shell that runs
them (imported by tests/test_docs.py).

Every fenced block is tagged ``<!-- block: NAME -->`` on the line before it; tests/test_docs.py
maps each name to the test that runs or checks it. A shell block runs command by command:
``edgegcl`` and ``edgegcl-embed`` (or ``python -m`` either) through their entry points in this
process, ``torchrun`` and ``python -c`` as subprocesses, and ``pip`` in a sandbox virtual
environment (its dependencies this environment's, no index, no build isolation: pip reads
``PIP_NO_BUILD_ISOLATION=0`` as ``--no-build-isolation``), so that an
install line installs what it names without touching the environment the tests run in. Where a
block names a big input (a dataset of 20 000 nodes, 2000 epochs, 8 processes) a test gives
literal replacements, each of which must occur in the block: a changed README fails the test
instead of running something else.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from helpers import capture

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             ROOT / "edgegcl_embed" / "README.md")
SHARED_DATASETS = ROOT.parent / "shared" / "datasets"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_TAG = re.compile(r"<!-- block: ([\w-]+) -->\n$")


@dataclass(frozen=True)
class Block:
    """One fenced block: its tag, file, first line, language and text."""

    name: str | None
    path: Path
    line: int
    lang: str
    text: str

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks() -> list[Block]:
    """Every fenced block of the user-facing documents, in order."""
    found = []
    for path in DOC_FILES:
        text = path.read_text()
        for m in _FENCE.finditer(text):
            before = text[:m.start()]
            tag = _TAG.search(before[-80:])
            found.append(Block(tag.group(1) if tag else None, path, before.count("\n") + 1,
                               m.group(1), m.group(2)))
    return found


def block(name: str) -> Block:
    """The block tagged ``name`` (exactly one)."""
    (found,) = [b for b in blocks() if b.name == name]
    return found


def replaced(text: str, subs: dict[str, str]) -> str:
    """``text`` with each key replaced by its value; every key must occur."""
    for old, new in subs.items():
        assert old in text, f"the block no longer says {old!r}: update its test"
        text = text.replace(old, new)
    return text


def commands(text: str) -> list[str]:
    """A shell block's commands: one per line, continuation lines joined, comments kept (shlex
    drops them), blank lines skipped."""
    joined = text.replace("\\\n", " ")
    return [line for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def variants(command: str) -> list[str]:
    """A command with optional parts in brackets (``[--quantize int8]``) as the two commands
    it stands for: without them, and with all of them."""
    optional = re.findall(r"\[(--[^\]]+)\]", command)
    if not optional:
        return [command]
    bare = re.sub(r"\s*\[--[^\]]+\]", "", command)
    full = re.sub(r"\[(--[^\]]+)\]", r"\1", command)
    return [bare, full]


@dataclass
class Result:
    argv: list[str]
    code: int
    out: str
    err: str


@dataclass
class Shell:
    """Runs commands as a user's shell would in ``work``; ``pip`` goes to the sandbox venv."""

    work: Path
    env: dict[str, str]
    sandbox: Sandbox | None = None
    ran: list[Result] = field(default_factory=list)

    def run(self, command: str, *, expect: int = 0) -> list[Result]:
        """Run one command line (``&&``-chained parts in turn, stopping at the first that
        fails); each part's exit code must be ``expect`` (the last part's, when chained)."""
        parts: list[list[str]] = [[]]
        for token in shlex.split(command, comments=True):
            if token == "&&":
                parts.append([])
            else:
                parts[-1].append(token)
        results = []
        for argv in parts:
            result = self._one(argv)
            results.append(result)
            self.ran.append(result)
            if result.code != 0:
                break
        last = results[-1]
        assert last.code == expect and len(results) == len(parts), (
            f"{command!r} exited with {last.code}:\n{last.out[-1500:]}\n{last.err[-3000:]}")
        return results

    def _one(self, argv: list[str]) -> Result:
        head, rest = _module(argv)
        if head == "edgegcl":
            from edgegcl.cli.main import main
            return self._in_process(main, argv, rest)
        if head == "edgegcl-embed":
            from edgegcl_embed.embed import main as embed_main
            return self._in_process(embed_main, argv, rest)
        if head == "pip":
            assert self.sandbox is not None, "this block's test has no pip sandbox"
            return self.sandbox.pip(argv, rest, self.work)
        if head in ("torchrun", "python"):
            exe = ([sys.executable, "-m", "torch.distributed.run"] if head == "torchrun"
                   else [sys.executable])
            proc = subprocess.run([*exe, *rest], capture_output=True, text=True,
                                  cwd=self.work, env=self.env, timeout=600)
            return Result(argv, proc.returncode, proc.stdout, proc.stderr)
        raise AssertionError(f"the docs' shell has no {argv[0]!r}: {shlex.join(argv)}")

    def _in_process(self, entry, argv: list[str], rest: list[str]) -> Result:
        before_cwd, before_env = Path.cwd(), dict(os.environ)
        os.chdir(self.work)
        os.environ.clear()
        os.environ.update(self.env)
        try:
            code, out, err = capture(entry, rest)
        finally:
            os.chdir(before_cwd)
            os.environ.clear()
            os.environ.update(before_env)
        return Result(argv, code, out, err)


def _module(argv: list[str]) -> tuple[str, list[str]]:
    """What a command runs, and its arguments: ``python3 -m edgegcl x`` is ``edgegcl x``."""
    name = argv[0]
    if name in ("python", "python3") and argv[1:2] == ["-m"]:
        module, rest = argv[2], argv[3:]
        if module == "edgegcl":
            return "edgegcl", rest
        if module == "edgegcl_embed.embed":
            return "edgegcl-embed", rest
        if module == "pip":
            return "pip", rest
        return "python", argv[1:]
    if name in ("python", "python3"):
        return "python", argv[1:]
    return name, argv[1:]


class Sandbox:
    """A virtual environment for the docs' ``pip install`` lines: its dependencies are this
    environment's (a .pth line, so nothing is downloaded), and what a line installs (edgegcl
    from a copy of the repository, the runtime alone) goes into the sandbox, checked there.
    A line already run is not run again (the result is the same)."""

    def __init__(self, where: Path) -> None:
        self.venv = where / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(self.venv)],
                       check=True, capture_output=True)
        self.python = self.venv / "bin" / "python"
        site = next((self.venv / "lib").glob("python3*/site-packages"))
        (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        self.done: dict[tuple[str, ...], Result] = {}

    def pip(self, argv: list[str], rest: list[str], cwd: Path) -> Result:
        key = (str(cwd), *rest)
        if key not in self.done:
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            env |= {"PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0",
                    "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
            proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(self.python),
                                   *rest], capture_output=True, text=True, cwd=cwd, env=env,
                                  timeout=600)
            self.done[key] = Result(argv, proc.returncode, proc.stdout, proc.stderr)
        return self.done[key]

    def where(self, module: str) -> Path:
        """The file the sandbox imports ``module`` from."""
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        out = subprocess.run([str(self.python), "-c", f"import {module}; print({module}.__file__)"],
                             capture_output=True, text=True, env=env, cwd=self.venv,
                             check=True)
        return Path(out.stdout.strip())
