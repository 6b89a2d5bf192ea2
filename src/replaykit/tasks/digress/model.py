"""DiGress's graph Transformer over node, edge and global features.

Source: Vignac et al. (2023), sec. 4.3 and appendix B.1; reference implementation
cvignac/DiGress ``src/models/transformer_model.py`` (``GraphTransformer``,
``XEyTransformerLayer``, ``NodeEdgeBlock``, ``Xtoy``, ``Etoy``). Written anew from the
paper's description; the layer structure follows the reference:

* self-attention over nodes whose per-head scores ``Q_i * K_j / sqrt(d)`` (elementwise, ``B×n×n×h×d``)
  are FiLM-modulated by the edge features; the modulated scores become the new edge
  features; both node and edge outputs are FiLM-modulated by the global features ``y``;
* ``y`` is updated from pooled node and edge statistics (mean, min, max, std);
* each stream has a residual, layer norm and feed-forward block;
* the network predicts logits of the clean categories; the input's categorical part is
  added back (DiGress's residual), edge logits are symmetrised, the diagonal and padding
  are masked.

Shapes: ``X`` ``B × n × dx``, ``E`` ``B × n × n × de``, ``y`` ``B × dy``, ``node_mask`` ``B × n``.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class Xtoy(nn.Module):
    """Pooled node statistics (mean, min, max, std over real nodes) -> ``dy``."""

    def __init__(self, dx: int, dy: int):
        super().__init__()
        self.lin = nn.Linear(4 * dx, dy)

    def forward(self, X, mask):
        m = mask.unsqueeze(-1).float()
        n = m.sum(1).clamp(min=1)
        mean = (X * m).sum(1) / n
        mn = (X + (1 - m) * 1e5).min(1).values
        mx = (X - (1 - m) * 1e5).max(1).values
        std = (((X - mean.unsqueeze(1)) ** 2 * m).sum(1) / n).clamp(min=1e-8).sqrt()  # finite gradient at 0
        return self.lin(torch.cat([mean, mn, mx, std], -1))


class Etoy(nn.Module):
    """Pooled edge statistics (mean, min, max, std over real pairs) -> ``dy``."""

    def __init__(self, de: int, dy: int):
        super().__init__()
        self.lin = nn.Linear(4 * de, dy)

    def forward(self, E, mask):
        m = (mask.unsqueeze(1) & mask.unsqueeze(2)).unsqueeze(-1).float()
        n = m.sum((1, 2)).clamp(min=1)
        mean = (E * m).sum((1, 2)) / n
        mn = (E + (1 - m) * 1e5).amin((1, 2))
        mx = (E - (1 - m) * 1e5).amax((1, 2))
        std = (((E - mean[:, None, None]) ** 2 * m).sum((1, 2)) / n).clamp(min=1e-8).sqrt()
        return self.lin(torch.cat([mean, mn, mx, std], -1))


class NodeEdgeBlock(nn.Module):
    """Attention with edge and global FiLM; returns new ``(X, E, y)`` (before residuals)."""

    def __init__(self, dx: int, de: int, dy: int, n_head: int):
        super().__init__()
        assert dx % n_head == 0
        self.h, self.df = n_head, dx // n_head
        self.q, self.k, self.v = nn.Linear(dx, dx), nn.Linear(dx, dx), nn.Linear(dx, dx)
        self.e_add, self.e_mul = nn.Linear(de, dx), nn.Linear(de, dx)
        self.y_e_add, self.y_e_mul = nn.Linear(dy, dx), nn.Linear(dy, dx)
        self.y_x_add, self.y_x_mul = nn.Linear(dy, dx), nn.Linear(dy, dx)
        self.y_y = nn.Linear(dy, dy)
        self.x_y, self.e_y = Xtoy(dx, dy), Etoy(de, dy)
        self.x_out, self.e_out = nn.Linear(dx, dx), nn.Linear(dx, de)
        self.y_out = nn.Sequential(nn.Linear(dy, dy), nn.ReLU(), nn.Linear(dy, dy))

    def forward(self, X, E, y, mask):
        B, n, _ = X.shape
        xm = mask.unsqueeze(-1).float()
        em = (mask.unsqueeze(1) & mask.unsqueeze(2)).unsqueeze(-1).float()
        Q = (self.q(X) * xm).reshape(B, n, 1, self.h, self.df)
        K = (self.k(X) * xm).reshape(B, 1, n, self.h, self.df)
        Y = Q * K / math.sqrt(self.df)  # B n n h df
        E1 = (self.e_mul(E) * em).reshape(B, n, n, self.h, self.df)
        E2 = (self.e_add(E) * em).reshape(B, n, n, self.h, self.df)
        Y = Y * (E1 + 1) + E2
        newE = Y.flatten(3)
        ye1, ye2 = self.y_e_add(y)[:, None, None], self.y_e_mul(y)[:, None, None]
        newE = self.e_out(ye1 + (ye2 + 1) * newE) * em
        key_mask = mask[:, None, :, None, None]
        attn = torch.softmax(Y.masked_fill(~key_mask, float("-inf")), dim=2)
        V = (self.v(X) * xm).reshape(B, 1, n, self.h, self.df)
        wV = (attn * V).sum(2).flatten(2)  # B n dx
        newX = self.y_x_add(y).unsqueeze(1) + (self.y_x_mul(y).unsqueeze(1) + 1) * wV
        newX = self.x_out(newX) * xm
        new_y = self.y_out(self.y_y(y) + self.x_y(X, mask) + self.e_y(E, mask))
        return newX, newE, new_y


class XEyTransformerLayer(nn.Module):
    """One layer: :class:`NodeEdgeBlock`, then per stream dropout + residual + LayerNorm + FFN."""

    def __init__(self, dx, de, dy, n_head, dim_ffX, dim_ffE, dim_ffy, dropout=0.1):
        super().__init__()
        self.attn = NodeEdgeBlock(dx, de, dy, n_head)
        self.ffX = nn.Sequential(nn.Linear(dx, dim_ffX), nn.ReLU(), nn.Dropout(dropout), nn.Linear(dim_ffX, dx))
        self.ffE = nn.Sequential(nn.Linear(de, dim_ffE), nn.ReLU(), nn.Dropout(dropout), nn.Linear(dim_ffE, de))
        self.ffy = nn.Sequential(nn.Linear(dy, dim_ffy), nn.ReLU(), nn.Dropout(dropout), nn.Linear(dim_ffy, dy))
        self.nX1, self.nX2 = nn.LayerNorm(dx), nn.LayerNorm(dx)
        self.nE1, self.nE2 = nn.LayerNorm(de), nn.LayerNorm(de)
        self.ny1, self.ny2 = nn.LayerNorm(dy), nn.LayerNorm(dy)
        self.drop = nn.Dropout(dropout)

    def forward(self, X, E, y, mask):
        nX, nE, ny = self.attn(X, E, y, mask)
        X = self.nX1(X + self.drop(nX))
        E = self.nE1(E + self.drop(nE))
        y = self.ny1(y + self.drop(ny))
        X = self.nX2(X + self.drop(self.ffX(X)))
        E = self.nE2(E + self.drop(self.ffE(E)))
        y = self.ny2(y + self.drop(self.ffy(y)))
        return X, E, y


class GraphTransformer(nn.Module):
    """DiGress's denoiser.

    Args:
        n_layers: transformer layers (9 at full scale).
        input_dims: ``{"X", "E", "y"}`` widths of the inputs (categories + extra features).
        hidden_mlp_dims: ``{"X", "E", "y"}`` widths of the input/output MLPs.
        hidden_dims: ``{"dx", "de", "dy", "n_head", "dim_ffX", "dim_ffE", "dim_ffy"}``.
        output_dims: ``{"X", "E"}`` numbers of atom and bond classes.
        dropout: inside each layer (DiGress: 0.1).
    """

    def __init__(
        self,
        n_layers: int,
        input_dims: dict,
        hidden_mlp_dims: dict,
        hidden_dims: dict,
        output_dims: dict,
        dropout: float = 0.1,
    ):
        super().__init__()
        hm, hd = hidden_mlp_dims, hidden_dims
        self.out_x, self.out_e = int(output_dims["X"]), int(output_dims["E"])
        self.mlp_in_X = nn.Sequential(
            nn.Linear(input_dims["X"], hm["X"]), nn.ReLU(), nn.Linear(hm["X"], hd["dx"]), nn.ReLU()
        )
        self.mlp_in_E = nn.Sequential(
            nn.Linear(input_dims["E"], hm["E"]), nn.ReLU(), nn.Linear(hm["E"], hd["de"]), nn.ReLU()
        )
        self.mlp_in_y = nn.Sequential(
            nn.Linear(input_dims["y"], hm["y"]), nn.ReLU(), nn.Linear(hm["y"], hd["dy"]), nn.ReLU()
        )
        self.layers = nn.ModuleList(
            XEyTransformerLayer(
                hd["dx"], hd["de"], hd["dy"], hd["n_head"], hd["dim_ffX"], hd["dim_ffE"], hd["dim_ffy"], dropout
            )
            for _ in range(n_layers)
        )
        self.mlp_out_X = nn.Sequential(nn.Linear(hd["dx"], hm["X"]), nn.ReLU(), nn.Linear(hm["X"], self.out_x))
        self.mlp_out_E = nn.Sequential(nn.Linear(hd["de"], hm["E"]), nn.ReLU(), nn.Linear(hm["E"], self.out_e))

    def forward(self, X, E, y, node_mask):
        """Logits of the clean ``X`` (``B × n × out_x``) and ``E`` (``B × n × n × out_e``)."""
        n = X.shape[1]
        diag = torch.eye(n, dtype=torch.bool, device=X.device).unsqueeze(0)
        X_cat, E_cat = X[..., : self.out_x], E[..., : self.out_e]
        xm = node_mask.unsqueeze(-1).float()
        em = (node_mask.unsqueeze(1) & node_mask.unsqueeze(2)).unsqueeze(-1).float()
        E_in = self.mlp_in_E(E)
        E_in = (E_in + E_in.transpose(1, 2)) / 2
        h_X, h_E, h_y = self.mlp_in_X(X) * xm, E_in * em, self.mlp_in_y(y)
        for layer in self.layers:
            h_X, h_E, h_y = layer(h_X, h_E, h_y, node_mask)
        out_X = (self.mlp_out_X(h_X) + X_cat) * xm
        out_E = self.mlp_out_E(h_E) + E_cat
        out_E = (out_E + out_E.transpose(1, 2)) / 2
        out_E = out_E.masked_fill(diag.unsqueeze(-1), 0.0) * em
        return out_X, out_E


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def cross_entropy(pred_X, pred_E, X, E, node_mask, lambda_E: float = 5.0) -> tuple[torch.Tensor, dict]:
    """DiGress's training loss (``TrainLossDiscrete``): mean cross-entropy over real nodes
    plus ``lambda_E`` × mean cross-entropy over real ordered pairs ``i != j`` ("no bond"
    included). ``X``/``E`` one-hot targets; returns ``(loss, {"loss_X", "loss_E"})``."""
    n = X.shape[1]
    pair = node_mask.unsqueeze(1) & node_mask.unsqueeze(2) & ~torch.eye(n, dtype=torch.bool, device=X.device)
    lx = F.cross_entropy(pred_X[node_mask].float(), X[node_mask].argmax(-1))
    le = F.cross_entropy(pred_E[pair].float(), E[pair].argmax(-1))
    return lx + lambda_E * le, {"loss_X": float(lx.detach()), "loss_E": float(le.detach())}
