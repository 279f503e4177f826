"""Purity of sampled strata: the share of drawn negatives that are truly in the anchor's pool.

Sampled strata (edgegcl.contrast.sampled.schedule_sampled) rank a random sample of M candidates per
anchor instead of all 2B - 2; near the two cuts the sample can misplace a candidate. For each
sample size M this draws the counts HANS uses at theta_max = 1 with eta = 0.13 (where a
default 300-epoch run ends) and in bootstrap (eta_0 = 0.05), and checks every drawn member against the exact strata of all
candidates (``stratum_purity``). Similarities come from Cora's projections under an untrained
and a briefly trained AdNGCL (and i.i.d. Gaussian ones: purity depends on the ranks only).
Writes bench/results/purity.md.

    python -m bench.purity --root ../shared/datasets
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from bench import harness

import torch
from torch import Tensor

from edgegcl.nn.augment import as_features
from edgegcl.training.config import TrainConfig
from edgegcl.data import load_graph
from edgegcl.contrast.scheduler import CATEGORIES
from edgegcl.contrast.dense import similarities
from edgegcl.training.engine import Trainer
from edgegcl.contrast.negatives import ActiveNegatives, num_candidates, pool_sizes, stratify
from edgegcl.contrast.sampled import draw_sample, sample_size, schedule_sampled


@torch.no_grad()
def stratum_purity(active: ActiveNegatives, cand_sims: Tensor, ratios: Mapping[str, float],
                   candidates: str = "both") -> dict[str, float]:
    """Per category, the share of the drawn negatives that lie in the anchor's exact pool
    (``stratify`` over all of ``cand_sims``, [B, 2B], or [B, B] with ``candidates =
    "inter"``): 1.0 for the exact strata."""
    exact = stratify(cand_sims, ratios, candidates=candidates)
    out = {}
    for (cat, seg), pool in zip(active.segments().items(), exact.pools):
        if seg.size(1) == 0:
            out[cat] = 1.0
            continue
        member = torch.zeros_like(cand_sims, dtype=torch.bool).scatter_(1, pool, True)
        out[cat] = float(member.gather(1, seg).float().mean())
    return out


HERE = Path(__file__).resolve().parent
SIZES = (16, 32, 64, 128, 256, 512, 1024)


def cora_similarities(root: str, epochs: int) -> torch.Tensor:
    """[B, 2B] candidate similarities of Cora's view-1 anchors after ``epochs`` of training."""
    data = load_graph("Cora", root)
    cfg = TrainConfig(encoder="gcn", mode="full")
    x = as_features(data.x)
    trainer = Trainer(cfg, x.size(1), seed=0)
    for _ in range(epochs):
        trainer.fit_epoch(x, data.edge_index)
    with torch.no_grad():
        h1, h2 = trainer.project(x, data.edge_index)
        return similarities(h1, h2, cfg.contrast.tau).candidates(0)


def purity_rows(name: str, sims: torch.Tensor, ratios: dict[str, float]) -> list[str]:
    b = sims.size(0)
    c = num_candidates(b)
    rows = []
    for label, counts in (
            ("eta 0.13 (a default run's end)", {k: int(0.13 * ratios[k] * c) for k in CATEGORIES}),
            ("bootstrap, eta 0.05", {k: int(0.05 * ratios[k] * c) for k in CATEGORIES})):
        used = sample_size(c, ratios, counts)
        for size in sorted({*SIZES, used}):
            if any(pool_sizes(size, ratios)[k] < counts[k] for k in CATEGORIES) or size >= c:
                continue
            sample = draw_sample(b, size, torch.Generator().manual_seed(size), sims.device)
            active = schedule_sampled(lambda s, e, smp: sims[s:e].gather(1, smp.row_cols(s, e)),
                                      b, sims.device, ratios, counts, 0, sample)
            p = stratum_purity(active, sims, ratios)
            rows.append(f"| {name} | {b} | {label} | {size}{' (used)' if size == used else ''} | "
                        f"{p['hard']:.3f} | {p['inter']:.3f} | {p['easy']:.3f} |")
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = harness.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, help="directory holding Cora/")
    ap.add_argument("--out", default=str(harness.RESULTS / "purity.md"))
    args = ap.parse_args()
    res = harness.record("purity", sys.argv[1:], root=args.root)
    ratios = TrainConfig().ratio_map()
    g = torch.Generator().manual_seed(0)
    rows = []
    for epochs in (0, 50):
        rows += purity_rows(f"Cora, {epochs} epochs", cora_similarities(args.root, epochs),
                            ratios)
    for b in (1024, 4096):
        rows += purity_rows("Gaussian", torch.randn(b, 2 * b, generator=g), ratios)
    lines = [
        "# Purity of sampled strata", "",
        *harness.header({**res, "wall_min": harness.wall_min(res)}),
        "Purity = share of the drawn negatives of a category that lie in the anchor's exact pool "
        "of that category (all 2B - 2 candidates ranked), over every anchor of the batch. "
        "Anchors of a block of 256 share one random sample of M candidates "
        "(edgegcl.contrast.sampled.schedule_sampled). Sizes below the counts' need are skipped; "
        "'(used)' marks the M a run uses there: max(--stratify-sample (256), the counts' need).", "",
        "| similarities | B | HANS state | M | hard | inter | easy |",
        "|---|---|---|---|---|---|---|", *rows, ""]
    harness.save(Path(args.out), "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
