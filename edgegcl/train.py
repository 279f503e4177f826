"""The training loop: views -> encoder -> HANS-scheduled InfoNCE -> step, per seed and epoch.

Full-graph mode is one batch holding every node: the anchors are all N nodes. Per seed the
loop trains, probes the frozen embeddings every ``eval_every`` epochs, keeps the encoder whose
validation micro-F1 is best, and writes that checkpoint, the HANS event log and the metrics.
"""

from __future__ import annotations

import copy
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from edgegcl import __version__
from edgegcl.augment import AugmentConfig, as_features, two_views
from edgegcl.checkpoint import save_checkpoint
from edgegcl.config import TrainConfig, to_toml
from edgegcl.errors import UsageError
from edgegcl.evaluate import ProbeScores, Selection, linear_probe, random_split, select_checkpoint
from edgegcl.hans import HANS
from edgegcl.loss import LossOutput, Similarities, scheduled_info_nce, similarities
from edgegcl.model import AdNGCL, ModelConfig
from edgegcl.negatives import ActiveNegatives, num_candidates, select_active, stratify
from edgegcl.progress import Progress

def resolve_device(name: str) -> torch.device:
    """``auto`` is CUDA when present, else CPU; asking for CUDA without it is a usage error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {name} asked for CUDA but this torch has no CUDA device; "
                         "use --device cpu")
    return torch.device(name)


def make_hans(cfg: TrainConfig) -> HANS:
    """The scheduler of a run: caps theta_cat = ratio x theta_max, paper names throughout."""
    ratios = cfg.ratio_map()
    return HANS(cfg.theta_max, {c: r * cfg.theta_max for c, r in ratios.items()},
                T_init=cfg.T_init, T_int=cfg.T_int, e=cfg.e, gamma=cfg.gamma, b=cfg.b,
                c_cat=cfg.c_cat_map(), eta_0=cfg.eta_0, floor=cfg.floor,
                swap_every=cfg.swap_every or None)


class NegativeSelector:
    """Keeps the active negatives between refreshes (full-graph mode).

    Stratifying sorts B x 2B similarities, the costliest step of HANS, so it runs when the
    schedule changes (new counts or a swap) and otherwise every ``refresh_every`` epochs, as
    the paper's complexity analysis assumes (strata recomputed at the T_int checkpoints).
    Once every candidate is active (theta_max = 1 at saturation) the loss no longer depends
    on the strata and a swap cannot change the active set, so the strata stay as they were;
    they then only label the per-category losses that are logged.
    """

    def __init__(self, ratios: dict[str, float], refresh_every: int) -> None:
        self.ratios, self.refresh_every = ratios, refresh_every
        self._key: tuple[Any, ...] | None = None
        self._active: tuple[ActiveNegatives, ActiveNegatives] | None = None

    def get(self, sims: Similarities, hans: HANS, epoch: int
            ) -> tuple[ActiveNegatives, ActiveNegatives]:
        counts = hans.counts(num_candidates(sims.s12.size(0)))
        key = (tuple(counts.values()), hans.draw, sims.s12.size(0))
        if self._active is not None and self._active[0].complete and key[0] == self._key[0]:
            return self._active  # type: ignore[return-value]
        stale = (epoch - 1) % self.refresh_every == 0
        if self._active is None or key != self._key or stale:
            self._active = tuple(  # type: ignore[assignment]
                select_active(stratify(sims.candidates(d)), self.ratios, counts, hans.draw)
                for d in (0, 1))
            self._key = key
        return self._active  # type: ignore[return-value]


def contrastive_step(model: AdNGCL, x: Tensor, edge_index: Tensor, cfg: TrainConfig,
                     generator: torch.Generator, selector: NegativeSelector, hans: HANS,
                     epoch: int) -> LossOutput:
    """Two views of the graph, their projections, and the scheduled symmetric InfoNCE."""
    aug = AugmentConfig(cfg.p_edge_1, cfg.p_edge_2, cfg.p_feature_1, cfg.p_feature_2)
    (x1, e1), (x2, e2) = two_views(x, edge_index, aug, generator)
    h1 = model.project(model(x1, e1))
    h2 = model.project(model(x2, e2))
    sims = similarities(h1, h2, cfg.tau)
    return scheduled_info_nce(sims, selector.get(sims, hans, epoch))


@dataclass
class SeedResult:
    """What one seed produced: the checkpoint choice, the probe history, timings and HANS."""

    seed: int
    selection: Selection | None
    history: list[tuple[int, ProbeScores]]
    epoch_times: list[float]
    final_eta: dict[str, float]
    saturated_at: int | None
    encoder_state: dict[str, Tensor] = field(repr=False)
    selected_epoch: int = 0


def train_seed(data: Data, cfg: TrainConfig, seed: int, device: torch.device,
               run_dir: Path, label: str) -> SeedResult:
    """Train one independent run (own split, initialisation and augmentation stream)."""
    torch.manual_seed(seed)
    x, edge_index = as_features(data.x.to(device)), data.edge_index.to(device)
    model = AdNGCL(x.size(1), ModelConfig(cfg.hidden_dim, cfg.out_dim, cfg.proj_dim,
                                          cfg.activation)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    hans = make_hans(cfg)
    selector = NegativeSelector(cfg.ratio_map(), cfg.T_int)
    generator = torch.Generator(device=device).manual_seed(seed)
    labelled = getattr(data, "y", None) is not None
    split = random_split(data.num_nodes, seed) if labelled else None
    history: list[tuple[int, ProbeScores]] = []
    best_val, best_state, best_epoch = -1.0, None, 0
    times: list[float] = []
    events_path = run_dir / "hans_events.jsonl"
    bar = Progress(cfg.epochs, label)
    with events_path.open("w") as events:
        for ev in hans.events:
            events.write(json.dumps(asdict(ev)) + "\n")
        for epoch in range(1, cfg.epochs + 1):
            t0 = time.perf_counter()
            model.train()
            out = contrastive_step(model, x, edge_index, cfg, generator, selector, hans, epoch)
            opt.zero_grad(set_to_none=True)
            out.loss.backward()
            opt.step()
            for ev in hans.step(out.category):
                events.write(json.dumps(asdict(ev)) + "\n")
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t0)
            if epoch % cfg.eval_every == 0 or epoch == cfg.epochs:
                if split is None:  # unlabelled graph: nothing to select on, keep the last epoch
                    keep = epoch == cfg.epochs
                else:
                    scores = linear_probe(model.embed(x, edge_index), data.y.to(device), split,
                                          seed=seed)
                    history.append((epoch, scores))
                    keep = scores.val_micro > best_val
                    best_val = max(best_val, scores.val_micro)
                if keep:
                    best_state = copy.deepcopy(model.encoder.state_dict())
                    best_epoch = epoch
            eta = " ".join(f"{c} {v:.2f}" for c, v in hans.eta.items())
            bar.update(epoch, f"loss {out.loss.item():.4f} | eta {eta}")
    bar.close()
    assert best_state is not None  # the last epoch always evaluates
    return SeedResult(seed, select_checkpoint(history) if history else None, history, times,
                      dict(hans.eta), hans.saturated_at, best_state, best_epoch)


def _mean_std(values: list[float]) -> dict[str, float]:
    """Mean and population standard deviation (numpy's default, as the papers' tables)."""
    return {"mean": statistics.fmean(values), "std": statistics.pstdev(values)}


def _seed_metrics(r: SeedResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seed": r.seed,
        "epoch_time_s": {"mean": statistics.fmean(r.epoch_times),
                         "median": statistics.median(r.epoch_times)},
        "train_time_s": sum(r.epoch_times),
        "final_eta": r.final_eta,
        "saturated_at_epoch": r.saturated_at,
    }
    if r.selection is not None:
        s = r.selection
        out.update({
            "selected_epoch": s.epoch,
            "val_micro_f1": s.scores.val_micro, "val_macro_f1": s.scores.val_macro,
            "test_micro_f1": s.scores.test_micro, "test_macro_f1": s.scores.test_macro,
            "probe_weight_decay": s.scores.weight_decay,
            "paper_protocol": {"epoch": s.paper_epoch, "test_micro_f1": s.paper_test_micro,
                               "test_macro_f1": s.paper_test_macro},
            "history": [{"epoch": ep, **asdict(sc)} for ep, sc in r.history],
        })
    return out


def summarise(results: list[SeedResult]) -> dict[str, Any]:
    """Mean/std over seeds of every reported figure (honest protocol and paper protocol)."""
    summary: dict[str, Any] = {
        "epoch_time_s": _mean_std([statistics.fmean(r.epoch_times) for r in results]),
        "train_time_s": _mean_std([sum(r.epoch_times) for r in results]),
    }
    chosen = [r.selection for r in results if r.selection is not None]
    if chosen:
        summary.update({
            "val_micro_f1": _mean_std([s.scores.val_micro for s in chosen]),
            "val_macro_f1": _mean_std([s.scores.val_macro for s in chosen]),
            "test_micro_f1": _mean_std([s.scores.test_micro for s in chosen]),
            "test_macro_f1": _mean_std([s.scores.test_macro for s in chosen]),
            "paper_protocol_test_micro_f1": _mean_std([s.paper_test_micro for s in chosen]),
            "paper_protocol_test_macro_f1": _mean_std([s.paper_test_macro for s in chosen]),
        })
    return summary


def prepare_run_dir(out: str, dataset: str) -> Path:
    """A new, empty run directory; an existing non-empty one is never overwritten."""
    path = Path(out) if out else Path("runs") / f"{Path(dataset).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"run directory {path} already exists and is not empty; "
                         "pass a new --out (nothing was written)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create run directory {path} ({exc.strerror}); "
                         "pass a writable --out") from None
    return path


def run(cfg: TrainConfig, data: Data, run_dir: Path, device: torch.device) -> dict[str, Any]:
    """Train ``cfg.seeds`` independent seeds, write the run directory, return the metrics."""
    (run_dir / "config.toml").write_text(to_toml(cfg))
    results = []
    for seed in range(cfg.seeds):
        seed_dir = run_dir / f"seed-{seed}"
        seed_dir.mkdir()
        result = train_seed(data, cfg, seed, device, seed_dir, f"seed {seed + 1}/{cfg.seeds}")
        save_checkpoint(seed_dir / "checkpoint.pt", result.encoder_state, cfg, data.x.size(1),
                        seed, result.selected_epoch)
        results.append(result)
    best = max(results, key=lambda r: r.selection.scores.val_micro if r.selection else 0.0)
    save_checkpoint(run_dir / "checkpoint.pt", best.encoder_state, cfg, data.x.size(1),
                    best.seed, best.selected_epoch)
    metrics = {
        "edgegcl_version": __version__,
        "dataset": getattr(data, "name", cfg.dataset),
        "num_nodes": data.num_nodes,
        "num_edges": int(data.edge_index.size(1)),
        "mode": cfg.mode,
        "device": str(device),
        "labelled": any(r.selection is not None for r in results),
        "checkpoint_seed": best.seed,
        "seeds": [_seed_metrics(r) for r in results],
        "summary": summarise(results),
    }
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics
