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
from . import data, rewardbench
from .loader import encode, load_reward_model, rewards
from ..peft_adapter import load_tokenizer

ITEM_FIELDS = ("id", "prompt", "chosen", "rejected")
TRAIN_FILE = "train_prefs.jsonl"


def read_items(path: str | Path) -> list[dict]:
    """RewardBench-format rows (``id``, ``subset``, ``prompt``, ``chosen``, ``rejected``).

    A row may give its ``section``; it must then match the subset's RewardBench section.
    Raises :class:`InputError` naming the file, line and field for a missing field, an
    unknown subset (no section), a section that disagrees, a duplicate id, or chosen
    identical to rejected.
    """
    rows = read_jsonl(path, required=ITEM_FIELDS)
    seen: set[str] = set()
    for number, row in enumerate(rows, start=1):
        subset = row.get("subset")
        if subset not in rewardbench.SECTION_OF:
            raise InputError(path, f"line {number}.subset",
                             f"{subset!r} has no RewardBench v1 section (known: {', '.join(sorted(rewardbench.SECTION_OF))})")
        if "section" in row and row["section"] != rewardbench.SECTION_OF[subset]:
            raise InputError(path, f"line {number}.section",
                             f"{row['section']!r} disagrees with subset {subset!r} ({rewardbench.SECTION_OF[subset]})")
        if str(row["id"]) in seen:
            raise InputError(path, f"line {number}.id", f"duplicate id {row['id']!r}")
        seen.add(str(row["id"]))
        if row["chosen"] == row["rejected"]:
            raise InputError(path, f"line {number}.chosen", "chosen and rejected are identical")
    if not rows:
        raise InputError(path, "-", "no rows")
    return rows


def summarise(rows: list[dict], metric: str, overlap: dict) -> dict:
    """The final summary of SPEC from scored rows (``subset``, ``correct``)."""
    result = rewardbench.score(rows)
    advisories = []
    if overlap["prompts"] or overlap["responses"]:
        advisories.append(f"evaluation rows overlap the training pairs ({overlap['prompts']} prompts, "
                          f"{overlap['responses']} responses): scores are contaminated")
    empty = [name for name, s in result["sections"].items() if not s["subsets"]]
    if empty:
        advisories.append(f"sections without rows score 0, as in RewardBench: {', '.join(empty)}")
    ties = sum(r["tie"] for r in rows)
    if ties:
        advisories.append(f"{ties} rows have equal chosen and rejected rewards and count as wrong (RewardBench's rule)")
    return {
        "metric": metric, "direction": "maximize", "value": result["score"],
        "uncertainty": {"value": result["se"], "kind": "subset_binomial_se_propagated"},
        "n": len(rows),
        "diagnostics": {
            **{name: s["score"] for name, s in result["sections"].items()},
            "sections": result["sections"], "subsets": result["subsets"],
            "raw_accuracy": sum(r["correct"] for r in rows) / len(rows), "ties": ties,
            "overlap_with_training": overlap,
            "mean_margin": sum(r["reward_chosen"] - r["reward_rejected"] for r in rows) / len(rows),
            "weighting": "RewardBench v1 EXAMPLE_COUNTS per subset; unweighted mean of 4 sections; percent",
        },
        "advisories": advisories,
    }


def evaluate(checkpoint: str | Path | None, fixed_start: str | Path, items_file: str | Path, metric: str,
             cfg: dict) -> tuple[dict, list[dict]]:
    """Score ``checkpoint`` on ``items_file``; returns ``(summary, rows)``.

    cfg keys: ``max_length`` (tokens, left truncation), ``batch_size`` (sequences), ``dtype``.
    The training pairs for the overlap check are the assets' ``public/train_prefs.jsonl``
    next to the items' folder. Raises :class:`InputError` for bad rows, and ValueError when
    ``checkpoint`` is None: the fixed start has no reward head, so it has no score.
    """
    if checkpoint is None:
        raise ValueError("the rm fixed start has no reward head: there is no fixed-start score")
    items = read_items(items_file)
    train_file = Path(items_file).resolve().parents[1] / "public" / TRAIN_FILE
    overlap = {**data.overlap(items, read_jsonl(train_file, required=("prompt", "chosen", "rejected"))),
               "train_file": str(train_file)}
    tokenizer = load_tokenizer(fixed_start)
    model = load_reward_model(fixed_start, checkpoint, cfg.get("dtype", "auto"))
    max_length = int(cfg["max_length"])
    seqs = [encode(tokenizer, it["prompt"], it[side], max_length) for it in items for side in ("chosen", "rejected")]
    started = time.time()
    scores = rewards(model, tokenizer.pad_token_id, seqs, int(cfg["batch_size"]), progress="reward")
    seconds = time.time() - started
    result_rows = []
    for k, item in enumerate(items):
        chosen, rejected = scores[2 * k], scores[2 * k + 1]
        correct = rewardbench.is_correct(chosen, rejected)
        result_rows.append({"id": str(item["id"]), "subset": item["subset"], "section": rewardbench.SECTION_OF[item["subset"]],
                            "reward_chosen": chosen, "reward_rejected": rejected, "correct": correct,
                            "tie": chosen == rejected, "score": float(correct), "stratum": item["subset"]})
    summary = summarise(result_rows, metric.format(n=len(items)), overlap)
    weights = rewardbench.score(result_rows)["weights"]
    for row in result_rows:
        row["weight"] = weights[row["subset"]]
    summary["diagnostics"]["scoring"] = {
        "seconds": seconds, "sequences": len(seqs), "tokens": sum(len(s) for s in seqs),
        "tokens_per_s": sum(len(s) for s in seqs) / max(seconds, 1e-9), "max_length": max_length,
        "truncated_sequences": sum(len(s) == max_length for s in seqs)}
    return summary, result_rows
