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

Usage:
    python bench/rm_throughput.py --arch smollm2 --config-dir results/models/smollm2-135m-instruct
        # CPU, embedded sizes
    python bench/rm_throughput.py --arch mistral-7b   # GPU, full-scale sizes
Prints a Markdown table; ``--json`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

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
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
H200_BF16_PEAK = 989e12


def build(arch: str, config_dir: str | None, device: str, dtype, gradient_checkpointing: bool):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForSequenceClassification

    if arch == "mistral-7b":
        config = AutoConfig.for_model(**MISTRAL_7B)
    else:
        config = AutoConfig.from_pretrained(config_dir)
    config.num_labels = 1
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForSequenceClassification.from_config(config, dtype=dtype)
    model.config.pad_token_id = config.pad_token_id if config.pad_token_id is not None else 0
    n_params = sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n and "score" not in n)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model = get_peft_model(
        model, LoraConfig(r=16, lora_alpha=32, target_modules=TARGETS, modules_to_save=["score"], task_type="SEQ_CLS")
    )
    return model, config, n_params


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=("smollm2", "mistral-7b"), required=True)
    parser.add_argument("--config-dir", help="HF directory with config.json (smollm2)")
    parser.add_argument("--train", default=None, help="comma list of pairs x length, e.g. 1x1024,1x4096")
    parser.add_argument("--score", default=None, help="comma list of batch x length, e.g. 16x1024")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    a = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.set_num_threads(a.threads)
    gpu = device == "cuda"
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
