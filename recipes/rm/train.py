"""Shipped recipe of the ``rm`` task: a Bradley–Terry reward model with a LoRA adapter.

Loss: ``-log σ(r(x, y_c) - r(x, y_r) - margin)`` (+ ``center_rewards_coefficient ·
mean((r_c + r_r)²)``), Bradley & Terry (1952) as used for RLHF reward models by Ouyang et al.
(2022), arXiv:2203.02155; centring from Eisenstein et al. (2023), arXiv:2312.09244. Both
options are present and 0 in the shipped configs. Implementation: TRL ``RewardTrainer`` on
``AutoModelForSequenceClassification`` (one label: a new scalar head on the last token),
PEFT LoRA on the attention and MLP projections with the head in ``modules_to_save`` (TRL
neither trains nor saves it otherwise).

Pairs are tokenized here with the fixed start's chat template and *left*-truncated to
``max_length`` (TRL would drop long pairs instead), so the end of each response -- where
the head reads -- is kept. The frozen evaluator formats sequences the same way.

This directory is the editable workspace: a candidate patch may change anything here.
It is run by the replay driver as ``python train.py --request request.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForSequenceClassification, AutoTokenizer
from trl import RewardConfig, RewardTrainer

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
class RewardKnobs(TrainerKnobs):
    """The recipe's knobs (``configs/<profile>.yaml``; a replay's ``overrides`` change them):
    the Trainer's (:class:`TrainerKnobs`) and the reward model's. Units: steps, tokens, pairs."""

    lora: dict = knob("LoRA {r, alpha, dropout, target_modules, modules_to_save} (the new score head is saved)")
    margin: float = knob("subtracted inside the loss: -log σ(r_chosen - r_rejected - margin)")
    center_rewards_coefficient: float = knob("weight of mean((r_chosen + r_rejected)^2), Eisenstein et al. (2023)", minimum=0)
    max_length: int = knob("tokens per sequence; longer ones keep their last tokens (left truncation)", minimum=1)
    weight_decay: float = knob("AdamW weight decay", minimum=0)
    warmup_steps: int = knob("optimizer steps of linear learning-rate warm-up", minimum=0)
    causal_padding: bool = knob("right-padded rows go in without an attention mask (see drop_padding_mask): the same "
                                "rewards, and sdpa keeps its fused causal kernel (1.4x per step on an H200)", default=False)
    micro_batch_tokens: int | None = knob(MICRO_BATCH_TOKENS_HELP, minimum=1, default=None)
    cudnn_attention: bool = knob(CUDNN_ATTENTION_HELP, default=True)
    gradient_checkpointing_every_n_layers: int = knob(
        "with gradient_checkpointing: recompute only decoder layers 0, n, 2n, ... (transformers' "
        "every_n_layers); the others keep their activations. The same arithmetic; a larger n is faster "
        "and holds more memory. 1: every layer", minimum=1, default=1)


def tokenize_pair(tokenizer, row: dict, max_length: int) -> dict:
    """``chosen_ids``/``rejected_ids``: chat-templated prompt + response, last ``max_length`` tokens.

    ``row`` is TRL's conversational format: ``prompt`` (messages), ``chosen``/``rejected``
    (assistant messages), or plain strings for a single user turn and reply.
    """
    def ids(response):
        prompt = row["prompt"] if isinstance(row["prompt"], list) else [{"role": "user", "content": row["prompt"]}]
        reply = response if isinstance(response, list) else [{"role": "assistant", "content": response}]
        out = tokenizer.apply_chat_template(prompt + reply, tokenize=True, return_dict=True)["input_ids"]
        return list(out)[-max_length:]

    return {"chosen_ids": ids(row["chosen"]), "rejected_ids": ids(row["rejected"])}


class RecipeRewardTrainer(PairStepMixin, RewardTrainer):
    """TRL's ``RewardTrainer``; with ``micro_batch_tokens`` set, each optimizer step's pairs run
    as length-grouped micro-batches with the same loss (``replaykit.tasks.common.pair_steps``)."""


def main() -> int:
    session = Session.start(RewardKnobs, HERE / "configs", __doc__)  # its seed also seeds the new head's init
    recipe, request = session.knobs, session.request

    tokenizer = AutoTokenizer.from_pretrained(request.fixed_start)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForSequenceClassification.from_pretrained(request.fixed_start, num_labels=1,
                                                               dtype=getattr(torch, recipe.dtype))
    model.config.pad_token_id = tokenizer.pad_token_id
    if recipe.causal_padding:
        drop_padding_mask(model)
    use_cudnn_attention(recipe.cudnn_attention)

    rows = [json.loads(line) for line in (request.public_dir / "train_prefs.jsonl").read_text().splitlines()
            if line.strip()]
    pairs = [{**tokenize_pair(tokenizer, r, recipe.max_length), "margin": recipe.margin} for r in rows]
    truncated = sum(len(p["chosen_ids"]) == recipe.max_length or len(p["rejected_ids"]) == recipe.max_length
                    for p in pairs)
    print(f"[data] {len(pairs)} pairs, {truncated} left-truncated to {recipe.max_length} tokens", flush=True)
    dataset = Dataset.from_list(pairs)

    lora = recipe.lora
    peft_config = LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                             target_modules=lora["target_modules"], modules_to_save=lora["modules_to_save"],
                             bias="none", task_type="SEQ_CLS")
    every_n = recipe.gradient_checkpointing_every_n_layers
    args = RewardConfig(max_length=None,  # already left-truncated above
                        center_rewards_coefficient=recipe.center_rewards_coefficient,
                        weight_decay=recipe.weight_decay, warmup_steps=recipe.warmup_steps,
                        # the Trainer pops every_n_layers (transformers 5.17, 5.23); TRL's RewardTrainer
                        # never re-enables checkpointing with these kwargs (its DPOTrainer does: not there)
                        gradient_checkpointing_kwargs={"every_n_layers": every_n} if every_n > 1 else None,
                        **training_arguments(session))
    callback = ReplayCallback(session, files=ADAPTER_FILES, log_keys={"accuracy": "accuracy", "margin": "margin"})
    trainer = RecipeRewardTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                                  peft_config=peft_config, callbacks=[callback],
                                  micro_batch_tokens=recipe.micro_batch_tokens)
    return run_trainer(trainer, callback)


if __name__ == "__main__":
    raise SystemExit(main())
