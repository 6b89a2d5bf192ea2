"""One DDIM step that also returns the log-probability of the step it took.

DDPO (Black et al. 2023, arXiv:2305.13301, sec. 4.3) treats each DDIM step with eta > 0 as a
Gaussian policy ``p(x_{t-1} | x_t, c) = N(mu_t, sigma_t^2 I)``. As in kvablack/ddpo-pytorch's
``diffusers_patch/ddim_with_logprob.py``, with DDIM's formulas (Song et al. 2021, eq. 12 and
16) and diffusers' ``DDIMScheduler`` state (``alphas_cumprod``, ``final_alpha_cumprod``):

* ``x0 = (x_t - sqrt(1 - a_t) eps) / sqrt(a_t)`` (epsilon prediction);
* ``sigma_t = eta sqrt((1 - a_prev) / (1 - a_t)) sqrt(1 - a_t / a_prev)``;
* ``mu_t = sqrt(a_prev) x0 + sqrt(1 - a_prev - sigma_t^2) eps``;
* ``log p = mean over pixels of log N(x_{t-1}; mu_t, sigma_t^2)`` (ddpo-pytorch averages
  over the latent's elements rather than summing, which rescales the PPO ratio's log).

``a_prev`` is ``final_alpha_cumprod`` after the last step (``t - T / steps < 0``).
"""

from __future__ import annotations

import math

import torch


def step_alphas(scheduler, timestep: torch.Tensor | int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a_t, a_prev)`` of a step (shape ``B`` or 1, float32, on the CPU)."""
    t = torch.as_tensor(timestep, device="cpu").long().reshape(-1)
    prev_t = t - scheduler.config.num_train_timesteps // scheduler.num_inference_steps
    alphas = scheduler.alphas_cumprod
    return alphas[t], torch.where(prev_t >= 0, alphas[prev_t.clamp(min=0)], scheduler.final_alpha_cumprod)


def step_constants(scheduler, device) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """``{t: (a_t, a_prev)}`` for every step of ``scheduler.timesteps``, on ``device`` once (the
    same floats :func:`step_alphas` gives; a loop over the steps then copies nothing to the GPU,
    and each such copy from pageable memory waits for the GPU)."""
    return {int(t): tuple(a.to(device) for a in step_alphas(scheduler, t)) for t in scheduler.timesteps}


def ddim_step_with_logprob(scheduler, eps: torch.Tensor, timestep: torch.Tensor | int, sample: torch.Tensor,
                           eta: float, prev_sample: torch.Tensor | None = None,
                           noise: torch.Tensor | None = None,
                           constants: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One DDIM step ``x_t -> x_{t-1}`` and its log-probability.

    Args:
        scheduler: a diffusers ``DDIMScheduler`` after ``set_timesteps`` (epsilon prediction,
            no sample clipping).
        eps: predicted noise ``B × C × h × w``; sample: ``x_t`` of the same shape.
        timestep: ``t`` (an int or a tensor broadcastable to ``B``).
        eta: DDIM's noise weight (DDPO: 1; must be > 0 for a log-probability).
        prev_sample: ``x_{t-1}`` to score (training); ``None`` draws it (sampling) as
            ``mu_t + sigma_t * noise`` (``noise``: standard normal, drawn here when ``None``).
        constants: :func:`step_constants` of ``scheduler`` on ``sample``'s device (a scalar
            ``timestep``), or ``None`` (computed here and copied to the device).
    Returns ``(x_{t-1}, log_prob)`` with ``log_prob`` of shape ``B`` (float32).
    """
    if eta <= 0:
        raise ValueError("eta must be > 0: a deterministic step has no log-probability")
    a_t, a_prev = constants[int(timestep)] if constants is not None else step_alphas(scheduler, timestep)
    shape = (-1,) + (1,) * (sample.ndim - 1)
    a_t, a_prev = a_t.reshape(shape).to(sample.device), a_prev.reshape(shape).to(sample.device)
    eps32, x32 = eps.float(), sample.float()
    x0 = (x32 - (1 - a_t).sqrt() * eps32) / a_t.sqrt()
    variance = (1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev)
    std = eta * variance.sqrt()
    mean = a_prev.sqrt() * x0 + (1 - a_prev - std**2).sqrt() * eps32
    if prev_sample is None:
        noise = torch.randn_like(mean) if noise is None else noise.to(mean.device, mean.dtype)
        # rounded to the trajectory's dtype before it is scored: training scores the stored x_{t-1},
        # so a 16-bit trajectory scored unrounded here would start PPO at ratios != 1
        prev_sample = (mean + std * noise).to(sample.dtype)
    prev = prev_sample.detach().float()
    log_prob = -((prev - mean) ** 2) / (2 * std**2) - std.log() - 0.5 * math.log(2 * math.pi)
    return prev_sample.to(sample.dtype), log_prob.mean(dim=tuple(range(1, log_prob.ndim)))
