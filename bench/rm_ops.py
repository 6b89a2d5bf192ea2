"""Operators dispatched per rm micro-batch: why one pair per micro-batch is launch-bound.

Mistral-7B's layer count (32) and LoRA targets (7 projections, r 16) at a toy width (hidden 64,
so this runs on a CPU in seconds): forward + backward of one micro-batch of one pair (2 rows of
24 tokens), counting every ATen operator dispatched (``TorchDispatchMode``; on a GPU each is a
kernel launch or a view, and its count does not depend on the width or the sequence length).
Configurations: the bench's loop (``bench/rm_throughput.py``'s ``r1n-gc``: bf16 weights,
float32 LoRA, no autocast, checkpointing), + bf16 autocast (what the HF Trainer wraps the
recipe's forward in with ``bf16: true``; TRL sets the LoRA dropout to 0, which dispatches
nothing), the same if the profile's LoRA dropout 0.05 were active, and without checkpointing.

    python bench/rm_ops.py          # CPU, about a minute
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def main() -> None:
    from peft import LoraConfig, get_peft_model
    from rm_throughput import MISTRAL_7B, TARGETS
    from transformers import AutoConfig, AutoModelForSequenceClassification

    warnings.filterwarnings("ignore")
    narrow = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
    config = AutoConfig.for_model(**{**MISTRAL_7B, **narrow})
    config.num_labels = 1
    ids = torch.randint(10, 512, (2, 24), generator=torch.Generator().manual_seed(0))
    print(f"{config.num_hidden_layers} layers, LoRA r 16 on {len(TARGETS)} projections; one pair (2 rows x 24 tokens)")
    for name, dropout, gc, autocast in [
        ("bench loop (r1n-gc)", 0.0, True, False),
        ("+ bf16 autocast (the recipe under the Trainer)", 0.0, True, True),
        ("  ... if the LoRA dropout 0.05 were active", 0.05, True, True),
        ("the recipe without checkpointing", 0.0, False, True),
    ]:
        torch.manual_seed(0)
        model = AutoModelForSequenceClassification.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
        model.config.pad_token_id = 0
        if gc:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=dropout, target_modules=TARGETS, task_type="SEQ_CLS")
        model = get_peft_model(model, lora).train()

        def step(model=model, autocast=autocast):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                rewards = model(input_ids=ids, use_cache=False).logits.squeeze(-1).float()
            (-torch.nn.functional.logsigmoid(rewards[0] - rewards[1])).backward()

        step()
        count = Count()
        with count:
            step()
        print(f"{name:48s} {count.n:6,d} operators per micro-batch", flush=True)


if __name__ == "__main__":
    main()
