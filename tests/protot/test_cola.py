"""protot.cola: the shipped splits, Matthews correlation by hand, the baselines, and fine-tuning that
learns a planted rule and fails on shuffled labels (the null)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.metrics import matthews_corrcoef

from protot import cola
from protot.models import build_model
from protot.train import tokenizer as tk


def test_splits_as_shipped():
    train, dev = cola.load("train"), cola.load("dev")
    assert len(train) == 8551 and len(dev) == 1043
    assert set(train.label) == {0, 1} and 0.6 < train.label.mean() < 0.8     # ~70% acceptable
    assert dev.sentence.str.len().min() > 0
    with pytest.raises(ValueError, match="unknown CoLA split"):
        cola.load("test")


def test_matthews_by_hand_and_against_scikit_learn():
    # tp 1, tn 2, fp 0, fn 1: (1 * 2 - 0) / sqrt(1 * 2 * 2 * 3)
    assert np.isclose(cola.matthews([1, 1, 0, 0], [1, 0, 0, 0]), 100 * 2 / np.sqrt(12))
    assert cola.matthews([1, 0, 1], [1, 1, 1]) == 0.0                  # constant prediction: undefined -> 0
    assert cola.matthews([1, 0], [1, 0]) == 100.0 and cola.matthews([1, 0], [0, 1]) == -100.0
    rng = np.random.default_rng(0)
    y, p = rng.integers(0, 2, 300), rng.integers(0, 2, 300)
    assert np.isclose(cola.matthews(y, p), 100 * matthews_corrcoef(y, p))
    m, lo, hi = cola.mcc_interval(y, p, n_boot=500)
    assert lo < m < hi and hi - lo > 5                                  # 300 random pairs: a wide interval


def test_baselines():
    train = pd.DataFrame({"sentence": ["the cat sat", "a dog ran", "cat the sat", "dog a ran"] * 10,
                          "label": [1, 1, 0, 0] * 10})
    dev = pd.DataFrame({"sentence": ["the cat ran", "cat the ran"], "label": [1, 0]})
    assert (cola.majority_baseline(train, dev) == 1).all() or (cola.majority_baseline(train, dev) == 0).all()
    assert cola.matthews(dev.label, cola.majority_baseline(train, dev)) == 0.0
    assert cola.matthews(dev.label, cola.bow_baseline(train, dev)) == 100.0   # bigrams "the cat" / "cat the"


def _planted(n, seed):
    """Sentences labelled 1 when they contain ' blue', else 0."""
    rng = np.random.default_rng(seed)
    words = [" red", " green", " house", " tree", " river", " stone", " small", " old"]
    rows = []
    for i in range(n):
        w = list(rng.choice(words, size=4))
        lab = int(i % 2)
        if lab:
            w[rng.integers(0, 4)] = " blue"
        rows.append({"sentence": "".join(w).strip(), "label": lab})
    return pd.DataFrame(rows)


def test_finetune_learns_a_planted_rule_and_not_shuffled_labels():
    tok = tk.load_hf_tokenizer()
    train, dev = _planted(256, 0), _planted(128, 1)
    torch.manual_seed(0)
    model = build_model("protot", "tiny", len(tok))
    out = cola.finetune(model, tok, train, dev, seed=0, epochs=6, lr=3e-3, batch_size=16, bos=tk.eos_id())
    assert out["steps"] == 6 * 16 and len(out["pred"]) == len(dev)
    assert cola.matthews(dev.label, out["pred"]) > 90
    shuffled = train.assign(label=np.random.default_rng(5).permutation(train.label.to_numpy()))
    torch.manual_seed(0)
    null = cola.finetune(build_model("protot", "tiny", len(tok)), tok, shuffled, dev, seed=0, epochs=6,
                         lr=3e-3, batch_size=16, bos=tk.eos_id())
    assert abs(cola.matthews(dev.label, null["pred"])) < 30


def test_encode_pads_right_and_points_at_the_last_token():
    tok = tk.load_hf_tokenizer()
    x, last = cola.encode(tok, ["a", "a b c d"], bos=tk.eos_id(), max_len=64)
    assert x.shape[0] == 2 and last[0] < last[1] == x.shape[1] - 1
    assert x[0, 0] == tk.eos_id() and (x[0, last[0] + 1:] == 0).all()
    cut, lc = cola.encode(tok, ["a b c d e f g"], bos=None, max_len=3)
    assert cut.shape == (1, 3) and lc.item() == 2
