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


# --- scoring in bfloat16 keeps the trained delta (issue 31) -----------------------------------------
def bf16_fixed_start(source, out):
    """``source`` stored in bfloat16, as the full-scale fixed starts (Zephyr-7B SFT,
    Mistral-7B-Instruct) are: its float32 upcast is then exactly the bfloat16 model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16).save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    return out


def coherent_small_adapter(fixed_start, out, texts, relative=2.0**-10, **extra):
    """A rank-1 LoRA on every projection whose delta ``u v^T`` is ``relative`` times the
    projection's mean |W| per entry (below half a bfloat16 unit of most entries, so a bfloat16
    merge drops it) and points along the projection's mean input ``v``, as trained deltas do
    (a gradient step adds ``g x^T``): its effect on each output adds up over the inputs."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(fixed_start, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=1, lora_alpha=1, target_modules=TARGETS, **extra))
    inputs, hooks = {}, []
    layers = {n: m for n, m in model.named_modules() if hasattr(m, "lora_A") and "default" in getattr(m, "r", {})}
    for name, layer in layers.items():
        hooks.append(layer.register_forward_hook(lambda m, a, o, name=name: inputs.__setitem__(name, a[0])))
    tok = AutoTokenizer.from_pretrained(fixed_start)
    with torch.no_grad():
        model(**tok(texts, return_tensors="pt", padding=True))
        for hook in hooks:
            hook.remove()
        generator = torch.Generator().manual_seed(0)
        for name, layer in layers.items():
            v = inputs[name].reshape(-1, layer.in_features).mean(0)
            u = torch.randint(0, 2, (layer.out_features,), generator=generator).float() * 2 - 1
            scale = relative * layer.base_layer.weight.abs().mean() / v.abs().mean()
            layer.lora_A["default"].weight.copy_(v[None, :])
            layer.lora_B["default"].weight.copy_(scale * u[:, None])
    model.save_pretrained(out)
    return out


def projection_outputs(model, texts, tok) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per LoRA-targeted projection of ``model``: (its input, its output) on ``texts``."""
    seen, hooks = {}, []
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in TARGETS and not name.endswith("base_layer"):
            hooks.append(module.register_forward_hook(lambda m, a, o, name=name: seen.__setitem__(name, (a[0], o))))
    with torch.no_grad():
        model(**tok(texts, return_tensors="pt", padding=True))
    for hook in hooks:
        hook.remove()
    return seen


def ulp_bf16(x: torch.Tensor) -> torch.Tensor:
    """One unit in the last place of bfloat16 at |x| (8 significant bits): 2^(floor(log2|x|) - 7)."""
    return torch.exp2(torch.floor(torch.log2(x.abs().clamp_min(2.0**-126))) - 7)


TEXTS = ["Write a short note about cats.", "Explain what rain is.", "Describe a bicycle, please."]


@pytest.mark.parametrize("task", ["dpo", "rm"])
def test_bf16_scoring_keeps_the_trained_delta_and_a_bf16_merge_loses_it(tiny_models, tmp_path, task):
    """Each LoRA projection of the scorer's bfloat16 model against the float32 reference
    ``x (W + dW)^T`` on the same input ``x``. The scorer's path (unmerged) rounds twice, the base
    product and the sum, so each output is within one bfloat16 unit (at the larger of the two
    magnitudes) of the reference, plus 1e-5 of sum|x||W| for float32 accumulation: the error of the
    bare fixed start in bfloat16. The old path, merged into the bfloat16 weights, is outside that
    tolerance on most outputs whose delta bfloat16 can show at all."""
    from peft import LoraConfig, PeftModel, get_peft_model, set_peft_model_state_dict
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    fixed_start = bf16_fixed_start(tiny_models["llama"], tmp_path / "bf16-start")
    checkpoint = coherent_small_adapter(fixed_start, tmp_path / "ckpt", TEXTS)
    if task == "dpo":
        scored = dpo_loader.load_policy(fixed_start, checkpoint, dtype="bfloat16")
        old_base = AutoModelForCausalLM.from_pretrained(fixed_start, dtype=torch.bfloat16)
    else:  # the same deltas on the backbone of a one-label sequence classifier, with its head
        model = get_peft_model(
            rm_loader.load_base(fixed_start, "float32"),
            LoraConfig(r=1, lora_alpha=1, target_modules=TARGETS, modules_to_save=["score"], task_type="SEQ_CLS"),
        )
        state = load_file(checkpoint / "adapter_model.safetensors")
        state["base_model.model.score.weight"] = torch.randn(1, model.config.hidden_size) * 0.1  # a trained head
        set_peft_model_state_dict(model, state)
        checkpoint = tmp_path / "rm-ckpt"
        model.save_pretrained(checkpoint)
        scored = rm_loader.load_reward_model(fixed_start, checkpoint, "bfloat16")
        old_base = rm_loader.load_base(fixed_start, "bfloat16")
    merged = PeftModel.from_pretrained(old_base, checkpoint).merge_and_unload()  # the old path
    reference = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(fixed_start, dtype=torch.float32), tmp_path / "ckpt"
    )
    weights = {
        n.removeprefix("base_model.model."): (m.base_layer.weight.double(), m.get_delta_weight("default").double())
        for n, m in reference.named_modules()
        if hasattr(m, "lora_A") and "default" in getattr(m, "r", {})
    }
    assert len(weights) == 2 * len(TARGETS)
    tok = AutoTokenizer.from_pretrained(fixed_start)
    shown, violations = {}, {}
    for path, model in (("scored", scored), ("merged", merged)):
        outputs = projection_outputs(model, TEXTS, tok)
        assert set(outputs) == set(weights)
        shown[path] = violations[path] = 0
        for name, (x, y) in outputs.items():
            w, dw = weights[name]
            x = x.double()
            base, delta = x @ w.T, x @ dw.T
            tolerance = ulp_bf16(torch.maximum(base.abs(), (base + delta).abs())) + 1e-5 * (x.abs() @ w.abs().T)
            outside = (y.double() - (base + delta)).abs() > tolerance
            visible = delta.abs() > 2 * tolerance  # deltas larger than bfloat16's resolution here
            shown[path] += int(visible.sum())
            violations[path] += int(outside.sum()) if path == "scored" else int(outside[visible].sum())
    assert violations["scored"] == 0
    assert shown["scored"] > 1000  # enough outputs whose delta bfloat16 can show, to tell the paths apart
    assert violations["merged"] > 0.5 * shown["merged"], violations


def test_float32_scoring_merges_and_equals_the_unmerged_model(tiny_models, tmp_path):
    """The CPU scoring path (float32) merges, which keeps generation at the bare model's speed;
    its logits equal the unmerged model's to float32 rounding (24-bit significands: a few 1e-7
    relative per weight; 1e-5 leaves a hundredfold margin over the 2 layers' accumulations)."""
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    fixed_start = tiny_models["llama"]
    checkpoint = coherent_small_adapter(fixed_start, tmp_path / "ckpt", TEXTS, relative=0.05)
    scored = dpo_loader.load_policy(fixed_start, checkpoint, dtype="float32")
    assert not any(isinstance(m, LoraLayer) for m in scored.modules())  # merged
    unmerged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(fixed_start), checkpoint)
    bare = AutoModelForCausalLM.from_pretrained(fixed_start)
    enc = AutoTokenizer.from_pretrained(fixed_start)(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        got, want, before = scored(**enc).logits, unmerged(**enc).logits, bare(**enc).logits
    assert (got - want).abs().max() < 1e-5
    assert (want - before).abs().max() > 1e-3  # the adapter changes the logits far beyond that
    # in bfloat16 the adapter stays unmerged, its weights in float32
    half = dpo_loader.load_policy(fixed_start, checkpoint, dtype="bfloat16")
    layers = [m for m in half.modules() if isinstance(m, LoraLayer)]
    assert len(layers) == 2 * len(TARGETS)
    assert {m.lora_A["default"].weight.dtype for m in layers} == {torch.float32}
