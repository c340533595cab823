"""LLaMA baseline: RoPE multi-head softmax attention through torch SDPA, KV cache for decoding."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from protot.models.common import BaseCausalLM, BaseLMConfig, _require


class LlamaBaselineConfig(BaseLMConfig):
    r"""num_attention_heads: heads (head_dim = hidden_size / heads); rope_theta: RoPE base."""

    model_type = "protot_llama"

    num_attention_heads: int = 4
    rope_theta: float = 10000.0

    def validate_fields(self):
        super().validate_fields()
        H = self.num_attention_heads
        _require(H >= 1 and self.hidden_size % H == 0, "num_attention_heads",
                 f"must be >= 1 and divide hidden_size={self.hidden_size}, got {H}")
        _require((self.hidden_size // H) % 2 == 0, "num_attention_heads", "head_dim must be even for RoPE")
        _require(self.rope_theta > 0, "rope_theta", f"must be > 0, got {self.rope_theta}")


def rope(x: torch.Tensor, offset: int, theta: float) -> torch.Tensor:
    """Rotate-half RoPE. x: (B, H, T, hd), positions offset .. offset+T-1."""
    B, H, T, hd = x.shape
    ft = torch.float64 if x.dtype == torch.float64 else torch.float32   # angles at least in float32
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, device=x.device, dtype=ft) / hd)   # (hd/2,)
    pos = torch.arange(offset, offset + T, device=x.device, dtype=ft)
    ang = torch.outer(pos, inv)                                         # (T, hd/2)
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)             # (T, hd)
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Attention(nn.Module):
    def __init__(self, config: LlamaBaselineConfig, layer_idx: int):
        super().__init__()
        d, H = config.hidden_size, config.num_attention_heads
        self.H, self.hd, self.theta = H, d // H, config.rope_theta
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x, layer_cache=None, offset: int = 0):
        B, T, d = x.shape
        q, k, v = (p(x).view(B, T, self.H, self.hd).transpose(1, 2)       # (B, H, T, hd)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        q, k = rope(q, offset, self.theta), rope(k, offset, self.theta)
        if layer_cache is not None:
            if "k" in layer_cache:
                k = torch.cat([layer_cache["k"], k], dim=2)             # (B, H, offset+T, hd)
                v = torch.cat([layer_cache["v"], v], dim=2)
            layer_cache["k"], layer_cache["v"] = k.detach(), v.detach()
        Tk = k.shape[2]
        if Tk == T:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:   # new queries at positions Tk-T .. Tk-1 see all keys up to their position
            i = torch.arange(Tk - T, Tk, device=x.device)[:, None]
            j = torch.arange(Tk, device=x.device)[None, :]
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=j <= i)
        y = y.transpose(1, 2).reshape(B, T, d)                          # (B, T, d)
        return self.o_proj(y), None


class LlamaBaselineForCausalLM(BaseCausalLM):
    config_class = LlamaBaselineConfig

    def make_mixer(self, config, layer_idx):
        return Attention(config, layer_idx)

    def mixer_kwargs(self, cache, **kwargs):
        return {"offset": 0 if cache is None else cache.seen_tokens}
