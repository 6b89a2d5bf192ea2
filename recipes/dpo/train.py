"""Shipped recipe of the ``dpo`` task: sigmoid DPO with a LoRA adapter.

Algorithm: Direct Preference Optimization, Rafailov et al. (2023), arXiv:2305.18290, loss
``-log σ(β [(log π(y_w|x) - log π_ref(y_w|x)) - (log π(y_l|x) - log π_ref(y_l|x))])``.
Implementation: TRL ``DPOTrainer`` with a PEFT LoRA; the reference policy is the same model
with its adapter disabled (TRL's behaviour when ``ref_model`` is None and a PEFT config is
given), as in the alignment-handbook's zephyr-7b-dpo-qlora recipe.

This directory is the editable workspace: a candidate patch may change anything here.
It is run by the replay driver (``replaykit.harness.replay``) as
``python train.py --request request.json``; its session (``replaykit.runtime``) stops it at
the internal deadline and publishes adapters atomically (at most 3 retained).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import DPOConfig, DPOTrainer

from replaykit.runtime import ReplayCallback, Session, TrainerKnobs, knob, run_trainer, training_arguments
from replaykit.tasks.common.pair_steps import (
    CUDNN_ATTENTION_HELP,
    MICRO_BATCH_TOKENS_HELP,
    PairStepMixin,
    drop_padding_mask,
    use_cudnn_attention,
)

HERE = Path(__file__).resolve().parent
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


@dataclass(frozen=True)
class DPOKnobs(TrainerKnobs):
    """The recipe's knobs (``configs/<profile>.yaml``; a replay's ``overrides`` change them):
    the Trainer's (:class:`TrainerKnobs`) and DPO's. Units: steps, tokens, pairs."""

    loss_type: str = knob("TRL DPO loss_type (sigmoid: the loss of Rafailov et al. 2023)")
    beta: float = knob("β, strength of the KL regulariser towards the reference policy", minimum=0)
    lora: dict = knob("LoRA {r, alpha, dropout, target_modules}")
    quantization: Literal["nf4"] | None = knob("nf4: 4-bit base weights (bitsandbytes, GPU only); null: none")
    max_length: int = knob("tokens per sequence, prompt + response", minimum=1)
    warmup_ratio: float = knob("share of max_steps with a linear learning-rate warm-up", minimum=0, maximum=1)
    causal_padding: bool = knob("right-padded rows go in without an attention mask (drop_padding_mask): the same "
                                "log-probabilities, and sdpa keeps its fused causal kernel", default=False)
    micro_batch_tokens: int | None = knob(MICRO_BATCH_TOKENS_HELP, minimum=1, default=None)
    cudnn_attention: bool = knob(CUDNN_ATTENTION_HELP, default=True)
    lora_dtype: Literal["float32", "bfloat16"] = knob(
        "dtype of the LoRA weights and their optimizer state (float32: PEFT's, over a 16-bit base). bfloat16 is a "
        "recipe change, not a speed-up: an Adam update (about the learning rate, 5e-6 at full scale) is below half a "
        "bfloat16 step of most LoRA A weights (|w| > 2e-3: >= 7.6e-6), so it is rounded away", default="float32")


class RecipeDPOTrainer(PairStepMixin, DPOTrainer):
    """TRL's ``DPOTrainer``; with ``micro_batch_tokens`` set, each optimizer step's pairs run as
    length-grouped micro-batches with the same loss (``replaykit.tasks.common.pair_steps``);
    ``lora_dtype: bfloat16`` casts the trainable (LoRA) weights, which PEFT keeps in float32 over
    a 16-bit base."""

    def __init__(self, *args, lora_dtype: str = "float32", **kwargs):
        super().__init__(*args, **kwargs)
        if lora_dtype == "bfloat16":
            for p in self.model.parameters():
                if p.requires_grad:
                    p.data = p.data.to(torch.bfloat16)


def main() -> int:
    session = Session.start(DPOKnobs, HERE / "configs", __doc__)
    recipe, request = session.knobs, session.request

    tokenizer = AutoTokenizer.from_pretrained(request.fixed_start)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model_kwargs = {"dtype": getattr(torch, recipe.dtype)}
    if recipe.quantization == "nf4":
        from transformers import BitsAndBytesConfig

        model_kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16,
            bnb_4bit_use_double_quant=False)
    model = AutoModelForCausalLM.from_pretrained(request.fixed_start, **model_kwargs)
    if recipe.causal_padding:
        drop_padding_mask(model)
    use_cudnn_attention(recipe.cudnn_attention)

    rows = [json.loads(line) for line in (request.public_dir / "train_prefs.jsonl").read_text().splitlines()
            if line.strip()]
    dataset = Dataset.from_list([{k: r[k] for k in ("prompt", "chosen", "rejected")} for r in rows])

    lora = recipe.lora
    peft_config = LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                             target_modules=lora["target_modules"], bias="none", task_type="CAUSAL_LM")
    args = DPOConfig(beta=recipe.beta, loss_type=[recipe.loss_type], max_length=recipe.max_length,
                     warmup_steps=math.ceil(recipe.warmup_ratio * recipe.max_steps), **training_arguments(session))
    callback = ReplayCallback(session, files=ADAPTER_FILES,
                              log_keys={"reward_margin": "rewards/margins", "reward_acc": "rewards/accuracies"})
    trainer = RecipeDPOTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                               peft_config=peft_config, callbacks=[callback], micro_batch_tokens=recipe.micro_batch_tokens,
                               lora_dtype=recipe.lora_dtype)
    return run_trainer(trainer, callback)


if __name__ == "__main__":
    raise SystemExit(main())
