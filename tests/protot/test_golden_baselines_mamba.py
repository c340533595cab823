"""Our Mamba baseline against transformers' Mamba (torch path on the CPU). Each of our mixers, its
weights copied through protot.models.library_maps.MAMBA_MIXER_TO_TRANSFORMERS into transformers'
MambaMixer, gives the same layer output, in one pass and token by token with transformers' cache; our
whole LM with transformers' mixers in its blocks gives the same logits (float32, 1e-5 of max(1, max|y|)).

Departures, named by the tests below (README of lib/protot/models):
- SwiGLU per block: our block adds an RMS-normed SwiGLU after the mixer (the shared block of the four
  families, which keeps the parameter counts matched); transformers' MambaBlock has none. With our
  SwiGLU switched off our LM equals MambaForCausalLM; with it on, it does not.
- no conv bias: our short convolution has no bias; transformers' default (use_conv_bias=True) has one.
"""

import pytest
import torch

from library_standins import random_model, swapped, tokens
from protot.models import library_maps as LM
from protot_testing import assert_close, err_ratio

CASES = {
    "N3-expand1-conv2-R2": dict(hidden_size=20, state_size=3, expand=1, conv_size=2, dt_rank=2,
                                intermediate_size=24, num_hidden_layers=2),
    "N8-expand3-conv5": dict(hidden_size=24, state_size=8, expand=3, conv_size=5, intermediate_size=40,
                             num_hidden_layers=1, scan="reference"),
    "N16-expand2-conv4-3layers": dict(hidden_size=32, state_size=16, expand=2, conv_size=4, chunk_size=4,
                                      intermediate_size=48, num_hidden_layers=3, tie_word_embeddings=False),
}
T, PROMPT = 13, 5


def _mixer_input(model, seed=3):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, T, model.config.hidden_size, generator=g)


@pytest.mark.parametrize("case", list(CASES))
def test_mamba_mixer_equals_transformers_mixer(case):
    from transformers import DynamicCache

    model = random_model("mamba", **CASES[case])
    u = _mixer_input(model)
    for l, block in enumerate(model.layers):
        lib = LM.transformers_mamba_mixer(block.mixer, model.config, l)
        with torch.no_grad():
            ours, _ = block.mixer(u)
            theirs = lib(u)
            cache = DynamicCache(config=lib.config)
            steps = [lib(u[:, :PROMPT], cache=cache)]
            steps += [lib(u[:, t:t + 1], cache=cache) for t in range(PROMPT, T)]
        assert ours.abs().max() > 0.1
        assert_close(f"layer {l} output", theirs, ours)
        assert_close(f"layer {l} output, token by token (transformers' cache)", theirs, torch.cat(steps, 1))


@torch.no_grad()
def _decoded(model, x):
    out = model(x[:, :PROMPT], use_cache=True)
    cache, logits = out.cache, [out.logits]
    for t in range(PROMPT, x.shape[1]):
        out = model(x[:, t:t + 1], cache=cache, use_cache=True)
        cache = out.cache
        logits.append(out.logits)
    return torch.cat(logits, 1)


@pytest.mark.parametrize("case", list(CASES))
def test_mamba_lm_with_transformers_mixers_equals_ours(case):
    """Our blocks (norms, SwiGLU: the departure) around transformers' MambaMixer: the same logits, also
    decoded token by token (ours with our cache, theirs with transformers' cache inside each layer)."""
    model = random_model("mamba", **CASES[case])
    lib = LM.with_transformers_mamba(model)
    x = tokens(T)
    with torch.no_grad():
        ours, theirs = model(x, use_cache=False).logits, lib(x, use_cache=False).logits
    assert_close("logits", theirs, ours)
    assert_close("cached logits (transformers' mixers)", theirs, _decoded(lib, x))
    assert_close("cached logits (ours)", theirs, _decoded(model, x))


def _transformers_mamba_lm(model):
    """transformers' MambaForCausalLM holding our LM's embedding, pre-mixer norms, mixers, final norm and
    head (its blocks have no SwiGLU, so ours is left out)."""
    from transformers import MambaForCausalLM

    c = model.config
    lib = MambaForCausalLM(LM._mamba_config(c, torch.float32, tie_word_embeddings=c.tie_word_embeddings)).eval()
    name_map = {"embed_tokens.weight": "backbone.embeddings.weight",
                "layers.{l}.mixer_norm.weight": "backbone.layers.{l}.norm.weight",
                **{f"layers.{{l}}.mixer.{k}": f"backbone.layers.{{l}}.mixer.{v}"
                   for k, v in LM.MAMBA_MIXER_TO_TRANSFORMERS.items()},
                "norm.weight": "backbone.norm_f.weight", "lm_head.weight": "lm_head.weight"}
    no_ffn = type(model)(c)
    no_ffn.load_state_dict(model.state_dict())
    for block in no_ffn.layers:
        del block.ffn_norm, block.ffn
    LM.copy_weights(no_ffn, lib, name_map, c.num_hidden_layers)
    return lib


def test_mamba_departs_from_transformers_mamba_lm_by_its_swiglu_only():
    """The departure "SwiGLU per block": with our SwiGLU switched off (down_proj zero, so each block adds
    nothing after the mixer) our LM equals transformers' MambaForCausalLM; with it on, it does not."""
    model = random_model("mamba", **CASES["N16-expand2-conv4-3layers"])
    lib = _transformers_mamba_lm(model)
    x = tokens(T)
    with torch.no_grad():
        theirs = lib(x).logits
        with_swiglu = model(x, use_cache=False).logits
        for block in model.layers:
            block.ffn.down_proj.weight.zero_()
        without = model(x, use_cache=False).logits
    assert_close("logits, our SwiGLU off", theirs, without)
    assert err_ratio(theirs, with_swiglu) > 1e-3


MUTATIONS = {
    "D<->dt_proj.bias": dict(name_map=swapped(LM.MAMBA_MIXER_TO_TRANSFORMERS, "D", "dt_proj.bias")),
    "gelu instead of SiLU": dict(hidden_act="gelu"),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_mamba_comparison_fails_when_one_element_is_changed_back(mutation):
    model = random_model("mamba", **CASES["N16-expand2-conv4-3layers"])
    u = _mixer_input(model)
    lib = LM.transformers_mamba_mixer(model.layers[0].mixer, model.config, 0, **MUTATIONS[mutation])
    with torch.no_grad():
        ours, theirs = model.layers[0].mixer(u)[0], lib(u)
    with pytest.raises(AssertionError, match="error ratio"):
        assert_close("layer output", theirs, ours)
    assert err_ratio(theirs, ours) > 1e-3


def test_mamba_conv_bias_is_a_departure_the_copy_refuses():
    """The departure "no conv bias": at transformers' default (use_conv_bias=True) the library's conv has a
    bias our mixer lacks; the copy names it instead of leaving it at the library's random initialisation,
    and with that bias kept the outputs part."""
    model = random_model("mamba", **CASES["N3-expand1-conv2-R2"])
    mixer = model.layers[0].mixer
    with pytest.raises(ValueError, match=r"conv1d\.bias"):
        LM.transformers_mamba_mixer(mixer, model.config, 0, use_conv_bias=True)
    from transformers.models.mamba.modeling_mamba import MambaMixer

    torch.manual_seed(0)
    lib = MambaMixer(LM._mamba_config(model.config, torch.float32, use_conv_bias=True), 0).eval()
    with torch.no_grad():
        for ours_name, theirs_name in LM.MAMBA_MIXER_TO_TRANSFORMERS.items():
            src, dst = mixer.state_dict()[ours_name], lib.state_dict()[theirs_name]
            dst.copy_(src.reshape(dst.shape))
        u = _mixer_input(model)
        assert err_ratio(lib(u), mixer(u)[0]) > 1e-3
