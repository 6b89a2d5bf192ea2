"""Frozen validator of the ``soup`` task: a checkpoint must lie in the ingredients' affine hull.

A checkpoint is ``checkpoint-<progress>/model.pt`` (a state dict of
:class:`.model.ImageClassifier`) and ``coefficients.json`` (``{"coefficients": [c_1 ..
c_N], "ingredients": [...]}``). Valid when: the coefficients are N finite numbers summing to
1 (|sum - 1| <= 1e-6); ``model.pt`` has exactly the ingredients' keys and shapes; every
tensor equals ``sum_i c_i theta_i`` (computed here in float64) within
``|theta - expected| <= atol + rtol * |expected|`` (``atol`` 1e-5, ``rtol`` 1e-4 by default,
float32 rounding of the recipe's own sum); and a forward pass gives finite logits.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from .model import create_classifier, ingredient_paths, load_state, read_config

MODEL, COEFFICIENTS = "model.pt", "coefficients.json"


def read_coefficients(checkpoint: str | Path, n_ingredients: int) -> list[float]:
    """The coefficient vector; ValueError unless it has ``n_ingredients`` finite entries summing to 1."""
    doc = json.loads((Path(checkpoint) / COEFFICIENTS).read_text())
    coefficients = doc.get("coefficients") if isinstance(doc, dict) else None
    if not isinstance(coefficients, list) or len(coefficients) != n_ingredients:
        raise ValueError(f"{COEFFICIENTS}: coefficients must be a list of {n_ingredients} numbers")
    if not all(isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) for c in coefficients):
        raise ValueError(f"{COEFFICIENTS}: coefficients must be finite numbers")
    if abs(sum(coefficients) - 1.0) > 1e-6:
        raise ValueError(
            f"{COEFFICIENTS}: coefficients sum to {sum(coefficients):.9g}, not 1 (outside the affine hull)"
        )
    return [float(c) for c in coefficients]


def check_affine(state: dict, ingredients: list[Path], coefficients: list[float], atol: float, rtol: float) -> float:
    """Largest ``|theta - sum_i c_i theta_i|`` over all tensors; ValueError naming the
    ingredient or key that differs in keys/shape, or the key outside the tolerance."""
    expected: dict[str, torch.Tensor] = {}
    for path, c in zip(ingredients, coefficients):
        part = load_state(path)
        if part.keys() != state.keys():
            raise ValueError(f"{MODEL}: keys differ from {path.name} ({sorted(part.keys() ^ state.keys())[:3]})")
        for key, value in part.items():
            if value.shape != state[key].shape:
                raise ValueError(
                    f"{MODEL}: {key} has shape {tuple(state[key].shape)}, {path.name} has {tuple(value.shape)}"
                )
            if value.is_floating_point():
                expected[key] = expected.get(key, 0) + c * value.double()
    worst = 0.0
    for key, value in expected.items():
        gap = (state[key].double() - value).abs()
        if not torch.all(gap <= atol + rtol * value.abs()):
            raise ValueError(
                f"{MODEL}: {key} is not the coefficient-weighted sum of the ingredients "
                f"(max gap {float(gap.max()):.3g})"
            )
        worst = max(worst, float(gap.max()))
    return worst


def validate(checkpoint: str | Path, fixed_start: str | Path, cfg: dict | None = None) -> dict:
    """Frozen validation of one checkpoint: ``{valid, reason, checks}``; never raises for a bad one."""
    cfg = cfg or {}
    checkpoint = Path(checkpoint)
    checks: dict = {}
    try:
        for name in (MODEL, COEFFICIENTS):
            if not (checkpoint / name).is_file():
                raise ValueError(f"{name} missing")
        config = read_config(fixed_start)
        paths = ingredient_paths(fixed_start, config)
        coefficients = read_coefficients(checkpoint, len(paths))
        checks["coefficients"] = {
            "n": len(coefficients),
            "sum": sum(coefficients),
            "nonzero": sum(c != 0 for c in coefficients),
        }
        state = load_state(checkpoint / MODEL)
        worst = check_affine(state, paths, coefficients, float(cfg.get("atol", 1e-5)), float(cfg.get("rtol", 1e-4)))
        checks["affine_hull"] = {
            "max_abs_gap": worst,
            "atol": float(cfg.get("atol", 1e-5)),
            "rtol": float(cfg.get("rtol", 1e-4)),
        }
        model, _ = create_classifier(fixed_start, config)
        model.load_state_dict(state)
        size = model.visual.image_size if hasattr(model.visual, "image_size") else 224
        size = size[0] if isinstance(size, (tuple, list)) else size
        with torch.no_grad():
            logits = model.eval()(torch.zeros(2, 3, size, size))
        if not torch.isfinite(logits).all():
            raise ValueError("forward pass gave non-finite logits")
        checks["forward_pass"] = {"logits_shape": list(logits.shape)}
    except Exception as exc:  # the verdict, not a crash
        return {"valid": False, "reason": f"{type(exc).__name__}: {exc}".splitlines()[0][:500], "checks": checks}
    return {"valid": True, "reason": "ok", "checks": checks}
