"""Architecture adapters: read, from a Hugging Face causal LM, everything the decomposition needs.

One :class:`Arch` holds float64 copies of the weights in one layout for every supported family,
plus the module names nnsight reads activations from. Notation (row vectors, as in the paper):

    x~_t = x_t / sigma_t                         (sigma_t: the input norm's per-token scale)
    q_{t,h} = g_q * (x~_t W_Q[h] + b_Q[h]) / rho_{t,h}   W_Q[h]: (d_model, d_head), input-norm
                                 gain (and LayerNorm centring) folded in; rho, g_q: Gemma-3 q-norm
    score_{d,s} = scale * < rot_d(q_d), rot_s(k_s) >   (then Gemma-2 soft-capping, mask, softmax)

Supported (features read from the model itself):

| family          | positions          | norms                          | attention extras            |
|-----------------|--------------------|--------------------------------|-----------------------------|
| gpt2            | learned            | LayerNorm, biases              | -                           |
| gpt_neox        | partial rotary     | LayerNorm, biases, parallel    | -                           |
| llama (SmolLM2) | rotary             | RMSNorm                        | grouped-query attention     |
| gemma2          | rotary             | 4 RMSNorms (1+w) per block     | soft-capping, sliding window|
| gemma3_text     | rotary (2 thetas)  | 4 RMSNorms (1+w) per block     | q/k RMSNorm, MQA, sliding   |
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["UnsupportedArchitecture", "NormSpec", "LayerWeights", "Arch", "from_model", "get_path", "SUPPORTED"]

SUPPORTED = ("gpt2", "gpt_neox", "llama", "gemma2", "gemma3_text")


def get_path(obj, dotted: str):
    """The attribute at a dotted path, e.g. ``get_path(model, arch.layers_path)`` -> the block list
    (works on Hugging Face modules and on their nnsight wrappers alike)."""
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


class UnsupportedArchitecture(ValueError):
    """The model has a structure the tracer does not decompose; the message names what is missing."""


@dataclass
class NormSpec:
    """y = (x - centre*mean(x)) / sigma * gain + bias, sigma = sqrt(mean-or-var + eps)."""

    kind: str  # "rms" | "layer"
    gain: torch.Tensor  # (d,) effective gain ((1+w) for Gemma)
    bias: torch.Tensor | None  # (d,) or None
    eps: float

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """Per-token scale sigma: x (..., d) -> (...,)."""
        if self.kind == "rms":
            return torch.sqrt(x.pow(2).mean(-1) + self.eps)
        return torch.sqrt(x.var(-1, unbiased=False) + self.eps)

    def centred(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(-1, keepdim=True) if self.kind == "layer" else x

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = self.centred(x) / self.scale(x)[..., None] * self.gain
        return y + self.bias if self.bias is not None else y

    def fold(self, w: torch.Tensor) -> torch.Tensor:
        """Fold gain (and LayerNorm centring) into a matrix read from the normalised stream.

        w: (d, k) -> C diag(gain) w, so that norm(x) w = (x / sigma) C diag(gain) w + bias w.
        """
        w = self.gain[:, None] * w
        if self.kind == "layer":
            w = w - w.mean(0, keepdim=True)  # C = I - 11^T/d is symmetric
        return w


@dataclass
class LayerWeights:
    """One block's attention weights, float64, head-major."""

    ln_in: NormSpec
    # Views of the model's own weights (no copy; converted to float64 on access, exactly):
    q_w: torch.Tensor  # (H, d, dh) raw (gain not folded)
    k_w: torch.Tensor  # (KV, d, dh)
    v_w: torch.Tensor  # (KV, d, dh)
    o_w: torch.Tensor  # (H, dh, d)
    b_Q: torch.Tensor | None  # (H, dh)
    b_K: torch.Tensor | None  # (KV, dh)
    b_V: torch.Tensor | None  # (KV, dh)
    b_O: torch.Tensor | None  # (d,)
    q_norm: NormSpec | None  # per-head RMSNorm on q (Gemma-3), over dh
    k_norm: NormSpec | None
    post_attn_norm: NormSpec | None  # Gemma-2/3 norm on the attention output
    scale: float
    softcap: float | None
    sliding_window: int | None
    rotary_dims: int  # 0: no rotary

    @property
    def W_Q(self) -> torch.Tensor:
        return self.q_w.to(torch.float64)

    @property
    def W_K(self) -> torch.Tensor:
        return self.k_w.to(torch.float64)

    @property
    def W_V(self) -> torch.Tensor:
        return self.v_w.to(torch.float64)

    @property
    def W_O(self) -> torch.Tensor:
        return self.o_w.to(torch.float64)

    @property
    def n_heads(self) -> int:
        return self.q_w.shape[0]

    @property
    def n_kv(self) -> int:
        return self.k_w.shape[0]

    def kv_of(self, h: int) -> int:
        return h // (self.n_heads // self.n_kv)

    # Effective (folded) matrices: read the stream divided by sigma only. The input norm's gain
    # (and LayerNorm centring) is folded in, as TransformerLens does before the SVD. Gemma-3's
    # q/k-norm gains are NOT folded here: some of their (1+w) entries are exactly 0, which would
    # make W_Q^eff rank-deficient; they are applied per token together with the rotation.
    def wq_eff(self, h: int) -> torch.Tensor:  # (d, dh)
        return self.ln_in.fold(self.q_w[h].to(torch.float64))

    def wk_eff(self, kv: int) -> torch.Tensor:
        return self.ln_in.fold(self.k_w[kv].to(torch.float64))

    def bq_eff(self, h: int) -> torch.Tensor | None:
        return _bias_eff(self.ln_in, self.q_w[h].to(torch.float64), self.b_Q[h] if self.b_Q is not None else None)

    def bk_eff(self, kv: int) -> torch.Tensor | None:
        return _bias_eff(self.ln_in, self.k_w[kv].to(torch.float64), self.b_K[kv] if self.b_K is not None else None)


def _bias_eff(ln: NormSpec, w: torch.Tensor, b: torch.Tensor | None):
    out = None
    if ln.bias is not None:
        out = ln.bias @ w
    if b is not None:
        out = b if out is None else out + b
    return out


@dataclass
class Arch:
    """Everything model-specific, extracted once per model."""

    model_type: str
    layers: list[LayerWeights]
    ln_final: NormSpec
    W_U: torch.Tensor  # (vocab, d) the model's own unembedding (not copied: 262k x 640 for Gemma-3)
    b_U: torch.Tensor | None
    # nnsight paths
    layers_path: str
    attn_name: str
    attn_contrib_name: str | None  # module whose output is the attention's residual contribution
    mlp_contrib_name: str  # module whose output is the MLP's residual contribution
    final_norm_path: str
    has_rotary: bool
    features: dict = field(default_factory=dict)

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def n_heads(self) -> int:
        return self.layers[0].n_heads

    def unembed(self, token_ids) -> torch.Tensor:
        """Rows of W_U (float64) for the given token ids: (k, d)."""
        return self.W_U[torch.as_tensor(token_ids)].detach().to(torch.float64)

    @property
    def d_model(self) -> int:
        return self.W_U.shape[1]

    @property
    def d_head(self) -> int:
        return self.layers[0].q_w.shape[2]


def _f64(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().to(torch.float64).clone()


def _norm(mod, kind: str, gemma: bool = False) -> NormSpec:
    eps = getattr(mod, "eps", None)
    if eps is None:
        eps = getattr(mod, "variance_epsilon", None)
    if eps is None:
        raise UnsupportedArchitecture(f"norm module {type(mod).__name__} has no eps/variance_epsilon")
    gain = _f64(mod.weight)
    if gemma:
        gain = 1.0 + gain
    return NormSpec(kind, gain, _f64(getattr(mod, "bias", None)), float(eps))


def _split_heads_linear(weight: torch.Tensor, n: int, dh: int) -> torch.Tensor:
    """nn.Linear weight (n*dh, d) -> (n, d, dh), a view of the model's weight."""
    return weight.detach().view(n, dh, -1).transpose(1, 2)


def _bias_heads(b, n, dh):
    return None if b is None else _f64(b).view(n, dh)


def _llama_like(model, gemma: bool) -> tuple[list[LayerWeights], NormSpec]:
    cfg = model.config
    layers = []
    layer_types = getattr(cfg, "layer_types", None)
    for i, layer in enumerate(model.model.layers):
        a = layer.self_attn
        H, KV = cfg.num_attention_heads, cfg.num_key_value_heads
        dh = getattr(a, "head_dim", None) or cfg.hidden_size // H
        rope = getattr(cfg, "rope_parameters", None) or {}
        if isinstance(rope, dict) and layer_types is not None and layer_types[i] in rope:
            rope = rope[layer_types[i]]
        partial = rope.get("partial_rotary_factor", 1.0) if isinstance(rope, dict) else 1.0
        post = _norm(layer.post_attention_layernorm, "rms", gemma) if gemma else None
        layers.append(LayerWeights(
            ln_in=_norm(layer.input_layernorm, "rms", gemma),
            q_w=_split_heads_linear(a.q_proj.weight, H, dh),
            k_w=_split_heads_linear(a.k_proj.weight, KV, dh),
            v_w=_split_heads_linear(a.v_proj.weight, KV, dh),
            o_w=a.o_proj.weight.detach().view(-1, H, dh).permute(1, 2, 0),
            b_Q=_bias_heads(a.q_proj.bias, H, dh), b_K=_bias_heads(a.k_proj.bias, KV, dh),
            b_V=_bias_heads(a.v_proj.bias, KV, dh), b_O=_f64(a.o_proj.bias),
            q_norm=_norm(a.q_norm, "rms", gemma) if hasattr(a, "q_norm") else None,
            k_norm=_norm(a.k_norm, "rms", gemma) if hasattr(a, "k_norm") else None,
            post_attn_norm=post,
            scale=float(a.scaling),
            softcap=getattr(a, "attn_logit_softcapping", None),
            sliding_window=getattr(a, "sliding_window", None),
            rotary_dims=int(dh * partial),
        ))
    return layers, _norm(model.model.norm, "rms", gemma)


def _gpt2(model) -> tuple[list[LayerWeights], NormSpec]:
    cfg = model.config
    H, d = cfg.n_head, cfg.n_embd
    dh = d // H
    layers = []
    for i, block in enumerate(model.transformer.h):
        a = block.attn
        w = a.c_attn.weight.detach()  # Conv1D: (d, 3d), x @ w + b
        b = _f64(a.c_attn.bias)
        wq, wk, wv = (w[:, j * d:(j + 1) * d].reshape(d, H, dh).transpose(0, 1) for j in range(3))
        bq, bk, bv = (b[j * d:(j + 1) * d].view(H, dh).clone() for j in range(3))
        scale = 1.0
        if cfg.scale_attn_weights:
            scale = dh ** -0.5
        if cfg.scale_attn_by_inverse_layer_idx:
            scale /= float(i + 1)
        layers.append(LayerWeights(
            ln_in=_norm(block.ln_1, "layer"), q_w=wq, k_w=wk,
            v_w=wv, o_w=a.c_proj.weight.detach().view(H, dh, d),
            b_Q=bq, b_K=bk, b_V=bv, b_O=_f64(a.c_proj.bias), q_norm=None, k_norm=None,
            post_attn_norm=None, scale=scale, softcap=None, sliding_window=None, rotary_dims=0))
    return layers, _norm(model.transformer.ln_f, "layer")


def _neox(model) -> tuple[list[LayerWeights], NormSpec]:
    cfg = model.config
    H, d = cfg.num_attention_heads, cfg.hidden_size
    dh = d // H
    layers = []
    for layer in model.gpt_neox.layers:
        a = layer.attention
        w = a.query_key_value.weight.detach().view(H, 3, dh, d)  # rows: per head [q | k | v]
        b = _f64(a.query_key_value.bias)
        b = b.view(H, 3, dh) if b is not None else None
        layers.append(LayerWeights(
            ln_in=_norm(layer.input_layernorm, "layer"),
            q_w=w[:, 0].transpose(1, 2), k_w=w[:, 1].transpose(1, 2),
            v_w=w[:, 2].transpose(1, 2),
            o_w=a.dense.weight.detach().view(d, H, dh).permute(1, 2, 0),
            b_Q=None if b is None else b[:, 0].contiguous(),
            b_K=None if b is None else b[:, 1].contiguous(),
            b_V=None if b is None else b[:, 2].contiguous(),
            b_O=_f64(a.dense.bias), q_norm=None, k_norm=None, post_attn_norm=None,
            scale=float(a.scaling), softcap=None, sliding_window=None, rotary_dims=int(a.rotary_ndims)))
    return layers, _norm(model.gpt_neox.final_layer_norm, "layer")


def _check_eager(model) -> None:
    impl = getattr(model.config, "_attn_implementation", None)
    if impl not in (None, "eager"):
        raise UnsupportedArchitecture(
            f"attention implementation {impl!r} does not return attention weights; load the model "
            "with attn_implementation='eager' (accpp.models.load_model does)")


def from_model(model) -> Arch:
    """Read an :class:`Arch` from a Hugging Face causal LM; raise a clear error if unsupported."""
    cfg = model.config
    mt = getattr(cfg, "model_type", type(model).__name__)
    if mt == "gemma3":  # multimodal wrapper config: use its text model
        raise UnsupportedArchitecture(
            "model_type 'gemma3' (multimodal); load the text-only Gemma3ForCausalLM (model_type 'gemma3_text')")
    if mt not in SUPPORTED:
        raise UnsupportedArchitecture(
            f"model_type {mt!r} is not supported: the tracer needs an adapter giving per-head "
            f"W_Q/W_K/W_V/W_O, the norm placement, the positional scheme and any score transforms. "
            f"Supported: {', '.join(SUPPORTED)}.")
    _check_eager(model)
    gemma = mt.startswith("gemma")
    if mt in ("llama", "gemma2", "gemma3_text"):
        for what in ("q_proj", "k_proj", "v_proj", "o_proj"):
            if not hasattr(model.model.layers[0].self_attn, what):
                raise UnsupportedArchitecture(f"{mt}: attention has no {what}")
        layers, ln_f = _llama_like(model, gemma)
        paths = dict(layers_path="model.layers", attn_name="self_attn",
                     attn_contrib_name="post_attention_layernorm" if gemma else None,
                     mlp_contrib_name="post_feedforward_layernorm" if gemma else "mlp",
                     final_norm_path="model.norm", has_rotary=True)
    elif mt == "gpt2":
        layers, ln_f = _gpt2(model)
        paths = dict(layers_path="transformer.h", attn_name="attn", attn_contrib_name=None,
                     mlp_contrib_name="mlp", final_norm_path="transformer.ln_f", has_rotary=False)
    else:
        layers, ln_f = _neox(model)
        paths = dict(layers_path="gpt_neox.layers", attn_name="attention", attn_contrib_name=None,
                     mlp_contrib_name="mlp", final_norm_path="gpt_neox.final_layer_norm", has_rotary=True)
    if mt == "gemma2" and getattr(cfg, "final_logit_softcapping", None):
        pass  # monotone per logit; the logit difference direction is taken before it
    head = model.get_output_embeddings()
    features = dict(
        model_type=mt,
        learned_positions=mt == "gpt2",
        rotary=paths["has_rotary"],
        partial_rotary=any(0 < lw.rotary_dims < lw.q_w.shape[2] for lw in layers),
        biases=any(lw.b_Q is not None or lw.b_O is not None for lw in layers),
        layernorm=ln_f.kind == "layer",
        grouped_query=layers[0].n_kv < layers[0].n_heads,
        qk_norm=layers[0].q_norm is not None,
        post_norms=layers[0].post_attn_norm is not None,
        softcap=any(lw.softcap for lw in layers),
        sliding_window=any(lw.sliding_window for lw in layers),
        parallel_residual=bool(getattr(cfg, "use_parallel_residual", False)) and mt == "gpt_neox",
    )
    return Arch(model_type=mt, layers=layers, ln_final=ln_f, W_U=head.weight,
                b_U=_f64(getattr(head, "bias", None)), features=features, **paths)
