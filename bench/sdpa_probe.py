"""Which fused attention kernel PyTorch's sdpa picks for the rm/dpo shapes, and what a new
sequence length costs it (issue 35: rm's realistic-length steps ran slower per token than the
fixed 1,024-token shape; a kernel that builds a plan per shape -- cuDNN's -- would explain it).

For Mistral-7B's attention (32 query heads, 8 key/value heads expanded, head 128, bf16, causal):
the backend ``torch._fused_sdp_choice`` reports with no mask and with a padding mask, then
forward + backward at 24 lengths never seen before (400-1,000 tokens, 2 rows) against the same
24 calls at one length seen before. Prints one line per measurement; ``--json`` writes them.

    python bench/sdpa_probe.py --json sdpa.json      # GPU, ~10 s
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

BACKENDS = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}


def qkv(rows: int, length: int, device):
    shape = (rows, 32, length, 128)
    return [torch.randn(shape, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]


def step(rows: int, length: int, device, mask=None) -> None:
    q, k, v = qkv(rows, length, device)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
    out.sum().backward()


def timed(calls, device) -> float:
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for call in calls:
        call()
    torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    a = parser.parse_args()
    device = torch.device("cuda")
    out = {"torch": torch.__version__, "cudnn_sdp_enabled": torch.backends.cuda.cudnn_sdp_enabled()}
    q, k, v = qkv(2, 777, device)
    out["backend_causal_no_mask"] = BACKENDS.get(int(torch._fused_sdp_choice(q, k, v, is_causal=True)), "?")
    mask = torch.ones(2, 1, 777, 777, dtype=torch.bool, device=device).tril()
    out["backend_with_mask"] = BACKENDS.get(int(torch._fused_sdp_choice(q, k, v, attn_mask=mask)), "?")
    step(2, 700, device)  # warm-up, and the length the second timing repeats
    lengths = list(range(401, 1001, 25))  # 24 lengths not used before (mean 688)
    out["new_lengths_s"] = timed([lambda n=n: step(2, n, device) for n in lengths], device)
    out["same_length_s"] = timed([lambda: step(2, 700, device) for _ in lengths], device)
    out["calls"] = len(lengths)
    for key, value in out.items():
        print(f"[sdpa] {key}: {value}", flush=True)
    if a.json:
        with open(a.json, "w") as handle:
            json.dump(out, handle, indent=1)


if __name__ == "__main__":
    main()
