"""protot.cola, value by value: Matthews correlation on hand-counted confusion matrices, the bootstrap
intervals on cases whose resamples take two known values, the loader and every refusal word for word,
and fine-tuning and learning-rate selection on a tiny stand-in model (a few hundred parameters)."""
from __future__ import annotations

import copy
import math
import re
import warnings
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from protot import cola


def exactly(message):
    """A pattern matching the whole of ``message`` and nothing more."""
    return "^" + re.escape(message) + "$"

# --- Matthews correlation -------------------------------------------------------------------------


def test_matthews_on_a_hand_counted_confusion_matrix():
    # tp 3 (rows 0-2), fn 2 (rows 3-4), fp 1 (row 5), tn 4 (rows 6-9)
    y = [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
    p = [1, 1, 1, 0, 0, 1, 0, 0, 0, 0]
    # (tp tn - fp fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)) = (12 - 2) / sqrt(4 * 5 * 5 * 6) = 10 / sqrt(600)
    assert cola.matthews(y, p) == pytest.approx(100 * 10 / math.sqrt(600), abs=1e-12)
    # the same matrix with the rows in another order
    order = [9, 3, 5, 0, 7, 1, 8, 4, 2, 6]
    assert cola.matthews([y[i] for i in order], [p[i] for i in order]) == pytest.approx(100 * 10 / math.sqrt(600),
                                                                                        abs=1e-12)
    # tp 1, tn 1, fp 2, fn 3: (1 - 6) / sqrt(3 * 4 * 3 * 4) = -5 / 12
    y2 = [1, 1, 1, 1, 0, 0, 0]
    p2 = [1, 0, 0, 0, 1, 1, 0]
    assert cola.matthews(y2, p2) == pytest.approx(-100 * 5 / 12, abs=1e-12)
    # labels given as numpy arrays, as booleans, and as floats read the same
    assert cola.matthews(np.array(y2), np.array(p2, dtype=bool)) == pytest.approx(-100 * 5 / 12, abs=1e-12)
    assert cola.matthews(np.array(y2, dtype=float), p2) == pytest.approx(-100 * 5 / 12, abs=1e-12)
    # and as the strings of the TSV's label column, on either side
    as_text = [str(v) for v in y2]
    assert cola.matthews(as_text, p2) == pytest.approx(-100 * 5 / 12, abs=1e-12)
    assert cola.matthews(y2, [str(v) for v in p2]) == pytest.approx(-100 * 5 / 12, abs=1e-12)


def test_matthews_is_zero_whenever_a_margin_is_empty():
    assert cola.matthews([1, 1, 0], [1, 1, 1]) == 0.0          # no predicted 0: tn + fn = 0
    assert cola.matthews([1, 1, 0], [0, 0, 0]) == 0.0          # no predicted 1: tp + fp = 0
    assert cola.matthews([1, 1, 1], [1, 0, 1]) == 0.0          # no true 0: tn + fp = 0
    assert cola.matthews([0, 0, 0], [1, 0, 1]) == 0.0          # no true 1: tp + fn = 0
    assert cola.matthews([1, 0, 0, 1], [1, 0, 0, 1]) == 100.0  # tp 2 tn 2: 4 / sqrt(2^4) = 1
    assert cola.matthews([1, 0, 0, 1], [0, 1, 1, 0]) == -100.0


# --- bootstrap intervals --------------------------------------------------------------------------


def test_mcc_interval_on_two_sentences():
    # y = p = [1, 0]: a resample holds both sentences (MCC 100) or one twice (a constant label:
    # MCC 0), each with probability 1/2, so the 2.5% quantile is 0 and the 97.5% quantile 100
    assert cola.mcc_interval([1, 0], [1, 0]) == (100.0, 0.0, 100.0)
    assert cola.mcc_interval([1, 0], [1, 0], n_boot=400, seed=3) == (100.0, 0.0, 100.0)
    # p = 1 - y: -100 on both classes, 0 otherwise
    assert cola.mcc_interval([1, 0], [0, 1], n_boot=400) == (-100.0, -100.0, 0.0)
    # a level of 0: both ends are the median of 0s and 100s
    m, lo, hi = cola.mcc_interval([1, 0], [1, 0], n_boot=401, level=0.0)
    assert m == 100.0 and lo == hi and lo in (0.0, 100.0)


def test_mcc_interval_quantiles_and_defaults():
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, 60)
    p = np.where(rng.random(60) < 0.7, y, 1 - y)
    m, lo, hi = cola.mcc_interval(y, p, n_boot=300, seed=5, level=0.9)
    # the percentile bootstrap by hand: 300 resamples of the 60 sentences, the 5% and 95% quantiles
    idx = np.random.default_rng(5).integers(0, 60, size=(300, 60))
    boot = [cola.matthews(y[i], p[i]) for i in idx]
    assert m == cola.matthews(y, p)
    assert lo == pytest.approx(np.quantile(boot, 0.05), abs=1e-12) and hi == pytest.approx(np.quantile(boot, 0.95),
                                                                                           abs=1e-12)
    assert lo < m < hi
    # the defaults are 2000 resamples, seed 0, a 95% interval
    assert cola.mcc_interval(y, p) == cola.mcc_interval(y, p, n_boot=2000, seed=0, level=0.95)
    assert cola.mcc_interval(y, p) != cola.mcc_interval(y, p, n_boot=2001, seed=0, level=0.95)
    assert cola.mcc_interval(y, p) != cola.mcc_interval(y, p, n_boot=2000, seed=1, level=0.95)
    assert cola.mcc_interval(y, p) != cola.mcc_interval(y, p, n_boot=2000, seed=0, level=0.9)


def test_seed_mean_gap_by_hand():
    y = [1, 1, 0, 0]
    a = [[1, 1, 0, 0], [1, 0, 0, 0]]            # MCC 100 and (1 * 2 - 0) / sqrt(1 * 2 * 2 * 3) = 2 / sqrt(12)
    b = [[0, 1, 1, 0]]                          # tp 1 tn 1 fp 1 fn 1: 0
    mean_a = (100 + 100 * 2 / math.sqrt(12)) / 2
    gap, lo, hi = cola.seed_mean_gap(y, a, b, n_boot=200)
    assert gap == pytest.approx(mean_a, abs=1e-12)
    gap2 = cola.seed_mean_gap(y, b, a, n_boot=200)[0]
    assert gap2 == pytest.approx(-mean_a, abs=1e-12)
    # one prediction vector (not a list of seeds) is one seed
    assert cola.seed_mean_gap(y, a[0], b[0], n_boot=200)[0] == 100.0


def test_seed_mean_gap_on_two_sentences():
    # a perfect model against a constant one on y = [1, 0]: each resample's gap is 100 (both
    # sentences drawn) or 0 (one drawn twice), half the time each
    assert cola.seed_mean_gap([1, 0], [[1, 0]], [[0, 0]]) == (100.0, 0.0, 100.0)
    assert cola.seed_mean_gap([1, 0], [[0, 0]], [[1, 0]], n_boot=300, seed=2) == (-100.0, -100.0, 0.0)


def test_seed_mean_gap_quantiles_and_defaults():
    rng = np.random.default_rng(6)
    y = rng.integers(0, 2, 30)
    a = [np.where(rng.random(30) < 0.8, y, 1 - y) for _ in range(2)]
    b = [np.where(rng.random(30) < 0.6, y, 1 - y) for _ in range(3)]
    gap, lo, hi = cola.seed_mean_gap(y, a, b, n_boot=250, seed=7, level=0.8)

    def by_hand(i):
        return np.mean([cola.matthews(y[i], x[i]) for x in a]) - np.mean([cola.matthews(y[i], x[i]) for x in b])

    draw = np.random.default_rng(7)
    boot = [by_hand(draw.integers(0, 30, 30)) for _ in range(250)]   # one resample shared by every seed
    assert gap == pytest.approx(by_hand(np.arange(30)), abs=1e-12)
    assert lo == pytest.approx(np.quantile(boot, 0.1), abs=1e-12) and hi == pytest.approx(np.quantile(boot, 0.9),
                                                                                          abs=1e-12)
    # the defaults: 2000 resamples, seed 0, a 95% interval (one seed a side keeps this quick)
    one_a, one_b = a[:1], b[:1]
    default = cola.seed_mean_gap(y, one_a, one_b)
    assert default == cola.seed_mean_gap(y, one_a, one_b, n_boot=2000, seed=0, level=0.95)
    assert default != cola.seed_mean_gap(y, one_a, one_b, n_boot=2001, seed=0, level=0.95)
    assert default != cola.seed_mean_gap(y, one_a, one_b, n_boot=2000, seed=1, level=0.95)


def test_seed_mean_gap_refuses_vectors_of_the_wrong_length():
    y = [1, 0, 1]
    with pytest.raises(ValueError, match=exactly("every prediction vector needs 3 entries, got 2 and 3")):
        cola.seed_mean_gap(y, [[1, 0]], [[1, 0, 1]])
    with pytest.raises(ValueError, match=exactly("every prediction vector needs 3 entries, got 3 and 4")):
        cola.seed_mean_gap(y, [[1, 0, 1]], [[1, 0, 1, 1]])


# --- the measurement ------------------------------------------------------------------------------


def test_measure_values_evidence_and_tables():
    y = np.array([1, 1, 1, 0, 0])
    protot = [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0]]    # 100; tp 1 fn 2 tn 2 fp 0: 2 / sqrt(1 * 3 * 2 * 4) = 40.8248...
    llama = [[0, 1, 1, 1, 0]]                      # tp 2 fn 1 tn 1 fp 1: (2 - 1) / sqrt(3 * 3 * 2 * 2) = 16.666...
    other = [[0, 0, 0, 1, 1]]                      # tp 0 fn 3 tn 0 fp 2: -6 / sqrt(2 * 3 * 2 * 3) = -100
    m = cola.measure(y, {"P": protot, "L": llama, "O": other}, protot="P", llama="L", n_boot=150, seed=4,
                     baselines={"bow": [1, 0, 0, 0, 0], "majority": [1, 1, 1, 1, 1]}, config={"lr": 0.5},
                     evidence={"note": "x"})
    assert m.claim == "protot/glue-cola"
    v = m.values
    second = 100 * 2 / math.sqrt(24)
    mean_p = (100 + second) / 2
    assert v["n_dev"] == 5 and isinstance(v["n_dev"], int)
    assert v["cola_gap_to_llama"] == pytest.approx(mean_p - 100 / 6, abs=1e-12)
    assert v["protot_cola"] == pytest.approx(mean_p, abs=1e-12)
    assert v["llama_cola"] == pytest.approx(100 / 6, abs=1e-12)
    # the intervals are seed_mean_gap's with the same resamples (a constant predictor scores 0)
    gap = cola.seed_mean_gap(y, protot, llama, n_boot=150, seed=4)
    p_score = cola.seed_mean_gap(y, protot, [[0, 0, 0, 0, 0]], n_boot=150, seed=4)
    l_score = cola.seed_mean_gap(y, llama, [[0, 0, 0, 0, 0]], n_boot=150, seed=4)
    assert (v["cola_gap_to_llama_ci_low"], v["cola_gap_to_llama_ci_high"]) == gap[1:]
    assert (v["protot_cola_ci_low"], v["protot_cola_ci_high"]) == p_score[1:]
    assert (v["llama_cola_ci_low"], v["llama_cola_ci_high"]) == l_score[1:]
    assert sorted(v) == sorted(["n_dev"] + [k + s for k in ("cola_gap_to_llama", "protot_cola", "llama_cola")
                                            for s in ("", "_ci_low", "_ci_high")])
    # MCC x 100 rounded to 3 decimals
    assert m.evidence == {"per_seed": {"P": [100.0, 40.825], "L": [16.667], "O": [-100.0]},
                          "baselines": {"bow": 40.825, "majority": 0.0}, "note": "x"}
    table = m.tables["cola_scores"]
    assert list(m.tables) == ["cola_scores"]
    assert table.to_dict("list") == {"model": ["P", "P", "L", "O"], "seed": [0, 1, 0, 0],
                                     "mcc": [100.0, pytest.approx(second, abs=1e-12), pytest.approx(100 / 6, abs=1e-12),
                                             -100.0]}
    assert m.config == {"lr": 0.5}
    bare = cola.measure(y, {"P": protot, "L": llama}, protot="P", llama="L", n_boot=20)
    assert bare.evidence == {"per_seed": {"P": [100.0, 40.825], "L": [16.667]}, "baselines": {}} and bare.config == {}


def test_measure_passes_its_resamples_and_seed_on():
    rng = np.random.default_rng(8)
    y = rng.integers(0, 2, 30)
    p = [np.where(rng.random(30) < 0.8, y, 1 - y)]
    q = [np.where(rng.random(30) < 0.6, y, 1 - y)]
    none = [np.zeros(30, dtype=int)]

    def of(m, key):
        return m.values[key], m.values[f"{key}_ci_low"], m.values[f"{key}_ci_high"]

    # the defaults: 2000 resamples, seed 0
    default = cola.measure(y, {"p": p, "q": q}, protot="p", llama="q")
    assert of(default, "cola_gap_to_llama") == cola.seed_mean_gap(y, p, q)
    assert of(default, "protot_cola") == cola.seed_mean_gap(y, p, none)
    assert of(default, "llama_cola") == cola.seed_mean_gap(y, q, none)
    given = cola.measure(y, {"p": p, "q": q}, protot="p", llama="q", n_boot=300, seed=4)
    for key, a, b in (("cola_gap_to_llama", p, q), ("protot_cola", p, none), ("llama_cola", q, none)):
        assert of(given, key) == cola.seed_mean_gap(y, a, b, n_boot=300, seed=4)
        assert of(given, key) != cola.seed_mean_gap(y, a, b, n_boot=300, seed=0)     # (each setting matters here)
        assert of(given, key) != cola.seed_mean_gap(y, a, b, n_boot=301, seed=4)


def test_measure_refuses_a_model_without_predictions():
    good = [[1, 0]]
    with pytest.raises(ValueError, match=exactly("no predictions for 'l'; have ['p']")):
        cola.measure([1, 0], {"p": good}, protot="p", llama="l")
    with pytest.raises(ValueError, match=exactly("no predictions for 'p'; have ['l']")):
        cola.measure([1, 0], {"l": good}, protot="p", llama="l")
    with pytest.raises(ValueError, match=exactly("no predictions for 'l'; have ['l', 'p']")):
        cola.measure([1, 0], {"p": good, "l": []}, protot="p", llama="l")


# --- the loader -----------------------------------------------------------------------------------


def _write(folder, name, rows):
    (folder / "cola").mkdir(exist_ok=True)
    (folder / "cola" / name).write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")


def test_load_reads_every_file_of_a_split_in_order(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPENDIUM_DATA", str(tmp_path))
    _write(tmp_path, "in_domain_train.tsv", [("gj04", "1", "", "The cat sat."), ("gj04", "0", "*", '"No," he said.')])
    _write(tmp_path, "in_domain_dev.tsv", [("a1", "0", "*", "Café it is.")])
    _write(tmp_path, "out_of_domain_dev.tsv", [("b2", "1", "", "One more.")])
    train = cola.load("train")
    assert train.to_dict("list") == {"source": ["gj04", "gj04"], "label": [1, 0],
                                     "sentence": ["The cat sat.", '"No," he said.']}   # quotes kept as they are
    dev = cola.load("dev")
    assert dev.to_dict("list") == {"source": ["a1", "b2"], "label": [0, 1], "sentence": ["Café it is.", "One more."]}
    assert cola.FILES == {"train": ("in_domain_train.tsv",), "dev": ("in_domain_dev.tsv", "out_of_domain_dev.tsv")}


def test_load_refusals_word_for_word(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPENDIUM_DATA", str(tmp_path))
    with pytest.raises(ValueError, match=exactly("unknown CoLA split 'test'; valid: train, dev")):
        cola.load("test")
    path = tmp_path / "cola" / "in_domain_train.tsv"
    with pytest.raises(FileNotFoundError,
                       match=exactly(f"{path} is missing: CoLA ships in data/cola (see data/MANIFEST.md)")):
        cola.load("train")
    _write(tmp_path, "in_domain_train.tsv", [("s", "1", "", "ok"), ("s", "1", "", "ok", "extra")])
    with pytest.raises(ValueError, match=exactly(f"{path}:2: expected 4 tab-separated columns with label 0 or 1, "
                                                   f"got {['s', '1', '', 'ok', 'extra']!r}")):
        cola.load("train")
    _write(tmp_path, "in_domain_train.tsv", [("s", "1", "", "ok"), ("s", "0", "", "ok"), ("s", "2", "", "bad")])
    with pytest.raises(ValueError, match=exactly(f"{path}:3: expected 4 tab-separated columns with label 0 or 1, "
                                                   f"got {['s', '2', '', 'bad']!r}")):
        cola.load("train")
    _write(tmp_path, "in_domain_train.tsv", [("s", "1", "")])
    with pytest.raises(ValueError, match=exactly(f"{path}:1: expected 4 tab-separated columns with label 0 or 1, "
                                                 f"got {['s', '1', '']!r}")):
        cola.load("train")


# --- baselines ------------------------------------------------------------------------------------


def test_majority_baseline_counts_a_tie_as_acceptable():
    dev = pd.DataFrame({"sentence": ["a", "b", "c"], "label": [0, 1, 0]})
    half = pd.DataFrame({"label": [1, 0, 1, 0]})                     # mean 0.5: predicts 1
    assert cola.majority_baseline(half, dev).tolist() == [1, 1, 1]
    assert cola.majority_baseline(pd.DataFrame({"label": [0, 0, 1]}), dev).tolist() == [0, 0, 0]
    assert cola.majority_baseline(pd.DataFrame({"label": [1, 1, 0]}), dev.iloc[:2]).tolist() == [1, 1]


def test_bow_baseline_reads_lower_cased_unigrams_and_bigrams_with_balanced_classes():
    # bigrams: word order alone separates the classes (no unigram can)
    train = pd.DataFrame({"sentence": ["the cat sat", "cat the sat"] * 5, "label": [1, 0] * 5})
    got = cola.bow_baseline(train, pd.DataFrame({"sentence": ["the cat", "cat the"]}))
    assert got.dtype == int and got.tolist() == [1, 0]
    # lower-casing: "THE CAT" is "the cat"
    assert cola.bow_baseline(train, pd.DataFrame({"sentence": ["THE CAT", "Cat The"]})).tolist() == [1, 0]
    # unigrams: a word seen once, alone, decides; one unigram feature per word
    train = pd.DataFrame({"sentence": ["good", "bad", "good", "bad"], "label": [1, 0, 1, 0]})
    assert cola.bow_baseline(train, pd.DataFrame({"sentence": ["good", "bad"]})).tolist() == [1, 0]
    once = pd.DataFrame({"sentence": ["alpha", "beta"], "label": [1, 0]})   # each word in one sentence
    assert cola.bow_baseline(once, pd.DataFrame({"sentence": ["alpha", "beta"]})).tolist() == [1, 0]
    # balanced class weights: of ten sentences, "odd" is the only one labelled 0, so it weighs
    # 10 / (2 * 1) = 5 against 10 / (2 * 9) for each 1: enough for its word to bring it back to 0
    # (unweighted, the nine 1s pull the intercept so far that "odd" too is predicted 1)
    train = pd.DataFrame({"sentence": [f"w{i}" for i in range(9)] + ["odd"], "label": [1] * 9 + [0]})
    assert cola.bow_baseline(train, pd.DataFrame({"sentence": ["odd", "w1"]})).tolist() == [0, 1]


# --- encoding and batches -------------------------------------------------------------------------


class CharTok:
    """Token ids 1.. for the letters a..: "abc" -> [1, 2, 3]."""

    def encode(self, text, add_special_tokens=True):
        assert add_special_tokens is False
        return [ord(c) - 96 for c in text]


def test_encode_exact_ids():
    x, last = cola.encode(CharTok(), ["abc", "d", "efghij"], bos=9, max_len=5)
    # with bos: [9 1 2 3], [9 4], [9 5 6 7 8 9 10] cut to its last 5: [6 7 8 9 10]
    assert x.dtype == torch.long and last.dtype == torch.long
    assert x.tolist() == [[9, 1, 2, 3, 0], [9, 4, 0, 0, 0], [6, 7, 8, 9, 10]]
    assert last.tolist() == [3, 1, 4]
    x, last = cola.encode(CharTok(), ["ab", "c"], bos=None, max_len=8)
    assert x.tolist() == [[1, 2], [3, 0]] and last.tolist() == [1, 0]
    x, last = cola.encode(CharTok(), ["ab"], bos=0, max_len=1)
    assert x.tolist() == [[2]] and last.tolist() == [0]


def test_batches_by_hand():
    lengths = [5, 3, 9, 1, 7]
    # one pool (2 * POOL > 5 items), sorted by length: items 3, 1, 0, 4, 2, cut in twos
    got = cola.batches(lengths, 2, np.random.default_rng(0))
    assert sorted(tuple(b.tolist()) for b in got) == [(0, 4), (2,), (3, 1)]
    ones = cola.batches(lengths, 1, np.random.default_rng(0))
    assert sorted(b.tolist() for b in ones) == [[0], [1], [2], [3], [4]]
    assert cola.POOL == 50
    for bad in (0, -2):
        with pytest.raises(ValueError, match=exactly(f"batch_size must be >= 1, got {bad}")):
            cola.batches(lengths, bad, np.random.default_rng(0))


def test_batches_sort_within_pools_of_pool_batches():
    # 230 items in batches of 2: pools of 100 items, 100 and 30 (the permutation's slices), each
    # sorted by length (all lengths distinct) and cut in twos; the 115 batches then permuted by the
    # same generator
    _check_pools(np.random.default_rng(9).permutation(230) + 1)


def test_batches_keep_the_permutations_order_among_equal_lengths():
    # lengths 1-4 only: a stable sort keeps the permutation's order within each length
    _check_pools(np.random.default_rng(10).integers(1, 5, 230))


def _check_pools(lengths):
    n = len(lengths)
    got = cola.batches(lengths, 2, np.random.default_rng(3))
    rng = np.random.default_rng(3)
    order = rng.permutation(n)
    expected = []
    for pool in (order[:100], order[100:200], order[200:]):
        pool = pool[np.argsort(lengths[pool], kind="stable")]
        expected += [pool[i:i + 2] for i in range(0, len(pool), 2)]
    expected = [expected[i] for i in rng.permutation(len(expected))]
    assert len(got) == 115 and [b.tolist() for b in got] == [b.tolist() for b in expected]


# --- fine-tuning on a stand-in model --------------------------------------------------------------


class Tiny(torch.nn.Module):
    """A causal stand-in for a language model: the state at t is tanh(cumsum of embeddings up to t +
    a frozen offset); the LM head maps it to the vocabulary. Records the mode of every call."""

    def __init__(self, vocab=12, d=4):
        super().__init__()
        self.config = SimpleNamespace(hidden_size=d)
        self.emb = torch.nn.Embedding(vocab, d)
        self.offset = torch.nn.Parameter(torch.full((d,), 0.1), requires_grad=False)
        self.lm_head = torch.nn.Linear(d, vocab, bias=False)
        self.modes = []

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, module):
        self.lm_head = module

    def states(self, ids):
        return torch.tanh(self.emb(ids).cumsum(1) + self.offset)

    def forward(self, input_ids, use_cache=True):
        assert use_cache is False
        self.modes.append(self.training)
        return SimpleNamespace(logits=self.lm_head(self.states(input_ids)))


def _tiny(seed=0):
    torch.manual_seed(seed)
    return Tiny()


def _frame(n, seed):
    """Sentences of letters a..j; label 1 when the sentence holds a "b"."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        s = "".join(rng.choice(list("acdefghij"), size=rng.integers(1, 7)))
        if i % 2:
            k = rng.integers(0, len(s) + 1)
            s = s[:k] + "b" + s[k:]
        rows.append({"sentence": s, "label": i % 2})
    return pd.DataFrame(rows)


def _by_hand(model, train, dev, *, seed, epochs, lr, batch_size, max_len, bos, max_steps=None):
    """The documented loop written out: a linear head (drawn right after torch.manual_seed(seed)) on
    the state at each sentence's last token, AdamW (weight decay 0.01) on the model's trainable
    parameters and the head, cross-entropy, batches by cola.batches with default_rng(seed)."""
    torch.manual_seed(seed)
    head = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW([model.emb.weight, model.lm_head.weight, *head.parameters()], lr=lr,
                            weight_decay=0.01)
    x, last = cola.encode(CharTok(), train.sentence.tolist(), bos, max_len)
    y = torch.tensor(train.label.to_numpy())
    rng, losses = np.random.default_rng(seed), []
    for _ in range(epochs):
        for b in cola.batches(last.numpy(), batch_size, rng):
            if max_steps is not None and len(losses) == max_steps:
                break
            b = torch.from_numpy(b)
            loss = F.cross_entropy(head(model.states(x[b])[torch.arange(len(b)), last[b]]), y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    xd, ld = cola.encode(CharTok(), dev.sentence.tolist(), bos, max_len)
    with torch.no_grad():
        pred = head(model.states(xd)[torch.arange(len(xd)), ld]).argmax(1).numpy()
    return pred, losses


def test_finetune_is_the_documented_loop():
    train, dev = _frame(26, 0), _frame(30, 1)
    model = _tiny()
    ref = copy.deepcopy(model)
    out = cola.finetune(model, CharTok(), train, dev, seed=3, epochs=2, lr=0.05, batch_size=2, max_len=5, bos=11)
    pred, losses = _by_hand(ref, train, dev, seed=3, epochs=2, lr=0.05, batch_size=2, max_len=5, bos=11)
    assert len(losses) == 26 and out["steps"] == 26 and out["seed"] == 3      # 13 batches of 2, twice
    assert out["train_loss"] == pytest.approx(np.mean(losses[-20:]), abs=1e-9)
    assert out["train_loss"] != pytest.approx(np.mean(losses[-21:]), abs=1e-9)
    assert out["pred"].dtype.kind == "i" and out["pred"].tolist() == pred.tolist()
    # the model is trained in place; the frozen offset stays; the LM head comes back untouched
    assert torch.equal(model.emb.weight, ref.emb.weight) and not torch.equal(model.emb.weight, _tiny().emb.weight)
    assert torch.equal(model.offset, torch.full((4,), 0.1)) and torch.equal(model.lm_head.weight, _tiny().lm_head.weight)
    assert isinstance(model.lm_head, torch.nn.Linear)
    # training mode while it trains (26 calls), eval mode for the dev predictions and after
    assert model.modes == [True] * 26 + [False] and model.training is False


def test_finetune_steps_seeds_and_no_steps():
    train, dev = _frame(10, 2), _frame(6, 3)
    kw = dict(lr=0.1, batch_size=4, max_len=8, bos=None)
    # 10 sentences in batches of 4: 3 batches an epoch
    out = cola.finetune(_tiny(), CharTok(), train, dev, epochs=3, max_steps=4, **kw)
    assert out["steps"] == 4 and out["seed"] == 0
    assert out["train_loss"] == pytest.approx(np.mean(_by_hand(_tiny(), train, dev, seed=0, epochs=3, max_steps=4,
                                                               **kw)[1]), abs=1e-9)
    assert cola.finetune(_tiny(), CharTok(), train, dev, epochs=2, max_steps=3, **kw)["steps"] == 3
    assert cola.finetune(_tiny(), CharTok(), train, dev, epochs=2, max_steps=9, **kw)["steps"] == 6
    assert cola.finetune(_tiny(), CharTok(), train, dev, epochs=2, **kw)["steps"] == 6
    # the defaults: seed 0, one epoch, batches of 32, 64 tokens, no bos, no step limit
    long = _frame(70, 4)
    long.loc[0, "sentence"] = "abcdefghij" * 7                    # 70 tokens: cut to its last 64
    plain = cola.finetune(_tiny(), CharTok(), long, dev)
    ref_pred, ref_losses = _by_hand(_tiny(), long, dev, seed=0, epochs=1, lr=1e-4, batch_size=32, max_len=64, bos=None)
    assert plain["steps"] == 3 and plain["train_loss"] == pytest.approx(np.mean(ref_losses), abs=1e-9)
    assert plain["pred"].tolist() == ref_pred.tolist()
    # no epoch: no step and no loss, and the dev sentences are still predicted
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                 # no mean of an empty list
        none = cola.finetune(_tiny(), CharTok(), train, dev, epochs=0, **kw)
    assert none["steps"] == 0 and math.isnan(none["train_loss"]) and len(none["pred"]) == 6


def test_headless_puts_the_head_back_after_an_error():
    model = _tiny()
    head = model.get_output_embeddings()
    with pytest.raises(RuntimeError, match="^inside$"):
        with cola._headless(model) as m:
            assert m is model and isinstance(model.get_output_embeddings(), torch.nn.Identity)
            raise RuntimeError("inside")
    assert model.get_output_embeddings() is head


# --- the held-out split and the learning rate -----------------------------------------------------


def test_holdout_split_exact_rows():
    train = pd.DataFrame({"sentence": [f"s{i}" for i in range(10)], "label": [i % 2 for i in range(10)]})
    fit, held = cola.holdout_split(train, 0.3, seed=4)
    order = np.random.default_rng(4).permutation(10)              # round(0.3 * 10) = 3 held out
    assert held.sentence.tolist() == [f"s{i}" for i in sorted(order[:3])]
    assert fit.sentence.tolist() == [f"s{i}" for i in sorted(order[3:])]
    assert list(held.index) == [0, 1, 2] and list(fit.index) == list(range(7))
    assert list(fit.columns) == list(held.columns) == ["sentence", "label"]
    assert len(cola.holdout_split(train, 0.01, seed=0)[1]) == 1   # round(0.1) = 0: at least one held out
    assert len(cola.holdout_split(train, 0.25, seed=0)[1]) == 2   # round(2.5) = 2
    assert len(cola.holdout_split(train, 0.99, seed=0)[1]) == 10 and cola.holdout_split(train, 0.99, seed=0)[0].empty
    for bad in (0, 1, -0.5, 1.5):
        with pytest.raises(ValueError, match=exactly(f"frac must lie strictly between 0 and 1, got {bad}")):
            cola.holdout_split(train, bad, seed=0)


def test_select_lr_scores_each_rate_on_the_held_out_part(monkeypatch):
    train = pd.DataFrame({"sentence": [f"s{i}" for i in range(20)], "label": [i % 2 for i in range(20)]})
    fit, held = cola.holdout_split(train, 0.2, seed=6)
    calls = []
    models = iter(range(100))

    def fake(model, tokenizer, tr, dv, **kw):
        calls.append((model, tokenizer, kw))
        assert tr.equals(fit) and dv.equals(held)
        y = dv.label.to_numpy()
        # rate 0.1: perfect (100); 0.2: inverted (-100); 0.3: perfect again; 4: constant (0)
        pred = {0.1: y, 0.2: 1 - y, 0.3: y}.get(kw["lr"], np.zeros(len(y), dtype=int))
        return {"pred": pred}

    monkeypatch.setattr(cola, "finetune", fake)
    best, scores = cola.select_lr(lambda: next(models), "TOK", train, [0.2, 0.1, 0.3, 4], frac=0.2, seed=6, epochs=3,
                                  batch_size=7)
    assert best == 0.1 and scores == {0.2: -100.0, 0.1: 100.0, 0.3: 100.0, 4.0: 0.0}   # a tie: the first
    assert list(scores) == [0.2, 0.1, 0.3, 4.0] and all(type(k) is float for k in scores)
    assert calls == [(i, "TOK", {"seed": 6, "epochs": 3, "lr": lr, "batch_size": 7})
                     for i, lr in enumerate([0.2, 0.1, 0.3, 4])]
    assert cola.select_lr(lambda: 0, "TOK", train, [0.3, 0.1], frac=0.2, seed=6)[0] == 0.3
    assert cola.select_lr(lambda: 0, "TOK", train, [0.2, 4], frac=0.2, seed=6)[0] == 4.0
    with pytest.raises(ValueError, match=exactly("the learning-rate grid is empty")):
        cola.select_lr(lambda: 0, "TOK", train, [], frac=0.2)


def test_select_lr_defaults_to_seed_0_and_one_epoch(monkeypatch):
    train = pd.DataFrame({"sentence": [f"s{i}" for i in range(20)], "label": [i % 2 for i in range(20)]})
    fit, held = cola.holdout_split(train, 0.5, seed=0)
    seen = []

    def fake(model, tokenizer, tr, dv, **kw):
        seen.append(kw)
        assert tr.equals(fit) and dv.equals(held)
        return {"pred": dv.label.to_numpy()}

    monkeypatch.setattr(cola, "finetune", fake)
    assert cola.select_lr(lambda: None, None, train, [1e-3], frac=0.5) == (1e-3, {1e-3: 100.0})
    assert seen == [{"seed": 0, "epochs": 1, "lr": 1e-3}]


def test_select_lr_fine_tunes_fresh_copies():
    train = _frame(24, 5)
    made = []

    def fresh():
        made.append(_tiny())
        return made[-1]

    kw = dict(batch_size=4, max_len=8, bos=None)
    best, scores = cola.select_lr(fresh, CharTok(), train, [0.0, 0.2], frac=0.25, seed=1, epochs=2, **kw)
    fit, held = cola.holdout_split(train, 0.25, seed=1)
    assert len(made) == 2 and made[0] is not made[1]
    for _model, lr in zip(made, (0.0, 0.2)):
        pred, _ = _by_hand(_tiny(), fit, held, seed=1, epochs=2, lr=lr, **kw)
        assert scores[lr] == cola.matthews(held.label, pred)
    assert best == max((0.0, 0.2), key=lambda r: (scores[r], -r))
