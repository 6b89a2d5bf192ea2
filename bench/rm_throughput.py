"""Reward-model throughput: Bradley–Terry training steps and RewardBench scoring, random weights.

Measures the computation the shipped rm recipe and the frozen evaluator run -- a
sequence-classification model with PEFT LoRA (r 16 on q,k,v,o,gate,up,down; score head
trained), pairs of sequences through one forward, loss -log σ(r_c - r_r), backward, AdamW
step on the trainable parameters; scoring = forward only -- without TRL or Snakemake, so the
numbers are the model's, not the harness's.

Model FLOPs (no recompute counted, as in PaLM's MFU): with a frozen base, training costs
``4 N + 8 n_layers d_model L`` per token (forward ``2 N + 4 n_layers d_model L``; backward
through activations only, the same again; LoRA's own weights are negligible) and scoring
``2 N + 4 n_layers d_model L``, N = non-embedding parameters, L = sequence length. MFU divides
by the GPU's dense bf16 peak (H200: 989 TFLOP/s datasheet).

Optimizer-step variants (``--variants``, issue 17): one step of ``--pairs`` pairs (64: the
rm recipe's micro-batch × grad-accum), the loss the mean over those pairs in every variant
(each micro-batch adds the sum of its pairs' losses / 64 before its backward, so gradient
accumulation weights pairs, not micro-batches), then one AdamW step:

- ``a``: every sequence 1,024 tokens, micro-batch 4 pairs, no gradient checkpointing;
- ``b8``, ``b8-gc``, ``b16-gc``: the same with 8 / 16 pairs per micro-batch (gc: gradient
  checkpointing, which bigger micro-batches need to fit);
- ``a-gc``: ``a`` with gradient checkpointing (the recipe's setting, for ``b*-gc``);
- on UltraFeedback-like lengths (``bench/pref_batches.py`` states and justifies the model):
  ``c1`` every micro-batch of 4 pairs padded to 1,024; ``c2`` random order, padded to the
  micro-batch's longest; ``c3`` length-grouped micro-batches under a token budget
  (``--token-budget``, default 8,192 = a's 4 pairs × 2 × 1,024), padded to their longest;
  ``c4`` padding-free packing of a micro-batch (same budget, real tokens) into one row with
  position ids restarting per sequence: attention block-diagonal (transformers' packed-sequence
  detection, or an explicit mask where it is missing), the reward read from each sequence's
  last hidden state through the score head.

Each variant: one micro-batch of warm-up, then ``--steps`` timed steps (median); skipped
when the elapsed time plus its estimate (from the last measured rate) passes ``--budget``.
Tokens/s and model TFLOP/s count real tokens only: Σ over sequences L (4 N + 6 N_lora +
8 n_layers d_model L), N_lora the trainable LoRA parameters (forward, input and weight
gradients: 6 per token). Peak GiB: ``torch.cuda.max_memory_allocated`` over warm-up and steps.

Usage:
    python bench/rm_throughput.py --arch smollm2 --config-dir results/models/smollm2-135m-instruct
        # CPU, embedded sizes
    python bench/rm_throughput.py --arch mistral-7b   # GPU, full-scale sizes
    python bench/rm_throughput.py --arch mistral-7b --variants default --json rm-steps.json  # GPU, ≈ 2 min
    python bench/rm_throughput.py --arch tiny --variants all   # CPU smoke, seconds
Prints a Markdown table; ``--json`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pref_batches as pb  # noqa: E402  (bench/ is not a package)

MISTRAL_7B = dict(
    model_type="mistral",
    vocab_size=32000,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    max_position_embeddings=32768,
    rms_norm_eps=1e-5,
    rope_theta=1e6,
    sliding_window=None,
    tie_word_embeddings=False,
    pad_token_id=0,
)
# A 2-layer Mistral, hidden 64, for the CPU smoke run and the test (tests/test_pref_bench.py).
TINY = dict(
    MISTRAL_7B,
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
)
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
H200_BF16_PEAK = 989e12


def build(arch: str, config_dir: str | None, device: str, dtype, gradient_checkpointing: bool, init_lora_weights=True):
    """PEFT LoRA r16 sequence classifier; ``init_lora_weights=False`` makes B random (tests)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForSequenceClassification

    if arch in ("mistral-7b", "tiny"):
        config = AutoConfig.for_model(**(MISTRAL_7B if arch == "mistral-7b" else TINY))
    else:
        config = AutoConfig.from_pretrained(config_dir)
    config.num_labels = 1
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForSequenceClassification.from_config(config, dtype=dtype, attn_implementation="sdpa")
    model.config.pad_token_id = config.pad_token_id if config.pad_token_id is not None else 0
    n_params = sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n and "score" not in n)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    lora = LoraConfig(
        r=16,
        lora_alpha=32,
        target_modules=TARGETS,
        modules_to_save=["score"],
        task_type="SEQ_CLS",
        init_lora_weights=init_lora_weights,
    )
    return get_peft_model(model, lora), config, n_params


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def train_steps(model, config, device, pairs: int, length: int, steps: int, warmup: int) -> float:
    """Seconds per optimizer step of ``pairs`` pairs of ``length``-token sequences."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5, weight_decay=0.001)
    ids = torch.randint(10, config.vocab_size, (2 * pairs, length), device=device)
    mask = torch.ones_like(ids)
    model.train()
    times = []
    for step in range(warmup + steps):
        sync(device)
        start = time.perf_counter()
        rewards = model(input_ids=ids, attention_mask=mask, use_cache=False).logits.squeeze(-1).float()
        chosen, rejected = rewards.chunk(2)
        loss = -torch.nn.functional.logsigmoid(chosen - rejected).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync(device)
        if step >= warmup:
            times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def score_batches(model, config, device, batch: int, length: int, repeats: int) -> float:
    """Seconds per forward of ``batch`` sequences of ``length`` tokens (median)."""
    ids = torch.randint(10, config.vocab_size, (batch, length), device=device)
    mask = torch.ones_like(ids)
    model.eval()
    times = []
    with torch.no_grad():
        for step in range(repeats + 1):
            sync(device)
            start = time.perf_counter()
            model(input_ids=ids, attention_mask=mask, use_cache=False)
            sync(device)
            if step:
                times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


VARIANTS = {
    v.name: v
    for v in (
        pb.Variant("a", "fixed", 4, note="today's path"),
        pb.Variant("a-gc", "fixed", 4, gc=True),
        pb.Variant("s1-gc", "fixed", 1, gc=True, note="the full profile's micro-batch 1, checkpointing"),
        pb.Variant("s1", "fixed", 1),
        pb.Variant("r1-gc", "pad_longest", 1, gc=True, note="the full profile on realistic lengths (masked)"),
        pb.Variant("r1n-gc", "pad_longest", 1, gc=True, mask=False, note="r1-gc without the mask"),
        *pb.SHARED_VARIANTS,
    )
}
DEFAULT_VARIANTS = "a,c1,c2,c3,c4,b8-gc,b16-gc,b8"  # b8 last: expected OOM (PITFALLS)


def quiet_checkpointing_warnings() -> None:
    """transformers 5.2x renamed gradient_checkpointing_* to activation_checkpointing_*; the old
    names, which every version has, warn (FutureWarning) on each call."""
    warnings.filterwarnings("ignore", category=FutureWarning)


def set_gradient_checkpointing(model, on: bool) -> None:
    """Switch checkpointing of the (PEFT-wrapped) transformer layers; non-reentrant, so frozen
    embeddings need no ``enable_input_require_grads``."""
    base = model.get_base_model()
    if on:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        base.gradient_checkpointing_disable()


def rm_rewards(model, batch: pb.Batch) -> torch.Tensor:
    """One reward per row (padded) or per packed sequence, shape (2 m,), chosen rows first.

    Padded: the model's own forward (its head reads the last non-pad token; ids are never the
    pad id 0). Packed: the backbone's hidden states with ``position_ids`` and no mask (or an
    explicit block-diagonal mask), the score head applied at each sequence's last token.
    """
    if batch.position_ids is None:
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
        return out.logits.squeeze(-1)
    inner = model.get_base_model()
    mask = None if pb.packed_masking_available() else pb.block_diagonal_mask(batch.position_ids)
    hidden = inner.model(
        input_ids=batch.input_ids, position_ids=batch.position_ids, attention_mask=mask, use_cache=False
    ).last_hidden_state
    return inner.score(hidden.flatten(0, 1)[batch.last]).squeeze(-1)


def rm_step_loss(model, pairs, batches, v: pb.Variant, max_length: int, device) -> torch.Tensor:
    """Forward + backward of one optimizer step; returns the mean Bradley–Terry loss over all
    pairs of ``batches`` (gradients accumulate with weight 1 / pairs per pair)."""
    n = sum(len(idx) for idx in batches)
    total = torch.zeros((), device=device)
    for idx in batches:
        rewards = rm_rewards(model, pb.micro_batch(v.layout, pairs, idx, max_length, device, v.mask)).float()
        chosen, rejected = rewards.chunk(2)
        loss = -torch.nn.functional.logsigmoid(chosen - rejected).sum() / n
        loss.backward()
        total += loss.detach()
    return total


def rm_flops(pairs: list[pb.Pair], n: int, n_lora: int, config) -> float:
    """Model FLOPs of one step on real tokens (module docstring)."""
    attn = 8 * config.num_hidden_layers * config.hidden_size
    return sum(len(s) * (4 * n + 6 * n_lora + attn * len(s)) for p in pairs for s in (p.chosen, p.rejected))


def run_variants(a, model, config, n: int, device: str) -> list[dict]:
    """Each variant of ``a.variants`` side by side on the same model (module docstring)."""
    n_lora = sum(p.numel() for name, p in model.named_parameters() if p.requires_grad and "lora_" in name)
    names = DEFAULT_VARIANTS if a.variants == "default" else ",".join(VARIANTS) if a.variants == "all" else a.variants
    return pb.run_variants(
        a,
        model,
        [VARIANTS[name] for name in names.split(",")],
        config.vocab_size,
        lambda v, pairs, batches: rm_step_loss(model, pairs, batches, v, a.max_length, device),
        lambda pairs: rm_flops(pairs, n, n_lora, config),
        lambda on: set_gradient_checkpointing(model, on),
        device,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=("smollm2", "mistral-7b", "tiny"), required=True)
    parser.add_argument("--config-dir", help="HF directory with config.json (smollm2)")
    parser.add_argument("--train", default=None, help="comma list of pairs x length, e.g. 1x1024,1x4096")
    parser.add_argument("--score", default=None, help="comma list of batch x length, e.g. 16x1024")
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default 3; 1 with --variants)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    parser.add_argument("--variants", default=None, help=f"comma list of {','.join(VARIANTS)}, 'default' or 'all'")
    parser.add_argument("--pairs", type=int, default=64, help="pairs per optimizer step (--variants)")
    parser.add_argument("--max-length", type=int, default=None, help="tokens (default 1,024; tiny: 128)")
    parser.add_argument("--token-budget", type=int, default=None, help="c3/c4 tokens per micro-batch (8 x max)")
    parser.add_argument("--budget", type=float, default=100.0, help="seconds for all variants after model build")
    a = parser.parse_args()
    quiet_checkpointing_warnings()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.set_num_threads(a.threads)
    gpu = device == "cuda"
    if a.variants:
        a.steps = a.steps or 1
        a.max_length = a.max_length or (128 if a.arch == "tiny" else 1024)
        a.token_budget = a.token_budget or 8 * a.max_length
        built = time.perf_counter()
        model, config, n = build(a.arch, a.config_dir, device, dtype, False)
        sync(device)
        built = time.perf_counter() - built
        name = torch.cuda.get_device_name() if gpu else f"CPU, {a.threads} thread(s)"
        results = run_variants(a, model, config, n, device)
        print(
            f"{a.arch} ({n / 1e6:.1f} M non-embedding parameters; built in {built:.0f} s), {name}, {dtype}, "
            f"LoRA r16 all projections + head; {a.pairs} pairs per step, max length {a.max_length}, "
            f"token budget {a.token_budget}; packed attention: "
            f"{'transformers packed-sequence detection' if pb.packed_masking_available() else 'explicit mask'}"
        )
        pb.print_variants(results)
        if a.json:
            with open(a.json, "w") as handle:
                json.dump(
                    {
                        "arch": a.arch,
                        "device": name,
                        "non_embedding_params": n,
                        "pairs": a.pairs,
                        "max_length": a.max_length,
                        "token_budget": a.token_budget,
                        "results": results,
                    },
                    handle,
                    indent=1,
                )
        return
    a.steps = a.steps or 3
    train_cases = [tuple(map(int, c.split("x"))) for c in (a.train or ("1x1024,1x4096" if gpu else "4x128")).split(",")]
    score_cases = [tuple(map(int, c.split("x"))) for c in (a.score or ("16x1024" if gpu else "16x128")).split(",")]
    results = []
    for checkpointing in (False, True) if gpu else (False,):
        model, config, n = build(a.arch, a.config_dir, device, dtype, checkpointing)
        per_token_attn = 4 * config.num_hidden_layers * config.hidden_size
        for pairs, length in train_cases:
            if gpu:
                torch.cuda.reset_peak_memory_stats()
            try:
                seconds = train_steps(model, config, device, pairs, length, a.steps, warmup=1)
            except torch.OutOfMemoryError:
                results.append(
                    {"phase": "train", "gc": checkpointing, "shape": f"{pairs} pairs x {length}", "error": "OOM"}
                )
                torch.cuda.empty_cache()
                continue
            tokens = 2 * pairs * length
            flops = tokens * (4 * n + 2 * per_token_attn * length)
            results.append(
                {
                    "phase": "train",
                    "gc": checkpointing,
                    "shape": f"{pairs} pairs x {length}",
                    "seconds": seconds,
                    "tokens_per_s": tokens / seconds,
                    "tflops": flops / seconds / 1e12,
                    "mfu": flops / seconds / H200_BF16_PEAK if gpu else None,
                    "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if gpu else None,
                }
            )
        if not checkpointing:
            for batch, length in score_cases:
                if gpu:
                    torch.cuda.reset_peak_memory_stats()
                seconds = score_batches(model, config, device, batch, length, a.steps)
                tokens = batch * length
                flops = tokens * (2 * n + per_token_attn * length)
                results.append(
                    {
                        "phase": "score",
                        "gc": False,
                        "shape": f"{batch} seqs x {length}",
                        "seconds": seconds,
                        "tokens_per_s": tokens / seconds,
                        "tflops": flops / seconds / 1e12,
                        "mfu": flops / seconds / H200_BF16_PEAK if gpu else None,
                        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if gpu else None,
                    }
                )
        del model
        if gpu:
            torch.cuda.empty_cache()
    name = torch.cuda.get_device_name() if gpu else f"CPU, {a.threads} thread(s)"
    print(f"{a.arch} ({n / 1e6:.1f} M non-embedding parameters), {name}, {dtype}, LoRA r16 all projections + head")
    print("| phase | gradient checkpointing | shape | s/step | tokens/s | model TFLOP/s | MFU (of 989) | peak GiB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['phase']} | {r['gc']} | {r['shape']} | {r['error']} | | | | |")
            continue
        mfu = "-" if r["mfu"] is None else f"{r['mfu']:.1%}"
        peak = "-" if r["peak_gib"] is None else f"{r['peak_gib']:.1f}"
        print(
            f"| {r['phase']} | {r['gc']} | {r['shape']} | {r['seconds']:.3f} | {r['tokens_per_s']:.0f} | "
            f"{r['tflops']:.2f} | {mfu} | {peak} |"
        )
    if a.json:
        with open(a.json, "w") as handle:
            json.dump({"arch": a.arch, "device": name, "non_embedding_params": n, "results": results}, handle, indent=1)


if __name__ == "__main__":
    main()
