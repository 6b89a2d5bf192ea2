"""Soup on a machine without open_clip: full-scoring decode with and without workers, and a
candidate as one product over a flat ingredient buffer, with timm's ViT-B/32 as the stand-in.

Same measurements as ``bench/soup_throughput.py`` where open_clip cannot be installed (the
lent H200 could not receive its wheel in the 2026-12-01 session): the image tower is timm's
``vit_base_patch32_224`` (88 M parameters, the ViT-B/32 shape; random weights) with a
1000-class head, the preprocessing is open_clip's ViT-B/32 transform written with torchvision
(resize 224 bicubic, centre crop, RGB, normalise with CLIP's mean/std).

* full scoring: :func:`replaykit.tasks.soup.evaluator.load_images` of ``--n-final`` random
  500 × 375 JPEGs in one process and with ``--workers`` processes (same tensors checked),
  then the forward at ``--batch-size``;
* candidate: ``--n-ingredients`` perturbed copies of the weights on the GPU; per-tensor
  ``tensordot`` (the recipe's ``soup``) against one matrix-vector product over a flat
  ``[n, P]`` buffer, each + a forward over ``--n-proxy`` cached images at ``--batch-size``
  and ``--big-batch``.

Usage: python bench/soup_timm_throughput.py --n-final 10000 --workers 14 --json out.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from replaykit.tasks.soup import evaluator

MEAN, STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)  # CLIP's


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def clip_transform():
    from torchvision import transforms as T

    return T.Compose(
        [
            T.Resize(224, interpolation=T.InterpolationMode.BICUBIC),
            T.CenterCrop(224),
            T.Lambda(lambda im: im.convert("RGB")),
            T.ToTensor(),
            T.Normalize(MEAN, STD),
        ]
    )


def median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def main() -> None:
    import soup_throughput  # same folder: random_images
    import timm

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-final", type=int, default=10000)
    p.add_argument("--n-proxy", type=int, default=2000)
    p.add_argument("--n-ingredients", type=int, default=72)
    p.add_argument("--workers", type=int, default=14)
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--big-batch", type=int, default=2000)
    p.add_argument("--candidates", type=int, default=5)
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    device = "cuda" if torch.cuda.is_available() else "cpu"
    scratch = Path(tempfile.mkdtemp(prefix="soup-timm-"))
    out: dict = {"model": "timm vit_base_patch32_224 (random weights), 1000 classes", "device": device}
    t = time.time()
    items_file = soup_throughput.random_images(scratch / "final", a.n_final, 1000, processes=a.threads)
    out["write_jpegs_s"] = time.time() - t
    items = evaluator.read_items(items_file)
    model = timm.create_model("vit_base_patch32_224", pretrained=False, num_classes=1000).to(device).eval()
    preprocess = clip_transform()
    reference = None
    for workers in (0, a.workers):
        sync()
        t = time.time()
        images = evaluator.load_images(items_file, items, preprocess, workers)
        t_pre = time.time() - t
        predictions = evaluator.predict(model, images, a.batch_size)
        sync()
        out[f"full_scoring_{workers}workers_s"] = time.time() - t
        out[f"full_scoring_{workers}workers_preprocess_s"] = t_pre
        if reference is None:
            reference = images
        else:
            out["same_tensors"] = bool(torch.equal(reference, images))
        print(
            f"[soup] {workers} workers: {out[f'full_scoring_{workers}workers_s']:.1f} s "
            f"(decode + preprocess {t_pre:.1f} s)",
            flush=True,
        )
    assert len(predictions) == a.n_final
    # candidates: n ingredients on the GPU, proxy images cached there
    proxy = reference[: a.n_proxy].to(device)
    labels = torch.randint(0, 1000, (len(proxy),), device=device)
    base = {k: v.detach().float() for k, v in model.state_dict().items()}
    n = a.n_ingredients
    gen = torch.Generator(device=device).manual_seed(0)
    stacked = {
        k: v.unsqueeze(0) + 1e-3 * torch.randn((n,) + v.shape, device=device, generator=gen) for k, v in base.items()
    }

    def score(params: dict, batch_size: int) -> int:
        hits = 0
        with torch.no_grad():
            for s in range(0, len(proxy), batch_size):
                logits = torch.func.functional_call(model, params, (proxy[s : s + batch_size],))
                hits += int((logits.argmax(1) == labels[s : s + batch_size]).sum())
        return hits

    def timed(make_params, batch_size: int) -> tuple[float, float]:
        total, mix = [], []
        for c in range(a.candidates + 1):
            coefficients = torch.softmax(torch.randn(n, generator=torch.Generator().manual_seed(c)), 0).to(device)
            sync()
            t0 = time.time()
            params = make_params(coefficients)
            sync()
            t1 = time.time()
            score(params, batch_size)
            sync()
            if c:
                total.append(time.time() - t0)
                mix.append(t1 - t0)
        return median(total), median(mix)

    per_tensor = lambda c: {k: torch.tensordot(c, v, dims=1) for k, v in stacked.items()}  # noqa: E731
    key = f"tensordot_b{a.batch_size}_s_per_candidate"
    out[key], out["tensordot_weighted_sum_s"] = timed(per_tensor, a.batch_size)
    names, shapes = list(stacked), [stacked[k].shape[1:] for k in stacked]
    sizes = [int(torch.Size(sh).numel()) for sh in shapes]
    flat = torch.cat([stacked.pop(k).reshape(n, -1) for k in names], 1)

    def flat_params(c):
        return {k: v.view(sh) for k, v, sh in zip(names, (c @ flat).split(sizes), shapes)}

    for bs in (a.batch_size, a.big_batch):
        out[f"flat_b{bs}_s_per_candidate"], out["flat_weighted_sum_s"] = timed(flat_params, bs)
    with torch.autocast(device, dtype=torch.bfloat16):  # measured only: changes proxy accuracies slightly
        out[f"flat_b{a.big_batch}_bf16_s_per_candidate"], _ = timed(flat_params, a.big_batch)
    out.update(
        n_ingredients=n,
        n_proxy=len(proxy),
        n_final=a.n_final,
        workers=a.workers,
        ingredient_stack_gb=flat.numel() * 4 / 1e9,
        torch=torch.__version__,
        timm=timm.__version__,
    )
    print(json.dumps(out, indent=1), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
