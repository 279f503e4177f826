"""The ways a job ends other than by finishing, light enough for the command line to catch
before torch loads.

``UsageError``: the user gave us something we cannot use; the CLI turns it into a single line
on stderr and exit code 2; everything else that is not listed here is a bug and keeps its
traceback. It is edgegcl-embed's ``InputError`` (one type for bad input in both programs, one
``first_line``) and a ``ValueError``, so library callers catch it as either. ``Stopped``: a run
stopped on request with its state saved; ``RankLost``: under torchrun another rank stopped;
``ExportCheckError``: an exported model disagrees with torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgegcl_embed.errors import InputError, first_line, shown

__all__ = ["Asking", "ExportCheckError", "PathNotNamed", "RankLost", "Stopped", "UsageError",
           "first_line"]


class UsageError(InputError, ValueError):
    """Bad input from the user: the message names the problem and the fix, in one line.

    Example:
        >>> from edgegcl import TrainConfig
        >>> try:
        ...     TrainConfig(theta_max=2)
        ... except UsageError as exc:
        ...     print(exc)
        --theta-max must be in [0, 1], ...
    """


class Asking(UsageError):
    """A refusal that asks for arguments: ``before`` the arguments (``args``: each name with
    the value to pass, None for any, True for a switch) and ``after`` them. The message asks in Python's words
    (``graph=``, ``node_table='n.csv'``); the command line shows ``command_line()``'s
    (``--graph``, ``--node-table n.csv``): each interface answers in its own.

    Example:
        >>> exc = Asking("the run needs its graph: pass ", [("graph", "g.csv")])
        >>> str(exc), exc.command_line()
        ("the run needs its graph: pass graph='g.csv'", 'the run needs its graph: pass --graph g.csv')
    """

    def __init__(self, before: str, args: list[tuple[str, str | bool | None]],
                 after: str = "") -> None:
        self.before, self.asked, self.after = before, args, after
        super().__init__(before + ", ".join(
            f"{name}=" if value is None else f"{name}=True" if value is True else
            f"{name}={shown(str(value), 200)!r}" for name, value in args) + after)

    def __reduce__(self) -> tuple[Any, ...]:  # sent to the other ranks under torchrun
        return _asking, (type(self), self.before, self.asked, self.after)

    def command_line(self) -> str:
        """The message with the flags that pass the arguments."""
        return self.before + " ".join(
            f"--{name.replace('_', '-')}" + ("" if value is None or value is True
                                             else f" {shown(str(value), 200)}")
            for name, value in self.asked) + self.after


def _asking(kind: type[Asking], before: str, asked: list[tuple[str, str | bool | None]],
            after: str) -> Asking:
    """An ``Asking`` (or subclass) rebuilt from its parts: what unpickling calls."""
    made = kind.__new__(kind)
    Asking.__init__(made, before, asked, after)
    return made


class PathNotNamed(Asking):
    """A file (config, run, checkpoint) names paths the user has not: they are not used
    (edgegcl.data.datasets.check_recorded_paths). ``source`` is the file, ``names`` what it
    names, in words (``names the graph file g.csv and the node table n.csv``), ``paths`` each
    path with the argument that passes it (``("node_table", "n.csv")``), all of them, so that
    one answer gives everything.

    Example:
        >>> print(PathNotNamed("run/config.toml", "names the graph file g.csv",
        ...                    [("graph", "g.csv")]))
        run/config.toml names the graph file g.csv, a path a file cannot choose (nothing was read); if it is yours, pass graph='g.csv'
    """

    def __init__(self, source: object, names: str, paths: list[tuple[str, str]],
                 untouched: str = "nothing was read") -> None:
        one = len(paths) == 1
        super().__init__(f"{source} {names}, {'a path' if one else 'paths'} a file cannot "
                         f"choose ({untouched}); if {'it is' if one else 'they are'} yours, "
                         "pass ", list(paths))


class Stopped(Exception):
    """Training stopped on request (SIGINT / SIGTERM) after an epoch, its state saved, or
    before seed ``seed`` (0-based) trained an epoch (``epoch`` 0: the seeds before it are
    finished; ``searched``: the figures its encoder search kept, "" for none). A job sets ``run_dir`` (where ``--resume`` continues; None when the stop came
    before the run's first epoch, whose new directory is then removed: nothing to resume)
    and ``signum`` (the signal that asked, if any). The message counts seeds from 1, as the
    progress line does.

    Example:
        >>> str(Stopped(seed=0, epoch=12))
        'stopped after epoch 12 of seed 1'
    """

    def __init__(self, seed: int, epoch: int, run_dir: Path | None = None,
                 signum: int | None = None, searched: str = "") -> None:
        super().__init__(f"stopped after epoch {epoch} of seed {seed + 1}" if epoch else
                         f"stopped during seed {seed + 1}'s encoder search (its finished "
                         f"candidates' figures are kept: {searched})" if searched else
                         f"stopped before seed {seed + 1} trained an epoch")
        self.seed, self.epoch, self.run_dir, self.signum = seed, epoch, run_dir, signum
        self.searched = searched


class RankLost(RuntimeError):
    """A collective failed because another rank stopped (died, was killed or timed out);
    ``run_dir``: the run whose last saved state ``--resume`` continues (set by the job)."""

    run_dir: Path | None = None


class ExportCheckError(Exception):
    """onnxruntime and torch disagree on an exported model: a bug, not bad input."""


OUT_OF_MEMORY_TEXTS = (
    "CUDA out of memory",  # the CUDA caching allocator (torch.OutOfMemoryError)
    "CUDA error: out of memory",  # cudaErrorMemoryAllocation outside it (context creation, ...)
    "DefaultCPUAllocator: can't allocate memory",  # c10 alloc_cpu, posix_memalign failed
    "DefaultCPUAllocator: not enough memory",  # c10 alloc_cpu on Windows and Android
    "CUBLAS_STATUS_ALLOC_FAILED",  # cuBLAS could not allocate its handle or workspace
    "CUDNN_STATUS_ALLOC_FAILED",  # cuDNN could not allocate
)
"""What torch's allocators put in the RuntimeError they raise when memory runs out (torch 2.x)."""


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` means "this needs more memory than there is" (and not a bug).

    Python's ``MemoryError`` (numpy's too), ``torch.OutOfMemoryError`` and the ``RuntimeError``
    texts the allocators raise (OUT_OF_MEMORY_TEXTS); any other error, even one that mentions
    memory ("an illegal memory access"), or cuDNN's ambiguous CUDNN_STATUS_NOT_SUPPORTED,
    is not: it must surface instead of being taken for a lack of memory. Needs no torch.
    """
    if isinstance(exc, MemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc) for t in OUT_OF_MEMORY_TEXTS)


def out_of_memory_line(exc: BaseException, fix: str) -> str:
    """The one line for running out of memory: what the allocator said (numpy's and torch's
    name the size they asked for) and ``fix``."""
    said = first_line(exc) if str(exc).strip() else "an allocation failed"
    return f"out of memory ({said}); {fix}"
