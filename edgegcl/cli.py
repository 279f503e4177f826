"""The ``edgegcl`` command line. Usage errors print one line and exit with code 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import fields
from typing import NoReturn

from edgegcl import __version__
from edgegcl.config import TrainConfig, build, load_toml
from edgegcl.errors import UsageError

_HELP = {
    "dataset": "Cora, CiteSeer, PubMed, DBLP, WikiCS, Amazon-Computers, Amazon-Photo, "
               "Coauthor-CS, Actor, synthetic, or a .pt / .npz graph file",
    "root": "directory holding the datasets ('': $EDGEGCL_DATA or ~/.cache/edgegcl/datasets)",
    "mode": "full (the whole graph is one batch), minibatch (neighbour-sampled batches), or "
            "auto (full up to 10000 nodes)",
    "batch_size": "minibatch: seed nodes (anchors) per batch",
    "fanout": "minibatch: neighbours sampled per hop, e.g. 10,10 (-1: all)",
    "sampler": "minibatch: auto (PyG's NeighborLoader when pyg-lib or torch-sparse is "
               "installed), builtin, or pyg",
    "epochs": "training epochs per seed",
    "seeds": "independent runs, each with its own split and initialisation",
    "out": "run directory to create ('': runs/DATASET-TIMESTAMP)",
    "device": "auto, cpu, cuda or cuda:N",
    "eval_every": "epochs between linear-probe checkpoints",
    "theta_max": "global negative budget theta_max, a fraction of |N_i| in (0, 1]",
    "ratios": "category ratios EASY,HARD,INTER in percent, summing to 100",
    "c_cat": "per-step caps c_cat for HARD,INTER,EASY",
    "tau": "InfoNCE temperature",
    "T_init": "bootstrap epochs at eta_0", "T_int": "epochs between HANS updates",
    "e": "loss-gate window (epochs)", "gamma": "loss-gate factor", "b": "base step size",
    "swap_every": "epochs between swaps after saturation (0: T_int)",
    "nodes": "synthetic: number of nodes", "classes": "synthetic: planted classes",
    "features": "synthetic: feature dimension", "avg_degree": "synthetic: average degree",
    "homophily": "synthetic: fraction of intra-class edges", "graph_seed": "synthetic: graph seed",
}


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (no usage dump) with exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"edgegcl: error: {message} (see '{self.prog} --help')\n")


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train AdNGCL with HANS and evaluate it",
                       description="Train AdNGCL with HANS; writes config, metrics, the HANS "
                                   "event log and checkpoints into a run directory.")
    p.add_argument("--config", metavar="FILE.toml",
                   help="TOML file setting any of the options below (flags win)")
    defaults = TrainConfig()
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        kind = {"int": int, "float": float}.get(f.type, str)  # type: ignore[call-overload]
        p.add_argument(flag, dest=f.name, type=kind, default=None, metavar=f.name.upper(),
                       help=f"{_HELP.get(f.name, f.name.replace('_', ' '))} "
                            f"(default: {getattr(defaults, f.name)!r})")
    p.set_defaults(func=_cmd_train)


def _cmd_train(args: argparse.Namespace) -> int:
    from edgegcl.data import SyntheticSpec, load_graph
    from edgegcl.run import prepare_run_dir, run
    from edgegcl.train import check_full_graph_memory, resolve_device, resolve_mode

    flags = {f.name: getattr(args, f.name) for f in fields(TrainConfig)
             if getattr(args, f.name) is not None}
    cfg = build(load_toml(args.config) if args.config else {}, flags)
    spec = SyntheticSpec(cfg.nodes, cfg.classes, cfg.features, cfg.avg_degree, cfg.homophily,
                         cfg.graph_seed)
    device = resolve_device(cfg.device)
    data = load_graph(cfg.dataset, cfg.root or None, spec)
    if resolve_mode(cfg.mode, data.num_nodes) == "full":
        check_full_graph_memory(data.num_nodes, device)
    run_dir = prepare_run_dir(cfg.out, cfg.dataset)
    print(f"edgegcl: training on {data.name} ({data.num_nodes} nodes, "
          f"{data.edge_index.size(1)} edges), {cfg.seeds} seed(s); run directory {run_dir}",
          file=sys.stderr)
    metrics = run(cfg, data, run_dir, device)
    summary = metrics["summary"]
    if "test_micro_f1" in summary:
        t, p = summary["test_micro_f1"], summary["paper_protocol_test_micro_f1"]
        print(f"test micro-F1 {t['mean']:.2f} ± {t['std']:.2f} (checkpoint chosen on validation); "
              f"paper protocol (best test over checkpoints) {p['mean']:.2f} ± {p['std']:.2f}")
    print(f"mean epoch time {summary['epoch_time_s']['mean']:.3f} s; results in {run_dir}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(prog="edgegcl", description="Graph contrastive learning with HANS.")
    parser.add_argument("--version", action="version", version=f"edgegcl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_train(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"edgegcl: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("edgegcl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
