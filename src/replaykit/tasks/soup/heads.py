"""The soup ingredients' classification heads, checked at workflow start.

Every ``snakemake`` invocation on a config whose soup fixed start is a local folder runs
:func:`check_heads` (``replaykit.config.check_config`` → ``check_fixed_start``), dry runs
included. It reads one tensor per ingredient and works in NumPy: importing torch took about
half of a dry run's 9 s on the 2-core machine (``python -m cProfile -m snakemake -n`` on a
tiny soup run, 2026-12-04). torch is imported only for what NumPy cannot read: a torch
pickle (``.pt``) ingredient or a bfloat16 head.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..common.clip import CONFIG

HEAD_MIN_COSINE = 0.5  # least centred cosine of an ingredient's class row with the reference's


def head_weight(path: str | Path) -> np.ndarray:
    """``head.weight`` (``n_classes × embed_dim``, float32) of a state dict file, read without
    loading the rest (safetensors: one tensor; torch zip files: memory-mapped), so that
    checking the heads of many large ingredients at workflow start stays cheap. Raises
    ValueError ``"<file>: head.weight: missing"`` when the key is missing."""
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="np") as handle:
            if "head.weight" not in handle.keys():
                raise ValueError(f"{path}: head.weight: missing")
            if handle.get_slice("head.weight").get_dtype() != "BF16":  # NumPy has no bfloat16
                return handle.get_tensor("head.weight").astype(np.float32)
        import torch
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            return handle.get_tensor("head.weight").float().numpy()
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError:  # not a zip-format file: no memory map
        state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or "head.weight" not in state:
        raise ValueError(f"{path}: head.weight: missing")
    return state["head.weight"].float().numpy().copy()


def centred_rows(weight: np.ndarray) -> np.ndarray:
    """Class rows minus their mean, L2-normalised (as ``torch.nn.functional.normalize``: the
    norm clamped at 1e-12): the component all classes share (most of a zero-shot head, whose
    class prompts differ in one word) would make every row look alike."""
    centred = weight - weight.mean(axis=0, keepdims=True)
    return centred / np.maximum(np.linalg.norm(centred, axis=1, keepdims=True), 1e-12)


def _checked(weight: np.ndarray, path: Path, shape: tuple | None = None, of: str = "") -> np.ndarray:
    """``weight`` when it is a finite 2-D matrix (of ``shape`` when given), else ValueError
    ``"<path>: head.weight: ..."``."""
    if weight.ndim != 2 or (shape is not None and weight.shape != shape):
        expected = f", {of} has {shape}" if shape is not None else ": expected n_classes x embed_dim"
        raise ValueError(f"{path}: head.weight: shape {weight.shape}{expected}")
    if not np.isfinite(weight).all():
        raise ValueError(f"{path}: head.weight: non-finite values")
    return weight


def check_heads(fixed_start: str | Path, min_cosine: float = HEAD_MIN_COSINE) -> dict:
    """Every ingredient's classification head is aligned class by class with the reference
    head: the zero-shot head (``config.json``'s ``zeroshot`` file) when the fixed start has
    one, else the first ingredient's. Row ``c`` of an ingredient's ``head.weight`` must have a
    centred cosine (:func:`centred_rows`) of at least ``min_cosine`` with the reference's row
    ``c`` and be closer to it than to any other class's row; averaging heads whose rows mean
    different classes (e.g. shifted by one) gives a soup that is "valid" but wrong.

    Measured on the embedded digits ingredients (1-epoch pre-training): aligned rows >= 0.91,
    rows shifted by one class <= -0.26.

    Returns ``{"reference": file name, "min_cosine": threshold, "worst": {ingredient: least
    cosine}}``. Raises ValueError ``"<file>: head.weight: ..."`` naming the first ingredient
    and class that fail, or a head that is not a finite matrix of the reference's shape.
    """
    config = json.loads((Path(fixed_start) / CONFIG).read_text())
    paths = [Path(fixed_start) / rel for rel in config["ingredients"]]
    reference_path = Path(fixed_start) / config["zeroshot"] if config.get("zeroshot") else paths[0]
    reference = centred_rows(_checked(head_weight(reference_path), reference_path))
    worst = {}
    for path in paths:
        cosine = centred_rows(_checked(head_weight(path), path, reference.shape, reference_path.name)) @ reference.T
        own = np.diag(cosine)
        closest = cosine.argmax(axis=1)
        for c in range(len(own)):
            if own[c] < min_cosine or int(closest[c]) != c:
                raise ValueError(
                    f"{path}: head.weight: class row {c} is not aligned with "
                    f"{reference_path.name}'s (centred cosine {float(own[c]):.3f}, threshold "
                    f"{min_cosine}; closest row {int(closest[c])}): the ingredients' class order "
                    "differs, averaging them mixes classes"
                )
        worst[path.name] = round(float(own.min()), 4)
    return {"reference": reference_path.name, "min_cosine": min_cosine, "worst": worst}
