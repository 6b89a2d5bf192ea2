"""Shipped recipe of the ``ddpo`` task: DDPO with importance sampling and PPO clipping.

Black et al. (2023), "Training Diffusion Models with Reinforcement Learning",
arXiv:2305.13301 (DDPO_IS), with kvablack/ddpo-pytorch's ``scripts/train.py`` as the
reference. One epoch:

1. **sample** ``sample_batch_size × num_batches_per_epoch`` prompts from the prompt list and
   draw images with DDIM (eta 1, classifier-free guidance), keeping every step's latent and
   log-probability (:mod:`ddim_with_logprob`);
2. **reward** the decoded images (``scoring.json`` of the public split) and turn rewards into
   advantages per prompt (:mod:`stat_tracking`: history buffer, minimum count, batch
   fallback);
3. **train** on the stored trajectories: for each minibatch of ``train_batch_size`` samples
   and each denoising step, recompute the step's log-probability under the current LoRA and
   minimise the PPO clipped surrogate (:func:`ppo_loss`), accumulating gradients over
   ``gradient_accumulation_steps`` minibatches × all steps before each optimizer update
   (SPEC: 32 samples / (4 × 4) = 2 updates per epoch); gradient norm clipped; over a float16
   base the loss is scaled (:func:`grad_scaler`, as the reference's fp16 run does);
4. every ``save_freq`` epochs, save the training state (LoRA, optimizer, stat tracker, RNG,
   history) to ``state_dir`` and publish the LoRA (PEFT format) as ``checkpoint-<epoch>``.

Only the LoRA on the UNet's attention projections trains (base UNet, text encoder and VAE
frozen); attention runs through PyTorch's SDPA (diffusers' default ``AttnProcessor2_0``).
Training stops at ``num_epochs`` or before an epoch that would end past the internal
deadline (exit 0); a NaN reward or loss stops it with an error (exit ``NAN_EXIT``), keeping
earlier checkpoints. ``resume`` continues from the last saved state. This directory is the
editable workspace.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ddim_with_logprob import ddim_step_with_logprob, step_constants  # noqa: E402
from stat_tracking import PerPromptStatTracker  # noqa: E402

from replaykit.runtime import Session, StopReason, atomic_write_json, knob  # noqa: E402
from replaykit.tasks.ddpo.lora import save_lora  # noqa: E402
from replaykit.tasks.ddpo.pipeline import Pipeline  # noqa: E402
from replaykit.tasks.ddpo.rewards import SCORING, reward_fn  # noqa: E402


@dataclass(frozen=True)
class DDPOConfig:
    """The recipe's knobs (``configs/<profile>.yaml``; a replay's ``overrides`` change them).
    Units: samples, denoising steps, epochs."""

    num_epochs: int = knob("epochs; one epoch = sample, reward, train", minimum=1)
    sample_batch_size: int = knob("images per sampling batch", minimum=1)
    num_batches_per_epoch: int = knob("sampling batches per epoch (samples per epoch = this x sample_batch_size)", minimum=1)
    num_steps: int = knob("DDIM steps of sampling and training", minimum=1)
    eta: float = knob("DDIM noise weight (1: every step is a Gaussian policy)", minimum=0)
    guidance_scale: float = knob("classifier-free guidance scale")
    train_batch_size: int = knob("samples per PPO minibatch", minimum=1)
    gradient_accumulation_steps: int = knob("minibatches per optimizer update", minimum=1)
    learning_rate: float = knob("AdamW learning rate", minimum=0)
    weight_decay: float = knob("AdamW weight decay", minimum=0)
    max_grad_norm: float = knob("gradient-norm clipping threshold", minimum=0)
    clip_range: float = knob("PPO ratio clip epsilon", minimum=0)
    adv_clip_max: float = knob("advantages clipped to +-this", minimum=0)
    stat_buffer_size: int = knob("per-prompt reward history length", minimum=1)
    stat_min_count: int = knob("rewards a prompt needs before its own statistics replace the batch's", minimum=1)
    save_freq: int = knob("epochs between published checkpoints (3 retained)", minimum=1)
    lora: dict = knob("LoRA on the UNet's attention: {r, alpha, target_modules}")
    device: Literal["auto", "cpu"] = knob("auto: CUDA when available, else CPU")
    dtype: Literal["float32", "float16", "bfloat16"] = knob("base weights' dtype (LoRA weights train in float32; over a "
                                                            "float16 base the loss is scaled: torch.amp.GradScaler)")
    compile: bool = knob("CUDA: the UNet in channels-last layout through torch.compile: 34.2 s instead of 43.5 s per "
                         "epoch on an H200 (1.27x) after 284-368 s of compiling per replay (50 s where "
                         "TORCHINDUCTOR_CACHE_DIR keeps an earlier run's cache). A recipe change, not a speed-up: "
                         "Inductor's kernels round differently from eager's and from one compile to the next, and "
                         "AdamW's sign-like first steps turn any rounding difference into a full-size weight change "
                         "(bench/results-2026-12-02-ddpo-speed.md)", default=False)


class NonFiniteError(RuntimeError):
    """A NaN/inf reward or loss."""


def ppo_loss(advantages: torch.Tensor, log_prob: torch.Tensor, old_log_prob: torch.Tensor, clip_range: float,
             adv_clip_max: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate (Schulman et al. 2017, eq. 7) as DDPO uses it, per step.

    ``ratio = exp(log_prob - old_log_prob)``; advantages clipped to ``±adv_clip_max``;
    ``loss = mean(max(-A ratio, -A clip(ratio, 1 - eps, 1 + eps)))``. Also returns the
    approximate KL ``0.5 mean((log_prob - old_log_prob)^2)`` and the clip fraction
    ``mean(|ratio - 1| > eps)``. All inputs have shape ``B``.
    """
    advantages = advantages.clamp(-adv_clip_max, adv_clip_max)
    ratio = torch.exp(log_prob - old_log_prob)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_range, 1.0 + clip_range)
    loss = torch.maximum(unclipped, clipped).mean()
    approx_kl = 0.5 * ((log_prob - old_log_prob) ** 2).mean()
    clipfrac = ((ratio - 1.0).abs() > clip_range).float().mean()
    return loss, approx_kl.detach(), clipfrac.detach()


def grad_scaler(dtype: torch.dtype, device) -> torch.amp.GradScaler | None:
    """Dynamic loss scaling (``torch.amp.GradScaler``, its defaults: initial scale 2^16, halved
    and the update skipped when a gradient is inf/NaN, doubled after 2,000 clean updates) where
    the base weights are float16, else ``None`` (float32 and bfloat16 train as before, byte for
    byte). The gradient reaches the float32 LoRA through the float16 base's backward, where
    values below 2^-25 round to zero: without scaling, the ``full`` profile's first update on
    an H200 had 74 % of ``lora_B``'s gradient elements exactly zero and a gradient of cosine
    0.01 to a float32 base's; with this scaler, none zero and cosine 0.9996
    (bench/results-2026-12-02-ddpo-fp16.md). The reference's accelerate ``mixed_precision:
    fp16`` scales the loss with the same scaler and defaults."""
    if dtype != torch.float16:
        return None
    return torch.amp.GradScaler(torch.device(device).type)


def guided_eps(unet, latents: torch.Tensor, t, context: torch.Tensor, guidance: float) -> torch.Tensor:
    """Classifier-free guidance: ``context`` stacks [unconditional; conditional] embeddings."""
    eps_u, eps_c = unet(torch.cat([latents, latents]), t, encoder_hidden_states=context).sample.chunk(2)
    return eps_u + guidance * (eps_c - eps_u)


def _to_device(tensor: torch.Tensor, device) -> torch.Tensor:
    """``tensor`` (CPU) on ``device`` without waiting for the GPU: a copy from pinned memory is
    queued behind the work already launched (the same values as a plain ``.to(device)``)."""
    if torch.device(device).type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


@torch.no_grad()
def sample_epoch(pipe, scheduler, prompts: list[str], recipe: DDPOConfig, generator: torch.Generator) -> dict:
    """Step 1: trajectories of DDIM sampling (eta ``recipe.eta``) with log-probabilities.

    Noise comes from the CPU ``generator`` (reproducible on any device): per batch the start
    latent, then one draw per step, in that order. Returns ``latents``
    (``N × (T + 1) × C × h × w``), ``log_probs`` (``N × T``), ``prompt_embeds``
    (``N × L × D``) and the decoded ``images`` (``N × 3 × H × W`` in [0, 1], CPU). Nothing in
    the loop over the steps waits for the GPU (the noise and the step constants are on it first)."""
    uncond = pipe.encode_prompts([""])
    constants = step_constants(scheduler, pipe.device)
    out: dict[str, list] = {"latents": [], "log_probs": [], "prompt_embeds": [], "images": []}
    bs = recipe.sample_batch_size
    for start in range(0, len(prompts), bs):
        cond = pipe.encode_prompts(prompts[start:start + bs])
        context = torch.cat([uncond.expand(len(cond), -1, -1), cond])
        shape = (len(cond), *pipe.latent_shape)
        draws = [_to_device(torch.randn(shape, generator=generator), pipe.device)
                 for _ in range(len(scheduler.timesteps) + 1)]
        x = draws[0].to(pipe.dtype)
        trajectory, log_probs = [x], []
        for t, noise in zip(scheduler.timesteps, draws[1:]):
            eps = guided_eps(pipe.unet, x, t, context, recipe.guidance_scale)
            x, log_prob = ddim_step_with_logprob(scheduler, eps, t, x, recipe.eta, noise=noise, constants=constants)
            trajectory.append(x)
            log_probs.append(log_prob)
        out["latents"].append(torch.stack(trajectory, 1))
        out["log_probs"].append(torch.stack(log_probs, 1))
        out["prompt_embeds"].append(cond)
        out["images"].append(pipe.decode(x).cpu())
    return {k: torch.cat(v) for k, v in out.items()}


def train_epoch(pipe, scheduler, batch: dict, advantages: torch.Tensor, params: list, optimizer, recipe: DDPOConfig,
                generator: torch.Generator, scaler: torch.amp.GradScaler | None = None) -> dict:
    """Step 3: PPO over the stored trajectories; returns mean loss, approx KL and clip fraction
    (with a ``scaler``: also the loss scale after the epoch and the number of its updates
    skipped for an inf/NaN gradient).

    Gradients are accumulated over ``gradient_accumulation_steps`` minibatches × T steps per
    optimizer update (the loss of each step divided by that count, as ddpo-pytorch's
    accelerate accumulation does). With a ``scaler`` (:func:`grad_scaler`) each step's loss is
    multiplied by its scale before the backward, and before each update the gradients are
    unscaled, then clipped (accelerate's order); the scaler skips an update whose gradients
    are not finite and lowers its scale. Raises :class:`NonFiniteError` on a NaN/inf loss,
    checked once per update before the weights move (the one wait for the GPU per update; the
    scaler's step and its two reads of the scale add three, once the backward is done; the
    statistics stay on the device until the epoch ends)."""
    n, steps = len(advantages), len(scheduler.timesteps)
    order = torch.randperm(n, generator=generator)
    uncond = pipe.encode_prompts([""])
    constants = step_constants(scheduler, pipe.device)
    bs, accum = recipe.train_batch_size, recipe.gradient_accumulation_steps
    stats: list[torch.Tensor] = []  # per step: loss, approx KL, clip fraction
    pipe.unet.train()
    optimizer.zero_grad()
    minibatches = [order[i:i + bs] for i in range(0, n, bs)]
    advantages = _to_device(advantages, pipe.device)
    since_update = 0  # index in stats of the first step since the last update
    skipped = 0  # updates the scaler skipped (inf/NaN gradient)
    for k, cpu_idx in enumerate(minibatches):
        idx = _to_device(cpu_idx, batch["latents"].device)
        context = torch.cat([uncond.expand(len(idx), -1, -1), batch["prompt_embeds"][idx]])
        for j, t in enumerate(scheduler.timesteps):
            eps = guided_eps(pipe.unet, batch["latents"][idx, j], t, context, recipe.guidance_scale)
            _, log_prob = ddim_step_with_logprob(scheduler, eps, t, batch["latents"][idx, j], recipe.eta,
                                                 prev_sample=batch["latents"][idx, j + 1], constants=constants)
            loss, approx_kl, clipfrac = ppo_loss(advantages[idx.to(advantages.device)], log_prob,
                                                 batch["log_probs"][idx, j].float(), recipe.clip_range,
                                                 recipe.adv_clip_max)
            if scaler is None:
                (loss / (accum * steps)).backward()
            else:
                scaler.scale(loss / (accum * steps)).backward()
            stats.append(torch.stack([loss.detach(), approx_kl, clipfrac]))
        if (k + 1) % accum == 0 or k + 1 == len(minibatches):
            losses = torch.stack(stats[since_update:])[:, 0]
            if not torch.isfinite(losses).all():
                bad = int((~torch.isfinite(losses)).nonzero()[0]) + since_update
                raise NonFiniteError(f"loss is {stats[bad][0].item()} (minibatch {bad // steps}, step {bad % steps})")
            since_update = len(stats)
            if scaler is None:
                torch.nn.utils.clip_grad_norm_(params, recipe.max_grad_norm)
                optimizer.step()
            else:
                scaler.unscale_(optimizer)  # the true gradients, clipped as without scaling
                torch.nn.utils.clip_grad_norm_(params, recipe.max_grad_norm)
                scale = scaler.get_scale()
                scaler.step(optimizer)  # skipped when unscale_ found an inf/NaN
                scaler.update()
                skipped += scaler.get_scale() < scale  # the scale only drops on a skipped update
            optimizer.zero_grad()
    pipe.unet.eval()
    values = torch.stack(stats).cpu().tolist()
    info = {key: float(np.mean([v[i] for v in values])) for i, key in enumerate(("loss", "approx_kl", "clipfrac"))}
    if scaler is not None:
        info |= {"loss_scale": scaler.get_scale(), "skipped_updates": skipped}
    return info


def save_state(state_dir: Path, pipe, optimizer, tracker, epoch: int, rng: random.Random, generator, history,
               scaler=None) -> Path:
    """The training state after ``epoch`` epochs (with the loss scaler's, if any), written under
    a temporary name and renamed into ``<state_dir>/state`` (a kill mid-save leaves the previous
    state whole)."""
    tmp = state_dir / ".export-state"
    if tmp.exists():
        shutil.rmtree(tmp)
    save_lora(pipe.unet, tmp / "lora")
    saved = {"optimizer": optimizer.state_dict(), "tracker": tracker.state_dict(), "epoch": epoch,
             "python_rng": rng.getstate(), "generator": generator.get_state(), "torch_rng": torch.get_rng_state()}
    if scaler is not None:
        saved["scaler"] = scaler.state_dict()
    torch.save(saved, tmp / "train_state.pt")
    atomic_write_json(tmp / "history.json", history)
    final = state_dir / "state"
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return final / "lora"


def add_lora(pipe: Pipeline, knobs: DDPOConfig) -> list:
    """A LoRA on the frozen UNet's attention (SDPA attention; float32 LoRA weights;
    channels-last and compiled with ``compile``); returns the trainable parameters."""
    from diffusers.models.attention_processor import AttnProcessor2_0
    from peft import LoraConfig

    pipe.unet.set_attn_processor(AttnProcessor2_0())  # PyTorch SDPA (fused attention), diffusers' default
    lora = knobs.lora
    pipe.unet.add_adapter(LoraConfig(r=int(lora["r"]), lora_alpha=int(lora["alpha"]), init_lora_weights="gaussian",
                                     target_modules=list(lora["target_modules"])))
    params = [p for p in pipe.unet.parameters() if p.requires_grad]
    for p in params:
        p.data = p.data.float()  # LoRA weights train in float32 over a 16-bit base on GPU
    if knobs.compile:  # in place (nn.Module.compile): parameter names and the saved LoRA keys stay the same
        pipe.unet.to(memory_format=torch.channels_last)
        pipe.unet.compile()
    return params


def resume(session: Session, pipe, optimizer, tracker, rng: random.Random, generator,
           scaler=None) -> tuple[int, list[dict]]:
    """The epoch and history of the state an earlier attempt saved (LoRA, optimizer, stat
    tracker, RNGs and the loss scaler, if any, restored), or ``(0, [])``."""
    state = session.request.state_dir / "state"
    if not (session.request.resume and (state / "train_state.pt").is_file()):
        return 0, []
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    saved = torch.load(state / "train_state.pt", weights_only=False)
    set_peft_model_state_dict(pipe.unet, load_file(str(state / "lora" / "adapter_model.safetensors")))
    optimizer.load_state_dict(saved["optimizer"])
    tracker.load_state_dict(saved["tracker"])
    rng.setstate(saved["python_rng"])
    generator.set_state(saved["generator"])
    torch.set_rng_state(saved["torch_rng"])
    if scaler is not None and "scaler" in saved:
        scaler.load_state_dict(saved["scaler"])
    print(f"[train] resuming after epoch {saved['epoch']}", flush=True)
    return saved["epoch"], json.loads((state / "history.json").read_text())


def main() -> int:
    session = Session.start(DDPOConfig, HERE / "configs", __doc__)
    knobs, seed, state_dir, public = session.knobs, session.request.seed, session.request.state_dir, session.request.public_dir
    rng, generator = random.Random(seed), torch.Generator().manual_seed(seed)
    device = session.device(knobs.device)
    dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[knobs.dtype]
    started = time.time()
    from diffusers import DDIMScheduler

    pipe = Pipeline(str(session.request.fixed_start), device, dtype)
    scoring = json.loads((public / SCORING).read_text())
    reward = reward_fn(scoring, device)
    prompt_list = [p.strip() for p in (public / "prompts.txt").read_text().splitlines() if p.strip()]
    params = add_lora(pipe, knobs)
    optimizer = torch.optim.AdamW(params, lr=knobs.learning_rate, betas=(0.9, 0.999),
                                  weight_decay=knobs.weight_decay, eps=1e-8)
    tracker = PerPromptStatTracker(knobs.stat_buffer_size, knobs.stat_min_count)
    scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
    scheduler.set_timesteps(knobs.num_steps)
    scaler = grad_scaler(dtype, device)
    start_epoch, history = resume(session, pipe, optimizer, tracker, rng, generator, scaler)
    print(f"[train] {len(prompt_list)} prompts, reward {scoring['reward']}, {len(params)} LoRA tensors "
          f"({sum(p.numel() for p in params)} parameters) on {device}; set-up {time.time() - started:.1f} s", flush=True)

    def save(epoch: int):
        """``write`` of checkpoint-<epoch>: the state after ``epoch`` saved, its LoRA published."""
        return lambda _: save_state(state_dir, pipe, optimizer, tracker, epoch, rng, generator, history, scaler)

    n_epochs, save_freq = knobs.num_epochs, knobs.save_freq
    if start_epoch % save_freq == 0 or start_epoch == n_epochs:  # a kill came between its save and its publication
        session.checkpoint_if_missing(start_epoch, lambda _: state_dir / "state" / "lora")
    per_epoch = knobs.sample_batch_size * knobs.num_batches_per_epoch
    session.begin_training()
    epoch_s = 0.0
    for epoch in range(start_epoch + 1, n_epochs + 1):
        t0 = time.time()
        if session.should_stop(next_step_s=epoch_s):  # an epoch that would end past the deadline is not started
            break
        prompts = [rng.choice(prompt_list) for _ in range(per_epoch)]
        batch = sample_epoch(pipe, scheduler, prompts, knobs, generator)
        rewards = np.asarray(reward(batch["images"], prompts), dtype=float)
        try:
            if not np.isfinite(rewards).all():
                raise NonFiniteError(f"{int((~np.isfinite(rewards)).sum())} of {len(rewards)} rewards are NaN/inf")
            advantages = torch.as_tensor(tracker.update(prompts, rewards), dtype=torch.float32)
            info = train_epoch(pipe, scheduler, batch, advantages, params, optimizer, knobs, generator, scaler)
        except NonFiniteError as exc:
            session.nan_loss(f"epoch {epoch}: {exc}; earlier checkpoints kept")
            break
        epoch_s = time.time() - t0
        entry = {"progress": epoch, "reward_mean": float(rewards.mean()), "reward_std": float(rewards.std()),
                 **info, "epoch_s": epoch_s}
        history.append(entry)
        print(f"[train] epoch {epoch}/{n_epochs} reward_mean {entry['reward_mean']:.4f} reward_std "
              f"{entry['reward_std']:.4f} loss {info['loss']:.5f} approx_kl {info['approx_kl']:.3g} clipfrac "
              f"{info['clipfrac']:.3f} epoch {epoch_s:.1f} s elapsed {time.time() - session.train_start:.0f} s",
              flush=True)
        if epoch % save_freq == 0 or epoch == n_epochs:
            session.checkpoint(epoch, save(epoch))
    if session.stop_reason == StopReason.DEADLINE and history:  # the export reserve covers this last save
        session.checkpoint_if_missing(history[-1]["progress"], save(history[-1]["progress"]))
    return session.finish(history, steps=max(session.published_now, default=start_epoch))


if __name__ == "__main__":
    raise SystemExit(main())
