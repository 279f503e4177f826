"""Per-epoch time of edgegcl on a graph beside a plain dense GRACE-style epoch.

The reference is what GRACE's code does every epoch: two views (edge dropping, column feature
masking on the dense feature matrix), GRACE's encoder (PyG GCNConv, message passing) with
edgegcl's layer sizes and projection head, and the InfoNCE loss over every negative from four
dense N x N similarity matrices. edgegcl is timed with HANS
held at a given state: ``saturated`` (every eta = 1, the most negatives a run ever uses) and
``bootstrap`` (eta_0 = 0.05, the first T_init epochs). The contenders run interleaved, in
blocks of T_int epochs (so edgegcl's periodic stratification is counted), which keeps a
background load from favouring one of them.

    python -m bench.epoch_speed --dataset Cora --root ../shared/datasets --theta-max 1.0
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from bench import harness

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv

from edgegcl.nn.augment import as_features, mask_columns, remove_edges
from edgegcl.training.config import TrainConfig
from edgegcl.data import load_graph
from edgegcl.contrast.scheduler import CATEGORIES
from edgegcl.training.engine import Trainer
from edgegcl.nn.model import ProjectionHead

Step = Callable[[], None]


def grace_loss(h1: Tensor, h2: Tensor, tau: float) -> Tensor:
    """GRACE's semi_loss, both directions: exp of 4 dense N x N similarity matrices."""
    def semi(a: Tensor, b: Tensor) -> Tensor:
        a, b = F.normalize(a), F.normalize(b)
        refl, between = torch.exp(a @ a.t() / tau), torch.exp(a @ b.t() / tau)
        return -torch.log(between.diag() / (refl.sum(1) + between.sum(1) - refl.diag()))
    return 0.5 * (semi(h1, h2) + semi(h2, h1)).mean()


class GraceEncoder(torch.nn.Module):
    """GRACE's encoder: PyG GCNConv layers (message passing), the same sizes as edgegcl's."""

    def __init__(self, in_dim: int, cfg: TrainConfig) -> None:
        super().__init__()
        m = cfg.model
        self.conv1, self.conv2 = GCNConv(in_dim, m.hidden_dim), GCNConv(m.hidden_dim, m.out_dim)
        self.act1, self.act2 = torch.nn.PReLU(m.hidden_dim), torch.nn.PReLU(m.out_dim)
        self.head = ProjectionHead(m)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        z = self.act2(self.conv2(self.act1(self.conv1(x, edge_index)), edge_index))
        return self.head(z)


def reference_step(data: Data, cfg: TrainConfig) -> Step:
    """One dense GRACE-style training epoch with the same layer sizes: GCNConv encoder on
    the dense feature matrix, every negative, four dense N x N similarity matrices."""
    torch.manual_seed(0)
    model = GraceEncoder(data.x.size(1), cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.run.lr, weight_decay=cfg.run.weight_decay)
    g = torch.Generator().manual_seed(0)

    def step() -> None:
        x1 = mask_columns(data.x, cfg.augment.p_feature_1, g)
        x2 = mask_columns(data.x, cfg.augment.p_feature_2, g)
        e1 = remove_edges(data.edge_index, cfg.augment.p_edge_1, g)
        e2 = remove_edges(data.edge_index, cfg.augment.p_edge_2, g)
        loss = grace_loss(model(x1, e1), model(x2, e2), cfg.contrast.tau)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def edgegcl_step(data: Data, cfg: TrainConfig, eta: float) -> Step:
    """One edgegcl training epoch with every eta^cat held at ``eta``."""
    trainer = Trainer(cfg, data.x.size(1), seed=0)
    trainer.scheduler.eta = {c: eta for c in CATEGORIES}
    x = as_features(data.x)
    epoch = [0]

    def step() -> None:
        epoch[0] += 1
        trainer.train_step(x, data.edge_index, step=epoch[0])
    return step


def interleaved(steps: dict[str, Step], rounds: int, block: int) -> dict[str, float]:
    """Mean seconds per epoch of each step, run in alternating blocks after one warm-up block."""
    total = {name: 0.0 for name in steps}
    for r in range(rounds + 1):
        for name, step in steps.items():
            t0 = time.perf_counter()
            for _ in range(block):
                step()
            if r > 0:
                total[name] += time.perf_counter() - t0
    return {name: t / (rounds * block) for name, t in total.items()}


def compare(data: Data, theta_max: float, rounds: int) -> dict[str, float]:
    """Reference, saturated and bootstrap epoch times (seconds) at ``theta_max``."""
    cfg = TrainConfig(encoder="gcn", theta_max=theta_max)
    return interleaved({"reference": reference_step(data, cfg),
                        "saturated": edgegcl_step(data, cfg, 1.0),
                        "bootstrap": edgegcl_step(data, cfg, cfg.schedule.eta_0)}, rounds, cfg.schedule.T_int)


def table_row(theta: float, t: dict[str, float]) -> str:
    """One Markdown row: theta_max, reference, saturated and bootstrap seconds (with ratios)."""
    return (f"| {theta} | {t['reference']:.3f} | {t['saturated']:.3f} "
            f"({t['saturated'] / t['reference']:.2f}x) | {t['bootstrap']:.3f} "
            f"({t['bootstrap'] / t['reference']:.2f}x) |")


def main() -> None:
    p = harness.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="Cora")
    p.add_argument("--root", default=None)
    p.add_argument("--theta-max", default="1.0,0.5", help="comma-separated theta_max values")
    p.add_argument("--rounds", type=int, default=2, help="timed blocks of T_int epochs each")
    args = p.parse_args()
    res = harness.record("epoch_speed", sys.argv[1:], root=args.root)
    data = load_graph(args.dataset, args.root)
    rows = []
    for theta in (float(t) for t in args.theta_max.split(",")):
        rows.append(table_row(theta, compare(data, theta, args.rounds)))
        print(rows[-1], flush=True)
    res["wall_min"] = harness.wall_min(res)
    lines = [f"# Epoch time on {args.dataset} beside a dense GRACE-style epoch", "",
             *harness.header(res),
             __doc__.split("\n\n")[1].replace("\n", " "), "",
             "| theta_max | reference s | edgegcl saturated s | edgegcl bootstrap s |",
             "|---|---|---|---|", *rows, ""]
    harness.save(harness.RESULTS / "epoch_speed.md", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
