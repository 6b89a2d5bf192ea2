"""What merging a LoRA adapter into a bfloat16 base does to the scored model (issue 31).

For one fixed start and one PEFT LoRA checkpoint, on the first ``--prompts`` prompts of an items
file (chat template, as the dpo scorer wraps them), against the reference = the adapter applied
*unmerged* with everything in float32:

* per LoRA projection, the share of the delta's entries that a bfloat16 merge loses entirely
  (``bf16(W) + dW`` rounds back to ``bf16(W)``);
* the prompt logits (every position) of each way of applying the adapter: max and mean
  absolute difference to the reference, and the *effect error*
  ``|(L - L_base) - (L_ref - L_ref_base)| / |L_ref - L_ref_base|`` (how much of the adapter's
  effect on the logits is lost; ``L_base`` is the bare fixed start in the same dtype);
* greedy generations (``--new-tokens`` tokens, the scorer's ``greedy_batch``): how many prompts'
  tokens equal the reference's, and the bare fixed start's bfloat16 run against its float32 run
  (what bfloat16 alone changes, with no adapter);
* the seconds of the dpo scorer's generation in float32 on ``--time-prompts`` prompts, merged
  (the scorer's float32 path) and unmerged (``--time-prompts 0`` skips it).

Paths: ``merged-bf16`` (PEFT ``merge_and_unload`` into the bfloat16 base: the scorer before
issue 31 and the reference system), ``fp32-merge-bf16`` (merged in float32, then cast),
``unmerged-bf16`` (the bfloat16 base with the adapter unmerged, its weights in float32: the
scorer's path now), ``merged-fp32`` (the scorer's float32 path, e.g. CPU).

    python bench/lora_merge_precision.py --fixed-start results/models/smollm2-135m-instruct \\
        --checkpoint results/dpo/shipped-seed42/replay/checkpoint-8 \\
        --items results/dpo/assets/hidden/final_prompts.jsonl [--store-bf16 /tmp/smollm2-bf16]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import time

import torch

from replaykit.tasks.dpo.evaluator import generate, greedy_batch, read_items
from replaykit.tasks.dpo.loader import load_tokenizer


def build(fixed_start, checkpoint, path: str):
    """The fixed start with the adapter applied the way ``path`` names (``base-*``: none)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    dtype = torch.float32 if path.endswith("fp32") or path == "fp32-merge-bf16" else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(fixed_start, dtype=dtype)
    if path.startswith("base"):
        return model.eval()
    model = PeftModel.from_pretrained(model, checkpoint)
    if path == "unmerged-bf16" or path == "unmerged-fp32":
        return model.get_base_model().eval()
    model = model.merge_and_unload()
    return (model.to(torch.bfloat16) if path == "fp32-merge-bf16" else model).eval()


def lost_fraction(fixed_start, checkpoint) -> dict[str, float]:
    """Per projection kind (q_proj, ...): the mean share of delta entries a bf16 merge drops."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(fixed_start, dtype=torch.float32), checkpoint
    )
    shares: dict[str, list[float]] = {}
    with torch.no_grad():
        for name, module in model.named_modules():
            if hasattr(module, "lora_A") and "default" in getattr(module, "r", {}):
                base = module.base_layer.weight.to(torch.bfloat16)
                delta = module.get_delta_weight("default")
                merged = (base.float() + delta).to(torch.bfloat16)
                share = ((merged == base) & (delta != 0)).float().mean().item()
                shares.setdefault(name.rsplit(".", 1)[-1], []).append(share)
    return {kind: sum(v) / len(v) for kind, v in sorted(shares.items())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed-start", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--items", required=True)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--time-prompts", type=int, default=64)
    ap.add_argument("--time-new-tokens", type=int, default=96)
    ap.add_argument(
        "--store-bf16",
        metavar="DIR",
        help="first save the fixed start in bfloat16 to DIR and use that (full-scale fixed starts are stored so)",
    )
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.store_bf16:
        from transformers import AutoModelForCausalLM

        AutoModelForCausalLM.from_pretrained(a.fixed_start, dtype=torch.bfloat16).save_pretrained(a.store_bf16)
        load_tokenizer(a.fixed_start).save_pretrained(a.store_bf16)
        a.fixed_start = a.store_bf16
    tokenizer = load_tokenizer(a.fixed_start)
    tokenizer.padding_side = "left"
    items = read_items(a.items)
    prompts = [it["prompt"] for it in items[: a.prompts]]
    chats = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]
    enc = tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False)
    mask = enc["attention_mask"].bool()

    paths = [
        "unmerged-fp32",
        "base-fp32",
        "base-bf16",
        "merged-bf16",
        "fp32-merge-bf16",
        "unmerged-bf16",
        "merged-fp32",
    ]
    logits, tokens = {}, {}
    for path in paths:
        model = build(a.fixed_start, a.checkpoint, path)
        with torch.no_grad():
            logits[path] = model(**enc).logits.float()[mask]
        tokens[path] = greedy_batch(
            model, enc["input_ids"], enc["attention_mask"], a.new_tokens, tokenizer.eos_token_id
        )
    ref, effect = logits["unmerged-fp32"], logits["unmerged-fp32"] - logits["base-fp32"]
    rows = {}
    for path in paths[2:]:
        base = logits["base-bf16" if path.endswith("bf16") else "base-fp32"]
        other_ref = tokens["base-fp32"] if path.startswith("base") else tokens["unmerged-fp32"]
        rows[path] = {
            "max_abs_logit_diff": (logits[path] - (logits["base-fp32"] if path.startswith("base") else ref))
            .abs()
            .max()
            .item(),
            "mean_abs_logit_diff": (logits[path] - (logits["base-fp32"] if path.startswith("base") else ref))
            .abs()
            .mean()
            .item(),
            "effect_error": None
            if path.startswith("base")
            else ((logits[path] - base) - effect).norm().item() / effect.norm().item(),
            "same_generation": sum(x == y for x, y in zip(tokens[path], other_ref)),
        }
    out = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "versions": {m: __import__(m).__version__ for m in ("torch", "transformers", "peft")},
        "fixed_start": a.fixed_start,
        "checkpoint": a.checkpoint,
        "prompts": len(prompts),
        "new_tokens": a.new_tokens,
        "effect_max_abs": effect.abs().max().item(),
        "lost_by_bf16_merge": lost_fraction(a.fixed_start, a.checkpoint),
        "paths": rows,
    }
    if a.time_prompts:
        timed = [it["prompt"] for it in items[: a.time_prompts]]
        seconds = {}
        for path in ("merged-fp32", "unmerged-fp32", "merged-fp32", "unmerged-fp32"):  # interleaved, twice
            model = build(a.fixed_start, a.checkpoint, path)
            started = time.perf_counter()
            with contextlib.redirect_stdout(sys.stderr):  # its progress lines
                generate(model, tokenizer, timed, a.time_new_tokens, 32)
            seconds.setdefault(path, []).append(round(time.perf_counter() - started, 1))
        out["generation_seconds_fp32"] = {"prompts": len(timed), "max_new_tokens": a.time_new_tokens, **seconds}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
