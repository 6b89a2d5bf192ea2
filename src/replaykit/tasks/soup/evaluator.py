"""Frozen evaluator of the ``soup`` task: top-1 accuracy with a class-clustered standard error.

Items are JSON lines ``{id, file, label}`` (``file`` relative to the items file's folder).
Images are preprocessed with the architecture's open_clip evaluation transform and classified
by :class:`.model.ImageClassifier`.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from pathlib import Path

import torch

from ...harness.errors import InputError
from ...harness.fileio import read_jsonl
from ...harness.stats import binomial_se
from .model import create_classifier, ingredient_paths, load_state, read_config

ITEM_FIELDS = ("id", "file", "label")


def clustered_se(correct: list[int], clusters: list) -> float:
    """Standard error of the mean of 0/1 outcomes with clusters (here: classes).

    Cluster-robust (Liang & Zeger 1986) with the small-sample factor G / (G - 1):
    ``SE = sqrt(G / (G - 1) * sum_g (sum_{i in g} (y_i - p))^2) / n``, where ``p`` is the
    overall accuracy, ``n`` the number of items and ``G`` the number of clusters. With one
    item per cluster it is close to the binomial SE ``sqrt(p (1 - p) / n)``. It can be smaller
    or larger than the binomial SE: it grows with the spread of accuracy between classes, and
    it is unstable with few clusters (every class with the same accuracy gives about 0), so
    the summary reports the binomial SE beside it. 0 for fewer than 2 clusters.
    """
    n = len(correct)
    if n == 0:
        raise ValueError("no items")
    p = sum(correct) / n
    sums: dict = defaultdict(float)
    for y, g in zip(correct, clusters):
        sums[g] += y - p
    groups = len(sums)
    if groups < 2:
        return 0.0
    return math.sqrt(groups / (groups - 1) * sum(v * v for v in sums.values())) / n


def read_items(path: str | Path, n_classes: int | None = None) -> list[dict]:
    """Items of a split; raises :class:`InputError` naming the line and field of a missing
    image file, a label outside ``0 .. n_classes - 1`` or a duplicate id."""
    items = read_jsonl(path, required=ITEM_FIELDS, unique="id")
    for number, item in enumerate(items, start=1):
        if not (Path(path).parent / item["file"]).is_file():
            raise InputError(path, f"line {number}.file", f"image {item['file']!r} not found")
        if not isinstance(item["label"], int) or (n_classes is not None and not 0 <= item["label"] < n_classes):
            raise InputError(path, f"line {number}.label", f"must be a class index, got {item['label']!r}")
    if not items:
        raise InputError(path, None, "no items")
    return items


class ImageFiles(torch.utils.data.Dataset):
    """``preprocess(image)`` of each item's file (``<base>/<item file>``, RGB)."""

    def __init__(self, base: Path, items: list[dict], preprocess):
        self.base, self.items, self.preprocess = base, items, preprocess

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> torch.Tensor:
        from PIL import Image

        return self.preprocess(Image.open(self.base / self.items[i]["file"]).convert("RGB"))


def load_images(items_file: str | Path, items: list[dict], preprocess, workers: int = 0) -> torch.Tensor:
    """``N × 3 × H × W`` preprocessed images, in item order. ``workers`` > 0 decodes and
    preprocesses in that many processes (a ``DataLoader``, order kept; the same tensors: each
    image is transformed by the same deterministic code), each batch copied out of shared
    memory as it arrives; 0 does it in this process. When the workers cannot get shared memory
    (a container's 64 MB ``/dev/shm``) it says so in one line and decodes in this process."""
    images = ImageFiles(Path(items_file).parent, items, preprocess)
    if workers <= 0:
        return torch.stack([images[i] for i in range(len(images))])
    loader = torch.utils.data.DataLoader(images, batch_size=32, shuffle=False, num_workers=workers)
    out = None
    try:
        for start, batch in zip(range(0, len(images), 32), loader):
            if out is None:
                out = torch.empty((len(images), *batch.shape[1:]), dtype=batch.dtype)
            out[start : start + len(batch)] = batch
    except RuntimeError as error:
        if "shared memory" not in str(error):
            raise
        reason = str(error).splitlines()[0]
        print(f"[images] {workers} decoding workers: {reason}; decoding in this process instead", flush=True)
        return load_images(items_file, items, preprocess, 0)
    return out


def predict(model, images: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Top-1 class per image (``N``), batched, no gradients."""
    device = next(model.parameters()).device
    out = []
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            out.append(model(images[start : start + batch_size].to(device)).argmax(1).cpu())
    return torch.cat(out)


def summarise(items: list[dict], predictions: list[int], metric: str, extra: dict) -> tuple[dict, list[dict]]:
    """The final summary of SPEC and the scored rows (``score`` 1.0 when top-1 is right)."""
    rows = [
        {
            "id": str(it["id"]),
            "label": it["label"],
            "prediction": int(p),
            "score": float(int(p) == it["label"]),
            "visible": bool(it.get("visible", False)),
        }
        for it, p in zip(items, predictions)
    ]
    correct = [int(r["score"]) for r in rows]
    labels = [r["label"] for r in rows]
    n = len(rows)
    per_class = defaultdict(list)
    for r in rows:
        per_class[r["label"]].append(r["score"])
    advisories = []
    if len(per_class) < 30:
        advisories.append(
            f"the class-clustered SE rests on {len(per_class)} classes and is unstable; "
            f"binomial SE {binomial_se(sum(correct), n):.4f}"
        )
    decomposition = {}
    for part, keep in (("visible", True), ("hidden_only", False)):
        members = [r["score"] for r in rows if r["visible"] == keep]
        decomposition[part] = {"n": len(members), "top1": sum(members) / len(members) if members else None}
    if decomposition["visible"]["n"]:
        advisories.append(
            f"{decomposition['visible']['n']} of {n} final images are also public proxy images that a "
            f"recipe selects on; top-1 on the hidden-only images: {decomposition['hidden_only']['top1']}"
        )
    summary = {
        "metric": metric,
        "direction": "maximize",
        "value": sum(correct) / n,
        "uncertainty": {"value": clustered_se(correct, labels), "kind": "se_clustered_by_class"},
        "n": n,
        "successes": sum(correct),
        "diagnostics": {
            "per_class_accuracy": {str(k): sum(v) / len(v) for k, v in sorted(per_class.items())},
            "classes": len(per_class),
            "binomial_se": binomial_se(sum(correct), n),
            "decomposition": decomposition,
            **extra,
        },
        "advisories": advisories,
    }
    return summary, rows


def evaluate(
    checkpoint: str | Path | None, fixed_start: str | Path, items_file: str | Path, metric: str, cfg: dict
) -> tuple[dict, list[dict]]:
    """Score ``checkpoint/model.pt`` on ``items_file``; ``None`` scores the fixed-start
    reference, the best single ingredient by accuracy on the public proxy split beside the
    assets (``<cfg public_dir>/proxy.jsonl``, which the scoring step verifies against the
    manifest first; ties to the lower index).

    cfg keys: ``batch_size`` (images), ``device`` (``auto``: CUDA when available), ``workers``
    (image decoding processes, default 0: this one),
    ``public_dir`` (fixed-start reference only). Weights are used in float32.
    """
    config = read_config(fixed_start)
    model, preprocess = create_classifier(fixed_start, config)
    device = "cuda" if cfg.get("device", "auto") == "auto" and torch.cuda.is_available() else "cpu"
    model.to(device).eval()
    items = read_items(items_file, int(config["n_classes"]))
    started = time.time()
    workers = int(cfg.get("workers", 0))
    images = load_images(items_file, items, preprocess, workers)
    extra: dict = {}
    if checkpoint is None:
        if "public_dir" not in cfg:
            raise ValueError("the soup fixed-start reference needs the public split (cfg public_dir)")
        proxy_file = Path(cfg["public_dir"]) / "proxy.jsonl"
        proxy = read_items(proxy_file, int(config["n_classes"]))
        proxy_images = load_images(proxy_file, proxy, preprocess, workers)
        labels = torch.tensor([it["label"] for it in proxy])
        accuracies = []
        for path in ingredient_paths(fixed_start, config):
            model.load_state_dict(load_state(path))
            accuracies.append(float((predict(model, proxy_images, int(cfg["batch_size"])) == labels).float().mean()))
        best = max(range(len(accuracies)), key=lambda i: (accuracies[i], -i))
        model.load_state_dict(load_state(ingredient_paths(fixed_start, config)[best]))
        extra["reference"] = {
            "kind": "best single ingredient by proxy accuracy",
            "ingredient": config["ingredients"][best],
            "proxy_accuracies": accuracies,
            "proxy_file": str(proxy_file),
        }
    else:
        model.load_state_dict(load_state(Path(checkpoint) / "model.pt"))
    predictions = predict(model, images, int(cfg["batch_size"])).tolist()
    extra["scoring"] = {"seconds": time.time() - started, "images": len(items), "device": device}
    name = metric.format(n=len(items), dataset=items[0].get("dataset", "images"))
    return summarise(items, predictions, name, extra)
