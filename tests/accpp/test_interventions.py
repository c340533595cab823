"""Signal interventions (accpp.interventions, accpp.head_patch, accpp.intervention_summary) on tiny
random float64 models.

The identities hold exactly in real arithmetic; under ``float64_exact`` they hold to ~1e-13,
and we assert 1e-9 (as in test_exactness.py).
"""
from __future__ import annotations

import pytest
import torch

from accpp.arch import UnsupportedArchitecture, get_path
from accpp.decompose import KIND_HEAD, KIND_MLP, visible
from accpp.intervention_summary import paired_summary, prompt_ratios, score_matching_error
from accpp.interventions import Intervener, NotASignalEdge, SignalSpec, compare_subspaces, random_subspace
from accpp.signals import Firing
from accpp.testing import float64_exact, random_prompt, tiny_model
from accpp.trace import TraceConfig, Tracer

TOL = 1e-9
CORRECT, WRONG = 7, 11


def _tracer(family: str, seed: int = 0, variant: str = "authors") -> Tracer:
    return Tracer(tiny_model(family, seed=seed), config=TraceConfig(expand_layer0=True, variant=variant))


@pytest.fixture(scope="module")
def llama(exact):
    tracer = _tracer("llama")
    ids = random_prompt(11)
    return tracer, ids, Intervener(tracer, ids, CORRECT, WRONG)


def _firing(iv: Intervener, L: int, a: int, d: int) -> Firing:
    return Firing(L, a, d, int(iv.clean.attn[L, a, d, : d + 1].argmax()))


def _component(iv: Intervener, L: int, t: int, label) -> torch.Tensor:
    vecs, labels = iv.dec.components(L, t)
    lab = torch.tensor(label)
    hit = [i for i in range(labels.shape[0]) if labels[i, 0] == lab[0] and labels[i, 1] == lab[1]
           and labels[i, 2] == lab[2] and (lab[0] != KIND_HEAD or labels[i, 3] == lab[3])]
    assert len(hit) == 1
    return vecs[hit[0]]


def _manual_run(iv: Intervener, L: int, proj: str, sl: slice, row: int, dvec: torch.Tensor):
    """Forward pass with ``dvec`` subtracted from out[0, row, sl] of layer L's q_proj/k_proj."""
    attn = getattr(get_path(iv.model, iv.arch.layers_path)[L], iv.arch.attn_name)

    def hook(mod, args, out):
        out = out.clone()
        out[0, row, sl] -= dvec.to(out.dtype)
        return out

    h = getattr(attn, proj).register_forward_hook(hook)
    try:
        with torch.no_grad():
            out = iv.model(iv.ids[None])
    finally:
        h.remove()
    logits = out.logits[0, -1]
    return float(logits[CORRECT] - logits[WRONG])


@pytest.mark.parametrize("label", [(KIND_HEAD, 1, 0, 3), (KIND_MLP, 0, -1, -1)])
def test_full_query_subspace_equals_removing_the_component(llama, label):
    """All dh singular directions of one component at head a's query = that component removed from
    head a's normalised query input (computed by hand: (c / sigma_d) diag(g) W_Q[a], no SVD)."""
    tracer, ids, iv = llama
    L, a, d = 2, 1, iv.T - 1
    f = _firing(iv, L, a, d)
    dh = iv.arch.d_head
    spec = SignalSpec(f.layer, f.head, f.dest, f.src, "d", label[0], label[1], label[2], label[3], d, (0,))
    res = iv.remove(spec, "custom", sing=range(dh))
    lw = iv.arch.layers[L]
    c = _component(iv, L, d, label)
    dq = (c / iv.dec.sigma[L, d]) @ lw.wq_eff(a)  # (dh,) pre-rotation query change of head a only
    manual = _manual_run(iv, L, "q_proj", slice(a * dh, (a + 1) * dh), d, dq)
    assert abs(res.metric_after - manual) < TOL * max(1.0, abs(manual))
    assert abs(res.metric_after - res.metric_before) > 1e-6  # the intervention did something
    # and head a's pattern is the one of the hand-made model
    attn = getattr(get_path(iv.model, iv.arch.layers_path)[L], iv.arch.attn_name)
    seen = {}
    h1 = attn.register_forward_hook(lambda m, i, o: seen.__setitem__("w", o[1][0, a].clone()))
    h2 = attn.q_proj.register_forward_hook(lambda m, i, o: o - torch.nn.functional.pad(
        dq, (a * dh, o.shape[-1] - (a + 1) * dh))[None, None] * (torch.arange(o.shape[1]) == d)[None, :, None])
    try:
        with torch.no_grad():
            iv.model(iv.ids[None])
    finally:
        h1.remove()
        h2.remove()
    out, patch = iv.apply(spec, iv.head_delta(spec, range(dh)))
    assert torch.allclose(patch.pattern, seen["w"], atol=TOL, rtol=0)


def test_full_key_subspace_equals_removing_the_component(llama):
    """Key side: head a's pattern equals the one with the component removed from its key input at j."""
    tracer, ids, iv = llama
    L, a, d, j = 2, 3, iv.T - 1, 4
    f = _firing(iv, L, a, d)
    label = (KIND_HEAD, 1, 2, 1)
    dh, lw = iv.arch.d_head, iv.arch.layers[L]
    kv = lw.kv_of(a)
    spec = SignalSpec(f.layer, f.head, f.dest, f.src, "s", *label, j, (0,))
    _, patch = iv.apply(spec, iv.head_delta(spec, range(dh)))
    dk = (_component(iv, L, j, label) / iv.dec.sigma[L, j]) @ lw.wk_eff(kv)
    attn = getattr(get_path(iv.model, iv.arch.layers_path)[L], iv.arch.attn_name)
    seen = {}
    h1 = attn.register_forward_hook(lambda m, i, o: seen.__setitem__("w", o[1][0, a].clone()))
    try:
        _manual_run(iv, L, "k_proj", slice(kv * dh, (kv + 1) * dh), j, dk)  # shared kv head: compare head a only
    finally:
        h1.remove()
    assert torch.allclose(patch.pattern, seen["w"], atol=TOL, rtol=0)
    assert (patch.pattern - iv.clean.attn[L, a]).abs().max() > 1e-6


def test_query_intervention_changes_only_that_head(exact):
    tracer = _tracer("llama")
    iv = Intervener(tracer, random_prompt(11), CORRECT, WRONG, replay=False)  # recompute every layer
    L, a, d = 1, 2, 7
    f = _firing(iv, L, a, d)
    spec = SignalSpec(f.layer, f.head, f.dest, f.src, "d", KIND_HEAD, 0, 1, 3, d, (0, 1))
    out, _ = iv.apply(spec, iv.head_delta(spec, range(iv.arch.d_head)))
    diff = (out.attn - iv.clean.attn).abs()
    assert float(diff[:L].max()) < 1e-12  # layers below
    others = [h for h in range(iv.arch.n_heads) if h != a]
    assert float(diff[L, others].max()) < 1e-12  # the other heads of the layer (incl. its kv group)
    rows = [t for t in range(iv.T) if t != d]
    assert float(diff[L, a, rows].max()) < 1e-12  # head a: only the destination's row
    assert float(diff[L, a, d].max()) > 1e-6
    assert float(diff[L + 1:].max()) > 1e-9  # later layers read the changed output


def test_replay_gives_the_same_result(llama):
    tracer, ids, iv = llama
    full = Intervener(tracer, ids, CORRECT, WRONG, replay=False)
    f = _firing(iv, 2, 0, 8)
    spec = SignalSpec(f.layer, f.head, f.dest, f.src, "s", KIND_MLP, 1, -1, -1, 5, (2, 3))
    r1, r2 = iv.remove(spec), full.remove(spec)
    assert r1.metric_after == pytest.approx(r2.metric_after, abs=1e-12)
    assert r1.final_resid_cos == pytest.approx(r2.final_resid_cos, abs=1e-12)


@pytest.mark.parametrize("variant", ["authors", "per-position"])
@pytest.mark.parametrize("family", ["llama", "gemma3_text", "gemma2"])
def test_signal_removal_reproduces_the_traced_drop(exact, family, variant):
    """A_ds after removing a signal edge in the model = A_ds - edge.drop from the tracer (the
    authors' key-side signals act at every visible key position)."""
    tracer = _tracer(family, seed=1, variant=variant)
    iv = Intervener(tracer, random_prompt(11, seed=2), CORRECT, WRONG)
    n = 0
    for L, a, d in [(2, 1, 10), (1, 3, 9), (2, 0, 6)]:
        res = iv.solver.solve(_firing(iv, L, a, d))
        for e in res.edges[:5]:
            spec = SignalSpec.from_edge(res.firing, e, variant)
            assert spec.span == (variant == "authors" and e.side == "s")
            r = iv.remove(spec)
            assert r.attn_before == pytest.approx(res.A, abs=1e-12)
            assert abs(r.attn_after - (res.A - e.drop)) < TOL, (family, spec.describe())
            assert 0 < r.head_input_cos <= 1 + 1e-12 and 0 < r.final_resid_cos <= 1 + 1e-12
            n += 1
    assert n >= 6


@pytest.mark.parametrize("variant", ["authors", "per-position"])
def test_every_circuit_edge_round_trips(exact, variant):
    """Specs built from a traced circuit's graph (including nodes first created as seeds)."""
    tracer = _tracer("llama", seed=3, variant=variant)
    ids = random_prompt(12, seed=5)
    circuit = tracer.trace(ids, CORRECT, WRONG)
    iv = Intervener(tracer, ids, CORRECT, WRONG)
    g, n = circuit.graph, 0
    for u, v, k, data in g.edges(keys=True, data=True):
        if data["side"] == "seed":
            with pytest.raises(NotASignalEdge, match="only signal edges"):
                SignalSpec.from_graph(g, u, v, k)
            continue
        spec = SignalSpec.from_graph(g, u, v, k, circuit.meta["variant"])
        r = iv.remove(spec)
        assert abs(r.attn_after - (r.attn_before - data["drop"])) < TOL, spec.describe()
        n += 1
    assert n > 0


def test_random_subspace_is_seeded_and_disjoint():
    sing = (3, 7, 8)
    draws = [random_subspace(sing, 16, seed) for seed in range(20)]
    assert random_subspace(sing, 16, 5) == draws[5]
    assert len(set(draws)) > 10
    for r in draws:
        assert len(r) == len(sing) and len(set(r)) == len(r)
        assert not set(r) & set(sing) and all(0 <= k < 16 for k in r)
    assert set().union(*draws) == set(range(16)) - set(sing)
    with pytest.raises(ValueError, match="no disjoint random subspace"):
        random_subspace(range(9), 16, 0)
    with pytest.raises(ValueError, match="outside"):
        random_subspace((16,), 16, 0)


def test_random_removal_uses_the_drawn_directions(llama):
    tracer, ids, iv = llama
    f = _firing(iv, 2, 1, 9)
    spec = SignalSpec(f.layer, f.head, f.dest, f.src, "d", KIND_MLP, 1, -1, -1, 9, (0, 4))
    r = iv.remove(spec, "random", seed=4)
    assert r.sing_removed == random_subspace(spec.sing, iv.arch.d_head, 4)
    assert iv.remove(spec, "random", seed=4).metric_after == r.metric_after


def test_bad_input_raises_clear_errors(llama):
    tracer, ids, iv = llama
    f = _firing(iv, 2, 1, 9)
    good = SignalSpec(f.layer, f.head, f.dest, f.src, "d", KIND_MLP, 1, -1, -1, 9, (0,))
    iv.remove(good)
    bad = dict(good.__dict__)
    with pytest.raises(ValueError, match="unknown side 'q'"):
        iv.remove(SignalSpec(**(bad | dict(side="q"))))
    with pytest.raises(NotASignalEdge, match="destination token"):
        iv.remove(SignalSpec(**(bad | dict(token=4))))  # query side signal away from d
    with pytest.raises(NotASignalEdge, match="no component mlp"):
        iv.remove(SignalSpec(**(bad | dict(comp_layer=2))))  # an MLP at or above the firing's layer
    with pytest.raises(NotASignalEdge, match="no component head"):
        iv.remove(SignalSpec(**(bad | dict(kind=KIND_HEAD, comp_layer=0, comp_head=0, comp_src=10))))  # src > token
    with pytest.raises(ValueError, match="singular indices"):
        iv.remove(good.with_sing((iv.arch.d_head,)))
    with pytest.raises(ValueError, match="singular indices"):
        iv.remove(good.with_sing(()))
    with pytest.raises(ValueError, match="not a visible pair"):
        iv.remove(SignalSpec(**(bad | dict(src=10))))
    with pytest.raises(ValueError, match="unknown subspace"):
        iv.remove(good, "orthogonal")
    with pytest.raises(ValueError, match="needs a seed"):
        iv.remove(good, "random")
    with pytest.raises(NotASignalEdge, match="SignalEdge"):
        SignalSpec.from_edge(f, {"side": "d"})


def test_unsupported_architecture_is_refused():
    with float64_exact():
        tracer = _tracer("gpt2")
        with pytest.raises(UnsupportedArchitecture, match="llama-like.*'gpt2'"):
            Intervener(tracer, random_prompt(8), CORRECT, WRONG)


def test_norm_matched_random_removes_the_signals_norm(llama):
    """'random_matched': the same directions as 'random', the removal rescaled to the signal's |dx~|;
    the model sees the rescaled delta: the firing's attention weight after the removal is that of a
    run with the scaled delta, and not that of the unscaled one (on this firing the task metric does
    not move under any of these removals, so the attention weight is what tells them apart)."""
    tracer, ids, iv = llama
    f = _firing(iv, 2, 1, 9)
    spec = SignalSpec(f.layer, f.head, f.dest, f.src, "d", KIND_MLP, 1, -1, -1, 9, (0, 4))
    sig = iv.remove(spec)
    raw = iv.remove(spec, "random", seed=4)
    matched = iv.remove(spec, "random_matched", seed=4)
    assert matched.sing_removed == raw.sing_removed
    assert matched.removed_norm_ratio == pytest.approx(sig.removed_norm_ratio, rel=1e-9)
    scale = matched.extra["norm_scale"]
    assert scale == pytest.approx(sig.removed_norm_ratio / raw.removed_norm_ratio, rel=1e-9)
    out, _ = iv.apply(spec, iv.head_delta(spec, raw.sing_removed) * scale)
    unscaled, _ = iv.apply(spec, iv.head_delta(spec, raw.sing_removed))
    L, a, d, s = spec.layer, spec.head, spec.dest, spec.src
    assert matched.attn_after == pytest.approx(float(out.attn[L, a, d, s]), abs=1e-12)
    assert abs(float(unscaled.attn[L, a, d, s]) - float(out.attn[L, a, d, s])) > 1e-3  # the scale is visible here
    assert abs(matched.attn_after - matched.attn_before) > 1e-3                         # and the removal acts
    assert matched.metric_after == pytest.approx(out.metric, abs=1e-12)
    assert raw.extra["norm_scale"] == 1.0 and sig.extra["norm_scale"] == 1.0
    with pytest.raises(ValueError, match="needs a seed"):
        iv.remove(spec, "random_matched")


def _score_change_by_hand(iv: Intervener, spec: SignalSpec, K) -> float:
    """-scale * sum_{k in K} S_k alpha_k beta_{j,k} with the component's coefficients on one side (the
    tracer's factorisation of the score; no head-space vectors, no forward pass)."""
    L, a, d = spec.layer, spec.head, spec.dest
    j = spec.token if spec.side == "s" and not spec.span else spec.src
    coef = iv.coefficients(spec)
    if spec.side == "d":
        other = iv.solver.token_coeffs(L, a, j, "k")[0].sum(0)
    else:
        other = iv.solver.token_coeffs(L, a, d, "q")[0].sum(0)
        coef = coef[iv.rows(spec).index(j)] if spec.span else coef
    idx = torch.tensor(sorted(K))
    sv = iv.solver.svd.S[L, a]
    return -iv.arch.layers[L].scale * float((sv[idx] * coef[idx] * other[idx]).sum())


@pytest.mark.parametrize("variant", ["authors", "per-position"])
@pytest.mark.parametrize("family", ["llama", "gemma3_text", "gemma2"])
def test_score_matched_random_changes_the_score_as_the_signal(exact, family, variant):
    """'random_score': the random directions of 'random', rescaled so that head a's raw score at the
    firing (or, for a key-side signal at another key position, at that position) changes in the
    model exactly as under the signal's removal; both changes equal the tracer's factorisation
    -scale * sum_K S_k alpha_k beta_k, and the unscaled draw's change differs (so the match is real)."""
    tracer = _tracer(family, seed=1, variant=variant)
    iv = Intervener(tracer, random_prompt(11, seed=2), CORRECT, WRONG)
    n = differs = 0
    sides = set()
    specs = []
    for L, a, d in [(2, 1, 10), (1, 3, 9), (2, 0, 6)]:
        res = iv.solver.solve(_firing(iv, L, a, d))
        specs += [SignalSpec.from_edge(res.firing, e, variant) for e in res.edges[:5]]
        # a key-side signal at one key position other than the source (an MLP's part there)
        j = next(t for t in visible(iv.T, d, iv.arch.layers[L].sliding_window).tolist() if t != res.firing.src)
        specs.append(SignalSpec(L, a, d, res.firing.src, "s", KIND_MLP, 0, -1, -1, j, (1, 3)))
    for i, spec in enumerate(specs):
        if len(spec.sing) > iv.arch.d_head // 2:
            continue
        sig = iv.remove(spec)
        raw = iv.remove(spec, "random", seed=20 + i)
        m = iv.remove(spec, "random_score", seed=20 + i)
        want = _score_change_by_hand(iv, spec, spec.sing)
        assert sig.score_change == pytest.approx(want, rel=1e-9, abs=1e-12), spec.describe()
        assert raw.score_change == pytest.approx(_score_change_by_hand(iv, spec, raw.sing_removed), rel=1e-9,
                                                 abs=1e-12)
        assert m.sing_removed == raw.sing_removed
        assert m.score_change == pytest.approx(want, rel=1e-9, abs=1e-12), spec.describe()
        assert m.extra["predicted_score_change"] == pytest.approx(m.score_change, rel=1e-9, abs=1e-12)
        assert m.extra["score_scale"] == pytest.approx(want / raw.score_change, rel=1e-9)
        differs += abs(raw.score_change - want) > 1e-6 * max(1.0, abs(want))
        sides.add((spec.side, spec.span, spec.token == spec.src))
        n += 1
    assert n >= 6 and differs >= n - 1
    assert {("d", False, False), ("s", False, False), ("s", variant == "authors", True)} <= sides, sides


def test_score_matched_scale_reaches_the_model(llama, monkeypatch):
    """The model runs the rescaled removal (attention weight and metric of a run with the scaled
    delta, not of the unscaled one); a random draw that leaves the score unchanged cannot be matched."""
    tracer, ids, iv = llama
    f = _firing(iv, 2, 1, 9)
    spec = SignalSpec(f.layer, f.head, f.dest, f.src, "d", KIND_MLP, 1, -1, -1, 9, (0, 4))
    sig, raw = iv.remove(spec), iv.remove(spec, "random", seed=4)
    m = iv.remove(spec, "random_score", seed=4)
    scale = m.extra["score_scale"]
    out, patch = iv.apply(spec, iv.head_delta(spec, raw.sing_removed) * scale)
    L, a, d, s = spec.layer, spec.head, spec.dest, spec.src
    assert m.attn_after == pytest.approx(float(out.attn[L, a, d, s]), abs=1e-12)
    assert m.metric_after == pytest.approx(out.metric, abs=1e-12)
    assert float(patch.scores[d, s] - patch.clean_scores[d, s]) == pytest.approx(sig.score_change, rel=1e-9)
    assert abs(raw.attn_after - m.attn_after) > 1e-4 and abs(scale - 1) > 1e-3
    assert sig.extra["score_scale"] == 1.0 and raw.extra["score_scale"] == 1.0
    with pytest.raises(ValueError, match="needs a seed"):
        iv.remove(spec, "random_score")
    monkeypatch.setattr(iv, "score_change", lambda spec, delta: 0.0)
    with pytest.raises(ValueError, match="cannot match the signal's change of the score"):
        iv.remove(spec, "random_score", seed=4)


def test_score_matching_error_reads_the_rows():
    import pandas as pd

    rows = [dict(edge="e0", subspace="signal", score_change=-2.0), dict(edge="e0", subspace="random_score",
                                                                         score_change=-2.0),
            dict(edge="e1", subspace="signal", score_change=-1.0), dict(edge="e1", subspace="random_score",
                                                                         score_change=-1.1)]
    assert score_matching_error(pd.DataFrame(rows)) == pytest.approx(0.1 / 2.0)
    assert score_matching_error(pd.DataFrame(rows[:2])) == 0.0
    with pytest.raises(ValueError, match="score_change"):
        score_matching_error(pd.DataFrame(rows).drop(columns=["score_change"]))


def test_compare_subspaces_controls(llama):
    tracer, ids, iv = llama
    f = _firing(iv, 2, 1, 9)
    spec = SignalSpec(f.layer, f.head, f.dest, f.src, "d", KIND_MLP, 1, -1, -1, 9, (0,))
    res = compare_subspaces(iv, spec, 3, seed=10, controls=("random", "random_matched", "random_score"))
    assert [r.subspace for r in res] == ["signal"] + ["random"] * 3 + ["random_matched"] * 3 + ["random_score"] * 3
    assert [r.sing_removed for r in res[1:4]] == [r.sing_removed for r in res[4:7]] == [r.sing_removed
                                                                                        for r in res[7:]]
    with pytest.raises(ValueError, match="unknown control"):
        compare_subspaces(iv, spec, 1, controls=("shuffled",))


def _frame(sig_abs, ctl_abs, draws=4, prompts=None, control="random_score"):
    """One signal row per edge and ``draws`` control rows with the given |dLD| (metric before 2)."""
    import pandas as pd

    rows = []
    for e, (s, c) in enumerate(zip(sig_abs, ctl_abs)):
        p = e if prompts is None else prompts[e]
        base = dict(edge=f"e{e}", prompt=p, metric_before=2.0, head_input_cos=0.9, final_resid_cos=0.999,
                    removed_norm_ratio=0.3)
        rows.append(base | dict(subspace="signal", metric_change=-s))
        rows += [base | dict(subspace=control, metric_change=-c * (1 + 0.1 * r)) for r in range(draws)]
    return pd.DataFrame(rows)


def test_paired_summary_by_hand():
    import numpy as np

    from compendium.stats import geometric_mean_ci

    df = _frame([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [0.1] * 6)
    out = paired_summary(df, seed=0, n_boot=500)
    ctl = np.median([0.1 * (1 + 0.1 * r) for r in range(4)])
    assert out["abs_dld_ratio"] == pytest.approx(3.5 / ctl)
    # one edge per prompt: the prompt's ratio is its signal |dLD| over the median of its draws
    by_prompt = np.arange(1.0, 7.0) / ctl
    assert out["prompt_ratios"] == pytest.approx(by_prompt.tolist())
    assert out["gm_ratio"] == pytest.approx(float(np.exp(np.log(by_prompt).mean())))
    assert (out["gm_ratio_ci_low"], out["gm_ratio_ci_high"]) == geometric_mean_ci(by_prompt, n_boot=500, seed=0)
    assert out["median_rel_dld_signal"] == pytest.approx(-3.5 / 2)
    assert out["frac_edges_signal_above"] == 1.0
    assert out["wilcoxon_p"] == pytest.approx(1 / 64)  # all 6 differences positive: exact p = 2^-6
    assert out["abs_dld_ratio_ci_low"] <= out["abs_dld_ratio"] <= out["abs_dld_ratio_ci_high"]
    assert out["abs_dld_ratio_ci_low"] > 1
    assert out["n_edges"] == 6 and out["n_draws"] == 4 and out["n_prompts"] == 6
    assert paired_summary(df, seed=0, n_boot=500) == out  # seeded


def test_paired_summary_null_is_not_significant():
    import numpy as np

    rng = np.random.default_rng(1)
    x = rng.exponential(size=30)
    df = _frame(x, x[rng.permutation(30)] / 1.15, draws=3)  # control mean over draws = the value
    out = paired_summary(df, seed=0, n_boot=500)
    assert out["wilcoxon_p"] > 0.05
    assert out["abs_dld_ratio_ci_low"] < 1 < out["abs_dld_ratio_ci_high"]


def test_paired_summary_bad_input():
    df = _frame([1.0], [0.1])
    with pytest.raises(ValueError, match="missing columns"):
        paired_summary(df.drop(columns=["head_input_cos"]))
    with pytest.raises(ValueError, match="'random'"):
        paired_summary(df, control="random")


def test_prompt_ratios_pool_a_prompts_edges_and_draws():
    """Prompt 0 has two edges (|dLD| 1 and 3) and their four draws each; prompt 1 one edge."""
    import numpy as np

    df = _frame([1.0, 3.0, 2.0], [0.1, 0.3, 0.5], draws=2, prompts=[0, 0, 1])
    t = prompt_ratios(df)
    assert t.index.tolist() == [0, 1] and t["n_edges"].tolist() == [2, 1] and t["n_control"].tolist() == [4, 2]
    ctl0 = np.median([0.1, 0.11, 0.3, 0.33])
    assert t.loc[0, "ratio"] == pytest.approx(2.0 / ctl0) and t.loc[1, "ratio"] == pytest.approx(2.0 / 0.525)
    with pytest.raises(ValueError, match=r"prompts \[1\] lack signal"):
        prompt_ratios(df[~((df["prompt"] == 1) & (df["subspace"] == "signal"))])
    with pytest.raises(ValueError, match="leaves the metric unchanged"):
        prompt_ratios(_frame([1.0], [0.0]))
    with pytest.raises(ValueError, match="need rows with subspace 'signal' and 'random'"):
        prompt_ratios(df, control="random")
