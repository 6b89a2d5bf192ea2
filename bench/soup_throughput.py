"""Soup throughput: seconds per candidate soup, and seconds to score the final split.

Fast path (what recipes/soup/train.py does): ingredients stacked once per tensor on the
accelerator, proxy images preprocessed once; a candidate = one ``tensordot`` over the stack
plus one forward pass (``torch.func.functional_call``). Naive path, in the same run: per
candidate, reload every ingredient file from disk and sum it on the CPU, ``load_state_dict``,
and preprocess the proxy images again from PIL. Full scoring: the frozen evaluator's own path
(``load_images`` from JPEG files + ``predict``) on ``--n-final`` images, in one process and
(``--workers N``) with N decoding processes, checked to give the same tensors.

Usage:
    python bench/soup_throughput.py --fixed-start results/models/soup-digits \
        --proxy results/soup/assets/public/proxy.jsonl
    python bench/soup_throughput.py --arch ViT-B-32 --n-ingredients 72 --n-proxy 2000 --n-final 10000   # GPU
    ... --workers 14 --flat --big-batch 2000 --skip-naive   # 2026-12-01: decoding workers, flat candidate
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
        state = {
            k: (v + 0.001 * torch.randn_like(v) if v.is_floating_point() else v).contiguous() for k, v in base.items()
        }
        names.append(f"ingredients/model_{i}.pt")
        torch.save(state, root / names[-1])
    (root / "config.json").write_text(json.dumps({"model_name": arch, "n_classes": n_classes, "ingredients": names}))
    return root


def _write_jpegs(args) -> None:
    from PIL import Image

    base, folder, indices = args
    for i in indices:
        Image.fromarray(base).rotate(i % 360).save(folder / f"{i}.jpeg", quality=90)


def random_images(root: Path, n: int, n_classes: int, size=(500, 375), processes: int = 1) -> Path:
    """``n`` random JPEG files (ImageNet-like size) and their items file (written by
    ``processes`` processes; the same files either way)."""
    from concurrent.futures import ProcessPoolExecutor

    (root / "img").mkdir(parents=True)
    gen = torch.Generator().manual_seed(1)
    base = (torch.rand(size[1], size[0], 3, generator=gen) * 255).to(torch.uint8).numpy()
    chunks = [(base, root / "img", range(k, n, processes)) for k in range(processes)]
    if processes > 1:
        with ProcessPoolExecutor(processes) as pool:
            list(pool.map(_write_jpegs, chunks))
    else:
        _write_jpegs(chunks[0])
    items = [{"id": str(i), "file": f"img/{i}.jpeg", "label": i % n_classes} for i in range(n)]
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
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        help="> 0: also score the final split with this many decoding workers (evaluator's workers)",
    )
    p.add_argument(
        "--flat",
        action="store_true",
        help="also time a candidate as one matrix-vector product over all ingredients flattened into one buffer",
    )
    p.add_argument(
        "--big-batch", type=int, default=0, help="> 0: also time the flat candidate's forward at this batch size"
    )
    p.add_argument("--skip-naive", action="store_true", help="skip the naive per-candidate path (measured before)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = "cuda" if torch.cuda.is_available() else "cpu"
    scratch = Path(tempfile.mkdtemp(prefix="soup-bench-"))
    t0 = time.time()
    fixed = (
        Path(a.fixed_start) if a.fixed_start else random_start(scratch / "start", a.arch, a.n_ingredients, a.n_classes)
    )
    proxy = Path(a.proxy) if a.proxy else random_images(scratch / "proxy", a.n_proxy, a.n_classes, processes=a.threads)
    print(f"[setup] {time.time() - t0:.0f} s", flush=True)
    model, preprocess = create_classifier(fixed)
    model.to(device).eval()
    paths = ingredient_paths(fixed)
    n = len(paths)
    items = evaluator.read_items(proxy)
    labels = torch.tensor([it["label"] for it in items], device=device)
    results = {
        "device": torch.cuda.get_device_name() if device == "cuda" else f"CPU, {a.threads} thread(s)",
        "n_ingredients": n,
        "n_proxy": len(items),
    }

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
                logits = torch.func.functional_call(model, params, (images[s : s + a.batch_size],))
                hits += int((logits.argmax(1) == labels[s : s + a.batch_size]).sum())
        sync(device)
        if c:
            times.append(time.time() - t)
    results["fast_s_per_candidate"] = sorted(times)[len(times) // 2]
    if a.flat:  # one buffer [n, P]: a candidate is one matrix-vector product, then views per tensor
        names = list(stacked)
        shapes = [stacked[k].shape[1:] for k in names]
        flat = torch.cat([stacked.pop(k).reshape(n, -1) for k in names], 1)
        sizes = [int(torch.Size(sh).numel()) for sh in shapes]
        sync(device)
        for batch_size in [a.batch_size] + ([a.big_batch] if a.big_batch else []):
            times, mix_times = [], []
            for c in range(a.candidates + 1):
                coefficients = torch.softmax(torch.randn(n, generator=torch.Generator().manual_seed(c)), 0).to(device)
                sync(device)
                t = time.time()
                mixed = coefficients @ flat
                params = {k: v.view(sh) for k, v, sh in zip(names, mixed.split(sizes), shapes)}
                sync(device)
                t_mix = time.time() - t
                with torch.no_grad():
                    hits = 0
                    for s in range(0, len(images), batch_size):
                        logits = torch.func.functional_call(model, params, (images[s : s + batch_size],))
                        hits += int((logits.argmax(1) == labels[s : s + batch_size]).sum())
                sync(device)
                if c:
                    times.append(time.time() - t)
                    mix_times.append(t_mix)
            results[f"flat_b{batch_size}_s_per_candidate"] = sorted(times)[len(times) // 2]
            results[f"flat_b{batch_size}_weighted_sum_s"] = sorted(mix_times)[len(mix_times) // 2]
        del flat
    del stacked
    if device == "cuda":
        torch.cuda.empty_cache()

    # naive path: reload every ingredient, re-preprocess every image, per candidate
    times = []
    for c in range(0 if a.skip_naive else a.naive_candidates):
        coefficients = torch.softmax(torch.randn(n, generator=torch.Generator().manual_seed(c)), 0)
        sync(device)
        t = time.time()
        total = None
        for w, q in zip(coefficients.tolist(), paths):
            state = load_state(q)
            total = (
                {k: w * v.float() for k, v in state.items()}
                if total is None
                else {k: total[k] + w * v.float() for k, v in state.items()}
            )
        model.load_state_dict(total)
        batch = evaluator.load_images(proxy, items, preprocess)
        with torch.no_grad():
            evaluator.predict(model, batch, a.batch_size)
        sync(device)
        times.append(time.time() - t)
    if times:
        results["naive_s_per_candidate"] = sorted(times)[len(times) // 2]
        results["speedup"] = results["naive_s_per_candidate"] / results["fast_s_per_candidate"]

    if a.n_final:
        final = random_images(scratch / "final", a.n_final, a.n_classes, processes=a.threads)
        final_items = evaluator.read_items(final)
        reference = None
        for workers in [0] + ([a.workers] if a.workers else []):
            key = "full_scoring" if not workers else f"full_scoring_{workers}workers"
            sync(device)
            t = time.time()
            batch = evaluator.load_images(final, final_items, preprocess, workers)
            t_pre = time.time() - t
            with torch.no_grad():
                predictions = evaluator.predict(model, batch, a.batch_size)
            sync(device)
            results.update({f"{key}_s": time.time() - t, f"{key}_preprocess_s": t_pre}, n_final=a.n_final)
            if reference is None:
                reference = batch
            else:
                results[f"{key}_same_tensors"] = bool(torch.equal(reference, batch))
            del batch, predictions
    print(json.dumps(results, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
