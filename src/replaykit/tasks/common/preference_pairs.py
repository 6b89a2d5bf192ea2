"""Preference pairs of a local JSON-lines file, in TRL's explicit-prompt format (the training
data of dpo and rm at full scale: UltraFeedback-binarized rows or plain-text pairs).

Moved from ``replaykit.tasks.dpo`` unchanged.
"""

from __future__ import annotations

from pathlib import Path

from ...harness.errors import InputError
from ...harness.fileio import read_jsonl

PAIR_FIELDS = ("prompt", "chosen", "rejected")


def is_messages(value) -> bool:
    """True for a non-empty list of ``{role: str, content: str}`` chat messages."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value
        )
    )


def to_explicit_prompt(row: dict) -> dict:
    """UltraFeedback-binarized rows carry whole conversations in ``chosen``/``rejected``;
    TRL's explicit-prompt format wants ``prompt`` = the turns before the last, and the last
    assistant turn alone in ``chosen``/``rejected`` (as alignment-handbook does). Raises
    ValueError (``"field: message"``) when chosen and rejected are not both strings or both
    conversations with the same turns before the last."""
    chosen, rejected = row["chosen"], row["rejected"]
    if isinstance(chosen, list) or isinstance(rejected, list):
        if not (is_messages(chosen) and is_messages(rejected)):
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
        if not (isinstance(pair["prompt"], str) and pair["prompt"].strip()) and not is_messages(pair["prompt"]):
            raise InputError(path, f"line {number}.prompt", "must be a non-empty string or a list of messages")
        for field in ("chosen", "rejected"):
            if not (isinstance(pair[field], str) and pair[field].strip()) and not is_messages(pair[field]):
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
