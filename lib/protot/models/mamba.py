"""Mamba baseline (Gu & Dao, arXiv 2312.00752): the selective SSM as the token mixer of the shared
LLaMA-style block. Pure torch (mamba-ssm needs CUDA); the scan is protot.models.selective_scan's.

    (x, z) = in_proj(u);  x = SiLU(conv(x));  (dt, B, C) = x_proj(x);  dt = softplus(dt_proj(dt))
    h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t      y_t = C_t h_t + D x_t      out = out_proj(y * SiLU(z))
with A = -exp(A_log): (E, N), E = expand * d the inner width, N the state size.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from protot.models.common import BaseCausalLM, BaseLMConfig, ShortConv, _require
from protot.models.selective_scan import selective_scan_chunked, selective_scan_reference

#: config ``scan`` values: the chunked scan with its recomputing backward (the default), or the
#: token-by-token reference; the same recurrence, so either runs the other's weights
SCANS = ("chunked", "reference")


class MambaBaselineConfig(BaseLMConfig):
    r"""state_size (N), expand (E = expand * d), conv_size, dt_rank (None -> ceil(d / 16)),
    dt_min / dt_max: range of the initial step sizes (log-uniform); scan: "chunked" or "reference"
    (same results up to rounding), chunk_size: the chunked scan's chunk length (speed and memory only)."""

    model_type = "protot_mamba"

    state_size: int = 16
    expand: int = 2
    conv_size: int = 4
    dt_rank: int | None = None
    dt_min: float = 1e-3
    dt_max: float = 1e-1
    scan: str = "chunked"
    chunk_size: int = 16

    def validate_fields(self):
        super().validate_fields()
        _require(self.state_size >= 1, "state_size", f"must be >= 1, got {self.state_size}")
        _require(self.expand >= 1, "expand", f"must be >= 1, got {self.expand}")
        _require(self.conv_size >= 1, "conv_size", f"must be >= 1, got {self.conv_size}")
        _require(self.dt_rank is None or self.dt_rank >= 1, "dt_rank", f"must be >= 1, got {self.dt_rank}")
        _require(0 < self.dt_min <= self.dt_max, "dt_min", f"need 0 < dt_min <= dt_max, got {self.dt_min}, {self.dt_max}")
        _require(self.scan in SCANS, "scan", f"must be one of {SCANS}, got {self.scan!r}")
        _require(self.chunk_size >= 1, "chunk_size", f"must be >= 1, got {self.chunk_size}")


#: the default form; x, dt: (B, T, E); A: (E, N); Bm, Cm: (B, T, N); D: (E,) -> y (B, T, E), h_T (B, E, N)
selective_scan = selective_scan_chunked


class MambaMixer(nn.Module):
    def __init__(self, config: MambaBaselineConfig, layer_idx: int):
        super().__init__()
        d, N = config.hidden_size, config.state_size
        E = config.expand * d
        R = config.dt_rank or math.ceil(d / 16)
        self.E, self.N, self.R, self.config = E, N, R, config
        self.in_proj = nn.Linear(d, 2 * E, bias=False)
        self.conv = ShortConv(E, config.conv_size, activation="silu")
        self.x_proj = nn.Linear(E, R + 2 * N, bias=False)
        self.dt_proj = nn.Linear(R, E, bias=True)
        self.A_log = nn.Parameter(torch.empty(E, N))
        self.D = nn.Parameter(torch.empty(E))
        self.out_proj = nn.Linear(E, d, bias=False)
        self.reset_ssm_parameters()

    @torch.no_grad()
    def reset_ssm_parameters(self):
        cfg = self.config
        self.A_log.copy_(torch.log(torch.arange(1, self.N + 1, dtype=torch.float32)).expand(self.E, -1))  # S4D-real
        self.D.fill_(1.0)
        dt = torch.exp(torch.rand(self.E) * (math.log(cfg.dt_max) - math.log(cfg.dt_min)) + math.log(cfg.dt_min))
        self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))    # inverse softplus
        nn.init.uniform_(self.dt_proj.weight, -self.R ** -0.5, self.R ** -0.5)

    def forward(self, u, layer_cache=None):
        B, T, d = u.shape
        x, z = self.in_proj(u).chunk(2, dim=-1)                         # (B, T, E) each
        x = self.conv(x, layer_cache, "conv")
        dt, Bm, Cm = self.x_proj(x).split([self.R, self.N, self.N], dim=-1)
        dt = F.softplus(self.dt_proj(dt))                               # (B, T, E)
        A = -torch.exp(self.A_log.to(x.dtype))                          # (E, N)
        h0 = None if layer_cache is None else layer_cache.get("h")
        if self.config.scan == "reference":
            y, h = selective_scan_reference(x, dt, A, Bm, Cm, self.D.to(x.dtype), h0)
        else:
            y, h = selective_scan_chunked(x, dt, A, Bm, Cm, self.D.to(x.dtype), h0, self.config.chunk_size)
        if layer_cache is not None:
            layer_cache["h"] = h.detach()
        return self.out_proj(y * F.silu(z)), None


class MambaBaselineForCausalLM(BaseCausalLM):
    config_class = MambaBaselineConfig

    def make_mixer(self, config, layer_idx):
        return MambaMixer(config, layer_idx)

    def init_mixer_weights(self, module):
        if isinstance(module, MambaMixer):
            module.reset_ssm_parameters()
