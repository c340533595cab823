"""Our LLaMA baseline against transformers' LlamaForCausalLM: a small random model's weights copied
through protot.models.library_maps.LLAMA_TO_TRANSFORMERS give the same logits (float32, to 1e-5 of
max(1, max|logit|)), in one pass and token by token with each library's cache, at a few odd shapes;
and one swapped map entry or one setting changed back to the library's default makes them part."""

import inspect

import pytest
import torch

from library_standins import random_model, swapped, tokens
from protot.models import library_maps as LM
from protot_testing import assert_close, err_ratio

CASES = {
    "1head-tied-1layer": dict(num_attention_heads=1, hidden_size=24, intermediate_size=40, num_hidden_layers=1,
                              tie_word_embeddings=True, rms_norm_eps=None),
    "3heads-theta500-3layers": dict(num_attention_heads=3, hidden_size=48, intermediate_size=37, num_hidden_layers=3,
                                    tie_word_embeddings=False, rms_norm_eps=1e-6, rope_theta=500.0),
    "5heads-hd8-untied": dict(num_attention_heads=5, hidden_size=40, intermediate_size=72, num_hidden_layers=2,
                              tie_word_embeddings=False, rms_norm_eps=None),
}
T, PROMPT = 13, 6


def _cache_of(out):
    return out.cache if getattr(out, "cache", None) is not None else out.past_key_values


def _cache_kw(lib, cache) -> dict:
    """The cache argument under the installed transformers' name (``cache`` after the rename)."""
    return {"cache" if "cache" in inspect.signature(lib.forward).parameters else "past_key_values": cache}


@torch.no_grad()
def _lib_decoded(lib, x):
    out = lib(x[:, :PROMPT], use_cache=True)
    cache, logits = _cache_of(out), [out.logits]
    for t in range(PROMPT, x.shape[1]):
        out = lib(x[:, t:t + 1], use_cache=True, **_cache_kw(lib, cache))
        cache = _cache_of(out)
        logits.append(out.logits)
    return torch.cat(logits, 1)


@torch.no_grad()
def _ours_decoded(model, x):
    out = model(x[:, :PROMPT], use_cache=True)
    cache, logits = out.cache, [out.logits]
    for t in range(PROMPT, x.shape[1]):
        out = model(x[:, t:t + 1], cache=cache, use_cache=True)
        cache = out.cache
        logits.append(out.logits)
    return torch.cat(logits, 1)


@pytest.mark.parametrize("case", list(CASES))
def test_llama_equals_transformers_llama(case):
    model = random_model("llama", **CASES[case])
    lib = LM.transformers_llama(model)
    x = tokens(T)
    with torch.no_grad():
        ours = model(x, use_cache=False).logits
        theirs = lib(x).logits
    assert ours.abs().max() > 0.3          # logits of a size where a wrong map would show
    assert_close("logits", theirs, ours)
    assert_close("cached logits (transformers)", theirs, _lib_decoded(lib, x))
    assert_close("cached logits (ours)", theirs, _ours_decoded(model, x))


def test_llama_map_covers_every_tensor_both_ways():
    """The copy is strict: a map without one of our tensors, or one that leaves a library tensor unwritten, raises."""
    model = random_model("llama", **CASES["5heads-hd8-untied"])
    short = {k: v for k, v in LM.LLAMA_TO_TRANSFORMERS.items() if k != "layers.{l}.ffn_norm.weight"}
    with pytest.raises(ValueError, match="no entry for our tensor"):
        LM.transformers_llama(model, short)
    renamed = {**short, "layers.{l}.ffn_norm.weight": "model.layers.{l}.input_layernorm.weight"}
    with pytest.raises(ValueError, match="twice"):
        LM.transformers_llama(model, renamed)


MUTATIONS = {
    "q_proj<->k_proj": dict(name_map=swapped(LM.LLAMA_TO_TRANSFORMERS, "layers.{l}.mixer.q_proj.weight",
                                             "layers.{l}.mixer.k_proj.weight")),
    "gate_proj<->up_proj": dict(name_map=swapped(LM.LLAMA_TO_TRANSFORMERS, "layers.{l}.ffn.gate_proj.weight",
                                                 "layers.{l}.ffn.up_proj.weight")),
    "mixer_norm<->ffn_norm": dict(name_map=swapped(LM.LLAMA_TO_TRANSFORMERS, "layers.{l}.mixer_norm.weight",
                                                   "layers.{l}.ffn_norm.weight")),
    "rope theta back to 10000": dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    "gelu instead of SiLU in the SwiGLU": dict(hidden_act="gelu"),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_llama_comparison_fails_when_one_element_is_changed_back(mutation):
    model = random_model("llama", **CASES["3heads-theta500-3layers"])
    lib = LM.transformers_llama(model, **MUTATIONS[mutation])
    x = tokens(T)
    with torch.no_grad():
        ours, theirs = model(x, use_cache=False).logits, lib(x).logits
    with pytest.raises(AssertionError, match="error ratio"):
        assert_close("logits", theirs, ours)
    assert err_ratio(theirs, ours) > 1e-3    # not a near miss: far outside the 1e-5 tolerance


def _rope_interleaved(x, offset, theta):
    """RoPE on adjacent pairs (x0, x1), (x2, x3), ... (GPT-J's layout) instead of the two halves."""
    B, H, T, hd = x.shape
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    ang = torch.outer(torch.arange(offset, offset + T, dtype=torch.float32), inv)       # (T, hd/2)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.stack([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1)
    return out.flatten(-2)


def test_llama_comparison_fails_when_our_rope_layout_changes(monkeypatch):
    """An architectural change on our side (RoPE on adjacent pairs, not halves) parts the two as well."""
    import protot.models.llama as ours_llama

    model = random_model("llama", **CASES["3heads-theta500-3layers"])
    lib = LM.transformers_llama(model)
    x = tokens(T)
    monkeypatch.setattr(ours_llama, "rope", _rope_interleaved)
    with torch.no_grad():
        ours, theirs = model(x, use_cache=False).logits, lib(x).logits
    assert err_ratio(theirs, ours) > 1e-3
