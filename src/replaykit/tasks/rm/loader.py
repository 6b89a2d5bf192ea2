"""Frozen loader of the ``rm`` task: a Bradley–Terry reward model, one scalar per sequence.

A checkpoint is a PEFT adapter on the fixed start loaded as ``AutoModelForSequenceClassification``
with ``num_labels=1``: LoRA deltas plus the trained score head (``score.weight``,
shape ``1 × hidden``, saved through ``modules_to_save``). A sequence is the fixed start's chat
template applied to ``[user: prompt, assistant: response]``, left-truncated to
``max_length`` tokens (the end of the response is what the head reads). The reward is the
head's output at the last token that is not the pad token, the pooling of transformers'
``*ForSequenceClassification`` (the same model class the recipe trains), with position ids
taken from the attention mask so that left and right padding give the same numbers.

Lives outside the workspace, so a candidate patch cannot change how checkpoints are loaded,
checked or scored.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..peft_adapter import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    apply_adapter,
    check_lora_adapter,
    device_and_dtype,
    load_tokenizer,
)

HEAD = "score"
# probe conversations of different lengths: padding and batching must not change their rewards
PROBES = [
    ("Say hello.", "Hello!"),
    ("Name a colour.", "Blue is a calm colour that many people like, and it is the colour of a clear sky."),
    ("What is 2 + 2?", "2 + 2 = 4."),
    (
        "Describe a tree in two sentences.",
        "A tree is a tall plant with a woody trunk and branches. Its leaves turn sunlight into food.",
    ),
]


def load_base(fixed_start: str | Path, dtype: str = "auto"):
    """The fixed start as a one-label sequence classifier (its head still untrained), with the
    tokenizer's pad token as the pooling's pad id."""
    from transformers import AutoModelForSequenceClassification

    _, torch_dtype = device_and_dtype(dtype)
    base = AutoModelForSequenceClassification.from_pretrained(fixed_start, num_labels=1, dtype=torch_dtype)
    base.config.pad_token_id = load_tokenizer(fixed_start).pad_token_id
    return base


def load_reward_model(fixed_start: str | Path, checkpoint: str | Path, dtype: str = "auto", base=None):
    """The fixed start with the checkpoint's LoRA and head applied as trained
    (:func:`apply_adapter`: merged in float32, unmerged in bfloat16 / float16), on the device, in
    eval mode.

    Raises (OSError, ValueError, RuntimeError) when the checkpoint does not load.
    """
    device, _ = device_and_dtype(dtype)
    return apply_adapter(base or load_base(fixed_start, dtype), checkpoint).to(device).eval()


def encode(tokenizer, prompt: str | list, response: str, max_length: int) -> list[int]:
    """Token ids of ``prompt`` (a user message, or a list of chat messages) followed by the
    assistant ``response``, through the chat template, keeping the last ``max_length`` tokens."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    messages.append({"role": "assistant", "content": response})
    ids = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
    return list(ids)[-max_length:]


def rewards(
    model,
    pad_token_id: int,
    sequences: list[list[int]],
    batch_size: int,
    padding_side: str = "right",
    progress: str | None = None,
) -> list[float]:
    """One reward per token sequence (float, the head's raw output), in input order.

    Sequences are batched longest first (less padding); ``padding_side`` is ``"right"`` or
    ``"left"``; ``progress`` names the batches in a progress line per batch.
    """
    import time

    import torch

    order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
    out = [0.0] * len(sequences)
    started = time.time()
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        width = max(len(sequences[i]) for i in idx)
        ids = torch.full((len(idx), width), pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for row, i in enumerate(idx):
            seq = torch.tensor(sequences[i], dtype=torch.long)
            cols = slice(0, len(seq)) if padding_side == "right" else slice(width - len(seq), width)
            ids[row, cols], mask[row, cols] = seq, 1
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            logits = model(
                input_ids=ids.to(model.device),
                attention_mask=mask.to(model.device),
                position_ids=position_ids.to(model.device),
            ).logits
        for row, i in enumerate(idx):
            out[i] = float(logits[row, 0])
        if progress:
            print(
                f"[{progress}] {min(start + batch_size, len(order))}/{len(order)} sequences, "
                f"{time.time() - started:.0f} s",
                flush=True,
            )
    return out


def _check_head(checkpoint: Path, hidden_size: int) -> dict:
    import torch
    from safetensors import safe_open

    config = json.loads((checkpoint / ADAPTER_CONFIG).read_text())
    if HEAD not in (config.get("modules_to_save") or []):
        raise ValueError(f"{ADAPTER_CONFIG}: modules_to_save does not list {HEAD!r}: the reward head was not saved")
    with safe_open(str(checkpoint / ADAPTER_WEIGHTS), framework="pt") as handle:
        keys = [k for k in handle.keys() if k.split(".")[-2:] == [HEAD, "weight"]]
        if not keys:
            raise ValueError(f"{ADAPTER_WEIGHTS}: no reward head ({HEAD}.weight)")
        head = handle.get_tensor(keys[0])
    if tuple(head.shape) != (1, hidden_size):
        raise ValueError(f"{keys[0]}: shape {tuple(head.shape)}, expected (1, {hidden_size}) (one scalar per sequence)")
    if not torch.isfinite(head).all():
        raise ValueError(f"{keys[0]}: non-finite values")
    return {"head": keys[0], "head_shape": list(head.shape)}


def validate(checkpoint: str | Path, fixed_start: str | Path, cfg: dict | None = None) -> dict:
    """Frozen validation of one checkpoint: ``{valid, reason, checks}``; never raises for a bad
    checkpoint. Checks: adapter files; LoRA tensor shapes and finiteness; the head present,
    ``1 × hidden`` and finite; finite rewards of :data:`PROBES`; and that each probe's reward
    is the same alone (batch size 1), batched with right padding and batched with left padding,
    within ``padding_tolerance × max(1, |reward|)`` (cfg; default 1e-3 in float32, 5e-2 in
    bfloat16/float16).
    """
    import torch
    from transformers import AutoConfig

    checkpoint = Path(checkpoint)
    cfg = cfg or {}
    checks: dict = {}
    try:
        for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
            if not (checkpoint / name).is_file():
                raise ValueError(f"{name} missing")
        checks.update(_check_head(checkpoint, AutoConfig.from_pretrained(fixed_start).hidden_size))
        base = load_base(fixed_start, cfg.get("dtype", "auto"))
        checks.update(check_lora_adapter(checkpoint, base))
        model = load_reward_model(fixed_start, checkpoint, cfg.get("dtype", "auto"), base=base)
        tokenizer = load_tokenizer(fixed_start)
        seqs = [encode(tokenizer, p, r, 512) for p, r in PROBES]
        single = rewards(model, tokenizer.pad_token_id, seqs, 1)
        right = rewards(model, tokenizer.pad_token_id, seqs, len(seqs), "right")
        left = rewards(model, tokenizer.pad_token_id, seqs, len(seqs), "left")
        if not all(math.isfinite(v) for v in single + right + left):
            raise ValueError(f"non-finite rewards on the probe conversations: {single + right + left}")
        default = 1e-3 if next(model.parameters()).dtype == torch.float32 else 5e-2
        tol = float(cfg.get("padding_tolerance") or default)
        drift = max(abs(a - b) / max(1.0, abs(a)) for a, b in zip(single * 2, right + left))
        checks["probes"] = {"rewards": single, "max_relative_drift": drift, "tolerance": tol}
        if drift > tol:
            raise ValueError(f"a probe's reward changes with batch size or padding side by {drift:.3g} (> {tol:g})")
    except Exception as exc:  # the verdict, not a crash: any failure makes the checkpoint invalid
        return {"valid": False, "reason": f"{type(exc).__name__}: {exc}".splitlines()[0][:500], "checks": checks}
    return {"valid": True, "reason": "ok", "checks": checks}
