"""Rewards and the image-text embedder of the ddpo task.

Rewards are small factories returning ``fn(images, prompts) -> numpy array (B,)``, with
``images`` a ``B × 3 × H × W`` float tensor in [0, 1], as in kvablack/ddpo-pytorch's
``ddpo_pytorch/rewards.py``:

* ``jpeg_compressibility`` (embedded default): minus the JPEG size in kB (1 kB = 1,000
  bytes) of the image saved by PIL at quality 95 (Black et al. 2023, "Training Diffusion
  Models with Reinforcement Learning", sec. 6.1; images rounded to uint8 first);
* ``aesthetic`` (full scale): the LAION aesthetic predictor -- a linear-layer MLP
  (768 -> 1024 -> 128 -> 64 -> 16 -> 1, dropout between the first four layers, no
  activations, as in christophschuhmann/improved-aesthetic-predictor) on the L2-normalised
  CLIP ViT-L/14 image embedding (kvablack's ``aesthetic_scorer.py``).

The reward spec lives in the fixed assets (``scoring.json`` beside each split) so that the
recipe and the frozen evaluator read the same one:
``{"reward": "jpeg_compressibility"}`` or ``{"reward": "aesthetic", "clip_dir": ...,
"aesthetic_mlp": ...}``; ``embedder`` names the diagnostics' embedding model.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SCORING = "scoring.json"


def to_uint8(images: torch.Tensor) -> np.ndarray:
    """``B × 3 × H × W`` in [0, 1] -> ``B × H × W × 3`` uint8 (rounded, clamped)."""
    return (images.detach().float().cpu() * 255).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()


def jpeg_size_kb(images: torch.Tensor, quality: int = 95) -> np.ndarray:
    """JPEG file size (kB = 1,000 bytes) of each image saved by PIL at ``quality``."""
    from PIL import Image

    sizes = []
    for array in to_uint8(images):
        buffer = io.BytesIO()
        Image.fromarray(array).save(buffer, format="JPEG", quality=quality)
        sizes.append(buffer.tell() / 1000)
    return np.array(sizes)


def jpeg_compressibility():
    """Reward: minus the JPEG size in kB (quality 95): smaller files score higher."""
    return lambda images, prompts: -jpeg_size_kb(images)


class AestheticMLP(nn.Module):
    """The LAION aesthetic predictor's MLP (``layers.0/2/4/6/7`` are the linear layers).

    Input: L2-normalised CLIP image embeddings ``B × in_dim`` (768 for ViT-L/14);
    output ``B`` scores (LAION's 1-10 scale)."""

    def __init__(self, in_dim: int = 768):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(in_dim, 1024),
            nn.Dropout(0.2),
            nn.Linear(1024, 128),
            nn.Dropout(0.2),
            nn.Linear(128, 64),
            nn.Dropout(0.1),
            nn.Linear(64, 16),
            nn.Linear(16, 1),
        )

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        return self.layers(embeddings).squeeze(-1)


def _projected(output) -> torch.Tensor:
    """transformers 5 returns the projected embedding as ``pooler_output`` of a model output
    (4.x: a plain tensor)."""
    return output if torch.is_tensor(output) else output.pooler_output


class HFClipEmbedder:
    """A transformers ``CLIPModel`` from a local folder (full scale: CLIP ViT-L/14).

    Images are resized (bicubic, antialiased) to the model's image size and normalised with
    the processor's mean/std, without the processor's PIL round trip."""

    def __init__(self, path: str | Path, device: str = "cpu"):
        from transformers import CLIPModel, CLIPTokenizer

        self.model = CLIPModel.from_pretrained(path).to(device).eval().requires_grad_(False)
        self.tokenizer = CLIPTokenizer.from_pretrained(path)
        self.device = device
        self.size = self.model.config.vision_config.image_size
        config = (
            json.loads((Path(path) / "preprocessor_config.json").read_text())
            if (Path(path) / "preprocessor_config.json").is_file()
            else {}
        )
        self.mean = torch.tensor(config.get("image_mean", [0.48145466, 0.4578275, 0.40821073]))[:, None, None]
        self.std = torch.tensor(config.get("image_std", [0.26862954, 0.26130258, 0.27577711]))[:, None, None]

    @torch.no_grad()
    def images(self, images: torch.Tensor) -> torch.Tensor:
        """``B × D`` L2-normalised image embeddings of images in [0, 1]."""
        x = F.interpolate(
            images.float().cpu(), size=(self.size, self.size), mode="bicubic", antialias=True, align_corners=False
        ).clamp(0, 1)
        x = ((x - self.mean) / self.std).to(self.device)
        return F.normalize(_projected(self.model.get_image_features(pixel_values=x)), dim=-1).float().cpu()

    @torch.no_grad()
    def texts(self, texts: list[str]) -> torch.Tensor:
        """``B × D`` L2-normalised text embeddings."""
        tok = self.tokenizer(texts, padding=True, truncation=True, return_tensors="pt").to(self.device)
        return F.normalize(_projected(self.model.get_text_features(**tok)), dim=-1).float().cpu()


class OpenClipEmbedder:
    """The embedded default's digit CLIP (open_clip, saved under ``<fixed start>/clip``)."""

    def __init__(self, path: str | Path, device: str = "cpu"):
        import open_clip
        from safetensors.torch import load_file

        from ..common.clip import create_clip

        config = json.loads((Path(path) / "config.json").read_text())
        self.model, _ = create_clip(path, config)
        self.model.load_state_dict(load_file(str(Path(path) / config["weights"])))
        self.model.to(device).eval().requires_grad_(False)
        self.tokenizer = open_clip.get_tokenizer(config["model_name"])
        size = self.model.visual.image_size
        self.size = size[0] if isinstance(size, (tuple, list)) else size
        self.device = device

    @torch.no_grad()
    def images(self, images: torch.Tensor) -> torch.Tensor:
        from .pipeline import clip_preprocess

        return (
            self.model.encode_image(clip_preprocess(images.float().cpu(), self.size).to(self.device), normalize=True)
            .float()
            .cpu()
        )

    @torch.no_grad()
    def texts(self, texts: list[str]) -> torch.Tensor:
        return self.model.encode_text(self.tokenizer(texts).to(self.device), normalize=True).float().cpu()


def load_embedder(spec: dict, base: str | Path, device: str = "cpu"):
    """The embedder named by ``spec`` (``{"kind": "open_clip"|"hf_clip", "path": ...}``; a
    relative path is taken under ``base``, the fixed start)."""
    path = Path(spec["path"])
    path = path if path.is_absolute() else Path(base) / path
    return {"open_clip": OpenClipEmbedder, "hf_clip": HFClipEmbedder}[spec["kind"]](path, device)


def aesthetic(clip_dir: str | Path, mlp_path: str | Path, device: str = "cpu"):
    """Reward: LAION aesthetic score of each image (CLIP image embedding, L2-normalised, then
    :class:`AestheticMLP`). ``mlp_path``: a state dict (``.pth``/``.pt``/``.safetensors``)
    with keys ``layers.{0,2,4,6,7}.{weight,bias}``; raises ValueError when it does not fit."""
    from ..common.clip import load_state

    embedder = HFClipEmbedder(clip_dir, device)
    state = load_state(mlp_path)
    mlp = AestheticMLP(state["layers.0.weight"].shape[1])
    mlp.load_state_dict(state)
    mlp.eval().requires_grad_(False)

    def fn(images: torch.Tensor, prompts: list[str]) -> np.ndarray:
        with torch.no_grad():
            return mlp(embedder.images(images)).numpy().astype(float)

    return fn


def reward_fn(scoring: dict, device: str = "cpu"):
    """The reward function a ``scoring.json`` names (see the module docstring)."""
    if scoring["reward"] == "jpeg_compressibility":
        return jpeg_compressibility()
    if scoring["reward"] == "aesthetic":
        return aesthetic(scoring["clip_dir"], scoring["aesthetic_mlp"], device)
    raise ValueError(f"{SCORING}: reward: unknown reward {scoring['reward']!r}")
