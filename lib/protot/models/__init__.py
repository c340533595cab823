"""The model family: ProtoT and its LLaMA / DeltaNet / Mamba baselines, one backbone, sized alike.

    build_model(arch, size, vocab_size, **overrides) -> PreTrainedModel
    count_parameters(model) -> {"total", "embedding", "non_embedding"}

Sizes: "tiny" (a few-second CPU test size), "small" (paper: 6 layers, hidden 256, context 256),
"large" (paper: 12 layers, hidden 512). The baselines' SwiGLU width is chosen so that their
non-embedding parameter count matches ProtoT's at the same size (``intermediate_size`` in
overrides switches the matching off).
"""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from protot.models.common import BaseCausalLM, BaseLMConfig, RecurrentCache
from protot.models.deltanet import DeltaNetBaselineConfig, DeltaNetBaselineForCausalLM
from protot.models.llama import LlamaBaselineConfig, LlamaBaselineForCausalLM
from protot.models.mamba import MambaBaselineConfig, MambaBaselineForCausalLM
from protot.models.protot import COMPENDIUM_V1, VARIANTS, ProtoMixer, ProtoTConfig, ProtoTForCausalLM, authors_ffn_width
from protot.models.protot_authors import AuthorsProtoMixer

ARCHS = {
    "protot": (ProtoTConfig, ProtoTForCausalLM),
    "llama": (LlamaBaselineConfig, LlamaBaselineForCausalLM),
    "deltanet": (DeltaNetBaselineConfig, DeltaNetBaselineForCausalLM),
    "mamba": (MambaBaselineConfig, MambaBaselineForCausalLM),
}

# Shared backbone per size; family-specific defaults below.
SIZES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, intermediate_size=160, max_position_embeddings=64),
    "small": dict(hidden_size=256, num_hidden_layers=6, intermediate_size=704, max_position_embeddings=256),
    "large": dict(hidden_size=512, num_hidden_layers=12, intermediate_size=1376, max_position_embeddings=256),
}
FAMILY_SIZES = {
    "protot": {"tiny": dict(num_prototypes=8, chunk_size=16, init_half_life_max=64.0),
               "small": dict(num_prototypes=32), "large": dict(num_prototypes=32)},
    "llama": {"tiny": dict(num_attention_heads=2), "small": dict(num_attention_heads=4),
              "large": dict(num_attention_heads=8)},
    "deltanet": {"tiny": dict(num_heads=2, chunk_size=16), "small": dict(num_heads=4), "large": dict(num_heads=8)},
    "mamba": {"tiny": dict(state_size=8), "small": dict(), "large": dict()},
}
_SHARED = {"vocab_size", "hidden_size", "num_hidden_layers", "max_position_embeddings", "rms_norm_eps",
           "tie_word_embeddings", "initializer_range"}


def count_parameters(model: torch.nn.Module) -> dict:
    """Unique parameters: total, embedding (input embedding + untied output head), non-embedding."""
    seen, total, emb = set(), 0, 0
    emb_params = set()
    if isinstance(model, PreTrainedModel):
        emb_params.add(id(model.get_input_embeddings().weight))
        out = model.get_output_embeddings()
        if out is not None:
            emb_params.add(id(out.weight))
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        if id(p) in emb_params:
            emb += p.numel()
    return {"total": total, "embedding": emb, "non_embedding": total - emb}


def make_config(arch: str, size: str, vocab_size: int, **overrides) -> BaseLMConfig:
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; valid: {sorted(ARCHS)}")
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; valid: {list(SIZES)}")
    cfg_cls, _ = ARCHS[arch]
    base = {**SIZES[size], **FAMILY_SIZES[arch][size]}
    if arch == "protot":
        if overrides.get("variant", "authors") == "compendium-v1":
            base.update({k: v for k, v in COMPENDIUM_V1.items() if k != "intermediate_size"})
        else:
            base["intermediate_size"] = authors_ffn_width(overrides.get("hidden_size", base["hidden_size"]))
    return cfg_cls(**{**base, "vocab_size": vocab_size, **overrides})


def legacy_config_dict(arch: str, config: dict) -> dict:
    """A stored model config (config.json, a manifest's model_config) completed with the values its
    model was built with for fields added later: a ProtoT config without ``variant`` is
    "compendium-v1" (with no dropout and the N(0, 0.02) initialisation); other families without
    ``dropout`` / ``init_scheme`` had none / "normal"."""
    d = dict(config)
    if arch == "protot" and "variant" not in d:
        d.update({k: d.get(k, v) for k, v in COMPENDIUM_V1.items() if k not in d or k == "variant"})
        d["variant"] = "compendium-v1"
    d.setdefault("dropout", 0.0)
    d.setdefault("init_scheme", "normal")
    return d


def config_from_dict(arch: str, config: dict) -> BaseLMConfig:
    """The model config stored as ``config`` (e.g. a manifest's model_config), exactly: every field it
    holds, with ``legacy_config_dict`` filling fields added after it was written."""
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; valid: {sorted(ARCHS)}")
    cls = ARCHS[arch][0]
    d = legacy_config_dict(arch, config)
    for k in ("architectures", "transformers_version", "_name_or_path", "model_type"):
        d.pop(k, None)
    return cls(**d)


def _non_embedding_on_meta(arch, config) -> int:
    with torch.device("meta"):
        model = ARCHS[arch][1](config)
    return count_parameters(model)["non_embedding"]


def matched_intermediate_size(arch: str, size: str, vocab_size: int = 256, **overrides) -> int:
    """SwiGLU width (multiple of 8) that size-matches ``arch`` (with ``overrides``) at ``size``.

    The baselines (llama, deltanet, mamba) are matched to the default ProtoT; ProtoT itself is matched
    to the LLaMA baseline of the same size (as ``build_model`` builds it), so a ProtoT variant with
    fewer mixer parameters, e.g. ``shared_keys=True``, gets its non-embedding count back:
    ``build_model("protot", size, V, shared_keys=True,
    intermediate_size=matched_intermediate_size("protot", size, shared_keys=True))``, or the same
    width as ``--set intermediate_size=N`` for ``python -m protot.train``. The non-embedding count
    does not depend on ``vocab_size`` (tied embeddings)."""
    overrides.pop("intermediate_size", None)
    shared = {k: v for k, v in overrides.items() if k in _SHARED}
    if arch == "protot":
        ref = "llama"
        ref_config = make_config(ref, size, vocab_size, **shared,
                                 intermediate_size=matched_intermediate_size(ref, size, vocab_size, **shared))
    else:
        ref, ref_config = "protot", make_config("protot", size, vocab_size, **shared)
    target = _non_embedding_on_meta(ref, ref_config)
    a, b = 64, 128
    pa = _non_embedding_on_meta(arch, make_config(arch, size, vocab_size, **overrides, intermediate_size=a))
    pb = _non_embedding_on_meta(arch, make_config(arch, size, vocab_size, **overrides, intermediate_size=b))
    per_unit = (pb - pa) / (b - a)                                      # params are linear in the width
    width = a + (target - pa) / per_unit
    return max(8, int(round(width / 8)) * 8)


def build_model(arch: str, size: str, vocab_size: int, **overrides) -> PreTrainedModel:
    """A freshly initialised model of family ``arch`` at ``size``; overrides set config fields."""
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; valid: {sorted(ARCHS)}")
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; valid: {list(SIZES)}")
    if arch != "protot" and "intermediate_size" not in overrides:
        overrides["intermediate_size"] = matched_intermediate_size(arch, size, vocab_size, **overrides)
    config = make_config(arch, size, vocab_size, **overrides)
    return ARCHS[arch][1](config)


def _register():
    for cfg_cls, model_cls in ARCHS.values():
        try:
            AutoConfig.register(cfg_cls.model_type, cfg_cls)
            AutoModelForCausalLM.register(cfg_cls, model_cls)
        except ValueError:   # already registered (module reloaded)
            pass


_register()

__all__ = [
    "ARCHS", "SIZES", "build_model", "count_parameters", "make_config", "matched_intermediate_size",
    "RecurrentCache", "BaseCausalLM", "ProtoTConfig", "ProtoTForCausalLM", "ProtoMixer", "AuthorsProtoMixer",
    "VARIANTS", "COMPENDIUM_V1", "authors_ffn_width", "legacy_config_dict", "config_from_dict",
    "LlamaBaselineConfig", "LlamaBaselineForCausalLM", "DeltaNetBaselineConfig",
    "DeltaNetBaselineForCausalLM", "MambaBaselineConfig", "MambaBaselineForCausalLM",
]
