"""The LasF module (Pei et al., ICML 2024, sections 3-4; docs/lasf.md), in plain torch.

``LasF(n_fields, d_in, d_q, d_s, d_out, mode=..., kernel=...)`` maps ``x`` [batch, L, D_X] to
``Y_hat`` [batch, L, D_Y]. Trainable tensors carry the paper's names: ``L`` [N_s, D_X, D_Q] (neuronal
projection), ``L_S`` [N_s, D_X, D_S] (signal projection), ``L_Y`` [D_S, D_Y] (output projection).
The length projections D, D_S are the non-trainable kernels of section 4 (identity, or the Gaussian
``D[i, j] = N(i - j)``), cut to each text's length; D_Y is the identity (L_Y = L_Q = L_X).

Modes:
    ``paper``: Eq. 2-7 and Eq. 11-12 as written: Psi = L2 distances between neuron states, Phi =
        sum of the L1, L2, L3 distances between field means, ``O = sigmoid(Phi Psi S)`` (one sigmoid,
        Eq. 11 — not the two of Eq. 8-9), ``Y_hat = (sum_l O[l]) L_Y``.
    ``stable``: the same structure made trainable: the weights applied to S are
        ``softmax_j(-Psi[l, i, j] / sqrt(D_Q))`` (Eq. 13's causal Lambda optional), Phi is normalised
        per row, an output bias, an optional residual path, and a LayerNorm on Y_hat.
Padding (``mask`` False) is excluded everywhere: from the kernels, Psi, the field means and softmax.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import nn

Mode = Literal["paper", "stable"]
Kernel = Literal["identity", "gaussian"]
Residual = Literal["none", "identity", "linear"]
MODES = ("paper", "stable")
KERNELS = ("identity", "gaussian")
RESIDUALS = ("none", "identity", "linear")
P_NORMS = (1, 2, 3)  # the metrics mu_k of Eq. 6


def length_kernel(kind: str, n: int, *, dtype: torch.dtype, device: Any = None) -> torch.Tensor:
    """The non-trainable length projection D [n, n] (section 4): identity or ``N(i - j)``."""
    if kind == "identity":
        return torch.eye(n, dtype=dtype, device=device)
    if kind == "gaussian":
        idx = torch.arange(n, dtype=dtype, device=device)
        diff = idx[:, None] - idx[None, :]
        return torch.exp(-0.5 * diff**2) / math.sqrt(2 * math.pi)
    raise ValueError(f"unknown kernel {kind!r}; use one of {', '.join(KERNELS)}")


def pairwise_l2(q: torch.Tensor) -> torch.Tensor:
    """||q_i - q_j||_2 for q [..., n, d] -> [..., n, n], exactly zero on the diagonal, safe gradient."""
    diff = q[..., :, None, :] - q[..., None, :, :]
    sq = (diff * diff).sum(-1)
    eye = torch.eye(q.shape[-2], dtype=torch.bool, device=q.device)
    safe = torch.where(eye, torch.ones_like(sq), sq)  # sqrt'(0) is infinite
    return torch.where(eye, torch.zeros_like(sq), safe.clamp_min(1e-30).sqrt())


def field_relations(q_mean: torch.Tensor) -> torch.Tensor:
    """Phi[l, m] = sum_{p=1,2,3} ||q_mean[l] - q_mean[m]||_p (Eq. 6). [..., N_s, D_Q] -> [..., N_s, N_s]."""
    diff = (q_mean[..., :, None, :] - q_mean[..., None, :, :]).abs()
    n = q_mean.shape[-2]
    eye = torch.eye(n, dtype=torch.bool, device=q_mean.device)
    out = torch.zeros(diff.shape[:-1], dtype=q_mean.dtype, device=q_mean.device)
    for p in P_NORMS:
        powered = (diff**p).sum(-1)
        safe = torch.where(eye, torch.ones_like(powered), powered).clamp_min(1e-30)
        out = out + torch.where(eye, torch.zeros_like(powered), safe ** (1.0 / p))
    return out


class LasF(nn.Module):
    """A LasF layer: N_s semantic fields relate the tokens; Phi mixes the fields (docs/lasf.md)."""

    def __init__(
        self,
        n_fields: int,
        d_in: int,
        d_q: int,
        d_s: int,
        d_out: int,
        *,
        mode: Mode = "paper",
        kernel: Kernel = "identity",
        causal: bool = False,
        residual: Residual = "none",
        init_scale: float = 1.0,
    ):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        if kernel not in KERNELS:
            raise ValueError(f"unknown kernel {kernel!r}; use one of {', '.join(KERNELS)}")
        if residual not in RESIDUALS:
            raise ValueError(f"unknown residual {residual!r}; use one of {', '.join(RESIDUALS)}")
        if residual != "none" and mode != "stable":
            raise ValueError("a residual path belongs to the stable mode only")
        if residual == "identity" and d_in != d_out:
            raise ValueError(f"an identity residual needs d_in == d_out, got {d_in} and {d_out}")
        self.n_fields, self.d_in, self.d_q, self.d_s, self.d_out = n_fields, d_in, d_q, d_s, d_out
        self.mode, self.kernel, self.causal, self.residual = mode, kernel, causal, residual
        self.init_scale = init_scale
        g = init_scale
        self.L = nn.Parameter(torch.randn(n_fields, d_in, d_q) * (g / math.sqrt(d_in)))
        self.L_S = nn.Parameter(torch.randn(n_fields, d_in, d_s) * (g / math.sqrt(d_in)))
        # with a residual path the fields start silent (zero L_Y), as residual branches often do
        y_scale = 0.0 if residual != "none" else g / math.sqrt(d_s)
        self.L_Y = nn.Parameter(torch.randn(d_s, d_out) * y_scale)
        if mode == "stable":
            self.b_Y = nn.Parameter(torch.zeros(d_out))
            self.norm = nn.LayerNorm(d_out)
            if residual == "linear":
                self.W_R = nn.Linear(d_in, d_out)

    def config(self) -> dict[str, Any]:
        """The constructor's arguments (what a checkpoint stores)."""
        return {
            "n_fields": self.n_fields, "d_in": self.d_in, "d_q": self.d_q, "d_s": self.d_s,
            "d_out": self.d_out, "mode": self.mode, "kernel": self.kernel, "causal": self.causal,
            "residual": self.residual, "init_scale": self.init_scale,
        }  # fmt: skip

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Y_hat [batch, L, D_Y] of x [batch, L, D_X] (mask [batch, L], True = real token)."""
        return self.internals(x, mask)["y"]

    def internals(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        phi_override: torch.Tensor | None = None,
        field_scale: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Every intermediate of one forward pass.

        Args:
            x: [batch, L, D_X]; a 2-D [L, D_X] input is treated as a batch of one.
            mask: [batch, L] bool, True for real tokens (None: all real).
            phi_override: [N_s, N_s] used in place of the Phi the module computes (tests, ablations).
            field_scale: [N_s] multiplies each field's output O[l] (1 = keep, 0 = ablate).

        Returns:
            ``Q`` [b, N_s, L, D_Q], ``S`` [b, N_s, L, D_S], ``psi`` [b, N_s, L, L], ``weights``
            [b, N_s, L, L] (what multiplies S: Psi in paper mode, the softmax in stable mode),
            ``q_mean`` [b, N_s, D_Q], ``phi`` [b, N_s, N_s] (Eq. 6), ``phi_used`` [b, N_s, N_s] (the
            mixing actually applied), ``O`` [b, N_s, L, D_S], ``y`` [b, L, D_Y], ``mask`` [b, L].
        """
        if x.dim() == 2:
            x = x[None]
        b, n, _ = x.shape
        if mask is None:
            mask = torch.ones(b, n, dtype=torch.bool, device=x.device)
        mask = mask.to(torch.bool)
        mf = mask.to(x.dtype)  # [b, L]
        pair = mf[:, :, None] * mf[:, None, :]  # [b, i, j] both real
        xm = x * mf[..., None]
        if self.kernel == "identity":
            dx = xm  # D^T X with D = I
        else:  # D^T X, padding rows and columns cut: the kernel only sees real tokens
            D = length_kernel(self.kernel, n, dtype=x.dtype, device=x.device)  # [L, L]
            dx = torch.einsum("ji,bjd->bid", D, xm) * mf[..., None]  # [b, L, D_X]
        Q = torch.einsum("bid,fdq->bfiq", dx, self.L)  # [b, N_s, L, D_Q]   (Eq. 2)
        S = torch.einsum("bid,fds->bfis", dx, self.L_S)  # [b, N_s, L, D_S]  (Eq. 7)
        psi = pairwise_l2(Q) * pair[:, None]  # [b, N_s, L, L]              (Eq. 3)
        count = mf.sum(1).clamp_min(1.0)  # [b]
        q_mean = (Q * mf[:, None, :, None]).sum(2) / count[:, None, None]  # (Eq. 5)
        phi = field_relations(q_mean)  # [b, N_s, N_s]                          (Eq. 6)
        if self.causal:
            lam = torch.tril(torch.ones(n, n, dtype=x.dtype, device=x.device))  # Eq. 13's Lambda
        if self.mode == "paper":
            weights = psi * lam if self.causal else psi
            phi_used = phi
        else:
            logits = -psi / math.sqrt(self.d_q)
            allowed = pair.to(torch.bool)[:, None].expand_as(logits)
            if self.causal:
                allowed = allowed & lam.to(torch.bool)
            logits = logits.masked_fill(~allowed, float("-inf"))
            weights = torch.softmax(logits, dim=-1).nan_to_num(0.0) * mf[:, None, :, None]
            phi_used = phi / phi.sum(-1, keepdim=True).clamp_min(1e-12)
        if phi_override is not None:
            phi_used = phi_override.to(x.dtype).expand(b, -1, -1)
        relayed = torch.einsum("bmij,bmjs->bmis", weights, S)  # Psi[m] S[m]
        O = torch.sigmoid(torch.einsum("blm,bmis->blis", phi_used, relayed))  # (Eq. 11)  # noqa: E741 - the paper's name
        O = O * mf[:, None, :, None]  # noqa: E741 - the paper's name
        if field_scale is not None:
            O = O * field_scale.to(x.dtype)[None, :, None, None]  # noqa: E741 - the paper's name
        y = O.sum(1) @ self.L_Y  # (Eq. 12, D_Y = identity)
        if self.mode == "stable":
            y = y + self.b_Y
            if self.residual == "identity":
                y = y + x
            elif self.residual == "linear":
                y = y + self.W_R(x)
            y = self.norm(y)
        y = y * mf[..., None]
        return {
            "Q": Q, "S": S, "psi": psi, "weights": weights, "q_mean": q_mean, "phi": phi,
            "phi_used": phi_used, "O": O, "y": y, "mask": mask,
        }  # fmt: skip


def n_parameters(module: nn.Module) -> int:
    """Trainable parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
