"""PEFT LoRA adapters on a Hugging Face model: what the LLM tasks' frozen loaders share.

Lives outside any workspace, so a candidate patch cannot change how its checkpoints are
loaded or checked.
"""

from __future__ import annotations

import json
from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def device_and_dtype(dtype: str = "auto"):
    """(device, torch dtype): CUDA with bfloat16 when available, else CPU float32."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        return device, (torch.bfloat16 if device == "cuda" else torch.float32)
    return device, getattr(torch, dtype)


def load_tokenizer(fixed_start: str | Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(fixed_start)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def check_lora_adapter(checkpoint: Path, base) -> dict:
    """Shape and finiteness checks of every LoRA tensor of a PEFT adapter against ``base``.

    Returns ``{lora_tensors, r, target_modules}``. Raises ValueError naming the tensor (or the
    file) that is not finite, has the wrong shape, or targets a module ``base`` lacks;
    tensors that are not LoRA A/B (e.g. ``modules_to_save``) are left to the caller.
    """
    import torch
    from safetensors import safe_open

    config = json.loads((checkpoint / ADAPTER_CONFIG).read_text())
    if config.get("peft_type") != "LORA":
        raise ValueError(f"{ADAPTER_CONFIG}: peft_type is {config.get('peft_type')!r}, expected 'LORA'")
    rank, rank_pattern = int(config["r"]), config.get("rank_pattern") or {}
    modules = dict(base.named_modules())
    n_tensors = 0
    with safe_open(str(checkpoint / ADAPTER_WEIGHTS), framework="pt") as handle:
        keys = list(handle.keys())
        if not keys:
            raise ValueError(f"{ADAPTER_WEIGHTS}: no tensors")
        for key in keys:
            tensor = handle.get_tensor(key)
            if not torch.isfinite(tensor).all():
                raise ValueError(f"{ADAPTER_WEIGHTS}: non-finite values in {key}")
            name = key.removeprefix("base_model.model.")
            for part in (".lora_A.weight", ".lora_B.weight"):
                if name.endswith(part):
                    module_name = name[: -len(part)]
                    break
            else:
                continue  # e.g. modules_to_save; checked by the forward pass
            module = modules.get(module_name)
            if module is None or not hasattr(module, "in_features"):
                raise ValueError(f"{key}: no linear module {module_name!r} in the fixed start")
            r = int(next((v for k, v in rank_pattern.items() if module_name.endswith(k)), rank))
            want = (r, module.in_features) if part == ".lora_A.weight" else (module.out_features, r)
            if tuple(tensor.shape) != want:
                raise ValueError(f"{key}: shape {tuple(tensor.shape)}, expected {want}")
            n_tensors += 1
    if n_tensors == 0:
        raise ValueError(f"{ADAPTER_WEIGHTS}: no LoRA A/B tensors")
    return {"lora_tensors": n_tensors, "r": rank, "target_modules": sorted(config.get("target_modules") or [])}
