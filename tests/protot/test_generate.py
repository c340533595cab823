"""protot.generate on tiny random models: greedy equals the argmax of a full forward pass at every
step, sampling is deterministic under the seed and changes with it, top-k = 1 is greedy, bad input."""
from __future__ import annotations

import pytest
import torch

from protot import generate as G
from protot.models import build_model
from protot.train import tokenizer as tk

PROMPTS = ["The history of the city", "In 1990, scientists"]


@pytest.fixture(scope="module")
def tok():
    return tk.load_hf_tokenizer()


@pytest.fixture(scope="module", params=["protot", "llama"])
def model(request, tok):
    torch.manual_seed(0)
    return build_model(request.param, "tiny", len(tok)).eval()


def test_greedy_is_the_argmax_of_the_full_forward(model, tok):
    df = G.samples(model, tok, PROMPTS, max_new_tokens=6, stop_at_eos=False)
    assert list(df.columns) == ["model", "prompt", "mode", "continuation", "tokens", "n_tokens", "seed"]
    for p, new in zip(PROMPTS, df.tokens):
        ids = tok.encode(p, add_special_tokens=False)
        seq = list(ids)
        with torch.no_grad():
            for _ in range(6):
                seq.append(int(model(torch.tensor([seq]), use_cache=False).logits[0, -1].argmax()))
        assert new == seq[len(ids):]
    assert (df["mode"] == "greedy").all() and df.seed.isna().all()


def test_sampling_is_seeded(model, tok):
    a = G.samples(model, tok, PROMPTS, max_new_tokens=8, greedy=False, temperature=1.0, top_k=50, seed=3)
    b = G.samples(model, tok, PROMPTS, max_new_tokens=8, greedy=False, temperature=1.0, top_k=50, seed=3)
    c = G.samples(model, tok, PROMPTS, max_new_tokens=8, greedy=False, temperature=1.0, top_k=50, seed=4)
    assert a.tokens.tolist() == b.tokens.tolist()
    assert a.tokens.tolist() != c.tokens.tolist()
    # the i-th prompt draws with seed + i, whatever the other prompts
    one = G.samples(model, tok, PROMPTS[1:], max_new_tokens=8, greedy=False, top_k=50, seed=5)
    assert one.tokens.iloc[0] == c.tokens.iloc[1]
    g = G.samples(model, tok, PROMPTS, max_new_tokens=8, stop_at_eos=False)
    k1 = G.samples(model, tok, PROMPTS, max_new_tokens=8, greedy=False, top_k=1, seed=9, stop_at_eos=False)
    assert k1.tokens.tolist() == g.tokens.tolist()


def test_bad_input(model, tok):
    with pytest.raises(ValueError, match="non-empty list"):
        G.samples(model, tok, "a string", max_new_tokens=3)
    with pytest.raises(ValueError, match="max_new_tokens"):
        G.samples(model, tok, PROMPTS, max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        G.samples(model, tok, PROMPTS, max_new_tokens=3, greedy=False, temperature=0)
    with pytest.raises(ValueError, match="top_k"):
        G.samples(model, tok, PROMPTS, max_new_tokens=3, greedy=False, top_k=0)
