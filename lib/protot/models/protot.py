"""ProtoT: the LLaMA-style backbone with attention replaced by the prototype mixer.

Two variants (``ProtoTConfig.variant``):
- "authors" (default): the model of the authors' public code (commit 4262fc2), mixer in
  ``protot.models.protot_authors`` and maths in ``protot.mixer_authors``; untied head, dropout 0.1,
  RMSNorm with the dtype's machine epsilon, PyTorch's default initialisation of every Linear,
  SwiGLU width floor(2.7 C) rounded down to a multiple of 16.
- "compendium-v1": our earlier reconstruction from the paper's text (the models committed before
  the authors' code was public were trained with it), documented below; kept for an ablation and
  for loading those models (``protot.models.legacy_config_dict``).

Equations of "compendium-v1" (working specification, not quotations; see ``protot.mixer`` for the derivation):
    w_t = softmax(sim(W_w x_t, P) / tau_w)      r_t = softmax(sim(W_r x_t, P) / tau_r)     (R,)
      (shared_keys: one key a_t = W_k x_t for both gates, w_t = softmax(sim(a_t, P) / tau_w),
       r_t = softmax(sim(a_t, P) / tau_r))
    v_t = W_v x_t                                                                        (d_v,)
    S_t = beta * S_{t-1} + w_t^T v_t,   n_t = beta * n_{t-1} + m_t   (m = w, 1, or none)  (R, d_v), (R,)
    y_t = alpha * W_o ( (r_t / (n_t + eps)) S_t )      (include_current=False: S_{t-1}, n_{t-1})
Code name -> paper symbol: write_proj = W_w, read_proj = W_r, key_proj = W_k (shared_keys),
prototypes = p_k (R, P), value_proj = W_v, out_proj = W_o, decay_param = theta (beta = sigmoid(theta)),
alpha = alpha.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from kernels.proto_mixer import BACKENDS, DEFAULT_CHUNK_SIZE, FORMS, decay_linear_attn
from protot.mixer import (
    SIMILARITIES, clear_interventions, decay_cumsum, gate, gate_logits, half_life_to_log_decay, log_decay_from_param,
    log_decay_to_half_life, param_from_log_decay, read_query,
)
from protot.mixer_authors import DECAY_ARITHMETIC
from protot.models.common import BaseCausalLM, BaseLMConfig, ProtoTCausalLMOutput, ShortConv, _require
from protot.models.protot_authors import AuthorsProtoMixer

VARIANTS = ("authors", "compendium-v1")


def authors_ffn_width(hidden_size: int) -> int:
    """The authors' SwiGLU width: floor(2.7 C) rounded down to a multiple of 16 (C = 256: 688)."""
    return max(16, (int(2.7 * hidden_size) // 16) * 16)


#: The fields "compendium-v1" was built with where they differ from the authors' defaults (the
#: class defaults below): make_config applies them beneath explicit overrides.
COMPENDIUM_V1 = dict(variant="compendium-v1", tie_word_embeddings=True, rms_norm_eps=1e-6, dropout=0.0,
                     init_scheme="normal", alpha_init=0.1, intermediate_size=704)


class ProtoTConfig(BaseLMConfig):
    r"""ProtoT configuration. The class defaults are the authors' model ("authors"); fields marked
    [v1] act in "compendium-v1" only, fields marked [authors] in "authors" only.

    variant: "authors" or "compendium-v1" (see the module docstring).
    [authors] num_heads (H): heads per mixer, each with R / H hubs, its own W_v, U, alpha and
        temperatures; outputs summed / sqrt(H). Their LM uses 1.
    [authors] shared_routing_layers: layers below this index read with the write routing (their LM: 1,
        layer 0 only); the others read through their own C x C projection W_r.
    [authors] shared_routing_temperature: the initial write temperature of those layers (3.0);
        write_temperature / read_temperature are the initial (learned) temperatures elsewhere (1.0).
    [authors] decay_init: every hub's initial beta (0.9).
    [authors] value_conv_size / value_conv_layers: the depthwise causal convolution on the values,
        v <- v / 2 + conv(v) / 2, kernel 5, in layers 0 and 1.
    [authors] decay_arithmetic: "exact" (the equation, any of the op's forms, cached decoding) or
        "authors-float32" (their beta^t cumsum(. / (beta^s + 1e-12)) arithmetic in float32; whole
        sequences only).
    [authors] mass_floor: the read divides by max(n, mass_floor) (1e-6).
    dropout, init_scheme, tie_word_embeddings, rms_norm_eps, intermediate_size: the backbone's
        (protot.models.common); the authors' values are the defaults here.

    The fields below describe "compendium-v1" (the earlier reconstruction; every choice the paper
    left open is a field):

    num_prototypes (R): prototypes (= channels) per layer. Paper: labels up to P31, so R >= 32 in
        the large model; the exact R per setting is unknown. Default 32.
    proto_dim (P): width of the space where tokens meet prototypes (W_w, W_r or W_k: d -> P). Unknown;
        None -> hidden_size.
    shared_keys: one similarity between a token and the prototypes for both gates: a single key
        projection W_k (``key_proj``) replaces W_w and W_r, so a prototype's write key and read key
        are the same vector; the gates differ only by their temperatures,
        w = softmax(sim(W_k x, p) / tau_w), r = softmax(sim(W_k x, p) / tau_r). The seed text reads
        this way ("similarity between the token and each prototype"). Default False (separate W_w,
        W_r: with R <= P the write and read keys are unrelated). True removes one d x P matrix per
        layer; ``protot.models.matched_intermediate_size("protot", size, shared_keys=True)`` gives
        the SwiGLU width that matches the LLaMA baseline's non-embedding count again.
    value_dim (d_v): width of the value path W_v: d -> d_v. Reviews mention half the hidden size;
        None -> hidden_size // 2.
    write_temperature / read_temperature (tau_w, tau_r): softmax temperatures; the paper has separate
        ones, values unknown. Default 1.0 each; must be > 0.
    similarity: "dot" (<a, p> / sqrt(P)) or "cosine" (cos(a, p)). The paper says "similarity"; unknown.
    decay_parametrization: beta_k = sigmoid(theta_k) ("sigmoid", default) or exp(-softplus(theta_k))
        ("exp_softplus"). Unknown which the paper uses.
    init_half_life_min / init_half_life_max: initial half-lives (tokens), geometrically spaced over
        the R prototypes of each layer (beta = 0.5 ** (1 / h)). Unknown; default 1 .. 256 (the context).
    init_decays: optional explicit initial beta per prototype (length R, each in (0, 1)); overrides
        the half-life range.
    normalization: "write_mass" (n = discounted sum of write gates; c is a weighted prefix mean,
        default), "count" (n = discounted token count), or "none" (no division). Unknown.
    norm_eps: eps in q = r / (n + eps); a channel that has received ~no mass reads ~0. It biases the
        prefix mean towards 0 where n is small (lib/protot/README.md measures how much). 0 is allowed
        and exact: where n = 0 (nothing received yet) the channel reads 0 (``protot.mixer.read_query``),
        never 0/0. In float32, eps = 0 is meant for exactness checks: a normaliser that underflows
        to a subnormal can overflow q.
    include_current: whether token t is in its own prefix (s <= t, default) or not (s < t: the
        literal "past tokens j < i" write). With s < t, position 0 has no past: every channel's
        normaliser is 0 and it reads 0 there (with any norm_eps >= 0). With "none" normalisation
        the exclusive form reads S_{t-1}. The paper's wording is ambiguous.
    alpha_init: initial value of the ReZero-like scalar alpha on the mixer output. The paper has an
        "alpha-gate init" hyperparameter, value unknown; default 0.1 (0 would be pure ReZero).
    conv_size / conv_layers: a depthwise causal convolution of width conv_size on the mixer input in
        the first conv_layers layers (reviews: width 4 in layers 0 and 1). conv_layers = 0 disables it.
    mixer_form: torch form of the op: "chunk" (default), "quadratic" (reference), "recurrent".
    mixer_backend: "auto" (the Triton kernels for CUDA tensors, the torch forms elsewhere: the one rule of
        ``kernels.proto_mixer.resolve_backend``), "torch", "triton".
    chunk_size: chunk length C of the chunked form, torch or Triton (32: fastest torch path on CPU
        at contexts 256-2048, see benchmarks/bench_train.py; the Triton kernels take 16, 32, 64, 128).
    """

    model_type = "protot"

    variant: str = "authors"
    num_heads: int = 1
    shared_routing_layers: int = 1
    shared_routing_temperature: float = 3.0
    decay_init: float = 0.9
    value_conv_size: int = 5
    value_conv_layers: int = 2
    decay_arithmetic: str = "exact"
    mass_floor: float = 1e-6
    # the authors' backbone (the base class defaults are compendium-v1's)
    tie_word_embeddings: bool = False
    rms_norm_eps: float | None = None
    dropout: float = 0.1
    init_scheme: str = "torch-default"
    intermediate_size: int = 688
    num_prototypes: int = 32
    proto_dim: int | None = None
    shared_keys: bool = False
    value_dim: int | None = None
    write_temperature: float = 1.0
    read_temperature: float = 1.0
    similarity: str = "dot"
    decay_parametrization: str = "sigmoid"
    init_half_life_min: float = 1.0
    init_half_life_max: float = 256.0
    init_decays: list | None = None
    normalization: str = "write_mass"
    norm_eps: float = 1e-6
    include_current: bool = True
    alpha_init: float = 1.0
    conv_size: int = 4
    conv_layers: int = 2
    mixer_form: str = "chunk"
    mixer_backend: str = "auto"
    chunk_size: int = DEFAULT_CHUNK_SIZE

    def validate_fields(self):
        super().validate_fields()
        R = self.num_prototypes
        _require(self.variant in VARIANTS, "variant", f"must be one of {VARIANTS}, got {self.variant!r}")
        _require(isinstance(R, int) and R >= 1, "num_prototypes", f"R must be an int >= 1, got {R!r}")
        _require(isinstance(self.num_heads, int) and self.num_heads >= 1 and R % self.num_heads == 0,
                 "num_heads", f"must be an int >= 1 dividing num_prototypes ({R}), got {self.num_heads!r}")
        _require(self.shared_routing_layers >= 0, "shared_routing_layers",
                 f"must be >= 0, got {self.shared_routing_layers}")
        _require(self.shared_routing_temperature != 0, "shared_routing_temperature", "must be non-zero")
        _require(0.0 < self.decay_init < 1.0, "decay_init", f"must lie in (0, 1), got {self.decay_init}")
        _require(self.value_conv_size >= 1, "value_conv_size", f"must be >= 1, got {self.value_conv_size}")
        _require(self.value_conv_layers >= 0, "value_conv_layers", f"must be >= 0, got {self.value_conv_layers}")
        _require(self.decay_arithmetic in DECAY_ARITHMETIC, "decay_arithmetic",
                 f"must be one of {DECAY_ARITHMETIC}, got {self.decay_arithmetic!r}")
        _require(self.mass_floor > 0, "mass_floor", f"must be > 0, got {self.mass_floor}")
        _require(self.proto_dim is None or self.proto_dim >= 1, "proto_dim", f"must be >= 1, got {self.proto_dim}")
        _require(self.value_dim is None or self.value_dim >= 1, "value_dim", f"must be >= 1, got {self.value_dim}")
        _require(self.write_temperature > 0, "write_temperature", f"must be > 0, got {self.write_temperature}")
        _require(self.read_temperature > 0, "read_temperature", f"must be > 0, got {self.read_temperature}")
        _require(isinstance(self.shared_keys, bool), "shared_keys", f"must be a bool, got {self.shared_keys!r}")
        _require(isinstance(self.include_current, bool), "include_current",
                 f"must be a bool, got {self.include_current!r}")
        _require(self.similarity in SIMILARITIES, "similarity", f"must be 'dot' or 'cosine', got {self.similarity!r}")
        _require(self.decay_parametrization in ("sigmoid", "exp_softplus"), "decay_parametrization",
                 f"must be 'sigmoid' or 'exp_softplus', got {self.decay_parametrization!r}")
        _require(self.init_half_life_min > 0, "init_half_life_min", f"must be > 0, got {self.init_half_life_min}")
        _require(self.init_half_life_max >= self.init_half_life_min, "init_half_life_max",
                 f"must be >= init_half_life_min ({self.init_half_life_min}), got {self.init_half_life_max}")
        if self.init_decays is not None:
            decays = list(self.init_decays)
            _require(len(decays) == R, "init_decays", f"needs one decay per prototype ({R}), got {len(decays)}")
            _require(all(0.0 < float(b) < 1.0 for b in decays), "init_decays",
                     f"every decay must lie in (0, 1), got {decays}")
        _require(self.normalization in ("write_mass", "count", "none"), "normalization",
                 f"must be 'write_mass', 'count' or 'none', got {self.normalization!r}")
        _require(self.norm_eps >= 0, "norm_eps", f"must be >= 0, got {self.norm_eps}")
        _require(self.conv_size >= 1, "conv_size", f"must be >= 1, got {self.conv_size}")
        _require(self.conv_layers >= 0, "conv_layers", f"must be >= 0, got {self.conv_layers}")
        _require(self.mixer_form in FORMS, "mixer_form", f"must be one of {FORMS}, got {self.mixer_form!r}")
        _require(self.mixer_backend in BACKENDS, "mixer_backend", f"must be one of {BACKENDS}, got {self.mixer_backend!r}")
        _require(self.chunk_size >= 1, "chunk_size", f"must be >= 1, got {self.chunk_size}")

    @property
    def proto_width(self) -> int:
        return self.proto_dim if self.proto_dim is not None else self.hidden_size

    @property
    def value_width(self) -> int:
        return self.value_dim if self.value_dim is not None else self.hidden_size // 2

    def initial_log_decays(self) -> torch.Tensor:
        """(R,) initial log beta, float64."""
        if self.init_decays is not None:
            return torch.log(torch.tensor([float(b) for b in self.init_decays], dtype=torch.float64))
        R = self.num_prototypes
        h = torch.logspace(math.log10(self.init_half_life_min), math.log10(self.init_half_life_max), R,
                           dtype=torch.float64)
        return half_life_to_log_decay(h)


class ProtoMixer(nn.Module):
    """The prototype mixer of one layer. Interventions (see ``protot.intervene``): ``mask_write`` /
    ``mask_read`` (sets of prototype indices removed from the write / read softmax: logit -inf, the
    rest renormalised), ``clamp_write`` / ``clamp_read`` ({k: value}: gate k set to value after the
    softmax, the others left as they are)."""

    def __init__(self, config: ProtoTConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        d, P, R, Dv = config.hidden_size, config.proto_width, config.num_prototypes, config.value_width
        self.conv = ShortConv(d, config.conv_size) if layer_idx < config.conv_layers else None
        if config.shared_keys:
            self.key_proj = nn.Linear(d, P, bias=False)                 # W_k: one key for both gates
        else:
            self.write_proj = nn.Linear(d, P, bias=False)               # W_w
            self.read_proj = nn.Linear(d, P, bias=False)                # W_r
        self.prototypes = nn.Parameter(torch.empty(R, P))              # p_k
        self.value_proj = nn.Linear(d, Dv, bias=False)                  # W_v
        self.out_proj = nn.Linear(Dv, d, bias=False)                    # W_o
        self.decay_param = nn.Parameter(torch.empty(R))                # theta_k
        self.alpha = nn.Parameter(torch.empty(()))                     # alpha
        clear_interventions(self)
        self.reset_mixer_parameters()

    @torch.no_grad()
    def reset_mixer_parameters(self):
        cfg = self.config
        nn.init.normal_(self.prototypes, std=1.0)
        theta = param_from_log_decay(cfg.initial_log_decays(), cfg.decay_parametrization)
        self.decay_param.copy_(theta.to(self.decay_param.dtype))
        self.alpha.fill_(cfg.alpha_init)

    # -- parametrisation ---------------------------------------------------------------------------
    def log_decay(self) -> torch.Tensor:
        """(R,) log beta_k < 0."""
        return log_decay_from_param(self.decay_param, self.config.decay_parametrization)

    def half_lives(self) -> torch.Tensor:
        """(R,) half-life of each prototype's channel, in tokens."""
        return log_decay_to_half_life(self.log_decay())

    def gate(self, a: torch.Tensor, temperature: float, mask: set, clamp: dict) -> torch.Tensor:
        """a: (B, T, P) -> softmax over prototypes of sim(a, p_k) / temperature: (B, T, R)."""
        return gate(gate_logits(a, self.prototypes, self.config.similarity), temperature, mask, clamp)

    def gates(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: (B, T, d) (after the convolution) -> write gate w, read gate r: (B, T, R) each."""
        cfg = self.config
        if cfg.shared_keys:   # one similarity, two temperatures
            logits = gate_logits(self.key_proj(x), self.prototypes, cfg.similarity)       # (B, T, R)
            w = gate(logits, cfg.write_temperature, self.mask_write, self.clamp_write)
            r = gate(logits, cfg.read_temperature, self.mask_read, self.clamp_read)
            return w, r
        w = self.gate(self.write_proj(x), cfg.write_temperature, self.mask_write, self.clamp_write)
        r = self.gate(self.read_proj(x), cfg.read_temperature, self.mask_read, self.clamp_read)
        return w, r

    # -- forward -----------------------------------------------------------------------------------
    def forward(self, x, layer_cache=None, output_gates: bool = False):
        """x: (B, T, d) (already RMS-normed) -> y: (B, T, d), aux (dict of gates/states or None)."""
        cfg = self.config
        B, T, d = x.shape
        if self.conv is not None:
            x = self.conv(x, layer_cache, key="conv")                  # (B, T, d)
        w, r = self.gates(x)                                            # (B, T, R) each
        v = self.value_proj(x)                                          # (B, T, d_v)
        g = self.log_decay().to(x.dtype)                                # (R,)
        R = g.shape[0]
        if cfg.normalization == "write_mass":
            m = w
        elif cfg.normalization == "count":
            m = torch.ones_like(w)
        else:
            m = None
        cache = layer_cache if layer_cache is not None else {}
        S0, n0 = cache.get("S"), cache.get("n")                         # (B, 1, R, d_v), (B, R)
        k_in, v_in, m_in = w, v, m
        if not cfg.include_current:
            # s < t: feed the op the inputs shifted by one; the token before this call is "pending"
            pk = cache.get("pending_k", w.new_zeros(B, 1, R))
            pv = cache.get("pending_v", v.new_zeros(B, 1, v.shape[-1]))
            k_in = torch.cat([pk, w[:, :-1]], dim=1)                    # (B, T, R)
            v_in = torch.cat([pv, v[:, :-1]], dim=1)                    # (B, T, d_v)
            if m is not None:
                m_in = torch.cat([cache.get("pending_m", m.new_zeros(B, 1, R)), m[:, :-1]], dim=1)
        form = "recurrent" if T == 1 else cfg.mixer_form
        if m_in is not None:
            n, nT = decay_cumsum(m_in, g, n0, form=form, chunk_size=cfg.chunk_size)   # (B, T, R), (B, R)
            q = read_query(r, n, cfg.norm_eps)                          # (B, T, R): r / (n + eps)
        else:
            q, nT = r, None
        o, ST = decay_linear_attn(q[:, :, None], k_in[:, :, None], v_in[:, :, None], g[None], S0,
                                  True, form=form, backend=cfg.mixer_backend, chunk_size=cfg.chunk_size)
        y = self.alpha * self.out_proj(o[:, :, 0])                      # (B, T, d)
        if layer_cache is not None:
            layer_cache["S"], layer_cache["n"] = ST.detach(), None if nT is None else nT.detach()
            if not cfg.include_current:
                layer_cache["pending_k"], layer_cache["pending_v"] = w[:, -1:].detach(), v[:, -1:].detach()
                if m is not None:
                    layer_cache["pending_m"] = m[:, -1:].detach()
        aux = None
        if output_gates:
            S_incl, n_incl = ST[:, 0], nT                               # (B, R, d_v), (B, R)
            if not cfg.include_current:                                 # fold in the pending token
                beta = g.exp()
                S_incl = beta[None, :, None] * S_incl + w[:, -1, :, None] * v[:, -1, None, :]
                if m is not None:
                    n_incl = beta * n_incl + m[:, -1]
            channel = S_incl if n_incl is None else read_query(S_incl, n_incl[..., None], cfg.norm_eps)
            aux = {"write_gate": w, "read_gate": r, "state": S_incl, "normaliser": n_incl,
                   "channel": channel, "half_life": self.half_lives().detach(), "alpha": self.alpha.detach()}
        return y, aux


class ProtoTForCausalLM(BaseCausalLM):
    """ProtoT language model. ``model(ids, output_gates=True).gates[l]`` is a dict with
    write_gate (B, T, R), read_gate (B, T, R), state S_T (B, R, d_v), normaliser n_T (B, R),
    channel c_T = S_T / (n_T + eps) (B, R, d_v), half_life (R,), alpha. Interventions: protot.intervene."""

    config_class = ProtoTConfig

    def make_mixer(self, config, layer_idx):
        if config.variant == "authors":
            return AuthorsProtoMixer(config, layer_idx)
        return ProtoMixer(config, layer_idx)

    def init_mixer_weights(self, module):
        if isinstance(module, (ProtoMixer, AuthorsProtoMixer)):
            module.reset_mixer_parameters()

    def mixer_kwargs(self, cache, output_gates: bool = False, **kwargs):
        return {"output_gates": output_gates}

    def make_output(self, loss, logits, cache, hidden, auxes, output_gates: bool = False, **kwargs):
        return ProtoTCausalLMOutput(loss=loss, logits=logits, cache=cache,
                                    hidden_states=None if hidden is None else tuple(hidden),
                                    gates=tuple(auxes) if output_gates else None)

    # -- interpretability accessors ---------------------------------------------------------------
    def mixers(self) -> list[ProtoMixer | AuthorsProtoMixer]:
        return [block.mixer for block in self.layers]

    def half_lives(self) -> torch.Tensor:
        """(L, R) half-life of every channel, in tokens."""
        return torch.stack([m.half_lives() for m in self.mixers()]).detach()
