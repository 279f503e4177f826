"""Checkpoints round-trip without pickled code; anything else is a one-line usage error."""

from __future__ import annotations


import pytest
import torch

from edgegcl.training.checkpoint import load_checkpoint, save_checkpoint
from edgegcl.training.config import TrainConfig
from edgegcl.errors import UsageError
from edgegcl.nn.model import GCNEncoder, ModelConfig


def test_round_trip_gives_the_same_encoder_and_config(tmp_path):
    cfg = TrainConfig(encoder="gcn", hidden_dim=16, out_dim=8, proj_dim=8, activation="elu",
                      tau=0.3)
    enc = GCNEncoder(5, ModelConfig(16, 8, 8, "elu"))
    save_checkpoint(tmp_path / "c.pt", enc.state_dict(), cfg, 5, seed=3, epoch=40)
    ck = load_checkpoint(tmp_path / "c.pt")
    assert ck.config == cfg and (ck.in_dim, ck.seed, ck.epoch) == (5, 3, 40)
    x, ei = torch.randn(7, 5), torch.tensor([[0, 1, 2], [1, 2, 3]])
    enc.eval()
    assert torch.equal(ck.encoder(x, ei), enc(x, ei))


class _Evil:
    def __reduce__(self):
        return (print, ("executed",))


@pytest.mark.parametrize("content", [b"not a checkpoint", None, "pickle"])
def test_bad_files_are_usage_errors(tmp_path, content, capsys):
    path = tmp_path / "bad.pt"
    if content == "pickle":
        torch.save({"format": "edgegcl-checkpoint-1", "evil": _Evil()}, path)
    elif content is None:
        torch.save({"weights": torch.zeros(2)}, path)  # loadable, but not ours
    else:
        path.write_bytes(content)
    with pytest.raises(UsageError) as err:
        load_checkpoint(path)
    assert "\n" not in str(err.value) and "executed" not in capsys.readouterr().out
    with pytest.raises(UsageError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")


def test_a_checkpoint_names_its_configuration(tmp_path):
    from edgegcl.training.state import config_hash

    cfg = TrainConfig(encoder="gcn", hidden_dim=16, out_dim=8, proj_dim=8, tau=0.3)
    enc = GCNEncoder(5, ModelConfig(16, 8, 8))
    save_checkpoint(tmp_path / "c.pt", enc.state_dict(), cfg, 5, seed=0, epoch=1)
    raw = torch.load(tmp_path / "c.pt", weights_only=True)
    assert raw["config_hash"] == config_hash(cfg) != config_hash(TrainConfig(tau=0.4))


def test_weights_that_do_not_fit_their_config_are_one_line(tmp_path):
    """A checkpoint whose config says 32 hidden units but whose weights have 16: one line
    naming the tensor, not load_state_dict's traceback."""
    enc = GCNEncoder(5, ModelConfig(16, 8, 8))
    save_checkpoint(tmp_path / "c.pt", enc.state_dict(),
                    TrainConfig(encoder="gcn", hidden_dim=32, out_dim=8, proj_dim=8), 5, seed=0,
                                epoch=1)
    with pytest.raises(UsageError, match=r"does not fit .*conv1\.bias is \[16\], the model's "
                                         r"\[32\]") as err:
        load_checkpoint(tmp_path / "c.pt")
    assert "\n" not in str(err.value)
    raw = torch.load(tmp_path / "c.pt", weights_only=True)
    del raw["seed"]
    torch.save(raw, tmp_path / "c.pt")
    with pytest.raises(UsageError, match="incomplete") as err:
        load_checkpoint(tmp_path / "c.pt")
    assert "\n" not in str(err.value)
