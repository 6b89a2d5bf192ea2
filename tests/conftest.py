"""Shared fixtures: a tiny random Llama with a locally trained tokenizer, and a copy of the
workflow to run Snakemake in (so tests never touch the repository's results/)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def make_tiny_model(out: Path, model_type: str = "llama") -> Path:
    """A 2-layer causal LM of the given architecture (``llama``: SmolLM2's; ``mistral``:
    Zephyr's and Mistral-7B's), hidden size 32, random weights (seed 0), with a byte-level
    BPE tokenizer trained on the task's own instruction texts, ChatML template, eos
    ``<|im_end|>``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    from replaykit.tasks.dpo import instructions

    corpus = [a for _, q, a in instructions.TRAIN_TOPICS] + [q for _, q, _ in instructions.TRAIN_TOPICS]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=special,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama", "llama")


def tiny_config(fixed_start: Path, **task_overrides) -> dict:
    """The embedded dpo config, shrunk to run the whole DAG in about a minute."""
    task = {
        "fixed_start": str(fixed_start),
        "data": {"source": "embedded", "train_seed": 1, "n_train_pairs": 24, "topic_split_seed": 11,
                 "public_seed": 2, "n_proxy": 4, "hidden_seed": 3, "n_final": 8},
        "recipe": {"profile": "embedded",
                   "overrides": {"max_steps": 5, "save_steps": 1, "max_length": 128,
                                 "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1,
                                 "lora": {"r": 4, "alpha": 8}}},
        "candidate": "shipped", "candidates": {}, "seeds": [42], "threads": 1,
        "budget": {"outer_limit_s": 300, "internal_deadline_s": 200, "export_reserve_s": 60},
        "validation": {"dtype": "auto", "runtime": 5},
        "evaluation": {"max_new_tokens": 8, "batch_size": 8, "dtype": "auto", "runtime": 5},
        "final": {"n_boot": 1000},
        "references": {"published": {"fixed_start": 0.397094, "shipped": 0.508475}},
    }
    task.update(task_overrides)
    return {"models": {}, "tasks": {"dpo": task}}


def rm_config(fixed_start: Path, **overrides) -> dict:
    """The embedded rm config, shrunk onto a tiny model to run the whole DAG in about a minute."""
    task = yaml.safe_load((ROOT / "config/config.yaml").read_text())["tasks"]["rm"]
    task.update(fixed_start=str(fixed_start),
                budget={"outer_limit_s": 300, "internal_deadline_s": 200, "export_reserve_s": 60},
                validation={"dtype": "float32", "runtime": 5},
                evaluation={"max_length": 96, "batch_size": 16, "dtype": "float32", "runtime": 5},
                final={"n_boot": 500})
    task["data"] = {**task["data"], "n_train_pairs": 40, "n_per_subset": 3, "n_proxy": 10}
    task["recipe"] = {"profile": "embedded", "overrides": {
        "max_steps": 4, "save_steps": 1, "max_length": 96, "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 1, "lora": {"r": 4, "alpha": 8}}}
    task.update(overrides)
    return {"models": {}, "tasks": {"rm": task}}


def ultrafeedback_rows(n: int) -> list[dict]:
    """UltraFeedback-binarized-format rows: whole conversations in ``chosen``/``rejected``."""
    rows = []
    for i in range(n):
        question = f"Name a colour, please ({i})."
        rows.append({"prompt": question, "prompt_id": str(i),
                     "chosen": [{"role": "user", "content": question}, {"role": "assistant", "content": "Blue."}],
                     "rejected": [{"role": "user", "content": question}, {"role": "assistant", "content": f"No ({i})."}],
                     "score_chosen": 8.0, "score_rejected": 2.0})
    return rows


def copy_workflow(dest: Path) -> Path:
    """Copy the workflow (Snakefile, rules, config, recipes, envs, report captions) to run Snakemake in."""
    for name in ("Snakefile", "rules", "config", "recipes", "envs", "report"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    return dest


@pytest.fixture
def workdir(tmp_path) -> Path:
    return copy_workflow(tmp_path)


def write_config(workdir: Path, config: dict) -> Path:
    path = workdir / "config" / "config.yaml"  # replaces the default: --configfile would merge into it
    path.write_text(yaml.safe_dump(config))
    return path


def snakemake(workdir: Path, *args: str, timeout: float = 600, check: bool = False,
              env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the venv's snakemake in ``workdir`` (no default profile) and capture its output;
    ``env`` adds or replaces environment variables."""
    cmd = [str(VENV_BIN / "snakemake"), "--workflow-profile", "none", *args]
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {}))
    result = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def config_patch(workdir, name, key, value):
    """A candidate patch that sets ``key: value`` in the recipe's embedded profile."""
    import difflib

    original = (workdir / "recipes/dpo/configs/embedded.yaml").read_text().splitlines(keepends=True)
    changed = [f"{key}: {value}\n" if line.startswith(f"{key}:") else line for line in original]
    patch = workdir / f"{name}.diff"
    patch.write_text("".join(difflib.unified_diff(original, changed, "a/configs/embedded.yaml", "b/configs/embedded.yaml")))
    return patch


def orphan_processes(marker: str) -> list[str]:
    """Replay drivers and training processes whose full command line contains ``marker``."""
    # -ww: full command lines (ps cuts them to the terminal width, COLUMNS, otherwise)
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if marker in l and ("train.py" in l or "replaykit replay" in l)]
