"""protot.sae on tiny random LLaMA models: residual stream, top-k codes, loss decreases,
determinism under the seed, the cache (key changes with model, data and config), bad input."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from protot import sae as S
from protot.models import build_model

VOCAB = 300


def _model(seed=0):
    torch.manual_seed(seed)
    return build_model("llama", "tiny", VOCAB).eval()


def _stream(seed=0, n=20_000):
    # few token types: a residual stream close to a union of few directions, which an SAE learns
    rng = np.random.default_rng(seed)
    return rng.integers(0, 12, size=n).astype(np.uint16)


CFG = S.SAEConfig(layer=0, n_features=64, k=4, steps=40, batch_blocks=2, context=32, lr=3e-3, seed=0)


def test_residual_matches_hidden_states():
    m = _model()
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(1))
    out = m(ids, use_cache=False, output_hidden_states=True)
    for layer in range(len(m.layers)):
        r = S.residual(m, ids, layer)
        assert r.shape == (2, 16, m.config.hidden_size)
        assert torch.equal(r, out.hidden_states[layer + 1])


def test_topk_codes_and_reconstruction_shape():
    torch.manual_seed(0)
    sae = S.TopKSAE(8, 20, 3)
    x = torch.randn(5, 7, 8)
    recon, z = sae(x)
    assert recon.shape == x.shape and z.shape == (5, 7, 20)
    assert ((z > 0).sum(-1) <= 3).all() and (z >= 0).all()
    assert torch.allclose(sae.W_dec.norm(dim=1), torch.ones(20), atol=1e-6)


def test_training_lowers_the_loss_and_is_deterministic(tmp_path):
    m, st = _model(), _stream()
    a = S.train_sae(m, st, CFG, cache=False)
    assert not a.from_cache and len(a.losses) == CFG.steps
    first, last = np.mean(a.losses[:5]), np.mean(a.losses[-5:])
    assert last < 0.5 * first, (first, last)
    b = S.train_sae(m, st, CFG, cache=False)
    assert a.losses == b.losses
    for k, v in a.sae.state_dict().items():
        assert torch.equal(v, b.sae.state_dict()[k]), k
    c = S.train_sae(m, st, dataclasses.replace(CFG, seed=1), cache=False)
    assert c.losses != a.losses
    assert torch.allclose(a.sae.W_dec.norm(dim=1), torch.ones(CFG.n_features), atol=1e-5)


def test_cache_roundtrip_and_key(tmp_path):
    m, st = _model(), _stream()
    cfg = dataclasses.replace(CFG, steps=5)
    a = S.train_sae(m, st, cfg, cache=tmp_path)
    assert not a.from_cache and (tmp_path / f"{a.key}.pt").exists()
    b = S.train_sae(m, st, cfg, cache=tmp_path)
    assert b.from_cache and b.key == a.key and b.losses == a.losses
    for k, v in a.sae.state_dict().items():
        assert torch.equal(v, b.sae.state_dict()[k]), k
    keys = {a.key, S.cache_key(_model(1), st, cfg), S.cache_key(m, _stream(1), cfg),
            S.cache_key(m, st, dataclasses.replace(cfg, k=3))}
    assert len(keys) == 4


def test_bad_input_errors():
    m, st = _model(), _stream()
    with pytest.raises(ValueError, match="layer=5"):
        S.train_sae(m, st, dataclasses.replace(CFG, layer=5), cache=False)
    with pytest.raises(ValueError, match="k=100 exceeds"):
        S.train_sae(m, st, dataclasses.replace(CFG, k=100), cache=False)
    with pytest.raises(ValueError, match="steps"):
        S.train_sae(m, st, dataclasses.replace(CFG, steps=0), cache=False)
    with pytest.raises(ValueError, match="beyond the model's vocabulary"):
        S.train_sae(m, np.full(1000, VOCAB + 5, dtype=np.uint16), CFG, cache=False)
    with pytest.raises(ValueError, match="integer token array"):
        S.train_sae(m, np.zeros((10, 10), dtype=np.int64), CFG, cache=False)
    with pytest.raises(ValueError, match="shorter than one block"):
        S.train_sae(m, st[:10], CFG, cache=False)
    sae = S.TopKSAE(8, 20, 3)
    with pytest.raises(ValueError, match="width 8"):
        sae.encode(torch.zeros(3, 9))
    with pytest.raises(ValueError, match="floating-point"):
        sae.encode(torch.zeros(3, 8, dtype=torch.long))
