"""protot.concepts, protot.ablation and protot.usage on tiny random ProtoT models: gate tables,
find_prototype on a planted prototype, ablation (no-op exact, masking changes the output, weights
restored), the mask scan, prototype usage, windows and blocks of a stream, model loading, and the
prototype table's labels and dead floor. The concept check and its nulls: test_concepts_nulls.py; the
label-based selection and the women measurements: test_concepts_labels.py."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from protot import ablation, labels, usage
from protot import concepts as C
from protot.train import tokenizer as tk
from tests.protot.concepts_standins import T, _ids, _model, _plant_class


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
    tab = labels.prototype_table(a, tokenizer, min_count=2)
    assert len(tab) == L * R and list(tab[["layer", "prototype"]].iloc[R + 1]) == [1, 1]
    assert tab["purity"].between(0, 1).all() and tab["entropy"].between(0, 1.0 + 1e-9).all()
    assert tab.equals(labels.prototype_table(a, tokenizer, min_count=2))
    null = labels.shuffled_purity(a, n_perm=2, seed=1)
    assert null.shape == (2, L, R)
    assert np.array_equal(null, labels.shuffled_purity(a, n_perm=2, seed=1))
    tt = labels.top_tokens(a, tokenizer, 0, 3, top=4, min_count=2)
    assert len(tt) <= 4 and (tt["count"] >= 2).all() and tt["mean_gate"].is_monotonic_decreasing
    ctx = labels.top_contexts(a, tokenizer, 1, 2, gate="read", top=3)
    assert len(ctx) == 3 and ctx["gate"].is_monotonic_decreasing and ctx["context"].str.contains(r"\[\[").all()
    with pytest.raises(ValueError, match="gate"):
        C.token_table(a, "sideways")


@pytest.mark.parametrize("k", [2, 5])
def test_find_prototype_finds_a_planted_prototype(tokenizer, women, k):
    m = _model(tokenizer.vocab_size, conv_layers=0)
    _plant_class(m, k, [women])
    ids = _ids(8, women)
    stats = C.collect_gates(m, ids)
    w = stats.write[0, :, :, k]
    assert w[:, 5].min() > 0.99 and w[:, 6:20].mean() < 0.2           # the plant works as intended
    sel = labels.find_prototype(m, tokenizer, " women", ids)
    assert (sel.layer, sel.prototype) == (0, k), sel.table.head()
    assert sel.count == 16 and sel.selectivity > 5
    assert sel.table["selectivity"].is_monotonic_decreasing
    # a word that is not planted is not assigned to the planted prototype
    other = labels.find_prototype(m, tokenizer, tokenizer.decode([int(ids[0, 0])]), stats=stats, min_count=1)
    assert (other.layer, other.prototype) != (0, k)


def test_find_prototype_bad_inputs(tokenizer, women):
    m = _model(tokenizer.vocab_size)
    ids = _ids(2, women)
    with pytest.raises(ValueError, match="xylophonists"):
        labels.find_prototype(m, tokenizer, " xylophonists", ids)
    with pytest.raises(ValueError, match="occurs 0 times"):
        labels.find_prototype(m, tokenizer, " Germany", ids)
    with pytest.raises(ValueError, match="sample"):
        labels.find_prototype(m, tokenizer, " women")


def test_ablation_noop_is_exact_and_mask_changes_output(tokenizer, women):
    m = _model(tokenizer.vocab_size, seed=3)
    with torch.no_grad():   # a random tiny model's mixer output is scaled by alpha = 0.1: make it matter
        for mixer in m.mixers():
            mixer.alpha.fill_(1.0)
    before = {n: p.detach().clone() for n, p in m.state_dict().items()}
    contexts = _ids(6, women, seed=1)[:, :16]
    stream = _ids(4, women, seed=2).reshape(-1).numpy()
    edits = [ablation.Edit("none", name="no-op"), ablation.Edit("mask", 1, 3), ablation.Edit("reinit", 1, 3, seed=7),
             ablation.Edit("mask-read", 0, 1)]
    df = ablation.ablation(m, contexts, women, edits, ppl_stream=stream, ppl_context=16, ppl_blocks=8, keep_probs=True)
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
        ablation.ablation(m, contexts, women, [ablation.Edit("melt", 0, 0)])
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
    scan = ablation.mask_scan(model, ids, women, cand, batch_size=4)       # batches of 4, 4 and 2 rows
    p0 = ablation.target_probs(model, ids, women)
    for row in scan.itertuples():
        with ablation.edited(model, ablation.Edit("mask", row.layer, row.prototype)):
            p = ablation.target_probs(model, ids, women)
        assert row.p_mean == pytest.approx(float(p.mean()), rel=1e-12, abs=0), (row.layer, row.prototype)
        assert row.drop_pct == pytest.approx(ablation.drop_pct(p0, p), rel=1e-9, abs=1e-12)
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
    u = usage.prototype_usage(stats).set_index(["gate", "layer"])
    assert u.loc[("write", 0), "effective"] == pytest.approx(R) and u.loc[("write", 0), "rarely_used"] == 0
    assert u.loc[("write", 1), "effective"] == pytest.approx(1.0) and u.loc[("write", 1), "rarely_used"] == R - 1
    assert u.loc[("write", 1), "top_prototype"] == 2 and u.loc[("write", 1), "top_share"] == pytest.approx(1.0)
    assert u.loc[("write", 2), "effective"] == pytest.approx(2.0) and u.loc[("write", 2), "rarely_used"] == 2
    assert u.loc[("read", 0), "effective"] == pytest.approx(2.0)    # read is write with the layers reversed
    assert u.loc[("read", 2), "effective"] == pytest.approx(R)
    with pytest.raises(ValueError, match="rare"):
        usage.prototype_usage(stats, rare=1.5)


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


# -- the prototype table's labels and the floor below which a prototype is dead ---------------------------
def test_prototype_table_labels_and_dead_floor(tokenizer, women):
    m = _model(tokenizer.vocab_size, conv_layers=0)
    _plant_class(m, 4, [women])
    ids = _ids(8, women)
    stats = C.collect_gates(m, ids)
    tab = labels.prototype_table(stats, tokenizer, min_count=2, contexts=2).set_index(["layer", "prototype"])
    row = tab.loc[(0, 4)]
    assert row.write_tokens.split(" | ")[0] == " women" and row.label == row.write_tokens   # planted on W_w only
    read = labels.top_tokens(stats, tokenizer, 0, 4, gate="read", top=5, min_count=2)
    assert row.read_tokens == " | ".join(read.token)
    assert row.top_contexts.count("[[ women]]") == 2 and row.alive
    assert tab.alive.equals(pd.Series(usage.alive_mask(stats).reshape(-1), index=tab.index, name="alive"))
    shares = usage.gate_shares(stats)
    np.testing.assert_allclose(shares["write"].sum(1), 1.0, rtol=1e-12)
    with pytest.raises(ValueError, match="floor"):
        usage.alive_mask(stats, floor=0.0)
