"""Shipped recipe of the ``dpo`` task: sigmoid DPO with a LoRA adapter.

Algorithm: Direct Preference Optimization, Rafailov et al. (2023), arXiv:2305.18290, loss
``-log σ(β [(log π(y_w|x) - log π_ref(y_w|x)) - (log π(y_l|x) - log π_ref(y_l|x))])``.
Implementation: TRL ``DPOTrainer`` with a PEFT LoRA; the reference policy is the same model
with its adapter disabled (TRL's behaviour when ``ref_model`` is None and a PEFT config is
given), as in the alignment-handbook's zephyr-7b-dpo-qlora recipe.

This directory is the editable workspace: a candidate patch may change anything here.
It is run by the replay driver (``replaykit.harness.replay``) as
``python train.py --request request.json``, stops by itself at the internal deadline, and
publishes adapters with the harness's atomic publication (at most 3 retained).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
from trl import DPOConfig, DPOTrainer

from replaykit.harness.trainer import ReplayCallback, load_recipe, run_training, training_arguments

HERE = Path(__file__).resolve().parent
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--request", required=True, help="request.json written by the replay driver")
    request = json.loads(Path(parser.parse_args().request).read_text())
    recipe = load_recipe(HERE / "configs", request["profile"], request["overrides"])
    torch.set_num_threads(int(request["threads"]))
    set_seed(int(request["seed"]))

    tokenizer = AutoTokenizer.from_pretrained(request["fixed_start"])
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model_kwargs = {"dtype": getattr(torch, recipe["dtype"])}
    if recipe.get("quantization") == "nf4":
        from transformers import BitsAndBytesConfig

        model_kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16,
            bnb_4bit_use_double_quant=False)
    model = AutoModelForCausalLM.from_pretrained(request["fixed_start"], **model_kwargs)

    rows = [json.loads(line) for line in (Path(request["public_dir"]) / "train_prefs.jsonl").read_text().splitlines()
            if line.strip()]
    dataset = Dataset.from_list([{k: r[k] for k in ("prompt", "chosen", "rejected")} for r in rows])

    lora = recipe["lora"]
    peft_config = LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                             target_modules=lora["target_modules"], bias="none", task_type="CAUSAL_LM")
    max_steps = int(recipe["max_steps"])
    args = DPOConfig(beta=recipe["beta"], loss_type=[recipe["loss_type"]], max_length=recipe["max_length"],
                     warmup_steps=math.ceil(recipe["warmup_ratio"] * max_steps), **training_arguments(recipe, request))
    callback = ReplayCallback(request, max_steps, files=ADAPTER_FILES,
                              log_keys={"reward_margin": "rewards/margins", "reward_acc": "rewards/accuracies"})
    trainer = DPOTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=peft_config, callbacks=[callback])
    return run_training(trainer, callback, request)


if __name__ == "__main__":
    raise SystemExit(main())
