"""Frozen loader of the ``digress`` task: does a checkpoint load and denoise without the
workspace's code?

Valid when ``config.json`` passes :func:`.checkpoint.read_config` (plain JSON; format,
T, marginals summing to 1), the weights (``ema.safetensors`` when present, else
``model.safetensors``) load strictly into the configured :class:`.model.GraphTransformer`,
and one denoising pass and one NLL evaluation on a small fixed molecule graph (ethanol-like
C-C-O plus a ring) give finite values.
"""

from __future__ import annotations

from pathlib import Path

import torch

from . import checkpoint as ckpt
from .diffusion import dense_batch, nll_terms


def validate(checkpoint: str | Path, fixed_start: str | Path, cfg: dict | None = None) -> dict:
    """``{valid, reason, checks}``; never raises for a bad checkpoint."""
    checkpoint = Path(checkpoint)
    checks: dict = {}
    try:
        for name in (ckpt.CONFIG, ckpt.WEIGHTS):
            if not (checkpoint / name).is_file():
                raise ValueError(f"{name} missing")
        model, noise, config = ckpt.load(checkpoint, "cpu")
        checks["config"] = {
            "T": noise.T,
            "transition": config["diffusion"].get("transition", "marginal"),
            "n_layers": config["model"]["n_layers"],
            "parameters": sum(p.numel() for p in model.parameters()),
            "weights": ckpt.EMA if (checkpoint / ckpt.EMA).is_file() else ckpt.WEIGHTS,
        }
        atoms = torch.tensor([[0, 0, 2, -1, -1], [0, 0, 0, 1, -1]])
        bonds = torch.zeros(2, 5, 5, dtype=torch.long)
        for g, edges in enumerate(([(0, 1, 1), (1, 2, 1)], [(0, 1, 1), (1, 2, 2), (2, 3, 1), (3, 0, 1)])):
            for i, j, k in edges:
                bonds[g, i, j] = bonds[g, j, i] = k
        X, E, mask = dense_batch(atoms, bonds)
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            terms = nll_terms(
                model,
                noise,
                X,
                E,
                mask,
                [0, 1, 1, 1, 1, 1, 1, 1, 1, 1],
                generator=gen,
                use_extra=bool(config["diffusion"].get("extra_features", True)),
            )
        if not all(torch.isfinite(v).all() for v in terms.values()):
            raise ValueError("NLL on the check graphs is not finite")
        checks["nll_check_graphs"] = [float(v) for v in terms["nll"]]
    except Exception as exc:  # the verdict, not a crash
        return {"valid": False, "reason": f"{type(exc).__name__}: {exc}".splitlines()[0][:500], "checks": checks}
    return {"valid": True, "reason": "ok", "checks": checks}
