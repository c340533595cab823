"""Our DeltaNet baseline against flash-linear-attention (fla 0.6.0): the delta rule against fla's torch
reference functions (fla.ops.delta_rule.naive) on the CPU, and a small random model, its weights copied
through protot.models.library_maps.DELTANET_TO_FLA into fla's DeltaNetForCausalLM, run by fla's Triton
kernels (under Triton's interpreter without a GPU: tests/conftest.py sets TRITON_INTERPRET=1), in one
pass and token by token with fla's cache. float32, to 1e-5 of max(1, max|ref|). fla's chunked kernel
takes 16-bit inputs only, so fla runs its fused recurrent kernel (it does for up to 64 tokens); ours
runs its chunked form with small chunks where the case says so.

The departure, named by test_deltanet_norm_epsilon_departure: under the authors' recipe
(rms_norm_eps=None) every RMSNorm of our model, the heads' output norm included, uses the dtype's
machine epsilon (1.2e-7 in float32), where fla's DeltaNetConfig uses 1e-6 (and its DeltaNet layer
alone 1e-5); the two agree only with fla set to ours (README of lib/protot/models).
"""

import os

import pytest
import torch
import torch.nn.functional as F

from library_standins import random_model, swapped, tokens
from protot.models import library_maps as LM
from protot.models.deltanet import delta_rule_chunk, delta_rule_recurrent
from protot_testing import assert_close, err_ratio

pytestmark = pytest.mark.slow   # fla takes ~10 s to import, its kernels run under the interpreter

CASES = {
    "3heads-hd16-conv4-chunk4": dict(num_heads=3, hidden_size=48, conv_size=4, chunk_size=4, intermediate_size=40,
                                     num_hidden_layers=2, rms_norm_eps=None, tie_word_embeddings=False),
    "1head-conv2-recurrent-eps1e-6": dict(num_heads=1, hidden_size=24, conv_size=2, form="recurrent",
                                          intermediate_size=24, num_hidden_layers=1, rms_norm_eps=1e-6,
                                          tie_word_embeddings=True),
}
T, PROMPT = 13, 10


@pytest.fixture(scope="module")
def fla():
    """fla, imported once for the module, and the device its kernels run on. Under the interpreter every
    autotuned fla kernel runs its first configuration (Triton's autotuner times the others with a GPU
    driver the interpreter does not have; the configurations differ in speed only)."""
    interpreting = os.environ.get("TRITON_INTERPRET", "0") == "1"
    if not interpreting and not torch.cuda.is_available():
        pytest.skip("fla's Triton kernels need TRITON_INTERPRET=1 (set by tests/conftest.py without a GPU) "
                    "or a CUDA GPU; this process started with neither")
    with pytest.MonkeyPatch.context() as mp:
        if interpreting:
            import triton.runtime.autotuner as autotuner

            prune = autotuner.Autotuner.prune_configs
            mp.setattr(autotuner.Autotuner, "prune_configs", lambda self, kwargs: prune(self, kwargs)[:1])
        else:   # compiled for the GPU: float32 dots in IEEE float32, not TF32 (a 1e-5 comparison)
            mp.setenv("TRITON_F32_DEFAULT", "ieee")
        import fla as fla_module
        import fla.ops.delta_rule.naive  # noqa: F401

        yield fla_module, ("cpu" if interpreting else "cuda")


# ---------------------------------------------------------------------------------------------
# The delta rule against fla's torch reference (CPU)
# ---------------------------------------------------------------------------------------------
def _qkvb(B, H, T_, dk, dv, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, H, T_, dk, generator=g), dim=-1)
    k = F.normalize(torch.randn(B, H, T_, dk, generator=g), dim=-1)
    v = torch.randn(B, H, T_, dv, generator=g)
    beta = torch.rand(B, H, T_, generator=g)
    S0 = torch.randn(B, H, dk, dv, generator=g)
    return q, k, v, beta, S0


@pytest.mark.parametrize("B,H,T_,dk,dv", [(2, 3, 13, 8, 5), (1, 1, 1, 4, 4), (2, 2, 40, 16, 12)])
def test_delta_rule_equals_fla_naive_recurrence(fla, B, H, T_, dk, dv):
    naive = fla[0].ops.delta_rule.naive
    q, k, v, beta, S0 = _qkvb(B, H, T_, dk, dv)
    o_ref, S_ref = naive.delta_rule_recurrence(q, k, v, beta, initial_state=S0.clone())   # scales q by dk^-1/2
    for name, fn in [("recurrent", delta_rule_recurrent), ("chunk C=4", lambda *a: delta_rule_chunk(*a, chunk_size=4))]:
        o, S = fn(q * dk ** -0.5, k, v, beta, S0.clone())
        assert_close(f"{name}: o", o_ref, o)
        assert_close(f"{name}: final state", S_ref, S)


@pytest.mark.parametrize("C", [4, 8])
def test_delta_rule_chunk_equals_fla_naive_chunkwise(fla, C):
    naive = fla[0].ops.delta_rule.naive
    q, k, v, beta, _ = _qkvb(2, 3, 24, 8, 6, seed=1)
    o_ref, S_ref = naive.delta_rule_chunkwise(q, k, v, beta, chunk_size=C)
    o, S = delta_rule_chunk(q * 8 ** -0.5, k, v, beta, None, chunk_size=C)
    assert_close("o", o_ref, o)
    assert_close("final state", S_ref, S)


def test_delta_rule_comparison_fails_without_the_beta_on_the_old_value(fla):
    """Changed back to the plain linear-attention write S += beta k v^T (no "- S^T k"), the reference parts."""
    naive = fla[0].ops.delta_rule.naive
    q, k, v, beta, S0 = _qkvb(2, 3, 13, 8, 5)
    o_ref, _ = naive.delta_rule_recurrence(q, k, v, beta, initial_state=S0.clone())
    S, outs = S0.clone(), []
    for t in range(13):
        S = S + k[:, :, t, :, None] * (beta[:, :, t, None] * v[:, :, t])[..., None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t] * 8 ** -0.5, S))
    assert err_ratio(o_ref, torch.stack(outs, 2)) > 1e-3


# ---------------------------------------------------------------------------------------------
# The whole model against fla's DeltaNetForCausalLM (Triton kernels)
# ---------------------------------------------------------------------------------------------
def _cache_of(out):
    return out.cache if getattr(out, "cache", None) is not None else out.past_key_values


@torch.no_grad()
def _fla_logits(lib, x, device, prompt=None):
    lib = lib.to(device)
    x = x.to(device)
    if prompt is None:
        return lib(x, use_cache=False).logits.cpu()
    out = lib(x[:, :prompt], use_cache=True)
    cache, logits = _cache_of(out), [out.logits]
    for t in range(prompt, x.shape[1]):
        out = lib(x[:, t:t + 1], past_key_values=cache, use_cache=True)
        cache = _cache_of(out)
        logits.append(out.logits)
    return torch.cat(logits, 1).cpu()


@torch.no_grad()
def _ours_decoded(model, x, prompt):
    out = model(x[:, :prompt], use_cache=True)
    cache, logits = out.cache, [out.logits]
    for t in range(prompt, x.shape[1]):
        out = model(x[:, t:t + 1], cache=cache, use_cache=True)
        cache = out.cache
        logits.append(out.logits)
    return torch.cat(logits, 1)


@pytest.mark.parametrize("case", list(CASES))
def test_deltanet_equals_fla_deltanet(fla, case):
    model = random_model("deltanet", **CASES[case])
    lib = LM.fla_deltanet(model)
    x = tokens(T)
    with torch.no_grad():
        ours = model(x, use_cache=False).logits
    theirs = _fla_logits(lib, x, fla[1])
    assert ours.abs().max() > 0.3
    assert_close("logits", theirs, ours)
    assert_close("cached logits (fla's cache)", theirs, _fla_logits(lib, x, fla[1], prompt=PROMPT))
    assert_close("cached logits (ours)", theirs, _ours_decoded(model, x, PROMPT))


MUTATIONS = {
    "q_conv<->k_conv": dict(name_map=swapped(LM.DELTANET_TO_FLA, "layers.{l}.mixer.q_conv.weight",
                                             "layers.{l}.mixer.k_conv.weight")),
    "mixer_norm<->ffn_norm": dict(name_map=swapped(LM.DELTANET_TO_FLA, "layers.{l}.mixer_norm.weight",
                                                   "layers.{l}.ffn_norm.weight")),
    "beta in (0, 2) (negative eigenvalues)": dict(allow_neg_eigval=True),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_deltanet_comparison_fails_when_one_element_is_changed_back(fla, mutation):
    model = random_model("deltanet", **CASES["3heads-hd16-conv4-chunk4"])
    lib = LM.fla_deltanet(model, **MUTATIONS[mutation])
    x = tokens(6, batch=1)
    with torch.no_grad():
        ours = model(x, use_cache=False).logits
    theirs = _fla_logits(lib, x, fla[1])
    with pytest.raises(AssertionError, match="error ratio"):
        assert_close("logits", theirs, ours)
    assert err_ratio(theirs, ours) > 1e-3


def test_deltanet_norm_epsilon_departure(fla):
    """The departure "norm epsilon under the authors' recipe". With head outputs planted small (v_proj
    scaled by 1e-3, so mean(o^2) is near the epsilons, as at the first positions of the trained model),
    our model at rms_norm_eps=None equals fla only with fla's norm_eps set to the machine epsilon, and
    parts from fla at its DeltaNetConfig default (1e-6); our model at rms_norm_eps=1e-6 equals fla at
    that default."""
    from fla.models import DeltaNetConfig

    library_eps = DeltaNetConfig().norm_eps
    assert library_eps == 1e-6
    x = tokens(6, batch=1)
    for eps in (None, 1e-6):
        model = random_model("deltanet", **{**CASES["3heads-hd16-conv4-chunk4"], "rms_norm_eps": eps})
        with torch.no_grad():
            for block in model.layers:
                block.mixer.v_proj.weight.mul_(1e-3)
            ours = model(x, use_cache=False).logits
        at_library_default = _fla_logits(LM.fla_deltanet(model, norm_eps=library_eps), x, fla[1])
        if eps is None:
            assert_close("logits, fla at machine epsilon", _fla_logits(LM.fla_deltanet(model), x, fla[1]), ours)
            assert err_ratio(at_library_default, ours) > 1e-3
        else:
            assert_close("logits, fla at its default epsilon", at_library_default, ours)
