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
import shutil
import tempfile
import time
from pathlib import Path

import torch
import yaml
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback, set_seed
from trl import DPOConfig, DPOTrainer

from replaykit.harness.fileio import atomic_write_json
from replaykit.harness.publish import publish_checkpoint

HERE = Path(__file__).resolve().parent
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def load_recipe(profile: str, overrides: dict) -> dict:
    """The recipe's knobs: ``configs/<profile>.yaml`` updated by ``overrides`` (known keys only)."""
    path = HERE / "configs" / f"{profile}.yaml"
    if not path.is_file():
        raise SystemExit(f"{path}: -: recipe profile not found")
    recipe = yaml.safe_load(path.read_text())
    for key, value in overrides.items():
        if key not in recipe:
            raise SystemExit(f"{path}: {key}: unknown recipe key in overrides")
        recipe[key] = {**recipe[key], **value} if isinstance(recipe[key], dict) else value
    return recipe


def last_complete_state(trainer_dir: Path) -> str | None:
    """The newest trainer checkpoint that was saved whole. A job killed mid-save leaves a
    ``checkpoint-N`` without a readable ``trainer_state.json``, which the Trainer writes last."""
    def whole(path: Path) -> bool:
        try:
            json.loads((path / "trainer_state.json").read_text())
        except (OSError, ValueError):
            return False
        return path.name.split("-")[1].isdigit()

    saved = [p for p in trainer_dir.glob("checkpoint-*") if whole(p)]
    return str(max(saved, key=lambda p: int(p.name.split("-")[1]))) if saved else None


class ReplayCallback(TrainerCallback):
    """Deadline, NaN guard, progress lines and atomic publication of each saved adapter."""

    def __init__(self, request: dict, max_steps: int):
        self.deadline = request["deadline_unix"]
        self.publish_dir = Path(request["publish_dir"])
        self.state_dir = Path(request["state_dir"])
        self.publish_s = 0.0
        self.keep = request["keep"]
        self.max_steps = max_steps
        self.stop_reason = "max_steps"
        self.nan_step = None
        self.started = time.time()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.max_steps:
            control.should_save = True
        elif time.time() >= self.deadline:
            self.stop_reason = "deadline"
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(loss):
            self.nan_step = state.global_step
            control.should_save = False
            control.should_training_stop = True
        if loss is not None:
            print(f"[train] step {state.global_step}/{self.max_steps} loss {loss:.4f} "
                  f"reward_margin {logs.get('rewards/margins', float('nan')):.4f} "
                  f"reward_acc {logs.get('rewards/accuracies', float('nan')):.3f} "
                  f"elapsed {time.time() - self.started:.0f} s", flush=True)
        return control

    def on_save(self, args, state, control, **kwargs):
        # Export the adapter only (not the optimizer state) through a scratch folder that is
        # NOT inside the trainer checkpoint: a subfolder with an adapter there would be loaded
        # as a second adapter when the Trainer resumes from that checkpoint.
        started = time.time()
        saved = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        export = Path(tempfile.mkdtemp(prefix=".export-", dir=self.state_dir))
        try:
            for name in ADAPTER_FILES:
                shutil.copy2(saved / name, export / name)
            entry = publish_checkpoint(export, self.publish_dir, state.global_step, keep=self.keep)
        finally:
            shutil.rmtree(export, ignore_errors=True)
        self.publish_s += time.time() - started
        print(f"[publish] checkpoint-{state.global_step} (publication {entry['count']}, retained {entry['retained']})",
              flush=True)
        return control


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--request", required=True, help="request.json written by the replay driver")
    request = json.loads(Path(parser.parse_args().request).read_text())
    recipe = load_recipe(request["profile"], request["overrides"])
    state_dir = Path(request["state_dir"])
    result_path = state_dir / "train_result.json"
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
    args = DPOConfig(
        output_dir=str(state_dir / "trainer"),
        beta=recipe["beta"], loss_type=[recipe["loss_type"]], max_length=recipe["max_length"],
        per_device_train_batch_size=recipe["per_device_train_batch_size"],
        gradient_accumulation_steps=recipe["gradient_accumulation_steps"],
        learning_rate=recipe["learning_rate"], lr_scheduler_type=recipe["lr_scheduler_type"],
        warmup_steps=math.ceil(recipe["warmup_ratio"] * max_steps), max_steps=max_steps,
        optim=recipe["optim"], bf16=recipe["dtype"] == "bfloat16",
        gradient_checkpointing=recipe["gradient_checkpointing"],
        seed=int(request["seed"]), data_seed=int(request["seed"]),
        save_strategy="steps", save_steps=recipe["save_steps"], save_total_limit=2,
        logging_steps=1, logging_nan_inf_filter=False, report_to="none", disable_tqdm=True,
        dataloader_num_workers=0, use_cpu=not torch.cuda.is_available(),
    )
    callback = ReplayCallback(request, max_steps)
    trainer = DPOTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=peft_config, callbacks=[callback])
    trainer.remove_callback(PrinterCallback)  # our progress line replaces the raw log dicts

    resume = None
    if request["resume"]:
        resume = last_complete_state(state_dir / "trainer")
        print(f"[train] resuming from {resume}" if resume else "[train] no trainer state to resume; starting at step 0",
              flush=True)
    train_start = time.time()
    if train_start >= request["deadline_unix"]:
        callback.stop_reason = "deadline"
    else:
        trainer.train(resume_from_checkpoint=resume)
    train_end = time.time()
    history = [h for h in trainer.state.log_history if "loss" in h]
    result = {"stop_reason": callback.stop_reason, "steps": trainer.state.global_step,
              "train_start_unix": train_start, "train_end_unix": train_end,
              "publish_s": callback.publish_s,
              "metrics": {k: v for k, v in (history[-1] if history else {}).items()
                          if isinstance(v, (int, float)) and math.isfinite(v)}}
    if callback.nan_step is not None:
        result.update(stop_reason="nan_loss", error=f"NaN loss at step {callback.nan_step}; earlier checkpoints kept")
        atomic_write_json(result_path, result)
        print(f"error: {result['error']}", flush=True)
        return 3
    atomic_write_json(result_path, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
