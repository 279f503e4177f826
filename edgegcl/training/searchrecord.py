"""What an encoder search has measured so far, kept in the seed's directory as ``search.json``
after each candidate, so that a stop during the search loses only the candidate it was
training: ``--resume`` reads the finished candidates' figures back and trains the rest
(edgegcl.training.choice)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edgegcl import runfiles
from edgegcl.errors import UsageError
from edgegcl.training.state import write_atomic
from edgegcl.jsonfile import read_record

"""The search record's name in a seed directory."""
SEARCH_LIMIT = 1 << 16
"""The most bytes a search record is read for."""


@dataclass
class SearchRecord:
    """A search's plan (its ``candidates``, each to train ``epochs`` epochs) and what it has
    measured: each finished candidate's best validation figure (``scores``, in the
    candidates' order), the fewest epochs one trained (``trained``, fewer than ``epochs``
    where a time budget cut one), the seconds spent, and, once the first candidate (the
    reference) finished, the ``margin`` another must beat it by and the ``metric``."""

    candidates: list[str]
    epochs: int
    scores: dict[str, float] = field(default_factory=dict)
    trained: int = 0
    seconds: float = 0.0
    margin: float | None = None
    metric: str = ""

    def remaining(self) -> list[str]:
        """The candidates still to train, in order."""
        return [name for name in self.candidates if name not in self.scores]

    def kept(self) -> str:
        """The finished candidates and their figures, for the stop line ("" for none)."""
        return ", ".join(f"{name} {score:.2f}" for name, score in self.scores.items())

    def save(self, seed_dir: Path) -> None:
        """SEED_DIR/search.json, written atomically."""
        write_atomic(Path(seed_dir) / runfiles.SEARCH, json.dumps(asdict(self), indent=2) + "\n")


def read_search(seed_dir: Path) -> SearchRecord | None:
    """SEED_DIR/search.json, or None when the seed has none; every value checked (it is read
    back from a directory: nothing in it is run or used as a path), one UsageError line for a
    file that is not a search record."""
    path = Path(seed_dir) / runfiles.SEARCH
    fix = "remove it to search again"
    raw = read_record(path, "search record", fix, SEARCH_LIMIT)
    if raw is None and not path.exists():
        return None
    record = _checked(raw)
    if record is None:
        raise UsageError(f"{path} is not a search record written by edgegcl; {fix}")
    return record


def _checked(raw: Any) -> SearchRecord | None:
    """The record ``raw`` holds, or None when a key, type or value is not one edgegcl writes."""
    keys = {"candidates", "epochs", "scores", "trained", "seconds", "margin", "metric"}
    if not isinstance(raw, dict) or set(raw) != keys:
        return None
    names, epochs, scores = raw["candidates"], raw["epochs"], raw["scores"]

    def number(value: Any) -> bool:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value) and value >= 0)

    if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)
            and len(set(names)) == len(names) and type(epochs) is int and epochs >= 1
            and isinstance(scores, dict) and list(scores) == names[:len(scores)]
            and all(number(v) and v <= 100 for v in scores.values())
            and type(raw["trained"]) is int and 0 <= raw["trained"] <= epochs
            and number(raw["seconds"]) and isinstance(raw["metric"], str)
            and (raw["margin"] is None or number(raw["margin"]))
            and (raw["margin"] is not None) == bool(scores)):
        return None
    return SearchRecord(list(names), epochs, {k: float(v) for k, v in scores.items()},
                        raw["trained"], float(raw["seconds"]),
                        None if raw["margin"] is None else float(raw["margin"]), raw["metric"])
