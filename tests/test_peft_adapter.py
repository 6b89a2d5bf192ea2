"""The frozen LoRA check resolves rank_pattern / alpha_pattern as PEFT does (issue 31): on
adapters PEFT itself builds and saves on tiny Llama / Mistral models, each module's (r, alpha)
from the check equals what PEFT gives the module when it loads the saved adapter."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from conftest import make_tiny_model
from replaykit.tasks.dpo import loader as dpo_loader
from replaykit.tasks.peft_adapter import lora_rank_and_alpha, rank_alpha_summary, read_lora_config
from replaykit.tasks.rm import loader as rm_loader

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# (rank_pattern, alpha_pattern) spellings PEFT accepts; r = 4, alpha = 8 elsewhere
PATTERNS = {
    "alternation": ({"q_proj|v_proj": 8}, {"q_proj|v_proj": 16}),
    "layer index": (
        {"layers.0.self_attn.q_proj": 8, r"model\.layers\.1\.mlp\.down_proj": 2},
        {"model.layers.1.mlp.down_proj": 4},
    ),
    "bare suffix": ({"proj": 2}, {"proj": 3}),
}


def endswith_rank(rank_pattern: dict, name: str, r: int) -> int:
    """The check this project used before issue 31: the first key the module name ends with."""
    return int(next((v for k, v in rank_pattern.items() if name.endswith(k)), r))


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {kind: make_tiny_model(root / kind, kind) for kind in ("llama", "mistral")}


def save_adapter(base, out, rank_pattern, alpha_pattern, **extra):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    config = LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=TARGETS,
        rank_pattern=rank_pattern,
        alpha_pattern=alpha_pattern,
        init_lora_weights=False,  # B non-zero: the adapter changes the model
        **extra,
    )
    get_peft_model(base, config).save_pretrained(out)
    return out


def peft_resolved(model_class, fixed_start, checkpoint, **kwargs) -> dict[str, tuple[int, float]]:
    """(r, alpha) of every LoRA module of the adapter as PEFT loads it onto the fixed start."""
    from peft import PeftModel

    model = PeftModel.from_pretrained(model_class.from_pretrained(fixed_start, **kwargs), checkpoint)
    return {
        name.removeprefix("base_model.model."): (module.r["default"], module.lora_alpha["default"])
        for name, module in model.named_modules()
        if hasattr(module, "lora_A") and "default" in getattr(module, "r", {})
    }


def assert_check_is_peft(verdict, checkpoint, resolved, rank_pattern):
    assert verdict["valid"], verdict["reason"]
    config = read_lora_config(checkpoint)
    assert {name: lora_rank_and_alpha(config, name) for name in resolved} == resolved
    assert verdict["checks"]["rank_alpha"] == rank_alpha_summary(resolved)
    assert len({r for r, _ in resolved.values()}) > 1 or rank_pattern == PATTERNS["bare suffix"][0]
    # the pattern tells the two rules apart: the old endswith check expects another rank somewhere
    assert any(endswith_rank(rank_pattern, name, 4) != r for name, (r, _) in resolved.items())


@pytest.mark.parametrize("kind", ["llama", "mistral"])
@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_dpo_check_resolves_patterns_as_peft(tiny_models, tmp_path, kind, pattern):
    from transformers import AutoModelForCausalLM

    rank_pattern, alpha_pattern = PATTERNS[pattern]
    fixed_start = tiny_models[kind]
    checkpoint = save_adapter(
        AutoModelForCausalLM.from_pretrained(fixed_start), tmp_path / "ckpt", rank_pattern, alpha_pattern
    )
    resolved = peft_resolved(AutoModelForCausalLM, fixed_start, checkpoint)
    assert len(resolved) == 2 * len(TARGETS)
    assert_check_is_peft(
        dpo_loader.validate(checkpoint, fixed_start, {"dtype": "float32"}), checkpoint, resolved, rank_pattern
    )


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_rm_check_resolves_patterns_as_peft(tiny_models, tmp_path, pattern):
    from transformers import AutoModelForSequenceClassification

    rank_pattern, alpha_pattern = PATTERNS[pattern]
    fixed_start = tiny_models["llama"]
    base = rm_loader.load_base(fixed_start, "float32")
    checkpoint = save_adapter(base, tmp_path / "ckpt", rank_pattern, alpha_pattern, modules_to_save=["score"])
    resolved = peft_resolved(AutoModelForSequenceClassification, fixed_start, checkpoint, num_labels=1)
    verdict = rm_loader.validate(checkpoint, fixed_start, {"dtype": "float32"})
    assert_check_is_peft(verdict, checkpoint, resolved, rank_pattern)


def test_bare_suffix_key_leaves_q_proj_at_r(tiny_models, tmp_path):
    """``{"proj": 2}``: PEFT gives q_proj the default r (the key must match a whole name part);
    the check agrees, where endswith would have expected 2 and called the adapter invalid."""
    from transformers import AutoModelForCausalLM

    fixed_start = tiny_models["llama"]
    checkpoint = save_adapter(AutoModelForCausalLM.from_pretrained(fixed_start), tmp_path / "ckpt", {"proj": 2}, {})
    resolved = peft_resolved(AutoModelForCausalLM, fixed_start, checkpoint)
    q_proj = "model.layers.0.self_attn.q_proj"
    assert lora_rank_and_alpha(read_lora_config(checkpoint), q_proj) == resolved[q_proj]
    assert endswith_rank({"proj": 2}, q_proj, 4) != resolved[q_proj][0]


def test_a_rank_peft_would_not_load_is_refused(tiny_models, tmp_path):
    """The same adapter with its rank_pattern removed: PEFT refuses to load it (size mismatch) and
    the check names the first tensor whose shape disagrees with the rank PEFT would use."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    fixed_start = tiny_models["llama"]
    good = save_adapter(AutoModelForCausalLM.from_pretrained(fixed_start), tmp_path / "good", *PATTERNS["alternation"])
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    config = json.loads((bad / "adapter_config.json").read_text())
    config["rank_pattern"] = {}
    (bad / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(RuntimeError, match="size mismatch"):
        PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(fixed_start), bad)
    verdict = dpo_loader.validate(bad, fixed_start, {"dtype": "float32"})
    assert not verdict["valid"]
    assert verdict["reason"].startswith("ValueError: base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight:")
    assert verdict["reason"].endswith("shape (8, 32), expected (4, 32)")
