"""The soup task's model: an open_clip image tower with a linear zero-shot head.

As in model soups (Wortsman et al. 2022, arXiv:2203.05482; mlfoundations/model-soups, which
builds on wise-ft's ``ImageClassifier``): ``logits = head(normalize(visual(image)))``, the
head initialised from the class-name prompts' text embeddings (scaled by CLIP's logit scale)
and fine-tuned with the tower. A state dict has keys ``visual.*``, ``head.weight``
(``n_classes × embed_dim``) and ``head.bias``.

Every soup ingredient, soup and checkpoint of this task is such a state dict; the fixed
start's ``config.json`` says which open_clip architecture (``model_name``, with an optional
custom config under ``model_configs/``) and how many classes. Model soups' ingredients come
from OpenAI's CLIP, whose transformer uses QuickGELU: name ``ViT-B-32-quickgelu`` for them
(open_clip's ``ViT-B-32`` has plain GELU, loads the same keys without complaint, and gives
different features).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..common.clip import CONFIG, create_clip, load_state  # noqa: F401  (recipes/soup imports load_state here)


class ImageClassifier(nn.Module):
    """open_clip image tower + linear head on L2-normalised features. Input: images
    ``B × 3 × H × W`` (preprocessed); output: logits ``B × n_classes``."""

    def __init__(self, visual: nn.Module, embed_dim: int, n_classes: int):
        super().__init__()
        self.visual = visual
        self.head = nn.Linear(embed_dim, n_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(F.normalize(self.visual(images), dim=-1))


def read_config(fixed_start: str | Path) -> dict:
    """The fixed start's ``config.json`` (``model_name``, ``n_classes``, ``class_names``,
    ``ingredients``: relative paths)."""
    return json.loads((Path(fixed_start) / CONFIG).read_text())


def create_classifier(fixed_start: str | Path, config: dict | None = None):
    """(:class:`ImageClassifier` with random weights, evaluation preprocess)."""
    config = config or read_config(fixed_start)
    clip, preprocess = create_clip(fixed_start, config)
    return ImageClassifier(clip.visual, clip.visual.output_dim, int(config["n_classes"])), preprocess


def ingredient_paths(fixed_start: str | Path, config: dict | None = None) -> list[Path]:
    config = config or read_config(fixed_start)
    return [Path(fixed_start) / rel for rel in config["ingredients"]]


def check_ingredients(fixed_start: str | Path) -> dict:
    """Every ingredient has the same keys and shapes as the first, and finite values.

    Returns ``{n_ingredients, n_tensors, n_parameters}``. Raises ValueError naming the
    ingredient file and the key that differs.
    """
    paths = ingredient_paths(fixed_start)
    if not paths:
        raise ValueError(f"{Path(fixed_start) / CONFIG}: ingredients: empty list")
    reference = {k: tuple(v.shape) for k, v in load_state(paths[0]).items()}
    for path in paths:
        state = load_state(path)
        shapes = {k: tuple(v.shape) for k, v in state.items()}
        if shapes.keys() != reference.keys():
            extra, missing = sorted(shapes.keys() - reference.keys()), sorted(reference.keys() - shapes.keys())
            raise ValueError(f"{path}: keys differ from {paths[0].name} (extra {extra[:3]}, missing {missing[:3]})")
        for key, shape in shapes.items():
            if shape != reference[key]:
                raise ValueError(f"{path}: {key} has shape {shape}, {paths[0].name} has {reference[key]}")
            if state[key].is_floating_point() and not torch.isfinite(state[key]).all():
                raise ValueError(f"{path}: {key} has non-finite values")
    return {
        "n_ingredients": len(paths),
        "n_tensors": len(reference),
        "n_parameters": int(sum(torch.Size(s).numel() for s in reference.values())),
    }
