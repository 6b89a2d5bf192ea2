"""Frozen evaluator of the ``dpo`` task: IFEval prompt-level strict accuracy.

Greedy generation with the fixed start's chat template (``max_new_tokens`` from config;
1,280 at full scale), then lm_eval's IFEval checkers (:mod:`.ifeval`). The metric is
prompt-level strict accuracy ``k / n`` with the binomial standard error
``sqrt(p (1 - p) / n)``; loose and instruction-level accuracies are diagnostics.
Source: Zhou et al. (2023), arXiv:2311.07911; google-research/instruction_following_eval.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

from ...harness.errors import InputError
from ...harness.fileio import read_jsonl
from ...harness.stats import binomial_se
from ..common import ifeval
from .loader import load_policy, load_tokenizer

ITEM_FIELDS = ("prompt", "instruction_id_list", "kwargs")


def read_items(path: str | Path) -> list[dict]:
    """IFEval items (``id`` or IFEval's ``key``, ``prompt``, ``instruction_id_list``, ``kwargs``).

    Raises :class:`InputError` for an empty set, a missing field, an unknown instruction or
    kwargs that do not fix the instruction's criterion (:func:`ifeval.kwargs_problem`: missing,
    empty or outside the argument's domain); the line names the file, the line, the row's id,
    the instruction and the argument.
    """
    items = read_jsonl(path, required=ITEM_FIELDS)
    known = ifeval.registry()
    seen: set[str] = set()
    for number, item in enumerate(items, start=1):
        if "id" not in item:
            if "key" not in item:
                raise InputError(path, f"line {number}.id", "required field missing (id or key)")
            item["id"] = str(item["key"])
        if str(item["id"]) in seen:
            raise InputError(path, f"line {number}.id", f"duplicate id {item['id']!r}")
        seen.add(str(item["id"]))
        if len(item["instruction_id_list"]) != len(item["kwargs"]):
            raise InputError(path, f"line {number}.kwargs", "needs one kwargs dict per instruction")
        for index, (iid, kwargs) in enumerate(zip(item["instruction_id_list"], item["kwargs"])):
            if iid not in known:
                raise InputError(path, f"line {number}.instruction_id_list", f"unknown instruction {iid!r}")
            if problem := ifeval.kwargs_problem(iid, kwargs):
                raise InputError(path, f"line {number}.kwargs.{index}", f"id {item['id']!r}: {problem}")
    return items


# Rows a decode step keeps at least: below 4 rows MKL's float32 GEMM takes another path (measured,
# torch 2.14.1 on AVX-512: rows of a 1-3-row product differ from the same rows in a bigger one in
# the last bit); 8 leaves a margin and costs nothing, as small steps are bound by reading weights.
MIN_ROWS = 8


def generate(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int) -> list[dict]:
    """Greedy chat completions, batched with left padding, longest prompts first.

    Returns per prompt ``{text, new_tokens, truncated}`` (truncated: no EOS within
    ``max_new_tokens``). The tokens are those of ``model.generate(do_sample=False)`` on the same
    batches (:func:`greedy_batch`).
    """
    tokenizer.padding_side = "left"
    chats = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]
    order = sorted(range(len(chats)), key=lambda i: -len(chats[i]))
    out: list[dict | None] = [None] * len(chats)
    started = time.time()
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        enc = tokenizer([chats[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False).to(
            model.device
        )
        new = greedy_batch(model, enc["input_ids"], enc["attention_mask"], max_new_tokens, tokenizer.eos_token_id)
        for row, i in enumerate(idx):
            tokens = new[row]
            ended = tokenizer.eos_token_id in tokens
            length = tokens.index(tokenizer.eos_token_id) if ended else len(tokens)
            out[i] = {
                "text": tokenizer.decode(tokens[:length], skip_special_tokens=True),
                "new_tokens": length,
                "truncated": not ended,
            }
        done = min(start + batch_size, len(order))
        print(f"[generate] {done}/{len(order)} prompts, {time.time() - started:.0f} s", flush=True)
    return out  # type: ignore[return-value]


def greedy_batch(
    model, input_ids, attention_mask, max_new_tokens: int, eos_token_id: int, min_rows: int = MIN_ROWS
) -> list[list[int]]:
    """Greedy continuation of one left-padded batch: per row the new tokens, up to and including
    the first EOS (at most ``max_new_tokens``).

    The same forward passes as ``model.generate(do_sample=False)`` with a dynamic KV cache
    (position ids from the attention mask, logits of the last position only), except that rows
    which have emitted EOS leave the batch; at least ``min(min_rows, batch)`` rows stay (finished
    ones as filler), and a padded row stays while the batch had one (without padding transformers
    drops the mask and runs a different attention kernel). Each kept row's numbers are those of
    the full batch as long as a row's product does not depend on the others (true of MKL's float32
    GEMM from 4 rows on, :data:`MIN_ROWS`); ``tests/test_dpo_generate.py`` checks the tokens, and
    ``bench/dpo_generate.py`` on the embedded default's 64 prompts × 4 models (all identical, CPU).
    A GPU's GEMM kernels may also depend on the number of rows: there, as with another batch size,
    a near-tie could break differently.

    Args:
        input_ids, attention_mask: ``(batch, prompt_len)`` tensors, left-padded.
    """
    import torch
    from transformers import DynamicCache

    n = input_ids.shape[0]
    new: list[list[int]] = [[] for _ in range(n)]
    rows = torch.arange(n)  # original row of each batch row
    open_rows = torch.ones(n, dtype=torch.bool)
    padded = attention_mask[:, 0] == 0  # left padding: a padded row starts with a masked position
    position_ids = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
    cache = DynamicCache(config=model.config)
    step_input = input_ids
    for step in range(max_new_tokens):
        with torch.no_grad():
            logits = model(
                input_ids=step_input,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            ).logits
        next_tokens = logits[:, -1].to(dtype=torch.float32).argmax(-1)
        for b in torch.nonzero(open_rows).flatten().tolist():
            token = int(next_tokens[b])
            new[int(rows[b])].append(token)
            if token == eos_token_id:
                open_rows[b] = False
        if not open_rows.any() or step == max_new_tokens - 1:
            break
        keep = _rows_to_keep(open_rows, padded, min_rows)
        if keep is not None:
            cache.batch_select_indices(keep)
            rows, open_rows, padded = rows[keep], open_rows[keep], padded[keep]
            attention_mask, position_ids, next_tokens = attention_mask[keep], position_ids[keep], next_tokens[keep]
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((attention_mask.shape[0], 1))], dim=-1)
        position_ids = position_ids[:, -1:] + 1
        step_input = next_tokens[:, None]
    return new


def _rows_to_keep(open_rows, padded, min_rows: int):
    """Batch rows for the next step (a LongTensor), or None to keep the batch as it is: the open
    rows, then finished rows as filler up to ``min_rows`` and one padded row if the batch has one.
    Shrinks only when it drops at least a quarter of the batch (each shrink copies the KV cache)."""
    import torch

    size = open_rows.shape[0]
    keep = torch.nonzero(open_rows).flatten().tolist()
    closed = torch.nonzero(~open_rows).flatten().tolist()
    if padded.any() and not padded[keep].any():
        keep.append(next(b for b in closed if padded[b]))
    fillers = [b for b in closed if b not in keep]
    keep += fillers[: max(0, min(min_rows, size) - len(keep))]
    if size - len(keep) < max(1, size // 4):
        return None
    return torch.tensor(sorted(keep))


def score_responses(items: list[dict], responses: list[dict]) -> list[dict]:
    """Per-item IFEval verdicts; ``score`` is prompt-level strict (1.0 / 0.0)."""
    rows = []
    for item, resp in zip(items, responses):
        verdict = ifeval.check(item, resp["text"])
        rows.append(
            {
                "id": item["id"],
                "subset": item.get("subset"),
                "instruction_id_list": item["instruction_id_list"],
                "response": resp["text"],
                "new_tokens": resp["new_tokens"],
                "truncated": resp["truncated"],
                "strict": bool(verdict["prompt_level_strict_acc"]),
                "loose": bool(verdict["prompt_level_loose_acc"]),
                "inst_strict": [bool(v) for v in verdict["inst_level_strict_acc"]],
                "inst_loose": [bool(v) for v in verdict["inst_level_loose_acc"]],
                "score": float(verdict["prompt_level_strict_acc"]),
                "interpretations": ifeval.interpretations(item),
            }
        )
    return rows


def summarise(rows: list[dict], metric: str) -> dict:
    """The final summary of SPEC from scored rows."""
    n = len(rows)
    k = sum(r["strict"] for r in rows)
    inst_strict = [v for r in rows for v in r["inst_strict"]]
    inst_loose = [v for r in rows for v in r["inst_loose"]]
    per_instruction: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        for iid, ok in zip(r["instruction_id_list"], r["inst_strict"]):
            per_instruction[iid].append(ok)
    subsets: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        if r.get("subset"):
            subsets[r["subset"]].append(r["strict"])
    truncated = sum(r["truncated"] for r in rows) / n
    advisories = []
    if truncated > 0.1:
        advisories.append(f"{truncated:.0%} of responses hit max_new_tokens; verdicts on them may be pessimistic")
    interpreted: dict[str, list[str]] = defaultdict(list)  # interpretation -> ids of the rows it applies to
    for r in rows:
        for line in r.get("interpretations") or ():
            interpreted[line].append(str(r["id"]))
    for line, ids in interpreted.items():
        rows_word = "row" if len(ids) == 1 else "rows"
        advisories.append(f"{len(ids)} {rows_word} scored with a fixed interpretation (ids {', '.join(ids)}): {line}")
    return {
        "metric": metric,
        "direction": "maximize",
        "value": k / n,
        "uncertainty": {"value": binomial_se(k, n), "kind": "binomial_se"},
        "n": n,
        "successes": k,
        "diagnostics": {
            "prompt_level_loose_acc": sum(r["loose"] for r in rows) / n,
            "inst_level_strict_acc": sum(inst_strict) / len(inst_strict),
            "inst_level_loose_acc": sum(inst_loose) / len(inst_loose),
            "per_instruction_strict_acc": {iid: sum(v) / len(v) for iid, v in sorted(per_instruction.items())},
            "subsets": {
                name: {"n": len(v), "strict_acc": sum(v) / len(v), "se": binomial_se(sum(v), len(v))}
                for name, v in sorted(subsets.items())
            },
            "mean_new_tokens": sum(r["new_tokens"] for r in rows) / n,
            "truncated_fraction": truncated,
            "sentence_tokenizer": ifeval.SENTENCE_TOKENIZER_SOURCE,
            "checkers": ifeval.checker_versions(),
        },
        "advisories": advisories,
    }


def evaluate(
    checkpoint: str | Path | None, fixed_start: str | Path, items_file: str | Path, metric: str, cfg: dict
) -> tuple[dict, list[dict]]:
    """Score ``checkpoint`` (``None``: the fixed start) on ``items_file``.

    cfg keys: ``max_new_tokens`` (tokens), ``batch_size`` (prompts), ``dtype`` (``auto``).
    Returns ``(summary, rows)``.
    """
    items = read_items(items_file)
    tokenizer = load_tokenizer(fixed_start)
    model = load_policy(fixed_start, checkpoint, dtype=cfg.get("dtype", "auto"))
    started = time.time()
    responses = generate(
        model, tokenizer, [it["prompt"] for it in items], int(cfg["max_new_tokens"]), int(cfg["batch_size"])
    )
    gen_s = time.time() - started
    rows = score_responses(items, responses)
    summary = summarise(rows, metric.format(n=len(items)))
    summary["diagnostics"]["generation"] = {
        "seconds": gen_s,
        "max_new_tokens": int(cfg["max_new_tokens"]),
        "new_tokens_per_s": sum(r["new_tokens"] for r in rows) / max(gen_s, 1e-9),
        "greedy": True,
        "chat_template": True,
        **prompt_format(tokenizer),
    }
    return summary, rows


def prompt_format(tokenizer) -> dict:
    """What each prompt is wrapped in for generation: the chat template's SHA-256 and the
    rendered text around one user turn (``{prompt}`` marks the prompt), so that a default
    system prompt the template inserts (SmolLM2's does) is written down; ``system_prompt``
    is the text of the system turn the template put before the user turn, or None."""
    import hashlib

    marker = "\x00PROMPT\x00"
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": marker}], tokenize=False, add_generation_prompt=True
    )
    template = tokenizer.chat_template
    template = template if isinstance(template, str) else str(template)
    prefix = rendered.split(marker)[0]
    return {
        "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest(),
        "prompt_format": rendered.replace(marker, "{prompt}"),
        "system_prompt": _system_text(prefix) if "system" in prefix else None,
    }


def _system_text(prefix: str) -> str:
    """The system turn's text in a rendered prefix such as
    ``<|im_start|>system\\nYou are ...<|im_end|>\\n<|im_start|>user\\n`` (ChatML), else the
    whole prefix."""
    import re

    m = re.search(r"<\|im_start\|>system\n(.*?)<\|im_end\|>", prefix, re.S)
    return m.group(1) if m else prefix
