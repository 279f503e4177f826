"""The training engine (edgegcl.training.engine.Trainer): same numbers as the step it composes, state."""

from __future__ import annotations

import copy

import pytest
import torch

from edgegcl.nn.augment import as_features
from edgegcl.training.config import TrainConfig
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.training.engine import Trainer
from edgegcl.nn.model import AdNGCL
from edgegcl.data.sampling import make_loader
from edgegcl.contrast.module import ScheduledContrast
from edgegcl.nn.augment import Views

CFG = TrainConfig(encoder="gcn", hidden_dim=16, out_dim=8, proj_dim=8, T_init=2, T_int=2, e=1,
                  theta_max=0.5,
                  b=0.5, scheduler="hans")


@pytest.fixture(scope="module")
def data():
    return synthetic_graph(SyntheticSpec(num_nodes=160, num_features=12, avg_degree=5, seed=0))


def test_trainer_equals_the_loop_written_by_hand(data) -> None:
    """The engine is the public objects composed: a model, Adam, the contrast and the views
    built by hand from the same seed, in a plain loop, give the same losses, eta and weights
    over epochs that refresh the strata and move HANS."""
    x = as_features(data.x)
    trainer = Trainer(CFG, 12, seed=3)
    torch.manual_seed(3)
    model = AdNGCL(12, CFG.model)
    opt = torch.optim.Adam(model.parameters(), lr=CFG.run.lr, weight_decay=CFG.run.weight_decay)
    contrast = ScheduledContrast.from_config(CFG.schedule, CFG.contrast, hans=CFG.hans, epochs=CFG.run.epochs,
                                        refresh_every=CFG.schedule.T_int, seed=3)
    views = Views(CFG.augment, seed=3)
    for epoch in range(1, 9):
        ours = trainer.fit_epoch(x, data.edge_index)
        keep_1, e_1 = views.first_mask(x, data.edge_index)  # view 1's mask on the weights
        h1 = model.project(model(x, e_1, None, keep_1))
        x_2, e_2 = views.second(x, data.edge_index)
        out = contrast(h1, model.project(model(x_2, e_2)), step=epoch)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        contrast.step()
        assert ours.loss == out.loss.item()
    hans = contrast.scheduler
    assert trainer.scheduler.eta == hans.eta and trainer.scheduler.eta["hard"] > CFG.schedule.eta_0
    assert all(torch.equal(a, b) for a, b in zip(trainer.model.state_dict().values(),
                                                  model.state_dict().values()))


def test_trainer_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    Trainer(CFG, 12, seed=5)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("mode", ["full", "minibatch"])
def test_state_dict_continues_a_run_exactly(data, mode: str) -> None:
    cfg = TrainConfig(**{**CFG.to_dict(), "T_int": 1})  # strata refreshed every epoch
    x = as_features(data.x) if mode == "full" else data.x

    def epochs(trainer: Trainer, n: int) -> list[float]:
        loader = make_loader(data, 64, [4, 4], sampler="builtin", seed=trainer.epoch) \
            if mode == "minibatch" else None
        return [trainer.fit_epoch(x, data.edge_index, loader).loss for _ in range(n)]

    straight = Trainer(cfg, 12, mode=mode, seed=1)
    epochs(straight, 4)
    state = copy.deepcopy(straight.state_dict())  # references, as torch's state_dicts
    expected = epochs(straight, 4)
    resumed = Trainer(cfg, 12, mode=mode, seed=9)  # another seed: everything comes from state
    resumed.load_state_dict(state)
    assert resumed.epoch == 4
    assert epochs(resumed, 4) == expected
    assert resumed.scheduler.eta == straight.scheduler.eta


def test_bad_mode_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="mode"):
        Trainer(CFG, 12, mode="sharded")
