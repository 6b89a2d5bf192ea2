"""DPO throughput: sigmoid-DPO optimizer steps at Mistral-7B size, random weights, no TRL.

The computation of the dpo recipe's step (SPEC: dpo) written out in plain PyTorch + PEFT, so
the numbers are the model's, not a trainer's: a causal LM with LoRA r 128, α 128 on
q,k,v,o,gate,up,down (dropout 0 here; the recipe's 0.05 costs one elementwise op); per
micro-batch the chosen and rejected sequences go through one forward (chosen rows first);
the reference log-probs come from the same model with its adapter disabled
(``with model.disable_adapter()``, no_grad); per sequence log π(y|x) = Σ over response
tokens of log p(token | prefix), prompt positions masked; loss
``-log σ(β [(π_c - ref_c) - (π_r - ref_r)])``, β 0.01, averaged over all ``--pairs`` (16)
pairs of the step (each micro-batch adds its pairs' sum / 16 before its backward); one AdamW
step (lr 0: the same work, the weights stay, so every variant's loss is the same model's).
The base is bf16, not the recipe's NF4 (bitsandbytes is not on the device; PITFALLS has
TRL's NF4 numbers).

Variants (``--variants``; default all but ``b8``, which runs out of memory):

- ``a-full``: every sequence 1,024 tokens, micro-batch 4 pairs (SPEC: 4 × accum 4), no
  gradient checkpointing, log-probs from full-vocabulary float32 log-softmax of all
  positions -- the straightforward path; ``a-full-gc``: the same with checkpointing (the
  recipe's setting);
- ``a``, ``a-gc``: the same, but hidden states sliced to the positions that predict response
  tokens before ``lm_head`` (no logits for prompt or padding positions);
- ``b8``, ``b8-gc``, ``b16-gc``: bigger micro-batches (sliced);
- on UltraFeedback-like lengths (``bench/pref_batches.py`` states the model; sliced):
  ``c1`` padded to 1,024; ``c2`` padded to each micro-batch's longest, random order; ``c3``
  length-grouped under ``--token-budget`` (default 8,192 = a's 4 pairs × 2 × 1,024) padded
  to their longest; ``c4`` packed into one row per micro-batch (same budget, real tokens),
  position ids restarting per sequence, block-diagonal attention.

Model FLOPs per step, real tokens only (no recompute counted, as in PaLM's MFU), N the
non-embedding parameters without ``lm_head``, N_lora the LoRA parameters, V the vocabulary,
for each sequence of L tokens of which R are response tokens:
``L (4 N + 6 N_lora + 2 N + 12 n_layers d_model L) + 6 d_model V R`` -- policy forward and
backward through activations with a frozen base 4 N (forward 2 N, input gradients 2 N), the
LoRA weights forward + input and weight gradients 6 N_lora, the reference forward 2 N;
attention ``4 n_layers d L`` per token forward, counted twice for the policy (forward,
backward) and once for the reference (the backward's second pair of attention matmuls is
not counted: ≤ 2 % of the total at L = 1,024); ``lm_head`` only where a log-prob is needed
(policy forward + backward 4 d V, reference 2 d V per response token). MFU divides by the
H200's dense bf16 peak, 989 TFLOP/s (datasheet; the measured matmul ceiling is 766).

Usage:
    python bench/dpo_throughput.py --arch mistral-7b --json dpo-steps.json   # GPU, ≈ 1.5 min
    python bench/dpo_throughput.py --arch tiny                               # CPU smoke, seconds
Prints a Markdown table; ``--json`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pref_batches as pb  # noqa: E402  (bench/ is not a package)
from rm_throughput import (  # noqa: E402
    MISTRAL_7B,
    TARGETS,
    TINY,
    quiet_checkpointing_warnings,
    set_gradient_checkpointing,
    sync,
)

VARIANTS = {
    v.name: v
    for v in (
        pb.Variant("a-full", "fixed", 4, sliced=False, note="straightforward: full-vocabulary logits"),
        pb.Variant("a-full-gc", "fixed", 4, gc=True, sliced=False, note="the recipe's checkpointing"),
        pb.Variant("a", "fixed", 4, note="logits at response positions only"),
        pb.Variant("a-gc", "fixed", 4, gc=True),
        *pb.SHARED_VARIANTS,
    )
}
DEFAULT_VARIANTS = "a-full,a,c1,c2,c3,c4,a-full-gc,a-gc,b8-gc,b16-gc"


def build(arch: str, device: str, dtype, init_lora_weights=True):
    """PEFT LoRA causal LM (r 128, α 128; tiny: r 8, α 8); ``init_lora_weights=False``: random B (tests).

    Returns (model, config, N without embeddings and lm_head).
    """
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**(MISTRAL_7B if arch == "mistral-7b" else TINY))
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    n_params = sum(
        p.numel() for name, p in model.named_parameters() if "embed_tokens" not in name and "lm_head" not in name
    )
    r = 128 if arch == "mistral-7b" else 8
    lora = LoraConfig(
        r=r, lora_alpha=r, target_modules=TARGETS, task_type="CAUSAL_LM", init_lora_weights=init_lora_weights
    )
    return get_peft_model(model, lora), config, n_params


def sequence_logps(model, batch: pb.Batch, sliced: bool) -> torch.Tensor:
    """Σ over response tokens of log p(token | prefix), one float32 per sequence, shape (2 m,).

    ``sliced``: the backbone's hidden states at the positions that predict response tokens go
    through ``lm_head`` (K × V logits); else the model's logits at every position (rows × T × V)
    and a full float32 log-softmax, gathered at the same places.
    """
    mask = batch.attention_mask
    if batch.position_ids is not None and not pb.packed_masking_available():
        mask = pb.block_diagonal_mask(batch.position_ids)
    inputs = dict(input_ids=batch.input_ids, attention_mask=mask, position_ids=batch.position_ids, use_cache=False)
    if sliced:
        inner = model.get_base_model()
        hidden = inner.model(**inputs).last_hidden_state
        logits = inner.lm_head(hidden.flatten(0, 1)[batch.src]).float()
        per_token = -torch.nn.functional.cross_entropy(logits, batch.tgt, reduction="none")
    else:
        logp = model(**inputs).logits.float().log_softmax(-1).flatten(0, 1)
        per_token = logp[batch.src, batch.tgt]
    return torch.zeros(batch.n_seqs, device=per_token.device).index_add(0, batch.seq, per_token)


def dpo_losses(policy: torch.Tensor, reference: torch.Tensor, beta: float) -> torch.Tensor:
    """Sigmoid DPO loss per pair from (2 m,) sequence log-probs, chosen first."""
    pc, pr = policy.chunk(2)
    rc, rr = reference.chunk(2)
    return -torch.nn.functional.logsigmoid(beta * ((pc - rc) - (pr - rr)))


def dpo_step_loss(model, pairs, batches, v: pb.Variant, beta: float, max_length: int, device) -> torch.Tensor:
    """Forward (reference, then policy) + backward of one optimizer step; the mean DPO loss
    over all pairs of ``batches`` (gradients accumulate with weight 1 / pairs per pair)."""
    n = sum(len(idx) for idx in batches)
    total = torch.zeros((), device=device)
    for idx in batches:
        batch = pb.micro_batch(v.layout, pairs, idx, max_length, device, v.mask)
        with torch.no_grad(), model.disable_adapter():
            reference = sequence_logps(model, batch, v.sliced)
        loss = dpo_losses(sequence_logps(model, batch, v.sliced), reference, beta).sum() / n
        loss.backward()
        total += loss.detach()
    return total


def dpo_flops(pairs: list[pb.Pair], n: int, n_lora: int, config) -> float:
    """Model FLOPs of one step on real tokens (module docstring)."""
    attn = 12 * config.num_hidden_layers * config.hidden_size
    head = 6 * config.hidden_size * config.vocab_size
    total = 0
    for p in pairs:
        for s in (p.chosen, p.rejected):
            total += len(s) * (6 * n + 6 * n_lora + attn * len(s)) + head * (len(s) - p.prompt_len)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=("mistral-7b", "tiny"), required=True)
    parser.add_argument("--variants", default="default", help=f"comma list of {','.join(VARIANTS)}, default or all")
    parser.add_argument("--pairs", type=int, default=16, help="pairs per optimizer step")
    parser.add_argument("--beta", type=float, default=0.01)
    parser.add_argument("--max-length", type=int, default=None, help="tokens (default 1,024; tiny: 128)")
    parser.add_argument("--token-budget", type=int, default=None, help="c3/c4 tokens per micro-batch (8 x max)")
    parser.add_argument("--steps", type=int, default=1, help="timed steps per variant (median)")
    parser.add_argument("--budget", type=float, default=70.0, help="seconds for all variants after model build")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    a = parser.parse_args()
    quiet_checkpointing_warnings()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = device == "cuda"
    dtype = torch.bfloat16 if gpu else torch.float32
    torch.set_num_threads(a.threads)
    a.max_length = a.max_length or (128 if a.arch == "tiny" else 1024)
    a.token_budget = a.token_budget or 8 * a.max_length
    built = time.perf_counter()
    model, config, n = build(a.arch, device, dtype)
    sync(device)
    built = time.perf_counter() - built
    n_lora = sum(p.numel() for name, p in model.named_parameters() if p.requires_grad and "lora_" in name)
    names = DEFAULT_VARIANTS if a.variants == "default" else ",".join(VARIANTS) if a.variants == "all" else a.variants
    results = pb.run_variants(
        a,
        model,
        [VARIANTS[name] for name in names.split(",")],
        config.vocab_size,
        lambda v, pairs, batches: dpo_step_loss(model, pairs, batches, v, a.beta, a.max_length, device),
        lambda pairs: dpo_flops(pairs, n, n_lora, config),
        lambda on: set_gradient_checkpointing(model, on),
        device,
    )
    name = torch.cuda.get_device_name() if gpu else f"CPU, {a.threads} thread(s)"
    print(
        f"{a.arch} ({n / 1e6:.1f} M non-embedding parameters, {n_lora / 1e6:.1f} M LoRA; built in {built:.0f} s), "
        f"{name}, {dtype}; sigmoid DPO β {a.beta}, {a.pairs} pairs per step, max length {a.max_length}, "
        f"token budget {a.token_budget}; packed attention: "
        f"{'transformers packed-sequence detection' if pb.packed_masking_available() else 'explicit mask'}"
    )
    pb.print_variants(results)
    if a.json:
        with open(a.json, "w") as handle:
            meta = {"arch": a.arch, "device": name, "non_embedding_params": n, "lora_params": n_lora}
            meta.update(pairs=a.pairs, beta=a.beta, max_length=a.max_length, token_budget=a.token_budget)
            json.dump({**meta, "results": results}, handle, indent=1)


if __name__ == "__main__":
    main()
