"""Forward noising, denoiser inputs, the variational bound (NLL) and ancestral sampling.

Source: Vignac et al. (2023), sec. 3, 4 and appendix; reference implementation
cvignac/DiGress ``src/diffusion_model_discrete.py`` (``apply_noise``, ``compute_extra_data``,
``compute_val_loss``, ``kl_prior``, ``compute_Lt``, ``reconstruction_logp``,
``sample_batch``, ``sample_p_zs_given_zt``) and ``src/diffusion/diffusion_utils.py``
(``compute_posterior_distribution``, ``compute_batched_over0_posterior_distribution``).

Dense batches: ``X`` ``B × n × dx`` and ``E`` ``B × n × n × de`` one-hot for real nodes and
real pairs ``i != j`` (class 0 of ``E`` = no bond), all-zero rows for padding and the
diagonal; ``node_mask`` ``B × n`` bool.

NLL per graph, as DiGress's ``compute_val_loss`` (nats):
``-log p(n) + KL(q(z_T|x) || prior) + T · E_t[KL(q(z_{t-1}|z_t,x) || p(z_{t-1}|z_t))] - log p(x|z_0)``,
with ``t`` drawn uniformly from ``1..T`` (one draw per graph and evaluation pass), node and
edge terms summed over real nodes and over the ordered real pairs (both ``(i, j)`` and
``(j, i)``, as the reference sums the whole symmetric matrix). The prior term is written
``KL(q(z_T|x) || m)``; the reference's ``F.kl_div(log q, m)`` computes ``KL(m || q)`` -- both
are ~1e-7 nats here because ``alphabar_T`` is ~0.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from .features import X_EXTRA, Y_EXTRA, extra_features
from .noise import DiscreteNoise

EPS = 1e-10


def dense_batch(atoms: torch.Tensor, bonds: torch.Tensor, dx: int = 4, de: int = 5):
    """One-hot ``(X, E, node_mask)`` from class tensors ``atoms`` ``B × n`` (-1 padding) and
    ``bonds`` ``B × n × n``, on their device."""
    node_mask = atoms >= 0
    n = atoms.shape[1]
    X = F.one_hot(atoms.long().clamp(min=0), dx).float() * node_mask.unsqueeze(-1)
    pair = node_mask.unsqueeze(1) & node_mask.unsqueeze(2) & ~torch.eye(n, dtype=torch.bool, device=atoms.device)
    E = F.one_hot(bonds.long(), de).float() * pair.unsqueeze(-1)
    return X, E, node_mask


def _pair_mask(node_mask):
    n = node_mask.shape[1]
    return node_mask.unsqueeze(1) & node_mask.unsqueeze(2) & ~torch.eye(n, dtype=torch.bool, device=node_mask.device)


def sample_categorical(probX, probE, node_mask, generator=None):
    """Draw one-hot ``X`` and symmetric ``E`` from per-node / per-pair probabilities (the
    upper triangle is drawn and mirrored); padding and the diagonal are zeroed."""
    B, n, dx = probX.shape
    de = probE.shape[-1]
    pX = torch.where(node_mask.unsqueeze(-1), probX, torch.full_like(probX, 1.0 / dx))
    x = torch.multinomial(pX.reshape(-1, dx).clamp(min=0) + EPS, 1, generator=generator).reshape(B, n)
    pair = _pair_mask(node_mask)
    pE = torch.where(pair.unsqueeze(-1), probE, torch.full_like(probE, 1.0 / de))
    e = torch.multinomial(pE.reshape(-1, de).clamp(min=0) + EPS, 1, generator=generator).reshape(B, n, n)
    e = torch.triu(e, diagonal=1)
    e = e + e.transpose(1, 2)
    X = F.one_hot(x, dx).float() * node_mask.unsqueeze(-1)
    E = F.one_hot(e, de).float() * pair.unsqueeze(-1)
    return X, E


def apply_noise(noise: DiscreteNoise, X, E, node_mask, t: torch.Tensor, generator=None):
    """``z_t ~ q(z_t | x) = x Qbar_t`` for integer steps ``t`` (``B``)."""
    Qx, Qe = noise.Qt_bar(t)
    probX = X @ Qx
    probE = (E.reshape(E.shape[0], -1, E.shape[-1]) @ Qe).reshape(E.shape)
    return sample_categorical(probX, probE, node_mask, generator)


def model_input(X_t, E_t, node_mask, t: torch.Tensor, T: int, use_extra: bool = True):
    """Denoiser inputs: categories + extra features, ``y = [t/T, graph features]``."""
    t_norm = (t.float() / T).unsqueeze(-1)
    if not use_extra:
        B = X_t.shape[0]
        zx = X_t.new_zeros(X_t.shape[:2] + (X_EXTRA,))
        return torch.cat([X_t, zx], -1), E_t, torch.cat([t_norm, X_t.new_zeros(B, Y_EXTRA)], -1)
    x_extra, y_extra = extra_features(X_t, E_t, node_mask)
    return torch.cat([X_t, x_extra], -1), E_t, torch.cat([t_norm, y_extra], -1)


def input_dims(dx: int = 4, de: int = 5) -> dict:
    """Widths of :func:`model_input`'s tensors."""
    return {"X": dx + X_EXTRA, "E": de, "y": 1 + Y_EXTRA}


def predict(model, noise: DiscreteNoise, X_t, E_t, node_mask, t, use_extra=True):
    """``p(x_0 | z_t)``: softmax of the denoiser's logits (float32)."""
    Xi, Ei, yi = model_input(X_t, E_t, node_mask, t, noise.T, use_extra)
    logit_X, logit_E = model(Xi, Ei, yi, node_mask)
    return torch.softmax(logit_X.float(), -1), torch.softmax(logit_E.float(), -1)


def posterior(M, M_t, Qt, Qsb, Qtb):
    """``q(z_s | z_t, x)`` for one-hot ``M`` (clean) and ``M_t`` (noisy), both ``B × N × d``:
    ``(M_t Qt^T) ⊙ (M Qsb) / <M Qtb, M_t>``."""
    left = M_t @ Qt.transpose(-1, -2)
    right = M @ Qsb
    denom = ((M @ Qtb) * M_t).sum(-1, keepdim=True)
    return left * right / denom.clamp(min=EPS)


def posterior_over_x0(M_t, Qt, Qsb, Qtb):
    """``q(z_s | z_t, x_0 = k)`` for every clean class ``k``: ``B × N × d0 × d`` (entry
    ``[k, j]`` = ``(M_t Qt^T)_j Qsb[k, j] / (Qtb M_t^T)_k``)."""
    left = (M_t @ Qt.transpose(-1, -2)).unsqueeze(2)  # B N 1 d
    numer = left * Qsb.unsqueeze(1)  # B N d0 d
    denom = (M_t @ Qtb.transpose(-1, -2)).unsqueeze(-1)  # B N d0 1
    return numer / denom.clamp(min=EPS)


def p_zs_given_zt(pred, M_t, Qt, Qsb, Qtb):
    """``p(z_s | z_t) ∝ sum_k p(x_0 = k | z_t) q(z_s | z_t, x_0 = k)`` (normalised), ``B × N × d``."""
    over = posterior_over_x0(M_t, Qt, Qsb, Qtb)
    unnorm = (pred.unsqueeze(-1) * over).sum(2)
    return unnorm / unnorm.sum(-1, keepdim=True).clamp(min=EPS)


def _flatE(E):
    return E.reshape(E.shape[0], -1, E.shape[-1])


def _kl(p, q):
    """``sum p log(p/q)`` over the last axis (0 log 0 = 0)."""
    return (p * (torch.log(p.clamp(min=EPS)) - torch.log(q.clamp(min=EPS)))).sum(-1)


def log_p_n(node_counts, n: torch.Tensor) -> torch.Tensor:
    """``log p(n)`` from the training histogram of node counts (DiGress ``DistributionNodes``)."""
    counts = torch.as_tensor(node_counts, dtype=torch.float64, device=n.device)
    prob = counts / counts.sum()
    return torch.log(prob[n.long()] + 1e-30).float()


def nll_terms(
    model,
    noise: DiscreteNoise,
    X,
    E,
    node_mask,
    node_counts,
    generator=None,
    use_extra=True,
    t: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """The four terms of the variational bound and their sum ``nll``, one value per graph
    (``B``). ``t``: the diffusion step of the middle term (default: uniform in ``1..T``)."""
    B = X.shape[0]
    device = X.device
    T = noise.T
    pair = _pair_mask(node_mask)
    xm, em = node_mask.float(), pair.float().reshape(B, -1)
    # -log p(n)
    logpn = log_p_n(node_counts, node_mask.sum(-1))
    # prior: KL(q(z_T | x) || m)
    QTx, QTe = noise.Qt_bar(torch.full((B,), T, device=device))
    kl_prior = (_kl(X @ QTx, noise.x_marginals.expand_as(X)) * xm).sum(-1) + (
        _kl(_flatE(E) @ QTe, noise.e_marginals.expand(B, em.shape[1], -1)) * em
    ).sum(-1)
    # diffusion term at t in 1..T, times T
    if t is None:
        t = torch.randint(1, T + 1, (B,), device=device, generator=generator)
    s = t - 1
    X_t, E_t = apply_noise(noise, X, E, node_mask, t, generator)
    predX, predE = predict(model, noise, X_t, E_t, node_mask, t, use_extra)
    Qtx, Qte = noise.Qt(t)
    Qsbx, Qsbe = noise.Qt_bar(s)
    Qtbx, Qtbe = noise.Qt_bar(t)
    true_X = posterior(X, X_t, Qtx, Qsbx, Qtbx)
    true_E = posterior(_flatE(E), _flatE(E_t), Qte, Qsbe, Qtbe)
    pred_X = p_zs_given_zt(predX, X_t, Qtx, Qsbx, Qtbx)
    pred_E = p_zs_given_zt(_flatE(predE), _flatE(E_t), Qte, Qsbe, Qtbe)
    kl_t = (_kl(true_X, pred_X) * xm).sum(-1) + (_kl(true_E, pred_E) * em).sum(-1)
    # reconstruction: -log p(x | z_0)
    zero = torch.zeros(B, dtype=torch.long, device=device)
    X_0, E_0 = apply_noise(noise, X, E, node_mask, zero, generator)
    p0X, p0E = predict(model, noise, X_0, E_0, node_mask, zero, use_extra)
    recon = (X * torch.log(p0X.clamp(min=EPS))).sum(-1).mul(xm).sum(-1) + (
        _flatE(E) * torch.log(_flatE(p0E).clamp(min=EPS))
    ).sum(-1).mul(em).sum(-1)
    nll = -logpn + kl_prior + T * kl_t - recon
    return {
        "nll": nll,
        "log_pn": logpn,
        "kl_prior": kl_prior,
        "diffusion_kl": T * kl_t,
        "reconstruction_logp": recon,
        "t": t.float(),
    }


def sample_n_nodes(node_counts, k: int, generator=None, device="cpu") -> torch.Tensor:
    counts = torch.as_tensor(node_counts, dtype=torch.float64)
    return torch.multinomial(counts / counts.sum(), k, replacement=True, generator=generator).to(device)


@torch.no_grad()
def sample_graphs(
    model, noise: DiscreteNoise, n_nodes: torch.Tensor, max_nodes: int = 9, generator=None, use_extra=True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ancestral sampling from the prior ``z_T ~ m`` down to ``z_0``; returns class tensors
    ``atoms`` ``B × max_nodes`` (-1 padding) and ``bonds`` ``B × max_nodes × max_nodes``."""
    device = noise.x_marginals.device
    B = len(n_nodes)
    node_mask = torch.arange(max_nodes, device=device).unsqueeze(0) < n_nodes.to(device).unsqueeze(1)
    dx, de = len(noise.x_marginals), len(noise.e_marginals)
    probX = noise.x_marginals.expand(B, max_nodes, dx)
    probE = noise.e_marginals.expand(B, max_nodes, max_nodes, de)
    X_t, E_t = sample_categorical(probX, probE, node_mask, generator)
    for s_int in reversed(range(noise.T)):
        s = torch.full((B,), s_int, device=device, dtype=torch.long)
        t = s + 1
        predX, predE = predict(model, noise, X_t, E_t, node_mask, t, use_extra)
        Qtx, Qte = noise.Qt(t)
        Qsbx, Qsbe = noise.Qt_bar(s)
        Qtbx, Qtbe = noise.Qt_bar(t)
        pX = p_zs_given_zt(predX, X_t, Qtx, Qsbx, Qtbx)
        pE = p_zs_given_zt(_flatE(predE), _flatE(E_t), Qte, Qsbe, Qtbe).reshape(E_t.shape)
        X_t, E_t = sample_categorical(pX, pE, node_mask, generator)
    atoms = torch.where(node_mask, X_t.argmax(-1), torch.full_like(node_mask, -1, dtype=torch.long))
    return atoms, E_t.argmax(-1)
