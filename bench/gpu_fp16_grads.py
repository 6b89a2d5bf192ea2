"""ddpo's ``full`` profile over a float16 base: are the LoRA's zero gradients float16 underflow?

The full profile's shapes (32 samples x 50 DDIM steps sampled in one batch, guidance 5, eta 1;
PPO in minibatches of 16 x accumulation 1 = 2 AdamW updates; SD v1.5's UNet / VAE / text encoder
from their configs with random weights, LoRA r 4 in float32 through the recipe's ``add_lora``),
fixed random advantages. One epoch is sampled once with the float16 pipeline; then each variant
trains on that same batch from the same LoRA, optimizer state and minibatch order:

* ``fp16_plain``: main's recipe (``recipes/ddpo``): float16 base, the loss never scaled;
* ``fp16_gradscaler``: the recipe of ``DDPO_NEW_RECIPE`` (default ``bench/gpu_fp16_recipe``,
  branch ddpo-fp16) with its own ``grad_scaler`` (torch.amp.GradScaler, initial scale 2^16);
* ``fp16_scale_2^24``: the same loop with a GradScaler starting at 2^24 (does 2^16 leave any
  underflow behind?);
* ``fp32_base``: ground truth, a float32 copy of the same UNet (TF32 off in cuDNN and matmuls),
  the loss unscaled; its old log-probabilities recomputed under it from the stored float16
  trajectory (with the float16 ones, the full profile's clip range 1e-4 would clip samples
  that the float16 runs do not).

Per update: the fraction of exactly-zero and of non-finite gradient elements of ``lora_A`` /
``lora_B`` (the gradient the optimizer sees: unscaled and clipped), the gradient norm before
clipping, the cosine of the gradient and of the update to ``fp32_base``'s; per run, the fraction
of LoRA elements that moved by more than 1e-6. A probe before training: the gradient reaching
the UNet's output (d loss / d eps, the first float16 tensor of the backward) at steps 0, 24, 49
of the first minibatch: how much of it is zero, or below float16's smallest normal number 2^-14.

    python3 bench/gpu_fp16_grads.py [--tiny] [--budget 520] [--out DIR]   # writes DIR/fp16_grads.json

``--tiny``: toy sizes on the CPU (a check of the script). ``--budget``: seconds from the start;
``fp32_base`` stops after its first update when the second would end past it.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import types
from pathlib import Path

import torch

T0 = time.time()
ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("DDPO_NEW_RECIPE", str(ROOT / "bench" / "gpu_fp16_recipe"))
sys.path[:0] = [str(ROOT / "bench")]
import gpu_ddpo_speed as speed  # noqa: E402  (build, new_train, flat; puts src/ and the recipe on sys.path)

CUDA = torch.cuda.is_available()
TRAIN_SEED = 3


def log(*a):
    print(f"[{time.time() - T0:6.1f} s]", *a, flush=True)


class Stop(Exception):
    """fp32_base stops after its first update (the budget)."""


def names_of(unet) -> list[str]:
    return [n for n, p in unet.named_parameters() if p.requires_grad]


def block_of(name: str) -> str:
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part in ("down_blocks", "up_blocks"):
            return f"{part}.{parts[i + 1]}"
        if part == "mid_block":
            return part
    return "other"


def module_of(name: str) -> str:
    return next((m for m in ("to_q", "to_k", "to_v", "to_out") if f".{m}." in name), "other")


def grad_stats(names: list[str], grads: list[torch.Tensor]) -> dict:
    out: dict = {}
    for kind in ("lora_A", "lora_B"):
        sel = [g for n, g in zip(names, grads) if kind in n]
        flat = torch.cat([g.flatten().float() for g in sel])
        out[kind] = {
            "numel": flat.numel(),
            "zero_frac": (flat == 0).float().mean().item(),
            "nonfinite": int((~torch.isfinite(flat)).sum()),
            "median_abs": flat.abs().median().item(),
        }
    by: dict = {"block": {}, "module": {}}
    for key, fn in (("block", block_of), ("module", module_of)):
        for n, g in zip(names, grads):
            if "lora_B" in n:
                z, c = by[key].get(fn(n), (0, 0))
                by[key][fn(n)] = (z + int((g == 0).sum()), c + g.numel())
        by[key] = {k: round(z / c, 4) for k, (z, c) in sorted(by[key].items())}
    out["lora_B_zero_frac_by"] = by
    return out


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=0).item()


def run(name, train_epoch, pipe, params, init, batch, adv, recipe, scheduler, scaler=None, stop_after_first=None):
    """One PPO epoch of ``train_epoch`` on ``batch``; the gradients the optimizer saw and the
    weights after each update."""
    for p, p0 in zip(params, init):
        p.data.copy_(p0)
    opt = torch.optim.AdamW(
        params, lr=recipe.learning_rate, betas=(0.9, 0.999), weight_decay=recipe.weight_decay, eps=1e-8
    )
    snaps, grads, norms = [speed.flat(params)], [], []
    step, clip = opt.step, torch.nn.utils.clip_grad_norm_
    t_start = time.time()

    def hooked(*a, **k):
        grads.append([p.grad.detach().float().cpu() for p in params])
        out = step(*a, **k)
        snaps.append(speed.flat(params))
        if stop_after_first is not None and len(grads) == 1 and stop_after_first(time.time() - t_start):
            raise Stop
        return out

    def clip_logged(ps, max_norm, *a, **k):
        total = clip(ps, max_norm, *a, **k)
        norms.append(float(total))
        return total

    opt.step = hooked
    torch.nn.utils.clip_grad_norm_ = clip_logged
    info, stopped = None, False
    try:
        args = (pipe, scheduler, batch, adv, params, opt, recipe, torch.Generator().manual_seed(TRAIN_SEED))
        info = train_epoch(*args) if scaler is None else train_epoch(*args, scaler)
    except Stop:
        stopped = True
    finally:
        torch.nn.utils.clip_grad_norm_ = clip
        speed.sync()
    log(f"{name}: {len(grads)} updates in {time.time() - t_start:.1f} s, info {info}")
    return {
        "grads": grads,
        "snaps": snaps,
        "norms": norms,
        "info": info,
        "stopped_after_first": stopped,
        "train_s": time.time() - t_start,
    }


def probe(train, unet, batch, adv, old_log_probs, recipe, scheduler, encode, steps=(0, 24, 49)):
    """d loss / d (UNet output) at ``steps`` of the first minibatch, in the UNet's dtype, as the
    recipe's backward produces it (the loss divided by accumulation x steps, unscaled)."""
    from ddim_with_logprob import ddim_step_with_logprob, step_constants

    n, bs, accum = len(adv), recipe.train_batch_size, recipe.gradient_accumulation_steps
    idx = torch.randperm(n, generator=torch.Generator().manual_seed(TRAIN_SEED))[:bs].to(batch["latents"].device)
    uncond = encode([""])
    context = torch.cat([uncond.expand(len(idx), -1, -1), batch["prompt_embeds"][idx]])
    constants = step_constants(scheduler, batch["latents"].device)
    a = adv.to(batch["latents"].device)[idx]
    rows = {}
    for j in steps:
        if j >= len(scheduler.timesteps):
            continue
        t, x = scheduler.timesteps[j], batch["latents"][idx, j]
        out = unet(torch.cat([x, x]), t, encoder_hidden_states=context).sample
        out.retain_grad()
        eps_u, eps_c = out.chunk(2)
        eps = eps_u + recipe.guidance_scale * (eps_c - eps_u)
        _, lp = ddim_step_with_logprob(
            scheduler, eps, t, x, recipe.eta, prev_sample=batch["latents"][idx, j + 1], constants=constants
        )
        loss, _, _ = train.ppo_loss(a, lp, old_log_probs[idx, j].float(), recipe.clip_range, recipe.adv_clip_max)
        (loss / (accum * len(scheduler.timesteps))).backward()
        g = out.grad.float().abs()
        nz = g[g > 0]
        rows[f"step_{j}"] = {
            "dtype": str(out.dtype),
            "zero_frac": (g == 0).float().mean().item(),
            "below_2^-24_frac": (g < 2.0**-24).float().mean().item(),
            "below_2^-14_frac": (g < 2.0**-14).float().mean().item(),
            "median_abs": g.median().item(),
            "max_abs": g.max().item(),
            "min_nonzero_abs": nz.min().item() if nz.numel() else 0.0,
        }
        for p in unet.parameters():
            p.grad = None
    return rows


def compare(run_, ref) -> dict:
    out = {}
    for u in range(min(len(run_["grads"]), len(ref["grads"]))):
        g = torch.cat([x.flatten() for x in run_["grads"][u]])
        r = torch.cat([x.flatten() for x in ref["grads"][u]])
        du, dr = run_["snaps"][u + 1] - run_["snaps"][u], ref["snaps"][u + 1] - ref["snaps"][u]
        ok, both = torch.isfinite(g), ((g != 0) & (r != 0)).sum().item()
        out[f"update_{u + 1}"] = {
            "grad_cosine": cosine(torch.where(ok, g, 0), r),
            "update_cosine": cosine(du, dr),
            "zero_where_ref_nonzero_frac": ((g == 0) & (r != 0)).float().mean().item(),
            "sign_agreement_where_both_nonzero": ((g * r) > 0).float().sum().item() / max(1, both),
        }
    n = min(len(run_["snaps"]), len(ref["snaps"])) - 1
    if n >= 1:
        out[f"weights_after_{n}_cosine_of_total_update"] = cosine(
            run_["snaps"][n] - run_["snaps"][0], ref["snaps"][n] - ref["snaps"][0]
        )
    return out


def summary(names, r) -> dict:
    moved = (r["snaps"][-1] - r["snaps"][0]).abs()
    return {
        "updates": len(r["grads"]),
        "train_s": round(r["train_s"], 1),
        "info": r["info"],
        "grad_norm_before_clip": r["norms"],
        "per_update": [grad_stats(names, g) for g in r["grads"]],
        "moved_gt_1e-6_frac": (moved > 1e-6).float().mean().item(),
        "stopped_after_first": r["stopped_after_first"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--budget", type=float, default=520.0)
    ap.add_argument("--skip", default="", help="variants to leave out, comma-separated")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu-fp16-out"))
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    from diffusers import DDIMScheduler

    train, recipe, pipe, params, init = speed.build(args)
    new = speed.new_train()
    names = names_of(pipe.unet)
    assert len(names) == len(params)
    device = "cuda" if CUDA else "cpu"
    report = speed.meta(recipe) | {
        "base_dtype": str(pipe.dtype),
        "lora_params": sum(p.numel() for p in params),
        "learning_rate": recipe.learning_rate,
        "clip_range": recipe.clip_range,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
    }
    log(f"built: {report}")

    def save():
        (out_dir / "fp16_grads.json").write_text(json.dumps(report, indent=1))

    scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
    scheduler.set_timesteps(recipe.num_steps)
    n = recipe.sample_batch_size * recipe.num_batches_per_epoch
    prompts = [f"prompt {i % 45}" for i in range(n)]
    adv = torch.randn(n, generator=torch.Generator().manual_seed(1))
    t = time.time()
    batch = train.sample_epoch(pipe, scheduler, prompts, recipe, torch.Generator().manual_seed(0))
    speed.sync()
    log(f"sampled {n} x {recipe.num_steps} steps in {time.time() - t:.1f} s")
    report["probe_fp16"] = probe(
        train, pipe.unet, batch, adv, batch["log_probs"], recipe, scheduler, pipe.encode_prompts
    )
    log(f"probe fp16: {report['probe_fp16']}")
    save()
    runs = {}
    skip = set(args.skip.split(","))
    variants = [
        ("fp16_plain", train.train_epoch, None),
        ("fp16_gradscaler", new.train_epoch, lambda: new.grad_scaler(torch.float16, device)),
        ("fp16_scale_2^24", new.train_epoch, lambda: torch.amp.GradScaler(device, init_scale=2.0**24)),
    ]
    for name, fn, make_scaler in variants:
        if name in skip:
            continue
        scaler = make_scaler() if make_scaler else None
        runs[name] = run(name, fn, pipe, params, init, batch, adv, recipe, scheduler, scaler)
        report[name] = summary(names, runs[name])
        save()

    if "fp32_base" not in skip:
        # ground truth: a float32 copy of the same UNet and LoRA, TF32 off
        saved_tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        try:
            unet32 = copy.deepcopy(pipe.unet).float()
            params32 = [p for p in unet32.parameters() if p.requires_grad]
            assert names_of(unet32) == names

            def encode32(texts):
                return pipe.encode_prompts(texts).float()

            pipe32 = types.SimpleNamespace(
                unet=unet32,
                device=pipe.device,
                dtype=torch.float32,
                latent_shape=pipe.latent_shape,
                encode_prompts=encode32,
            )
            for p, p0 in zip(params32, init):
                p.data.copy_(p0)
            batch32 = {"latents": batch["latents"].float(), "prompt_embeds": batch["prompt_embeds"].float()}
            report["probe_fp32"] = probe(train, unet32, batch32, adv, batch["log_probs"], recipe, scheduler, encode32)
            log(f"probe fp32: {report['probe_fp32']}")
            t = time.time()
            batch32["log_probs"] = old_log_probs(train, pipe32, batch32, recipe, scheduler, n)
            relog_s = time.time() - t
            diff = (batch32["log_probs"] - batch["log_probs"].float()).abs()
            report["fp32_relog"] = {
                "s": round(relog_s, 1),
                "max_abs_dlogp_vs_fp16": diff.max().item(),
                "frac_dlogp_gt_1e-4": (diff > 1e-4).float().mean().item(),
            }
            log(f"fp32 old log-probs in {relog_s:.1f} s: {report['fp32_relog']}")
            save()
            deadline = T0 + args.budget

            def stop_after_first(update_s):
                return time.time() + 1.1 * update_s > deadline

            runs["fp32_base"] = run(
                "fp32_base",
                train.train_epoch,
                pipe32,
                params32,
                init,
                batch32,
                adv,
                recipe,
                scheduler,
                stop_after_first=stop_after_first,
            )
            report["fp32_base"] = summary(names, runs["fp32_base"])
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved_tf32
        for name in runs:
            if name != "fp32_base":
                report[name]["vs_fp32_base"] = compare(runs[name], runs["fp32_base"])
    if "fp16_gradscaler" in runs and "fp16_scale_2^24" in runs:
        report["fp16_gradscaler"]["vs_fp16_scale_2^24"] = compare(runs["fp16_gradscaler"], runs["fp16_scale_2^24"])
    report["wall_s"] = round(time.time() - T0, 1)
    save()
    for name in runs:
        r = report[name]
        log(
            name,
            json.dumps({k: r[k] for k in ("moved_gt_1e-6_frac", "grad_norm_before_clip")}),
            json.dumps([{k: u[k]["zero_frac"] for k in ("lora_A", "lora_B")} for u in r["per_update"]]),
            json.dumps(r.get("vs_fp32_base", {})),
        )


@torch.no_grad()
def old_log_probs(train, pipe32, batch32, recipe, scheduler, n) -> torch.Tensor:
    """The trajectory's log-probabilities under the float32 UNet and the initial LoRA, in the
    minibatches of the training loop (its first draw from the seeded generator is the order)."""
    from ddim_with_logprob import ddim_step_with_logprob, step_constants

    order = torch.randperm(n, generator=torch.Generator().manual_seed(TRAIN_SEED))
    uncond = pipe32.encode_prompts([""])
    constants = step_constants(scheduler, pipe32.device)
    out = torch.empty(n, len(scheduler.timesteps), device=batch32["latents"].device)
    bs = recipe.train_batch_size
    for i in range(0, n, bs):
        idx = order[i : i + bs].to(batch32["latents"].device)
        context = torch.cat([uncond.expand(len(idx), -1, -1), batch32["prompt_embeds"][idx]])
        for j, t in enumerate(scheduler.timesteps):
            x = batch32["latents"][idx, j]
            eps = train.guided_eps(pipe32.unet, x, t, context, recipe.guidance_scale)
            _, lp = ddim_step_with_logprob(
                scheduler, eps, t, x, recipe.eta, prev_sample=batch32["latents"][idx, j + 1], constants=constants
            )
            out[idx, j] = lp
    return out


if __name__ == "__main__":
    main()
