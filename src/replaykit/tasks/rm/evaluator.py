"""Frozen evaluator of the ``rm`` task: RewardBench v1 scoring of a reward model.

Each row's chosen and rejected responses are scored by the checkpoint
(:mod:`.loader`; left-truncated to ``max_length`` tokens, 1,024 at full scale); the row is
correct when the chosen reward is strictly greater (:func:`.rewardbench.is_correct`), and the
rows are aggregated exactly as RewardBench v1 does (:func:`.rewardbench.score`). Rows carry a
``weight`` (their share of the score) and their subset as ``stratum``, so the harness's paired
bootstrap resamples within subsets and reproduces the weighted score.
"""

from __future__ import annotations

import time
from pathlib import Path

from ...harness.errors import InputError
from ...harness.fileio import read_jsonl
from ..peft_adapter import load_tokenizer
from . import rewardbench
from .loader import encode, load_reward_model, rewards

ITEM_FIELDS = ("id", "prompt", "chosen", "rejected")
TRAIN_FILE = "train_prefs.jsonl"
OVERLAP_FILE = "overlap.json"  # next to the rows: their overlap with the training pairs, from the assets step


def read_items(path: str | Path) -> list[dict]:
    """RewardBench-format rows (``id``, ``subset``, ``prompt``, ``chosen``, ``rejected``).

    ``prompt`` is a string or a list of chat messages; ``chosen``/``rejected`` non-empty
    strings. A row may give its ``section``; it must then match the subset's RewardBench
    section. Raises :class:`InputError` naming the file, line and field for a missing field
    or a value of the wrong type, an unknown subset (no section), a section that disagrees,
    a duplicate id, or chosen identical to rejected.
    """
    from ..common.preference_pairs import is_messages

    rows = read_jsonl(path, required=ITEM_FIELDS, unique="id")
    for number, row in enumerate(rows, start=1):
        subset = row.get("subset")
        if subset is None:
            raise InputError(path, f"line {number}.subset", "required field missing (it names the row's section)")
        if not ((isinstance(row["prompt"], str) and row["prompt"].strip()) or is_messages(row["prompt"])):
            raise InputError(path, f"line {number}.prompt", "must be a non-empty string or a list of messages")
        for field in ("chosen", "rejected"):
            if not (isinstance(row[field], str) and row[field].strip()):
                raise InputError(path, f"line {number}.{field}", "must be a non-empty string")
        if subset not in rewardbench.SECTION_OF:
            raise InputError(
                path,
                f"line {number}.subset",
                f"{subset!r} has no RewardBench v1 section (known: {', '.join(sorted(rewardbench.SECTION_OF))})",
            )
        if "section" in row and row["section"] != rewardbench.SECTION_OF[subset]:
            raise InputError(
                path,
                f"line {number}.section",
                f"{row['section']!r} disagrees with subset {subset!r} ({rewardbench.SECTION_OF[subset]})",
            )
        if row["chosen"] == row["rejected"]:
            raise InputError(path, f"line {number}.chosen", "chosen and rejected are identical")
    if not rows:
        raise InputError(path, None, "no rows")
    return rows


def summarise(rows: list[dict], metric: str, overlap: dict | None) -> dict:
    """The final summary of SPEC from scored rows (``subset``, ``correct``, ``visible``)."""
    result = rewardbench.score(rows)
    advisories = []
    if overlap is None:
        advisories.append(f"overlap with the training pairs unknown: no {OVERLAP_FILE} next to the rows")
    elif overlap["prompts"] or overlap["responses"]:
        advisories.append(
            f"evaluation rows overlap the training pairs ({overlap['prompts']} prompts, "
            f"{overlap['responses']} responses): scores are contaminated"
        )
    empty = [name for name, s in result["sections"].items() if not s["subsets"]]
    if empty:
        advisories.append(f"sections without rows score 0, as in RewardBench: {', '.join(empty)}")
    ties = sum(r["tie"] for r in rows)
    if ties:
        advisories.append(f"{ties} rows have equal chosen and rejected rewards and count as wrong (RewardBench's rule)")
    non_finite = sum(r["reward_chosen"] is None or r["reward_rejected"] is None for r in rows)
    if non_finite:
        advisories.append(f"{non_finite} rows have a non-finite reward and count as wrong")
    decomposition = {}
    for part, keep in (("visible", True), ("hidden_only", False)):
        members = [r for r in rows if bool(r.get("visible")) == keep]
        decomposition[part] = {"n": len(members), "score": rewardbench.score(members)["score"] if members else None}
    if decomposition["visible"]["n"] and decomposition["hidden_only"]["n"]:
        advisories.append(
            f"{decomposition['visible']['n']} of {len(rows)} rows are also public proxy rows that a "
            f"recipe could train on; score on the hidden-only rows: {decomposition['hidden_only']['score']:.2f}"
        )
    return {
        "metric": metric,
        "direction": "maximize",
        "value": result["score"],
        "uncertainty": {"value": result["se"], "kind": "subset_binomial_se_propagated"},
        "n": len(rows),
        "diagnostics": {
            **{name: s["score"] for name, s in result["sections"].items()},
            "sections": result["sections"],
            "subsets": result["subsets"],
            "decomposition": decomposition,
            "raw_accuracy": sum(r["correct"] for r in rows) / len(rows),
            "ties": ties,
            "non_finite_rows": non_finite,
            "overlap_with_training": overlap,
            "weighting": "RewardBench v1 EXAMPLE_COUNTS per subset; unweighted mean of 4 sections; percent",
        },
        "advisories": advisories,
    }


def evaluate(
    checkpoint: str | Path | None, fixed_start: str | Path, items_file: str | Path, metric: str, cfg: dict
) -> tuple[dict, list[dict]]:
    """Score ``checkpoint`` on ``items_file``; returns ``(summary, rows)``.

    cfg keys: ``max_length`` (tokens, left truncation), ``batch_size`` (sequences), ``dtype``.
    The overlap with the training pairs is read from ``overlap.json`` beside the items (the
    assets step computes it from the pairs it built; the manifest hashes it), never from the
    public training file a replay could have changed. A non-finite reward is stored as null
    and the row counts as wrong. Raises :class:`InputError` for bad rows, and ValueError when
    ``checkpoint`` is None: the fixed start has no reward head, so it has no score.
    """
    import json
    import math

    if checkpoint is None:
        raise ValueError("the rm fixed start has no reward head: there is no fixed-start score")
    items = read_items(items_file)
    overlap_path = Path(items_file).with_name(OVERLAP_FILE)
    overlap = json.loads(overlap_path.read_text()) if overlap_path.is_file() else None
    tokenizer = load_tokenizer(fixed_start)
    model = load_reward_model(fixed_start, checkpoint, cfg.get("dtype", "auto"))
    max_length = int(cfg["max_length"])
    seqs = [encode(tokenizer, it["prompt"], it[side], max_length) for it in items for side in ("chosen", "rejected")]
    started = time.time()
    scores = rewards(model, tokenizer.pad_token_id, seqs, int(cfg["batch_size"]), progress="reward")
    seconds = time.time() - started
    result_rows = []
    for k, item in enumerate(items):
        chosen, rejected = (v if math.isfinite(v) else None for v in (scores[2 * k], scores[2 * k + 1]))
        correct = rewardbench.is_correct(chosen, rejected) if chosen is not None and rejected is not None else 0
        result_rows.append(
            {
                "id": str(item["id"]),
                "subset": item["subset"],
                "section": rewardbench.SECTION_OF[item["subset"]],
                "visible": bool(item.get("visible", False)),
                "reward_chosen": chosen,
                "reward_rejected": rejected,
                "correct": correct,
                "tie": chosen is not None and chosen == rejected,
                "score": float(correct),
                "stratum": item["subset"],
            }
        )
    summary = summarise(result_rows, metric.format(n=len(items)), overlap)
    weights = rewardbench.score(result_rows)["weights"]
    for row in result_rows:
        row["weight"] = weights[row["subset"]]
    margins = [
        r["reward_chosen"] - r["reward_rejected"]
        for r in result_rows
        if r["reward_chosen"] is not None and r["reward_rejected"] is not None
    ]
    summary["diagnostics"]["mean_margin"] = sum(margins) / len(margins) if margins else None
    summary["diagnostics"]["scoring"] = {
        "seconds": seconds,
        "sequences": len(seqs),
        "tokens": sum(len(s) for s in seqs),
        "tokens_per_s": sum(len(s) for s in seqs) / max(seconds, 1e-9),
        "max_length": max_length,
        "truncated_sequences": sum(len(s) == max_length for s in seqs),
        "dtype": str(next(model.parameters()).dtype),
    }
    return summary, result_rows
