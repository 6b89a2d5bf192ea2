"""Checkpoint format of the ``digress`` task, loadable without the workspace's code.

``checkpoint-<epoch>/``: ``config.json`` (plain JSON, no pickles) and ``model.safetensors``;
optionally ``ema.safetensors`` (EMA weights, which the frozen evaluator then uses).

``config.json`` keys: ``format`` (= :data:`FORMAT`), ``model`` (:class:`.model.GraphTransformer`
arguments: ``n_layers``, ``hidden_mlp_dims``, ``hidden_dims``, ``dropout``), ``diffusion``
(``T``, ``transition`` marginal|uniform, ``x_marginals``, ``e_marginals``,
``extra_features`` bool), ``epoch``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from ...harness.fileio import atomic_write_json
from .data import ATOMS, BONDS
from .diffusion import input_dims
from .model import GraphTransformer
from .noise import DiscreteNoise

FORMAT = "replaykit-digress-1"
CONFIG, WEIGHTS, EMA = "config.json", "model.safetensors", "ema.safetensors"


def build_model(model_cfg: dict) -> GraphTransformer:
    """A :class:`GraphTransformer` for QM9's 4 atom and 5 bond classes from ``model_cfg``."""
    return GraphTransformer(
        int(model_cfg["n_layers"]),
        input_dims(len(ATOMS), len(BONDS)),
        {k: int(v) for k, v in model_cfg["hidden_mlp_dims"].items()},
        {k: int(v) for k, v in model_cfg["hidden_dims"].items()},
        {"X": len(ATOMS), "E": len(BONDS)},
        float(model_cfg.get("dropout", 0.1)),
    )


def build_noise(diffusion_cfg: dict) -> DiscreteNoise:
    return DiscreteNoise(
        int(diffusion_cfg["T"]),
        diffusion_cfg["x_marginals"],
        diffusion_cfg["e_marginals"],
        diffusion_cfg.get("transition", "marginal"),
    )


def save(out: str | Path, config: dict, model: torch.nn.Module, ema: torch.nn.Module | None = None) -> None:
    """Write ``config.json`` and the weights (float32, contiguous) into folder ``out``."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()}, str(out / WEIGHTS))
    if ema is not None:
        save_file({k: v.detach().float().cpu().contiguous() for k, v in ema.state_dict().items()}, str(out / EMA))
    atomic_write_json(out / CONFIG, {"format": FORMAT, **config})


def read_config(checkpoint: str | Path) -> dict:
    """``config.json`` checked: format, model and diffusion keys, T >= 1, marginals that are
    finite, non-negative and sum to 1 (±1e-4) with 4 and 5 entries. Raises ValueError."""
    config = json.loads((Path(checkpoint) / CONFIG).read_text())
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise ValueError(f"{CONFIG}: format must be {FORMAT!r}")
    for key in ("model", "diffusion"):
        if not isinstance(config.get(key), dict):
            raise ValueError(f"{CONFIG}: {key} missing")
    d = config["diffusion"]
    if not isinstance(d.get("T"), int) or d["T"] < 1:
        raise ValueError(f"{CONFIG}: diffusion.T must be an integer >= 1")
    for key, k in (("x_marginals", len(ATOMS)), ("e_marginals", len(BONDS))):
        m = d.get(key)
        if not (
            isinstance(m, list)
            and len(m) == k
            and all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in m)
            and abs(sum(m) - 1) <= 1e-4
        ):
            raise ValueError(f"{CONFIG}: diffusion.{key} must be {k} non-negative numbers summing to 1")
    return config


def load(checkpoint: str | Path, device: str = "cpu") -> tuple[GraphTransformer, DiscreteNoise, dict]:
    """``(model in eval mode, noise, config)``; EMA weights when ``ema.safetensors`` exists.
    Raises ValueError / RuntimeError / OSError for a checkpoint that does not load (strict)."""
    from safetensors.torch import load_file

    checkpoint = Path(checkpoint)
    config = read_config(checkpoint)
    model = build_model(config["model"])
    weights = checkpoint / (EMA if (checkpoint / EMA).is_file() else WEIGHTS)
    model.load_state_dict(load_file(str(weights)), strict=True)
    return model.to(device).eval(), build_noise(config["diffusion"]).to(device), config
