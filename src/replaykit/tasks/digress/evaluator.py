"""Frozen evaluator of the ``digress`` task: variational-bound NLL and molecule metrics.

Items: JSON lines ``{id, smiles, index}`` of a split (``index`` = row of the split's
``<split>_graphs.npz`` beside the items file). The final split is ``hidden/test.jsonl``,
the proxy split ``public/val.jsonl``. Beside each lie ``stats.json`` (the training set's
node-count histogram, for ``log p(n)`` and the sizes of sampled graphs) and
``train_smiles.txt`` (canonical training SMILES, for novelty), written by the assets step.

* metric: mean NLL per graph (nats; :func:`.diffusion.nll_terms`), SE of the mean over
  graphs; one row per graph with ``score`` = its NLL (averaged over ``nll_repeats`` draws
  of ``t`` and of the noise), so the harness's paired bootstrap works.
* diagnostics: the mean of each NLL term; validity, uniqueness, novelty, V × U × N
  (:mod:`.metrics`) of ``n_samples_final`` (final) or ``n_samples_proxy`` (proxy) sampled
  molecules, graph sizes drawn from the training histogram.

Everything random is drawn from generators seeded with ``seed`` (default 0), so a
checkpoint's score is reproducible and two checkpoints see the same draws of ``t``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from ...harness.errors import InputError
from ...harness.fileio import read_jsonl
from ...harness.stats import mean_se
from . import checkpoint as ckpt
from .data import load_npz
from .diffusion import dense_batch, nll_terms, sample_graphs, sample_n_nodes
from .metrics import graph_metrics

ITEM_FIELDS = ("id", "smiles", "index")
TERMS = ("log_pn", "kl_prior", "diffusion_kl", "reconstruction_logp")


def read_items(path: str | Path) -> tuple[list[dict], np.ndarray, np.ndarray]:
    """Items and their graphs; :class:`InputError` naming the file and field of a duplicate
    id, an index outside the graphs file, or a missing/bad graphs file."""
    path = Path(path)
    items = read_jsonl(path, required=ITEM_FIELDS, unique="id")
    graphs = path.with_name(f"{path.stem}_graphs.npz")
    if not graphs.is_file():
        raise InputError(graphs, None, "graphs file missing")
    try:
        atoms, bonds = load_npz(graphs)
    except ValueError as exc:
        raise InputError(graphs, "atoms", str(exc).partition(": ")[2]) from None
    for number, item in enumerate(items, start=1):
        if not isinstance(item["index"], int) or not 0 <= item["index"] < len(atoms):
            raise InputError(path, f"line {number}.index", f"must index {graphs.name} (0..{len(atoms) - 1})")
    idx = np.array([it["index"] for it in items])
    return items, atoms[idx], bonds[idx]


def device_of(cfg: dict) -> str:
    return "cuda" if cfg.get("device", "auto") == "auto" and torch.cuda.is_available() else "cpu"


@torch.no_grad()
def nll_rows(
    model, noise, atoms, bonds, node_counts, *, batch_size: int, repeats: int, seed: int, device: str, use_extra: bool
) -> dict[str, np.ndarray]:
    """Per-graph NLL terms (``name -> N`` array), averaged over ``repeats`` passes."""
    gen = torch.Generator(device=device).manual_seed(seed)
    out = {k: np.zeros(len(atoms)) for k in ("nll", *TERMS)}
    for _ in range(repeats):
        for start in range(0, len(atoms), batch_size):
            a = torch.as_tensor(atoms[start : start + batch_size], device=device)
            b = torch.as_tensor(bonds[start : start + batch_size], device=device)
            X, E, mask = dense_batch(a, b)
            terms = nll_terms(model, noise, X, E, mask, node_counts, generator=gen, use_extra=use_extra)
            for k in out:
                out[k][start : start + len(a)] += terms[k].double().cpu().numpy() / repeats
    return out


@torch.no_grad()
def sample_metrics(
    model,
    noise,
    node_counts,
    train_smiles: set[str],
    *,
    n: int,
    batch_size: int,
    seed: int,
    device: str,
    use_extra: bool,
) -> dict:
    """V, U, N of ``n`` sampled molecules (batches of ``batch_size``)."""
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    atoms, bonds = [], []
    for start in range(0, n, batch_size):
        k = min(batch_size, n - start)
        sizes = sample_n_nodes(node_counts, k, device=device, generator=torch.Generator().manual_seed(seed + start))
        a, b = sample_graphs(model, noise, sizes, generator=gen, use_extra=use_extra)
        atoms.append(a.cpu().numpy())
        bonds.append(b.cpu().numpy())
    metrics, smiles = graph_metrics(np.concatenate(atoms), np.concatenate(bonds), train_smiles)
    metrics["examples"] = [s for s in smiles if s][:10]
    return metrics


def evaluate(
    checkpoint: str | Path | None, fixed_start: str | Path, items_file: str | Path, metric: str, cfg: dict
) -> tuple[dict, list[dict]]:
    """Score a checkpoint on ``items_file`` (see the module docstring).

    cfg keys: ``batch_size`` (graphs per NLL batch and per sampling batch), ``nll_repeats``,
    ``n_samples_final``, ``n_samples_proxy``, ``seed``, ``device`` (``auto``: CUDA when
    available). Raises ValueError when ``checkpoint`` is None (the fixed start is the
    method: there is no model to score)."""
    if checkpoint is None:
        raise ValueError("digress has no fixed-start model to score (FIXED_START_REFERENCE = False)")
    device = device_of(cfg)
    items_file = Path(items_file)
    items, atoms, bonds = read_items(items_file)
    stats = json.loads((items_file.parent / "stats.json").read_text())
    train_smiles = set((items_file.parent / "train_smiles.txt").read_text().split())
    model, noise, config = ckpt.load(checkpoint, device)
    use_extra = bool(config["diffusion"].get("extra_features", True))
    started = time.time()
    seed = int(cfg.get("seed", 0))
    batch = int(cfg.get("batch_size", 256))
    terms = nll_rows(
        model,
        noise,
        atoms,
        bonds,
        stats["node_counts"],
        batch_size=batch,
        repeats=int(cfg.get("nll_repeats", 1)),
        seed=seed,
        device=device,
        use_extra=use_extra,
    )
    nll_s = time.time() - started
    final = "test" in metric
    n_samples = int(cfg.get("n_samples_final" if final else "n_samples_proxy", 0))
    diagnostics: dict = {f"mean_{k}": float(v.mean()) for k, v in terms.items() if k != "nll"}
    if n_samples:
        started = time.time()
        mols = sample_metrics(
            model,
            noise,
            stats["node_counts"],
            train_smiles,
            n=n_samples,
            batch_size=batch,
            seed=seed,
            device=device,
            use_extra=use_extra,
        )
        mols["sampling_s"] = time.time() - started
        diagnostics.update({k: mols[k] for k in ("validity", "uniqueness", "novelty", "vun")})
        diagnostics["molecules"] = mols
    diagnostics["scoring"] = {
        "nll_s": nll_s,
        "device": device,
        "graphs": len(items),
        "T": noise.T,
        "weights": "ema" if (Path(checkpoint) / ckpt.EMA).is_file() else "model",
        "nll_repeats": int(cfg.get("nll_repeats", 1)),
        "seed": seed,
    }
    rows = [{"id": it["id"], "score": float(v)} for it, v in zip(items, terms["nll"])]
    nll = terms["nll"]
    summary = {
        "metric": metric.format(n=len(items)),
        "direction": "minimize",
        "value": float(nll.mean()),
        "uncertainty": {"value": mean_se(nll), "kind": "se_mean_over_graphs"},
        "n": len(items),
        "diagnostics": diagnostics,
        "advisories": [
            "the diffusion term is estimated with one random step t per graph and pass "
            f"({int(cfg.get('nll_repeats', 1))} pass(es)); its Monte-Carlo noise is part of the SE"
        ],
    }
    return summary, rows
