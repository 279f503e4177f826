"""The run directory's file safety: one atomic-write helper whose refused writes (full,
read-only, forbidden, over quota) are one line that leaves the previous file and no temporary,
the configuration hash seed files carry, and the lock that keeps a second writer out."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from edgegcl.training.config import TrainConfig
from edgegcl.errors import UsageError
from edgegcl import runfiles
from edgegcl.training.lock import RunLock
from edgegcl.training.state import config_hash, save_atomic, write_atomic
from edgegcl_embed.errors import InputError
from edgegcl_embed.files import npy_writer

REFUSALS = {errno.ENOSPC: "No space left on device", errno.EROFS: "Read-only file system",
            errno.EACCES: "Permission denied", errno.EDQUOT: "Disk quota exceeded"}


def _as_oserror(code: int) -> BaseException:
    return OSError(code, os.strerror(code))


def _as_torch_error(code: int) -> BaseException:
    """How torch.save reports a refused write: a RuntimeError naming the errno in its text."""
    return RuntimeError(f"[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed "
                        f"writing file data/0: file write failed ([Errno {code}] "
                        f"{os.strerror(code)})")


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("code", list(REFUSALS))
@pytest.mark.parametrize("raise_as", [_as_oserror, _as_torch_error])
def test_a_refused_save_is_one_line_and_keeps_the_previous_file(tmp_path, monkeypatch, code,
                                                                raise_as) -> None:
    target = tmp_path / "state.pt"
    save_atomic({"epoch": 1}, target)
    before = target.read_bytes()

    def refused(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise raise_as(code)

    monkeypatch.setattr(torch, "save", refused)
    with pytest.raises(UsageError) as err:
        save_atomic({"epoch": 2}, target)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"cannot write {target}")
    assert REFUSALS[code] in line and "free space" in line
    assert target.read_bytes() == before and _leftovers(tmp_path) == []
    assert torch.load(target, weights_only=True) == {"epoch": 1}


def test_a_temporary_that_cannot_be_removed_does_not_hide_the_cause(tmp_path, monkeypatch):
    """The disk turned read-only mid-write: removing the temporary fails as well, and the
    one line still names the first failure."""
    target = tmp_path / "metrics.json"
    write_atomic(target, "previous\n")
    real_unlink = Path.unlink

    def write_then_readonly(self, data):
        real_write(self, data[:3])
        raise _as_oserror(errno.EROFS)

    def unlink(self, missing_ok=False):
        if self.name.endswith(".tmp"):
            raise _as_oserror(errno.EROFS)
        return real_unlink(self, missing_ok=missing_ok)

    real_write = Path.write_bytes
    monkeypatch.setattr(Path, "write_bytes", write_then_readonly)
    monkeypatch.setattr(Path, "unlink", unlink)
    with pytest.raises(UsageError, match="Read-only file system") as err:
        write_atomic(target, "new\n")
    assert "\n" not in str(err.value) and target.read_text() == "previous\n"


def test_a_bug_while_writing_keeps_its_traceback_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "state.pt"

    def buggy(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise RuntimeError("some bug in the caller")  # not the disk: no errno in it

    monkeypatch.setattr(torch, "save", buggy)
    with pytest.raises(RuntimeError, match="some bug"):
        save_atomic({"epoch": 1}, target)
    assert not target.exists() and _leftovers(tmp_path) == []


def test_temporaries_are_this_process_own(tmp_path, monkeypatch) -> None:
    names = []
    real_save = torch.save

    def record(obj, f, *args, **kwargs):
        names.append(Path(f.name))
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", record)
    save_atomic({"epoch": 1}, tmp_path / "state.pt")
    assert names[0].parent == tmp_path and str(os.getpid()) in names[0].name
    assert (tmp_path / "state.pt").exists() and _leftovers(tmp_path) == []


def test_the_runtime_npy_writer_shares_the_helper(tmp_path, monkeypatch) -> None:
    out = tmp_path / "emb.npy"
    np.save(out, np.zeros((2, 2), dtype=np.float32))
    before = out.read_bytes()

    def full(fd, offset, length):
        raise _as_oserror(errno.ENOSPC)

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(InputError, match="No space left on device") as err:
        with npy_writer(out, (100, 8)) as emb:
            emb[:] = 1.0
    assert "\n" not in str(err.value) and out.read_bytes() == before
    assert _leftovers(tmp_path) == []


def test_config_hash_ignores_what_a_resume_may_change() -> None:
    base = TrainConfig()
    same = TrainConfig(epochs=5000, device="cpu", out="elsewhere")
    assert config_hash(base) == config_hash(same) and len(config_hash(base)) == 64
    for change in ({"tau": 0.5}, {"theta_max": 0.3}, {"graph_seed": 7}, {"ratios": "easy=10,hard=40,inter=50"}):
        assert config_hash(TrainConfig(**change)) != config_hash(base), change


def test_train_seeds_into_a_directory_another_thread_holds_is_refused(tmp_path) -> None:
    """A second writer in the same process (another thread's train_seeds, or the caller's own
    lock) is refused as another process is: the lock is per holder, not per process."""
    import threading

    from edgegcl.data import SyntheticSpec, synthetic_graph
    from edgegcl import train_seeds

    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with RunLock(tmp_path):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(30)
        cfg = TrainConfig(epochs=1, seeds=1, hidden_dim=8, out_dim=4, proj_dim=4,
                          encoder="gcn")
        with pytest.raises(UsageError, match="being written by another edgegcl process"):
            train_seeds(cfg, synthetic_graph(SyntheticSpec(num_nodes=60, num_features=8)),
                        tmp_path, torch.device("cpu"))
        assert not (tmp_path / "config.toml").exists()
    finally:
        release.set()
        thread.join()


def test_a_second_lock_on_a_run_directory_is_refused_until_released(tmp_path) -> None:
    first = RunLock(tmp_path)
    assert (tmp_path / runfiles.LOCK).read_text().strip() == str(os.getpid())
    with pytest.raises(UsageError, match=f"another edgegcl process \\(pid {os.getpid()}\\)"):
        RunLock(tmp_path)
    first.release()
    assert not (tmp_path / runfiles.LOCK).exists()
    with RunLock(tmp_path) as run_dir:  # free again
        assert run_dir == tmp_path
    assert not (tmp_path / runfiles.LOCK).exists()


HOLD = ("import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.write(fd, str(os.getpid()).encode())\n"
        "print('held', flush=True)\n"
        "time.sleep(120)\n")


def test_a_lock_held_by_a_killed_process_is_taken_again(tmp_path) -> None:
    """flock belongs to the holder's open file: the OS drops it when the holder dies, even
    by kill -9, and the file it leaves is reused."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / runfiles.LOCK)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match=f"pid {holder.pid}"):
            RunLock(tmp_path)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert (tmp_path / runfiles.LOCK).exists()  # left behind by the crash
    RunLock(tmp_path).release()
