"""Frozen validator of the ``ddpo`` task: the LoRA loads into the frozen pipeline.

Valid when the checkpoint's PEFT LoRA targets only the UNet's attention projections with
the UNet's shapes (:func:`.lora.check_lora`), loads with PEFT, and one guided DDIM sample
(2 steps, a fixed latent) decodes to finite pixels.
"""

from __future__ import annotations

from pathlib import Path

import torch


def validate(checkpoint: str | Path, fixed_start: str | Path, cfg: dict | None = None) -> dict:
    """Frozen validation of one checkpoint: ``{valid, reason, checks}``; never raises for a bad one."""
    from .lora import load_lora
    from .pipeline import Pipeline, initial_latents, sample

    checks: dict = {}
    try:
        pipe = Pipeline(fixed_start)
        checks["lora"] = load_lora(pipe.unet, checkpoint)
        images = sample(pipe, ["a photo"], initial_latents(0, pipe.latent_shape)[None], steps=2, guidance=5.0)
        if not torch.isfinite(images).all():
            raise ValueError("a sample with the LoRA has non-finite pixels")
        checks["sample"] = {"shape": list(images.shape)}
    except Exception as exc:  # the verdict, not a crash
        return {"valid": False, "reason": f"{type(exc).__name__}: {exc}".splitlines()[0][:500], "checks": checks}
    return {"valid": True, "reason": "ok", "checks": checks}
