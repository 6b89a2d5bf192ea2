"""Seconds per DDPO epoch: sampling (DDIM with log-probs) and training (PPO over the stored
trajectories), fused (PyTorch SDPA, diffusers' ``AttnProcessor2_0``) against unfused
(``AttnProcessor``: explicit softmax(QK^T) V) attention, with the shipped recipe's own
functions (``recipes/ddpo/train.py``: ``sample_epoch``, ``train_epoch``).

Two modes:

* ``--fixed-start DIR`` -- the embedded pipeline (CPU): whole epochs of the embedded
  profile, timed end to end (sampling, reward, training);
* ``--sd15`` -- Stable Diffusion v1.5's UNet / VAE / text encoder built from their configs
  (written below, random weights, no hub) at 512 px (``--tiny``: a toy size to check the
  script on CPU). One sampling batch and ``--train-iters`` training iterations are timed
  after a warm-up and scaled to an epoch of SPEC's size (32 samples, 50 steps): an epoch's
  training is ``32 / train_batch × 50`` iterations. Variants (``--variants``): batch sizes
  ``spec`` (sample batch 8, train batch 4 × accum 4) or ``large`` (sample batch 32, train batch
  16 × accum 1: the same 2 optimizer updates of the same gradient per epoch), each optionally
  ``+unfused`` attention, ``+cl`` (the UNet in channels-last memory format) and ``+compile``
  (``nn.Module.compile`` of the UNet, in place, so compiled variants run last; the warm-up
  column holds the compilation).

Usage: ``python bench/ddpo_throughput.py --fixed-start results/models/ddpo-digits --epochs 3``;
``python bench/ddpo_throughput.py --sd15 [--tiny] [--variants spec,large,large+cl+compile] --json out.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "recipes" / "ddpo")]

SD15_UNET = dict(
    sample_size=64,
    in_channels=4,
    out_channels=4,
    center_input_sample=False,
    flip_sin_to_cos=True,
    freq_shift=0,
    down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    block_out_channels=(320, 640, 1280, 1280),
    layers_per_block=2,
    downsample_padding=1,
    mid_block_scale_factor=1,
    act_fn="silu",
    norm_num_groups=32,
    norm_eps=1e-5,
    cross_attention_dim=768,
    attention_head_dim=8,
)
SD15_VAE = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=("DownEncoderBlock2D",) * 4,
    up_block_types=("UpDecoderBlock2D",) * 4,
    block_out_channels=(128, 256, 512, 512),
    layers_per_block=2,
    latent_channels=4,
    norm_num_groups=32,
    sample_size=512,
    scaling_factor=0.18215,
)
SD15_TEXT = dict(
    vocab_size=49408,
    hidden_size=768,
    intermediate_size=3072,
    num_hidden_layers=12,
    num_attention_heads=12,
    max_position_embeddings=77,
    hidden_act="quick_gelu",
    projection_dim=768,
)
TINY_UNET = dict(
    SD15_UNET,
    sample_size=8,
    block_out_channels=(32, 32, 64, 64),
    layers_per_block=1,
    norm_num_groups=8,
    cross_attention_dim=32,
    attention_head_dim=4,
)
TINY_VAE = dict(SD15_VAE, block_out_channels=(8, 8, 16, 16), layers_per_block=1, norm_num_groups=4, sample_size=64)
TINY_TEXT = dict(
    SD15_TEXT, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, projection_dim=32
)


class RandomPipeline:
    """The attributes of :class:`replaykit.tasks.ddpo.pipeline.Pipeline` the recipe uses,
    on SD v1.5's architecture with random weights and a random token embedding per prompt."""

    def __init__(self, tiny: bool, device: str, dtype: torch.dtype):
        from diffusers import AutoencoderKL, DDIMScheduler, UNet2DConditionModel
        from transformers import CLIPTextConfig, CLIPTextModel

        from replaykit.tasks.ddpo.pipeline import SCHEDULER

        torch.manual_seed(0)
        self.device, self.dtype = device, dtype
        self.unet = UNet2DConditionModel(**(TINY_UNET if tiny else SD15_UNET)).to(device, dtype).eval()
        self.vae = AutoencoderKL(**(TINY_VAE if tiny else SD15_VAE)).to(device, dtype).eval()
        self.text_encoder = CLIPTextModel(CLIPTextConfig(**(TINY_TEXT if tiny else SD15_TEXT))).to(device, dtype).eval()
        for m in (self.unet, self.vae, self.text_encoder):
            m.requires_grad_(False)
        self.scheduler = DDIMScheduler(**SCHEDULER)
        self.latent_shape = (4, self.unet.config.sample_size, self.unet.config.sample_size)

    @torch.no_grad()
    def encode_prompts(self, texts):
        ids = torch.tensor(
            [[49406] + [320 + (hash(t) + i) % 40000 for i in range(5)] + [49407] * 71 for t in texts],
            device=self.device,
        )
        return self.text_encoder(ids)[0]

    @torch.no_grad()
    def decode(self, latents):
        return ((self.vae.decode(latents / self.vae.config.scaling_factor).sample.float() + 1) / 2).clamp(0, 1)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def sd15(args) -> list[dict]:
    import dataclasses

    import train
    from diffusers import DDIMScheduler
    from diffusers.models.attention_processor import AttnProcessor, AttnProcessor2_0
    from peft import LoraConfig

    from replaykit.runtime import load_config

    full = load_config(train.DDPOConfig, ROOT / "recipes" / "ddpo" / "configs", "full", {})

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.float16 if device == "cuda" else torch.float32
    pipe = RandomPipeline(args.tiny, device, dtype)
    pipe.unet.add_adapter(
        LoraConfig(r=4, lora_alpha=4, init_lora_weights="gaussian", target_modules=["to_q", "to_k", "to_v", "to_out.0"])
    )
    params = [p for p in pipe.unet.parameters() if p.requires_grad]
    for p in params:
        p.data = p.data.float()
    optimizer = torch.optim.AdamW(params, lr=3e-4)
    steps, per_epoch = (4, 8) if args.tiny else (50, 32)
    scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
    scheduler.set_timesteps(steps)
    rows = []
    batches = {"spec": (8, 4, 4), "large": (32, 16, 1)} if not args.tiny else {"spec": (2, 1, 4), "large": (8, 4, 1)}
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    # compiling is in place and cannot be undone: the compiled variants run last
    variants.sort(key=lambda v: "compile" in v)
    for variant in variants:
        parts = variant.split("+")
        name, options = parts[0], set(parts[1:])
        if name not in batches or not options <= {"unfused", "cl", "compile"}:
            raise SystemExit(f"--variants: unknown variant {variant!r} (spec|large[+unfused][+cl][+compile])")
        sample_bs, train_bs, accum = batches[name]
        attention = "unfused" if "unfused" in options else "fused (SDPA)"
        pipe.unet.set_attn_processor(AttnProcessor() if "unfused" in options else AttnProcessor2_0())
        layout = torch.channels_last if "cl" in options else torch.contiguous_format
        pipe.unet.to(memory_format=layout)
        if "compile" in options and not getattr(pipe.unet, "_compiled_call_impl", None):
            pipe.unet.compile()  # nn.Module.compile: in place, the recipe's calls go through it
        # SPEC's recipe (configs/full.yaml: guidance 5, eta 1, clip range 1e-4, advantages +-5,
        # gradient norm 1) at this variant's batch sizes
        recipe = dataclasses.replace(
            full, sample_batch_size=sample_bs, train_batch_size=train_bs, gradient_accumulation_steps=accum
        )
        generator = torch.Generator().manual_seed(0)
        prompts = [f"prompt {i}" for i in range(sample_bs)]
        warm = DDIMScheduler.from_config(pipe.scheduler.config)
        warm.set_timesteps(2)
        warm_start = time.time()
        # the recipe runs its fp16 base and fp32 LoRA without autocast; --autocast is 2026-12-01's first run
        with torch.autocast(device, dtype=dtype, enabled=device == "cuda" and args.autocast):
            train.sample_epoch(pipe, warm, prompts, recipe, generator)
            sync(device)
            t0 = time.time()
            batch = train.sample_epoch(pipe, scheduler, prompts, recipe, generator)
            sync(device)
            sample_s = (time.time() - t0) * per_epoch / sample_bs
            # training: a slice of the trajectories, `train_iters` (minibatch, step) pairs timed
            iters = args.train_iters
            sub = {k: v[:train_bs] for k, v in batch.items()}
            sub["latents"] = sub["latents"][:, : iters + 1]
            sub["log_probs"] = sub["log_probs"][:, :iters]
            short = DDIMScheduler.from_config(pipe.scheduler.config)
            short.set_timesteps(steps)
            short.timesteps = short.timesteps[:iters]
            adv = torch.randn(train_bs)
            train.train_epoch(pipe, short, sub, adv, params, optimizer, recipe, generator)  # warm-up
            sync(device)
            # the two warm-ups (compilation for a compiled UNet), less the timed sampling batch
            warmup_s = time.time() - warm_start - sample_s * sample_bs / per_epoch
            t0 = time.time()
            train.train_epoch(pipe, short, sub, adv, params, optimizer, recipe, generator)
            sync(device)
            per_iter = (time.time() - t0) / iters
        train_s = per_iter * (per_epoch / train_bs) * steps
        peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
        row = {
            "variant": variant,
            "autocast": bool(args.autocast and device == "cuda"),
            "attention": attention,
            "config": name,
            "channels_last": "cl" in options,
            "compiled": "compile" in options,
            "warmup_s": warmup_s,
            "sample_batch": sample_bs,
            "train_batch": train_bs,
            "accum": accum,
            "sampling_s_per_epoch": sample_s,
            "training_s_per_epoch": train_s,
            "epoch_s": sample_s + train_s,
            "samples_per_s": per_epoch / sample_s,
            "train_iter_s": per_iter,
            "peak_gib": peak,
        }
        rows.append(row)
        print(
            f"{variant:18s} sample bs {sample_bs:3d} train bs {train_bs:3d}x{accum}: sampling "
            f"{sample_s:7.1f} s/epoch ({per_epoch / sample_s:6.2f} img/s), training {train_s:7.1f} s/epoch "
            f"({per_iter * 1000:7.1f} ms/iter) -> {sample_s + train_s:7.1f} s/epoch"
            + (f", peak {peak:.1f} GiB" if peak else "")
            + f", warm-up {warmup_s:.0f} s",
            flush=True,
        )
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
    return rows


def embedded(args) -> list[dict]:
    import random

    import numpy as np
    import train
    from diffusers import DDIMScheduler
    from peft import LoraConfig
    from stat_tracking import PerPromptStatTracker

    from replaykit.runtime import load_config
    from replaykit.tasks.ddpo.pipeline import Pipeline
    from replaykit.tasks.ddpo.pipeline import prompts as digit_prompts
    from replaykit.tasks.ddpo.rewards import jpeg_compressibility

    torch.set_num_threads(args.threads)
    recipe = load_config(train.DDPOConfig, ROOT / "recipes" / "ddpo" / "configs", "embedded", {})
    pipe = Pipeline(args.fixed_start)
    if args.unfused:
        from diffusers.models.attention_processor import AttnProcessor

        pipe.unet.set_attn_processor(AttnProcessor())
    pipe.unet.add_adapter(
        LoraConfig(
            r=recipe.lora["r"],
            lora_alpha=recipe.lora["alpha"],
            init_lora_weights="gaussian",
            target_modules=recipe.lora["target_modules"],
        )
    )
    params = [p for p in pipe.unet.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=recipe.learning_rate)
    scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
    scheduler.set_timesteps(recipe.num_steps)
    tracker = PerPromptStatTracker(recipe.stat_buffer_size, recipe.stat_min_count)
    reward, rng, generator = jpeg_compressibility(), random.Random(0), torch.Generator().manual_seed(0)
    rows = []
    for epoch in range(args.epochs):
        prompts = [rng.choice(digit_prompts()) for _ in range(recipe.sample_batch_size * recipe.num_batches_per_epoch)]
        t0 = time.time()
        batch = train.sample_epoch(pipe, scheduler, prompts, recipe, generator)
        t1 = time.time()
        r = reward(batch["images"], prompts)
        adv = torch.as_tensor(tracker.update(prompts, r), dtype=torch.float32)
        t2 = time.time()
        train.train_epoch(pipe, scheduler, batch, adv, params, optimizer, recipe, generator)
        t3 = time.time()
        row = {
            "epoch": epoch + 1,
            "sampling_s": t1 - t0,
            "reward_s": t2 - t1,
            "training_s": t3 - t2,
            "epoch_s": t3 - t0,
            "reward_mean": float(np.mean(r)),
        }
        rows.append(row)
        print(
            f"epoch {epoch + 1}: sampling {row['sampling_s']:.2f} s, reward {row['reward_s']:.2f} s, training "
            f"{row['training_s']:.2f} s -> {row['epoch_s']:.2f} s ({len(prompts)} samples, "
            f"{recipe.num_steps} steps, "
            f"{args.threads} thread(s), {'unfused' if args.unfused else 'SDPA'} attention)",
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixed-start", help="the embedded pipeline folder (CPU mode)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--unfused", action="store_true", help="with --fixed-start: diffusers' AttnProcessor instead of SDPA"
    )
    parser.add_argument("--sd15", action="store_true", help="SD v1.5 architecture, random weights")
    parser.add_argument("--tiny", action="store_true", help="with --sd15: toy sizes (a CPU check of the script)")
    parser.add_argument("--train-iters", type=int, default=10)
    parser.add_argument(
        "--variants",
        default="spec,large,spec+unfused",
        help="with --sd15: comma list of spec|large (batch sizes) + options unfused (attention), cl (channels-last "
        "UNet), compile (nn.Module.compile of the UNet, run last), e.g. spec,large,large+cl,large+cl+compile",
    )
    parser.add_argument(
        "--autocast", action="store_true", help="with --sd15 on CUDA: inside fp16 autocast (the recipe does not use it)"
    )
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    if args.sd15:
        rows = sd15(args)
    elif args.fixed_start:
        rows = embedded(args)
    else:
        parser.error("give --fixed-start DIR or --sd15")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps(
                {
                    "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                    "torch": torch.__version__,
                    "rows": rows,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
