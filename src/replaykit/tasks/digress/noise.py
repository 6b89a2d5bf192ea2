"""Discrete noise of DiGress: cosine schedule and marginal (or uniform) transition matrices.

Source: Vignac et al. (2023), "DiGress: Discrete Denoising diffusion for graph generation",
ICLR, sec. 3 and 4.1; reference implementation cvignac/DiGress
``src/diffusion/noise_schedule.py`` (``cosine_beta_schedule_discrete``,
``MarginalUniformTransition``) and ``src/diffusion/diffusion_utils.py``.

With marginals ``m`` (a probability vector over K classes) and ``1 m^T`` the matrix whose
every row is ``m``:

* one step:   ``Q_t = (1 - beta_t) I + beta_t 1 m^T``
* cumulative: ``Qbar_t = alphabar_t I + (1 - alphabar_t) 1 m^T``, ``alphabar_t = prod_{s<=t} (1 - beta_s)``

so ``q(z_t | x) = x Qbar_t`` tends to ``m`` (the prior at ``t = T``). Row vectors multiply
from the left; every row of every matrix sums to 1.
"""

from __future__ import annotations

import math

import torch


def cosine_betas(T: int, s: float = 0.008) -> torch.Tensor:
    """``beta_0 .. beta_T`` (``T + 1`` values, float64) of the cosine schedule (Nichol &
    Dhariwal 2021) as DiGress discretises it: ``abar(x) = cos(pi/2 (x/(T+2) + s)/(1 + s))^2``
    on ``x = linspace(0, T + 2, T + 2)``, normalised by ``abar(0)``, ``beta = 1 - abar[1:]/abar[:-1]``."""
    steps = T + 2
    x = torch.linspace(0, steps, steps, dtype=torch.float64)
    abar = torch.cos(0.5 * math.pi * ((x / steps) + s) / (1 + s)) ** 2
    abar = abar / abar[0]
    return 1 - abar[1:] / abar[:-1]


class DiscreteNoise:
    """Schedule and transitions for node (X) and edge (E) categories.

    Args:
        T: diffusion steps.
        x_marginals, e_marginals: class frequencies of atoms and bonds in the training set
            (length ``dx`` and ``de``); with ``transition="uniform"`` they are replaced by
            uniform vectors.
        transition: ``"marginal"`` (DiGress) or ``"uniform"``.
    """

    def __init__(self, T: int, x_marginals, e_marginals, transition: str = "marginal"):
        if transition not in ("marginal", "uniform"):
            raise ValueError(f"transition must be 'marginal' or 'uniform', got {transition!r}")
        self.T = int(T)
        x_m = torch.as_tensor(x_marginals, dtype=torch.float32)
        e_m = torch.as_tensor(e_marginals, dtype=torch.float32)
        if transition == "uniform":
            x_m, e_m = torch.full_like(x_m, 1 / len(x_m)), torch.full_like(e_m, 1 / len(e_m))
        self.x_marginals, self.e_marginals = x_m / x_m.sum(), e_m / e_m.sum()
        betas = cosine_betas(self.T)
        alphas = 1 - torch.clamp(betas, 0, 0.9999)
        self.betas = betas.float()
        self.alphas_bar = torch.exp(torch.cumsum(torch.log(alphas), 0)).float()

    def to(self, device) -> DiscreteNoise:
        for name in ("x_marginals", "e_marginals", "betas", "alphas_bar"):
            setattr(self, name, getattr(self, name).to(device))
        return self

    @staticmethod
    def _mix(keep: torch.Tensor, marginals: torch.Tensor) -> torch.Tensor:
        """``keep I + (1 - keep) 1 m^T`` for each ``keep`` (shape ``B``) -> ``B × K × K``."""
        k = len(marginals)
        keep = keep.reshape(-1, 1, 1)
        eye = torch.eye(k, device=marginals.device, dtype=marginals.dtype)
        return keep * eye + (1 - keep) * marginals.reshape(1, 1, k).expand(1, k, k)

    def Qt(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One-step matrices ``Q_t`` for integer steps ``t`` (``B``): ``(B×dx×dx, B×de×de)``."""
        beta = self.betas[t.long()]
        return self._mix(1 - beta, self.x_marginals), self._mix(1 - beta, self.e_marginals)

    def Qt_bar(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cumulative matrices ``Qbar_t`` for integer steps ``t`` (``B``)."""
        abar = self.alphas_bar[t.long()]
        return self._mix(abar, self.x_marginals), self._mix(abar, self.e_marginals)
