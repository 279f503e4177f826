"""ProGCL's own code (GRACE, ProGCL-weight, ProGCL-mix) in edgegcl's honest harness.

An external reference, run beside the project and never copied into it: the script imports
``pGRACE.model`` (GRACE, its encoder, the Beta mixture and the weight / mix losses) from a
checkout of https://github.com/junxia97/ProGCL given by ``--progcl``, and trains it as the
repository's ``train.py`` does (uniform edge dropping; feature columns masked as GRACE's
``drop_feature`` masks them, by edgegcl's ``mask_columns``, since ``pGRACE.functional`` needs
scikit-learn for its other functions; the mixture fitted once at ``epoch_start`` with its
published initialisation; ``sel_num`` mixed negatives). Only the evaluation is edgegcl's, the same as every cell of bench.hardness: the
seed's ``random_split`` (10 / 10 / 80), ``linear_probe`` every ``--eval-every`` epochs, the
checkpoint chosen on validation micro-F1, the test read once there.

Settings: GRACE's published Cora configuration (lr 5e-4, 128 hidden and projection units,
ReLU, edges dropped 0.2 / 0.4, features 0.3 / 0.4, tau 0.4, 200 epochs, weight decay 1e-5,
row-normalised features); ProGCL publishes no Cora file, so ``epoch_start`` defaults to a
third of the epochs (its files use 16-40 %) and ``sel_num`` to its default 1000. ``grace``
is the same code with the mixture never fitted (``epoch_start`` after the last epoch).

    git clone https://github.com/junxia97/ProGCL /path/to/ProGCL   # needs scipy, matplotlib
    python -m bench.external_progcl --progcl /path/to/ProGCL --root ROOT --seeds 5 --resume
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch import nn

from bench import harness
from bench.machine import describe

HERE = Path(__file__).resolve().parent
MODES = ("grace", "weight", "mix")
CORA = {"learning_rate": 5e-4, "num_hidden": 128, "num_proj_hidden": 128,
        "drop_edge_rate_1": 0.2, "drop_edge_rate_2": 0.4, "drop_feature_rate_1": 0.3,
        "drop_feature_rate_2": 0.4, "tau": 0.4, "num_epochs": 200, "weight_decay": 1e-5}
"""GRACE's published Cora settings (its config.yaml), which ProGCL's code starts from."""


class _Embedder(nn.Module):
    """What edgegcl's Prober reads of a model: ``embed`` (frozen encoder output) and
    ``encoder`` (kept at the best checkpoint)."""

    def __init__(self, grace: nn.Module) -> None:
        super().__init__()
        self.grace = grace
        self.encoder = grace.encoder

    @torch.no_grad()
    def embed(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        was = self.grace.training
        self.grace.eval()
        out = self.grace(x, edge_index).detach()
        self.grace.train(was)
        return out


def one_run(progcl: str, root: str, dataset: str, mode: str, seed: int, epochs: int,
            epoch_start: int, sel_num: int, eval_every: int, threads: int) -> dict[str, Any]:
    """One seed of ProGCL's code in ``mode``, probed by edgegcl's honest protocol."""
    sys.path.insert(0, progcl)
    model_mod = importlib.import_module("pGRACE.model")
    from torch_geometric.utils import dropout_edge

    from edgegcl.nn.augment import mask_columns

    from edgegcl.data import load_graph
    from edgegcl.training.prober import Prober

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    np.random.seed(seed)
    data = load_graph(dataset, root)
    x = data.x / data.x.sum(1, keepdim=True).clamp_min(1.0)  # NormalizeFeatures, as GRACE
    p = CORA
    encoder = model_mod.Encoder(x.size(1), p["num_hidden"], nn.ReLU(), k=2)
    grace = model_mod.GRACE(encoder, p["num_hidden"], p["num_proj_hidden"], p["tau"])
    optimiser = torch.optim.Adam(grace.parameters(), lr=p["learning_rate"],
                                 weight_decay=p["weight_decay"])
    bmm = model_mod.BetaMixture1D(10, torch.tensor([1, 2], dtype=torch.float64),
                                  torch.tensor([2, 1], dtype=torch.float64),
                                  torch.tensor([0.95, 0.05], dtype=torch.float64))
    args = SimpleNamespace(epoch_start=epoch_start if mode != "grace" else epochs + 1,
                           mode=mode if mode != "grace" else "weight", sel_num=sel_num)
    stream = torch.Generator().manual_seed(seed)
    prober = Prober(data, seed, torch.device("cpu"), "honest")
    wrapper = _Embedder(grace)
    times = []
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        grace.train()
        optimiser.zero_grad()
        e1 = dropout_edge(data.edge_index, p=p["drop_edge_rate_1"])[0]
        e2 = dropout_edge(data.edge_index, p=p["drop_edge_rate_2"])[0]
        x1 = mask_columns(x, p["drop_feature_rate_1"], stream)
        x2 = mask_columns(x, p["drop_feature_rate_2"], stream)
        loss = grace.loss(grace(x1, e1), grace(x2, e2), epoch, args, bmm)
        loss.backward()
        optimiser.step()
        times.append(time.perf_counter() - t0)
        if epoch % eval_every == 0 or epoch == epochs:
            prober.probe(epoch, wrapper, x, data.edge_index, last=epoch == epochs)
    selection = prober.selection(wrapper, x, data.edge_index)
    assert selection is not None
    return {"dataset": dataset, "mode": mode, "seed": seed, "epochs": epochs,
            "epoch_start": args.epoch_start, "sel_num": sel_num,
            "honest_test_micro_f1": selection.scores.test_micro,
            "honest_val_micro_f1": selection.scores.val_micro, "honest_epoch": selection.epoch,
            "epoch_s_mean": statistics.fmean(times), "threads": threads}


def report(res: dict[str, Any]) -> str:
    """The markdown: one row per mode, mean ± population std over seeds."""
    from bench.sweep import mean_std

    lines = ["# ProGCL's own code in edgegcl's honest harness", ""]
    for h in res["invocations"]:
        lines += [f"- {h['started']}, {h['runs']} runs, {h['wall_min']:.1f} min wall; "
                  f"{h['machine']}:", "", f"      {h['command']}", ""]
    lines += [(__doc__ or "").split("\n\n")[1].replace("\n", " "), "",
              (__doc__ or "").split("\n\n")[2].replace("\n", " "), "",
              "Columns: mean ± population std over seeds of the chosen checkpoint's validation "
              "and honest test micro-F1; the median chosen epoch; epoch ms = the runs' own mean "
              "epoch, on a machine doing other work too (not a side-by-side timing).", "",
              "| dataset | mode | n | val | test | chosen epoch | epoch ms |",
              "|---|---|---|---|---|---|---|"]
    for ds in sorted({r["dataset"] for r in res["runs"]}):
        for mode in MODES:
            runs = [r for r in res["runs"] if r["dataset"] == ds and r["mode"] == mode]
            if not runs:
                continue
            lines.append(f"| {ds} | {mode} | {len(runs)} | "
                         f"{mean_std([r['honest_val_micro_f1'] for r in runs])} | "
                         f"{mean_std([r['honest_test_micro_f1'] for r in runs])} | "
                         f"{statistics.median(r['honest_epoch'] for r in runs):.0f} | "
                         f"{1000 * statistics.fmean(r['epoch_s_mean'] for r in runs):.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = harness.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--progcl", required=True, help="a checkout of junxia97/ProGCL")
    p.add_argument("--root", required=True, help="directory holding Cora/")
    p.add_argument("--dataset", default="Cora")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=CORA["num_epochs"])
    p.add_argument("--epoch-start", type=int, default=None, help="default: a third of --epochs")
    p.add_argument("--sel-num", type=int, default=1000)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--name", default="external-progcl")
    args = p.parse_args(argv)
    if not (Path(args.progcl) / "pGRACE" / "model.py").is_file():
        raise SystemExit(f"external_progcl: {args.progcl} holds no pGRACE/model.py; give a "
                         "checkout of https://github.com/junxia97/ProGCL")

    start = args.epochs // 3 if args.epoch_start is None else args.epoch_start
    path = harness.RESULTS / f"{args.name}.json"
    res = json.loads(path.read_text()) if args.resume and path.exists() else \
        {"invocations": [], "runs": []}
    done = {(r["dataset"], r["mode"], r["seed"]) for r in res["runs"]}
    todo = [(m, s) for m in args.modes.split(",") for s in range(args.seeds)
            if (args.dataset, m, s) not in done]
    t0, started = time.perf_counter(), harness.stamp()
    for k, (mode, seed) in enumerate(todo, 1):
        r = one_run(str(Path(args.progcl).resolve()), args.root, args.dataset, mode, seed,
                    args.epochs, start, args.sel_num, args.eval_every, args.threads)
        res["runs"].append(r)
        harness.save(path, json.dumps(res, indent=1) + "\n")
        el = (time.perf_counter() - t0) / 60
        print(f"external_progcl: {k}/{len(todo)} {mode} seed {seed}: honest "
              f"{r['honest_test_micro_f1']:.2f} (val {r['honest_val_micro_f1']:.2f}); "
              f"{el:.1f} min, ETA {el / k * (len(todo) - k):.0f} min", flush=True)
    command = (f"python -m bench.external_progcl --progcl PROGCL --root ROOT --dataset "
               f"{args.dataset} --modes {args.modes} --seeds {args.seeds} --epochs {args.epochs} "
               f"--epoch-start {start} --sel-num {args.sel_num} --eval-every {args.eval_every} "
               f"--threads {args.threads}" + (" --resume" if args.resume else ""))
    res["invocations"].append({"started": started, "runs": len(todo), "machine": describe(),
                               "wall_min": (time.perf_counter() - t0) / 60,
                               "command": command})
    harness.save(path, json.dumps(res, indent=1) + "\n")
    harness.save(harness.RESULTS / f"{args.name}.md", report(res))
    print(report(res))


if __name__ == "__main__":
    main()
