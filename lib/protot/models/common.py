"""What the four model families share: the LLaMA-style block (RMS pre-norm, SwiGLU, residual),
a depthwise causal short convolution, the recurrent cache, and the causal-LM wrapper.

Each family supplies a token mixer ``mixer(x, layer_cache) -> (y, aux)`` with x, y: (B, T, d);
``layer_cache`` is that layer's dict in a ``RecurrentCache`` (None when not caching) and is updated
in place. Everything else (embedding, blocks, final norm, head, loss, generate()) lives here.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import GenerationMixin, PreTrainedConfig, PreTrainedModel
from transformers.utils import ModelOutput

from protot.models.loss import linear_cross_entropy


# ---------------------------------------------------------------------------------------------
# Config base: the fields every family shares, validated at construction
# ---------------------------------------------------------------------------------------------
INIT_SCHEMES = ("normal", "torch-default")


def _require(cond: bool, field: str, msg: str):
    if not cond:
        raise ValueError(f"invalid config field `{field}`: {msg}")


class BaseLMConfig(PreTrainedConfig):
    """Shared backbone fields (LLaMA-3 layout). Not registered itself."""

    vocab_size: int = 32000
    hidden_size: int = 256              # d
    num_hidden_layers: int = 6          # L
    intermediate_size: int = 704        # SwiGLU width; ~ 8/3 d rounded (size-matched per family in build_model)
    max_position_embeddings: int = 256  # training context (RoPE needs none; only informative elsewhere)
    rms_norm_eps: float | None = 1e-6   # None: the input dtype's machine epsilon (torch.nn.RMSNorm's default)
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True    # small models: tie input and output embeddings
    use_cache: bool = True
    #: dropout on the embeddings, on both residual branches and inside the SwiGLU (before its output
    #: projection); active in training mode only
    dropout: float = 0.0
    #: "normal": every Linear, embedding and head N(0, initializer_range); "torch-default": embedding
    #: and untied head N(0, initializer_range), every Linear keeps PyTorch's default initialisation
    init_scheme: str = "normal"

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.validate_fields()

    def validate_fields(self):
        _require(self.vocab_size >= 1, "vocab_size", f"must be >= 1, got {self.vocab_size}")
        _require(self.hidden_size >= 1, "hidden_size", f"must be >= 1, got {self.hidden_size}")
        _require(self.num_hidden_layers >= 1, "num_hidden_layers", f"must be >= 1, got {self.num_hidden_layers}")
        _require(self.intermediate_size >= 1, "intermediate_size", f"must be >= 1, got {self.intermediate_size}")
        _require(self.rms_norm_eps is None or self.rms_norm_eps > 0, "rms_norm_eps",
                 f"must be > 0 or None (the dtype's machine epsilon), got {self.rms_norm_eps}")
        _require(isinstance(self.dropout, (int, float)) and 0.0 <= self.dropout < 1.0, "dropout",
                 f"must lie in [0, 1), got {self.dropout!r}")
        _require(self.init_scheme in INIT_SCHEMES, "init_scheme",
                 f"must be one of {INIT_SCHEMES}, got {self.init_scheme!r}")


# ---------------------------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight; ``eps=None``: the input dtype's machine epsilon (as
    torch.nn.RMSNorm). 16-bit inputs are normalised in float32."""

    def __init__(self, dim: int, eps: float | None = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return xf.to(x.dtype) * self.weight


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)), with dropout (training only) before ``down``."""

    def __init__(self, d: int, hidden: int, dropout: float = 0.0):
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def forward(self, x):
        return self.down_proj(self.drop(F.silu(self.gate_proj(x)) * self.up_proj(x)))


class ShortConv(nn.Module):
    """Depthwise causal convolution over time, width ``size``; caches the last size-1 inputs."""

    def __init__(self, dim: int, size: int, activation: str | None = None):
        super().__init__()
        self.size = size
        self.weight = nn.Parameter(torch.zeros(dim, size))   # (D, W); init in _init_weights
        self.activation = activation

    def forward(self, x, layer_cache=None, key: str = "conv"):
        B, T, D = x.shape
        W = self.size
        prev = None if layer_cache is None else layer_cache.get(key)
        if prev is None:
            prev = x.new_zeros(B, W - 1, D)
        xp = torch.cat([prev.to(x.dtype), x], dim=1)                    # (B, W-1+T, D)
        if layer_cache is not None:
            layer_cache[key] = xp[:, xp.shape[1] - (W - 1):].detach() if W > 1 else xp[:, :0]
        # y_t = sum_w weight[:, w] * x_{t-W+1+w}
        y = F.conv1d(xp.transpose(1, 2), self.weight[:, None, :].to(x.dtype), groups=D)  # (B, D, T)
        y = y.transpose(1, 2)
        return F.silu(y) if self.activation == "silu" else y


class Block(nn.Module):
    """x <- x + drop(mixer(norm(x))); x <- x + drop(ffn(norm(x))) (dropout in training only)."""

    def __init__(self, config: BaseLMConfig, mixer: nn.Module):
        super().__init__()
        p = config.dropout
        self.mixer_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mixer = mixer
        self.ffn_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.ffn = SwiGLU(config.hidden_size, config.intermediate_size, p)
        self.mixer_drop = nn.Dropout(p) if p > 0 else nn.Identity()
        self.ffn_drop = nn.Dropout(p) if p > 0 else nn.Identity()

    def forward(self, x, layer_cache=None, **mixer_kwargs):
        y, aux = self.mixer(self.mixer_norm(x), layer_cache, **mixer_kwargs)
        x = x + self.mixer_drop(y)
        x = x + self.ffn_drop(self.ffn(self.ffn_norm(x)))
        return x, aux


# ---------------------------------------------------------------------------------------------
# Cache: one dict per layer (a recurrent state, conv buffers, or a KV cache for LLaMA)
# ---------------------------------------------------------------------------------------------
class RecurrentCache:
    """Per-layer state for decoding. ``layers[l]`` is a dict the layer's mixer reads and updates.

    For the linear-time families the dict holds fixed-size tensors (O(1) memory and time per
    generated token); for LLaMA it holds the growing keys and values. ``seen_tokens`` counts the
    tokens already consumed (RoPE positions, ``get_seq_length`` for generate()).
    """

    is_compileable = False
    is_croppable = False

    def __init__(self, num_layers: int):
        self.layers = [dict() for _ in range(num_layers)]
        self.seen_tokens = 0

    @property
    def is_linear(self):
        return [True] * len(self.layers)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seen_tokens

    def __len__(self):
        return len(self.layers)

    def reorder_cache(self, beam_idx):
        for d in self.layers:
            for key, val in d.items():
                if torch.is_tensor(val):
                    d[key] = val.index_select(0, beam_idx.to(val.device))


#: Whether transformers' ModelOutput maps the old cache name ``past_key_values`` to ``cache`` itself
#: (transformers after the rename, e.g. 5.24); before it (e.g. 5.17) the field is ``past_key_values``.
CACHE_RENAMED = isinstance(inspect.getattr_static(ModelOutput, "past_key_values", None), property)


@dataclass
class CausalLMOutputWithCache(ModelOutput):
    """The output of every model here: loss, logits, the decoding cache (``out.cache``), hidden states.

    The project's own class, so ``out.cache`` does not depend on transformers' naming:
    ``CausalLMOutputWithPast`` has a ``past_key_values`` field up to transformers 5.2x and a ``cache``
    field after the rename. Where the installed transformers predates the rename, the subclass
    below adds ``past_key_values`` as a second field holding the same cache, because ``generate()``
    there looks the cache up under that name.
    """

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    cache: RecurrentCache | None = None
    hidden_states: tuple | None = None
    attentions: tuple | None = None


if not CACHE_RENAMED:
    @dataclass
    class CausalLMOutputWithCache(CausalLMOutputWithCache):  # noqa: F811 -- the pre-rename variant
        __doc__ = CausalLMOutputWithCache.__doc__

        past_key_values: RecurrentCache | None = None

        def __post_init__(self):
            if self.past_key_values is None:
                self.past_key_values = self.cache
            elif self.cache is None:
                self.cache = self.past_key_values
            elif self.cache is not self.past_key_values:
                raise ValueError("cache and past_key_values name the same cache; got two different objects")
            super().__post_init__()


@dataclass
class ProtoTCausalLMOutput(CausalLMOutputWithCache):
    """CausalLMOutputWithCache plus, for ProtoT with ``output_gates=True``, per-layer gates/states."""

    gates: tuple | None = None


# ---------------------------------------------------------------------------------------------
# The causal LM wrapper shared by the four families
# ---------------------------------------------------------------------------------------------
class BaseCausalLM(PreTrainedModel, GenerationMixin):
    """Embedding -> L blocks -> RMSNorm -> LM head. Subclasses define ``make_mixer(config, l)``."""

    base_model_prefix = "model"
    supports_gradient_checkpointing = False
    _is_stateful = True
    _no_split_modules = ["Block"]
    _tied_weights_keys = {"lm_head.weight": "embed_tokens.weight"}

    def __init__(self, config: BaseLMConfig):
        super().__init__(config)
        d = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, d)
        self.embed_drop = nn.Dropout(config.dropout) if config.dropout > 0 else nn.Identity()
        self.layers = nn.ModuleList(
            [Block(config, self.make_mixer(config, l)) for l in range(config.num_hidden_layers)])
        self.norm = RMSNorm(d, config.rms_norm_eps)
        self.lm_head = nn.Linear(d, config.vocab_size, bias=False)
        self.post_init()

    # -- hooks for subclasses -------------------------------------------------------------------
    def make_mixer(self, config, layer_idx: int) -> nn.Module:
        raise NotImplementedError

    def init_mixer_weights(self, module: nn.Module):
        """Family-specific initialisation (decays, prototypes, ...); default: nothing."""

    # -- HF plumbing -----------------------------------------------------------------------------
    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False   # we create our own RecurrentCache in forward()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    @torch.no_grad()
    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, nn.Linear) and self.config.init_scheme == "torch-default" \
                and module is not self.get_output_embeddings():
            module.reset_parameters()                                   # PyTorch's default
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, RMSNorm):
            nn.init.ones_(module.weight)
        elif isinstance(module, ShortConv):
            nn.init.normal_(module.weight, mean=0.0, std=module.size ** -0.5)

    def post_init(self):
        super().post_init()
        # family-specific initialisation last, so the generic Linear init above cannot overwrite it
        for module in self.modules():
            self.init_mixer_weights(module)

    def prepare_inputs_for_generation(self, input_ids, cache=None, attention_mask=None,
                                      inputs_embeds=None, is_first_iteration=False, **kwargs):
        if cache is None:   # transformers before the rename passes the cache as past_key_values
            cache = kwargs.get("past_key_values")
        if cache is not None and cache.get_seq_length() > 0:
            input_ids = input_ids[:, cache.get_seq_length():]           # only the new tokens
        out = {"input_ids": input_ids, "cache": cache, "use_cache": kwargs.get("use_cache", True)}
        for key in ("output_gates",):
            if key in kwargs:
                out[key] = kwargs[key]
        return out

    # -- forward ---------------------------------------------------------------------------------
    def forward(self, input_ids=None, labels=None, cache: RecurrentCache | None = None,
                use_cache: bool | None = None, attention_mask=None, inputs_embeds=None,
                logits_to_keep: int = 0, return_logits: bool = True, return_dict: bool | None = None,
                output_hidden_states: bool | None = None, past_key_values=None, **kwargs):
        """input_ids: (B, T). labels: (B, T), shifted inside (HF convention), -100 ignored.

        ``cache``: a RecurrentCache from a previous call (``past_key_values`` is an alias); with
        ``use_cache=True`` one is created and returned as ``out.cache``.
        ``attention_mask`` may only be all ones (padding is not supported by the recurrent forms).
        ``return_logits=False`` (training): with labels, only the loss is computed, fused with the
        output projection in row chunks (``protot.models.loss``); ``out.logits`` is None.
        """
        if cache is None:
            cache = past_key_values
        if attention_mask is not None and not bool(torch.all(attention_mask != 0)):
            raise NotImplementedError("padding (attention_mask with zeros) is not supported")
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids, inputs_embeds")
        use_cache = use_cache if use_cache is not None else (self.config.use_cache and not self.training)
        if use_cache and cache is None:
            cache = RecurrentCache(self.config.num_hidden_layers)
        if not use_cache:
            cache = None
        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds   # (B, T, d)
        x = self.embed_drop(x)
        T = x.shape[1]
        hidden = [x] if output_hidden_states else None
        auxes = []
        for l, block in enumerate(self.layers):
            x, aux = block(x, None if cache is None else cache.layers[l],
                           **self.mixer_kwargs(cache, **kwargs))
            auxes.append(aux)
            if output_hidden_states:
                hidden.append(x)
        if cache is not None:
            cache.seen_tokens += T
        x = self.norm(x)
        if not return_logits:
            if labels is None:
                raise ValueError("return_logits=False needs labels (it computes only the loss)")
            if logits_to_keep:
                raise ValueError("return_logits=False computes the loss over every position: drop logits_to_keep")
            # the loss without the logits (protot.models.loss): same value, no (B, T, vocab) tensor
            loss = linear_cross_entropy(x[:, :-1].reshape(-1, x.shape[-1]), self.lm_head.weight,
                                        labels[:, 1:].reshape(-1), ignore_index=-100)
            return self.make_output(loss, None, cache, hidden, auxes, **kwargs)
        if logits_to_keep:
            x = x[:, -logits_to_keep:]
        logits = self.lm_head(x)                                        # (B, T, vocab)
        loss = None
        if labels is not None:
            z = logits if logits.dtype == torch.float64 else logits.float()   # half types: float32 loss
            loss = F.cross_entropy(z[:, :-1].reshape(-1, logits.shape[-1]),
                                   labels[:, 1:].reshape(-1), ignore_index=-100)
        return self.make_output(loss, logits, cache, hidden, auxes, **kwargs)

    def mixer_kwargs(self, cache, **kwargs) -> dict:
        """Extra keyword arguments passed to every block's mixer (e.g. RoPE offset, output_gates)."""
        return {}

    def make_output(self, loss, logits, cache, hidden, auxes, **kwargs):
        return CausalLMOutputWithCache(loss=loss, logits=logits, cache=cache,
                                      hidden_states=None if hidden is None else tuple(hidden))
