"""The digress task: transition matrices, posterior and NLL terms against direct
computations, molecule metrics on SMILES with known verdicts, featurisation round trips,
bad input, the frozen loader, the recipe (resume, NaN) and the whole DAG on tiny settings."""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from conftest import ROOT, copy_workflow, recipe_train, snakemake, write_config
from replaykit.harness.errors import InputError
from replaykit.tasks import digress
from replaykit.tasks.digress import checkpoint as ckpt
from replaykit.tasks.digress import data, diffusion, metrics
from replaykit.tasks.digress.noise import DiscreteNoise, cosine_betas

RECIPE = ROOT / "recipes" / "digress" / "train.py"
# QM9-style molecules (C, N, O, F; at most 9 heavy atoms), aromatic ones included
SMILES = [
    "C",
    "N",
    "O",
    "CC",
    "CO",
    "C#N",
    "C=O",
    "CCC",
    "CC#C",
    "CC#N",
    "CC=O",
    "NC=O",
    "CCO",
    "COC",
    "C1CC1",
    "C1CO1",
    "CC(C)C",
    "CC(C)O",
    "CC(N)=O",
    "c1ccccc1",
    "c1cc[nH]c1",
    "c1ccoc1",
    "OCC(O)CO",
    "Cc1ccco1",
    "N#CC#N",
    "FC(F)F",
    "O=C1CC(O)CO1",
    "CN(C)C=O",
    "CC(C)(C)O",
    "C1CCC1",
    "C1CCCC1",
    "O=C1CCCC1",
    "CC1CC1O",
    "NC(=O)C(N)=O",
    "COC(C)=O",
    "CCCC#N",
    "OCC#CCO",
    "CC12CC1C2",
    "c1c[nH]cn1",
    "Cn1cccc1",
    "OC1=CC=CC1",
    "CC(=O)C(C)=O",
    "N=C1OC=CO1",
    "CC1(O)CC1",
]


def write_fixed_start(root: Path, rows: list[str]) -> Path:
    """A qm9pack-layout fixed asset with one CSV part (Index, SMILES)."""
    (root / "data").mkdir(parents=True)
    lines = ["Index,SMILES,N_atoms"] + [f'{i + 1},"{s}",0' for i, s in enumerate(rows)]
    (root / "data" / "qm9_part1.csv").write_text("\n".join(lines) + "\n")
    (root / "config.json").write_text(
        json.dumps({"kind": "qm9pack", "name": "qm9pack", "version": "test", "files": ["data/qm9_part1.csv"]})
    )
    return root


# ---------------------------------------------------------------- noise model


def test_cosine_schedule_formula():
    T, s = 4, 0.008
    abar = [math.cos(0.5 * math.pi * ((x * (T + 2) / (T + 1)) / (T + 2) + s) / (1 + s)) ** 2 for x in range(T + 2)]
    expected = [1 - (abar[i + 1] / abar[0]) / (abar[i] / abar[0]) for i in range(T + 1)]
    assert cosine_betas(T).tolist() == pytest.approx(expected, rel=1e-9)


def test_marginals_and_transition_rows():
    # two graphs: C-O (2 atoms), N=C-C (3 atoms, one double, one single bond)
    atoms, bonds = data.pad(
        [
            (np.array([0, 2]), np.array([[0, 1], [1, 0]])),
            (np.array([1, 0, 0]), np.array([[0, 2, 0], [2, 0, 1], [0, 1, 0]])),
        ]
    )
    stats = data.statistics(atoms, bonds)
    # atoms: C C C O N -> C 3/5, N 1/5, O 1/5, F 0
    assert stats["atom_marginals"] == pytest.approx([0.6, 0.2, 0.2, 0.0])
    # ordered pairs i != j: 2 + 6 = 8; single: 2 (C-O) + 2 (C-C); double: 2; none: 2 (N..C)
    assert stats["bond_marginals"] == pytest.approx([2 / 8, 4 / 8, 2 / 8, 0, 0])
    assert stats["node_counts"][2:4] == [1, 1] and sum(stats["node_counts"]) == 2
    noise = DiscreteNoise(50, stats["atom_marginals"], stats["bond_marginals"])
    t = torch.tensor([0, 1, 25, 50])
    for Q in (*noise.Qt(t), *noise.Qt_bar(t)):
        assert torch.allclose(Q.sum(-1), torch.ones(Q.shape[:-1]), atol=1e-6)
    Qx_T, Qe_T = noise.Qt_bar(torch.tensor([50]))
    # at T every row is (almost) the marginal vector: the prior
    assert torch.allclose(Qx_T[0], noise.x_marginals.expand(4, 4), atol=1e-3)
    assert torch.allclose(Qe_T[0], noise.e_marginals.expand(5, 5), atol=1e-3)
    beta = float(noise.betas[25])
    m = np.array(stats["atom_marginals"])
    assert noise.Qt(torch.tensor([25]))[0][0].numpy() == pytest.approx(
        (1 - beta) * np.eye(4) + beta * np.tile(m, (4, 1)), abs=1e-6
    )


def test_posterior_is_bayes_rule():
    noise = DiscreteNoise(10, [0.5, 0.3, 0.15, 0.05], [0.6, 0.2, 0.1, 0.05, 0.05])
    t = torch.tensor([4])
    Qt, Qsb, Qtb = noise.Qt(t)[0], noise.Qt_bar(t - 1)[0], noise.Qt_bar(t)[0]
    x, zt = 1, 2
    M = torch.nn.functional.one_hot(torch.tensor([[x]]), 4).float()
    Mt = torch.nn.functional.one_hot(torch.tensor([[zt]]), 4).float()
    got = diffusion.posterior(M, Mt, Qt, Qsb, Qtb)[0, 0]
    direct = torch.tensor([float(Qt[0, j, zt] * Qsb[0, x, j]) for j in range(4)])
    direct = direct / direct.sum()  # q(z_s | z_t, x) ∝ q(z_t | z_s) q(z_s | x)
    assert torch.allclose(got, direct, atol=1e-6)


# ---------------------------------------------------------------- NLL terms


class FixedLogits(torch.nn.Module):
    """A denoiser that ignores its input: fixed logits per node and per pair."""

    def __init__(self, lx, le):
        super().__init__()
        self.lx, self.le = lx, le

    def forward(self, X, E, y, node_mask):
        return self.lx.expand(X.shape[0], -1, -1), self.le.expand(X.shape[0], -1, -1, -1)


def test_nll_terms_equal_direct_computation(monkeypatch):
    torch.manual_seed(0)
    xm, em = [0.6, 0.2, 0.15, 0.05], [0.7, 0.2, 0.06, 0.03, 0.01]
    noise = DiscreteNoise(20, xm, em)
    # graph C=O padded to 3 nodes; z_t and z_0 are fixed (apply_noise patched)
    atoms, bonds = torch.tensor([[0, 2, -1]]), torch.tensor([[[0, 2, 0], [2, 0, 0], [0, 0, 0]]])
    X, E, mask = diffusion.dense_batch(atoms, bonds)
    zt_atoms, zt_bonds = torch.tensor([[1, 2, -1]]), torch.tensor([[[0, 1, 0], [1, 0, 0], [0, 0, 0]]])
    Xt, Et, _ = diffusion.dense_batch(zt_atoms, zt_bonds)
    monkeypatch.setattr(diffusion, "apply_noise", lambda noise_, X_, E_, m_, t_, g=None: (Xt, Et))
    lx, le = torch.randn(1, 3, 4), torch.randn(1, 3, 3, 5)
    model = FixedLogits(lx, le)
    counts = [0, 3, 5, 2]
    t = 7
    out = diffusion.nll_terms(model, noise, X, E, mask, counts, t=torch.tensor([t]), use_extra=False)
    px, pe = torch.softmax(lx[0], -1).double(), torch.softmax(le[0], -1).double()
    assert float(out["log_pn"]) == pytest.approx(math.log(5 / 10), rel=1e-6)

    def kl(p, q):
        return sum(a * math.log(a / b) for a, b in zip(p, q) if a > 0)

    abar_T = float(noise.alphas_bar[20])
    prior_x = sum(kl([abar_T * (k == c) + (1 - abar_T) * xm[k] for k in range(4)], xm) for c in (0, 2))
    prior_e = 2 * kl([abar_T * (k == 2) + (1 - abar_T) * em[k] for k in range(5)], em)  # (0,1) and (1,0)
    assert float(out["kl_prior"]) == pytest.approx(prior_x + prior_e, abs=1e-6)  # ~0: abar_T ~ 0 (float32)

    beta, abar_s, abar_t = float(noise.betas[t]), float(noise.alphas_bar[t - 1]), float(noise.alphas_bar[t])

    def q_step(j, k, m):  # Q_t[j, k]
        return (1 - beta) * (j == k) + beta * m[k]

    def q_bar(i, j, a, m):
        return a * (i == j) + (1 - a) * m[j]

    def post(x, zt, m):
        v = [q_step(j, zt, m) * q_bar(x, j, abar_s, m) for j in range(len(m))]
        return [a / sum(v) for a in v]

    def pred_post(p, zt, m):
        v = [
            sum(p[i] * q_step(j, zt, m) * q_bar(i, j, abar_s, m) / q_bar(i, zt, abar_t, m) for i in range(len(m)))
            for j in range(len(m))
        ]
        return [a / sum(v) for a in v]

    kl_t = sum(kl(post(x, z, xm), pred_post(px[node].tolist(), z, xm)) for node, (x, z) in enumerate([(0, 1), (2, 2)]))
    kl_t += kl(post(2, 1, em), pred_post(pe[0, 1].tolist(), 1, em)) + kl(
        post(2, 1, em), pred_post(pe[1, 0].tolist(), 1, em)
    )
    assert float(out["diffusion_kl"]) == pytest.approx(20 * kl_t, rel=1e-4)
    recon = math.log(px[0, 0]) + math.log(px[1, 2]) + math.log(pe[0, 1, 2]) + math.log(pe[1, 0, 2])
    assert float(out["reconstruction_logp"]) == pytest.approx(recon, rel=1e-5)
    total = -math.log(0.5) + prior_x + prior_e + 20 * kl_t - recon
    assert float(out["nll"]) == pytest.approx(total, rel=1e-4)


# ---------------------------------------------------------------- molecules


def test_featurisation_round_trips_qm9_molecules():
    from rdkit import Chem
    from torch_geometric.utils import to_dense_adj

    for smiles in ("c1cc[nH]c1", "O=C1CC(O)CO1", "CC12CC1C2", "N#CC#N", "Cc1ccco1"):
        atoms, bonds = data.featurize(smiles)
        assert (bonds == 4).sum() == 0  # kekulized: the aromatic class is unused
        mol = data.to_mol(atoms, bonds)
        Chem.SanitizeMol(mol)
        assert Chem.MolToSmiles(mol) == Chem.MolToSmiles(Chem.MolFromSmiles(smiles))
        g = data.to_pyg(atoms, bonds)
        dense = to_dense_adj(g.edge_index, edge_attr=g.edge_attr, max_num_nodes=len(atoms))[0].argmax(-1)
        assert (dense.numpy() == bonds).all()
    # pyrrole: C C C N C, two double bonds in the Kekulé form
    atoms, bonds = data.featurize("c1cc[nH]c1")
    assert sorted(atoms.tolist()) == [0, 0, 0, 0, 1] and (bonds == 2).sum() == 4
    for bad, why in (("C1CC(", "unparsable"), ("CCl", "atom Cl"), ("CCCCCCCCCC", "10 heavy atoms")):
        with pytest.raises(ValueError, match=why):
            data.featurize(bad)


def test_molecule_metrics_known_verdicts():
    def graph(smiles):
        return data.featurize(smiles)

    ethanol = graph("CCO")
    # pentavalent carbon: C bonded to 5 carbons (built by hand; RDKit refuses to parse it)
    atoms = np.array([0, 0, 0, 0, 0, 0])
    bonds = np.zeros((6, 6), dtype=np.int8)
    bonds[0, 1:] = bonds[1:, 0] = 1
    # two fragments: C-C and O -> valid, largest fragment "CC"
    split = (np.array([0, 0, 2]), np.array([[0, 1, 0], [1, 0, 0], [0, 0, 0]]))
    # O with a double and a single bond: valence 3 -> invalid without a formal charge
    bad_o = (np.array([0, 2, 0]), np.array([[0, 2, 0], [2, 0, 1], [0, 1, 0]]))
    assert metrics.molecule_smiles(*ethanol) == ("CCO", True)
    assert metrics.molecule_smiles(atoms, bonds)[0] is None
    assert metrics.molecule_smiles(*split) == ("CC", False)
    assert metrics.molecule_smiles(*bad_o)[0] is None
    smiles = ["CCO", "CCO", "CC", None, None, "c1ccccc1"]
    m = metrics.smiles_metrics(smiles, {"CCO"}, [True, True, False, False, False, True])
    # valid 4/6; unique {CCO, CC, c1ccccc1} 3/4; novel {CC, c1ccccc1} 2/3
    assert (m["validity"], m["uniqueness"], m["novelty"]) == pytest.approx((4 / 6, 3 / 4, 2 / 3))
    assert m["vun"] == pytest.approx(4 / 6 * 3 / 4 * 2 / 3)
    assert m["connected_of_valid"] == pytest.approx(3 / 4)


# ---------------------------------------------------------------- assets, loader


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("digress")
    fixed = write_fixed_start(root / "fixed", SMILES[:20] + ["C1CC(", "CCl"] + SMILES[20:])
    info = digress.build_assets(
        {"split_seed": 42, "split_train": 30, "n_train": None, "n_val": None, "n_test": None},
        fixed,
        root / "public",
        root / "hidden",
    )
    return root, fixed, info


def test_assets_split_and_bad_rows(assets):
    root, _, info = assets
    n = len(SMILES)
    assert info["skipped_rows"] == {"unparsable SMILES": 1, "atom Cl outside C/N/O/F": 1}
    assert info["full_split_sizes"] == {"train": 30, "test": int(0.1 * n), "val": n - 30 - int(0.1 * n)}
    ids = {
        s: [json.loads(l)["id"] for l in (root / f).read_text().splitlines()]
        for s, f in (("train", "public/train.jsonl"), ("val", "public/val.jsonl"), ("test", "hidden/test.jsonl"))
    }
    assert not set(ids["train"]) & set(ids["test"]) and not set(ids["val"]) & set(ids["test"])
    assert len(set().union(*ids.values())) == n
    assert not list((root / "public").glob("test*"))  # the test split is not in the public folder
    stats = json.loads((root / "public/stats.json").read_text())
    atoms, _ = data.load_npz(root / "public/train_graphs.npz")
    assert sum(stats["node_counts"]) == 30 == len(atoms)


def tiny_checkpoint(dest: Path, stats: dict, T: int = 5) -> Path:
    torch.manual_seed(0)
    cfg = {
        "model": {
            "n_layers": 1,
            "hidden_mlp_dims": {"X": 8, "E": 8, "y": 8},
            "dropout": 0.0,
            "hidden_dims": {"dx": 8, "de": 4, "dy": 4, "n_head": 2, "dim_ffX": 8, "dim_ffE": 8, "dim_ffy": 8},
        },
        "diffusion": {
            "T": T,
            "transition": "marginal",
            "x_marginals": stats["atom_marginals"],
            "e_marginals": stats["bond_marginals"],
            "extra_features": True,
        },
    }
    ckpt.save(dest, cfg, ckpt.build_model(cfg["model"]))
    return dest


def test_loader_and_evaluator(assets, tmp_path):
    root, fixed, _ = assets
    stats = json.loads((root / "public/stats.json").read_text())
    good = tiny_checkpoint(tmp_path / "checkpoint-1", stats)
    verdict = digress.validate(good, fixed, {})
    assert verdict["valid"], verdict
    summary, rows = digress.evaluate(
        good, fixed, root / "hidden/test.jsonl", digress.METRIC["final"], {"batch_size": 4, "n_samples_final": 6}
    )
    assert summary["direction"] == "minimize" and summary["n"] == len(rows) == int(0.1 * len(SMILES))
    assert summary["value"] == pytest.approx(np.mean([r["score"] for r in rows]))
    assert summary["diagnostics"]["molecules"]["n_samples"] == 6
    again, _ = digress.evaluate(good, fixed, root / "hidden/test.jsonl", digress.METRIC["final"], {"batch_size": 4})
    assert again["value"] == summary["value"]  # seeded: reproducible
    # a checkpoint that does not load gives an invalid marker
    bad = tmp_path / "checkpoint-2"
    bad.mkdir()
    (bad / "config.json").write_text((good / "config.json").read_text())
    (bad / "model.safetensors").write_bytes(b"not safetensors")
    assert not digress.validate(bad, fixed, {})["valid"]
    doc = json.loads((good / "config.json").read_text())
    doc["diffusion"]["x_marginals"] = [0.5, 0.5, 0.5, 0.0]
    broken = tmp_path / "checkpoint-3"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps(doc))
    (broken / "model.safetensors").write_bytes((good / "model.safetensors").read_bytes())
    verdict = digress.validate(broken, fixed, {})
    assert not verdict["valid"] and "x_marginals" in verdict["reason"]


# ---------------------------------------------------------------- recipe


def run_recipe(
    root: Path, run: Path, overrides: dict, resume: bool, deadline_s: float = 300
) -> subprocess.CompletedProcess:
    import time

    (run / "state").mkdir(parents=True, exist_ok=True)
    request = {
        "fixed_start": str(root / "fixed"),
        "public_dir": str(root / "public"),
        "publish_dir": str(run / "pub"),
        "state_dir": str(run / "state"),
        "seed": 42,
        "deadline_unix": time.time() + deadline_s,
        "export_reserve_s": 30,
        "profile": "embedded",
        "overrides": overrides,
        "threads": 1,
        "keep": 3,
        "resume": resume,
    }
    (run / "state/request.json").write_text(json.dumps(request))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "train.py", "--request", str(run / "state/request.json")],
        cwd=RECIPE.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


TINY = {
    "T": 5,
    "n_layers": 1,
    "batch_size": 8,
    "save_every": 1,
    "hidden_mlp_dims": {"X": 8, "E": 8, "y": 8},
    "hidden_dims": {"dx": 8, "de": 4, "dy": 4, "n_head": 2, "dim_ffX": 8, "dim_ffE": 8, "dim_ffy": 8},
}


@pytest.mark.slow
def test_recipe_resume_history_and_nan(assets, tmp_path):
    from replaykit.runtime import NAN_EXIT

    root = assets[0]
    first = run_recipe(root, tmp_path, {**TINY, "epochs": 2, "ema_decay": 0.9}, resume=False)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "[train] epoch 2/2" in first.stdout
    assert sorted(p.name for p in (tmp_path / "pub").glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert (tmp_path / "pub/checkpoint-2/ema.safetensors").is_file()
    resumed = run_recipe(root, tmp_path, {**TINY, "epochs": 4, "ema_decay": 0.9}, resume=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming after epoch 2" in resumed.stdout and "[train] epoch 3/4" in resumed.stdout
    result = json.loads((tmp_path / "state/train_result.json").read_text())
    assert [h["progress"] for h in result["history"]] == [1, 2, 3, 4] and result["steps"] == 4
    assert sorted(int(p.name.split("-")[1]) for p in (tmp_path / "pub").glob("checkpoint-*")) == [2, 3, 4]
    # the EMA weights and the plain-JSON config load in the frozen loader (no workspace code)
    verdict = digress.validate(tmp_path / "pub/checkpoint-4", root / "fixed", {})
    assert verdict["valid"] and verdict["checks"]["config"]["weights"] == "ema.safetensors"
    # a NaN loss: clear error, non-zero exit, earlier checkpoints kept (the saved state's weights
    # made NaN, as a diverged step leaves them; a NaN knob is refused before training starts)
    state = torch.load(tmp_path / "state/train_state.pt", weights_only=True)
    next(iter(state["model"].values())).fill_(float("nan"))
    torch.save(state, tmp_path / "state/train_state.pt")
    nan = run_recipe(root, tmp_path, {**TINY, "epochs": 6, "ema_decay": 0.9}, resume=True)
    assert nan.returncode == NAN_EXIT and "NaN loss in epoch 5" in nan.stdout
    assert sorted(int(p.name.split("-")[1]) for p in (tmp_path / "pub").glob("checkpoint-*")) == [2, 3, 4]
    assert "NaN loss" in json.loads((tmp_path / "state/train_result.json").read_text())["error"]
    bad = run_recipe(root, tmp_path, {**TINY, "lambda_E": float("nan")}, resume=True)
    assert bad.returncode == 1 and bad.stderr.strip().endswith("lambda_E: expected a finite number, got nan")


@pytest.mark.slow
def test_recipe_stops_at_the_deadline(assets, tmp_path):
    import time

    started = time.time()
    out = run_recipe(assets[0], tmp_path, {**TINY, "epochs": 100000, "save_every": 1000}, resume=False, deadline_s=12)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads((tmp_path / "state/train_result.json").read_text())
    assert result["stop_reason"] == "deadline" and result["steps"] >= 1
    assert time.time() - started < 60
    # the last whole epoch is published although it is not a multiple of save_every
    assert [p.name for p in (tmp_path / "pub").glob("checkpoint-*")] == [f"checkpoint-{result['steps']}"]


def test_dataloader_path_matches_device_path(assets):
    train = recipe_train("digress")
    atoms, bonds = data.load_npz(assets[0] / "public/train_graphs.npz")
    a, b = torch.as_tensor(atoms), torch.as_tensor(bonds)
    X1, E1, m1 = next(train.device_batches(a, b, len(a), torch.Generator().manual_seed(0)))
    X2, E2, m2 = next(
        train.dataloader_batches(
            [data.to_pyg(x, y) for x, y in zip(atoms, bonds)], len(a), torch.Generator().manual_seed(0), "cpu"
        )
    )
    # same multiset of graphs (order differs): atoms and number of one-hot pair entries per graph
    assert sorted(X1.sum((1, 2)).tolist()) == sorted(X2.sum((1, 2)).tolist())
    assert sorted(E1.sum((1, 2, 3)).tolist()) == sorted(E2.sum((1, 2, 3)).tolist())
    assert torch.equal(E2, E2.transpose(1, 2)) and int(m2.sum()) == int(m1.sum())


def _random_graphs(k: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``k`` random graphs of 1..9 atoms as class tensors (-1 padding; symmetric bonds, empty diagonal)."""
    n = torch.randint(1, 10, (k,), generator=gen)
    atoms = torch.randint(0, 4, (k, 9), generator=gen).masked_fill(torch.arange(9) >= n[:, None], -1)
    bonds = torch.triu(torch.randint(0, 5, (k, 9, 9), generator=gen), diagonal=1)
    real = (atoms >= 0)[:, :, None] & (atoms >= 0)[:, None, :]
    return atoms.to(torch.int8), ((bonds + bonds.transpose(1, 2)) * real).to(torch.int8)


GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")


@pytest.mark.parametrize(
    "device,compiled", [("cpu", False), pytest.param("cuda", False, marks=GPU), pytest.param("cuda", True, marks=GPU)]
)
def test_graphed_step_matches_the_plain_step(device, compiled):
    """The optimised step (masked loss without host syncs, capturable AdamW; on CUDA 3 eager
    warm-up batches, then a captured graph replayed, then an eager partial batch; optionally
    the denoiser through ``torch.compile``) gives the plain ``train_step``'s losses to 1e-5
    (relative) and the same weights after 7 steps (1e-4 relative + 1e-6 absolute) from the
    same initial weights and random numbers."""
    train = recipe_train("digress")
    knobs = {**yaml.safe_load((RECIPE.parent / "configs/embedded.yaml").read_text()), **TINY, "dropout": 0.0}
    recipe = train.DigressConfig(**knobs)
    model_cfg = {k: knobs[k] for k in ("n_layers", "hidden_mlp_dims", "hidden_dims", "dropout")}
    noise = ckpt.build_noise(
        {"T": recipe.T, "x_marginals": [0.7, 0.1, 0.15, 0.05], "e_marginals": [0.8, 0.12, 0.04, 0.01, 0.03]}
    ).to(device)
    torch.manual_seed(0)
    plain = ckpt.build_model(model_cfg).to(device).train()
    fast = ckpt.build_model(model_cfg).to(device).train()
    fast.load_state_dict(plain.state_dict())
    opts = [
        torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=1e-12, amsgrad=True, capturable=c)
        for m, c in ((plain, False), (fast, device == "cuda"))
    ]
    stepper = train.GraphedStep(
        torch.compile(fast) if compiled else fast, opts[1], recipe, contextlib.nullcontext, batch_size=8
    )
    atoms, bonds = _random_graphs(6 * 8 + 5, torch.Generator().manual_seed(1))
    for k, start in enumerate(range(0, len(atoms), 8)):
        X, E, m = diffusion.dense_batch(atoms[start : start + 8].to(device), bonds[start : start + 8].to(device))
        torch.manual_seed(100 + k)
        loss, parts = train.train_step(plain, noise, opts[0], X, E, m, recipe, contextlib.nullcontext)
        torch.manual_seed(100 + k)
        out = [float(v) for v in stepper(train.prepare_batch(noise, X, E, m, True))]
        assert out[0] == pytest.approx(loss, rel=1e-5), k
        assert out[1:] == pytest.approx([parts["loss_X"], parts["loss_E"]], rel=1e-5), k
    assert device == "cpu" or stepper.graph is not None
    for (name, a), b in zip(plain.named_parameters(), fast.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("scope", ["model", "layers"])
def test_compiled_step_compiles_one_graph(scope, monkeypatch):
    """``compile: true`` compiles the full batch's shape only (the epoch's last, smaller batch runs
    the uncompiled module instead of a second compilation), and ``compile_scope: layers``
    compiles one graph that all Transformer layers share; the losses and weights stay the plain
    step's. Dynamo with its ``aot_eager`` backend (Inductor's kernels are the GPU's business:
    ``bench/results-2026-12-01-speed.md``) counts the graphs; ``model`` is the uncompiled module
    checkpoints save."""
    import torch._dynamo

    train = recipe_train("digress")
    original = torch.compile
    monkeypatch.setattr(torch, "compile", lambda module, **kw: original(module, backend="aot_eager", **kw))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    knobs = {**yaml.safe_load((RECIPE.parent / "configs/embedded.yaml").read_text()), **TINY, "dropout": 0.0}
    knobs.update(n_layers=3, compile=True, compile_scope=scope)
    recipe = train.DigressConfig(**knobs)
    model_cfg = {k: knobs[k] for k in ("n_layers", "hidden_mlp_dims", "hidden_dims", "dropout")}
    noise = ckpt.build_noise(
        {"T": recipe.T, "x_marginals": [0.7, 0.1, 0.15, 0.05], "e_marginals": [0.8, 0.12, 0.04, 0.01, 0.03]}
    )
    torch.manual_seed(0)
    plain, model = ckpt.build_model(model_cfg).train(), ckpt.build_model(model_cfg).train()
    model.load_state_dict(plain.state_dict())
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=1e-12, amsgrad=True) for m in (plain, model)]
    fast = train.compile_denoiser(model, scope)
    assert all(not isinstance(m, torch._dynamo.eval_frame.OptimizedModule) for m in model.modules())
    stepper = train.GraphedStep(fast, opts[1], recipe, contextlib.nullcontext, batch_size=8, eager=model)
    atoms, bonds = _random_graphs(2 * 8 + 5, torch.Generator().manual_seed(1))
    for k, start in enumerate(range(0, len(atoms), 8)):  # two full batches, then one of 5
        X, E, m = diffusion.dense_batch(atoms[start : start + 8], bonds[start : start + 8])
        torch.manual_seed(100 + k)
        loss, _ = train.train_step(plain, noise, opts[0], X, E, m, recipe, contextlib.nullcontext)
        torch.manual_seed(100 + k)
        out = stepper(train.prepare_batch(noise, X, E, m, True))
        assert float(out[0]) == pytest.approx(loss, rel=1e-5), k
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert list(model.state_dict()) == list(plain.state_dict())
    for (name, a), b in zip(plain.named_parameters(), model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6, msg=name)


# ---------------------------------------------------------------- whole DAG


@pytest.mark.slow
def test_digress_workflow_tiny(tmp_path):
    fixed = write_fixed_start(tmp_path / "fixed", SMILES + ["C1CC("])
    (tmp_path / "wf").mkdir()
    work = copy_workflow(tmp_path / "wf")
    task = yaml.safe_load((ROOT / "config/config.yaml").read_text())["tasks"]["digress"]
    task.update(
        fixed_start=str(fixed),
        data={"split_seed": 42, "split_train": 30, "n_train": None, "n_val": None, "n_test": None},
        recipe={"profile": "embedded", "overrides": {**TINY, "epochs": 4, "save_every": 1}},
        budget={"outer_limit_s": 300, "internal_deadline_s": 200, "export_reserve_s": 60},
        evaluation={**task["evaluation"], "n_samples_final": 8, "n_samples_proxy": 4, "batch_size": 8},
        final={"n_boot": 200},
    )
    write_config(work, {"models": {}, "tasks": {"digress": task}})
    snakemake(
        work,
        "results/digress/report.html",
        "results/digress/shipped-seed42/proxy.json",
        "--cores",
        "1",
        "--resources",
        "gpu=1",
        timeout=400,
        check=True,
    )
    summary = json.loads((work / "results/digress/final/summary.json").read_text())
    assert (work / "results/digress/final/.complete").exists()
    assert summary["direction"] == "minimize" and summary["metric"] == f"qm9_test_nll_{int(0.1 * (len(SMILES)))}"
    official = json.loads((work / "results/digress/shipped-seed42/official.json").read_text())
    values = {c["progress"]: c["value"] for c in official["checkpoints"]}
    assert sorted(values) == [2, 3, 4]
    assert summary["value"] == min(values.values())  # minimise: the official result is the lowest NLL
    assert summary["references"]["fixed_start"] is None
    assert "validity" in summary["diagnostics"]
    report = (work / "results/digress/final/report.md").read_text()
    assert "minimize" in report
    html = (work / "results/digress/report.html").read_text()
    for progress in (2, 3, 4):
        assert f'data-run="shipped-seed42" data-progress="{progress}"' in html
    history = json.loads((work / "results/digress/shipped-seed42/replay/record.json").read_text())["train_history"]
    assert [h["progress"] for h in history] == [1, 2, 3, 4]  # the report's training curve, one entry per epoch
    manifest = json.loads((work / "results/digress/assets/manifest.json").read_text())
    assert manifest["data"]["skipped_rows"] == {"unparsable SMILES": 1}


def test_embedded_and_full_scale_configs_check():
    from replaykit.config import check_config
    from replaykit.harness.profile import check_overrides

    base = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    full = yaml.safe_load((ROOT / "config/full-scale/digress.yaml").read_text())["tasks"]["digress"]
    check_config(base, ROOT / "config/schema.yaml", "config.yaml")
    merged = {**base, "tasks": {"digress": {**base["tasks"]["digress"], **full}}}
    check_config(merged, ROOT / "config/schema.yaml", "digress.yaml")
    check_overrides(RECIPE.parent, "full", {})
    check_overrides(RECIPE.parent, "full", full["recipe"]["overrides"])  # cuda_graph: true
    with pytest.raises(InputError, match="n_train"):
        bad = {**base, "tasks": {"digress": {**base["tasks"]["digress"], "data": {**full["data"], "n_train": 0}}}}
        check_config(bad, ROOT / "config/schema.yaml", "bad.yaml")


def test_bad_fixed_asset_is_named(tmp_path):
    fixed = write_fixed_start(tmp_path / "fixed", SMILES)
    (fixed / "data/qm9_part1.csv").write_text("Index,smiles_typo\n1,C\n")
    with pytest.raises(InputError, match=r"qm9_part1.csv: SMILES: column missing"):
        digress.build_assets({"split_seed": 42}, fixed, tmp_path / "public", tmp_path / "hidden")
    (fixed / "config.json").write_text(json.dumps({"kind": "something-else"}))
    with pytest.raises(InputError, match="not a qm9pack fixed asset"):
        digress.build_assets({"split_seed": 42}, fixed, tmp_path / "public", tmp_path / "hidden")
    too_few = write_fixed_start(tmp_path / "few", SMILES[:5])
    with pytest.raises(InputError, match="cannot hold"):
        digress.build_assets({"split_seed": 42, "split_train": 30}, too_few, tmp_path / "public", tmp_path / "hidden")
    assert not (tmp_path / "public").exists()  # nothing written before the checks pass


def _published(run: Path) -> tuple[list[int], list[int]]:
    """(checkpoints on disk, progress of every ledger entry)."""
    on_disk = sorted(int(p.name.split("-")[1]) for p in (run / "pub").glob("checkpoint-*"))
    lines = (run / "pub/publications.jsonl").read_text().splitlines()
    ledger = [json.loads(line)["progress"] for line in lines]
    return on_disk, ledger


@pytest.mark.slow
def test_resume_never_trains_past_the_last_epoch(assets, tmp_path, monkeypatch):
    """A kill right after the last epoch's publication (before the record), then a resume:
    nothing is trained or published again. A kill one epoch before: only the last is trained."""
    root = assets[0]
    cfg = {**TINY, "epochs": 2}
    monkeypatch.setenv("REPLAYKIT_FAULT_EXIT_AFTER_PUBLISH", "2")  # dies right after checkpoint-2
    killed = run_recipe(root, tmp_path / "last", cfg, resume=False)
    killed_before = run_recipe(root, tmp_path / "before", {**TINY, "epochs": 3}, resume=False)
    monkeypatch.delenv("REPLAYKIT_FAULT_EXIT_AFTER_PUBLISH")
    assert killed.returncode == 137 and killed_before.returncode == 137
    # at the last epoch
    resumed = run_recipe(root, tmp_path / "last", cfg, resume=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming after epoch 2" in resumed.stdout and "[train] epoch" not in resumed.stdout
    assert "[publish]" not in resumed.stdout
    result = json.loads((tmp_path / "last/state/train_result.json").read_text())
    assert result["steps"] == 2 and result["stop_reason"] == "max_steps"
    assert [h["progress"] for h in result["history"]] == [1, 2]
    assert _published(tmp_path / "last") == ([1, 2], [1, 2])
    # one epoch before the end
    resumed = run_recipe(root, tmp_path / "before", {**TINY, "epochs": 3}, resume=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming after epoch 2" in resumed.stdout and "[train] epoch 3/3" in resumed.stdout
    assert "[train] epoch 2/3" not in resumed.stdout and "epoch 4" not in resumed.stdout
    result = json.loads((tmp_path / "before/state/train_result.json").read_text())
    assert result["steps"] == 3 and [h["progress"] for h in result["history"]] == [1, 2, 3]
    assert _published(tmp_path / "before") == ([1, 2, 3], [1, 2, 3])


def test_eigen_falls_back_to_float64_on_the_cpu_when_eigh_fails(monkeypatch):
    """CUDA's eigh can raise on ill-conditioned Laplacians (H200, bench/results-2026-12-01-
    sandbox.md): the features are then computed by the float64 CPU solver, same values."""
    from replaykit.tasks.digress import features

    adj = torch.tensor([[[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0]]], dtype=torch.float32)
    mask = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    expected = features.eigen(adj, mask)
    real = torch.linalg.eigh
    calls = []

    def flaky(matrix):
        calls.append(matrix.dtype)
        if matrix.dtype == torch.float32:
            raise torch.linalg.LinAlgError("linalg.eigh: The algorithm failed to converge")
        return real(matrix)

    monkeypatch.setattr(torch.linalg, "eigh", flaky)
    node, graph = features.eigen(adj, mask)
    assert calls == [torch.float32, torch.float64] and node.dtype == torch.float32
    assert torch.allclose(node, expected[0], atol=1e-5) and torch.allclose(graph, expected[1], atol=1e-5)
    # a path of 3 nodes: one component, Laplacian eigenvalues 0, 1, 3 -> first non-zero 1/4, 3/4
    assert graph[0, 0] == 1 and torch.allclose(graph[0, 1:3], torch.tensor([0.25, 0.75]))
