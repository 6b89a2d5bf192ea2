"""One soup candidate (greedy soup's unit of work): the weighted sum over 72 stacked ingredients
(the recipe's ``soup``, ``recipes/soup/train.py``) and a forward over 2,000 cached proxy images,
in the recipe's float32 and in the two faster number formats, with how many predictions change.

The tower is timm's ``vit_base_patch32_224`` (ViT-B/32's shape, 88 M parameters, random
weights; open_clip is not on the device), the ingredients 72 perturbed copies of its weights
on the GPU (25 GB), the proxy images random tensors of the preprocessed shape (decoding is
done once per replay and not part of a candidate). Variants, each over the same ``--candidates``
random coefficient vectors:

- ``float32``: the recipe (PyTorch's default matmul precision: full float32);
- ``tf32``: TF32 matmuls (``torch.backends.cuda.matmul.allow_tf32``), as 2026-12-01's bench ran;
- ``bf16``: TF32 + bfloat16 autocast of the forward;
- ``flat``: float32, the weighted sum as one matrix-vector product over a flat ``[72, P]``
  buffer (the same bytes as ``soup``? compared with ``torch.equal``).

Prints seconds per candidate (median) and of the weighted sum, and the proxy predictions that
differ from ``float32``'s. Usage: ``python bench/soup_candidate.py --json soup.json`` (GPU, ~1 min).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src")]


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main() -> None:
    import timm

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-ingredients", type=int, default=72)
    p.add_argument("--n-proxy", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=500, help="the full profile's batch_size")
    p.add_argument("--candidates", type=int, default=5)
    p.add_argument("--tiny", action="store_true", help="a 2-layer ViT-B/32 of width 64, 4 ingredients, 40 images (CPU)")
    p.add_argument("--json")
    a = p.parse_args()
    if a.tiny:
        a.n_ingredients, a.n_proxy, a.batch_size, a.candidates = 4, 40, 20, 2
    spec = importlib.util.spec_from_file_location("soup_recipe_train", ROOT / "recipes" / "soup" / "train.py")
    recipe = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = recipe
    spec.loader.exec_module(recipe)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    size = {"depth": 2, "embed_dim": 64, "num_heads": 2} if a.tiny else {}
    model = timm.create_model("vit_base_patch32_224", pretrained=False, num_classes=1000, **size).to(device).eval()
    base = {k: v.detach().float() for k, v in model.state_dict().items()}
    n = a.n_ingredients
    gen = torch.Generator(device=device).manual_seed(0)
    stacked = {
        k: v.unsqueeze(0) + 1e-3 * torch.randn((n, *v.shape), device=device, generator=gen) for k, v in base.items()
    }
    proxy = torch.randn(a.n_proxy, 3, 224, 224, device=device, generator=gen)
    names, shapes = list(stacked), [stacked[k].shape[1:] for k in stacked]
    sizes = [int(torch.Size(sh).numel()) for sh in shapes]
    flat = torch.cat([stacked[k].reshape(n, -1) for k in names], 1)

    def flat_soup(c):
        return {k: v.view(sh) for k, v, sh in zip(names, (c @ flat).split(sizes), shapes)}

    def predict(params) -> torch.Tensor:
        with torch.no_grad():
            return torch.cat(
                [
                    torch.func.functional_call(model, params, (proxy[s : s + a.batch_size],)).argmax(1)
                    for s in range(0, len(proxy), a.batch_size)
                ]
            )

    coefficients = [
        torch.softmax(torch.randn(n, generator=torch.Generator().manual_seed(c)), 0).to(device)
        for c in range(a.candidates + 1)
    ]
    rows, reference = [], None
    for variant in ("float32", "tf32", "bf16", "flat"):
        torch.backends.cuda.matmul.allow_tf32 = variant in ("tf32", "bf16")
        mix = flat_soup if variant == "flat" else recipe.soup
        total, summed, predictions, same_bytes = [], [], [], True
        for i, c in enumerate(coefficients):
            sync()
            t0 = time.perf_counter()
            params = mix(stacked, c) if mix is recipe.soup else mix(c)
            sync()
            t1 = time.perf_counter()
            with torch.autocast(device, dtype=torch.bfloat16, enabled=variant == "bf16"):
                predictions.append(predict(params))
            sync()
            if i:  # the first candidate is a warm-up
                total.append(time.perf_counter() - t0)
                summed.append(t1 - t0)
            if variant == "flat":
                plain = recipe.soup(stacked, c)
                same_bytes &= all(torch.equal(params[k], plain[k]) for k in plain)
        predictions = torch.cat(predictions[1:])
        reference = predictions if reference is None else reference
        row = {
            "variant": variant,
            "s_per_candidate": sorted(total)[len(total) // 2],
            "weighted_sum_s": sorted(summed)[len(summed) // 2],
            "predictions_changed": int((predictions != reference).sum()),
            "predictions": len(predictions),
        }
        if variant == "flat":
            row["same_bytes_as_soup"] = bool(same_bytes)
        rows.append(row)
        print(
            f"[soup] {variant:8s} {row['s_per_candidate']:.4f} s/candidate "
            f"(weighted sum {row['weighted_sum_s']:.4f} s); "
            f"{row['predictions_changed']} of {row['predictions']} predictions differ from float32's"
            + (f"; same bytes as soup(): {same_bytes}" if variant == "flat" else ""),
            flush=True,
        )
    torch.backends.cuda.matmul.allow_tf32 = False
    out = {"n_ingredients": n, "n_proxy": a.n_proxy, "batch_size": a.batch_size, "device": device, "rows": rows}
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
