"""The baselines as the libraries build them: name maps from the project's LLaMA, Mamba and DeltaNet
(protot.models) onto transformers' LlamaForCausalLM and MambaMixer and flash-linear-attention's
DeltaNetForCausalLM, and builders that copy a model's weights through them.

    transformers_llama(model)            a LlamaForCausalLM holding ``model``'s weights
    transformers_mamba_mixer(mixer, cfg) a transformers MambaMixer holding one of our mixers' weights
    with_transformers_mamba(model)       a copy of our Mamba LM whose token mixers are transformers' MambaMixer
    fla_deltanet(model)                  an fla DeltaNetForCausalLM holding ``model``'s weights

Each map reads {our parameter name: the library's name}; "{l}" stands for the layer index. Every
builder takes ``name_map`` (default: the documented map) and ``**config_changes`` (fields of the
library's config set after the ones derived from ours), so a test can change one entry or one setting
and see the outputs part. Copying is strict: every one of our tensors goes somewhere, every tensor of
the library's module is written, shapes agree up to singleton axes (our short convolutions store
(D, W), the libraries' nn.Conv1d (D, 1, W)); anything else raises ValueError naming the tensor.

Where the project departs from the library (README of this folder, "The baselines against the
libraries"):
- Mamba: our block is the shared LLaMA-style block (RMS pre-norm, mixer, residual, then an RMS-normed
  SwiGLU), transformers' MambaBlock has no feed-forward layer; the comparison is per mixer, and for the
  whole LM with transformers' mixer inside our blocks. Our short convolution has no bias
  (``use_conv_bias=False`` here; transformers' default is True).
- Norm epsilon: ``rms_norm_eps=None`` (the authors' recipe) is the dtype's machine epsilon; the
  libraries take a number (transformers' LlamaConfig 1e-6, fla's DeltaNetConfig 1e-6, fla's DeltaNet
  layer 1e-5), so the builders pass ``torch.finfo(dtype).eps`` for None.
transformers and fla are imported when a builder runs (fla takes seconds to import).
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn as nn

__all__ = ["LLAMA_TO_TRANSFORMERS", "MAMBA_MIXER_TO_TRANSFORMERS", "DELTANET_TO_FLA", "expand_map",
           "copy_weights", "norm_eps", "transformers_llama", "transformers_mamba_mixer",
           "with_transformers_mamba", "TransformersMixer", "fla_deltanet"]

#: protot.models.llama (LlamaBaselineForCausalLM) -> transformers LlamaForCausalLM
LLAMA_TO_TRANSFORMERS = {
    "embed_tokens.weight": "model.embed_tokens.weight",
    "layers.{l}.mixer_norm.weight": "model.layers.{l}.input_layernorm.weight",
    "layers.{l}.mixer.q_proj.weight": "model.layers.{l}.self_attn.q_proj.weight",
    "layers.{l}.mixer.k_proj.weight": "model.layers.{l}.self_attn.k_proj.weight",
    "layers.{l}.mixer.v_proj.weight": "model.layers.{l}.self_attn.v_proj.weight",
    "layers.{l}.mixer.o_proj.weight": "model.layers.{l}.self_attn.o_proj.weight",
    "layers.{l}.ffn_norm.weight": "model.layers.{l}.post_attention_layernorm.weight",
    "layers.{l}.ffn.gate_proj.weight": "model.layers.{l}.mlp.gate_proj.weight",
    "layers.{l}.ffn.up_proj.weight": "model.layers.{l}.mlp.up_proj.weight",
    "layers.{l}.ffn.down_proj.weight": "model.layers.{l}.mlp.down_proj.weight",
    "norm.weight": "model.norm.weight",
    "lm_head.weight": "lm_head.weight",
}

#: protot.models.mamba.MambaMixer -> transformers' MambaMixer (one layer; A_log and D as stored)
MAMBA_MIXER_TO_TRANSFORMERS = {
    "in_proj.weight": "in_proj.weight",              # (2E, d): the x half first, then the gate z
    "conv.weight": "conv1d.weight",                  # (E, W) -> (E, 1, W); no bias
    "x_proj.weight": "x_proj.weight",                # (R + 2N, E): dt, B, C
    "dt_proj.weight": "dt_proj.weight",
    "dt_proj.bias": "dt_proj.bias",
    "A_log": "A_log",
    "D": "D",
    "out_proj.weight": "out_proj.weight",
}

#: protot.models.deltanet (DeltaNetBaselineForCausalLM) -> fla's DeltaNetForCausalLM
DELTANET_TO_FLA = {
    "embed_tokens.weight": "model.embeddings.weight",
    "layers.{l}.mixer_norm.weight": "model.layers.{l}.attn_norm.weight",
    "layers.{l}.mixer.q_proj.weight": "model.layers.{l}.attn.q_proj.weight",
    "layers.{l}.mixer.k_proj.weight": "model.layers.{l}.attn.k_proj.weight",
    "layers.{l}.mixer.v_proj.weight": "model.layers.{l}.attn.v_proj.weight",
    "layers.{l}.mixer.b_proj.weight": "model.layers.{l}.attn.b_proj.weight",
    "layers.{l}.mixer.q_conv.weight": "model.layers.{l}.attn.q_conv1d.weight",
    "layers.{l}.mixer.k_conv.weight": "model.layers.{l}.attn.k_conv1d.weight",
    "layers.{l}.mixer.v_conv.weight": "model.layers.{l}.attn.v_conv1d.weight",
    "layers.{l}.mixer.o_norm.weight": "model.layers.{l}.attn.o_norm.weight",
    "layers.{l}.mixer.o_proj.weight": "model.layers.{l}.attn.o_proj.weight",
    "layers.{l}.ffn_norm.weight": "model.layers.{l}.mlp_norm.weight",
    "layers.{l}.ffn.gate_proj.weight": "model.layers.{l}.mlp.gate_proj.weight",
    "layers.{l}.ffn.up_proj.weight": "model.layers.{l}.mlp.up_proj.weight",
    "layers.{l}.ffn.down_proj.weight": "model.layers.{l}.mlp.down_proj.weight",
    "norm.weight": "model.norm.weight",
    "lm_head.weight": "lm_head.weight",
}


def expand_map(name_map: dict[str, str], num_layers: int) -> dict[str, str]:
    """The map with every "{l}" entry written out for layers 0 .. num_layers-1."""
    out = {}
    for ours, theirs in name_map.items():
        if ("{l}" in ours) != ("{l}" in theirs):
            raise ValueError(f"name map entry {ours!r} -> {theirs!r}: '{{l}}' must appear on both sides or neither")
        layers = range(num_layers) if "{l}" in ours else [None]
        for l in layers:
            a, b = (ours, theirs) if l is None else (ours.replace("{l}", str(l)), theirs.replace("{l}", str(l)))
            if b in out.values():
                raise ValueError(f"name map writes {b!r} twice")
            out[a] = b
    return out


def _squeezed(shape) -> tuple:
    return tuple(s for s in shape if s != 1)


@torch.no_grad()
def copy_weights(ours: nn.Module, theirs: nn.Module, name_map: dict[str, str], num_layers: int = 0) -> None:
    """Write every tensor of ``ours`` into ``theirs`` through ``name_map`` (strict; see the module doc)."""
    full = expand_map(name_map, num_layers)
    src, dst = ours.state_dict(), theirs.state_dict()
    unmapped = sorted(set(src) - set(full))
    if unmapped:
        raise ValueError(f"name map has no entry for our tensor(s) {unmapped}")
    missing = sorted(k for k in full if k not in src)
    if missing:
        raise ValueError(f"name map names tensor(s) our model does not have: {missing}")
    unknown = sorted(v for v in full.values() if v not in dst)
    if unknown:
        raise ValueError(f"name map writes tensor(s) the library's module does not have: {unknown}")
    unwritten = sorted(set(dst) - set(full.values()))
    if unwritten:
        raise ValueError(f"the library's tensor(s) {unwritten} get no value from the name map")
    for a, b in full.items():
        s, d = src[a], dst[b]
        if s.shape != d.shape and _squeezed(s.shape) != _squeezed(d.shape):
            raise ValueError(f"{a} {tuple(s.shape)} does not fit {b} {tuple(d.shape)}")
        d.copy_(s.reshape(d.shape).to(d.dtype))


def norm_eps(eps: float | None, dtype: torch.dtype) -> float:
    """A norm epsilon as a number: None (our configs: the dtype's machine epsilon) becomes that epsilon."""
    return torch.finfo(dtype).eps if eps is None else float(eps)


def _dtype(model: nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


# ---------------------------------------------------------------------------------------------
# transformers: LlamaForCausalLM, MambaMixer
# ---------------------------------------------------------------------------------------------
def transformers_llama(model, name_map: dict[str, str] = LLAMA_TO_TRANSFORMERS, **config_changes):
    """transformers' LlamaForCausalLM with the weights of our LLaMA ``model`` (same dtype, eval mode)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    c, dtype = model.config, _dtype(model)
    H = c.num_attention_heads
    fields = dict(vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                  num_hidden_layers=c.num_hidden_layers, num_attention_heads=H, num_key_value_heads=H,
                  head_dim=c.hidden_size // H, hidden_act="silu", max_position_embeddings=c.max_position_embeddings,
                  rms_norm_eps=norm_eps(c.rms_norm_eps, dtype), tie_word_embeddings=c.tie_word_embeddings,
                  rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta},
                  attention_bias=False, mlp_bias=False, attention_dropout=0.0)
    hf_config = LlamaConfig(**{**fields, **config_changes})
    hf_config._attn_implementation = "eager"
    lib = LlamaForCausalLM(hf_config).to(dtype).eval()
    copy_weights(model, lib, name_map, c.num_hidden_layers)
    return lib


def _mamba_config(c, dtype, **config_changes):
    from transformers import MambaConfig

    fields = dict(vocab_size=c.vocab_size, hidden_size=c.hidden_size, state_size=c.state_size, expand=c.expand,
                  conv_kernel=c.conv_size, time_step_rank=c.dt_rank or math.ceil(c.hidden_size / 16),
                  num_hidden_layers=c.num_hidden_layers, use_bias=False, use_conv_bias=False, hidden_act="silu",
                  layer_norm_epsilon=norm_eps(c.rms_norm_eps, dtype), use_mambapy=False)
    return MambaConfig(**{**fields, **config_changes})


def transformers_mamba_mixer(mixer, config, layer_idx: int = 0,
                             name_map: dict[str, str] = MAMBA_MIXER_TO_TRANSFORMERS, **config_changes):
    """transformers' MambaMixer (layer ``layer_idx`` of a MambaConfig derived from our ``config``) with the
    weights of our MambaMixer ``mixer`` (same dtype, eval mode)."""
    from transformers.models.mamba.modeling_mamba import MambaMixer

    dtype = _dtype(mixer)
    lib = MambaMixer(_mamba_config(config, dtype, **config_changes), layer_idx).to(dtype).eval()
    copy_weights(mixer, lib, name_map)
    return lib


class TransformersMixer(nn.Module):
    """A transformers MambaMixer as the token mixer of one of our blocks (``mixer(x, layer_cache) -> (y, None)``);
    for decoding it keeps transformers' own cache (a DynamicCache) in the layer's cache dict."""

    def __init__(self, lib_mixer: nn.Module):
        super().__init__()
        self.lib = lib_mixer

    def forward(self, x, layer_cache=None):
        cache = None
        if layer_cache is not None:
            from transformers import DynamicCache

            cache = layer_cache.get("transformers")
            if cache is None:
                cache = layer_cache["transformers"] = DynamicCache(config=self.lib.config)
        return self.lib(x, cache=cache), None


def with_transformers_mamba(model, name_map: dict[str, str] = MAMBA_MIXER_TO_TRANSFORMERS, **config_changes):
    """A copy of our Mamba LM ``model`` whose every token mixer is transformers' MambaMixer holding that
    layer's weights (embedding, norms, SwiGLU and head stay ours: transformers' Mamba has no SwiGLU)."""
    lib_model = copy.deepcopy(model)
    for l, block in enumerate(lib_model.layers):
        block.mixer = TransformersMixer(transformers_mamba_mixer(block.mixer, model.config, l, name_map,
                                                                 **config_changes))
    return lib_model.eval()


# ---------------------------------------------------------------------------------------------
# flash-linear-attention: DeltaNetForCausalLM
# ---------------------------------------------------------------------------------------------
def fla_deltanet(model, name_map: dict[str, str] = DELTANET_TO_FLA, **config_changes):
    """fla's DeltaNetForCausalLM with the weights of our DeltaNet ``model`` (same dtype, eval mode). Its
    settings are fla's DeltaNetConfig defaults except where ours differ: the sizes, and ``norm_eps`` (one
    epsilon for every RMSNorm of the model, the heads' output norm included) = ours."""
    from fla.models import DeltaNetConfig, DeltaNetForCausalLM

    c, dtype = model.config, _dtype(model)
    fields = dict(vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
                  num_heads=c.num_heads, conv_size=c.conv_size, intermediate_size=c.intermediate_size,
                  max_position_embeddings=c.max_position_embeddings, tie_word_embeddings=c.tie_word_embeddings,
                  norm_eps=norm_eps(c.rms_norm_eps, dtype), expand_k=1.0, expand_v=1.0, use_gate=False,
                  use_short_conv=True, use_beta=True, use_output_norm=True, qk_norm="l2", qk_activation="silu",
                  hidden_act="swish", fuse_cross_entropy=False)
    lib = DeltaNetForCausalLM(DeltaNetConfig(**{**fields, **config_changes})).to(dtype).eval()
    copy_weights(model, lib, name_map, c.num_hidden_layers)
    return lib
