"""protot.context_use: token losses against a direct forward, the replaced prefix, the bootstrap
intervals, and the report on tiny random ProtoT / LLaMA models; two synthetic models pin the
meaning of the numbers (a model that predicts every token already seen in its context has a large
context effect and a positive prefix cost; a unigram model has exactly none)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from protot import context_use as cu
from protot.models import build_model
from protot.train import tokenizer as tk
from protot_testing import TOL

V = 64          # vocabulary of the synthetic models
TARGET = 7


class _Synthetic(torch.nn.Module):
    """``mode="unigram"``: the same logits at every position (no context use at all).
    ``mode="seen"``: logit +6 for every token type present at or before the position (a copy-like
    model: it predicts what it has already seen, however far back)."""

    def __init__(self, mode: str, vocab: int = V):
        super().__init__()
        self.mode, self.vocab = mode, vocab
        self.bias = torch.nn.Parameter(torch.linspace(-1.0, 1.0, vocab))

    def forward(self, ids, use_cache=False, logits_to_keep=0, **kw):
        B, T = ids.shape
        logits = self.bias.expand(B, T, self.vocab).clone()
        if self.mode == "seen":
            seen = F.one_hot(ids, self.vocab).cumsum(1).clamp(max=1).to(logits.dtype)
            logits = logits + 6.0 * seen
        if logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        return SimpleNamespace(logits=logits)


def _stream(n: int = 6000, period: int = 20, seed: int = 0) -> np.ndarray:
    """Random tokens (never TARGET) with TARGET every ``period`` tokens."""
    rng = np.random.default_rng(seed)
    s = rng.integers(8, V, size=n)
    s[period - 1::period] = TARGET
    return s.astype(np.uint16)


def test_bootstrap_ci():
    x = np.arange(200.0)
    lo, hi = cu.bootstrap_mean_ci(x, seed=1)
    assert lo < x.mean() < hi and (lo, hi) == cu.bootstrap_mean_ci(x, seed=1)
    assert cu.bootstrap_mean_ci(np.full(30, 0.25)) == (0.25, 0.25)
    # the interval shrinks like 1/sqrt(n)
    rng = np.random.default_rng(0)
    w_small = np.diff(cu.bootstrap_mean_ci(rng.normal(size=100)))[0]
    w_big = np.diff(cu.bootstrap_mean_ci(rng.normal(size=1600)))[0]
    assert 3.0 < w_small / w_big < 5.3
    with pytest.raises(ValueError, match="non-empty"):
        cu.bootstrap_mean_ci([])


def test_replace_prefix():
    b = torch.arange(12).view(3, 4)
    r = cu.replace_prefix(b, 2)
    assert r.tolist() == [[4, 5, 2, 3], [8, 9, 6, 7], [0, 1, 10, 11]]
    assert torch.equal(b, torch.arange(12).view(3, 4))          # the input is not modified
    with pytest.raises(ValueError, match="at least 2 blocks"):
        cu.replace_prefix(b[:1], 2)
    with pytest.raises(ValueError, match="split"):
        cu.replace_prefix(b, 4)


@pytest.mark.parametrize("arch", ["protot", "llama"])
def test_token_nll_and_report_on_tiny_models(arch):
    torch.manual_seed(0)
    model = build_model(arch, "tiny", V).eval()
    stream = _stream()
    ids = torch.from_numpy(stream[:4 * 32].astype(np.int64)).view(4, 32)
    nll = cu.token_nll(model, ids, batch_size=3)
    with torch.no_grad():
        logits = model(ids).logits.double()
    want = F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1), reduction="none").view(4, 31)
    tol = TOL[torch.float32]          # float32 model: batching changes the summation order
    np.testing.assert_allclose(nll, want.numpy(), rtol=tol, atol=0)
    lp = cu.target_logprobs(model, ids, TARGET, batch_size=3)
    np.testing.assert_allclose(lp, torch.log_softmax(logits[:, -1], -1)[:, TARGET].numpy(), rtol=tol, atol=0)

    tok = SimpleNamespace(encode=lambda w, add_special_tokens=False: [TARGET] if w == "<t>" else [1, 2],
                          decode=lambda ids: "?")
    r = cu.context_use(model, stream, name=arch, tokenizer=tok, target="<t>", blocks=6, context=32, split=16,
                       short=4, target_context=24, max_target_contexts=10, n_boot=300, seed=3)
    assert r.blocks == 6 and len(r.per_block) == 6 and len(r.by_position) == 31
    assert r.by_position.position.tolist() == list(range(1, 32))
    assert (r.by_position.ci_lo <= r.by_position.loss + 1e-12).all() and (r.by_position.loss <= r.by_position.ci_hi + 1e-12).all()
    assert r.replaced_ci[0] <= r.replaced_cost <= r.replaced_ci[1]
    assert r.by_bin[["first", "last"]].values.tolist() == [[1, 1], [2, 3], [4, 7], [8, 15], [16, 31]]
    np.testing.assert_allclose(r.by_bin.loss.iloc[2], r.by_position.loss.iloc[3:7].mean())
    assert r.target_contexts == 10 and len(r.per_target) == 10
    assert r.context_effect_ci[0] <= r.context_effect <= r.context_effect_ci[1]
    np.testing.assert_allclose(r.per_target.effect, r.per_target.logp_full - r.per_target.logp_short)
    assert r.context_effect == pytest.approx(r.logp_full - r.logp_short)
    v = r.values()
    assert v["context_effect_nats"] == r.context_effect and v["replaced_prefix_cost_nats"] == r.replaced_cost
    again = cu.context_use(model, stream, name=arch, tokenizer=tok, target="<t>", blocks=6, context=32, split=16,
                           short=4, target_context=24, max_target_contexts=10, n_boot=300, seed=3)
    assert again.values() == v                                   # seeded: the same report
    assert isinstance(cu.summary_table([r, again]), pd.DataFrame)
    with pytest.raises(ValueError, match="not a single token"):
        cu.context_use(model, stream, tokenizer=tok, target="<two>", blocks=4, context=32, split=16)


def _report(mode: str):
    tok = SimpleNamespace(encode=lambda w, add_special_tokens=False: [TARGET], decode=lambda ids: "<t>")
    return cu.context_use(_Synthetic(mode), _stream(), name=mode, tokenizer=tok, target="<t>", blocks=40, context=64,
                          split=32, short=8, target_context=32, max_target_contexts=100, n_boot=500)


def test_a_model_that_uses_context_shows_it():
    r = _report("seen")
    # TARGET occurs every 20 tokens: with 32 tokens of context the previous occurrence is in view,
    # within the last 8 it is not -> log p(TARGET) rises by about the planted +6 logit
    assert r.context_effect > 4.0 and r.context_effect_ci[0] > 4.0
    assert (r.per_target.effect > 0).all()
    # the true prefix holds the tokens the block repeats later more often than another block's does
    assert r.replaced_ci[0] > 0
    # the loss falls with position as the seen set grows
    bp = r.by_position
    assert bp.loss.iloc[-8:].mean() < bp.loss.iloc[:8].mean() - 1.0


def test_a_unigram_model_shows_none():
    r = _report("unigram")
    assert abs(r.context_effect) < 1e-12 and r.context_effect_ci == (pytest.approx(0, abs=1e-12), pytest.approx(0, abs=1e-12))
    assert abs(r.replaced_cost) < 1e-12
    bp = r.by_position                                           # no trend, only sampling noise
    assert abs(bp.loss.iloc[-8:].mean() - bp.loss.iloc[:8].mean()) < 0.3


def test_plot(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    fig = cu.plot_context_use([_report("seen"), _report("unigram")])
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) >= 2
    fig.savefig(tmp_path / "f.png")


def test_real_tokenizer_target_is_one_token():
    tok = tk.load_hf_tokenizer()
    from protot import concepts

    assert isinstance(concepts.token_id(tok, " women"), int)


def _fake_models(monkeypatch, tmp_path, names=("seen-m", "unigram-m")):
    """Committed-model stand-ins: the synthetic models behind protot.train.pretrained's interface."""
    from protot.train import packing, pretrained

    root = tmp_path / "models"
    for n in names:
        (root / n).mkdir(parents=True)
    shas = {n: f"{i:064x}" for i, n in enumerate(names)}
    tok = SimpleNamespace(encode=lambda w, add_special_tokens=False: [TARGET], decode=lambda ids: "<t>")
    man = {n: {"weights_sha256": shas[n], "steps": 10, "planned_steps": 20, "tokens_seen": 123456,
               "status": "in-progress" if n.startswith("seen") else "final"} for n in names}
    monkeypatch.setattr(pretrained, "models_dir", lambda: root)
    monkeypatch.setattr(pretrained, "available", lambda: sorted(names))
    monkeypatch.setattr(pretrained, "manifest", lambda n: man[n])
    monkeypatch.setattr(pretrained, "load", lambda n: pretrained.Pretrained(n, _Synthetic(n.split("-")[0]), tok, man[n]))
    monkeypatch.setattr(packing, "token_stream", lambda split: _stream(20000))
    kw = dict(context=64, split=32, short=8, target_context=32, max_target_contexts=60, n_boot=200)
    real = cu.context_use
    monkeypatch.setattr(cu, "context_use", lambda model, stream, **k: real(model, stream, **{**k, **kw, "target": "<t>"}))
    return root, man


def test_reports_of_committed_models(monkeypatch, tmp_path):
    import json

    root, man = _fake_models(monkeypatch, tmp_path)
    records = cu.write_reports(blocks=24)
    assert [r["model"] for r in records] == ["seen-m", "unigram-m"]
    seen = json.loads((root / "seen-m" / cu.REPORT_FILE).read_text())
    assert seen["weights_sha256"] == man["seen-m"]["weights_sha256"] and seen["context_effect_nats"] > 4.0
    uni = json.loads((root / "unigram-m" / cu.REPORT_FILE).read_text())
    assert abs(uni["replaced_prefix_cost_nats"]) < 1e-12
    md = (root / "CONTEXT_USE.md").read_text()
    assert f"{seen['context_effect_nats']:+.3f}" in md and "in-progress (step 10 of 20)" in md
    assert (root / "context_use.png").stat().st_size > 1000


def test_reports_refuse_unknown_names_and_stale_reports(monkeypatch, tmp_path):
    import json

    root, man = _fake_models(monkeypatch, tmp_path)
    with pytest.raises(ValueError, match="no committed model named"):
        cu.write_reports(["nope"])
    cu.write_reports(["seen-m"], blocks=24)
    man["seen-m"]["weights_sha256"] = "f" * 64            # the model was replaced after its report
    before = (root / "CONTEXT_USE.md").read_text()
    with pytest.raises(ValueError, match="other weights"):
        cu.write_reports(["unigram-m"], blocks=24)
    assert (root / "CONTEXT_USE.md").read_text() == before   # the summary is not rewritten from a stale report
    assert json.loads((root / "unigram-m" / cu.REPORT_FILE).read_text())["model"] == "unigram-m"


def test_the_replaced_prefix_cost_scores_exactly_the_tokens_from_split_on():
    """By hand: the loss of tokens at positions split .. T-1, each predicted from the positions
    before it, for the true and for the replaced prefix (the tokens before split are not scored)."""
    model = _Synthetic("seen")
    ids = torch.from_numpy(_stream()[:5 * 24].astype(np.int64)).view(5, 24)
    split = 10
    df, cost, _, _ = cu.replaced_prefix_cost(model, ids, split, n_boot=50)

    def loss_from_split(x):
        with torch.no_grad():
            logp = torch.log_softmax(model(x).logits.double(), -1)
        return [float(np.mean([-logp[i, t - 1, x[i, t]].item() for t in range(split, x.shape[1])])) for i in range(len(x))]

    np.testing.assert_allclose(df.loss_true, loss_from_split(ids), rtol=1e-12, atol=0)
    np.testing.assert_allclose(df.loss_replaced, loss_from_split(cu.replace_prefix(ids, split)), rtol=1e-12, atol=0)
    assert cost == pytest.approx(float(np.mean(df.loss_replaced - df.loss_true)), rel=1e-12)
