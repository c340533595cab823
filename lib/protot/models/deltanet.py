"""DeltaNet baseline (Yang et al., arXiv 2406.06484): delta rule with short convolutions on q, k, v,
SiLU + L2-normalised q and k, a sigmoid writing strength beta_t per head, per-head output RMSNorm.

Per head, with state S: (d_k, d_v) (row convention):
    S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T        o_t = S_t^T q_t
Chunked form (the WY representation, within a chunk of C tokens; S = state entering the chunk):
    T  = (I + tril(diag(beta) K K^T, -1))^{-1}       W = T diag(beta) K     U = T diag(beta) V
    U' = U - W S      O = Q S + tril(Q K^T) U'      S_next = S + K^T U'
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from protot.models.common import BaseCausalLM, BaseLMConfig, RMSNorm, ShortConv, _require


class DeltaNetBaselineConfig(BaseLMConfig):
    r"""num_heads: heads (head_dim = hidden_size / heads); conv_size: short conv width on q, k, v;
    chunk_size: chunk length of the chunked delta rule; form: "chunk" or "recurrent" (reference)."""

    model_type = "protot_deltanet"

    num_heads: int = 4
    conv_size: int = 4
    chunk_size: int = 64
    form: str = "chunk"

    def validate_fields(self):
        super().validate_fields()
        _require(self.num_heads >= 1 and self.hidden_size % self.num_heads == 0, "num_heads",
                 f"must be >= 1 and divide hidden_size={self.hidden_size}, got {self.num_heads}")
        _require(self.conv_size >= 1, "conv_size", f"must be >= 1, got {self.conv_size}")
        _require(self.chunk_size >= 1, "chunk_size", f"must be >= 1, got {self.chunk_size}")
        _require(self.form in ("chunk", "recurrent"), "form", f"must be 'chunk' or 'recurrent', got {self.form!r}")


def delta_rule_recurrent(q, k, v, beta, initial_state=None):
    """q, k: (B, H, T, dk); v: (B, H, T, dv); beta: (B, H, T). Returns o (B, H, T, dv), S (B, H, dk, dv)."""
    B, H, T, dk = q.shape
    S = q.new_zeros(B, H, dk, v.shape[-1]) if initial_state is None else initial_state
    outs = []
    for qt, kt, vt, bt in zip(q.unbind(2), k.unbind(2), v.unbind(2), beta.unbind(2)):   # (B, H, .) each
        v_old = torch.einsum("bhk,bhkv->bhv", kt, S)                    # S^T k_t
        S = S + kt[..., None] * (bt[..., None] * (vt - v_old))[..., None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", qt, S))
    return torch.stack(outs, dim=2), S


def delta_rule_chunk(q, k, v, beta, initial_state=None, chunk_size: int = 64):
    """Chunked delta rule (WY form); same signature as ``delta_rule_recurrent``."""
    B, H, T, dk = q.shape
    dv = v.shape[-1]
    C = chunk_size
    N = math.ceil(T / C)
    pad = N * C - T
    if pad:   # zero k and beta on padding: the state is unchanged by padded steps
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        beta = F.pad(beta, (0, pad))
    q, k, v = (x.view(B, H, N, C, -1) for x in (q, k, v))                # (B, H, N, C, .)
    beta = beta.view(B, H, N, C)
    k_beta, v_beta = k * beta[..., None], v * beta[..., None]
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    L = torch.tril(k_beta @ k.transpose(-1, -2), diagonal=-1)           # (B, H, N, C, C)
    Tm = torch.linalg.solve_triangular(eye + L, eye.expand_as(L), upper=False)
    w, u = Tm @ k_beta, Tm @ v_beta                                     # (B, H, N, C, dk/dv)
    causal = torch.tril(torch.ones(C, C, dtype=torch.bool, device=q.device))
    S = q.new_zeros(B, H, dk, dv) if initial_state is None else initial_state
    outs = []
    for q_n, k_n, u_n, w_n in zip(q.unbind(2), k.unbind(2), u.unbind(2), w.unbind(2)):
        u_n = u_n - w_n @ S                                             # (B, H, C, dv)
        attn = (q_n @ k_n.transpose(-1, -2)).masked_fill(~causal, 0)
        outs.append(q_n @ S + attn @ u_n)
        S = S + k_n.transpose(-1, -2) @ u_n
    o = torch.stack(outs, dim=2).reshape(B, H, N * C, dv)[:, :, :T]
    return o, S


class DeltaNetMixer(nn.Module):
    def __init__(self, config: DeltaNetBaselineConfig, layer_idx: int):
        super().__init__()
        d, H = config.hidden_size, config.num_heads
        self.H, self.hd, self.config = H, d // H, config
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.b_proj = nn.Linear(d, H, bias=False)
        self.q_conv = ShortConv(d, config.conv_size, activation="silu")
        self.k_conv = ShortConv(d, config.conv_size, activation="silu")
        self.v_conv = ShortConv(d, config.conv_size, activation="silu")
        self.o_norm = RMSNorm(self.hd, config.rms_norm_eps)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x, layer_cache=None):
        B, T, d = x.shape
        H, hd = self.H, self.hd
        q = self.q_conv(self.q_proj(x), layer_cache, "q_conv").view(B, T, H, hd).transpose(1, 2)  # (B, H, T, hd)
        k = self.k_conv(self.k_proj(x), layer_cache, "k_conv").view(B, T, H, hd).transpose(1, 2)
        v = self.v_conv(self.v_proj(x), layer_cache, "v_conv").view(B, T, H, hd).transpose(1, 2)
        q, k = F.normalize(q, dim=-1) * hd ** -0.5, F.normalize(k, dim=-1)
        beta = torch.sigmoid(self.b_proj(x)).transpose(1, 2)            # (B, H, T)
        S0 = None if layer_cache is None else layer_cache.get("S")
        if T == 1 or self.config.form == "recurrent":
            o, S = delta_rule_recurrent(q, k, v, beta, S0)
        else:
            o, S = delta_rule_chunk(q, k, v, beta, S0, self.config.chunk_size)
        if layer_cache is not None:
            layer_cache["S"] = S.detach()
        o = self.o_norm(o).transpose(1, 2).reshape(B, T, d)             # (B, T, d)
        return self.o_proj(o), None


class DeltaNetBaselineForCausalLM(BaseCausalLM):
    config_class = DeltaNetBaselineConfig

    def make_mixer(self, config, layer_idx):
        return DeltaNetMixer(config, layer_idx)
