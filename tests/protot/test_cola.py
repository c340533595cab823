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


def test_batches_cover_every_item_once_and_pad_little():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, size=1000)
    got = cola.batches(lengths, 32, np.random.default_rng(1))
    flat = np.concatenate(got)
    assert sorted(flat.tolist()) == list(range(1000)) and max(len(b) for b in got) == 32
    padded = sum(len(b) * lengths[b].max() for b in got)
    plain = np.random.default_rng(1).permutation(1000)
    padded_plain = sum(32 * lengths[plain[i:i + 32]].max() for i in range(0, 1000, 32))
    assert padded < 0.7 * padded_plain                                 # bucketing pads much less
    again = cola.batches(lengths, 32, np.random.default_rng(1))
    assert all((a == b).all() for a, b in zip(got, again))             # seeded
    with pytest.raises(ValueError, match="batch_size"):
        cola.batches(lengths, 0, rng)


def test_features_are_the_final_normed_states_and_the_head_comes_back():
    torch.manual_seed(0)
    model = build_model("llama", "tiny", 300).eval()
    head = model.get_output_embeddings()
    x, last = torch.randint(0, 300, (3, 7)), torch.tensor([6, 2, 4])
    with torch.no_grad():
        feats = cola._features(model, x, last)
        ref = model.norm(model(input_ids=x, use_cache=False, output_hidden_states=True).hidden_states[-1])
    assert torch.allclose(feats, ref[torch.arange(3), last], atol=1e-6)
    assert model.get_output_embeddings() is head


def test_holdout_split():
    train = pd.DataFrame({"sentence": [f"s{i}" for i in range(100)], "label": [i % 2 for i in range(100)]})
    fit, held = cola.holdout_split(train, 0.1, seed=0)
    assert len(held) == 10 and len(fit) == 90 and not set(fit.sentence) & set(held.sentence)
    assert cola.holdout_split(train, 0.1, seed=0)[1].equals(held)
    for bad in (0, 1, -0.5):
        with pytest.raises(ValueError, match="frac"):
            cola.holdout_split(train, bad, seed=0)


def test_select_lr_prefers_the_rate_that_learns():
    tok = tk.load_hf_tokenizer()
    train = _planted(320, 0)

    def fresh():
        torch.manual_seed(0)
        return build_model("protot", "tiny", len(tok))

    lr, scores = cola.select_lr(fresh, tok, train, [1e-7, 3e-3], frac=0.2, epochs=6, batch_size=16, bos=tk.eos_id())
    assert lr == 3e-3 and scores[3e-3] > 90 and abs(scores[1e-7]) < 30
    with pytest.raises(ValueError, match="grid is empty"):
        cola.select_lr(fresh, tok, train, [], frac=0.2)


def test_seed_mean_gap_is_paired_and_decides_by_its_interval():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400)
    good = [np.where(rng.random(400) < 0.8, y, 1 - y) for _ in range(3)]   # ~60 points each
    gap, lo, hi = cola.seed_mean_gap(y, good, good, n_boot=300)
    assert gap == lo == hi == 0.0                                      # the same predictions: no spread
    noise = [rng.integers(0, 2, 400) for _ in range(3)]
    gap, lo, hi = cola.seed_mean_gap(y, good, noise, n_boot=300)
    assert np.isclose(gap, np.mean([cola.matthews(y, p) for p in good]) - np.mean([cola.matthews(y, p) for p in noise]))
    assert 40 < lo < gap < hi
    with pytest.raises(ValueError, match="400 entries"):
        cola.seed_mean_gap(y, good, [y[:10]])


def _verdict(values):
    from compendium import claims
    return claims.evaluate(claims.get_claim("protot/glue-cola"), values, "cpu")[0]


def test_measure_and_the_registered_check():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 1043)
    good = [np.where(rng.random(1043) < 0.75, y, 1 - y) for _ in range(3)]
    m = cola.measure(y, {"p": good, "l": good}, protot="p", llama="l", n_boot=300)
    assert m.values["n_dev"] == 1043 and m.values["cola_gap_to_llama"] == 0.0
    assert m.values["llama_cola_ci_low"] > 10
    assert _verdict(m.values) == "holds"
    # nulls: a ProtoT fine-tuned on shuffled labels (chance predictions) fails the check; a LLaMA at
    # chance fails the precondition, so nothing can be concluded about the gap
    chance = [rng.integers(0, 2, 1043) for _ in range(3)]
    assert _verdict(cola.measure(y, {"p": chance, "l": good}, protot="p", llama="l", n_boot=300).values) == "does not hold"
    assert _verdict(cola.measure(y, {"p": good, "l": chance}, protot="p", llama="l", n_boot=300).values) == "inconclusive"
    few = cola.measure(y[:500], {"p": [g[:500] for g in good], "l": [g[:500] for g in good]}, protot="p", llama="l",
                       n_boot=300)
    assert _verdict(few.values) == "inconclusive"                       # fewer than 1,000 dev sentences
    with pytest.raises(ValueError, match="no predictions"):
        cola.measure(y, {"p": good}, protot="p", llama="l")
