"""Soup throughput: seconds per candidate soup, and seconds to score the final split.

Fast path (what recipes/soup/train.py does): ingredients stacked once per tensor on the
accelerator, proxy images preprocessed once; a candidate = one ``tensordot`` over the stack
plus one forward pass (``torch.func.functional_call``). Naive path, in the same run: per
candidate, reload every ingredient file from disk and sum it on the CPU, ``load_state_dict``,
and preprocess the proxy images again from PIL. Full scoring: the frozen evaluator's own path
(``load_images`` from JPEG files + ``predict``) on ``--n-final`` images.

Usage:
    python bench/soup_throughput.py --fixed-start results/models/soup-digits --proxy results/soup/assets/public/proxy.jsonl
    python bench/soup_throughput.py --arch ViT-B-32 --n-ingredients 72 --n-proxy 2000 --n-final 10000   # GPU
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from replaykit.tasks.soup import evaluator
from replaykit.tasks.soup.model import ImageClassifier, create_classifier, ingredient_paths, load_state


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def random_start(root: Path, arch: str, n: int, n_classes: int) -> Path:
    """A fixed start of ``n`` random ingredients of open_clip ``arch`` (fp32 .pt files)."""
    import open_clip

    (root / "ingredients").mkdir(parents=True)
    torch.manual_seed(0)
    clip = open_clip.create_model(arch)
    base = ImageClassifier(clip.visual, clip.visual.output_dim, n_classes).state_dict()
    names = []
    for i in range(n):
        state = {k: (v + 0.001 * torch.randn_like(v) if v.is_floating_point() else v).contiguous() for k, v in base.items()}
        names.append(f"ingredients/model_{i}.pt")
        torch.save(state, root / names[-1])
    (root / "config.json").write_text(json.dumps({"model_name": arch, "n_classes": n_classes, "ingredients": names}))
    return root


def random_images(root: Path, n: int, n_classes: int, size=(500, 375)) -> Path:
    """``n`` random JPEG files (ImageNet-like size) and their items file."""
    from PIL import Image

    (root / "img").mkdir(parents=True)
    gen = torch.Generator().manual_seed(1)
    base = (torch.rand(size[1], size[0], 3, generator=gen) * 255).to(torch.uint8).numpy()
    items = []
    for i in range(n):
        Image.fromarray(base).rotate(i % 360).save(root / "img" / f"{i}.jpeg", quality=90)
        items.append({"id": str(i), "file": f"img/{i}.jpeg", "label": i % n_classes})
    path = root / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in items))
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fixed-start", help="an existing soup fixed start (else random --arch ingredients)")
    p.add_argument("--proxy", help="an existing proxy items file (else random JPEGs)")
    p.add_argument("--arch", default="ViT-B-32")
    p.add_argument("--n-ingredients", type=int, default=72)
    p.add_argument("--n-classes", type=int, default=1000)
    p.add_argument("--n-proxy", type=int, default=2000)
    p.add_argument("--n-final", type=int, default=0, help="images for the full-scoring measurement (0: skip)")
    p.add_argument("--candidates", type=int, default=5)
    p.add_argument("--naive-candidates", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = "cuda" if torch.cuda.is_available() else "cpu"
    scratch = Path(tempfile.mkdtemp(prefix="soup-bench-"))
    t0 = time.time()
    fixed = Path(a.fixed_start) if a.fixed_start else random_start(scratch / "start", a.arch, a.n_ingredients, a.n_classes)
    proxy = Path(a.proxy) if a.proxy else random_images(scratch / "proxy", a.n_proxy, a.n_classes)
    print(f"[setup] {time.time() - t0:.0f} s", flush=True)
    model, preprocess = create_classifier(fixed)
    model.to(device).eval()
    paths = ingredient_paths(fixed)
    n = len(paths)
    items = evaluator.read_items(proxy)
    labels = torch.tensor([it["label"] for it in items], device=device)
    results = {"device": torch.cuda.get_device_name() if device == "cuda" else f"CPU, {a.threads} thread(s)",
               "n_ingredients": n, "n_proxy": len(items)}

    # fast path: stack + cache once, then tensordot + forward per candidate
    sync(device)
    t = time.time()
    states = [load_state(q) for q in paths]
    stacked = {k: torch.stack([s[k].float() for s in states]).to(device) for k in states[0]}
    del states
    images = evaluator.load_images(proxy, items, preprocess).to(device)
    sync(device)
    results["fast_setup_s"] = time.time() - t
    times = []
    for c in range(a.candidates + 1):
        coefficients = torch.softmax(torch.randn(n, generator=torch.Generator().manual_seed(c)), 0).to(device)
        sync(device)
        t = time.time()
        params = {k: torch.tensordot(coefficients, v, dims=1) for k, v in stacked.items()}
        with torch.no_grad():
            hits = 0
            for s in range(0, len(images), a.batch_size):
                logits = torch.func.functional_call(model, params, (images[s:s + a.batch_size],))
                hits += int((logits.argmax(1) == labels[s:s + a.batch_size]).sum())
        sync(device)
        if c:
            times.append(time.time() - t)
    results["fast_s_per_candidate"] = sorted(times)[len(times) // 2]
    del stacked
    if device == "cuda":
        torch.cuda.empty_cache()

    # naive path: reload every ingredient, re-preprocess every image, per candidate
    times = []
    for c in range(a.naive_candidates):
        coefficients = torch.softmax(torch.randn(n, generator=torch.Generator().manual_seed(c)), 0)
        sync(device)
        t = time.time()
        total = None
        for w, q in zip(coefficients.tolist(), paths):
            state = load_state(q)
            total = {k: w * v.float() for k, v in state.items()} if total is None else {k: total[k] + w * v.float() for k, v in state.items()}
        model.load_state_dict(total)
        batch = evaluator.load_images(proxy, items, preprocess)
        with torch.no_grad():
            evaluator.predict(model, batch, a.batch_size)
        sync(device)
        times.append(time.time() - t)
    results["naive_s_per_candidate"] = sorted(times)[len(times) // 2]
    results["speedup"] = results["naive_s_per_candidate"] / results["fast_s_per_candidate"]

    if a.n_final:
        final = random_images(scratch / "final", a.n_final, a.n_classes)
        final_items = evaluator.read_items(final)
        sync(device)
        t = time.time()
        batch = evaluator.load_images(final, final_items, preprocess)
        t_pre = time.time() - t
        with torch.no_grad():
            evaluator.predict(model, batch, a.batch_size)
        sync(device)
        results.update(full_scoring_s=time.time() - t, full_scoring_preprocess_s=t_pre, n_final=a.n_final)
    print(json.dumps(results, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
