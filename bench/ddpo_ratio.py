"""DDPO's importance ratio before any update: how far the training pass's log-probabilities are
from the sampling pass's, for the recipe's own functions (``recipes/ddpo/train.py``).

PPO's ratio ``exp(log p_train - log p_sample)`` is exactly 1 at the first minibatch of an
epoch (the policy has not moved); the full profile clips it at ``1 ± 1e-4``, so any numerical
gap between the two passes above ~1e-4 decides which samples are clipped -- which is what made
a ``compile: true`` run's LoRA update nearly orthogonal to the plain run's on the H200 (cosine
0.08, issue 35). For each path (``eager``: the plain UNet; ``cl``: channels-last; ``compile``:
``nn.Module.compile`` in place, channels-last, as the recipe's knob), one sampling batch
(``sample_epoch``, no grad, eval) and the training forward of its first minibatch at every
denoising step (train mode, grad on, no backward, no update) are compared:

- ``recipe``: the recipe's log-probability of each stored sample (the sampling step scores
  x_{t-1} rounded to the trajectory's dtype) against the training pass's;
- ``unrounded``: the bookkeeping before 2026-12-01's fix -- the density of the unrounded
  x_{t-1} -- against the training pass's (the same trajectories: the step is run twice on
  the same noise, once in float32).

Prints max |Δ log p|, mean |Δ|, the share of (sample, step) entries above the clip range and
the share exactly 0, and the sampling / training-forward seconds.

    python bench/ddpo_ratio.py --tiny --dtype bfloat16 --paths eager,cl      # CPU check, ~2 min
    python bench/ddpo_ratio.py --paths eager,cl --json ratio.json           # H200, SD v1.5 fp16, ~1 min
    python bench/ddpo_ratio.py --paths eager,compile                        # + ~6 min of compiling
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "recipes" / "ddpo"), str(ROOT / "bench")]


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def measure(pipe, unet, recipe, scheduler, path: str, clip: float, seed: int = 0) -> dict:
    import train
    from ddim_with_logprob import ddim_step_with_logprob

    pipe.unet = unet
    unrounded = []

    def step_both(scheduler, eps, t, sample, eta, prev_sample=None, noise=None):
        out = ddim_step_with_logprob(scheduler, eps, t, sample, eta, prev_sample=prev_sample, noise=noise)
        if prev_sample is None:  # sampling: also the density of the unrounded sample, on the same noise
            prev32, lp32 = ddim_step_with_logprob(scheduler, eps, t, sample.float(), eta, noise=noise)
            assert torch.equal(prev32.to(sample.dtype), out[0])
            unrounded.append(lp32)
        return out

    prompts = [f"prompt {i}" for i in range(recipe.sample_batch_size)]
    train.ddim_step_with_logprob = step_both
    try:
        sync()
        t0 = time.perf_counter()
        batch = train.sample_epoch(pipe, scheduler, prompts, recipe, torch.Generator().manual_seed(seed))
        sync()
        sample_s = time.perf_counter() - t0
    finally:
        train.ddim_step_with_logprob = ddim_step_with_logprob
    old = torch.stack(unrounded, 1)  # N × T
    idx = torch.arange(recipe.train_batch_size)
    uncond = pipe.encode_prompts([""])
    context = torch.cat([uncond.expand(len(idx), -1, -1), batch["prompt_embeds"][idx]])
    pipe.unet.train()
    sync()
    t0 = time.perf_counter()
    trained = []
    for j, t in enumerate(scheduler.timesteps):
        eps = train.guided_eps(pipe.unet, batch["latents"][idx, j], t, context, recipe.guidance_scale)
        _, lp = ddim_step_with_logprob(
            scheduler, eps, t, batch["latents"][idx, j], recipe.eta, prev_sample=batch["latents"][idx, j + 1]
        )
        trained.append(lp.detach())
    sync()
    train_s = time.perf_counter() - t0
    pipe.unet.eval()
    trained = torch.stack(trained, 1).cpu()
    row = {"path": path, "sample_s": sample_s, "train_forward_s": train_s}
    for name, sampled in (("recipe", batch["log_probs"][idx].float().cpu()), ("unrounded", old[idx].float().cpu())):
        d = (trained - sampled).abs()
        row[name] = {
            "max": d.max().item(),
            "mean": d.mean().item(),
            "above_clip": (d > clip).float().mean().item(),
            "exact": (d == 0).float().mean().item(),
            "max_per_step": d.amax(0).tolist(),
        }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="toy UNet sizes (a CPU check)")
    parser.add_argument("--dtype", choices=("float16", "bfloat16", "float32"), default=None)
    parser.add_argument("--paths", default="eager,cl", help="comma list of eager, cl, compile (compile runs last)")
    parser.add_argument("--steps", type=int, default=None, help="DDIM steps (default: the full profile's 50; tiny 10)")
    parser.add_argument("--json", help="write the rows here")
    a = parser.parse_args()
    import train
    from ddpo_throughput import RandomPipeline
    from diffusers import DDIMScheduler
    from peft import LoraConfig

    from replaykit.runtime import load_config

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, a.dtype or ("float16" if device == "cuda" else "bfloat16"))
    full = load_config(train.DDPOConfig, ROOT / "recipes" / "ddpo" / "configs", "full", {})
    steps = a.steps or (10 if a.tiny else full.num_steps)
    # the full profile (guidance 5, eta 1, clip 1e-4, sample batch 32, train batch 16); tiny: 8 / 4
    recipe = dataclasses.replace(
        full, num_steps=steps, **({"sample_batch_size": 8, "train_batch_size": 4} if a.tiny else {})
    )
    pipe = RandomPipeline(a.tiny, device, dtype)
    lora = full.lora
    pipe.unet.add_adapter(
        LoraConfig(
            r=lora["r"], lora_alpha=lora["alpha"], init_lora_weights="gaussian", target_modules=lora["target_modules"]
        )
    )
    for p in pipe.unet.parameters():
        if p.requires_grad:
            p.data = p.data.float()  # as the recipe: float32 LoRA over the 16-bit base
    base = pipe.unet
    scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
    scheduler.set_timesteps(steps)
    paths = sorted(a.paths.split(","), key=lambda p: p == "compile")
    rows = []
    print(
        f"{'SD v1.5 (random)' if not a.tiny else 'toy UNet'}, {dtype}, {device}; "
        f"sample batch {recipe.sample_batch_size}, train batch {recipe.train_batch_size}, {steps} steps, "
        f"clip range {recipe.clip_range:g}",
        flush=True,
    )
    for path in paths:
        unet = copy.deepcopy(base) if path != paths[-1] else base
        if path in ("cl", "compile"):
            unet.to(memory_format=torch.channels_last)
        if path == "compile":
            unet.compile()
        row = measure(pipe, unet, recipe, scheduler, path, recipe.clip_range)
        rows.append(row)
        for name in ("recipe", "unrounded"):
            r = row[name]
            print(
                f"{path:8s} {name:10s} max|Δlog p| {r['max']:.2e} mean {r['mean']:.2e} "
                f"above clip {r['above_clip']:6.1%} exactly 0 {r['exact']:6.1%}   "
                f"(sampling {row['sample_s']:.1f} s, training forward {row['train_forward_s']:.1f} s)",
                flush=True,
            )
    if a.json:
        Path(a.json).write_text(
            json.dumps({"dtype": str(dtype), "device": device, "steps": steps, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
