"""Greedy generation of the dpo evaluator: ``model.generate`` against :func:`greedy_batch`.

For the fixed start and each checkpoint given, generates the final split's prompts both ways on
the evaluator's batches (longest prompts first, left padding) and reports the seconds of each and
whether every prompt's new tokens are identical. One thread, like the scoring rule.

    python bench/dpo_generate.py --fixed-start results/models/smollm2-135m-instruct \\
        --items results/dpo/assets/hidden/final_prompts.jsonl \\
        --checkpoints none results/dpo/shipped-seed42/replay/checkpoint-{8,16,24}
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from replaykit.tasks.dpo.evaluator import greedy_batch, read_items
from replaykit.tasks.dpo.loader import load_policy, load_tokenizer


def batches(tokenizer, prompts: list[str], batch_size: int, device):
    """(prompt indices, encoded batch) as the evaluator's ``generate`` makes them."""
    tokenizer.padding_side = "left"
    chats = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]
    order = sorted(range(len(chats)), key=lambda i: -len(chats[i]))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        enc = tokenizer([chats[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False)
        yield idx, enc.to(device)


def hf_tokens(model, tokenizer, enc, max_new_tokens: int) -> list[list[int]]:
    """New tokens per row from ``model.generate``, cut after the first EOS."""
    eos = tokenizer.eos_token_id
    with torch.no_grad():
        gen = model.generate(
            **enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id, eos_token_id=eos
        )
    out = []
    for row in gen[:, enc["input_ids"].shape[1] :].tolist():
        out.append(row[: row.index(eos) + 1] if eos in row else row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixed-start", required=True)
    parser.add_argument("--items", required=True)
    parser.add_argument("--checkpoints", nargs="+", default=["none"], help="'none' is the fixed start")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--min-rows", type=int, default=8)
    parser.add_argument("--only-greedy-batch", action="store_true", help="time greedy_batch alone (no comparison)")
    parser.add_argument("--out", help="JSON file for the per-model numbers")
    a = parser.parse_args()
    torch.set_num_threads(1)
    prompts = [it["prompt"] for it in read_items(a.items)]
    tokenizer = load_tokenizer(a.fixed_start)
    report = []
    for ckpt in a.checkpoints:
        model = load_policy(a.fixed_start, None if ckpt == "none" else ckpt)
        seconds = {"generate": 0.0, "greedy_batch": 0.0}
        same, lengths = 0, []
        for _, enc in batches(tokenizer, prompts, a.batch_size, model.device):
            t = time.process_time()
            ref = None if a.only_greedy_batch else hf_tokens(model, tokenizer, enc, a.max_new_tokens)
            seconds["generate"] += time.process_time() - t
            t = time.process_time()
            fast = greedy_batch(
                model, enc["input_ids"], enc["attention_mask"], a.max_new_tokens, tokenizer.eos_token_id, a.min_rows
            )
            seconds["greedy_batch"] += time.process_time() - t
            same += sum(r == f for r, f in zip(ref, fast)) if ref else 0
            lengths += [len(r) for r in fast]
        row = {
            "model": ckpt,
            "prompts": len(prompts),
            "identical": None if a.only_greedy_batch else same,
            "new_tokens": sum(lengths),
            "max_new_tokens_hit": sum(n >= a.max_new_tokens for n in lengths),
            **{f"{k}_s": round(v, 2) for k, v in seconds.items()},
        }
        print(json.dumps(row), flush=True)
        report.append(row)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(report, fh, indent=1)


if __name__ == "__main__":
    main()
