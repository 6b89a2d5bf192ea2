"""Greedy decoding speed of the dpo scorer with a LoRA merged vs applied unmerged (issue 31).

Random weights of ``bench/rm_throughput.py``'s Mistral-7B (or its tiny Mistral: ``--arch tiny``,
a smoke run on a CPU) in bfloat16, a LoRA on q, k, v, o, gate, up, down (``--r``, the full profile's 128), prompts of
``--prompt-tokens`` random tokens, ``--new-tokens`` steps of the scorer's ``greedy_batch``
(no EOS: every row runs to the end). Paths: ``merged`` (``merge_and_unload``: the scorer before
issue 31), ``unmerged-fp32`` (the scorer now: adapter weights in float32), ``unmerged-bf16``
(adapter weights cast to bfloat16, ``autocast_adapter_dtype=False``), each timed twice,
interleaved. Prints one JSON object (date, machine, versions, settings, seconds, tokens/s).

    python bench/lora_decode_speed.py --arch mistral-7b --batch 64 --new-tokens 128   # on an H200
    python bench/lora_decode_speed.py --arch tiny --batch 8 --new-tokens 16            # smoke, CPU
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from rm_throughput import MISTRAL_7B, TARGETS, TINY  # noqa: E402  (bench/ is not a package)

ARCHS = {"mistral-7b": MISTRAL_7B, "tiny": TINY}


def main() -> None:
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from replaykit.tasks.dpo.evaluator import greedy_batch

    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", choices=sorted(ARCHS), default="tiny")
    ap.add_argument("--r", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    a = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = AutoConfig.for_model(**ARCHS[a.arch])
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        with torch.device(device):
            base = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        lora = get_peft_model(base, LoraConfig(r=a.r, lora_alpha=a.r, target_modules=TARGETS, init_lora_weights=False))
        lora.save_pretrained(f"{tmp}/adapter")
        base = lora.unload()  # the bare base again, kept on the device for every path
        ids = torch.randint(3, config.vocab_size, (a.batch, a.prompt_tokens), device=device)
        mask = torch.ones_like(ids)
        seconds: dict[str, list[float]] = {}
        for path in ["merged", "unmerged-fp32", "unmerged-bf16"] * 2:
            peft_model = PeftModel.from_pretrained(
                base, f"{tmp}/adapter", autocast_adapter_dtype=path != "unmerged-bf16"
            )
            model = (peft_model.merge_and_unload() if path == "merged" else peft_model.get_base_model()).eval()
            if device == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            greedy_batch(model, ids, mask, a.new_tokens, eos_token_id=-1)
            if device == "cuda":
                torch.cuda.synchronize()
            seconds.setdefault(path, []).append(round(time.perf_counter() - started, 2))
            if path == "merged":  # a merged model cannot be unmerged exactly: the base again
                torch.manual_seed(0)
                with torch.device(device):
                    base = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
            else:
                base = peft_model.unload()  # the LoRA layers out again
    print(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "machine": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
                "versions": {m: __import__(m).__version__ for m in ("torch", "transformers", "peft")},
                "settings": vars(a),
                "seconds": seconds,
                "new_tokens_per_s": {p: round(a.batch * a.new_tokens / min(s), 1) for p, s in seconds.items()},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
