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

from ...harness.errors import InputError
from ..common.clip import CONFIG

HEAD_MIN_COSINE = 0.5  # least centred cosine of an ingredient's class row with the reference's
MAX_HEAD_VALUES = 1 << 28  # n_classes x embed_dim read at most (1 GiB of float32): a header can claim any shape
NUMPY_DTYPES = {"F16", "F32", "F64"}  # safetensors dtypes NumPy reads; other floats (BF16, F8_*) go through torch


def _head_file(fixed_start: Path, config_path: Path, field: str, rel) -> Path:
    """``fixed_start / rel`` for ``config.json``'s ``field``: a relative path inside the fixed
    start naming a regular file (a FIFO would hang the reader). Raises InputError naming
    ``config.json`` and the field, or the file."""
    if not isinstance(rel, str) or not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise InputError(config_path, field, f"{rel!r}: not a relative path inside the fixed start")
    path = fixed_start / rel
    try:
        path.stat()
    except FileNotFoundError:
        pass
    except OSError as exc:  # a name too long, a link loop
        raise InputError(config_path, field, f"{rel[:80]!r}: {exc.strerror}") from None
    if not path.exists():
        raise InputError(path, None, f"missing (named by {config_path.name}'s {field})")
    if not path.is_file():
        raise InputError(path, None, f"not a regular file (named by {config_path.name}'s {field})")
    return path


def head_files(fixed_start: str | Path) -> tuple[list[Path], Path]:
    """(the ingredient files, the reference head's file) that ``config.json`` names: its
    ``ingredients`` (a non-empty list) and its optional ``zeroshot``, else the first ingredient.
    Raises InputError naming ``config.json`` (not a JSON object) or its field."""
    fixed_start = Path(fixed_start)
    config_path = fixed_start / CONFIG
    try:
        config = json.loads(config_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise InputError(config_path, None, f"not readable as JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(config, dict):
        raise InputError(config_path, None, "not a JSON object")
    listed = config.get("ingredients")
    if not isinstance(listed, list) or not listed:
        raise InputError(config_path, "ingredients", "a non-empty list of files is needed")
    paths = [_head_file(fixed_start, config_path, f"ingredients[{i}]", rel) for i, rel in enumerate(listed)]
    if config.get("zeroshot") is not None:
        return paths, _head_file(fixed_start, config_path, "zeroshot", config["zeroshot"])
    return paths, paths[0]


def head_weight(path: str | Path) -> np.ndarray:
    """``head.weight`` (``n_classes × embed_dim``, float32) of a state dict file, read without
    loading the rest (safetensors: one tensor; torch zip files: memory-mapped), so that
    checking the heads of many large ingredients at workflow start stays cheap. Raises
    InputError ``<file>: head.weight: ...`` when the key is missing, not a floating-point
    tensor, or the file is no state dict."""
    path = Path(path)
    try:
        weight = _safetensors_head(path) if path.suffix == ".safetensors" else _torch_head(path)
    except InputError:
        raise
    except Exception as exc:  # a truncated file, a pickle of other things: the library's own error
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise InputError(
            path, "head.weight", f"not readable as a state dict ({type(exc).__name__}: {detail})"
        ) from None
    if weight is None:
        raise InputError(path, "head.weight", "missing")
    return weight


def _safetensors_head(path: Path) -> np.ndarray | None:
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as handle:
        if "head.weight" not in handle.keys():
            return None
        head = handle.get_slice("head.weight")
        dtype, shape = head.get_dtype(), head.get_shape()
        if len(shape) != 2 or shape[0] * shape[1] > MAX_HEAD_VALUES:
            raise InputError(path, "head.weight", f"shape {tuple(shape)}: expected n_classes x embed_dim")
        if dtype in NUMPY_DTYPES:
            return handle.get_tensor("head.weight").astype(np.float32)
    if dtype != "BF16" and not dtype.startswith("F"):  # F8_E4M3, F8_E5M2, ...: floats; I*, U*, BOOL, C*: not
        raise InputError(path, "head.weight", f"dtype {dtype}: a floating-point head is needed")
    with safe_open(str(path), framework="pt") as handle:  # torch only for what NumPy cannot read
        return handle.get_tensor("head.weight").float().numpy()


def _torch_head(path: Path) -> np.ndarray | None:
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError:  # not a zip-format file: no memory map
        state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or "head.weight" not in state:
        return None
    head = state["head.weight"]
    if not isinstance(head, torch.Tensor) or not head.is_floating_point():
        raise InputError(path, "head.weight", "not a floating-point tensor")
    return head.detach().float().to_dense().numpy().copy()


def centred_rows(weight: np.ndarray) -> np.ndarray:
    """Class rows minus their mean, L2-normalised (as ``torch.nn.functional.normalize``: the
    norm clamped at 1e-12): the component all classes share (most of a zero-shot head, whose
    class prompts differ in one word) would make every row look alike."""
    centred = weight - weight.mean(axis=0, keepdims=True)
    return centred / np.maximum(np.linalg.norm(centred, axis=1, keepdims=True), 1e-12)


def _checked(weight: np.ndarray, path: Path, shape: tuple | None = None, of: str = "") -> np.ndarray:
    """``weight`` when it is a finite 2-D matrix with class rows (of ``shape`` when given), else
    InputError ``<path>: head.weight: ...``."""
    if weight.ndim != 2 or (shape is not None and weight.shape != shape):
        expected = f", {of} has {shape}" if shape is not None else ": expected n_classes x embed_dim"
        raise InputError(path, "head.weight", f"shape {weight.shape}{expected}")
    if weight.shape[0] == 0:
        raise InputError(path, "head.weight", f"shape {weight.shape}: no class rows")
    if not np.isfinite(weight).all():
        raise InputError(path, "head.weight", "non-finite values")
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
    cosine}}``. Raises InputError ``<file>: head.weight: ...`` naming the first ingredient and
    class that fail, or a head that is not a finite matrix of the reference's shape, and
    ``config.json``'s field when it names no file of the fixed start (:func:`head_files`).
    """
    paths, reference_path = head_files(fixed_start)
    reference = centred_rows(_checked(head_weight(reference_path), reference_path))
    worst = {}
    for path in paths:
        cosine = centred_rows(_checked(head_weight(path), path, reference.shape, reference_path.name)) @ reference.T
        own = np.diag(cosine)
        closest = cosine.argmax(axis=1)
        for c in range(len(own)):
            if own[c] < min_cosine or int(closest[c]) != c:
                raise InputError(
                    path,
                    "head.weight",
                    f"class row {c} is not aligned with "
                    f"{reference_path.name}'s (centred cosine {float(own[c]):.3f}, threshold "
                    f"{min_cosine}; closest row {int(closest[c])}): the ingredients' class order "
                    "differs, averaging them mixes classes",
                )
        worst[path.name] = round(float(own.min()), 4)
    return {"reference": reference_path.name, "min_cosine": min_cosine, "worst": worst}
