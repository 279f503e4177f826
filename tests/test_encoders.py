"""The built-in encoders (edgegcl.nn.family: gcn, ego, poly) through the whole tool: the same
embeddings from the forward pass, the chunked all-node pass, sparse features and trimmed
mini-batches; view 1's mask folded into the first weights; checkpoints; the portable ONNX
model with onnxruntime alone and with the torch-free runtime (whole graph and k-hop batches);
INT8; exact resume from the command line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import EpochRows, capture

from edgegcl.cli.main import main
from edgegcl.data import SyntheticSpec, synthetic_graph
from edgegcl.data.sampling import make_loader
from edgegcl.errors import UsageError
from edgegcl.nn.config import ModelConfig
from edgegcl.nn.family import ENCODERS, build_encoder, encoder_name
from edgegcl.nn.poly import initial_gamma
from edgegcl.onnx.export import check_against_torch, export_encoder
from edgegcl.onnx.quantize import quantize_int8, row_cosines
from edgegcl.training.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from edgegcl.training.config import TrainConfig
from edgegcl_embed.contract import INTERFACE
from edgegcl_embed.runtime import EncoderSession, portable_session

NAMES = list(ENCODERS)
# float32 sums of a few dozen terms of size ~1 taken in another order: far inside 1e-5
TOL = 1e-5


@pytest.fixture(scope="module")
def data():
    return synthetic_graph(SyntheticSpec(num_nodes=150, num_features=10, avg_degree=6, seed=1))


def _encoder(name: str, layers: int = 2, in_dim: int = 10, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    # poly from personalised PageRank's start, so every hop's coefficient is in play
    return build_encoder(name, in_dim, ModelConfig(16, 8, 8, "prelu", num_layers=layers,
                                                   poly_alpha=0.3)).eval()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("layers", [1, 2, 3])
def test_every_path_gives_the_same_embeddings(data, name: str, layers: int) -> None:
    enc = _encoder(name, layers)
    with torch.no_grad():
        full = enc(data.x, data.edge_index)
        sparse = enc(data.x.to_sparse_csr(), data.edge_index)
    assert full.shape == (150, 8) and encoder_name(enc) == name
    torch.testing.assert_close(sparse, full, rtol=TOL, atol=TOL)
    for x in (data.x, data.x.to_sparse_csr()):
        torch.testing.assert_close(enc.embed_nodes(x, data.edge_index, chunk_rows=37), full,
                                   rtol=TOL, atol=TOL)
    batch = next(iter(make_loader(data, 20, [-1] * layers, sampler="builtin", seed=0)))
    with torch.no_grad():
        trimmed = enc(batch.x, batch.edge_index, batch.num_sampled_nodes)
        whole = enc(batch.x, batch.edge_index)
    torch.testing.assert_close(trimmed, whole[:20], rtol=TOL, atol=TOL)


@pytest.mark.parametrize("name", NAMES)
def test_the_column_mask_folded_into_the_weights_is_the_masked_features(data, name: str) -> None:
    enc = _encoder(name).train()
    keep = (torch.arange(10) % 3 != 0).float()
    folded = enc(data.x, data.edge_index, feature_keep=keep)
    masked = enc(data.x * keep, data.edge_index)
    torch.testing.assert_close(folded, masked, rtol=TOL, atol=TOL)
    folded.sum().backward()  # gradients flow through the masked weights
    assert all(p.grad is not None for p in enc.parameters() if p.requires_grad)


def test_poly_starts_at_personalised_pagerank_and_alpha_1_is_the_nodes_own_mlp(data) -> None:
    torch.testing.assert_close(initial_gamma(2, 0.1), torch.tensor([0.1, 0.09, 0.81]))
    enc = build_encoder("poly", 10, ModelConfig(16, 8, 8, "prelu", poly_alpha=1.0)).eval()
    with torch.no_grad():  # gamma = (1, 0, 0): the graph plays no part
        assert torch.equal(enc(data.x, data.edge_index), enc.finish(enc.lin1(data.x)))


def test_poly_filters_at_the_narrower_width_with_the_same_result(tmp_path: Path, data) -> None:
    """Features wider than W_1 are mapped before the filter, narrower ones after it (the
    filter is linear: the same numbers up to summation order), in torch and in the export."""
    torch.manual_seed(0)
    cfg = ModelConfig(6, 8, 8, "prelu", poly_alpha=0.3)  # W_1 6 wide < the 10 features
    enc = build_encoder("poly", 10, cfg).eval()
    with torch.no_grad():
        full = enc(data.x, data.edge_index)
        narrow = enc.finish(torch.nn.functional.linear(  # filtered at the features' width
            sum(g * p for g, p in zip(enc.gamma, _powers(data, 2))), enc.lin1.weight))
    torch.testing.assert_close(full, narrow, rtol=TOL, atol=TOL)
    torch.testing.assert_close(enc.embed_nodes(data.x, data.edge_index, chunk_rows=37), full,
                               rtol=TOL, atol=TOL)
    path = tmp_path / "m.onnx"
    export_encoder(Checkpoint(enc, TrainConfig(encoder="poly", hidden_dim=6, out_dim=8,
                                               proj_dim=8, poly_alpha=0.3), 10, 0, 0), path)
    checks = check_against_torch(path, enc, data.x, data.edge_index)
    assert max(c.max_abs_diff for c in checks) <= 1e-4


def _powers(data, hops: int) -> list[torch.Tensor]:
    """X, A_hat X, ..., A_hat^hops X with A_hat dense (Eq. 4), the filter's terms."""
    n = data.num_nodes
    a = torch.zeros(n, n).index_put_((data.edge_index[1], data.edge_index[0]), torch.ones(
        data.edge_index.size(1)), accumulate=True).fill_diagonal_(0) + torch.eye(n)
    d = a.sum(1).rsqrt()
    a_hat = d[:, None] * a * d[None, :]
    powers = [data.x]
    for _ in range(hops):
        powers.append(a_hat @ powers[-1])
    return powers


def test_the_ego_half_of_each_layer_is_the_nodes_own(data) -> None:
    """With the neighbour part's weights at zero, the second half of the embedding of a node
    is a function of its own features alone: cutting every edge leaves it unchanged."""
    enc = _encoder("ego")
    with torch.no_grad():
        for i in (1, 2):
            enc.layer(i)[0].lin.weight.zero_()
        with_edges = enc(data.x, data.edge_index)
        alone = enc(data.x, data.edge_index[:, :0])
    assert torch.equal(with_edges[:, 4:], alone[:, 4:])


@pytest.mark.parametrize("name", ["ego", "poly"])
def test_checkpoints_rebuild_the_encoder_they_name(tmp_path: Path, data, name: str) -> None:
    cfg = TrainConfig(encoder=name, hidden_dim=16, out_dim=8, proj_dim=8, poly_alpha=0.3)
    enc = _encoder(name)
    save_checkpoint(tmp_path / "c.pt", enc.state_dict(), cfg, 10, seed=0, epoch=3)
    ck = load_checkpoint(tmp_path / "c.pt")
    assert encoder_name(ck.encoder) == name and ck.config == cfg
    with torch.no_grad():
        assert torch.equal(ck.encoder(data.x, data.edge_index), enc(data.x, data.edge_index))
    with pytest.raises(ValueError, match="not 'auto'"):
        save_checkpoint(tmp_path / "d.pt", enc.state_dict(), TrainConfig(), 10, 0, 0)
    raw = torch.load(tmp_path / "c.pt", weights_only=True)
    raw["config"]["encoder"] = "gcn"  # weights of another encoder than the config names
    torch.save(raw, tmp_path / "c.pt")
    with pytest.raises(UsageError, match="does not fit the encoder"):
        load_checkpoint(tmp_path / "c.pt")


def test_a_checkpoint_without_its_encoders_name_is_refused(tmp_path: Path) -> None:
    """One format: a checkpoint names its encoder, and one that does not is one line (never
    guessed to be the GCN)."""
    enc = _encoder("gcn")
    save_checkpoint(tmp_path / "c.pt", enc.state_dict(), TrainConfig(encoder="gcn", hidden_dim=16,
                    out_dim=8, proj_dim=8), 10, seed=0, epoch=1)
    assert encoder_name(load_checkpoint(tmp_path / "c.pt").encoder) == "gcn"
    raw = torch.load(tmp_path / "c.pt", weights_only=True)
    del raw["config"]["encoder"]
    torch.save(raw, tmp_path / "c.pt")
    with pytest.raises(UsageError, match="incomplete edgegcl checkpoint \\(KeyError: "
                                         "'encoder'\\)"):
        load_checkpoint(tmp_path / "c.pt")


@pytest.mark.parametrize("name", ["ego", "poly"])
@pytest.mark.parametrize("layers", [1, 3])
def test_export_runs_alone_and_in_the_runtime_and_quantises(tmp_path: Path, data, name: str,
                                                            layers: int) -> None:
    enc = _encoder(name, layers)
    cfg = TrainConfig(encoder=name, hidden_dim=16, out_dim=8, proj_dim=8, num_layers=layers,
                      poly_alpha=0.3)
    path = tmp_path / "m.onnx"
    meta = export_encoder(Checkpoint(enc, cfg, 10, 0, 0), path)
    assert (meta.interface, meta.encoder, meta.num_layers) == (INTERFACE, name, layers)
    # the runtime (whole graph), onnxruntime alone and a random subgraph, each within 1e-4
    checks = check_against_torch(path, enc, data.x, data.edge_index)
    assert len(checks) == 4 and max(c.max_abs_diff for c in checks) <= 1e-4
    with torch.no_grad():
        expected = enc(data.x, data.edge_index).numpy()
    session = EncoderSession(path, threads=2)
    assert session.stage0_weight is None  # its stage 0 is more than x W1: run dense
    batches = session.embed(data.x.numpy(), data.edge_index.numpy(), batch_size=40)
    np.testing.assert_allclose(batches, expected, rtol=0, atol=1e-4)
    int8 = tmp_path / "m.int8.onnx"
    quantize_int8(path, int8)
    z8 = EncoderSession(int8).embed(data.x.numpy(), data.edge_index.numpy())
    alone = portable_session(int8).run(None, {"x": data.x.numpy(),
                                              "edge_index": data.edge_index.numpy()})[0]
    assert row_cosines(expected, z8).mean() >= 0.99 and row_cosines(expected, alone).mean() >= 0.99


@pytest.mark.parametrize("name", ["ego", "poly"])
@pytest.mark.parametrize("mode", ["full", "minibatch"])
def test_a_stopped_run_resumes_exactly_and_exports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   name: str, mode: str) -> None:
    from edgegcl import Stopped, train_seeds

    monkeypatch.chdir(tmp_path)
    cfg = TrainConfig(encoder=name, nodes=150, features=12, hidden_dim=16, out_dim=8, proj_dim=8,
                      epochs=6, eval_every=2, T_init=1, T_int=1, device="cpu", sampler="builtin",
                      mode=mode, batch_size=48, fanout="4,4", poly_alpha=0.3)
    graph = synthetic_graph(cfg.synthetic_spec())
    cpu = torch.device("cpu")
    for run_dir in ("straight", "stopped"):
        (tmp_path / run_dir).mkdir()
    train_seeds(cfg, graph, tmp_path / "straight", cpu)
    rows = EpochRows()
    with pytest.raises(Stopped):  # after epoch 3, its state saved
        train_seeds(cfg, graph, tmp_path / "stopped", cpu, stop=lambda: len(rows.seen) >= 3,
                    hooks=[rows])
    train_seeds(cfg, graph, tmp_path / "stopped", cpu, resume=True)

    def curve(run_dir: str) -> list[dict[str, str]]:
        with open(f"{run_dir}/seed-0/epochs.csv") as fh:
            return [{k: v for k, v in row.items() if k not in ("epoch_s", "peak_memory_bytes")}
                    for row in csv.DictReader(fh)]

    assert curve("straight") == curve("stopped")  # the resumed seed ends as the straight one
    chosen = [torch.load(f"{run_dir}/checkpoint.pt", weights_only=True)["encoder"]
              for run_dir in ("straight", "stopped")]
    assert all(torch.equal(chosen[0][k], chosen[1][k]) for k in chosen[0])
    metrics = json.loads(Path("straight/metrics.json").read_text())
    assert metrics["seeds"][0]["encoder"] == name and "encoder_choice" not in metrics["seeds"][0]
    monkeypatch.setenv("EDGEGCL_DATA", str(tmp_path / "data"))
    code, out, err = capture(main, ["export", "m.onnx", "--run", "straight", "--quantize", "int8"])
    assert code == 0 and "portable" in out, err
