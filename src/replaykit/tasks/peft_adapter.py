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


def apply_adapter(model, checkpoint: str | Path):
    """``model`` (the fixed start, loaded in its scoring dtype) with the checkpoint's PEFT adapter
    applied the way it was trained: a plain transformers model (LoRA deltas and any
    ``modules_to_save``, e.g. rm's reward head), in eval mode.

    * float32: merged (PEFT ``merge_and_unload``). ``W + dW`` in float32 is the trained map up to
      float32 rounding (SmolLM2 + a trained dpo adapter: max logit difference 1.1e-4 to the
      unmerged model, 8/8 greedy generations equal), and generation runs at the bare model's
      speed: the embedded default's CPU scoring.
    * bfloat16 / float16 (``dtype: auto`` on a GPU, full scale): unmerged, the adapter's weights in
      float32 (PEFT's ``autocast_adapter_dtype``), as the recipe's forward pass trains them: each
      projection's output gets ``scaling * B A x`` added before it is rounded to the model's dtype.
      A merge would round every entry of ``W + dW`` to the bfloat16 grid of ``W``, where trained
      deltas mostly fall below half a unit in the last place and vanish (77-87 % of the entries
      of every projection of a 12-step SmolLM2 dpo adapter; issue 31, ``bench/lora_merge_precision.py``).
      The cost is the adapter's matrix products at every step.

    Raises what PEFT raises for an adapter that does not load (OSError, ValueError, RuntimeError).
    """
    import torch
    from peft import PeftModel

    peft_model = PeftModel.from_pretrained(model, str(checkpoint), autocast_adapter_dtype=True)
    if next(model.parameters()).dtype == torch.float32:
        return peft_model.merge_and_unload().eval()
    return peft_model.get_base_model().eval()


def lora_rank_and_alpha(config, module_name: str) -> tuple[int, float]:
    r"""``(r, lora_alpha)`` that PEFT gives the LoRA on ``module_name`` under ``config``.

    ``config`` is the adapter's ``peft.LoraConfig`` (:func:`read_lora_config`); ``module_name``
    is the module's full name in the base model (``model.layers.0.self_attn.q_proj``: PEFT's
    ``current_key``). A ``rank_pattern`` / ``alpha_pattern`` key is resolved by PEFT's own
    ``peft.utils.other.get_pattern_key``, as ``LoraModel._create_and_replace`` does (peft 0.21):
    the key is a regular expression that must match the whole name or the part after a dot
    (``re.match(rf"(.*\.)?({key})$", name)``), the first matching key wins, and ``r`` /
    ``lora_alpha`` apply otherwise. So ``"q_proj|v_proj"`` sets both projections, and
    ``"proj"`` sets no ``q_proj`` (a plain ``name.endswith(key)`` gets both wrong).
    """
    from peft.utils.other import get_pattern_key

    r_key = get_pattern_key(config.rank_pattern.keys(), module_name)
    alpha_key = get_pattern_key(config.alpha_pattern.keys(), module_name)
    return config.rank_pattern.get(r_key, config.r), config.alpha_pattern.get(alpha_key, config.lora_alpha)


def read_lora_config(checkpoint: Path):
    """The checkpoint's ``adapter_config.json`` as PEFT reads it when loading (``peft.LoraConfig``,
    with PEFT's defaults for absent keys). Raises ValueError when it is not a LoRA config."""
    from peft import LoraConfig

    config = json.loads((checkpoint / ADAPTER_CONFIG).read_text())
    if config.get("peft_type") != "LORA":
        raise ValueError(f"{ADAPTER_CONFIG}: peft_type is {config.get('peft_type')!r}, expected 'LORA'")
    return LoraConfig.from_pretrained(str(checkpoint))


def rank_alpha_summary(resolved: dict[str, tuple[int, float]]) -> list[dict]:
    """``[{r, alpha, modules}]``: how many LoRA modules have each (rank, alpha), sorted."""
    counts: dict[tuple[int, float], int] = {}
    for pair in resolved.values():
        counts[pair] = counts.get(pair, 0) + 1
    return [{"r": r, "alpha": alpha, "modules": n} for (r, alpha), n in sorted(counts.items())]


def check_lora_adapter(checkpoint: Path, base) -> dict:
    """Shape and finiteness checks of every LoRA tensor of a PEFT adapter against ``base``.

    Each module's rank (and alpha) is the one PEFT will give it when loading the adapter
    (:func:`lora_rank_and_alpha`). Returns ``{lora_tensors, r, target_modules, rank_alpha}``
    (``rank_alpha``: :func:`rank_alpha_summary`). Raises ValueError naming the tensor (or the
    file) that is not finite, has the wrong shape, or targets a module ``base`` lacks; tensors
    that are not LoRA A/B (e.g. ``modules_to_save``) are left to the caller.
    """
    import torch
    from safetensors import safe_open

    config = read_lora_config(checkpoint)
    modules = dict(base.named_modules())
    resolved: dict[str, tuple[int, float]] = {}
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
            r, alpha = resolved.setdefault(module_name, lora_rank_and_alpha(config, module_name))
            want = (r, module.in_features) if part == ".lora_A.weight" else (module.out_features, r)
            if tuple(tensor.shape) != want:
                raise ValueError(f"{key}: shape {tuple(tensor.shape)}, expected {want}")
            n_tensors += 1
    if n_tensors == 0:
        raise ValueError(f"{ADAPTER_WEIGHTS}: no LoRA A/B tensors")
    targets = config.target_modules
    return {
        "lora_tensors": n_tensors,
        "r": config.r,
        "target_modules": sorted(targets) if isinstance(targets, (set, list, tuple)) else targets,
        "rank_alpha": rank_alpha_summary(resolved),
    }
