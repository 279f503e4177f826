"""MaskGAE's own code beside edgegcl's link task, on the very same held-out pairs.

An external reference, run beside the project and never copied into it: the script imports
``maskgae.model`` and ``maskgae.mask`` from a checkout of https://github.com/EdisonLeeeee/MaskGAE
given by ``--maskgae`` and trains it as its ``train_linkpred.py`` does with the README's
settings for Cora and CiteSeer (``--bn --mask Edge``: a one-layer GCN encoder of 128 units with
batch normalisation, ELU and input dropout 0.8, 70 % of the edges masked at each step, the MLP
edge decoder on the Hadamard product and the degree decoder (alpha 0.003), Adam at lr 0.01 and
weight decay 5e-5, gradients clipped at 1, 500 epochs, the checkpoint of the best validation
AUC, checked every 10 epochs). Its ``torch_sparse`` import is replaced by passing
``edge_index`` (``SparseTensor.from_edge_index`` returns it), which these undirected graphs
without repeated edges allow; MaskGAE's decoder scores the pairs, and edgegcl's
``pair_figures`` computes AUC and AP from its scores (the definitions of scikit-learn's
functions, which MaskGAE's own test step calls).

Each split is PyG's ``RandomLinkSplit`` (5 % validation, 10 % test, undirected, labels split,
no training negatives), seeded 0, 1, ...: what MaskGAE's script makes. It is written as an
``.npz`` with the held-out pairs (``val_pos``, ``val_neg``, ``test_pos``, ``test_neg``) beside
``x`` and the training ``edge_index``, and ``edgegcl train --task link`` reads that file:
both methods train on the same edges and are judged on the same pairs, the checkpoint (and
edgegcl's scorer) chosen on validation AUC, test read once.

    git clone https://github.com/EdisonLeeeee/MaskGAE /path/to/MaskGAE
    python -m bench.external_maskgae --maskgae /path/to/MaskGAE --root ROOT \\
        --graphs Cora,CiteSeer --splits 3 --seeds 5 --resume
"""

from __future__ import annotations

import importlib
import random
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench import harness

README = {"encoder_channels": 128, "hidden_channels": 128, "decoder_channels": 64,
          "encoder_layers": 1, "decoder_layers": 2, "encoder_dropout": 0.8,
          "decoder_dropout": 0.2, "alpha": 0.003, "lr": 0.01, "weight_decay": 5e-5,
          "grad_norm": 1.0, "batch_size": 2**16, "p": 0.7, "epochs": 500, "eval_period": 10,
          "bn": True, "layer": "gcn", "encoder_activation": "elu"}
"""train_linkpred.py's defaults with the README's ``--bn --mask Edge``."""


def split_file(graph: str, root: str, seed: int, path: Path) -> None:
    """PyG's ``RandomLinkSplit`` of ``graph`` (85 / 5 / 10, undirected), seeded ``seed`` as
    MaskGAE's script seeds it (every stream its sampler draws from, so that the same seed
    gives the same file, non-edges included), written to ``path`` as an ``.npz`` edgegcl reads: ``x``, the
    training ``edge_index`` (both directions) and the four held-out pair sets."""
    import torch_geometric.transforms as T

    from edgegcl.data import load_graph

    data = load_graph(graph, root)
    random.seed(seed)  # PyG's negative sampling draws from Python's and numpy's streams too
    np.random.seed(seed)
    torch.manual_seed(seed)
    train, val, test = T.RandomLinkSplit(num_val=0.05, num_test=0.1, is_undirected=True,
                                         split_labels=True,
                                         add_negative_train_samples=False)(data)
    arrays = {"x": data.x.numpy(), "edge_index": train.edge_index.numpy(),
              "val_pos": val.pos_edge_label_index.numpy(),
              "val_neg": val.neg_edge_label_index.numpy(),
              "test_pos": test.pos_edge_label_index.numpy(),
              "test_neg": test.neg_edge_label_index.numpy()}
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npz", delete=False) as tmp:
        np.savez(tmp, **arrays)
    Path(tmp.name).replace(path)


def _missing(module: str) -> bool:
    """Whether ``module`` can be imported neither from sys.modules (a stand-in put there
    before) nor from the installation."""
    return module not in sys.modules and importlib.util.find_spec(module) is None


def _stand_ins() -> None:
    """``torch_sparse`` and ``sklearn.metrics`` where they are not installed: MaskGAE's model
    imports them, and uses the first only to wrap ``edge_index`` (passed on as it is) and the
    second only in its own test step, which this harness does not call."""
    if _missing("torch_sparse"):
        sparse = types.ModuleType("torch_sparse")

        class SparseTensor:  # noqa: D401 - MaskGAE calls from_edge_index(...).to(device)
            @staticmethod
            def from_edge_index(edge_index: torch.Tensor, sparse_sizes: Any = None
                                ) -> types.SimpleNamespace:
                return types.SimpleNamespace(to=lambda device: edge_index)

        sparse.SparseTensor = SparseTensor  # type: ignore[attr-defined]
        sys.modules["torch_sparse"] = sparse
    if _missing("sklearn"):
        sklearn = types.ModuleType("sklearn")
        metrics = types.ModuleType("sklearn.metrics")
        metrics.roc_auc_score = metrics.average_precision_score = None  # type: ignore[attr-defined]
        sklearn.metrics = metrics  # type: ignore[attr-defined]
        sys.modules["sklearn"], sys.modules["sklearn.metrics"] = sklearn, metrics


def maskgae_run(checkout: str, split: Path, seed: int, epochs: int, threads: int
                ) -> dict[str, Any]:
    """One run of MaskGAE's code on the split file: its test AUC / AP (percent) at the
    checkpoint of the best validation AUC, and its mean epoch time."""
    from torch_geometric.data import Data

    from edgegcl.evaluation.links import pair_figures

    _stand_ins()
    sys.path.insert(0, checkout)
    model_mod = importlib.import_module("maskgae.model")
    mask_mod = importlib.import_module("maskgae.mask")
    torch.set_num_threads(threads)
    arrays = np.load(split)
    pairs = {k: torch.from_numpy(arrays[k]) for k in ("val_pos", "val_neg", "test_pos",
                                                       "test_neg")}
    data = Data(x=torch.from_numpy(arrays["x"]), edge_index=torch.from_numpy(arrays["edge_index"]))
    p = README
    random.seed(seed)  # every stream MaskGAE's set_seed seeds (PyG's sampler draws from some)
    np.random.seed(seed)
    torch.manual_seed(seed)
    encoder = model_mod.GNNEncoder(data.num_features, p["encoder_channels"],
                                   p["hidden_channels"], num_layers=p["encoder_layers"],
                                   dropout=p["encoder_dropout"], bn=p["bn"], layer=p["layer"],
                                   activation=p["encoder_activation"])
    edge_decoder = model_mod.EdgeDecoder(p["hidden_channels"], p["decoder_channels"],
                                         num_layers=p["decoder_layers"],
                                         dropout=p["decoder_dropout"])
    degree_decoder = model_mod.DegreeDecoder(p["hidden_channels"], p["decoder_channels"],
                                             num_layers=p["decoder_layers"],
                                             dropout=p["decoder_dropout"])
    model = model_mod.MaskGAE(encoder, edge_decoder, degree_decoder,
                              mask_mod.MaskEdge(p=p["p"]))
    optimizer = torch.optim.Adam(model.parameters(), lr=p["lr"], weight_decay=p["weight_decay"])

    @torch.no_grad()
    def figures(pos: torch.Tensor, neg: torch.Tensor) -> dict[str, float]:
        model.eval()
        z = model(data.x, data.edge_index)
        return pair_figures(model.batch_predict(z, pos), model.batch_predict(z, neg))

    best, best_state, best_epoch, times = -1.0, None, 0, []
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        model.train_step(data, optimizer, alpha=p["alpha"], batch_size=p["batch_size"],
                         grad_norm=p["grad_norm"])
        times.append(time.perf_counter() - t0)
        if epoch % p["eval_period"] == 0:
            val = figures(pairs["val_pos"], pairs["val_neg"])["auc"]
            if val > best:
                best, best_epoch = val, epoch
                best_state = {k: v.clone() for k, v in model.state_dict().items()}
    assert best_state is not None
    model.load_state_dict(best_state)
    test = figures(pairs["test_pos"], pairs["test_neg"])
    return {"val_auc": best, "test_auc": test["auc"], "test_ap": test["ap"],
            "epoch": best_epoch, "epoch_s": statistics.fmean(times)}


def edgegcl_cell(split: Path, seeds: int, extra: list[str], out: Path) -> dict[str, Any]:
    """``edgegcl train --dataset SPLIT.npz --task link --seeds S`` as a user runs it."""
    run = harness.train(["--dataset", str(split), "--task", "link", "--seeds", str(seeds),
                         *extra], out, show=True)
    seeds_rows = run.metrics["seeds"]
    return {"test_auc": [s["test_auc"] for s in seeds_rows],
            "test_ap": [s["test_ap"] for s in seeds_rows],
            "raw_auc": run.metrics["summary"].get("raw_features_test_auc", {}).get("mean"),
            "raw_ap": run.metrics["summary"].get("raw_features_test_ap", {}).get("mean"),
            "scorers": [s.get("scorer") for s in seeds_rows],
            "encoders": [s.get("encoder") for s in seeds_rows], "wall_s": run.wall_s}


def _ms(values: list[float]) -> str:
    return (f"{statistics.fmean(values):.2f} ± {statistics.pstdev(values):.2f}"
            if values else "")


def report(res: dict[str, Any]) -> str:
    """One row per graph and method: test AUC and AP over every split and seed."""
    lines = ["# Links: MaskGAE's own code and edgegcl on the same splits", "",
             *harness.header(res, note=res.get("note", "")),
             " ".join((__doc__ or "").split("\n\n")[1].split()), "",
             " ".join((__doc__ or "").split("\n\n")[2].split()), "",
             "Figures: mean ± population std over every (split, seed) run, percent.", "",
             "| graph | method | runs | test AUC | test AP | wall s |",
             "|---|---|---|---|---|---|"]
    for graph, cells in res["graphs"].items():
        mg = [r for runs in cells.get("maskgae", {}).values() for r in runs]
        if mg:
            lines.append(f"| {graph} | MaskGAE (its code, README settings) | {len(mg)} | "
                         f"{_ms([r['test_auc'] for r in mg])} | "
                         f"{_ms([r['test_ap'] for r in mg])} | "
                         f"{statistics.fmean(r['epoch_s'] for r in mg) * README['epochs']:.0f}"
                         " per run (its epochs, without the checks) |")
        eg = list(cells.get("edgegcl", {}).values())
        if eg:
            auc = [v for c in eg for v in c["test_auc"]]
            ap = [v for c in eg for v in c["test_ap"]]
            per = len(auc) // len(eg)
            lines.append(f"| {graph} | edgegcl default `--task link` | {len(auc)} | {_ms(auc)} "
                         f"| {_ms(ap)} | {statistics.fmean(c['wall_s'] for c in eg):.0f} per "
                         f"split (its {per} seed{'s' if per > 1 else ''}) |")
            raw_auc = [c["raw_auc"] for c in eg if c.get("raw_auc") is not None]
            raw_ap = [c["raw_ap"] for c in eg if c.get("raw_ap") is not None]
            if raw_auc:  # each split's mean over its seeds
                lines.append(f"| {graph} | raw features (edgegcl's scorers, chosen on "
                             f"validation; over splits) | {len(raw_auc)} | {_ms(raw_auc)} | "
                             f"{_ms(raw_ap)} | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = harness.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--maskgae", default=None, help="a checkout of EdisonLeeeee/MaskGAE (without "
                   "it, only edgegcl runs)")
    p.add_argument("--root", required=True, help="datasets folder (PyG's raw files)")
    p.add_argument("--graphs", default="Cora,CiteSeer")
    p.add_argument("--splits", type=int, default=3, help="RandomLinkSplit seeds 0 .. S-1")
    p.add_argument("--seeds", type=int, default=5, help="runs of each method per split")
    p.add_argument("--epochs", type=int, default=README["epochs"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--methods", default="maskgae,edgegcl")
    p.add_argument("--extra", default="", help="more edgegcl train flags")
    p.add_argument("--name", default="external-maskgae")
    p.add_argument("--note", default="nothing else running", help="what ran beside it")
    p.add_argument("--resume", action="store_true", help="keep the runs already measured")
    args = p.parse_args(argv)
    methods = args.methods.split(",")
    if "maskgae" in methods and not (args.maskgae and (
            Path(args.maskgae) / "maskgae" / "model.py").is_file()):
        raise SystemExit("external_maskgae: --maskgae must be a checkout of "
                         "https://github.com/EdisonLeeeee/MaskGAE (maskgae/model.py)")
    res = harness.record("external_maskgae", sys.argv[1:] if argv is None else argv,
                         args.root)
    res["note"] = args.note
    if args.maskgae:  # a machine's path, as ROOT is
        res["command"] = res["command"].replace(args.maskgae, "MASKGAE")
    res["graphs"] = harness.read(args.name).get("graphs", {}) if args.resume and (
        harness.RESULTS / f"{args.name}.json").exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        for graph in args.graphs.split(","):
            cells = res["graphs"].setdefault(graph, {"maskgae": {}, "edgegcl": {}})
            for s in range(args.splits):
                split = Path(tmp) / f"{graph}-split{s}.npz"
                split_file(graph, args.root, s, split)
                if "maskgae" in methods:
                    runs = cells["maskgae"].setdefault(str(s), [])
                    for seed in range(len(runs), args.seeds):
                        runs.append(maskgae_run(str(Path(args.maskgae).resolve()), split, seed,
                                                args.epochs, args.threads))
                        print(f"external_maskgae: {graph} split {s} seed {seed}: MaskGAE "
                              f"{runs[-1]}", flush=True)
                        harness.write(args.name, res, report(res))
                if "edgegcl" in methods and str(s) not in cells["edgegcl"]:
                    cells["edgegcl"][str(s)] = edgegcl_cell(
                        split, args.seeds, args.extra.split(), Path(tmp) / f"run-{graph}-{s}")
                    harness.write(args.name, res, report(res))
    res["wall_min"] = harness.wall_min(res)
    harness.write(args.name, res, report(res))
    print(report(res))


if __name__ == "__main__":
    main()
