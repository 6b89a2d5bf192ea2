"""Frozen loader of the ``dpo`` task: a PEFT LoRA adapter on the fixed start.

Lives outside the workspace, so a candidate patch cannot change how its checkpoints are
loaded, checked or scored.
"""

from __future__ import annotations

from pathlib import Path

from ..peft_adapter import (  # noqa: F401
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    apply_adapter,
    check_lora_adapter,
    device_and_dtype,
    load_tokenizer,
)

PROBE_TEXT = "The frozen loader checks one forward pass."


def load_policy(fixed_start: str | Path, checkpoint: str | Path | None = None, dtype: str = "auto"):
    """The fixed start with the checkpoint's adapter applied as trained (:func:`apply_adapter`:
    merged in float32, unmerged in bfloat16 / float16), in eval mode, on the device.

    ``checkpoint=None`` gives the fixed start itself (the fixed-start reference).
    """
    from transformers import AutoModelForCausalLM

    device, torch_dtype = device_and_dtype(dtype)
    model = AutoModelForCausalLM.from_pretrained(fixed_start, dtype=torch_dtype).to(device)
    if checkpoint is not None:
        model = apply_adapter(model, checkpoint)
    return model.eval()


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
        checks.update(check_lora_adapter(checkpoint, base))
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
