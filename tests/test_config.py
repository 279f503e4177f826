"""Tests for the run configuration (edgegcl.config, edgegcl.training.config): sections owned by
their layers, TOML round trip, precedence, type coercion and validation."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from edgegcl.training.config import TrainConfig, build, load_toml, to_toml, validate
from edgegcl.errors import UsageError


def _usage_error(fn, *args) -> str:
    """Run fn, expect a UsageError, and return its message after checking it is one line."""
    with pytest.raises(UsageError) as info:
        fn(*args)
    message = str(info.value)
    assert message.strip() and "\n" not in message and "\r" not in message, repr(message)
    return message


def _names(message: str, field: str) -> bool:
    """Whether a message names a field, as ``theta_max`` or as its flag spelling ``theta-max``."""
    return field in message or field.replace("_", "-") in message


def _write(tmp_path: Path, text: str, name: str = "cfg.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- round trip

def _non_default() -> TrainConfig:
    return TrainConfig(
        dataset="Cora", root='/data/with "quotes" and \\backslash', nodes=321, classes=3,
        features=17, avg_degree=4.5, homophily=0.65, graph_seed=9, epochs=42, seeds=3,
        device="cpu", out="runs/x y", eval_every=7, lr=1e-3, weight_decay=0.0, tau=0.25,
        hidden_dim=64, out_dim=32, proj_dim=16, activation="elu", p_edge_1=0.15,
        p_edge_2=0.35, p_feature_1=0.0, p_feature_2=1.0, theta_max=0.6, ratios="easy=10,hard=40,inter=50",
        T_init=5, T_int=3, e=2, gamma=0.95, b=0.1, c_cat="hard=0.1,inter=0.2,easy=0.3", eta_0=0.1,
        floor=0.02, swap_every=4,
    )


def test_round_trip_of_defaults(tmp_path: Path) -> None:
    cfg = TrainConfig()
    path = _write(tmp_path, to_toml(cfg))
    assert build(load_toml(path), {}) == cfg


def test_round_trip_of_non_default_config(tmp_path: Path) -> None:
    cfg = _non_default()
    validate(cfg)
    path = _write(tmp_path, to_toml(cfg))
    loaded = load_toml(path)
    assert set(loaded) == set(TrainConfig().to_dict())
    again = build(loaded, {})
    assert again == cfg
    for f in dataclasses.fields(TrainConfig):  # types survive too (1.0 stays float, 3 stays int)
        assert type(getattr(again, f.name)) is type(getattr(cfg, f.name)), f.name


def test_round_trip_of_unicode_and_tab(tmp_path: Path) -> None:
    cfg = TrainConfig(root="/données/ünï\tcode")
    path = _write(tmp_path, to_toml(cfg))
    assert build(load_toml(path), {}) == cfg


def test_round_trip_of_control_characters(tmp_path: Path) -> None:
    cfg = TrainConfig(out="runs/a\nb", root="r\x01")
    path = _write(tmp_path, to_toml(cfg))
    assert build(load_toml(path), {}) == cfg


# --------------------------------------------------------------------------- precedence

def test_file_overrides_defaults_and_flags_override_file(tmp_path: Path) -> None:
    path = _write(tmp_path, '[run]\nepochs = 12\n[schedule]\ntheta_max = 0.5\n'
                            'ratios = "easy=10,hard=40,inter=50"\nT_int = 3\n')
    cfg = build(load_toml(path), {"theta_max": 0.8, "seeds": 4})
    assert cfg.run.epochs == 12            # file beats default (500)
    assert cfg.schedule.theta_max == 0.8        # flag beats file (0.5)
    assert cfg.schedule.ratios == {"easy": 10.0, "hard": 40.0, "inter": 50.0}  # file beats default
    assert cfg.schedule.T_int == 3
    assert cfg.run.seeds == 4              # flag beats default
    assert cfg.contrast.tau == TrainConfig().contrast.tau  # untouched default


def test_build_without_file_is_defaults() -> None:
    assert build({}, {}) == TrainConfig()


def test_build_coerces_flag_values() -> None:
    cfg = build({}, {"epochs": "7", "tau": "0.5"})
    assert cfg.run.epochs == 7 and isinstance(cfg.run.epochs, int)
    assert cfg.contrast.tau == 0.5 and isinstance(cfg.contrast.tau, float)


def test_build_validates() -> None:
    assert _names(_usage_error(build, {}, {"epochs": 0}), "epochs")
    assert _names(_usage_error(build, {"theta_max": 2.0}, {}), "theta_max")


# --------------------------------------------------------------------------- load_toml

def test_load_toml_coerces_types(tmp_path: Path) -> None:
    path = _write(tmp_path, "[schedule]\ntheta_max = 1\nratios = { easy = 10, hard = 40, "
                            "inter = 50 }\n[run]\nepochs = 10.0\n")
    values = load_toml(path)
    assert values == {"theta_max": 1.0, "epochs": 10, "ratios": {"easy": 10.0, "hard": 40.0, "inter": 50.0}}
    assert isinstance(values["theta_max"], float) and isinstance(values["epochs"], int)


@pytest.mark.parametrize("ratios", ["[10, 40, 50]", '"10,40,50"'])
def test_positional_ratios_are_refused_naming_the_keyed_form(tmp_path: Path, ratios: str) -> None:
    """A mapping is written by its keys only: a list or a bare comma form is one line that
    shows the keyed form and the table."""
    path = _write(tmp_path, f"[schedule]\nratios = {ratios}\n")
    message = _usage_error(load_toml, path)
    assert "hard=N,inter=N,easy=N (every one once) or a table" in message


def test_load_toml_unknown_key(tmp_path: Path) -> None:
    path = _write(tmp_path, "[run]\nepochs = 3\n[schedule]\nthetamax = 0.5\n")
    message = _usage_error(load_toml, path)
    assert "thetamax" in message


def test_an_unknown_table_named_like_a_key_says_it_is_a_table(tmp_path: Path) -> None:
    """[scheduler] (a key of [schedule], not a table) is refused as a table, not as a key
    outside any table."""
    path = _write(tmp_path, "[scheduler]\ntheta_max = 0.3\n")
    message = _usage_error(load_toml, path)
    assert "[scheduler] is not a table of a run; the tables are" in message


def test_load_toml_unknown_table(tmp_path: Path) -> None:
    path = _write(tmp_path, "[train]\nepochs = 3\n")
    assert "train" in _usage_error(load_toml, path)


@pytest.mark.parametrize("text, field", [
    ('[run]\nepochs = "ten"\n', "epochs"),
    ("[run]\nepochs = 2.5\n", "epochs"),
    ("[run]\nepochs = true\n", "epochs"),
    ('[contrast]\ntau = "cold"\n', "tau"),
    ("[schedule]\ntheta_max = false\n", "theta_max"),
    ("[run]\nseeds = [1, 2]\n", "seeds"),
])
def test_load_toml_wrong_type(tmp_path: Path, text: str, field: str) -> None:
    message = _usage_error(load_toml, _write(tmp_path, text))
    assert _names(message, field), message


def test_load_toml_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    message = _usage_error(load_toml, missing)
    assert "nope.toml" in message


def test_load_toml_invalid_toml(tmp_path: Path) -> None:
    path = _write(tmp_path, "epochs = = 3\n[[[\n")
    message = _usage_error(load_toml, path)
    assert "cfg.toml" in message


def test_load_toml_directory(tmp_path: Path) -> None:
    _usage_error(load_toml, tmp_path)


def test_load_toml_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('root = "donn\u00e9es"\n'.encode("latin-1"))
    _usage_error(load_toml, path)


# --------------------------------------------------------------------------- validate

@pytest.mark.parametrize("changes, field", [
    ({"ratios": "easy=20,hard=30,inter=40"}, "ratios"),
    ({"ratios": "20,30,50"}, "ratios"),
    ({"ratios": "easy=-10,hard=60,inter=50"}, "ratios"),
    ({"ratios": "easy=0,hard=50,inter=50"}, "ratios"),
    ({"ratios": "50,50"}, "ratios"),
    ({"ratios": "20,30,50,0"}, "ratios"),
    ({"ratios": "a,b,c"}, "ratios"),
    ({"ratios": "easy=nan,hard=50,inter=50"}, "ratios"),
    ({"theta_max": -0.1}, "theta_max"),
    ({"pick": "top"}, "pick"),
    ({"pace": "slow"}, "pace"),
    ({"reach": 0.0}, "reach"),
    ({"reach": 1.5}, "reach"),
    ({"category_loss": "max"}, "category_loss"),
    ({"pick": "hardest", "stratify": "sampled", "scheduler": "hans"}, "pick"),
    ({"theta_max": 1.5}, "theta_max"),
    ({"theta_max": -0.2}, "theta_max"),
    ({"theta_max": float("nan")}, "theta_max"),
    ({"tau": 0.01}, "tau"),
    ({"tau": float("nan")}, "tau"),
    ({"p_edge_1": 1.5}, "p_edge_1"),
    ({"p_feature_2": -0.1}, "p_feature_2"),
    ({"epochs": 0}, "epochs"),
    ({"seeds": 0}, "seeds"),
    ({"eval_every": -1}, "eval_every"),
    ({"activation": "tanh"}, "activation"),
    ({"mode": "batched"}, "mode"),
    ({"fanout": "10,0"}, "fanout"),
    ({"fanout": "ten"}, "fanout"),
    ({"sampler": "fast"}, "sampler"),
    ({"batch_size": 0}, "batch_size"),
    ({"device": "tpu"}, "device"),
    ({"c_cat": "0.1,0.1"}, "c_cat"),
    ({"c_cat": "0.1,0,0.1"}, "c_cat"),
    ({"T_init": -1}, "T_init"),
    ({"lr": 0.0}, "lr"),
    ({"nodes": 1}, "nodes"),
    ({"avg_degree": 0.0}, "avg_degree"),
    ({"homophily": 1.2}, "homophily"),
    ({"candidates": "intra"}, "candidates"),
])
def test_validate_rejects(changes: dict, field: str) -> None:
    # typed fields (ratios, c_cat, fanout) are refused as they are set, the rest by validate
    message = _usage_error(lambda: validate(dataclasses.replace(TrainConfig(), **changes)))
    assert _names(message, field), message


@pytest.mark.parametrize("changes", [
    {},
    {"theta_max": 1.0}, {"theta_max": 0.01}, {"theta_max": 0.0},
    {"pick": "random", "stratify": "sampled"}, {"scheduler": "random"}, {"pace": "fixed"},
    {"tau": 0.05},
    {"p_edge_1": 0.0, "p_edge_2": 1.0},
    {"ratios": "easy=33.3,hard=33.3,inter=33.4"},
    {"device": "cpu"}, {"device": "cuda:1"},
    {"activation": "relu"}, {"activation": "rrelu"},
    {"T_init": 0},
    {"candidates": "inter"}, {"candidates": "both"},
])
def test_validate_accepts(changes: dict) -> None:
    validate(dataclasses.replace(TrainConfig(), **changes))


@pytest.mark.parametrize("name, value, says", [
    ("seeds", 10**20, "--seeds must be in [1, 10000], got an integer of 67 bits"),
    ("batch_size", 10**19, "--batch-size must be in [2, 2147483648]"),
    ("nodes", 10**5000, "got an integer of 16610 bits"),
    ("epochs", 2**64, "--epochs must be in [1, 1000000]"),
    ("graph_seed", -1, "--graph-seed must be in [0, 9223372036854775807]"),
], ids=["seeds", "batch_size", "nodes", "epochs", "graph_seed"])
def test_every_integer_option_has_an_upper_bound_said_without_printing_huge_numbers(
        name: str, value: int, says: str) -> None:
    """Integers beyond 64 bits are refused in one line (no overflow traceback later), and a
    refusal never prints a number Python cannot (over 4300 digits)."""
    assert says in _usage_error(lambda: TrainConfig(**{name: value}))


def test_every_integer_option_is_bounded() -> None:
    from edgegcl.config import section_fields

    unbounded = [name for name, (_, f) in section_fields(TrainConfig).items()
                 if f.type in ("int", int) and f.metadata["at_most"] is None]
    assert unbounded == []


def test_validate_rejects_malformed_cuda_index() -> None:
    message = _usage_error(lambda: dataclasses.replace(TrainConfig(), device="cuda:abc"))
    assert "device" in message


# --------------------------------------------------------------------------- maps

def test_ratio_map_is_easy_hard_inter() -> None:
    cfg = TrainConfig(ratios="easy=10,hard=40,inter=50")
    assert cfg.ratio_map() == pytest.approx({"easy": 0.1, "hard": 0.4, "inter": 0.5})
    assert TrainConfig().ratio_map() == pytest.approx({"easy": 0.2, "hard": 0.3, "inter": 0.5})


def test_c_cat_is_hard_inter_easy() -> None:
    cfg = TrainConfig(c_cat="hard=0.1,inter=0.2,easy=0.3")
    assert dict(cfg.schedule.c_cat) == pytest.approx({"hard": 0.1, "inter": 0.2, "easy": 0.3})


@pytest.mark.parametrize("name, ratios, theta_max", [("paper-Cora", "easy=10,hard=40,inter=50", 0.6),
                                                     ("paper-CiteSeer", "easy=10,hard=30,inter=60", 1.0)])
def test_paper_presets_carry_what_the_paper_states(name: str, ratios: str,
                                                   theta_max: float) -> None:
    from edgegcl.config import flag_form
    from edgegcl.training.config import list_presets

    assert name in list_presets()
    cfg = build(load_toml(name), {})
    assert (cfg.schedule.ratios, cfg.schedule.theta_max, cfg.run.epochs) == (TrainConfig(ratios=ratios).schedule.ratios,
                                                       theta_max, 2000)
    assert TrainConfig(ratios=flag_form(cfg.schedule.ratios)).schedule.ratios == cfg.schedule.ratios  # keyed round trip
    assert (cfg.schedule.T_init, cfg.schedule.T_int, cfg.hans.e, cfg.hans.gamma, cfg.schedule.b) == (60, 20, 10, 0.99, 0.05)
    assert cfg.run.protocol == "both" and cfg.schedule.scheduler == "hans" and cfg.run.eval_every == 50
    assert cfg.data.dataset == name.split("-")[1]
    assert build(load_toml(name), {"theta_max": 0.3}).schedule.theta_max == 0.3  # flags still win


def test_unknown_config_name_lists_the_presets() -> None:
    with pytest.raises(UsageError, match="paper-Cora"):
        load_toml("paper-Pubmed")


# --------------------------------------------------------------------------- sections

def test_config_file_in_sections_with_typed_values(tmp_path: Path) -> None:
    path = _write(tmp_path, "[schedule]\ntheta_max = 0.6\n[schedule.ratios]\neasy = 10\n"
                            "hard = 40\ninter = 50\n[run]\nfanout = [5, 3]\nepochs = 7\n"
                            "[schedule.c_cat]\nhard = 0.1\ninter = 0.2\neasy = 0.3\n")
    cfg = build(load_toml(path), {})
    assert cfg.schedule.ratios == {"easy": 10.0, "hard": 40.0, "inter": 50.0}
    assert cfg.schedule.c_cat == {"hard": 0.1, "inter": 0.2, "easy": 0.3}
    assert (cfg.run.fanout, cfg.run.epochs, cfg.schedule.theta_max) == ([5, 3], 7, 0.6)


def test_written_config_has_one_table_per_section(tmp_path: Path) -> None:
    from edgegcl.training.config import SECTIONS

    text = to_toml(_non_default())
    assert [line.split("]")[0][1:] for line in text.splitlines() if line.startswith("[")] \
        == list(SECTIONS)
    assert "ratios = { easy = 10.0, hard = 40.0, inter = 50.0 }" in text


def test_key_in_the_wrong_table_names_its_table(tmp_path: Path) -> None:
    message = _usage_error(load_toml, _write(tmp_path, "[run]\ntheta_max = 0.5\n"))
    assert "[run] has no key 'theta_max'" in message and "belongs in [schedule]" in message


def test_ratios_table_with_a_missing_category_is_refused(tmp_path: Path) -> None:
    message = _usage_error(load_toml, _write(tmp_path, "[hans.ratios]\neasy = 50\nhard = 50\n"))
    assert "ratios" in message


def test_the_config_is_made_of_sections_owned_by_their_layers() -> None:
    import edgegcl.config
    from edgegcl.training.config import FIELDS, SECTIONS

    cfg = TrainConfig()
    assert [f.name for f in dataclasses.fields(cfg)] == list(SECTIONS)
    assert all(dataclasses.is_dataclass(getattr(cfg, f.name)) for f in dataclasses.fields(cfg))
    owners = {name: type(getattr(cfg, name)).__module__ for name in SECTIONS}
    assert owners == {"data": "edgegcl.data.config", "synthetic": "edgegcl.data.config",
                      "model": "edgegcl.nn.config", "augment": "edgegcl.nn.config",
                      "schedule": "edgegcl.contrast.scheduler",
                      "hans": "edgegcl.contrast.hans", "contrast": "edgegcl.contrast.config",
                      "learning": "edgegcl.training.config", "run": "edgegcl.training.config",
                      "distributed": "edgegcl.training.config"}
    for name, f in FIELDS.items():
        assert len(f.metadata["help"]) > 10, name
    source = Path(edgegcl.config.__file__).read_text()
    assert [line for line in source.splitlines() if line.startswith(("from edgegcl", "import edgegcl"))] \
        == ["from edgegcl.errors import UsageError",
            "from edgegcl.tomlfile import read_toml"]  # no layer: only these two helpers


def test_a_flat_name_sets_its_section_and_option_value_reads_it() -> None:
    from edgegcl.training.config import option_value

    cfg = TrainConfig(theta_max=0.6, tau=0.5, epochs=9)
    assert [option_value(cfg, n) for n in ("theta_max", "tau", "epochs")] == [0.6, 0.5, 9] \
        == [cfg.schedule.theta_max, cfg.contrast.tau, cfg.run.epochs]
    assert dataclasses.replace(cfg, theta_max=0.3).schedule.theta_max == 0.3
    with pytest.raises(AttributeError):  # no flat alias: the section says where it lives
        cfg.theta_max  # noqa: B018
    with pytest.raises(KeyError):
        option_value(cfg, "no_such_option")
    with pytest.raises(TypeError, match="no_such_option"):
        TrainConfig(no_such_option=1)


def test_config_toml_is_the_one_layout_read(tmp_path: Path) -> None:
    """What ``to_toml`` writes loads back to the same configuration (and the same hash); a
    key outside its table (the schedule in [hans], keys at the top level) and keys no
    version reads now (``hard_pick``) are refused in one line naming where it belongs."""
    from edgegcl.training.state import config_hash

    cfg = TrainConfig(theta_max=0.3, ratios="hard=20,inter=50,easy=30", fanout="5,5")
    again = build(load_toml(_write(tmp_path, to_toml(cfg), "new.toml")), {})
    assert again == cfg and config_hash(again) == config_hash(cfg)
    assert config_hash(TrainConfig(theta_max=0.5)) != config_hash(cfg)
    for text, needle in (("[hans]\ntheta_max = 0.5\n", "it belongs in [schedule]"),
                         ("theta_max = 0.5\n", "belongs in [schedule]"),
                         ('[contrast]\nhard_pick = "top"\n', "has no key 'hard_pick'"),
                         ('hard_pick = "top"\n', "unknown key 'hard_pick'")):
        message = _usage_error(load_toml, _write(tmp_path, text, "old.toml"))
        assert needle in message and "\n" not in message, message


def test_tuned_defaults_are_the_preset_named_after_the_dataset() -> None:
    from edgegcl.training.config import tuned_defaults

    path, values = tuned_defaults("Cite-Seer")  # names match as load_graph's do
    assert path is not None and path.name == "CiteSeer.toml"
    assert values == load_toml("CiteSeer") and values["dataset"] == "CiteSeer"
    assert tuned_defaults("synthetic") == (None, {})
    assert tuned_defaults("graph.pt") == (None, {})
    assert tuned_defaults("PubMed") == (None, {})  # no tuned file: the global defaults


def test_the_config_sections_need_no_torch() -> None:
    """The command line builds its flags from the sections before torch loads."""
    import subprocess
    import sys

    code = ("import sys, edgegcl.training.config, edgegcl.cli.flags, edgegcl.onnx.opset\n"
            "print(sorted(m for m in ('torch', 'torch_geometric', 'onnx', 'scipy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
