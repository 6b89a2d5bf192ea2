"""The ``dpo`` task: preference optimisation scored by instruction following (SPEC: dpo).

Embedded default: SmolLM2-135M-Instruct as fixed start; verifiable-instruction prompts
worded and checked by lm_eval's IFEval registry; preference pairs built reproducibly
(:mod:`.instructions`). Full scale: a local fixed start directory, UltraFeedback
``train_prefs`` and the IFEval prompts as local JSON-lines files.
"""

from __future__ import annotations

from pathlib import Path

from ...harness.checked import check_once
from ...harness.errors import InputError
from .. import check_data_keys, write_splits
from ..common import ifeval  # noqa: F401  (replaykit.tasks.dpo.ifeval: the scorer's checks, shared with rm)
from ..common.preference_pairs import PAIR_FIELDS, as_conversation, read_pairs, to_explicit_prompt  # noqa: F401
from . import instructions
from .evaluator import evaluate, read_items  # noqa: F401  (plug-in interface)
from .loader import validate  # noqa: F401  (plug-in interface)
from .report import plot_diagnostics  # noqa: F401  (plug-in interface: report figure)

METRIC = {
    "final": "ifeval_strict_accuracy_hidden{n}",
    "proxy": "ifeval_strict_accuracy_public{n}",
    "direction": "maximize",
}
REPORT_DIAGNOSTICS = ("prompt_level_loose_acc", "inst_level_strict_acc", "truncated_fraction")
# Isolation: data keys whose local paths hold final-split items (the sandbox hides them),
# and whether the fixed start is raw data whose complement is the test set (then not shown).
FINAL_SOURCES: tuple[str, ...] = ("ifeval_prompts",)
FIXED_START_IS_DATA = False
# The audit searches patches and explorations for these fields of the final prompts.
FINAL_ITEM_FIELDS = {"text": ("prompt",), "token": ("id",)}
# Files of installed packages that hold final-split items (hidden from the replay too).
FINAL_PACKAGE_DATA: tuple[tuple[str, str], ...] = ()
# models.<name>.builder -> module with build(): a tiny causal LM for quick dpo and rm runs
FIXED_START_BUILDERS = {"tiny-llama": "replaykit.tiny_model"}
TRAIN_FILE, PROXY_FILE, FINAL_FILE = "train_prefs.jsonl", "proxy_prompts.jsonl", "final_prompts.jsonl"


def _embedded(cfg: dict) -> tuple[list[dict], list[dict], list[dict], dict]:
    pairs, dropped = instructions.build_pairs(int(cfg["train_seed"]), int(cfg["n_train_pairs"]))
    public_topics, hidden_topics = instructions.split_eval_topics(int(cfg["topic_split_seed"]))
    proxy = instructions.build_prompts(int(cfg["public_seed"]), int(cfg["n_proxy"]), public_topics, "public")
    final = instructions.build_prompts(int(cfg["hidden_seed"]), int(cfg["n_final"]), hidden_topics, "hidden")
    info = {
        "source": "embedded",
        "dropped_pairs": dropped,
        "instruction_ids": sorted(instructions.INSTRUCTIONS),
        "train_topics": len(instructions.TRAIN_TOPICS),
        "public_topics": public_topics,
        "n_hidden_topics": len(hidden_topics),
    }
    return pairs, proxy, final, info


EMBEDDED_KEYS = ("train_seed", "n_train_pairs", "topic_split_seed", "public_seed", "n_proxy", "hidden_seed", "n_final")
LOCAL_KEYS = ("train_prefs", "ifeval_prompts", "public_seed", "n_proxy")


def check_data(data: dict) -> None:
    """Config check of ``tasks.dpo.data`` before any rule runs: raises ``KeyError(key)`` for a
    missing key, ``ValueError("key: message")`` for a bad value and :class:`InputError` for a
    bad row of a local file (read here, so a bad file never costs the assets already built)."""
    check_data_keys(
        data,
        embedded=EMBEDDED_KEYS,
        local=LOCAL_KEYS,
        counts=("n_train_pairs", "n_proxy", "n_final"),
        files=("train_prefs", "ifeval_prompts"),
    )
    if data.get("source") == "local":
        check_once(data["train_prefs"], read_pairs)
        check_once(data["ifeval_prompts"], read_items)


def _local(cfg: dict) -> tuple[list[dict], list[dict], list[dict], dict]:
    import random

    pairs = read_pairs(cfg["train_prefs"])
    items = read_items(cfg["ifeval_prompts"])
    order = list(range(len(items)))
    random.Random(int(cfg["public_seed"])).shuffle(order)
    n_proxy = int(cfg["n_proxy"])
    proxy = [items[i] for i in sorted(order[:n_proxy])]
    final = [items[i] for i in sorted(order[n_proxy:])]
    return (
        pairs,
        proxy,
        final,
        {"source": "local", "train_prefs": str(cfg["train_prefs"]), "ifeval_prompts": str(cfg["ifeval_prompts"])},
    )


def build_assets(cfg: dict, fixed_start: str | Path, public_dir: str | Path, hidden_dir: str | Path) -> dict:
    """Write ``public/{train_prefs,proxy_prompts}.jsonl`` and ``hidden/final_prompts.jsonl``.

    Raises :class:`InputError` for an empty set, identical chosen/rejected, or a prompt
    that appears in both the proxy and the final split.
    """
    pairs, proxy, final, info = (_local if cfg.get("source") == "local" else _embedded)(cfg)
    for name, rows in (("train pairs", pairs), ("proxy prompts", proxy), ("final prompts", final)):
        if not rows:
            raise InputError("config", f"data ({name})", "empty set")
    overlap = {p["prompt"] for p in proxy} & {p["prompt"] for p in final}
    if overlap:
        raise InputError("config", "data", f"{len(overlap)} prompts appear in both proxy and final splits")
    write_splits(public_dir, hidden_dir, {TRAIN_FILE: pairs, PROXY_FILE: proxy}, {FINAL_FILE: final})
    info.update(
        {"n_train_pairs": len(pairs), "n_proxy": len(proxy), "n_final": len(final), "proxy_final_prompt_overlap": 0}
    )
    return info


def split_file(split: str) -> str:
    """Relative path of a split's items inside the assets directory."""
    return {"proxy": f"public/{PROXY_FILE}", "final": f"hidden/{FINAL_FILE}"}[split]
