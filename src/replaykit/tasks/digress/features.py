"""Extra structural and molecular features DiGress adds to the noisy graph.

Source: cvignac/DiGress ``src/diffusion/extra_features.py`` (``KNodeCycles``,
``EigenFeatures`` in mode ``all``) and ``src/diffusion/extra_features_molecular.py``
(charge, valency, molecular weight); Vignac et al. (2023), sec. 4.3 and appendix B.

Computed on the noisy graph ``z_t`` (adjacency = any bond class but "none"):

* node (``X_EXTRA`` = 8): cycles through the node of length 3, 4, 5 (``/10``, capped at 1);
  non-largest-component indicator and the 2 first non-trivial Laplacian eigenvectors;
  formal charge estimate (normal valence - bond-order sum) and bond-order sum;
* graph (``Y_EXTRA`` = 11): cycle counts of length 3, 4, 5 (``/10``, capped), number of
  connected components, the 5 first non-zero Laplacian eigenvalues, molecular weight
  (``/150``) and the node count (``/9``).

Differences from the reference: 6-cycles are not counted (QM9 has at most 9 heavy atoms
and 6-rings are covered by the eigenvalue features); the eigen features use
``torch.linalg.eigh`` on the combinatorial Laplacian with padded nodes pushed to large
eigenvalues, as the reference does.
"""

from __future__ import annotations

import torch

from .data import ATOM_WEIGHT, BOND_ORDER, MAX_NODES, NORMAL_VALENCE

X_EXTRA, Y_EXTRA = 8, 11


def _diag(a: torch.Tensor) -> torch.Tensor:
    return torch.diagonal(a, dim1=-2, dim2=-1)


def cycles(adj: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Node cycle counts ``B × n × 3`` (k = 3, 4, 5) and graph counts ``B × 3``.

    Closed-walk formulas (DiGress ``KNodeCycles``), with ``d`` the degree vector and
    ``t = diag(A^3)``: ``c3 = diag(A^3)/2``; ``c4 = (diag(A^4) - d(d-1) - A d)/2``;
    ``c5 = (diag(A^5) - 2 t d - A t + t)/2``; graph counts ``sum c3/3``, ``sum c4/4``,
    ``sum c5/5`` (each cycle is seen from each of its k nodes).
    """
    a2 = adj @ adj
    a3 = a2 @ adj
    a4 = a3 @ adj
    a5 = a4 @ adj
    d = adj.sum(-1)
    tri = _diag(a3)
    c3 = tri / 2
    c4 = (_diag(a4) - d * (d - 1) - (adj @ d.unsqueeze(-1)).squeeze(-1)) / 2
    c5 = (_diag(a5) - 2 * tri * d - (adj @ tri.unsqueeze(-1)).squeeze(-1) + tri) / 2
    node = torch.stack([c3, c4, c5], -1)
    graph = torch.stack([c3.sum(-1) / 3, c4.sum(-1) / 4, c5.sum(-1) / 5], -1)
    return node, graph


def eigen(adj: torch.Tensor, node_mask: torch.Tensor, k: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """Laplacian features: node ``B × n × 3`` (non-largest-component indicator, 2
    eigenvectors) and graph ``B × (1 + k)`` (connected components, ``k`` first non-zero
    eigenvalues, 2 when missing)."""
    mask = node_mask.float()
    n = adj.shape[-1]
    lap = torch.diag_embed(adj.sum(-1)) - adj
    lap = lap + torch.diag_embed(2 * n * (1 - mask))  # padded nodes: large isolated eigenvalues
    try:
        vals, vecs = torch.linalg.eigh(lap)
    except torch.linalg.LinAlgError:
        # CUDA's solver can fail to converge on the repeated eigenvalues of padded nodes
        # (seen on an H200 after ~1,000 steps): solve that batch on the CPU in float64
        vals, vecs = (t.to(lap) for t in torch.linalg.eigh(lap.detach().double().cpu()))
    vals = vals / n
    zero = vals < 1e-5
    n_comp = zero.sum(-1, keepdim=True).float()
    # first non-zero eigenvalues: shift by the number of components
    idx = n_comp.long() + torch.arange(k, device=adj.device).unsqueeze(0)
    first = torch.gather(torch.cat([vals, torch.full_like(vals[:, :k], 2.0)], -1), 1, idx)
    ev0 = torch.round(vecs[..., 0] * 1e3) / 1e3 * mask
    mode = torch.mode(ev0 + (1 - mask) * 1e6, dim=-1).values.unsqueeze(-1)
    nonlcc = ((ev0 - mode).abs() > 1e-6).float() * mask
    idx_v = (n_comp.long() + torch.arange(2, device=adj.device).unsqueeze(0)).clamp(max=n - 1)
    vec2 = torch.gather(vecs, 2, idx_v.unsqueeze(1).expand(-1, n, -1)) * mask.unsqueeze(-1)
    return torch.cat([nonlcc.unsqueeze(-1), vec2], -1), torch.cat([n_comp, first], -1)


def extra_features(X: torch.Tensor, E: torch.Tensor, node_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B × n × X_EXTRA, B × Y_EXTRA)`` for one-hot noisy ``X`` (``B × n × 4``) and ``E``
    (``B × n × n × 5``); ``node_mask`` ``B × n`` bool."""
    mask = node_mask.float()
    adj = E[..., 1:].sum(-1).float() * mask.unsqueeze(1) * mask.unsqueeze(2)
    node_c, graph_c = cycles(adj)
    node_c, graph_c = (node_c / 10).clamp(max=1), (graph_c / 10).clamp(max=1)
    node_e, graph_e = eigen(adj, node_mask)
    order = torch.tensor(BOND_ORDER, device=E.device, dtype=torch.float32)
    valence = (E.float() * order).sum(-1).sum(-1) * mask
    normal = (X.float() * torch.tensor(NORMAL_VALENCE, device=X.device, dtype=torch.float32)).sum(-1)
    charge = (normal - valence) * mask
    weight = (X.float() * torch.tensor(ATOM_WEIGHT, device=X.device, dtype=torch.float32)).sum(-1).sum(-1) / 150
    x_extra = torch.cat([node_c, node_e, charge.unsqueeze(-1), valence.unsqueeze(-1)], -1) * mask.unsqueeze(-1)
    y_extra = torch.cat([graph_c, graph_e, weight.unsqueeze(-1), mask.sum(-1, keepdim=True) / MAX_NODES], -1)
    return x_extra, y_extra
