"""Baselines (LLaMA, DeltaNet, Mamba) in the shared framework: DeltaNet's chunked delta rule equals
its recurrence (outputs, final state, gradients); every family decodes with its cache exactly as a
full recompute; loss follows the HF convention; save/load round trips."""

import pytest
import torch
import torch.nn.functional as F

from protot.models import build_model
from protot.models.deltanet import delta_rule_chunk, delta_rule_recurrent
from protot.models.llama import rope
from protot_testing import assert_close

VOCAB = 50
ARCHS = ["protot", "llama", "deltanet", "mamba"]


def tiny(arch, dtype=torch.float64, seed=0, **kw):
    torch.manual_seed(seed)
    return build_model(arch, "tiny", VOCAB, **kw).to(dtype).eval()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("B,H,T,dk,dv,C", [(2, 2, 63, 16, 60, 16), (1, 1, 5, 4, 3, 16), (1, 3, 32, 8, 8, 8)])
@pytest.mark.parametrize("with_state", [False, True])
def test_delta_rule_chunk_equals_recurrent(dtype, B, H, T, dk, dv, C, with_state):
    gen = torch.Generator().manual_seed(0)
    q = F.normalize(torch.randn(B, H, T, dk, generator=gen, dtype=torch.float64), dim=-1).to(dtype)
    k = F.normalize(torch.randn(B, H, T, dk, generator=gen, dtype=torch.float64), dim=-1).to(dtype)
    v = torch.randn(B, H, T, dv, generator=gen, dtype=torch.float64).to(dtype)
    beta = torch.rand(B, H, T, generator=gen, dtype=torch.float64).to(dtype)
    S0 = torch.randn(B, H, dk, dv, generator=gen, dtype=torch.float64).to(dtype) if with_state else None
    inputs = [x.requires_grad_() for x in (q, k, v, beta) + ((S0,) if with_state else ())]
    dO = torch.randn(B, H, T, dv, generator=gen, dtype=torch.float64).to(dtype)
    dS = torch.randn(B, H, dk, dv, generator=gen, dtype=torch.float64).to(dtype)
    res = []
    for fn in (delta_rule_recurrent, lambda *a: delta_rule_chunk(*a, chunk_size=C)):
        o, S = fn(*inputs[:4], S0)
        ((o * dO).sum() + (S * dS).sum()).backward()
        res.append((o.detach(), S.detach(), [x.grad.clone() for x in inputs]))
        for x in inputs:
            x.grad = None
    (o1, S1, g1), (o2, S2, g2) = res
    assert_close("o", o1, o2)
    assert_close("S", S1, S2)
    for name, a, b in zip(["dq", "dk", "dv", "dbeta", "dS0"], g1, g2):
        assert_close(name, a, b)


def test_rope_is_relative():
    """<rope(q, m), rope(k, n)> depends only on m - n."""
    q, k = torch.randn(1, 1, 1, 8, dtype=torch.float64), torch.randn(1, 1, 1, 8, dtype=torch.float64)
    a = (rope(q, 7, 1e4) * rope(k, 3, 1e4)).sum()
    b = (rope(q, 104, 1e4) * rope(k, 100, 1e4)).sum()
    assert_close("score", a, b)


@pytest.mark.parametrize("arch", ARCHS)
def test_loss_convention_and_backward(arch):
    model = tiny(arch)
    ids = torch.randint(0, VOCAB, (2, 21))
    labels = ids.clone()
    labels[0, 5] = -100
    out = model(ids, labels=labels)
    ref = F.cross_entropy(out.logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1), ignore_index=-100)
    assert_close("loss", ref, out.loss)
    out.loss.backward()
    for n, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n


@pytest.mark.parametrize("arch", ARCHS)
def test_cached_decoding_equals_full(arch):
    model = tiny(arch)
    ids = torch.randint(0, VOCAB, (2, 40), generator=torch.Generator().manual_seed(1))
    full = model(ids, use_cache=False).logits
    out = model(ids[:, :20], use_cache=True)                    # prefill 20 (over one chunk), then 7, then 1s
    logits, cache = [out.logits], out.cache
    out = model(ids[:, 20:27], cache=cache)
    logits.append(out.logits)
    for t in range(27, 40):
        logits.append(model(ids[:, t:t + 1], cache=cache).logits)
    assert_close("logits", full, torch.cat(logits, 1))


@pytest.mark.parametrize("arch", ["llama", "deltanet", "mamba"])
def test_generate_and_save_load(arch, tmp_path):
    from transformers import AutoModelForCausalLM
    model = tiny(arch, dtype=torch.float32, seed=3, initializer_range=0.5)
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(2))
    gen = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    x = ids
    for _ in range(8):
        x = torch.cat([x, model(x, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(gen, x)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is type(model)
    assert torch.equal(model(ids).logits, loaded(ids).logits)


@pytest.mark.parametrize("arch,field,value", [
    ("llama", "num_attention_heads", 3), ("llama", "rope_theta", 0.0), ("deltanet", "num_heads", 5),
    ("deltanet", "form", "parallel"), ("mamba", "state_size", 0), ("mamba", "dt_min", 1.0),
    ("llama", "num_hidden_layers", 0), ("mamba", "rms_norm_eps", 0.0), ("mamba", "scan", "loop"),
    ("mamba", "chunk_size", 0)])
def test_invalid_baseline_config_names_field(arch, field, value):
    with pytest.raises(ValueError, match=f"`{field}`"):
        build_model(arch, "tiny", VOCAB, **{field: value})
    with pytest.raises(ValueError, match="`vocab_size`"):
        build_model(arch, "tiny", 0)
