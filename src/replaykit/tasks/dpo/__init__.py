"""The ``dpo`` task: preference optimisation scored by instruction following (SPEC: dpo).

Embedded default: SmolLM2-135M-Instruct as fixed start; verifiable-instruction prompts
worded and checked by lm_eval's IFEval registry; preference pairs built reproducibly
(:mod:`.instructions`). Full scale: a local fixed start directory, UltraFeedback
``train_prefs`` and the IFEval prompts as local JSON-lines files.
"""

from __future__ import annotations

from pathlib import Path

from ...harness.errors import InputError
from ...harness.fileio import read_jsonl
from .. import check_data_keys, write_splits
from . import instructions
from .evaluator import evaluate, read_items  # noqa: F401  (plug-in interface)
from .loader import validate  # noqa: F401  (plug-in interface)
from .report import plot_diagnostics  # noqa: F401  (plug-in interface: report figure)

METRIC = {"final": "ifeval_strict_accuracy_hidden{n}", "proxy": "ifeval_strict_accuracy_public{n}",
          "direction": "maximize"}
REPORT_DIAGNOSTICS = ("prompt_level_loose_acc", "inst_level_strict_acc", "truncated_fraction")
# Isolation: data keys whose local paths hold final-split items (the sandbox hides them),
# and whether the fixed start is raw data whose complement is the test set (then not shown).
FINAL_SOURCES: tuple[str, ...] = ("ifeval_prompts",)
FIXED_START_IS_DATA = False
# Files of installed packages that hold final-split items (hidden from the replay too).
FINAL_PACKAGE_DATA: tuple[tuple[str, str], ...] = ()
TRAIN_FILE, PROXY_FILE, FINAL_FILE = "train_prefs.jsonl", "proxy_prompts.jsonl", "final_prompts.jsonl"
PAIR_FIELDS = ("prompt", "chosen", "rejected")


def _embedded(cfg: dict) -> tuple[list[dict], list[dict], list[dict], dict]:
    pairs, dropped = instructions.build_pairs(int(cfg["train_seed"]), int(cfg["n_train_pairs"]))
    public_topics, hidden_topics = instructions.split_eval_topics(int(cfg["topic_split_seed"]))
    proxy = instructions.build_prompts(int(cfg["public_seed"]), int(cfg["n_proxy"]), public_topics, "public")
    final = instructions.build_prompts(int(cfg["hidden_seed"]), int(cfg["n_final"]), hidden_topics, "hidden")
    info = {"source": "embedded", "dropped_pairs": dropped, "instruction_ids": sorted(instructions.INSTRUCTIONS),
            "train_topics": len(instructions.TRAIN_TOPICS), "public_topics": public_topics, "n_hidden_topics": len(hidden_topics)}
    return pairs, proxy, final, info


EMBEDDED_KEYS = ("train_seed", "n_train_pairs", "topic_split_seed", "public_seed", "n_proxy", "hidden_seed", "n_final")
LOCAL_KEYS = ("train_prefs", "ifeval_prompts", "public_seed", "n_proxy")


def check_data(data: dict) -> None:
    """Config check of ``tasks.dpo.data`` before any rule runs: raises ``KeyError(key)`` for a
    missing key, ``ValueError("key: message")`` for a bad value and :class:`InputError` for a
    bad row of a local file (read here, so a bad file never costs the assets already built)."""
    check_data_keys(data, embedded=EMBEDDED_KEYS, local=LOCAL_KEYS, counts=("n_train_pairs", "n_proxy", "n_final"),
                    files=("train_prefs", "ifeval_prompts"))
    if data.get("source") == "local":
        read_pairs(data["train_prefs"])
        read_items(data["ifeval_prompts"])


def _is_messages(value) -> bool:
    return (isinstance(value, list) and bool(value)
            and all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                    for m in value))


def to_explicit_prompt(row: dict) -> dict:
    """UltraFeedback-binarized rows carry whole conversations in ``chosen``/``rejected``;
    TRL's explicit-prompt format wants ``prompt`` = the turns before the last, and the last
    assistant turn alone in ``chosen``/``rejected`` (as alignment-handbook does). Raises
    ValueError (``"field: message"``) when chosen and rejected are not both strings or both
    conversations with the same turns before the last."""
    chosen, rejected = row["chosen"], row["rejected"]
    if isinstance(chosen, list) or isinstance(rejected, list):
        if not (_is_messages(chosen) and _is_messages(rejected)):
            raise ValueError("rejected: chosen and rejected must both be lists of {role, content} messages")
        if len(chosen) > 1:
            if chosen[:-1] != rejected[:-1]:
                raise ValueError("rejected: the conversation before the last turn differs from chosen's")
            return {"prompt": chosen[:-1], "chosen": chosen[-1:], "rejected": rejected[-1:]}
    return {k: row[k] for k in PAIR_FIELDS}


def read_pairs(path: str | Path) -> list[dict]:
    """Preference pairs of a local JSON-lines file in TRL's explicit-prompt format.

    A row has ``prompt`` (a string or messages) and ``chosen``/``rejected`` (non-empty
    strings, or conversations as UltraFeedback-binarized stores them). Plain-text parts are
    returned as messages (:func:`as_conversation`): training and scoring then use the same
    chat template. Raises
    :class:`InputError` naming the file, line and field of a malformed row, or of a pair
    whose chosen and rejected are identical.
    """
    pairs = []
    for number, row in enumerate(read_jsonl(path, required=PAIR_FIELDS), start=1):
        try:
            pair = to_explicit_prompt(row)
        except ValueError as exc:
            field, _, message = str(exc).partition(": ")
            raise InputError(path, f"line {number}.{field}", message) from None
        if not (isinstance(pair["prompt"], str) and pair["prompt"].strip()) and not _is_messages(pair["prompt"]):
            raise InputError(path, f"line {number}.prompt", "must be a non-empty string or a list of messages")
        for field in ("chosen", "rejected"):
            if not (isinstance(pair[field], str) and pair[field].strip()) and not _is_messages(pair[field]):
                raise InputError(path, f"line {number}.{field}", "must be a non-empty string or a list of messages")
        if pair["chosen"] == pair["rejected"]:
            raise InputError(path, f"line {number}.chosen", "chosen and rejected are identical")
        pairs.append(as_conversation(pair))
    return pairs


def as_conversation(pair: dict) -> dict:
    """A plain-text pair (``prompt``/``chosen``/``rejected`` strings) as one user turn and
    one assistant turn each, so that TRL trains it through the tokenizer's chat template,
    the one the evaluator generates with (plain text would be trained without it)."""
    out = dict(pair)
    if isinstance(pair["prompt"], str):
        out["prompt"] = [{"role": "user", "content": pair["prompt"]}]
    for field in ("chosen", "rejected"):
        if isinstance(pair[field], str):
            out[field] = [{"role": "assistant", "content": pair[field]}]
    return out


def _local(cfg: dict) -> tuple[list[dict], list[dict], list[dict], dict]:
    import random

    pairs = read_pairs(cfg["train_prefs"])
    items = read_items(cfg["ifeval_prompts"])
    order = list(range(len(items)))
    random.Random(int(cfg["public_seed"])).shuffle(order)
    n_proxy = int(cfg["n_proxy"])
    proxy = [items[i] for i in sorted(order[:n_proxy])]
    final = [items[i] for i in sorted(order[n_proxy:])]
    return pairs, proxy, final, {"source": "local", "train_prefs": str(cfg["train_prefs"]),
                                 "ifeval_prompts": str(cfg["ifeval_prompts"])}


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
    info.update({"n_train_pairs": len(pairs), "n_proxy": len(proxy), "n_final": len(final),
                 "proxy_final_prompt_overlap": 0})
    return info


def split_file(split: str) -> str:
    """Relative path of a split's items inside the assets directory."""
    return {"proxy": f"public/{PROXY_FILE}", "final": f"hidden/{FINAL_FILE}"}[split]
