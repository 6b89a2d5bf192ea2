"""The ``rm`` task: a Bradley–Terry reward model scored the RewardBench v1 way (SPEC: rm).

Embedded default: SmolLM2-135M-Instruct backbone (the fixed start shared with ``dpo``);
training pairs and a RewardBench-format evaluation set with known preferred answers built
reproducibly (:mod:`.data`). Full scale: a local backbone directory, decontaminated
UltraFeedback pairs and the RewardBench v1 ``filtered`` rows as local JSON-lines files.

Splits: proxy = a stratified visible subset of the evaluation rows (``public/``); final =
the whole evaluation set (``hidden/``, read by scoring rules only). The fixed start has no
reward head, so this task has no fixed-start reference (``FIXED_START_REFERENCE = False``).
"""

from __future__ import annotations

from pathlib import Path

from ...harness.checked import check_once
from ...harness.errors import InputError
from ...harness.fileio import atomic_write_json
from .. import check_data_keys, write_splits
from ..common.preference_pairs import read_pairs
from . import data
from .evaluator import OVERLAP_FILE, TRAIN_FILE, evaluate, read_items  # noqa: F401  (plug-in interface)
from .loader import validate  # noqa: F401  (plug-in interface)
from .report import plot_diagnostics  # noqa: F401  (plug-in interface: report figure)

METRIC = {
    "final": "rewardbench_v1_score",
    "proxy": "rewardbench_proxy_{n}",
    "direction": "maximize",
    "scale": 100.0,
    "uncertainty": "subset_binomial_se_propagated",
}
REPORT_DIAGNOSTICS = ("Chat", "Chat Hard", "Reasoning", "Safety")
# Isolation: data keys whose local paths hold final-split items (the sandbox hides them),
# and whether the fixed start is raw data whose complement is the test set (then not shown).
FINAL_SOURCES: tuple[str, ...] = ("rewardbench",)
FIXED_START_IS_DATA = False
# The audit searches patches and explorations for these fields of the final rows.
FINAL_ITEM_FIELDS = {"text": ("prompt", "chosen", "rejected"), "token": ("id",)}
# Files of installed packages that hold final-split items (hidden from the replay too).
FINAL_PACKAGE_DATA: tuple[tuple[str, str], ...] = ()
FIXED_START_REFERENCE = False
PROXY_FILE, FINAL_FILE = "proxy_rows.jsonl", "final_rows.jsonl"

EMBEDDED_KEYS = ("train_seed", "n_train_pairs", "hidden_seed", "n_per_subset", "public_seed", "n_proxy")
LOCAL_KEYS = ("train_prefs", "rewardbench", "public_seed", "n_proxy")


def check_data(data_cfg: dict) -> None:
    """Config check of ``tasks.rm.data``: ``KeyError(key)`` for a missing key,
    ``ValueError("key: message")`` for a bad value."""
    check_data_keys(
        data_cfg,
        embedded=EMBEDDED_KEYS,
        local=LOCAL_KEYS,
        counts=("n_train_pairs", "n_per_subset", "n_proxy"),
        files=("train_prefs", "rewardbench"),
    )
    if data_cfg.get("source") == "local":  # bad rows are refused before any rule removes old assets
        check_once(data_cfg["train_prefs"], read_pairs)
        check_once(data_cfg["rewardbench"], read_items)


def build_assets(cfg: dict, fixed_start: str | Path, public_dir: str | Path, hidden_dir: str | Path) -> dict:
    """Write ``public/{train_prefs,proxy_rows}.jsonl``, ``hidden/final_rows.jsonl`` (each row
    marked ``visible`` when it is also a proxy row) and ``overlap.json`` in both folders (the
    evaluation rows' overlap with the training pairs, computed here from the pairs as built).

    Raises :class:`InputError` for an empty set, identical chosen/rejected, an evaluation row
    without a RewardBench section, evaluation rows that share a prompt or a response with
    the training pairs (the overlap must be 0), or an ``n_proxy`` that cannot be stratified.
    """
    if cfg.get("source") == "local":
        pairs = read_pairs(cfg["train_prefs"])
        final = read_items(cfg["rewardbench"])
        dropped, info = (
            0,
            {"source": "local", "train_prefs": str(cfg["train_prefs"]), "rewardbench": str(cfg["rewardbench"])},
        )
    else:
        pairs = data.build_train_pairs(int(cfg["train_seed"]), int(cfg["n_train_pairs"]))
        final, dropped = data.build_eval_rows(int(cfg["hidden_seed"]), int(cfg["n_per_subset"]), pairs)
        info = {"source": "embedded", "subsets": list(data.SUBSETS)}
    if not pairs or not final:
        raise InputError("config", "data", "empty training or evaluation set")
    overlap = data.overlap(final, pairs)
    if overlap["prompts"] or overlap["responses"]:
        raise InputError(
            cfg.get("rewardbench", "config"),
            "prompt",
            f"{overlap['prompts']} evaluation prompts and {overlap['responses']} responses also occur in "
            "the training pairs; decontaminate the training pairs",
        )
    try:
        proxy = data.stratified_subset(final, int(cfg["n_proxy"]), int(cfg["public_seed"]))
    except ValueError as exc:
        raise InputError("config", "data.n_proxy", str(exc).partition(": ")[2]) from None
    visible = {str(r["id"]) for r in proxy}
    final = [{**r, "visible": str(r["id"]) in visible} for r in final]
    write_splits(public_dir, hidden_dir, {TRAIN_FILE: pairs, PROXY_FILE: proxy}, {FINAL_FILE: final})
    for folder in (public_dir, hidden_dir):
        atomic_write_json(Path(folder) / OVERLAP_FILE, {**overlap, "train_file": f"public/{TRAIN_FILE}"})
    info.update(
        {
            "n_train_pairs": len(pairs),
            "n_proxy": len(proxy),
            "n_final": len(final),
            "dropped_overlapping_eval_rows": dropped,
            "overlap_with_training": overlap,
            "proxy_is_subset_of_final": True,
        }
    )
    return info


def split_file(split: str) -> str:
    """Relative path of a split's rows inside the assets directory."""
    return {"proxy": f"public/{PROXY_FILE}", "final": f"hidden/{FINAL_FILE}"}[split]
