"""Device profiles (edgegcl.budget.profiles): the shipped files, validation, memory budgets, device checks."""

from __future__ import annotations

from collections import namedtuple
from functools import partial
from pathlib import Path

import pytest
import torch
from helpers import capture

from edgegcl.budget import profiles
from edgegcl.cli.main import main
from edgegcl.errors import UsageError
from edgegcl.budget.profiles import (
    DeviceProfile,
    check_device_present,
    list_profiles,
    load_profile,
    memory_budget_bytes,
)

GIB = 2**30
VALID = {"name": "mine", "description": "my laptop", "device": "cpu", "memory_budget_gib": 4,
         "headroom": 0.1, "target_epoch_s": 2.5, "batch_size_min": 128, "batch_size_max": 2048}
FakeMemory = namedtuple("FakeMemory", "available total")


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def _write(tmp_path: Path, **changes: object) -> Path:
    """A profile file: VALID with ``changes`` (a value of None drops the field)."""
    fields = {**VALID, **changes}
    path = tmp_path / "mine.toml"
    path.write_text("".join(f"{k} = {_toml(v)}\n" for k, v in fields.items() if v is not None))
    return path


def _profile(**changes: object) -> DeviceProfile:
    return DeviceProfile(**{**VALID, **changes})


def test_shipped_profiles_all_load_and_are_named_after_their_files() -> None:
    shipped = list_profiles()
    names = [p.name for p in shipped]
    assert {"rtx4090", "jetson-orin-nano", "raspberry-pi-5", "cpu"} <= set(names)
    assert names == sorted(p.stem for p in Path(profiles.SHIPPED_DIR).glob("*.toml"))
    by_name = {p.name: p for p in shipped}
    assert by_name["rtx4090"].device == "cuda" and by_name["rtx4090"].memory_budget_gib == 24
    jetson = by_name["jetson-orin-nano"]
    assert jetson.device == "cuda" and jetson.memory_budget_gib < 8  # shares 8 GiB with the OS
    assert by_name["raspberry-pi-5"].device == "cpu"
    assert by_name["cpu"].device == "cpu" and by_name["cpu"].memory_budget_gib == "auto"
    assert all(p.description for p in shipped)


def test_shipped_profiles_come_from_the_repository_profiles_directory() -> None:
    """In a checkout the package reads the top-level profiles/ itself, not a copy."""
    repo_profiles = Path(__file__).resolve().parents[1] / "profiles"
    assert Path(profiles.SHIPPED_DIR).resolve() == repo_profiles


def test_a_user_file_loads(tmp_path: Path) -> None:
    p = load_profile(str(_write(tmp_path)))
    assert p == _profile(memory_budget_gib=4.0)
    assert isinstance(p.memory_budget_gib, float)


def test_description_is_optional(tmp_path: Path) -> None:
    assert load_profile(str(_write(tmp_path, description=None))).description == ""


@pytest.mark.parametrize("changes, expected", [
    ({"colour": "red"}, "unknown field(s) colour; valid fields are name, description"),
    ({"headroom": None}, "missing field(s) headroom"),
    ({"memory_budget_gib": -1}, "memory_budget_gib must be a positive number of GiB"),
    ({"memory_budget_gib": 0}, "memory_budget_gib must be a positive number of GiB"),
    ({"memory_budget_gib": "lots"}, 'memory_budget_gib must be a positive number of GiB up to'),
    ({"memory_budget_gib": True}, "memory_budget_gib must be"),
    ({"headroom": 1.0}, "headroom must be a fraction in [0, 1)"),
    ({"headroom": -0.1}, "headroom must be a fraction in [0, 1)"),
    ({"headroom": "10%"}, "headroom must be a fraction in [0, 1)"),
    ({"target_epoch_s": 0}, "target_epoch_s must be a positive number of seconds"),
    ({"target_epoch_s": -3.0}, "target_epoch_s must be a positive number of seconds"),
    ({"batch_size_min": 0}, "batch_size_min must be a positive integer"),
    ({"batch_size_max": 64.0}, "batch_size_max must be a positive integer"),
    ({"batch_size_min": 4096, "batch_size_max": 1024},
     "batch_size_min (4096) is larger than batch_size_max (1024); swap them"),
    ({"device": "tpu"}, 'device must be "cuda" or "cpu", got \'tpu\''),
    ({"name": ""}, "name must be a non-empty string"),
    ({"name": 7}, "name must be a non-empty string"),
    ({"description": 3}, "description must be a string"),
])
def test_every_invalid_field_is_one_line_naming_the_field(tmp_path: Path, changes: dict,
                                                          expected: str) -> None:
    path = _write(tmp_path, **changes)
    with pytest.raises(UsageError) as err:
        load_profile(str(path))
    msg = str(err.value)
    assert expected in msg
    assert str(path) in msg and "\n" not in msg


def test_nan_and_inf_are_rejected(tmp_path: Path) -> None:
    for text in ("nan", "inf"):
        path = tmp_path / "mine.toml"
        body = "".join(f"{k} = {_toml(v)}\n" for k, v in VALID.items() if k != "target_epoch_s")
        path.write_text(body + f"target_epoch_s = {text}\n")
        with pytest.raises(UsageError, match="target_epoch_s must be a positive number"):
            load_profile(str(path))


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist; check the path, or use a shipped profile"):
        load_profile(str(tmp_path / "absent.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("device = \n")
    with pytest.raises(UsageError, match=r"is not valid TOML \(.+\); fix the file"):
        load_profile(str(bad))


def test_unknown_profile_name_lists_the_shipped_ones() -> None:
    with pytest.raises(UsageError) as err:
        load_profile("rtx9090")
    assert "unknown profile 'rtx9090'" in str(err.value)
    assert "cpu, jetson-orin-nano, raspberry-pi-5, rtx4090" in str(err.value)


def test_cpu_auto_budget_is_psutil_available_memory_less_headroom(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profiles.psutil, "virtual_memory", lambda: FakeMemory(10 * GIB, 16 * GIB))
    cpu = load_profile("cpu")
    assert memory_budget_bytes(cpu) == int(10 * GIB * (1 - cpu.headroom))


def test_cpu_auto_budget_really_comes_from_this_machine() -> None:
    import psutil
    got = memory_budget_bytes(load_profile("cpu"))
    assert 0 < got <= psutil.virtual_memory().total


def test_fixed_budget_is_capped_at_the_device_total(monkeypatch: pytest.MonkeyPatch) -> None:
    pi = load_profile("raspberry-pi-5")
    monkeypatch.setattr(profiles.psutil, "virtual_memory", lambda: FakeMemory(GIB, 64 * GIB))
    assert memory_budget_bytes(pi) == int(pi.memory_budget_gib * GIB * (1 - pi.headroom))
    monkeypatch.setattr(profiles.psutil, "virtual_memory", lambda: FakeMemory(GIB, 4 * GIB))
    assert memory_budget_bytes(pi) == int(4 * GIB * (1 - pi.headroom))


def test_cuda_budget_uses_mem_get_info(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (20 * GIB, 80 * GIB))
    rtx = load_profile("rtx4090")
    assert memory_budget_bytes(rtx) == int(24 * GIB * (1 - rtx.headroom))
    auto = _profile(device="cuda", memory_budget_gib="auto", headroom=0.5)
    assert memory_budget_bytes(auto) == 10 * GIB


def test_cuda_profile_without_cuda_names_what_is_missing_and_the_fix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UsageError) as err:
        check_device_present(load_profile("rtx4090"))
    msg = str(err.value)
    assert msg.startswith("profile rtx4090 needs a CUDA device but this torch has none")
    assert torch.__version__ in msg and "--profile cpu" in msg and "\n" not in msg
    with pytest.raises(UsageError, match="needs a CUDA device"):
        memory_budget_bytes(load_profile("jetson-orin-nano"))
    check_device_present(load_profile("cpu"))  # a cpu profile is always present


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_this_torch_really_refuses_cuda_profiles() -> None:
    with pytest.raises(UsageError, match="needs a CUDA device"):
        check_device_present(load_profile("rtx4090"))


_run = partial(capture, main)


def test_cli_lists_the_shipped_profiles() -> None:
    code, out, _ = _run(["profiles"])
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["name", "device", "memory"]
    for p in list_profiles():
        row = next(line for line in lines if line.startswith(p.name + " "))
        assert p.device in row and p.description in row
        assert f"{p.batch_size_min}-{p.batch_size_max}" in row


def test_cli_checks_a_user_profile(tmp_path: Path) -> None:
    code, out, _ = _run(["profiles", str(_write(tmp_path))])
    assert code == 0 and "mine" in out and "128-2048" in out


def test_cli_bad_profile_is_exit_2_and_one_line(tmp_path: Path) -> None:
    code, out, err = _run(["profiles", str(_write(tmp_path, headroom=1.5))])
    assert code == 2 and out == ""
    assert err.startswith("edgegcl: error: profile file ") and "headroom must be" in err
    assert err.count("\n") == 1


def test_the_profiles_point_to_documentation_that_exists() -> None:
    """Each shipped file and the missing-field error name docs/profiles.md's section."""
    root = Path(profiles.__file__).resolve().parents[2]
    doc = root / "docs" / "profiles.md"
    assert "\n## Device profiles\n" in doc.read_text()
    for path in profiles.SHIPPED_DIR.glob("*.toml"):
        head = " ".join(line.lstrip("# ") for line in path.read_text().splitlines()[:2])
        assert 'docs/profiles.md, "Device profiles"' in head, path.name


def test_command_line_budgets_replace_the_profiles() -> None:
    pi = load_profile("raspberry-pi-5")
    mine = profiles.with_budgets(pi, target_epoch_s=0.5, memory_gib=3)
    assert (mine.target_epoch_s, mine.memory_budget_gib) == (0.5, 3.0)
    assert mine.headroom == pi.headroom and mine.name == pi.name
    assert profiles.with_budgets(pi) == pi
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(UsageError, match="--memory-gib must be a positive number"):
            profiles.with_budgets(pi, memory_gib=bad)
