"""The embedded soup task's fixed assets: soup ingredients fine-tuned on scikit-learn's digits.

Recipe of the model-soups paper (Wortsman et al. 2022, arXiv:2203.05482, sec. 3) at toy
scale, on real images (scikit-learn's 1,797 handwritten digits, 8 × 8, 17 grey levels):

1. hold out ``heldout_per_class`` images per class (seeded); nothing below sees them;
2. pre-train a small open_clip model (a custom config registered with
   ``open_clip.add_model_config``) contrastively on the other images with captions
   ("a photo of the digit seven", ...): InfoNCE in both directions, with every image of the
   same class in the batch counted as a positive (soft targets), since captions repeat;
3. zero-shot head: the class prompts' normalised text embeddings, averaged over templates,
   times the logit scale;
4. fine-tune ``n_ingredients`` copies of (image tower + zero-shot head) end to end with a
   random hyperparameter sweep (learning rate, weight decay, epochs, label smoothing,
   augmentation by random shifts, seed), each from that same start -- so they lie in one
   basin and can be averaged.

Output directory: ``config.json``, ``model_configs/<name>.json``, ``zeroshot.safetensors``
(the common start), ``ingredients/ingredient_NN.safetensors``.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ..common.clip import CLASS_NAMES, MODEL_CONFIG, MODEL_NAME, TEMPLATES, create_clip, pretrain  # noqa: F401
from .model import CONFIG, ImageClassifier

SWEEP = {
    "learning_rate": [1e-4, 3e-4, 1e-3],
    "weight_decay": [0.0, 0.01, 0.1],
    "epochs": [2, 3, 4, 5],
    "label_smoothing": [0.0, 0.1, 0.2],
    "augmentation": ["none", "shift"],
}


def digits():
    """scikit-learn's digits as (PIL RGB images 8 × 8, labels); pixel = grey level × 255 / 16."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    data = load_digits()
    pixels = np.clip(np.rint(data.images * 255.0 / 16.0), 0, 255).astype("uint8")
    return [Image.fromarray(p, mode="L").convert("RGB") for p in pixels], [int(t) for t in data.target]


def heldout_indices(labels: list[int], per_class: int, seed: int) -> list[int]:
    """``per_class`` indices of every class, drawn with ``seed``; sorted."""
    rng = random.Random(seed)
    out = []
    for c in sorted(set(labels)):
        members = [i for i, y in enumerate(labels) if y == c]
        out += rng.sample(members, per_class)
    return sorted(out)


def _shift(images: torch.Tensor, generator: torch.Generator, max_shift: int = 1) -> torch.Tensor:
    dx, dy = (int(v) for v in torch.randint(-max_shift, max_shift + 1, (2,), generator=generator))
    return torch.roll(images, shifts=(dy, dx), dims=(2, 3))


def zeroshot_head(clip, tokenizer) -> torch.Tensor:
    """``n_classes × embed_dim``: mean over templates of normalised prompt embeddings,
    renormalised, times the logit scale (CLIP's zero-shot classifier)."""
    with torch.no_grad():
        rows = []
        for name in CLASS_NAMES:
            emb = clip.encode_text(tokenizer([t.format(name) for t in TEMPLATES]), normalize=True).mean(0)
            rows.append(F.normalize(emb, dim=-1))
        return torch.stack(rows) * clip.logit_scale.exp()


def finetune(start: dict, make, images: torch.Tensor, labels: torch.Tensor, hp: dict) -> tuple[dict, float]:
    """Fine-tune a copy of the classifier ``start`` (state dict) with hyperparameters ``hp``;
    returns (state dict, training accuracy of the last epoch)."""
    torch.manual_seed(hp["seed"])
    generator = torch.Generator().manual_seed(hp["seed"])
    model = make()
    model.load_state_dict(start)
    optimizer = torch.optim.AdamW(model.parameters(), lr=hp["learning_rate"], weight_decay=hp["weight_decay"])
    model.train()
    for _ in range(hp["epochs"]):
        correct = 0
        order = torch.randperm(len(labels), generator=generator)
        for start_i in range(0, len(order), 64):
            idx = order[start_i : start_i + 64]
            batch = images[idx]
            if hp["augmentation"] == "shift":
                batch = _shift(batch, generator)
            logits = model(batch)
            loss = F.cross_entropy(logits, labels[idx], label_smoothing=hp["label_smoothing"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            correct += int((logits.argmax(1) == labels[idx]).sum())
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, correct / len(labels)


def _heldout(labels: list[int], per_class: int, seed: int, final_salt: str) -> list[int]:
    """The held-out image indices (:func:`heldout_indices` with the salted seed). Raises
    :class:`InputError` for a ``heldout_per_class`` outside 3 .. the smallest class - 10."""
    from ...harness.errors import InputError
    from ...harness.salt import salted_seed

    smallest = min(labels.count(c) for c in set(labels))
    if not 3 <= per_class <= smallest - 10:
        raise InputError(
            "config",
            "models.heldout_per_class",
            f"must be between 3 and {smallest - 10} (the smallest class has {smallest} images)",
        )
    return heldout_indices(labels, per_class, salted_seed(seed, final_salt))


def _sweep(out: Path, n: int, rng: random.Random, start_state, make, images, y, log, started: float) -> list[dict]:
    """Fine-tune ``n`` ingredients from ``start_state`` with hyperparameters drawn from
    :data:`SWEEP` by ``rng``; save each under ``out/ingredients/``; their sweep entries."""
    from safetensors.torch import save_file

    sweep = []
    for i in range(n):
        hp = {key: rng.choice(values) for key, values in SWEEP.items()}
        hp["seed"] = rng.randrange(2**31)
        state, train_acc = finetune(start_state, make, images, y, hp)
        name = f"ingredients/ingredient_{i:02d}.safetensors"
        save_file({k: v.contiguous() for k, v in state.items()}, str(out / name))
        sweep.append({**hp, "train_accuracy": train_acc, "file": name})
        log(f"[ingredient {i:02d}] {hp} train accuracy {train_acc:.3f} ({time.time() - started:.0f} s)")
    return sweep


def build(spec: dict, out: str | Path, log=print, final_salt: str = "") -> dict:
    """Build the embedded ingredients into directory ``out`` (which must not exist yet).

    spec keys: ``seed``, ``n_ingredients``, ``pretrain_epochs``, ``heldout_per_class``.
    The held-out images are drawn with ``salted_seed(seed, final_salt)`` and are written to
    ``private.json`` beside the model folder by the caller (key ``private`` of the returned
    summary), never into the fixed start a replay reads. Returns a summary for the fixed
    start's manifest.
    """
    import open_clip
    from safetensors.torch import save_file

    out = Path(out)
    (out / "model_configs").mkdir(parents=True)
    (out / "ingredients").mkdir()
    (out / "model_configs" / f"{MODEL_NAME}.json").write_text(json.dumps(MODEL_CONFIG, indent=1))
    seed = int(spec["seed"])
    torch.set_num_threads(int(spec.get("threads", 1)))
    torch.manual_seed(seed)
    config = {
        "format": "replaykit-soup-ingredients",
        "model_name": MODEL_NAME,
        "n_classes": len(CLASS_NAMES),
        "class_names": CLASS_NAMES,
        "templates": TEMPLATES,
        "dataset": "scikit-learn digits (1,797 images, 8 x 8)",
    }
    clip, preprocess = create_clip(out, config)
    tokenizer = open_clip.get_tokenizer(MODEL_NAME)
    pil, labels = digits()
    heldout = _heldout(labels, int(spec["heldout_per_class"]), seed, final_salt)
    train = sorted(set(range(len(labels))) - set(heldout))
    images = torch.stack([preprocess(pil[i]) for i in train])
    y = torch.tensor([labels[i] for i in train])
    started = time.time()
    pretrain(clip, tokenizer, images, y, int(spec["pretrain_epochs"]), seed, log)
    clip.eval()
    zeroshot = ImageClassifier(clip.visual, clip.visual.output_dim, len(CLASS_NAMES))
    with torch.no_grad():
        zeroshot.head.weight.copy_(zeroshot_head(clip, tokenizer))
        zeroshot.head.bias.zero_()
        zeroshot_acc = float((zeroshot(images).argmax(1) == y).float().mean())
    start_state = {k: v.detach().clone().contiguous() for k, v in zeroshot.state_dict().items()}
    save_file(start_state, str(out / "zeroshot.safetensors"))
    log(f"[zeroshot] training-pool accuracy {zeroshot_acc:.3f} ({time.time() - started:.0f} s)")

    def make():
        fresh, _ = create_clip(out, config)
        return ImageClassifier(fresh.visual, fresh.visual.output_dim, len(CLASS_NAMES))

    sweep = _sweep(out, int(spec["n_ingredients"]), random.Random(seed), start_state, make, images, y, log, started)
    names = [entry["file"] for entry in sweep]
    config.update(
        ingredients=names,
        sweep=sweep,
        n_train_images=len(train),
        zeroshot="zeroshot.safetensors",
        zeroshot_train_accuracy=zeroshot_acc,
        builder={"spec": spec, "preprocess": str(preprocess)},
    )
    (out / CONFIG).write_text(json.dumps(config, indent=1))
    return {
        "builder": "soup-digits",
        "n_ingredients": len(names),
        "heldout": len(heldout),
        "train_images": len(train),
        "private": {"heldout_indices": heldout},
    }
