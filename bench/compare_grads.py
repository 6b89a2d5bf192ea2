"""How far the first optimizer step's gradients of recipe runs are apart (``bench/recipe_steps.py
--save-grads``): every run starts from the same weights and draws the same pairs, so two runs of
one path differ only by the GPU's run-to-run rounding, and a speed knob that keeps the algorithm
must differ from the plain path by no more than that spread.

    python bench/compare_grads.py DIR REFERENCE [--json out.json]   # DIR/<label>.pt; against REFERENCE

Per run against the reference: the largest element difference relative to the reference's
largest gradient element (over all trainable tensors), the cosine between the concatenated
gradients, and the relative norm of the difference.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict:
    if a.keys() != b.keys():
        raise ValueError(f"different tensors: {sorted(a.keys() ^ b.keys())[:4]}")
    scale = max(t.abs().max().item() for t in a.values())
    worst = max((a[k].double() - b[k].double()).abs().max().item() for k in a)
    dot = sum((a[k].double() * b[k].double()).sum().item() for k in a)
    na = sum(a[k].double().square().sum().item() for k in a) ** 0.5
    nb = sum(b[k].double().square().sum().item() for k in a) ** 0.5
    nd = sum((a[k].double() - b[k].double()).square().sum().item() for k in a) ** 0.5
    return {"max_abs_rel": worst / scale, "cosine": dot / (na * nb), "diff_norm_rel": nd / na, "tensors": len(a)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("reference")
    parser.add_argument("--json")
    a = parser.parse_args()
    reference = torch.load(a.dir / f"{a.reference}.pt")
    out = {}
    for path in sorted(a.dir.glob("*.pt")):
        if path.stem == a.reference:
            continue
        out[path.stem] = distance(reference, torch.load(path))
        d = out[path.stem]
        print(
            f"[grads] {path.stem} vs {a.reference}: max |diff| {d['max_abs_rel']:.2e} of the largest element, "
            f"cosine {d['cosine']:.8f}, |diff|/|g| {d['diff_norm_rel']:.2e}",
            flush=True,
        )
    if a.json:
        Path(a.json).write_text(json.dumps({"reference": a.reference, "runs": out}, indent=1))


if __name__ == "__main__":
    main()
