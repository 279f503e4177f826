"""GREET's own code in edgegcl's honest harness: the peer built for graphs whose neighbours
disagree, on the same graphs and splits as edgegcl's encoders.

An external reference, run beside the project and never copied into it: the script imports
GREET's ``model`` (its two-channel encoder and edge discriminator), ``main`` (its training
steps) and ``data_loader`` (its structural encodings) from a checkout of
https://github.com/yixinliu233/GREET given by ``--greet``, and trains them as its
``main.py`` does with the settings of its script for the graph (``scripts/run_actor.sh``:
1000 epochs, k 20, alpha 0.1, margins 0.1 / 0.5, feature masks 0.1 / 0.5, edge drops 0.5 /
0.8, two contrastive rounds per epoch; ``--epochs`` may shorten it, and the report says so).
GREET's code calls ``.cuda()``; here those calls keep tensors on the CPU (``_cpu_only``), and
DGL's compiled GraphBolt library, which GREET does not use, is not loaded. Only the evaluation
is edgegcl's (``Prober``): the seed's random 10/10/80 split with the checkpoint chosen on its
validation nodes, the graph's published split s for seed s with its own choice, the raw
features on both, probed every ``--eval-every`` epochs.

GREET needs DGL, which edgegcl does not: run it from an environment that has it, e.g.

    python -m venv greet-env && greet-env/bin/pip install torch torch_geometric dgl \\
        scikit-learn pandas torchdata && greet-env/bin/pip install -e .
    greet-env/bin/python -m bench.external_greet --greet /path/to/GREET --root ROOT \\
        --dataset Actor --seeds 5 --resume
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bench import harness

NAME = "external-greet"
SETTINGS = {  # scripts/run_actor.sh
    "Actor": dict(sparse=1, epochs=1000, cl_batch_size=0, nlayers_proj=2, alpha=0.1, k=20,
                  maskfeat_rate_1=0.1, maskfeat_rate_2=0.5, dropedge_rate_1=0.5,
                  dropedge_rate_2=0.8, lr_disc=0.001, margin_hom=0.1, margin_het=0.5,
                  cl_rounds=2, eval_freq=50),
}
DEFAULTS = dict(lr_gcl=0.001, w_decay=0.0, dropout=0.5, nlayers_enc=2, emb_dim=128,
                proj_dim=128)
"""main.py's argument defaults for what the scripts leave out."""


def _cpu_only() -> None:
    """Let GREET's CUDA-only code run on the CPU: ``.cuda()`` keeps a tensor or module where it
    is, DGL graphs are built without a device, and DGL's GraphBolt (compiled per torch
    version, unused by GREET) is not loaded."""
    sys.modules.setdefault("dgl.graphbolt", types.ModuleType("dgl.graphbolt"))
    import dgl

    torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
    nn.Module.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
    graph = dgl.graph

    def cpu_graph(*args: Any, device: Any = None, **kwargs: Any) -> Any:
        return graph(*args, **kwargs)

    dgl.graph = cpu_graph


class _Embedder(nn.Module):
    """What edgegcl's Prober reads of a model: ``embed`` (GREET's evaluation embedding: both
    channels over the discriminator's graphs) and ``encoder`` (kept at the best checkpoint)."""

    def __init__(self, cl_model: nn.Module, discriminator: nn.Module, features: torch.Tensor,
                 str_encodings: torch.Tensor, edges: torch.Tensor) -> None:
        super().__init__()
        self.encoder, self.discriminator = cl_model, discriminator
        self.inputs = (features, str_encodings, edges)

    @torch.no_grad()
    def embed(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        features, str_encodings, edges = self.inputs
        self.encoder.eval()
        self.discriminator.eval()
        adj_1, adj_2, _, _ = self.discriminator(torch.cat((features, str_encodings), 1), edges)
        return self.encoder.get_embedding(features, adj_1, adj_2).detach()


def one_run(greet: str, root: str, dataset: str, seed: int, epochs: int | None,
            eval_every: int | None, threads: int) -> dict[str, Any]:
    """One seed of GREET's code, probed by edgegcl's honest protocol and published split."""
    import random

    from edgegcl.data import load_graph
    from edgegcl.training.prober import Prober

    _cpu_only()
    sys.path.insert(0, greet)
    main_mod = importlib.import_module("main")
    model_mod = importlib.import_module("model")
    loader_mod = importlib.import_module("data_loader")
    args = argparse.Namespace(**{**DEFAULTS, **SETTINGS[dataset]})
    if epochs is not None:
        args.epochs = epochs
    every = eval_every or args.eval_freq
    main_mod.args = args  # train_cl reads main's global args
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    data = load_graph(dataset, root)
    features, edges = data.x, data.edge_index
    str_encodings = loader_mod.get_structural_encoding(edges, data.num_nodes)
    cl_model = model_mod.GCL(nlayers=args.nlayers_enc, nlayers_proj=args.nlayers_proj,
                             in_dim=features.size(1), emb_dim=args.emb_dim,
                             proj_dim=args.proj_dim, dropout=args.dropout, sparse=args.sparse,
                             batch_size=args.cl_batch_size)
    with tempfile.TemporaryDirectory() as tmp:  # its k-NN cache goes to ../data/knn
        here = os.getcwd()
        os.makedirs(Path(tmp) / "run")
        os.chdir(Path(tmp) / "run")
        try:
            cl_model.set_mask_knn(features, k=args.k, dataset=dataset.lower())
        finally:
            os.chdir(here)
    discriminator = model_mod.Edge_Discriminator(data.num_nodes,
                                                 features.size(1) + str_encodings.size(1),
                                                 args.alpha, args.sparse)
    optimizer_cl = torch.optim.Adam(cl_model.parameters(), lr=args.lr_gcl,
                                    weight_decay=args.w_decay)
    optimizer_disc = torch.optim.Adam(discriminator.parameters(), lr=args.lr_disc,
                                      weight_decay=args.w_decay)
    prober = Prober(data, seed, torch.device("cpu"), "honest")
    wrapper = _Embedder(cl_model, discriminator, features, str_encodings, edges)
    times = []
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        for _ in range(args.cl_rounds):
            main_mod.train_cl(cl_model, discriminator, optimizer_cl, features, str_encodings,
                              edges)
        main_mod.train_discriminator(cl_model, discriminator, optimizer_disc, features,
                                     str_encodings, edges, args)
        times.append(time.perf_counter() - t0)
        if epoch % every == 0 or epoch == args.epochs:
            prober.probe(epoch, wrapper, features, edges, last=epoch == args.epochs)
    selection = prober.selection(wrapper, features, edges)
    baselines = prober.baselines(wrapper, features, edges)
    assert selection is not None and baselines is not None
    out = {"dataset": dataset, "seed": seed, "epochs": args.epochs, "eval_every": every,
           "honest_test_micro_f1": selection.scores.test_micro,
           "honest_val_micro_f1": selection.scores.val_micro, "honest_epoch": selection.epoch,
           "raw_test_micro_f1": baselines.raw.test_micro,
           "epoch_s_mean": statistics.fmean(times), "threads": threads}
    if baselines.published is not None and baselines.published_raw is not None:
        out.update(published_split=baselines.published_number,
                   published_test_micro_f1=baselines.published.scores.test_micro,
                   published_raw_test_micro_f1=baselines.published_raw.test_micro)
    return out


def main() -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--greet", required=True, help="a checkout of yixinliu233/GREET")
    p.add_argument("--root", required=True, help="datasets folder (PyG's raw files)")
    p.add_argument("--dataset", default="Actor", choices=sorted(SETTINGS))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=None, help="fewer epochs than GREET's script")
    p.add_argument("--eval-every", type=int, default=None, help="default: the script's")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--resume", action="store_true", help="keep the seeds already measured")
    args = p.parse_args()
    res = harness.record(NAME, sys.argv[1:], root=args.root)
    res["command"] = res["command"].replace(args.greet, "GREET")
    runs: list[dict[str, Any]] = []
    if args.resume and (harness.RESULTS / f"{NAME}.json").exists():
        runs = harness.read(NAME)["runs"]
    res["runs"] = runs
    for seed in range(args.seeds):
        if any(r["seed"] == seed and r["dataset"] == args.dataset for r in runs):
            continue
        runs.append(one_run(args.greet, args.root, args.dataset, seed, args.epochs,
                            args.eval_every, args.threads))
        print(runs[-1], flush=True)
        res["wall_min"] = harness.wall_min(res)
        harness.write(NAME, res, report(res))
    print(report(res))


def report(res: dict[str, Any]) -> str:
    lines = ["# GREET's own code in edgegcl's honest harness", "", *harness.header(res, note=""),
             (__doc__ or "").split("\n\n")[1].replace("\n", " "), "",
             "| dataset | seeds | epochs | honest test (random 10/10/80) | raw features | "
             "published splits | raw features (published) | epoch s |",
             "|---|---|---|---|---|---|---|---|"]
    for ds in sorted({r["dataset"] for r in res["runs"]}):
        runs = [r for r in res["runs"] if r["dataset"] == ds]

        def fig(key: str) -> str:
            values = [r[key] for r in runs if key in r]
            return (f"{statistics.fmean(values):.2f} ± {statistics.pstdev(values):.2f}"
                    if values else "")

        lines.append(f"| {ds} | {len(runs)} | {runs[0]['epochs']} | "
                     f"{fig('honest_test_micro_f1')} | {fig('raw_test_micro_f1')} | "
                     f"{fig('published_test_micro_f1')} | {fig('published_raw_test_micro_f1')} | "
                     f"{statistics.fmean(r['epoch_s_mean'] for r in runs):.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
