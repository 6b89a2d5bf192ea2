"""The ddpo artifact: a PEFT LoRA of the UNet's attention projections.

A checkpoint folder holds PEFT's two files: ``adapter_config.json`` (``LoraConfig``) and
``adapter_model.safetensors`` (``peft.get_peft_model_state_dict`` of the UNet: keys
``<module>.lora_A.weight`` of shape ``r × in_features`` and ``<module>.lora_B.weight`` of
shape ``out_features × r``). It is loaded with ``unet.add_adapter(config)`` and
``peft.set_peft_model_state_dict`` (diffusers 0.42's PEFT integration), only onto the UNet's
attention projections ``to_q``, ``to_k``, ``to_v`` and ``to_out.0`` (SPEC: LoRA on
attention only; base UNet, text encoder and VAE frozen).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
ATTENTION_TARGETS = ("to_q", "to_k", "to_v", "to_out.0")


def save_lora(unet, out: str | Path, adapter: str = "default") -> Path:
    """Write the UNet's LoRA ``adapter`` in PEFT's format to folder ``out``."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = get_peft_model_state_dict(unet, adapter_name=adapter)
    save_file({k: v.detach().float().cpu().contiguous() for k, v in state.items()}, str(out / ADAPTER_WEIGHTS))
    unet.peft_config[adapter].save_pretrained(out)
    return out


def check_lora(unet, checkpoint: str | Path) -> dict:
    """Check a checkpoint against the UNet before loading it; ValueError naming the file and
    the wrong target modules, keys or shapes. Each module's rank is the one PEFT gives it
    (``rank_pattern`` resolved by PEFT: :func:`replaykit.tasks.peft_adapter.lora_rank_and_alpha`). Returns
    ``{r, target_modules, tensors, parameters, rank_alpha}``."""
    from safetensors.torch import load_file

    from ..peft_adapter import lora_rank_and_alpha, rank_alpha_summary, read_lora_config

    checkpoint = Path(checkpoint)
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        if not (checkpoint / name).is_file():
            raise ValueError(f"{name} missing")
    config = json.loads((checkpoint / ADAPTER_CONFIG).read_text())
    if config.get("peft_type") != "LORA":
        raise ValueError(f"{ADAPTER_CONFIG}: peft_type is {config.get('peft_type')!r}, not 'LORA'")
    targets = config.get("target_modules")
    if not isinstance(targets, list) or not targets:
        raise ValueError(
            f"{ADAPTER_CONFIG}: target_modules must be a list of names from {list(ATTENTION_TARGETS)}, got {targets!r}"
        )
    wrong = sorted(set(targets) - set(ATTENTION_TARGETS))
    if wrong:
        raise ValueError(
            f"{ADAPTER_CONFIG}: target_modules {wrong} are not UNet attention projections "
            f"(allowed: {list(ATTENTION_TARGETS)})"
        )
    r = config.get("r")
    if not isinstance(r, int) or r < 1:
        raise ValueError(f"{ADAPTER_CONFIG}: r must be a positive integer, got {r!r}")
    lora_config = read_lora_config(checkpoint)
    modules = dict(unet.named_modules())
    state = load_file(str(checkpoint / ADAPTER_WEIGHTS))
    bad_keys, bad_shapes = [], []
    resolved: dict[str, tuple[int, float]] = {}
    for key, value in state.items():
        module_name, _, part = key.rpartition(".lora_")
        module = modules.get(module_name)
        if (
            part not in ("A.weight", "B.weight")
            or module is None
            or not isinstance(module, torch.nn.Linear)
            or not any(module_name.endswith("." + t) for t in targets)
        ):
            bad_keys.append(key)
            continue
        rank, _ = resolved.setdefault(module_name, lora_rank_and_alpha(lora_config, module_name))
        expected = (rank, module.in_features) if part == "A.weight" else (module.out_features, rank)
        if tuple(value.shape) != expected:
            bad_shapes.append(f"{key} {tuple(value.shape)} (expected {expected})")
        elif not torch.isfinite(value).all():
            raise ValueError(f"{ADAPTER_WEIGHTS}: {key} has non-finite values")
    if bad_keys:
        raise ValueError(
            f"{ADAPTER_WEIGHTS}: {len(bad_keys)} keys name no {'/'.join(targets)} module of the UNet, "
            f"e.g. {bad_keys[:3]}"
        )
    if bad_shapes:
        raise ValueError(f"{ADAPTER_WEIGHTS}: {len(bad_shapes)} tensors have wrong shapes, e.g. {bad_shapes[:3]}")
    expected_modules = {
        n for n in modules if any(n.endswith("." + t) for t in targets) and isinstance(modules[n], torch.nn.Linear)
    }
    missing = sorted(expected_modules - {k.rpartition(".lora_")[0] for k in state})
    if missing:
        raise ValueError(f"{ADAPTER_WEIGHTS}: no LoRA weights for {len(missing)} target modules, e.g. {missing[:3]}")
    return {
        "r": r,
        "target_modules": sorted(targets),
        "tensors": len(state),
        "parameters": int(sum(v.numel() for v in state.values())),
        "rank_alpha": rank_alpha_summary(resolved),
    }


def load_lora(unet, checkpoint: str | Path) -> dict:
    """Check (:func:`check_lora`) and load a checkpoint's LoRA into ``unet`` (in place).
    Returns the checks. Raises ValueError as :func:`check_lora`, or when PEFT reports
    unexpected keys."""
    from peft import LoraConfig, set_peft_model_state_dict
    from safetensors.torch import load_file

    checks = check_lora(unet, checkpoint)
    unet.add_adapter(LoraConfig.from_pretrained(str(checkpoint)))
    result = set_peft_model_state_dict(unet, load_file(str(Path(checkpoint) / ADAPTER_WEIGHTS)))
    unexpected = getattr(result, "unexpected_keys", None) or []
    if unexpected:
        raise ValueError(f"{ADAPTER_WEIGHTS}: PEFT did not load {unexpected[:3]}")
    unet.requires_grad_(False)
    return checks
