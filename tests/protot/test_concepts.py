"""protot.concepts on tiny random ProtoT models: gate tables, labels, find_prototype on a planted
prototype, ablation (no-op exact, masking changes the output, weights restored), model loading."""
from __future__ import annotations

import numpy as np
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
    torch.manual_seed(seed)
    return build_model("protot", "tiny", vocab, **overrides).eval()


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


# -- the women ablation as claims measurements ---------------------------------------------------------
def _word_stream(tokenizer, n, seed):
    """Random tokens with " women", " men", " he", " she" sprinkled in (each ~1 in 12 positions)."""
    rng = np.random.default_rng(seed)
    s = rng.integers(1, 400, size=n)
    words = [C.token_id(tokenizer, w) for w in (" women", " men", " he", " she")]
    hits = rng.random(n) < 4 / 12
    s[hits] = rng.choice(words, size=int(hits.sum()))
    return s.astype(np.uint16)


def test_measure_women_ablation(tokenizer, women):
    from compendium import claims

    m = _model(tokenizer.vocab_size, seed=3)
    with torch.no_grad():   # make the mixers matter (alpha = 0.1 at init)
        for mixer in m.mixers():
            mixer.alpha.fill_(1.0)
    before = {n: p.detach().clone() for n, p in m.state_dict().items()}
    train, val = _word_stream(tokenizer, 3000, 1), _word_stream(tokenizer, 3000, 2)
    kw = dict(other_words=(" men", " he"), select_windows=12, select_context=16, context=16, max_contexts=40,
              other_contexts=8, n_controls=3, n_random=12, reinit_seeds=(0, 1), ppl_blocks=2, ppl_context=16,
              effect_context=16, short=4, n_boot=200, seed=0)
    a, p = C.measure_women_ablation(m, tokenizer, train, val, candidates=None, **kw)
    L, R = m.config.num_hidden_layers, m.config.num_prototypes
    scan = a.tables["women_selection_scan"]
    assert len(scan) == L * R and scan["drop_pct"].is_monotonic_decreasing    # every prototype scanned
    layer, k = int(scan.layer[0]), int(scan.prototype[0])
    assert a.evidence["selected"] == f"L{layer} P{k}"
    # the selection is the largest drop on the training contexts, recomputed directly
    sel_ctx = C.windows_at(train, women, 16, where="before", max_windows=12, seed=0)
    p0 = C.target_probs(m, sel_ctx, women)
    with C.edited(m, C.Edit("mask", layer, k)):
        assert C.drop_pct(p0, C.target_probs(m, sel_ctx, women)) == pytest.approx(scan.drop_pct[0], abs=1e-9)
    # the validation numbers, recomputed directly
    ctx = C.windows_at(val, women, 16, where="before", max_windows=40, seed=0)
    q0 = C.target_probs(m, ctx, women)
    with C.edited(m, C.Edit("mask", layer, k)):
        drop = C.drop_pct(q0, C.target_probs(m, ctx, women))
    v = a.values
    assert v["drop_pct"] == pytest.approx(drop, abs=1e-9) and v["ci_low_pct"] <= drop <= v["ci_high_pct"]
    edits = a.tables["women_ablation_edits"]
    ctrl = edits[edits.group == "control"]
    rand = edits[edits.group == "random"]
    assert len(ctrl) == 3 and (ctrl.layer == layer).all() and (ctrl.prototype != k).all()
    assert len(rand) == 12 and not ((rand.layer == layer) & (rand.prototype == k)).any()
    assert v["control_margin"] == pytest.approx(drop - ctrl.drop_pct.max())
    spec = a.tables["women_ablation_specificity"]
    assert list(spec.word) == [" men", " he"] and v["specificity_margin"] == pytest.approx(drop - spec.drop_pct.max())
    assert p.values["target_vs_random"] == pytest.approx(drop - np.quantile(rand.drop_pct, 0.95))
    assert p.values["ppl_change_pct_abs"] == pytest.approx(abs(p.values["ppl_change_pct"])) and p.values["ppl_change_pct"] != 0
    assert len(a.evidence["reinit_drop_pct"]) == 2
    for n, t in m.state_dict().items():       # every edit undone
        assert torch.equal(t, before[n]), n
    # deterministic, and the bounded scan keeps the most selective prototypes only
    a2, _ = C.measure_women_ablation(m, tokenizer, train, val, candidates=None, **kw)
    assert a2.values == a.values
    a3, _ = C.measure_women_ablation(m, tokenizer, train, val, candidates=4, **kw)
    assert a3.evidence["candidates_scanned"] == 4
    # the measurements carry every quantity the registered checks and preconditions name
    for meas in (a, p):
        claim = claims.get_claim(meas.claim)
        assert set(claim.quantities) <= set(meas.values)
        status, *_ = claims.evaluate(claim, meas.values, "cpu")
        assert status in claims.VERDICTS
    # this untrained model fails the check itself too, not only its power precondition: with the
    # precondition forced to pass, the full scan's best prototype (chosen on training text) still
    # does not lower p(women) on validation text by the registered margin
    powered = {**a.values, "context_effect_nats": 1.0}
    assert claims.evaluate(claims.get_claim(a.claim), powered, "cpu")[0] == claims.DOES_NOT_HOLD
    # a model that ignores context fails the power precondition: inconclusive, naming it
    no_ctx = {**a.values, "context_effect_nats": 0.0}
    status, _, pre, reason = claims.evaluate(claims.get_claim(a.claim), no_ctx, "cpu")
    assert status == claims.INCONCLUSIVE and "uses-context" in reason
    with pytest.raises(ValueError, match="training contexts"):
        C.measure_women_ablation(m, tokenizer, train[:40], val, **kw)


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
    assert claims.evaluate(claim, m.values, "cpu")[0] == claims.HOLDS
    # a null whose gates are not as sharp fails the precondition: inconclusive, naming it
    m2 = C.measure_concepts(_stats_with(planted, ids, 400), nulls, ref, trained_entropy=H,
                            null_entropy=[{"write": 1.3, "read": 1.0}] * 3, top=10, min_count=2)
    status, _, _, reason = claims.evaluate(claim, m2.values, "cpu")
    assert status == claims.INCONCLUSIVE and "null-entropy-matched" in reason
    with pytest.raises(ValueError, match="map to"):
        C.coherence(_stats_with(planted, ids, 400), C.ReferenceEmbeddings("none", np.array([0]), np.array([0]),
                                                                        np.ones((1, 2), np.float32)))


def test_matched_null_and_an_untrained_model_fails_the_check(tokenizer):
    """Untrained ProtoTs sharpened to the same gate entropy: one of them in the role of the trained
    model does not pass the check against the others (there is nothing learned to find)."""
    from compendium import claims

    trained = _model(tokenizer.vocab_size, seed=0)
    ids = _ids(12, C.token_id(tokenizer, " women"), seed=5)
    target = {k: 0.5 * v for k, v in C.mean_gate_entropy(trained, ids).items()}     # sharper than at init
    nulls = [C.matched_null(trained, s, ids, target, tol=0.01) for s in (11, 12, 13, 14)]
    for n in nulls:
        for kind in ("write", "read"):
            assert n.entropy[kind] == pytest.approx(target[kind], rel=0.01)
        assert n.write_temperature < 1.0 and n.model.config is not trained.config
    assert trained.config.write_temperature == 1.0                  # the trained model is untouched
    again = C.matched_null(trained, 11, ids, target, tol=0.01)
    assert again.write_temperature == nulls[0].write_temperature     # deterministic
    ref = _synthetic_reference()
    stats = [C.collect_gates(n.model, ids) for n in nulls]
    ents = [C.mean_gate_entropy(n.model, ids) for n in nulls]
    claim = claims.get_claim("protot/concept-prototypes")
    m = C.measure_concepts(stats[0], stats[1:], ref, trained_entropy=ents[0], null_entropy=ents[1:], min_count=2)
    assert m.values["null_seeds"] == 3 and m.values["null_entropy_gap"] <= 0.05
    status, *_ = claims.evaluate(claim, m.values, "cpu")
    assert status == claims.DOES_NOT_HOLD, m.values
