"""protot.concepts, protot.labels, protot.ablation and protot.usage on tiny random ProtoT models:
gate tables, labels, find_prototype on a planted prototype, ablation (no-op exact, masking changes
the output, weights restored), model loading, the concept check and its nulls, the label-based
selection of a prototype, strata of contexts, and the women measurements."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from protot import concepts as C
from protot.models import build_model
from protot.train import tokenizer as tk

T = 32


@pytest.fixture(scope="module")
def tokenizer():
    return tk.load_hf_tokenizer()


@pytest.fixture(scope="module")
def women(tokenizer):
    return C.token_id(tokenizer, " women")


def _model(vocab, seed=0, **overrides):
    """A tiny ProtoT of our earlier variant (compendium-v1; its write projection lets a test plant a prototype)."""
    torch.manual_seed(seed)
    return build_model("protot", "tiny", vocab, **{"variant": "compendium-v1", **overrides}).eval()


def _authors_model(vocab, seed=0, **overrides):
    """A tiny ProtoT of the authors' variant (the default: the committed protot-authors-small's)."""
    torch.manual_seed(seed)
    m = build_model("protot", "tiny", vocab, **overrides).eval()
    assert m.config.variant == "authors"
    return m


VARIANT_MODELS = {"compendium-v1": _model, "authors": _authors_model}


def _ids(n, women_id, seed=0, vocab_hi=400):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab_hi, (n, T), generator=g)
    ids[:, 5] = women_id            # the probe word occurs in every row, twice
    ids[:, 20] = women_id
    return ids


def _plant(model, layer0_k: int, target: int, strength: float = 12.0):
    """Layer 0 (no convolution) sees x_t = RMSNorm(E[token]). Give ``target`` its own embedding
    direction (dim 0, unused by every other token), make W_w the identity and point prototype
    ``layer0_k`` (only) along dim 0: its write gate is ~1 on ``target`` and ~0 elsewhere."""
    mixer = model.layers[0].mixer
    with torch.no_grad():
        E = model.get_input_embeddings().weight
        E[:, 0] = 0.0
        E[target] = 0.0
        E[target, 0] = 1.0
        mixer.write_proj.weight.copy_(torch.eye(mixer.write_proj.weight.shape[0]))
        mixer.prototypes[:, 0] = 0.0
        mixer.prototypes[layer0_k] = 0.0
        mixer.prototypes[layer0_k, 0] = strength


def test_token_id_errors_name_the_word(tokenizer, women):
    assert isinstance(women, int)
    with pytest.raises(ValueError, match="xylophonists"):
        C.token_id(tokenizer, " xylophonists")


def test_gate_shapes_and_determinism(tokenizer, women):
    m = _model(tokenizer.vocab_size)
    ids = _ids(6, women)
    a = C.collect_gates(m, ids, batch_size=4)
    b = C.collect_gates(m, ids, batch_size=6)
    L, R = m.config.num_hidden_layers, m.config.num_prototypes
    assert a.write.shape == a.read.shape == (L, 6, T, R)
    assert a.half_life.shape == (L, R)
    np.testing.assert_allclose(a.write.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(a.write, b.write, rtol=0, atol=1e-6)   # batching does not matter
    assert np.array_equal(a.write, C.collect_gates(m, ids, batch_size=4).write)   # deterministic
    sums, counts = C.token_table(a, "write")
    assert sums.shape == (L, tokenizer.vocab_size, R) and counts.sum() == 6 * T
    np.testing.assert_allclose(sums.sum((1, 2)), 6 * T, rtol=1e-6)    # every position's gates sum to 1
    nsums, ncounts = C.token_table(a, "read", next_token=True)        # gate at t credited to token t + 1
    assert ncounts.sum() == 6 * (T - 1) and ncounts[women] == 12
    np.testing.assert_allclose(nsums[:, women], a.read[:, :, [4, 19]].astype(np.float64).sum((1, 2)), rtol=1e-12)
    tab = C.prototype_table(a, tokenizer, min_count=2)
    assert len(tab) == L * R and list(tab[["layer", "prototype"]].iloc[R + 1]) == [1, 1]
    assert tab["purity"].between(0, 1).all() and tab["entropy"].between(0, 1.0 + 1e-9).all()
    assert tab.equals(C.prototype_table(a, tokenizer, min_count=2))
    null = C.shuffled_purity(a, n_perm=2, seed=1)
    assert null.shape == (2, L, R)
    assert np.array_equal(null, C.shuffled_purity(a, n_perm=2, seed=1))
    tt = C.top_tokens(a, tokenizer, 0, 3, top=4, min_count=2)
    assert len(tt) <= 4 and (tt["count"] >= 2).all() and tt["mean_gate"].is_monotonic_decreasing
    ctx = C.top_contexts(a, tokenizer, 1, 2, gate="read", top=3)
    assert len(ctx) == 3 and ctx["gate"].is_monotonic_decreasing and ctx["context"].str.contains(r"\[\[").all()
    with pytest.raises(ValueError, match="gate"):
        C.token_table(a, "sideways")


@pytest.mark.parametrize("k", [2, 5])
def test_find_prototype_finds_a_planted_prototype(tokenizer, women, k):
    m = _model(tokenizer.vocab_size, conv_layers=0)
    _plant(m, k, women)
    ids = _ids(8, women)
    stats = C.collect_gates(m, ids)
    w = stats.write[0, :, :, k]
    assert w[:, 5].min() > 0.99 and w[:, 6:20].mean() < 0.2           # the plant works as intended
    sel = C.find_prototype(m, tokenizer, " women", ids)
    assert (sel.layer, sel.prototype) == (0, k), sel.table.head()
    assert sel.count == 16 and sel.selectivity > 5
    assert sel.table["selectivity"].is_monotonic_decreasing
    # a word that is not planted is not assigned to the planted prototype
    other = C.find_prototype(m, tokenizer, tokenizer.decode([int(ids[0, 0])]), stats=stats, min_count=1)
    assert (other.layer, other.prototype) != (0, k)


def test_find_prototype_bad_inputs(tokenizer, women):
    m = _model(tokenizer.vocab_size)
    ids = _ids(2, women)
    with pytest.raises(ValueError, match="xylophonists"):
        C.find_prototype(m, tokenizer, " xylophonists", ids)
    with pytest.raises(ValueError, match="occurs 0 times"):
        C.find_prototype(m, tokenizer, " Germany", ids)
    with pytest.raises(ValueError, match="sample"):
        C.find_prototype(m, tokenizer, " women")


def test_ablation_noop_is_exact_and_mask_changes_output(tokenizer, women):
    m = _model(tokenizer.vocab_size, seed=3)
    with torch.no_grad():   # a random tiny model's mixer output is scaled by alpha = 0.1: make it matter
        for mixer in m.mixers():
            mixer.alpha.fill_(1.0)
    before = {n: p.detach().clone() for n, p in m.state_dict().items()}
    contexts = _ids(6, women, seed=1)[:, :16]
    stream = _ids(4, women, seed=2).reshape(-1).numpy()
    edits = [C.Edit("none", name="no-op"), C.Edit("mask", 1, 3), C.Edit("reinit", 1, 3, seed=7),
             C.Edit("mask-read", 0, 1)]
    df = C.ablation(m, contexts, women, edits, ppl_stream=stream, ppl_context=16, ppl_blocks=8, keep_probs=True)
    assert list(df["edit"]) == ["intact", "no-op", "mask L1 P3", "reinit L1 P3", "mask-read L0 P1"]
    assert np.array_equal(df["probs"][0], df["probs"][1]) and df["p_change_pct"][1] == 0.0
    assert df["ppl"][1] == df["ppl"][0] and df["ppl_change_pct"][1] == 0.0
    for i in (2, 3, 4):
        assert not np.allclose(df["probs"][i], df["probs"][0], rtol=1e-6, atol=0), df["edit"][i]
        assert df["ppl"][i] != df["ppl"][0]
    assert np.isfinite(df[["p_mean", "ppl", "p_change_pct", "ppl_change_pct"]].to_numpy(float)).all()
    for n, p in m.state_dict().items():   # every edit restored the weights bit for bit
        assert torch.equal(p, before[n]), n
    assert all(not mx.mask_write and not mx.mask_read for mx in m.mixers())
    # intact p(target) agrees with a direct forward pass
    with torch.no_grad():
        p = torch.softmax(m(contexts).logits[:, -1].double(), -1)[:, women].numpy()
    np.testing.assert_allclose(df["probs"][0], p, rtol=1e-12)
    with pytest.raises(ValueError, match="edit kind"):
        C.ablation(m, contexts, women, [C.Edit("melt", 0, 0)])
    lo, hi = C.bootstrap_change(df["probs"][0], df["probs"][2], n_boot=200)
    assert np.isfinite([lo, hi]).all() and lo <= hi


def test_bootstrap_change_is_the_95_percent_percentile_interval_by_hand():
    rng = np.random.default_rng(4)
    p0 = rng.uniform(0.01, 0.2, size=60)
    p1 = p0 * rng.uniform(0.3, 1.1, size=60)
    idx = np.random.default_rng(9).integers(0, 60, size=(400, 60))
    change = 100.0 * (p1[idx].mean(1) / p0[idx].mean(1) - 1.0)    # contexts resampled in pairs
    want = (np.quantile(change, 0.025), np.quantile(change, 0.975))
    assert C.bootstrap_change(p0, p1, n_boot=400, seed=9) == pytest.approx(want, rel=1e-12)
    wide = (np.quantile(change, 0.05), np.quantile(change, 0.95))  # a 90% interval is narrower
    assert C.bootstrap_change(p0, p1, n_boot=400, seed=9, level=0.9) == pytest.approx(wide, rel=1e-12)


def test_mask_scan_reuses_the_prefix(tokenizer, women):
    """mask_scan runs each masked pass from the intact run's input to the masked layer: it must give
    what full forwards of the masked model give, for every layer (the first, a middle, the last)."""
    model = _model(tokenizer.vocab_size, seed=3, num_hidden_layers=3).double()
    ids = _ids(10, women, seed=5)[:, :12]
    L, R = model.config.num_hidden_layers, model.config.num_prototypes
    cand = [(l, k) for l in range(L) for k in (0, R - 1)]
    scan = C.mask_scan(model, ids, women, cand, batch_size=4)       # batches of 4, 4 and 2 rows
    p0 = C.target_probs(model, ids, women)
    for row in scan.itertuples():
        with C.edited(model, C.Edit("mask", row.layer, row.prototype)):
            p = C.target_probs(model, ids, women)
        assert row.p_mean == pytest.approx(float(p.mean()), rel=1e-12, abs=0), (row.layer, row.prototype)
        assert row.drop_pct == pytest.approx(C.drop_pct(p0, p), rel=1e-9, abs=1e-12)
    assert (scan.drop_pct.abs() > 1e-6).sum() >= len(cand) // 2   # the masks do change p (the check can fail)
    assert list(scan.drop_pct) == sorted(scan.drop_pct, reverse=True)
    assert model.training is False


def test_prototype_usage():
    L, N, T_, R = 3, 2, 5, 4
    write = np.zeros((L, N, T_, R), np.float32)
    write[0] = 1 / R                      # even: all R used
    write[1, ..., 2] = 1.0                # one prototype takes everything
    write[2, ..., 0] = 0.5                # two halves
    write[2, ..., 3] = 0.5
    read = write[::-1].copy()
    stats = C.GateStats(ids=np.zeros((N, T_), np.int64), write=write, read=read,
                        half_life=np.ones((L, R)), vocab_size=10)
    u = C.prototype_usage(stats).set_index(["gate", "layer"])
    assert u.loc[("write", 0), "effective"] == pytest.approx(R) and u.loc[("write", 0), "rarely_used"] == 0
    assert u.loc[("write", 1), "effective"] == pytest.approx(1.0) and u.loc[("write", 1), "rarely_used"] == R - 1
    assert u.loc[("write", 1), "top_prototype"] == 2 and u.loc[("write", 1), "top_share"] == pytest.approx(1.0)
    assert u.loc[("write", 2), "effective"] == pytest.approx(2.0) and u.loc[("write", 2), "rarely_used"] == 2
    assert u.loc[("read", 0), "effective"] == pytest.approx(2.0)    # read is write with the layers reversed
    assert u.loc[("read", 2), "effective"] == pytest.approx(R)
    with pytest.raises(ValueError, match="rare"):
        C.prototype_usage(stats, rare=1.5)


def test_windows_at(women):
    s = np.array([1, 2, women, 3, 4, 5, women, 6, women], dtype=np.uint16)
    w = C.windows_at(s, women, 2)
    assert w.tolist() == [[1, 2], [4, 5], [women, 6]]
    c = C.windows_at(s, women, 3, where="center")
    assert c[:, 1].tolist() == [women, women] and c.shape == (2, 3)
    assert C.windows_at(s, women, 2, max_windows=2, seed=0).shape == (2, 2)
    blocks = C.sample_blocks(np.arange(100, dtype=np.uint16), 3, 10, seed=4)
    assert blocks.shape == (3, 10) and torch.equal(blocks, C.sample_blocks(np.arange(100, dtype=np.uint16), 3, 10, seed=4))
    assert (blocks[:, 0] % 10 == 0).all()


def test_load_model_fails_clearly(tmp_path, monkeypatch):
    monkeypatch.setenv("PROTOT_MODELS", str(tmp_path / "models"))
    with pytest.raises(FileNotFoundError, match="no-run .no checkpoint.*models/README.md"):
        C.load_model("protot-cpu", run=tmp_path / "no-run")
    # a name without a known run and no run given: only the committed folder is looked for
    with pytest.raises(FileNotFoundError, match=r"looked for models/protot-other \(committed models: none\)\. Get one"):
        C.load_model("protot-other")


def test_load_model_falls_back_to_a_run(tmp_path, monkeypatch):
    from protot.train import checkpoint
    from protot.train.config import profile
    from protot.train.trainer import build_model as build_from_cfg

    monkeypatch.setenv("PROTOT_MODELS", str(tmp_path / "models"))
    cfg = profile("smoke", size="tiny", context=32, batch_size=4, tokens=4 * 32 * 3)
    torch.manual_seed(1)
    model = build_from_cfg(cfg, tk.VOCAB_SIZE)
    opt = torch.optim.AdamW(model.parameters())
    run = tmp_path / "run"
    checkpoint.save(run, 2, model, opt, {"config": cfg.to_dict(), "tokens_seen": 256,
                                         "tokenizer_sha256": tk.tokenizer_hash(), "data_key": "test"})
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    lm = C.load_model("protot-cpu", run=run)
    assert torch.equal(torch.rand(3), expected_next)       # loading does not move the caller's RNG
    assert lm.source == "run" and "step-000002" in lm.description and "not a committed model" in lm.description
    for n, v in model.state_dict().items():
        assert torch.equal(lm.model.state_dict()[n], v), n
    assert C.token_id(lm.tokenizer, " women") == C.token_id(tk.load_hf_tokenizer(), " women")
    # once the run is exported as a committed model, that model is preferred
    from protot.train import pretrained

    pretrained.export(run, "protot-cpu", eval_blocks=1)
    committed = C.load_model("protot-cpu", run=run)
    assert committed.source == "committed" and committed.description.startswith("models/protot-cpu")


# -- concept null with matched sharpness, coherence --------------------------------------------------------
def _synthetic_reference(n_types=400, dim=16, clusters=8, seed=0):
    """Token ids 1..n_types-1 with reference vectors in ``clusters`` tight clusters (id % clusters)."""
    rng = np.random.default_rng(seed)
    ours = np.arange(1, n_types)
    centres = rng.normal(size=(clusters, dim))
    v = centres[ours % clusters] + 0.3 * rng.normal(size=(len(ours), dim))
    v -= v.mean(0)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return C.ReferenceEmbeddings("synthetic", ours, ours, v.astype(np.float32))


def _stats_with(write: np.ndarray, ids: np.ndarray, vocab: int) -> C.GateStats:
    L, R = write.shape[0], write.shape[-1]
    return C.GateStats(ids=ids, write=write.astype(np.float32), read=write.astype(np.float32),
                       half_life=np.ones((L, R)), vocab_size=vocab)


def test_coherence_sees_planted_clusters():
    from compendium import claims

    ref = _synthetic_reference()
    rng = np.random.default_rng(1)
    ids = rng.integers(1, 400, size=(20, 64))
    R = 8
    planted = np.full((1, 20, 64, R), 0.1 / (R - 1))
    planted[0, np.arange(20)[:, None], np.arange(64)[None, :], ids % R] = 0.9    # prototype r <- cluster r
    def random_gates(seed):
        g = np.random.default_rng(seed).dirichlet(np.full(R, 0.3), size=(1, 20, 64))
        return g
    coh = C.coherence(_stats_with(planted, ids, 400), ref, top=10, min_count=2)
    assert coh.shape == (1, R) and (coh > 0.5).all()                # top tokens of each prototype: one cluster
    nulls = [_stats_with(random_gates(s), ids, 400) for s in (2, 3, 4)]
    assert all(np.nanmean(C.coherence(s, ref, top=10, min_count=2)) < 0.3 for s in nulls)
    H = {"write": 1.0, "read": 1.0}
    m = C.measure_concepts(_stats_with(planted, ids, 400), nulls, ref, trained_entropy=H,
                           null_entropy=[{"write": 1.02, "read": 1.0}] * 3, top=10, min_count=2)
    assert m.values["coherence_margin"] > 0.2 and m.values["null_seeds"] == 3
    assert m.values["null_entropy_gap"] == pytest.approx(0.02)
    claim = claims.get_claim(m.claim)
    assert _judged_at_the_floor(claim, m.values) == claims.HOLDS
    # a null whose gates are not as sharp fails the precondition: inconclusive, naming it
    m2 = C.measure_concepts(_stats_with(planted, ids, 400), nulls, ref, trained_entropy=H,
                            null_entropy=[{"write": 1.3, "read": 1.0}] * 3, top=10, min_count=2)
    status, _, _, reason = claims.evaluate(claim, m2.values, "cpu")
    assert status == claims.INCONCLUSIVE and "null-entropy-matched" in reason
    with pytest.raises(ValueError, match="map to"):
        C.coherence(_stats_with(planted, ids, 400), C.ReferenceEmbeddings("none", np.array([0]), np.array([0]),
                                                                        np.ones((1, 2), np.float32)))


def test_min_margin_interval_by_hand():
    from protot import labels

    t = np.array([0.30, 0.25, np.nan, 0.40, 0.35, 0.20])         # a NaN (no coherence) is left out
    pools = [np.array([0.10, 0.31, 0.08, 0.25]), np.array([0.22, 0.30, 0.12]), np.array([0.05, np.nan, 0.07])]
    lo, hi = labels.min_margin_interval(t, pools, n_boot=400, seed=3)
    tt = t[np.isfinite(t)]
    ps = [p[np.isfinite(p)] for p in pools]
    rng = np.random.default_rng(3)
    it = rng.integers(0, len(tt), size=(400, len(tt)))            # the trained prototypes: one draw, shared
    means = [p[rng.integers(0, len(p), size=(400, len(p)))].mean(1) for p in ps]   # then each pool on its own
    smallest = tt[it].mean(1) - np.max(means, axis=0)
    assert (lo, hi) == pytest.approx(tuple(np.quantile(smallest, [0.025, 0.975])), rel=1e-12)
    # two families close to each other: the smallest margin of each resample lies below either family's own,
    # so its interval reaches lower than the lowest per-family interval end
    per_family = [labels.margin_interval(tt, p, n_boot=400, seed=3)[1:] for p in ps]
    assert lo < min(f[0] for f in per_family)
    # one family: the per-family interval itself
    assert labels.min_margin_interval(t, pools[1:2], n_boot=400, seed=3) == \
        pytest.approx(labels.margin_interval(t, pools[1], n_boot=400, seed=3)[1:], rel=1e-12)
    with pytest.raises(ValueError, match=r"at least 2 values on each side, got 5 and \[4, 1\]"):
        labels.min_margin_interval(t, [pools[0], np.array([0.1, np.nan])])
    with pytest.raises(ValueError, match=r"got 5 and \[\]"):
        labels.min_margin_interval(t, [])


def test_the_concept_check_reads_the_smallest_margin_and_its_interval():
    """measure_concepts: coherence_margin is the smallest family margin, its interval min_margin_interval's
    over the alive prototypes of the coherence table, alive_prototypes their number."""
    from protot import labels

    ref = _synthetic_reference()
    ids = np.random.default_rng(1).integers(1, 400, size=(20, 64))
    R = 8
    planted = np.full((1, 20, 64, R), 0.1 / (R - 1))
    planted[0, np.arange(20)[:, None], np.arange(64)[None, :], ids % R] = 0.9
    nulls = [_stats_with(np.random.default_rng(s).dirichlet(np.full(R, 0.3), size=(1, 20, 64)), ids, 400) for s in (2, 3, 4, 5)]
    H = {"write": 1.0, "read": 1.0}
    fam = ["untrained", "untrained", "prototypes redrawn", "prototypes redrawn"]
    m = C.measure_concepts(_stats_with(planted, ids, 400), nulls, ref, trained_entropy=H, null_entropy=[H] * 4, top=10,
                           min_count=2, null_families=fam, n_boot=300, seed=4)
    coh = m.tables["concept_coherence"]
    tr = coh[(coh.model == "trained") & coh.alive].coherence.to_numpy()
    pools = [coh[(coh.family == f) & coh.alive].coherence.to_numpy() for f in ("untrained", "prototypes redrawn")]
    assert (m.values["coherence_margin_ci_low"], m.values["coherence_margin_ci_high"]) == \
        labels.min_margin_interval(tr, pools, n_boot=300, seed=4)
    fams = m.tables["concept_null_families"]
    assert m.values["coherence_margin"] == pytest.approx(fams.margin.min(), rel=1e-12)
    assert m.values["alive_prototypes"] == int(np.isfinite(tr).sum()) == R
    assert m.evidence["family_margins"]["untrained"][0] == pytest.approx(float(fams.set_index("family").margin["untrained"]))


@pytest.mark.parametrize("variant", list(VARIANT_MODELS))
def test_matched_null_and_an_untrained_model_fails_the_check(tokenizer, variant):
    """Untrained ProtoTs sharpened to the same gate entropy: one of them in the role of the trained
    model does not pass the check against the others (there is nothing learned to find)."""
    from compendium import claims

    trained = VARIANT_MODELS[variant](tokenizer.vocab_size, seed=0)
    ids = _ids(12, C.token_id(tokenizer, " women"), seed=5)
    target = {k: 0.5 * v for k, v in C.mean_gate_entropy(trained, ids).items()}     # sharper than at init
    nulls = [C.matched_null(trained, s, ids, target, tol=0.01) for s in (11, 12, 13, 14)]
    for n in nulls:
        for kind in ("write", "read"):
            assert n.entropy[kind] == pytest.approx(target[kind], rel=0.01)
        assert n.write_temperature < 1.0 and n.model.config is not trained.config
    assert trained.config.write_temperature == 1.0                  # the trained model is untouched
    if variant == "authors":   # its learned temperatures are scaled by the factor found, the trained one's kept
        for mt, mn in zip(trained.mixers(), nulls[0].model.mixers()):
            assert float(mt.write_tau[0]) in (1.0, 3.0)
            assert float(mn.write_tau[0]) == pytest.approx(float(mt.write_tau[0]) * nulls[0].write_temperature)
    again = C.matched_null(trained, 11, ids, target, tol=0.01)
    assert again.write_temperature == nulls[0].write_temperature     # deterministic
    ref = _synthetic_reference()
    stats = [C.collect_gates(n.model, ids) for n in nulls]
    ents = [C.mean_gate_entropy(n.model, ids) for n in nulls]
    claim = claims.get_claim("protot/concept-prototypes")
    m = C.measure_concepts(stats[0], stats[1:], ref, trained_entropy=ents[0], null_entropy=ents[1:], min_count=2)
    assert m.values["null_seeds"] == 3 and m.values["null_entropy_gap"] <= 0.05
    status, *_ = claims.evaluate(claim, m.values, "cpu")
    assert status in (claims.DOES_NOT_HOLD, claims.INCONCLUSIVE), m.values   # never holds


# -- the nulls of the concept check: every one of them fails it ----------------------------------------------
def test_redrawn_null_changes_only_what_it_redraws(tokenizer):
    from protot import labels

    trained = _model(tokenizer.vocab_size, seed=0, shared_keys=True)
    before = {n: p.detach().clone() for n, p in trained.state_dict().items()}
    ids = _ids(6, C.token_id(tokenizer, " women"), seed=2)
    target = C.mean_gate_entropy(trained, ids)
    for read_too in (False, True):
        n = labels.redrawn_null(trained, 5, ids, target, read_projections=read_too, tol=0.01)
        assert n.family == labels.NULL_FAMILIES[2 if read_too else 1]
        redrawn = {".prototypes"} | ({".key_proj.weight"} if read_too else set())
        for name, p in n.model.state_dict().items():
            same = torch.equal(p, before[name])
            assert same != any(name.endswith(r) for r in redrawn), name   # exactly the redrawn tensors differ
        for kind in ("write", "read"):
            assert n.entropy[kind] == pytest.approx(target[kind], rel=0.01)
    for name, p in trained.state_dict().items():          # the trained model is untouched
        assert torch.equal(p, before[name]), name
    assert trained.config.write_temperature == 1.0
    # a model with separate projections: the read projection is W_r
    sep = _model(tokenizer.vocab_size, seed=0)
    assert labels.read_projection(sep.layers[1].mixer) is sep.layers[1].mixer.read_proj.weight
    with pytest.raises(ValueError, match="family"):
        labels.null_model(trained, "shuffled", 0, ids)


def test_redrawn_null_of_the_authors_variant_changes_only_what_it_redraws(tokenizer):
    """The authors' variant has no write projection (the normed token is the write query) and reads
    through W_r (``read_proj``) in every layer but the first (which reads with its write routing): the
    second family re-draws the prototypes and those W_r; the temperature search scales the learned
    temperatures (``write_tau``, ``read_tau``). Nothing else differs from the trained model."""
    from protot import labels

    trained = _authors_model(tokenizer.vocab_size, seed=0)
    assert [labels.read_projection(mx) is None for mx in trained.mixers()] == [True, False]
    assert labels.read_projection(trained.layers[1].mixer) is trained.layers[1].mixer.read_proj
    before = {n: p.detach().clone() for n, p in trained.state_dict().items()}
    ids = _ids(6, C.token_id(tokenizer, " women"), seed=2)
    target = {k: 0.6 * v for k, v in C.mean_gate_entropy(trained, ids).items()}
    for read_too in (False, True):
        n = labels.redrawn_null(trained, 5, ids, target, read_projections=read_too, tol=0.01)
        assert n.family == labels.NULL_FAMILIES[2 if read_too else 1]
        redrawn = {".prototypes", ".write_tau", ".read_tau"} | ({".read_proj"} if read_too else set())
        for name, p in n.model.state_dict().items():
            same = torch.equal(p, before[name])
            assert same != any(name.endswith(r) for r in redrawn), name   # exactly these tensors differ
        for kind in ("write", "read"):
            assert n.entropy[kind] == pytest.approx(target[kind], rel=0.01)
    for name, p in trained.state_dict().items():          # the trained model is untouched
        assert torch.equal(p, before[name]), name


def _clustered_model(vocab, clusters=8, seed=0, variant="compendium-v1"):
    """A tiny ProtoT whose embeddings of ids 1..399 sit in ``clusters`` tight clusters (id % clusters,
    as _synthetic_reference) and whose layer 0 routes the normed token itself (compendium-v1: its key
    projection set to the identity; the authors' variant has no write projection): whatever its
    prototype vectors are, each one's top tokens come from one cluster. Coherence is then a property
    of the rest of the model, as an outside check found it to be in a trained one."""
    authors = variant == "authors"
    m = _authors_model(vocab, seed=seed) if authors else _model(vocab, seed=seed, conv_layers=0, shared_keys=True)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        E = m.get_input_embeddings().weight
        d = E.shape[1]
        centres = torch.randn(clusters, d, generator=g)
        ids = torch.arange(1, 400)
        E[ids] = centres[ids % clusters] + 0.2 * torch.randn(len(ids), d, generator=g)
        if not authors:
            m.layers[0].mixer.key_proj.weight.copy_(torch.eye(d))
    return m


@pytest.mark.parametrize("family", ["untrained", "prototypes redrawn", "prototypes and read projections redrawn"])
def test_nulls_of_the_authors_variant_match_gate_entropy(tokenizer, family):
    """The authors' mixer learns its temperatures (write_tau / read_tau per head): the null's search
    scales them, so its write gates match the target entropy as compendium-v1's do."""
    from protot import labels
    from protot.models import build_model

    torch.manual_seed(0)
    trained = build_model("protot", "tiny", tokenizer.vocab_size).eval()
    assert trained.config.variant == "authors"
    before = {n: p.detach().clone() for n, p in trained.state_dict().items()}
    ids = _ids(6, C.token_id(tokenizer, " women"), seed=2)
    target = {k: 0.6 * v for k, v in C.mean_gate_entropy(trained, ids).items()}
    n = labels.null_model(trained, family, 7, ids, target, tol=0.01)
    assert n.entropy["write"] == pytest.approx(target["write"], rel=0.01)
    assert n.write_temperature < 1.0
    for name, p in trained.state_dict().items():
        assert torch.equal(p, before[name]), name


def _judged_at_the_floor(claim, values):
    """The verdict of the concept check on a tiny model's values: as measured it is inconclusive by
    min-units (a tiny model has fewer alive prototypes than the floor); the check itself is applied
    with the count raised to the floor."""
    from compendium import claims

    floor = claim.min_units.at_least
    assert values["alive_prototypes"] < floor
    status, _, _, reason = claims.evaluate(claim, values, "cpu")
    assert status == claims.INCONCLUSIVE and "min-units" in reason
    return claims.evaluate(claim, {**values, "alive_prototypes": floor}, "cpu")[0]


@pytest.mark.parametrize("variant", list(VARIANT_MODELS))
def test_every_null_fails_the_concept_check(tokenizer, variant):
    """Each null family in the role of the trained model, against the nulls (its own family's other
    seeds included): the registered check never says "holds" ("does not hold" when the whole interval of
    the smallest margin lies at or below 0, "inconclusive" when it straddles 0). The model's coherence
    sits in its embeddings, not its prototypes: compared with untrained nulls only, the model with
    its prototypes re-drawn passes (what the earlier check did), so the re-drawn families are
    needed. The same check passes planted concepts (test_coherence_sees_planted_clusters)."""
    from compendium import claims
    from protot import labels

    trained = _clustered_model(tokenizer.vocab_size, variant=variant)
    ids = _ids(16, C.token_id(tokenizer, " women"), seed=5)
    target = {k: 0.6 * v for k, v in C.mean_gate_entropy(trained, ids).items()}    # sharper than at init
    ref = _synthetic_reference()
    claim = claims.get_claim("protot/concept-prototypes")
    nulls = {fam: [labels.null_model(trained, fam, s, ids, target, tol=0.01) for s in (11, 12, 13, 14)]
             for fam in labels.NULL_FAMILIES}
    stats = {fam: [C.collect_gates(n.model, ids) for n in ns] for fam, ns in nulls.items()}
    ents = {fam: [C.mean_gate_entropy(n.model, ids) for n in ns] for fam, ns in nulls.items()}

    def check(role, pool):
        m = C.measure_concepts(stats[role][0], [stats[f][i] for f, i in pool], ref, trained_entropy=ents[role][0],
                               null_entropy=[ents[f][i] for f, i in pool], null_families=[f for f, _ in pool],
                               min_count=2, n_boot=500)
        assert m.values["null_seeds"] == 3 and m.values["null_entropy_gap"] <= 0.05   # preconditions pass
        return _judged_at_the_floor(claim, m.values), m

    for role in labels.NULL_FAMILIES:
        pool = [(f, i) for f in labels.NULL_FAMILIES for i in range(4) if (f, i) != (role, 0)]
        status, m = check(role, pool)
        assert status in (claims.DOES_NOT_HOLD, claims.INCONCLUSIVE), (role, m.values, m.tables["concept_null_families"])
        assert m.values["coherence_margin_ci_low"] <= 0
        fams = m.tables["concept_null_families"]
        assert list(fams.family) == list(labels.NULL_FAMILIES) and (fams.ci_low < fams.margin).all()
    redrawn = labels.NULL_FAMILIES[1]
    status, m = check(redrawn, [(labels.NULL_FAMILIES[0], i) for i in range(1, 4)])
    assert status == claims.HOLDS, m.tables["concept_null_families"]


def test_dead_prototypes_leave_the_concept_check():
    """A prototype below the floor takes no part: a perfectly coherent dead prototype does not lift
    the trained mean; alive, it does."""
    ref = _synthetic_reference()
    rng = np.random.default_rng(1)
    ids = rng.integers(1, 400, size=(20, 64))
    R = 8
    g = rng.dirichlet(np.full(R, 0.3), size=(1, 20, 64))
    g[..., 0] = 0.0
    g /= g.sum(-1, keepdims=True)
    g[0][ids % 8 == 0] = 0.0                              # prototype 0 takes cluster 0 only, with a small gate
    g[0][ids % 8 == 0, 0] = 1.0
    g = g / g.sum(-1, keepdims=True)
    share0 = float(g[..., 0].mean())
    assert share0 > 0.1 / R                              # alive as built
    alive_stats = _stats_with(g, ids, 400)
    dead = g.copy()
    dead[..., 0] *= 0.01 / R / share0                    # now below the floor
    dead_stats = _stats_with(dead, ids, 400)
    assert C.alive_mask(alive_stats)[0, 0] and not C.alive_mask(dead_stats)[0, 0]
    assert list(C.dead_prototypes(dead_stats).itertuples(index=False, name=None))[0][:2] == (0, 0)
    nulls = [_stats_with(np.random.default_rng(s).dirichlet(np.full(R, 0.3), size=(1, 20, 64)), ids, 400) for s in (2, 3, 4)]
    H = [{"write": 1.0, "read": 1.0}] * 3
    a = C.measure_concepts(alive_stats, nulls, ref, trained_entropy=H[0], null_entropy=H, min_count=2, n_boot=200)
    d = C.measure_concepts(dead_stats, nulls, ref, trained_entropy=H[0], null_entropy=H, min_count=2, n_boot=200)
    coh = C.coherence(alive_stats, ref, min_count=2)
    assert a.values["coherence_trained"] == pytest.approx(np.nanmean(coh))
    assert d.values["coherence_trained"] == pytest.approx(np.nanmean(coh[0, 1:]))
    assert a.evidence["alive_trained"] == R and d.evidence["alive_trained"] == R - 1
    assert a.values["alive_prototypes"] == R and d.values["alive_prototypes"] == R - 1   # min_units' count


def test_prototype_table_labels_and_dead_floor(tokenizer, women):
    m = _model(tokenizer.vocab_size, conv_layers=0)
    _plant(m, 4, women)
    ids = _ids(8, women)
    stats = C.collect_gates(m, ids)
    tab = C.prototype_table(stats, tokenizer, min_count=2, contexts=2).set_index(["layer", "prototype"])
    row = tab.loc[(0, 4)]
    assert row.write_tokens.split(" | ")[0] == " women" and row.label == row.write_tokens   # planted on W_w only
    read = C.top_tokens(stats, tokenizer, 0, 4, gate="read", top=5, min_count=2)
    assert row.read_tokens == " | ".join(read.token)
    assert row.top_contexts.count("[[ women]]") == 2 and row.alive
    assert tab.alive.equals(pd.Series(C.alive_mask(stats).reshape(-1), index=tab.index, name="alive"))
    shares = C.gate_shares(stats)
    np.testing.assert_allclose(shares["write"].sum(1), 1.0, rtol=1e-12)
    with pytest.raises(ValueError, match="floor"):
        C.alive_mask(stats, floor=0.0)


# -- a prototype found by its label -----------------------------------------------------------------------------
def _pair_stream(tokenizer, n, seed):
    """Random tokens with every word of the female pairs sprinkled in (together ~1 in 4 positions)."""
    from protot import ablation as A

    rng = np.random.default_rng(seed)
    s = rng.integers(1, 400, size=n)
    words = [C.token_id(tokenizer, w) for p in A.FEMALE_PAIRS for w in p]
    hits = rng.random(n) < 0.25
    s[hits] = rng.choice(words, size=int(hits.sum()))
    return s.astype(np.uint16)


def _plant_class(model, k: int, targets, strength: float = 12.0):
    """As _plant, for a class of tokens: prototype k of layer 0 takes every token of ``targets``."""
    mixer = model.layers[0].mixer
    with torch.no_grad():
        E = model.get_input_embeddings().weight
        E[:, 0] = 0.0
        for t in targets:
            E[t] = 0.0
            E[t, 0] = 1.0
        mixer.write_proj.weight.copy_(torch.eye(mixer.write_proj.weight.shape[0]))
        mixer.prototypes[:, 0] = 0.0
        mixer.prototypes[k] = 0.0
        mixer.prototypes[k, 0] = strength


@pytest.mark.parametrize("planted", ["female", "none"])
def test_label_selection_finds_a_planted_female_prototype(tokenizer, planted):
    """"female": prototype 3 of layer 0 takes the female words: selected and labelled. "none": a
    random model: no label earns the name."""
    from protot import ablation as A, labels

    m = _model(tokenizer.vocab_size, conv_layers=0, seed=1)
    female = [a for a, _ in A.FEMALE_PAIRS]
    if planted != "none":
        _plant_class(m, 3, [C.token_id(tokenizer, w) for w in female])
    stream = _pair_stream(tokenizer, 6000, 0)
    stats = C.collect_gates(m, C.sample_blocks(stream, 24, 32, seed=0))
    gates = labels.word_gates(m, tokenizer, stream, [w for p in A.FEMALE_PAIRS for w in p], windows=16, context=16)
    assert all(g["count"] == 16 for g in gates.values())
    scores = labels.label_scores(gates, A.FEMALE_PAIRS, C.alive_mask(stats))
    assert len(scores) == 2 * 2 * 8 and scores.score.is_monotonic_decreasing
    sel = labels.select_by_label(scores, stats, gates, female, min_count=2)
    if planted == "female":
        assert (sel.layer, sel.prototype) == (0, 3) and sel.labelled, scores.head()
        assert sel.score > np.log(10) and sel.top_share == 1.0
    else:
        assert not sel.labelled, (sel.name, sel.score, sel.top_share)
    # the score recomputed by hand for the selected prototype and gate
    direct = np.mean([np.log(max(gates[a][sel.gate][sel.layer, sel.prototype], 1e-12)
                             / max(gates[b][sel.gate][sel.layer, sel.prototype], 1e-12)) for a, b in A.FEMALE_PAIRS])
    assert sel.score == pytest.approx(direct, rel=1e-12)
    # a dead prototype is never selected, however high its score
    alive = C.alive_mask(stats).copy()
    alive[sel.layer, sel.prototype] = False
    other = labels.select_by_label(labels.label_scores(gates, A.FEMALE_PAIRS, alive), stats, gates, female, min_count=2)
    assert (other.layer, other.prototype) != (sel.layer, sel.prototype)


def test_a_label_needs_the_words_among_its_top_tokens():
    """A prototype that prefers female words to their matched words (score ln 6) but takes 40 other
    token types far more: the score alone would pass, the label (female words among its top-10
    tokens) does not; with the female words at the top, it does."""
    from protot import ablation as A, labels

    rng = np.random.default_rng(0)
    ids = rng.integers(1, 400, size=(20, 64))
    L, R = 1, 8
    g = np.full((L, 20, 64, R), 1.0 / R)
    g[0][ids <= 40] = 0.1 / (R - 1)
    g[0][ids <= 40, 3] = 0.9                             # P3 takes ids 1..40
    stats = _stats_with(g, ids, 400)
    gates = {}
    for a, b in A.FEMALE_PAIRS:
        for w, v in ((a, 0.3), (b, 0.05)):
            x = np.full((L, R), 1.0 / R)
            x[0, 3] = v
            gates[w] = {"write": x, "read": x, "count": 16}
    female = [a for a, _ in A.FEMALE_PAIRS]
    scores = labels.label_scores(gates, A.FEMALE_PAIRS)
    sel = labels.select_by_label(scores, stats, gates, female, min_count=2)
    assert (sel.layer, sel.prototype) == (0, 3) and sel.score == pytest.approx(np.log(6))
    assert sel.top_share == 0.0 and not sel.labelled
    for w in female:
        gates[w]["write"][0, 3] = 0.95                   # now above every other token type
    sel = labels.select_by_label(labels.label_scores(gates, A.FEMALE_PAIRS), stats, gates, female, min_count=2)
    assert sel.top_share == 1.0 and sel.labelled


# -- strata, coordination contexts, perplexity interval, controls ----------------------------------------------
def test_stratify_hand_written_contexts(tokenizer):
    from protot import ablation as A

    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)   # noqa: E731
    texts = {"coordination": ["The study followed both men and", "Doctors asked whether girls or",
                              "Prices depend on supply and"],
             "topical": ["The mother said that many of the", "She wrote a letter to other", "His team and the"],
             "rest": ["The committee voted to support the", "Salt and pepper were sold at the", "In 1990, a law or"
                      " rule for"]}
    rows = [(enc(t), want) for want, ts in texts.items() for t in ts]
    T = max(len(r) for r, _ in rows)
    pad = C.token_id(tokenizer, " the")
    ctx = np.array([[pad] * (T - len(r)) + r for r, _ in rows])     # left-padded with a neutral word
    coord = [C.token_id(tokenizer, w) for w in A.COORDINATORS]
    gender = A.word_ids(tokenizer, [a for a, _ in A.FEMALE_PAIRS] + list(A.MALE_WORDS), capitalised=True)
    assert {C.token_id(tokenizer, w) for w in (" She", "She", " His")} <= set(gender)
    got = A.stratify(ctx, coord, gender)
    assert list(got) == [want for _, want in rows]
    lower_only = A.word_ids(tokenizer, [a for a, _ in A.FEMALE_PAIRS] + list(A.MALE_WORDS))
    assert list(A.stratify(ctx, coord, lower_only))[4:6] == ["rest", "rest"]     # "She ...", "His ..." need the capitals
    with pytest.raises(ValueError, match=r"\(n, T\)"):
        A.stratify(ctx[0], coord, gender)


def test_coordination_contexts(tokenizer):
    from protot import ablation as A

    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)   # noqa: E731
    s = np.array(enc("We need supply and demand, cats or dogs, and 42 more, men and women."), dtype=np.uint16)
    coord = [C.token_id(tokenizer, w) for w in A.COORDINATORS]
    ctx, nxt = A.coordination_contexts(s, tokenizer, 3, 10, coordinator_ids=coord,
                                       exclude_ids=[C.token_id(tokenizer, " women")])
    assert [tokenizer.decode([int(t)]) for t in nxt] == [" demand", " dogs"]      # not " 42", not " women"
    assert all(int(c[-1]) in coord for c in ctx) and ctx.shape == (2, 3)
    assert tokenizer.decode(ctx[0].tolist()).endswith("supply and")


def test_ppl_change_interval_matches_direct_perplexity(tokenizer, women):
    from protot import ablation as A

    m = _model(tokenizer.vocab_size, seed=3)
    with torch.no_grad():
        for mixer in m.mixers():
            mixer.alpha.fill_(1.0)
    blocks = _ids(10, women, seed=4)
    nll0 = A.block_nll(m, blocks, batch_size=3)
    with torch.no_grad():
        logits = m(blocks).logits[:, :-1].double()
        direct = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), blocks[:, 1:].reshape(-1),
                                                   reduction="sum")
    assert nll0.sum() == pytest.approx(float(direct), rel=1e-10)
    with C.edited(m, C.Edit("mask", 1, 2)):
        nll1 = A.block_nll(m, blocks)
    ch, lo, hi = A.ppl_change_interval(nll0, nll1, T - 1, n_boot=500)
    ppl0, ppl1 = np.exp(nll0.sum() / (10 * (T - 1))), np.exp(nll1.sum() / (10 * (T - 1)))
    assert ch == pytest.approx(100 * (ppl1 / ppl0 - 1), rel=1e-9) and ch != 0
    assert lo <= ch <= hi and lo < hi
    assert A.ppl_change_interval(nll0, nll0, T - 1, n_boot=50) == (0.0, 0.0, 0.0)


def test_alive_controls_exclude_dead_prototypes():
    from protot import ablation as A

    alive = np.ones((3, 8), bool)
    alive[1, [0, 2, 5, 6]] = False
    assert A.alive_controls(alive, 1, 3, None) == [1, 4, 7]
    assert A.alive_controls(alive, 1, 1, None) == [3, 4, 7]
    got = A.alive_controls(alive, 2, 0, 4, seed=1)
    assert len(got) == 4 and 0 not in got and got == sorted(got) and got == A.alive_controls(alive, 2, 0, 4, seed=1)
    assert A.alive_controls(np.zeros((1, 4), bool), 0, 1, 8) == []


def test_edit_margins_by_hand():
    """Specificity: the women contexts and each checked set resampled on their own; controls: on the
    women contexts' draw, shared by the edit and every control; unchecked sets play no part."""
    from protot import ablation as A

    rng = np.random.default_rng(0)
    p0 = rng.uniform(0.05, 0.2, 12)
    p1 = p0 * rng.uniform(0.5, 0.9, 12)                               # the edit: a drop of ~30%
    q0, r0, g0 = rng.uniform(0.05, 0.2, 9), rng.uniform(0.05, 0.2, 7), rng.uniform(0.05, 0.2, 5)
    q1, r1, g1 = q0 * rng.uniform(0.8, 1.1, 9), r0 * rng.uniform(0.85, 1.0, 7), g0 * 0.01
    c1, c2 = p0 * rng.uniform(0.9, 1.05, 12), p0 * rng.uniform(0.7, 1.0, 12)
    judged = {"probs": {"intact": p0, "edited": p1, "others": {"a": (q0, q1), "b": (r0, r1), "g": (g0, g1)},
                        "controls": {3: c1, 5: c2}}}
    m = A.edit_margins(judged, ["a", "b"], n_boot=300, seed=5)

    def drop(x0, x1):
        return 100 * (1 - x1.mean(-1) / x0.mean(-1))

    assert m["specificity_margin"] == pytest.approx(drop(p0, p1) - max(drop(q0, q1), drop(r0, r1)), rel=1e-12)
    assert m["control_margin"] == pytest.approx(drop(p0, p1) - max(drop(p0, c1), drop(p0, c2)), rel=1e-12)
    g = np.random.default_rng(5)
    i, ia, ib = (g.integers(0, n, size=(300, n)) for n in (12, 9, 7))
    spec = drop(p0[i], p1[i]) - np.maximum(drop(q0[ia], q1[ia]), drop(r0[ib], r1[ib]))
    want = np.quantile(spec, [0.025, 0.975])
    assert (m["specificity_margin_ci_low"], m["specificity_margin_ci_high"]) == pytest.approx(tuple(want), rel=1e-12)
    i = np.random.default_rng(5).integers(0, 12, size=(300, 12))
    ctrl = drop(p0[i], p1[i]) - np.maximum(drop(p0[i], c1[i]), drop(p0[i], c2[i]))
    want = np.quantile(ctrl, [0.025, 0.975])
    assert (m["control_margin_ci_low"], m["control_margin_ci_high"]) == pytest.approx(tuple(want), rel=1e-12)
    none = A.edit_margins({"probs": {**judged["probs"], "controls": {}}}, ["a"], n_boot=50)
    assert np.isnan([none["control_margin"], none["control_margin_ci_low"], none["control_margin_ci_high"]]).all()
    with pytest.raises(ValueError, match=r"checked context sets among \['a', 'b', 'g'\], got \['x'\]"):
        A.edit_margins(judged, ["x"])
    with pytest.raises(ValueError, match="checked context sets"):
        A.edit_margins(judged, [])


def test_measure_women_on_a_planted_model(tokenizer, women):
    """The whole women measurement on a tiny model with a planted female prototype (layer 0, P3) and
    two dead prototypes in the same layer: the label finds P3, the dead ones are never controls (of
    p(women) or of perplexity), every registered quantity is there, and the numbers agree with
    direct recomputation."""
    from compendium import claims
    from protot import ablation as A
    from protot import women as W

    m = _model(tokenizer.vocab_size, conv_layers=0, seed=2, shared_keys=True)
    female_ids = [C.token_id(tokenizer, w) for w, _ in A.FEMALE_PAIRS]
    mixer = m.layers[0].mixer
    with torch.no_grad():
        for mx in m.mixers():
            mx.alpha.fill_(1.0)
        E = m.get_input_embeddings().weight
        E[:, :2] = 0.0
        E[:, 1] = 0.5                                  # a direction every token shares
        for t in female_ids:
            E[t] = 0.0
            E[t, 0] = 1.0
        mixer.key_proj.weight.copy_(torch.eye(mixer.key_proj.weight.shape[0]))
        mixer.prototypes[:, :2] = 0.0
        mixer.prototypes[3] = 0.0
        mixer.prototypes[3, 0] = 12.0
        mixer.prototypes[[5, 6], 1] = -200.0           # dead: a large negative logit for every token
    extra = [C.token_id(tokenizer, w) for w in (" and", " or", " people", " children")]

    def stream(seed):
        s = _pair_stream(tokenizer, 8000, seed).astype(np.int64)
        hits = np.random.default_rng(seed + 10).random(len(s)) < 0.08
        s[hits] = np.random.default_rng(seed + 20).choice(extra, size=int(hits.sum()))
        return s.astype(np.uint16)

    train, val = stream(1), stream(2)
    kw = dict(label_blocks=24, label_context=32, word_windows=16, word_context=16, min_count=2, select_windows=12,
              select_context=16, context=16, max_contexts=40, other_contexts=8, coordination_n=8, gender_contexts=8,
              n_controls=None, reinit_seeds=(0,), ppl_blocks=6, ppl_context=16, effect_context=16, short=4,
              n_boot=200, seed=0)
    before = {n: p.detach().clone() for n, p in m.state_dict().items()}
    a, p, s = W.measure_women(m, tokenizer, train, val, **kw)
    assert a.evidence["prototype"] == "L0 P3" and a.values["labelled_female"] is True
    dead = a.tables["dead_prototypes"]
    assert {(0, 5), (0, 6)} <= set(zip(dead.layer, dead.prototype)) and (0, 3) not in set(zip(dead.layer, dead.prototype))
    ctrl = a.tables["women_controls"]
    alive_l0 = {j for j in range(8) if (0, j) not in set(zip(dead.layer, dead.prototype))}
    assert set(ctrl.prototype) == alive_l0 - {3} and not {5, 6} & set(ctrl.prototype) and (ctrl.layer == 0).all()
    ppl = p.tables["women_ppl"]
    ppl_ctrl = ppl[ppl.edit.str.startswith("control")]
    assert set(ppl_ctrl.prototype) == set(ctrl.prototype) and (ppl_ctrl.layer == 0).all()
    assert p.values["ppl_blocks"] == 6 and p.values["ppl_ci_low_pct"] <= p.values["ppl_change_pct"] <= p.values["ppl_ci_high_pct"]
    blocks = C.sample_blocks(val, 6, 16, seed=0)                 # the perplexity change, recomputed directly
    with torch.no_grad():
        def ppl_of():
            logits = m(blocks).logits[:, :-1].double()
            return float(torch.exp(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                                     blocks[:, 1:].reshape(-1))))
        ppl0 = ppl_of()
        with C.edited(m, C.Edit("mask", 0, 3)):
            ppl1 = ppl_of()
    assert p.values["ppl_change_pct"] == pytest.approx(100 * (ppl1 / ppl0 - 1), rel=1e-9)
    assert p.evidence["ppl_intact"] == pytest.approx(ppl0, rel=1e-9)
    # the drop and its strata, recomputed directly
    ctx = C.windows_at(val, women, 16, where="before", max_windows=40, seed=0)
    q0 = C.target_probs(m, ctx, women)
    with C.edited(m, C.Edit("mask", 0, 3)):
        q1 = C.target_probs(m, ctx, women)
    assert a.values["drop_pct"] == pytest.approx(C.drop_pct(q0, q1), abs=1e-9)
    coord = [C.token_id(tokenizer, w) for w in A.COORDINATORS]
    is_coord = np.isin(ctx[:, -1].numpy(), coord)
    assert a.values["coordination_contexts"] == int(is_coord.sum()) > 0
    assert a.values["coordination_drop_pct"] == pytest.approx(C.drop_pct(q0[is_coord], q1[is_coord]), abs=1e-9)
    assert sum(a.values[f"{st}_contexts"] for st in A.STRATA) == len(ctx)
    assert a.values["control_margin"] == pytest.approx(a.values["drop_pct"] - ctrl.drop_pct.max())
    spec = a.tables["women_specificity"].set_index("word")
    checked = [" people", " children", "gender-free coordination"]
    assert a.values["specificity_margin"] == pytest.approx(a.values["drop_pct"] - spec.loc[checked, "drop_pct"].max())
    for name in ("specificity_margin", "control_margin"):          # the margins' intervals (edit_margins)
        assert a.values[f"{name}_ci_low"] <= a.values[name] <= a.values[f"{name}_ci_high"]
    assert a.values["n_contexts"] == len(ctx) == s.values["n_contexts"]
    assert (p.values["target_vs_controls"], p.values["target_vs_controls_ci_low"], p.values["target_vs_controls_ci_high"]) == \
        (a.values["control_margin"], a.values["control_margin_ci_low"], a.values["control_margin_ci_high"])
    assert list(spec.loc[list(A.GENDER_CHECK_WORDS), "split"]) == ["train"] * 3
    # the causal scan scanned everything; its winner is the largest training drop
    scan = s.tables["women_selection_scan"]
    assert len(scan) == 2 * 8 and scan.drop_pct.is_monotonic_decreasing
    assert s.evidence["prototype"] == f"L{scan.layer[0]} P{scan.prototype[0]}"
    assert s.evidence["class"] in ("female", "coordination", "other")
    for meas in (a, p, s):                      # every registered quantity, of the right type
        claim = claims.get_claim(meas.claim)
        assert set(claim.quantities) <= set(meas.values), meas.claim
        assert claims.evaluate(claim, meas.values, "cpu")[0] in claims.VERDICTS
    unlabelled = {**a.values, "labelled_female": False, "context_effect_nats": 1.0}
    status, _, _, reason = claims.evaluate(claims.get_claim(a.claim), unlabelled, "cpu")
    assert status == claims.INCONCLUSIVE and "labelled-female" in reason
    for n, t in m.state_dict().items():
        assert torch.equal(t, before[n]), n


def test_women_settings_come_from_the_registered_protocol():
    from compendium import claims
    from protot import women as A

    cpu = A.women_settings(claims.protocol("protot/women-prototype-ablation", "cpu"), seed=3)
    assert cpu["reinit_seeds"] == (3,) and cpu["n_controls"] == 8 and "model" not in cpu and "word" not in cpu
    paper = A.women_settings(claims.protocol("protot/women-prototype-ablation", "paper"), seed=3)
    assert paper["reinit_seeds"] == (3, 4, 5, 6, 7) and paper["n_controls"] is None      # "all"
    smoke = A.women_settings(claims.protocol("protot/women-prototype-ablation", "smoke"), seed=0)
    assert smoke["select_windows"] < cpu["select_windows"] and smoke["context"] == cpu["context"]
    with pytest.raises(ValueError, match="unknown setting 'windows'"):
        A.women_settings({"windows": 3}, seed=0)
    with pytest.raises(ValueError, match="n_reinit must be a positive whole number"):
        A.women_settings({"n_reinit": 0}, seed=0)
