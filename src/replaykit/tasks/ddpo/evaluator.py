"""Frozen evaluator of the ``ddpo`` task: mean reward over a prompt/latent stream.

For every stream row ``{id, prompt, latent_seed}`` the frozen pipeline (with the
checkpoint's LoRA, or without one for the fixed-start reference) draws one image by
deterministic DDIM (eta 0, so the image is a function of prompt and latent; 20 steps,
guidance 5 -- SPEC, read from ``scoring.json``), and the reward of ``scoring.json`` scores it.

Summary: the mean reward and the standard error of the mean (``sd / sqrt(n)``, ddof 1);
rows ``{id, prompt, score}`` for the harness's paired bootstrap. Diagnostics (SPEC), with the
embedder of ``scoring.json`` (CLIP ViT-L/14 at full scale, the digit CLIP embedded):

* ``text_image_alignment`` -- mean cosine similarity of each image's embedding with its
  prompt's (both L2-normalised);
* ``mean_pairwise_image_distance`` -- mean cosine distance ``1 - cos`` over all pairs of
  image embeddings;
* the diversity advisory when the pairwise distance is more than 0.02 below the fixed
  start's on the same stream (computed here with the adapter disabled).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from ...harness.errors import InputError
from ...harness.fileio import read_jsonl
from ...harness.stats import mean_se
from .rewards import SCORING, load_embedder, reward_fn

ITEM_FIELDS = ("id", "prompt", "latent_seed")
DIVERSITY_DROP = 0.02


def read_items(path: str | Path) -> list[dict]:
    """Stream rows; InputError naming the line and field of a duplicate id, an empty prompt
    or a latent seed that is not a non-negative integer."""
    items = read_jsonl(path, required=ITEM_FIELDS, unique="id")
    for number, item in enumerate(items, start=1):
        if not isinstance(item["prompt"], str) or not item["prompt"].strip():
            raise InputError(path, f"line {number}.prompt", "must be a non-empty string")
        if not isinstance(item["latent_seed"], int) or isinstance(item["latent_seed"], bool) or item["latent_seed"] < 0:
            raise InputError(
                path, f"line {number}.latent_seed", f"must be an integer >= 0, got {item['latent_seed']!r}"
            )
    if not items:
        raise InputError(path, None, "no items")
    return items


def read_scoring(items_file: str | Path) -> dict:
    """``scoring.json`` beside the items file (InputError when missing)."""
    path = Path(items_file).parent / SCORING
    if not path.is_file():
        raise InputError(path, None, "missing: the split's reward spec")
    return json.loads(path.read_text())


def mean_pairwise_distance(embeddings: torch.Tensor) -> float:
    """Mean of ``1 - cos(e_i, e_j)`` over pairs ``i < j`` of L2-normalised ``N × D`` rows."""
    n = len(embeddings)
    if n < 2:
        return 0.0
    cos = embeddings @ embeddings.T
    return float((1 - cos)[torch.triu_indices(n, n, offset=1).unbind()].mean())


def generate(pipe, items: list[dict], scoring: dict, batch_size: int) -> torch.Tensor:
    """The stream's images ``N × 3 × H × W`` in [0, 1]."""
    from .pipeline import initial_latents, sample

    latents = torch.stack([initial_latents(it["latent_seed"], pipe.latent_shape) for it in items])
    return sample(
        pipe,
        [it["prompt"] for it in items],
        latents,
        steps=int(scoring["inference_steps"]),
        guidance=float(scoring["guidance_scale"]),
        batch_size=batch_size,
    )


def device_and_dtype(cfg: dict) -> tuple[str, torch.dtype]:
    """``device`` (``auto``: CUDA when available) and ``dtype`` (``auto``: float16 on CUDA,
    float32 on CPU) of the evaluation config."""
    device = "cuda" if cfg.get("device", "auto") == "auto" and torch.cuda.is_available() else "cpu"
    dtype = {
        "auto": torch.float16 if device == "cuda" else torch.float32,
        "float32": torch.float32,
        "float16": torch.float16,
        "bfloat16": torch.bfloat16,
    }[cfg.get("dtype", "auto")]
    return device, dtype


def diversity_advisory(pairwise: float, reference: float) -> list[str]:
    """The diversity advisory when the mean pairwise image distance fell by more than
    :data:`DIVERSITY_DROP` from the fixed start's ``reference`` (SPEC ddpo)."""
    if pairwise >= reference - DIVERSITY_DROP:
        return []
    return [
        f"diversity: mean pairwise image distance fell from {reference:.4f} (fixed start) to "
        f"{pairwise:.4f}, by more than {DIVERSITY_DROP}"
    ]


def evaluate(
    checkpoint: str | Path | None, fixed_start: str | Path, items_file: str | Path, metric: str, cfg: dict
) -> tuple[dict, list[dict]]:
    """Score ``checkpoint`` (a PEFT LoRA folder; ``None``: the fixed start) on ``items_file``.

    cfg keys: ``batch_size`` (images per sampling batch), ``device`` (``auto``: CUDA when
    available), ``dtype`` (``auto``: float16 on CUDA, float32 on CPU), ``diversity_reference``
    (default true: also sample the fixed start to compare pairwise distances).
    Returns (summary, rows). Raises ValueError for a LoRA that does not load (the validator
    refuses those first).
    """
    from .lora import load_lora
    from .pipeline import Pipeline

    started = time.time()
    device, dtype = device_and_dtype(cfg)
    scoring = read_scoring(items_file)
    items = read_items(items_file)
    batch_size = int(cfg.get("batch_size", 64))
    pipe = Pipeline(fixed_start, device, dtype)
    if checkpoint is not None:
        load_lora(pipe.unet, checkpoint)
    images = generate(pipe, items, scoring, batch_size)
    sampled_s = time.time() - started
    rewards = np.asarray(reward_fn(scoring, device)(images, [it["prompt"] for it in items]), dtype=float)
    if not np.isfinite(rewards).all():
        raise ValueError(f"{int((~np.isfinite(rewards)).sum())} non-finite rewards")
    embedder = load_embedder(scoring["embedder"], fixed_start, device)
    image_emb = embedder.images(images)
    prompts = sorted({it["prompt"] for it in items})
    text_emb = dict(zip(prompts, embedder.texts(prompts)))
    alignment = [float(image_emb[i] @ text_emb[it["prompt"]]) for i, it in enumerate(items)]
    pairwise = mean_pairwise_distance(image_emb)
    advisories = []
    diagnostics = {
        "text_image_alignment": float(np.mean(alignment)),
        "mean_pairwise_image_distance": pairwise,
        "reward_sd": float(rewards.std(ddof=1)) if len(rewards) > 1 else 0.0,
    }
    if checkpoint is not None and cfg.get("diversity_reference", True):
        pipe.unet.disable_adapters()
        reference = mean_pairwise_distance(embedder.images(generate(pipe, items, scoring, batch_size)))
        diagnostics["fixed_start_pairwise_image_distance"] = reference
        advisories += diversity_advisory(pairwise, reference)
    rows = [
        {"id": str(it["id"]), "prompt": it["prompt"], "score": float(r), "alignment": a}
        for it, r, a in zip(items, rewards, alignment)
    ]
    reward_name = {"jpeg_compressibility": "jpeg_compressibility", "aesthetic": "aesthetic_score"}[scoring["reward"]]
    diagnostics.update(
        per_prompt_mean={p: float(np.mean([r["score"] for r in rows if r["prompt"] == p])) for p in prompts},
        scoring={
            "reward": scoring["reward"],
            "steps": scoring["inference_steps"],
            "guidance": scoring["guidance_scale"],
            "eta": scoring["eta"],
            "device": device,
            "dtype": str(dtype),
            "sampling_s": sampled_s,
            "seconds": time.time() - started,
        },
    )
    if scoring["reward"] == "jpeg_compressibility":
        caveat = jpeg_caveat(images.shape[-2:], int(scoring.get("jpeg_quality", 95)))
        diagnostics["scoring"]["jpeg_fixed_overhead_kb"] = caveat["fixed_overhead_kb"]
        advisories.append(caveat["advisory"])
    summary = {
        "metric": metric.format(n=len(items), reward=reward_name),
        "direction": "maximize",
        "value": float(rewards.mean()),
        "uncertainty": {"value": mean_se(rewards), "kind": "se_of_mean"},
        "n": len(items),
        "diagnostics": diagnostics,
        "advisories": advisories,
    }
    return summary, rows


def jpeg_caveat(size: tuple[int, int], quality: int) -> dict:
    """Why the JPEG-compressibility score is not comparable with DDPO's reported numbers.

    The reward is minus the JPEG size in kB; at small image sizes most of that size is the
    fixed cost of headers and quantisation / Huffman tables, measured here as the size of a
    uniform grey image of the same ``size`` (h, w) and ``quality``. DDPO's numbers are for
    512 × 512 Stable Diffusion images, where that overhead is a small share.

    Returns ``{"fixed_overhead_kb": float, "advisory": str}``.
    """
    from .rewards import jpeg_size_kb

    h, w = int(size[0]), int(size[1])
    overhead = float(jpeg_size_kb(torch.full((1, 3, h, w), 0.5), quality)[0])
    return {
        "fixed_overhead_kb": overhead,
        "advisory": (
            "jpeg_compressibility is not comparable with the DDPO paper's "
            f"numbers: at {h} x {w} px a uniform image already costs "
            f"{overhead:.3f} kB of fixed JPEG overhead (headers, tables; quality "
            f"{quality}), which dominates the score; the paper scores 512 x 512 "
            "images"
        ),
    }
