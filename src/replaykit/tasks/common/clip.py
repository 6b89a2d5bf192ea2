"""open_clip models shared by the soup and ddpo tasks: building one from a folder, loading a
state dict, and the digit CLIP's contrastive pre-training.

soup's ingredients are fine-tuned from a digit CLIP (:mod:`replaykit.tasks.soup.ingredients`)
and ddpo's embedded pipeline carries one as its diagnostics embedder
(:mod:`replaykit.tasks.ddpo.pipeline`); both pre-train it with :func:`pretrain` on
scikit-learn's digits with captions ("a photo of the digit seven", ...). Moved from
``replaykit.tasks.soup.model`` / ``.ingredients`` unchanged (the built models are the same).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

CONFIG = "config.json"
MODEL_NAME = "digits-vit-tiny"
MODEL_CONFIG = {
    "embed_dim": 64,
    "vision_cfg": {"image_size": 16, "layers": 2, "width": 64, "patch_size": 4, "head_width": 32},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}
CLASS_NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
TEMPLATES = ["a photo of the digit {}.", "a handwritten {}.", "the number {}.", "a blurry picture of a {}."]


def create_clip(fixed_start: str | Path, config: dict | None = None):
    """(open_clip CLIP model, evaluation preprocess) of the fixed start's architecture, random
    weights. A custom architecture is registered from ``<fixed_start>/model_configs/``."""
    import open_clip

    config = config or json.loads((Path(fixed_start) / CONFIG).read_text())
    custom = Path(fixed_start) / "model_configs"
    if custom.is_dir():
        open_clip.add_model_config(custom)
    clip, _, preprocess = open_clip.create_model_and_transforms(config["model_name"])
    return clip, preprocess


def load_state(path: str | Path) -> dict[str, torch.Tensor]:
    """A state dict from ``.safetensors`` or a torch ``.pt`` file (loaded with
    ``weights_only=True``: tensors only, no pickled code)."""
    import torch

    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise ValueError(f"{path}: not a state dict")
    return state


def pretrain(clip, tokenizer, images: torch.Tensor, labels: torch.Tensor, epochs: int, seed: int, log) -> None:
    """Contrastive pre-training of ``clip`` (in place) on ``images`` (``N × 3 × H × W``,
    preprocessed) with labels ``N`` (class indices into :data:`CLASS_NAMES`): InfoNCE in both
    directions on batches of 128, each image paired with a caption drawn from
    :data:`TEMPLATES`, every image of the same class in the batch counted as a positive (soft
    targets, since captions repeat); AdamW lr 1e-3, weight decay 0.1; ``log`` gets one line
    per epoch."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(clip.parameters(), lr=1e-3, weight_decay=0.1)
    captions = {c: tokenizer([t.format(CLASS_NAMES[c]) for t in TEMPLATES]) for c in range(len(CLASS_NAMES))}
    clip.train()
    for epoch in range(epochs):
        order = torch.randperm(len(labels), generator=generator)
        for start in range(0, len(order), 128):
            idx = order[start : start + 128]
            y = labels[idx]
            pick = torch.randint(0, len(TEMPLATES), (len(idx),), generator=generator)
            text = torch.stack([captions[int(c)][int(k)] for c, k in zip(y, pick)])
            img = clip.encode_image(images[idx], normalize=True)
            txt = clip.encode_text(text, normalize=True)
            logits = clip.logit_scale.exp() * img @ txt.T
            same = (y[:, None] == y[None, :]).float()
            target = same / same.sum(1, keepdim=True)
            loss = -0.5 * (
                (target * logits.log_softmax(1)).sum(1).mean() + (target * logits.T.log_softmax(1)).sum(1).mean()
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        log(f"[pretrain] epoch {epoch + 1}/{epochs} loss {loss.item():.4f}")
