"""ddpo's epoch (issue 35): where the time goes, and which speed knobs keep the trained LoRA
bit-identical to the plain path.

The full profile's epoch (32 samples x 50 DDIM steps in one sampling batch, PPO over the
32 x 50 stored steps in minibatches of 16, 2 AdamW updates) on SD v1.5's UNet / VAE / text
encoder built from their configs (random weights, fp16 base, fp32 LoRA r 4: the recipe's own
``add_lora``, ``sample_epoch`` and ``train_epoch``), fixed random advantages (no reward model).
Every variant starts from the same LoRA, optimizer state, generator seed and prompts, so a
variant that keeps the algorithm ends with the plain path's weights byte for byte.

Modes:

* ``--mode profile``: torch.profiler over one sampling step and one training iteration:
  wall time against the summed GPU kernel time (GPU idle = CPU-bound), top kernels;
* ``--mode epochs --variants plain,plain,nosync,...``: one timed epoch per variant (after a
  2-step warm-up epoch at the same batch sizes); each compared with the first ``plain``:
  weights equal, max |dw|, cosine of the two updates and of the first update's gradients.
  Variants: ``plain`` (the recipe of ``DDPO_RECIPE``, default ``recipes/ddpo``), ``new``
  (the loops of the recipe in ``DDPO_NEW_RECIPE``, default ``bench/gpu_ddpo_recipe``: on
  2026-12-02 main's recipe as ``plain`` against branch ddpo-speed's as ``new``), ``nosync``
  (this file's copy of the same no-sync loops), ``graphs`` (``new`` + the sampling UNet call
  replayed from a CUDA graph), ``tf32``, ``cudnn_bench``
  (``cudnn.benchmark``), ``sdpa_cudnn`` / ``sdpa_efficient`` (the attention backend),
  ``cl`` (channels-last UNet), ``bf16_autocast``; ``compile`` (the recipe's knob) runs last.
* ``--mode compile``: ``compile: true`` (the recipe's ``add_lora``), the warm-up epoch timed
  (= compiling), then one epoch; run twice with the same ``TORCHINDUCTOR_CACHE_DIR`` to see
  the second run's compile cost. ``--reference W.pt`` compares with a plain run's weights.

``--tiny``: toy sizes, a CPU check of the script. Writes ``--out DIR`` (json, weights .pt).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RECIPE = Path(os.environ.get("DDPO_RECIPE", ROOT / "recipes" / "ddpo"))
sys.path[:0] = [str(ROOT / "src"), str(RECIPE), str(ROOT / "bench")]
CUDA = torch.cuda.is_available()


def sync():
    if CUDA:
        torch.cuda.synchronize()


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------- the no-sync loops (same math)


def ddim_consts(scheduler, device):
    """``{int(t): (a_t, a_prev)}`` as ``ddim_step_with_logprob`` computes them on the CPU, moved once."""
    out = {}
    for t in scheduler.timesteps:
        tt = torch.as_tensor(t, device="cpu").long().reshape(-1)
        prev_t = tt - scheduler.config.num_train_timesteps // scheduler.num_inference_steps
        alphas = scheduler.alphas_cumprod
        a_t = alphas[tt]
        a_prev = torch.where(prev_t >= 0, alphas[prev_t.clamp(min=0)], scheduler.final_alpha_cumprod)
        out[int(t)] = (a_t.to(device), a_prev.to(device))
    return out


def ddim_step_fast(consts, eps, t, sample, eta, prev_sample=None, noise=None):
    """``ddim_step_with_logprob`` with its constants already on the device (the same floats)."""
    a_t, a_prev = consts[int(t)]
    shape = (-1,) + (1,) * (sample.ndim - 1)
    a_t, a_prev = a_t.reshape(shape), a_prev.reshape(shape)
    eps32, x32 = eps.float(), sample.float()
    x0 = (x32 - (1 - a_t).sqrt() * eps32) / a_t.sqrt()
    variance = (1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev)
    std = eta * variance.sqrt()
    mean = a_prev.sqrt() * x0 + (1 - a_prev - std**2).sqrt() * eps32
    if prev_sample is None:
        prev_sample = (mean + std * noise.to(mean.device, mean.dtype)).to(sample.dtype)
    prev = prev_sample.detach().float()
    log_prob = -((prev - mean) ** 2) / (2 * std**2) - std.log() - 0.5 * math.log(2 * math.pi)
    return prev_sample.to(sample.dtype), log_prob.mean(dim=tuple(range(1, log_prob.ndim)))


@torch.no_grad()
def sample_epoch_nosync(pipe, scheduler, prompts, recipe, generator, unet=None):
    import train

    unet = unet or pipe.unet
    consts = ddim_consts(scheduler, pipe.device)
    uncond = pipe.encode_prompts([""])
    out = {"latents": [], "log_probs": [], "prompt_embeds": [], "images": []}
    bs = recipe.sample_batch_size
    pin = CUDA and str(pipe.device).startswith("cuda")
    for start in range(0, len(prompts), bs):
        cond = pipe.encode_prompts(prompts[start : start + bs])
        context = torch.cat([uncond.expand(len(cond), -1, -1), cond])
        shape = (len(cond), *pipe.latent_shape)
        # the same draws in the same order as the recipe (x, then one per step), copied without a sync
        draws = [torch.randn(shape, generator=generator) for _ in range(len(scheduler.timesteps) + 1)]
        if pin:
            draws = [d.pin_memory() for d in draws]
        draws = [d.to(pipe.device, non_blocking=pin) for d in draws]
        x = draws[0].to(pipe.dtype)
        trajectory, log_probs = [x], []
        for i, t in enumerate(scheduler.timesteps):
            eps = train.guided_eps(unet, x, t, context, recipe.guidance_scale)
            x, log_prob = ddim_step_fast(consts, eps, t, x, recipe.eta, noise=draws[i + 1])
            trajectory.append(x)
            log_probs.append(log_prob)
        out["latents"].append(torch.stack(trajectory, 1))
        out["log_probs"].append(torch.stack(log_probs, 1))
        out["prompt_embeds"].append(cond)
        out["images"].append(pipe.decode(x).cpu())
    return {k: torch.cat(v) for k, v in out.items()}


def train_epoch_nosync(pipe, scheduler, batch, advantages, params, optimizer, recipe, generator):
    import numpy as np
    import train

    n, steps = len(advantages), len(scheduler.timesteps)
    consts = ddim_consts(scheduler, pipe.device)
    order = torch.randperm(n, generator=generator)
    uncond = pipe.encode_prompts([""])
    bs, accum = recipe.train_batch_size, recipe.gradient_accumulation_steps
    stats = []
    pipe.unet.train()
    optimizer.zero_grad()
    minibatches = [order[i : i + bs] for i in range(0, n, bs)]
    adv_dev = advantages.to(pipe.device)
    group = 0  # index in stats of the first step since the last update
    for k, idx in enumerate(minibatches):
        idx_dev = idx.to(pipe.device)
        context = torch.cat([uncond.expand(len(idx), -1, -1), batch["prompt_embeds"][idx_dev]])
        for j, t in enumerate(scheduler.timesteps):
            eps = train.guided_eps(pipe.unet, batch["latents"][idx_dev, j], t, context, recipe.guidance_scale)
            _, log_prob = ddim_step_fast(
                consts, eps, t, batch["latents"][idx_dev, j], recipe.eta, prev_sample=batch["latents"][idx_dev, j + 1]
            )
            loss, approx_kl, clipfrac = train.ppo_loss(
                adv_dev[idx_dev],
                log_prob,
                batch["log_probs"][idx_dev, j].float(),
                recipe.clip_range,
                recipe.adv_clip_max,
            )
            (loss / (accum * steps)).backward()
            stats.append(torch.stack([loss.detach(), approx_kl, clipfrac]))
        if (k + 1) % accum == 0 or k + 1 == len(minibatches):
            if not torch.isfinite(torch.stack(stats[group:])[:, 0]).all():  # one sync per update, before it
                raise train.NonFiniteError("non-finite loss")
            group = len(stats)
            torch.nn.utils.clip_grad_norm_(params, recipe.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
    pipe.unet.eval()
    values = torch.stack(stats).cpu().tolist()
    return {key: float(np.mean([v[i] for v in values])) for i, key in enumerate(("loss", "approx_kl", "clipfrac"))}


class GraphedSampler:
    """The sampling UNet call (no grad, static shapes) captured once per shape in a CUDA graph
    and replayed: the same kernels on the same inputs, without the per-op launches."""

    def __init__(self, unet):
        self.unet, self.graphs = unet, {}

    def __call__(self, x, t, encoder_hidden_states):
        key = (tuple(x.shape), tuple(encoder_hidden_states.shape))
        if key not in self.graphs:
            xs, cs = x.clone(), encoder_hidden_states.clone()
            ts = torch.zeros((), dtype=torch.long, device=x.device)
            ts.fill_(int(t))
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    self.unet(xs, ts, encoder_hidden_states=cs)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = self.unet(xs, ts, encoder_hidden_states=cs).sample
            self.graphs[key] = (g, xs, ts, cs, out)
        g, xs, ts, cs, out = self.graphs[key]
        xs.copy_(x)
        ts.fill_(int(t))
        if cs.data_ptr() != encoder_hidden_states.data_ptr():
            cs.copy_(encoder_hidden_states)
        g.replay()
        return types.SimpleNamespace(sample=out)


# ---------------------------------------------------------------- set-up and one epoch

_NEW = []


def new_train():
    """``train.py`` of ``DDPO_NEW_RECIPE`` (the branch's recipe) as module ``train_new``, beside
    the plain one (its own ``ddim_with_logprob``)."""
    if not _NEW:
        import importlib.util

        path = Path(os.environ.get("DDPO_NEW_RECIPE", ROOT / "bench" / "gpu_ddpo_recipe"))
        names = ("ddim_with_logprob", "stat_tracking")
        saved = {k: sys.modules.pop(k) for k in names if k in sys.modules}
        spec = importlib.util.spec_from_file_location("train_new", path / "train.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["train_new"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        for k in names:
            sys.modules.pop(k, None)
        sys.modules.update(saved)
        while str(path) in sys.path:
            sys.path.remove(str(path))
        _NEW.append(module)
    return _NEW[0]


def build(args, compile_unet=False):
    import train
    from ddpo_throughput import RandomPipeline

    from replaykit.runtime import load_config

    full = load_config(train.DDPOConfig, RECIPE / "configs", "full", {})
    recipe = dataclasses.replace(full, compile=compile_unet)
    if args.tiny:
        recipe = dataclasses.replace(recipe, sample_batch_size=8, train_batch_size=4, num_steps=args.steps or 4)
    elif args.steps:
        recipe = dataclasses.replace(recipe, num_steps=args.steps)
    device = "cuda" if CUDA else "cpu"
    dtype = torch.float16 if CUDA else torch.float32
    pipe = RandomPipeline(args.tiny, device, dtype)
    params = train.add_lora(pipe, recipe)
    init = [p.detach().clone() for p in params]
    return train, recipe, pipe, params, init


def flat(tensors):
    return torch.cat([t.detach().flatten().float().cpu() for t in tensors])


def one_epoch(train, recipe, pipe, params, init, variant, steps=None):
    from diffusers import DDIMScheduler

    recipe = dataclasses.replace(recipe, num_steps=steps or recipe.num_steps)
    for p, p0 in zip(params, init):
        p.data.copy_(p0)
    opt = torch.optim.AdamW(
        params, lr=recipe.learning_rate, betas=(0.9, 0.999), weight_decay=recipe.weight_decay, eps=1e-8
    )
    grads, step = [], opt.step

    def first_grad_step(*a, **k):
        if not grads:
            grads.append(flat([p.grad for p in params]))
        return step(*a, **k)

    opt.step = first_grad_step
    scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
    scheduler.set_timesteps(recipe.num_steps)
    n = recipe.sample_batch_size * recipe.num_batches_per_epoch
    prompts = [f"prompt {i % 45}" for i in range(n)]
    adv = torch.randn(n, generator=torch.Generator().manual_seed(1))
    generator = torch.Generator().manual_seed(0)
    sample, training = train.sample_epoch, train.train_epoch
    if variant == "nosync":
        sample, training = sample_epoch_nosync, train_epoch_nosync
    if variant in ("new", "graphs"):  # the recipe's loops as changed on branch ddpo-speed
        new = new_train()
        sample, training = new.sample_epoch, new.train_epoch
    if variant == "graphs":
        unet, graphed = pipe.unet, GraphedSampler(pipe.unet)

        def sample(*a, _sample=sample):
            pipe.unet = graphed
            try:
                return _sample(*a)
            finally:
                pipe.unet = unet

    sync()
    t0 = time.perf_counter()
    batch = sample(pipe, scheduler, prompts, recipe, generator)
    sync()
    t1 = time.perf_counter()
    info = training(pipe, scheduler, batch, adv, params, opt, recipe, generator)
    sync()
    t2 = time.perf_counter()
    return {
        "sample_s": t1 - t0,
        "train_s": t2 - t1,
        "epoch_s": t2 - t0,
        "info": info,
        "w": flat(params),
        "g": grads[0] if grads else None,
        "logp": batch["log_probs"].float().cpu(),
    }


@contextlib.contextmanager
def knobs(variant, pipe):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark)
    stack = contextlib.ExitStack()
    try:
        if variant == "tf32":
            torch.backends.cuda.matmul.allow_tf32 = True
        if variant == "cudnn_bench":
            torch.backends.cudnn.benchmark = True
        if variant == "sdpa_cudnn":
            stack.enter_context(sdpa_kernel([SDPBackend.CUDNN_ATTENTION]))
        if variant == "sdpa_efficient":
            stack.enter_context(sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]))
        if variant == "sdpa_flash":
            stack.enter_context(sdpa_kernel([SDPBackend.FLASH_ATTENTION]))
        if variant == "bf16_autocast":
            stack.enter_context(torch.autocast("cuda" if CUDA else "cpu", dtype=torch.bfloat16))
        if variant == "cl":
            pipe.unet.to(memory_format=torch.channels_last)
        yield
    finally:
        stack.close()
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark = saved
        if variant == "cl":
            pipe.unet.to(memory_format=torch.contiguous_format)


def compare(ref, row, init_w):
    dw = (row["w"] - ref["w"]).abs()
    u0, u1 = ref["w"] - init_w, row["w"] - init_w
    out = {
        "weights_equal": bool(torch.equal(row["w"], ref["w"])),
        "logp_equal": bool(torch.equal(row["logp"], ref["logp"])),
        "max_abs_dw": dw.max().item(),
        "frac_dw_gt_1e-4": (dw > 1e-4).float().mean().item(),
        "update_cosine": torch.nn.functional.cosine_similarity(u0, u1, dim=0).item(),
        "max_abs_dlogp": (row["logp"] - ref["logp"]).abs().max().item(),
    }
    if ref["g"] is not None and row["g"] is not None:
        out["grad1_cosine"] = torch.nn.functional.cosine_similarity(ref["g"], row["g"], dim=0).item()
        out["grad1_sign_flips"] = ((ref["g"] * row["g"]) < 0).float().mean().item()
    return out


def digest(t):
    return hashlib.sha256(t.numpy().tobytes()).hexdigest()[:16]


def epochs(args):
    train, recipe, pipe, params, init = build(args)
    init_w = flat(init)
    variants = [v for v in args.variants.split(",") if v]
    rows, ref = [], None
    for v in variants:
        with knobs(v, pipe):
            try:
                t0 = time.perf_counter()
                one_epoch(train, recipe, pipe, params, init, v, steps=2)  # warm-up (benchmarks, plans, graphs)
                warm = time.perf_counter() - t0
                r = one_epoch(train, recipe, pipe, params, init, v)
            except Exception as exc:  # a backend that refuses a shape: recorded, the others go on
                log(f"{v}: failed: {type(exc).__name__}: {str(exc)[:300]}")
                rows.append({"variant": v, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
                continue
        row = {"variant": v, "warmup_s": warm, **{k: r[k] for k in ("sample_s", "train_s", "epoch_s", "info")}}
        row["w_sha"] = digest(r["w"])
        if ref is None:
            ref = r
            torch.save({"w": r["w"], "g": r["g"], "logp": r["logp"], "init": init_w}, Path(args.out) / "plain_w.pt")
        else:
            row.update(compare(ref, r, init_w))
        rows.append(row)
        log(json.dumps(row))
        Path(args.out, "epochs.json").write_text(json.dumps(meta(recipe) | {"rows": rows}, indent=1))


def meta(recipe):
    import diffusers
    import peft

    return {
        "device": torch.cuda.get_device_name() if CUDA else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "diffusers": diffusers.__version__,
        "peft": peft.__version__,
        "recipe": {k: getattr(recipe, k) for k in ("sample_batch_size", "train_batch_size", "num_steps")},
    }


def gpu_seconds(p) -> float:
    """The kernels' time in profile ``p``: its device-side rows only (operator rows carry the
    same time again as their self device time; 2026-12-02's run summed both)."""
    from torch.autograd import DeviceType

    return sum(e.self_device_time_total for e in p.key_averages() if e.device_type == DeviceType.CUDA) / 1e6


def profile(args):
    from diffusers import DDIMScheduler
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    train, recipe, pipe, params, init = build(args)
    one_epoch(train, recipe, pipe, params, init, "plain", steps=2)  # warm-up
    scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
    scheduler.set_timesteps(recipe.num_steps)
    steps = 3
    short = DDIMScheduler.from_config(pipe.scheduler.config)
    short.set_timesteps(recipe.num_steps)
    short.timesteps = short.timesteps[:steps]
    n = recipe.sample_batch_size
    prompts = [f"prompt {i}" for i in range(n)]
    opt = torch.optim.AdamW(params, lr=0.0)
    report = {}
    lines = []
    for name, fn in (
        (
            "sampling_3_steps",
            lambda: train.sample_epoch(pipe, short, prompts, recipe, torch.Generator().manual_seed(0)),
        ),
        (
            "sampling_3_steps_nosync",
            lambda: sample_epoch_nosync(pipe, short, prompts, recipe, torch.Generator().manual_seed(0)),
        ),
    ):
        fn()
        sync()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
        with prof(activities=acts) as p:
            t0 = time.perf_counter()
            batch = fn()
            sync()
            wall = time.perf_counter() - t0
        kernel = gpu_seconds(p)
        report[name] = {"wall_s": wall, "gpu_kernel_s": kernel}
        lines.append(f"== {name}: wall {wall:.3f} s, GPU kernels {kernel:.3f} s")
        lines.append(
            p.key_averages().table(sort_by="self_device_time_total" if CUDA else "self_cpu_time_total", row_limit=25)
        )
    sub = {k: v[: recipe.train_batch_size] for k, v in batch.items()}
    sub["latents"] = sub["latents"][:, : steps + 1]
    sub["log_probs"] = sub["log_probs"][:, :steps]
    adv = torch.randn(recipe.train_batch_size)
    for name, fn in (
        ("training_3_iters", train.train_epoch),
        ("training_3_iters_nosync", train_epoch_nosync),
    ):
        fn(pipe, short, sub, adv, params, opt, recipe, torch.Generator().manual_seed(0))
        sync()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
        with prof(activities=acts) as p:
            t0 = time.perf_counter()
            fn(pipe, short, sub, adv, params, opt, recipe, torch.Generator().manual_seed(0))
            sync()
            wall = time.perf_counter() - t0
        kernel = gpu_seconds(p)
        report[name] = {"wall_s": wall, "gpu_kernel_s": kernel}
        lines.append(f"== {name}: wall {wall:.3f} s, GPU kernels {kernel:.3f} s")
        lines.append(
            p.key_averages().table(sort_by="self_device_time_total" if CUDA else "self_cpu_time_total", row_limit=25)
        )
    Path(args.out, "profile.txt").write_text("\n".join(lines))
    Path(args.out, "profile.json").write_text(json.dumps(meta(recipe) | report, indent=1))
    for k, v in report.items():
        share = v["gpu_kernel_s"] / v["wall_s"]
        log(f"{k}: wall {v['wall_s']:.3f} s, GPU kernels {v['gpu_kernel_s']:.3f} s ({share:.0%})")


def compile_mode(args):
    t0 = time.perf_counter()
    if args.no_auto_dynamic:
        torch._dynamo.config.automatic_dynamic_shapes = False
    train, recipe, pipe, params, init = build(args, compile_unet=True)
    built = time.perf_counter() - t0
    t0 = time.perf_counter()
    one_epoch(train, recipe, pipe, params, init, "plain", steps=2)  # compiles sampling + training graphs
    warm = time.perf_counter() - t0
    log(f"[{args.tag}] compile (2-step warm-up epoch) {warm:.1f} s (build {built:.1f} s)")
    r = one_epoch(train, recipe, pipe, params, init, "plain")
    row = {
        "tag": args.tag,
        "build_s": built,
        "compile_warmup_s": warm,
        **{k: r[k] for k in ("sample_s", "train_s", "epoch_s", "info")},
    }
    row["w_sha"] = digest(r["w"])
    row["no_auto_dynamic"] = args.no_auto_dynamic
    torch.save({"w": r["w"], "g": r["g"], "logp": r["logp"]}, Path(args.out) / f"compile_{args.tag}_w.pt")
    for ref_path in args.reference or []:
        ref = torch.load(ref_path)
        ref.setdefault("g", None)
        init_w = ref.get("init", flat(init))
        row[f"vs_{Path(ref_path).stem}"] = compare(ref, r, init_w)
    log(json.dumps(row))
    Path(args.out, f"compile_{args.tag}.json").write_text(json.dumps(meta(recipe) | row, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("profile", "epochs", "compile"), required=True)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--variants", default="plain,plain,nosync,graphs,cudnn_bench,tf32,sdpa_cudnn")
    ap.add_argument("--tag", default="run")
    ap.add_argument("--reference", action="append")
    ap.add_argument("--no-auto-dynamic", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu-ddpo-out"))
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    {"profile": profile, "epochs": epochs, "compile": compile_mode}[args.mode](args)


if __name__ == "__main__":
    main()
