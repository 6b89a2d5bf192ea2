"""The ``toy`` task: a replaykit task plug-in that lives outside the package (tests only).

It is registered by the entry point ``toy = replaykit_toy`` (group ``replaykit.tasks``) in
``replaykit_toy-0.dist-info/entry_points.txt`` beside it: a folder on ``PYTHONPATH`` holding
this package and that ``.dist-info`` is an installed distribution to ``importlib.metadata``.
Its recipe is ``../recipe/`` (copied to ``recipes/toy/``), its fixed start ``../fixed-start/``.

The model is one number ``w`` predicting ``y = w·x``; the data lie exactly on ``y = slope·x``.
Points (no randomness): training ``x = 1 .. n_train``, proxy the next ``n_proxy`` integers,
final the next ``n_final``. A row's score is its squared error ``(w·x - y)² = (w - slope)²·x²``,
and the metric their mean (lower is better).

A checkpoint is ``checkpoint-<step>/model.json`` = ``{"w": float}``; the fixed start is a
folder whose ``config.json`` holds the starting ``w``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from replaykit.harness.errors import InputError
from replaykit.tasks import check_data_keys, write_splits

METRIC = {
    "final": "squared_error_final{n}",
    "proxy": "squared_error_proxy{n}",
    "direction": "minimize",
    "uncertainty": "se_mean",  # the evaluator's SE: SD of the rows' scores / sqrt(n)
}
FINAL_SOURCES: tuple[str, ...] = ()  # the data are drawn from the config, no local files
FINAL_PACKAGE_DATA: tuple[tuple[str, str], ...] = ()
FIXED_START_IS_DATA = False
REPORT_DIAGNOSTICS = ("w",)
TRAINING_CURVE = "loss"
# The block tasks.toy of the config: data and evaluation (the other keys are every block's).
CONFIG_SCHEMA = {
    "data": {
        "type": "object",
        "additionalProperties": False,
        "description": "toy's data settings, passed to its build_assets",
        "properties": {
            "source": {"$ref": "#/$defs/source", "default": "embedded"},
            "slope": {"type": "number", "description": "the true slope: every point has y = slope·x"},
            "n_train": {"type": "integer", "minimum": 1, "description": "training points x = 1 .. n_train"},
            "n_proxy": {"type": "integer", "minimum": 1, "description": "proxy points, after the training ones"},
            "n_final": {"type": "integer", "minimum": 1, "description": "final points, after the proxy ones"},
        },
    },
    "evaluation": {
        "type": "object",
        "additionalProperties": False,
        "default": {"runtime": 5},
        "properties": {"runtime": {"$ref": "#/$defs/runtime", "default": 5}},
    },
}
KEYS = ("slope", "n_train", "n_proxy", "n_final")
TRAIN_FILE, PROXY_FILE, FINAL_FILE = "train.jsonl", "proxy.jsonl", "final.jsonl"


def check_data(data: dict) -> None:
    """Config check of ``tasks.toy.data``: ``KeyError(key)`` for a missing key, ``ValueError``
    for a count that is not a positive integer; only ``source: embedded`` is known."""
    if data.get("source", "embedded") != "embedded":
        raise ValueError("source: the toy task has embedded data only")
    check_data_keys(data, embedded=KEYS, local=KEYS, counts=KEYS[1:])


def points(first: int, n: int, slope: float, split: str) -> list[dict]:
    """``n`` rows ``{id, x, y}`` at ``x = first .. first + n - 1`` on ``y = slope·x``."""
    return [{"id": f"{split}-{x}", "x": float(x), "y": slope * x} for x in range(first, first + n)]


def build_assets(cfg: dict, fixed_start, public_dir, hidden_dir) -> dict:
    """``public/{train,proxy}.jsonl`` and ``hidden/final.jsonl`` (rows ``id, x, y``); returns
    the manifest's counts."""
    slope, n_train, n_proxy, n_final = (cfg[k] for k in KEYS)
    train = points(1, n_train, slope, "train")
    proxy = points(1 + n_train, n_proxy, slope, "proxy")
    final = points(1 + n_train + n_proxy, n_final, slope, "final")
    write_splits(public_dir, hidden_dir, {TRAIN_FILE: train, PROXY_FILE: proxy}, {FINAL_FILE: final})
    return {"source": "embedded", "n_train": n_train, "n_proxy": n_proxy, "n_final": n_final}


def split_file(split: str) -> str:
    """The proxy / final rows' path relative to the assets folder."""
    return {"proxy": f"public/{PROXY_FILE}", "final": f"hidden/{FINAL_FILE}"}[split]


def read_points(path) -> list[dict]:
    """The rows of a JSON-lines split file (the recipe reads its training points with it)."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def read_w(checkpoint, fixed_start) -> float:
    """The model's ``w``: ``checkpoint/model.json``, or the fixed start's ``config.json`` when
    ``checkpoint`` is None. Raises ``OSError``, ``ValueError`` or ``KeyError`` for a bad file."""
    path = Path(fixed_start) / "config.json" if checkpoint is None else Path(checkpoint) / "model.json"
    w = json.loads(path.read_text())["w"]
    if not (isinstance(w, (int, float)) and math.isfinite(w)):
        raise ValueError(f"{path}: w: not a finite number: {w!r}")
    return float(w)


def validate(checkpoint, fixed_start, cfg: dict) -> dict:
    """The frozen loader's verdict: valid when ``model.json`` holds a finite number ``w``."""
    try:
        w = read_w(checkpoint, fixed_start)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return {"valid": False, "reason": f"model.json unreadable: {exc}", "checks": {}}
    return {"valid": True, "reason": "ok", "checks": {"w": w}}


def evaluate(checkpoint, fixed_start, items_file, metric: str, cfg: dict) -> tuple[dict, list[dict]]:
    """The frozen evaluator: each row's squared error ``(w·x - y)²`` (row ``score``), their mean
    (the value) and its SE (SD of the scores / sqrt(n)).

    Raises:
        InputError: an empty split file.
    """
    w = read_w(checkpoint, fixed_start)
    items = read_points(items_file)
    if not items:
        raise InputError(items_file, None, "no rows")
    rows = [{"id": it["id"], "score": (w * it["x"] - it["y"]) ** 2} for it in items]
    n = len(rows)
    mean = sum(r["score"] for r in rows) / n
    sd = math.sqrt(sum((r["score"] - mean) ** 2 for r in rows) / (n - 1)) if n > 1 else 0.0
    summary = {
        "metric": metric.format(n=n),
        "direction": METRIC["direction"],
        "value": mean,
        "uncertainty": {"value": sd / math.sqrt(n), "kind": METRIC["uncertainty"]},
        "n": n,
        "diagnostics": {"w": w},
        "advisories": [],
    }
    return summary, rows
