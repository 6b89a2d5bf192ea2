"""Frozen loader of the ``dpo`` task: a PEFT LoRA adapter on the fixed start.

Lives outside the workspace, so a candidate patch cannot change how its checkpoints are
loaded, checked or scored.
"""

from __future__ import annotations

import json
from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PROBE_TEXT = "The frozen loader checks one forward pass."


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


def load_policy(fixed_start: str | Path, checkpoint: str | Path | None = None, dtype: str = "auto", merge: bool = True):
    """The fixed start with the checkpoint's adapter (merged for fast generation), in eval mode.

    ``checkpoint=None`` gives the fixed start itself (the fixed-start reference).
    """
    from transformers import AutoModelForCausalLM

    device, torch_dtype = device_and_dtype(dtype)
    model = AutoModelForCausalLM.from_pretrained(fixed_start, dtype=torch_dtype).to(device)
    if checkpoint is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, checkpoint)
        if merge:
            model = model.merge_and_unload()
    return model.eval()


def _check_adapter(checkpoint: Path, base) -> dict:
    """Shape and finiteness checks of every LoRA tensor against the base model's modules."""
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


def validate(checkpoint: str | Path, fixed_start: str | Path, cfg: dict | None = None) -> dict:
    """Frozen validation of one checkpoint: ``{valid, reason, checks}``. Never raises for a
    bad checkpoint (missing files, corrupt safetensors, wrong shapes, NaN weights or logits)."""
    import torch

    checkpoint = Path(checkpoint)
    checks: dict = {}
    try:
        for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
            if not (checkpoint / name).is_file():
                raise ValueError(f"{name} missing")
        base = load_policy(fixed_start, None, dtype=(cfg or {}).get("dtype", "auto"))
        checks.update(_check_adapter(checkpoint, base))
        checks["shapes_and_finite"] = True
        from peft import PeftModel

        model = PeftModel.from_pretrained(base, checkpoint).eval()
        tokenizer = load_tokenizer(fixed_start)
        batch = tokenizer([PROBE_TEXT], return_tensors="pt").to(base.device)
        with torch.no_grad():
            logits = model(**batch).logits
        if not torch.isfinite(logits).all():
            raise ValueError("forward pass gave non-finite logits")
        checks["forward_pass"] = {"tokens": int(batch["input_ids"].shape[1]), "logits_finite": True}
    except Exception as exc:  # the verdict, not a crash: any failure makes the checkpoint invalid
        return {"valid": False, "reason": f"{type(exc).__name__}: {exc}".splitlines()[0][:500], "checks": checks}
    return {"valid": True, "reason": "ok", "checks": checks}
