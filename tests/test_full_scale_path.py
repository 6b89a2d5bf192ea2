"""The full-scale dpo config's code path (local fixed start, local UltraFeedback-format pairs,
IFEval ``input_data.jsonl`` with ``key``, the ``full`` recipe profile with gradient
checkpointing) on a tiny Mistral-architecture model. NF4 and paged AdamW need bitsandbytes
on a GPU, so only those two knobs are overridden here."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import ROOT, make_tiny_model, recipe_train, snakemake, ultrafeedback_rows, write_config

pytestmark = pytest.mark.slow


def ifeval_rows(n):
    return [
        {
            "key": 1000 + i,
            "prompt": f"Write about item {i} in lowercase letters only.",
            "instruction_id_list": ["change_case:english_lowercase"],
            "kwargs": [{}],
        }
        for i in range(n)
    ]


def test_full_scale_config_on_tiny_mistral(workdir, tmp_path):
    model = make_tiny_model(tmp_path / "tiny-mistral", "mistral")
    prefs, prompts = tmp_path / "train_prefs.jsonl", tmp_path / "input_data.jsonl"
    prefs.write_text("".join(json.dumps(r) + "\n" for r in ultrafeedback_rows(16)))
    prompts.write_text("".join(json.dumps(r) + "\n" for r in ifeval_rows(10)))

    default = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    full = yaml.safe_load((ROOT / "config/full-scale/dpo.yaml").read_text())["tasks"]["dpo"]
    task = {**default["tasks"]["dpo"], **full}
    task.update(
        fixed_start=str(model),
        threads=1,
        budget={"outer_limit_s": 600, "internal_deadline_s": 400, "export_reserve_s": 60},
        validation={"dtype": "float32", "runtime": 5},
        evaluation={"max_new_tokens": 4, "batch_size": 8, "dtype": "float32", "runtime": 5},
        final={"n_boot": 500},
    )
    task["data"] = {**full["data"], "train_prefs": str(prefs), "ifeval_prompts": str(prompts), "n_proxy": 3}
    task["recipe"] = {
        "profile": "full",
        "overrides": {
            "quantization": None,
            "optim": "adamw_torch",
            "dtype": "float32",
            "max_steps": 2,
            "save_steps": 1,  # a step trained after a publication, under the full profile
            "max_length": 64,
            "per_device_train_batch_size": 2,
            "gradient_accumulation_steps": 2,
            "lora": {"r": 4, "alpha": 4},
        },
    }
    write_config(workdir, {"models": {}, "tasks": {"dpo": task}})
    snakemake(workdir, "results/dpo/final", "--cores", "1", "--resources", "gpu=1", check=True)

    manifest = json.loads((workdir / "results/dpo/assets/manifest.json").read_text())
    assert manifest["data"]["source"] == "local"
    assert (manifest["data"]["n_proxy"], manifest["data"]["n_final"]) == (3, 7)
    record = json.loads((workdir / "results/dpo/shipped-seed42/replay/record.json").read_text())
    assert record["profile"] == "full" and record["retained"] == [1, 2]
    summary = json.loads((workdir / "results/dpo/final/summary.json").read_text())
    assert summary["metric"] == "ifeval_strict_accuracy_hidden7" and summary["n"] == 7
    assert summary["references"]["published"] == {"fixed_start": 0.397094, "shipped": 0.508475}
    train = [json.loads(l) for l in (workdir / "results/dpo/assets/public/train_prefs.jsonl").read_text().splitlines()]
    assert train[0]["prompt"] == [{"role": "user", "content": "Name a colour, please (0)."}]
    assert train[0]["chosen"] == [{"role": "assistant", "content": "Blue."}]


def test_bf16_profile_is_the_full_profile_but_for_base_precision_memory_and_optimizer():
    """``full-bf16`` (GPUs with >= 120 GB) changes only how the base is held and stepped:
    the recipe's loss, data, LoRA, batch and schedule are ``full``'s."""
    train = recipe_train("dpo")
    from dataclasses import asdict

    from replaykit.runtime import load_config

    configs = ROOT / "recipes/dpo/configs"
    full = asdict(load_config(train.DPOKnobs, configs, "full", {}))
    bf16 = asdict(load_config(train.DPOKnobs, configs, "full-bf16", {}))
    changed = {k: (full[k], bf16[k]) for k in full if full[k] != bf16[k]}
    assert changed == {
        "quantization": ("nf4", None),
        "optim": ("paged_adamw_32bit", "adamw_torch_fused"),
        "gradient_checkpointing": (True, False),
    }


def test_rm_nogc_profile_is_the_full_profile_without_gradient_checkpointing():
    """``full-nogc`` (GPUs with >= 80 GB) differs from ``full`` only in gradient checkpointing,
    which changes what is stored, not what is computed (the recipe's results with and without
    it: ``tests/test_pair_steps.py``)."""
    train = recipe_train("rm")
    from dataclasses import asdict

    from replaykit.runtime import load_config

    configs = ROOT / "recipes/rm/configs"
    full = asdict(load_config(train.RewardKnobs, configs, "full", {}))
    nogc = asdict(load_config(train.RewardKnobs, configs, "full-nogc", {}))
    assert {k: (full[k], nogc[k]) for k in full if full[k] != nogc[k]} == {"gradient_checkpointing": (True, False)}
