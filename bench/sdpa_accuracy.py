"""Are PyTorch's sdpa backends the same attention? Each backend's output and input gradients
against a float64 reference (the math backend on float64 copies), for Mistral-7B's attention
in bf16 (32 heads, head 128, causal, no mask) at a length-grouped micro-batch's shape, and
each backend run twice (its run-to-run spread). Issue 35: the rm/dpo profiles' knob
``cudnn_attention: false`` swaps cuDNN's kernel for flash attention.

    python bench/sdpa_accuracy.py --json sdpa-accuracy.json     # GPU, seconds

Errors are the largest absolute difference over the tensor divided by the reference tensor's
largest absolute value.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}  # fmt: skip


def attention(q, k, v, grad, backend=None):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    if backend is None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        with sdpa_kernel([backend]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.backward(grad)
    return [out.detach(), q.grad, k.grad, v.grad]


def rel(a, ref) -> float:
    return ((a.double() - ref).abs().max() / ref.abs().max()).item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--length", type=int, default=777)
    parser.add_argument("--json")
    a = parser.parse_args()
    torch.manual_seed(0)
    shape = (a.rows, 32, a.length, 128)
    q, k, v, grad = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    with sdpa_kernel([SDPBackend.MATH]):
        ref = attention(*(t.double() for t in (q, k, v, grad)))
    names = ("out", "dq", "dk", "dv")
    out = {"shape": list(shape), "torch": torch.__version__}
    for name, backend in BACKENDS.items():
        try:
            first = attention(q, k, v, grad, backend)
            second = attention(q, k, v, grad, backend)
        except RuntimeError as error:
            out[name] = {"error": str(error).splitlines()[0][:160]}
            print(f"[sdpa-accuracy] {name}: {out[name]['error']}", flush=True)
            continue
        out[name] = {
            "vs_float64": {n: rel(x, r) for n, x, r in zip(names, first, ref, strict=True)},
            "run_to_run": {n: rel(x, y.double()) for n, x, y in zip(names, first, second, strict=True)},
        }
        print(f"[sdpa-accuracy] {name}: {json.dumps(out[name])}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
