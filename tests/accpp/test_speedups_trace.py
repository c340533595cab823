"""Same results from the faster tracer pieces (issue 35) as from the code they replaced (frozen in
tests/accpp/speed_reference.py), on the same inputs: tiny random float64 models of every family, and
one real prompt of the offline SmolLM2 model (marked ``models``).

- rotation matrices built only for the layers used (``Decomposition.rot``): bit-for-bit the eager tables;
- the ACC baseline's contributions as matrix-vector products: the same labels and singular-direction
  sets, values to relative 1e-12 (the same products summed in another order; seen ~4e-15), and the same
  ACC graphs, node for node and edge for edge;
- signal removals with each edge's coefficients cached and one pseudo-inverse per head: every number of
  every removal (signal, random, norm- and score-matched controls) to relative 1e-9 (the pseudo-inverse
  and gelsd are two SVD least-squares routes to the same minimum-norm dx; seen ~1e-14 on the tiny
  models, then one forward pass each);
- ``datasets.evaluate`` on the last position only, in batches: float64 tiny models to 1e-10 (the same
  arithmetic on fewer rows); the float32 SmolLM2 to 1e-4 in logit difference (BLAS picks other kernels
  for other matrix shapes: float32 rounding, ~1e-6 seen), with the same accuracy.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import speed_reference as ref
import torch

from accpp import acc, datasets
from accpp.decompose import Decomposition, collect, rotation_matrices
from accpp.graph import graph_diff
from accpp.interventions import Intervener, SignalSpec, top_seed_edges
from accpp.signals import Firing, FiringSolver
from accpp.testing import FAMILIES, float64_exact, random_prompt, tiny_model
from accpp.trace import TraceConfig, Tracer

REL = 1e-12


@pytest.fixture(scope="module", params=FAMILIES)
def family_tracer(request, exact):
    return request.param, Tracer(tiny_model(request.param), config=TraceConfig(expand_layer0=True))


# ---------------------------------------------------------------- rotation matrices, lazily
def test_rotations_built_only_when_used_and_equal(family_tracer):
    fam, tracer = family_tracer
    dec = tracer.decompose(random_prompt(11))
    assert dec.rot.built == [] and len(dec.rot) == tracer.arch.n_layers
    for L, r in enumerate(dec.acts.rotary):
        got = dec.rot[L]
        if r is None:
            assert got is None
            continue
        assert torch.equal(got, rotation_matrices(*r, tracer.arch.d_head))
        assert dec.rot[L] is got  # built once
    assert dec.rot.built == [L for L, r in enumerate(dec.acts.rotary) if r is not None]
    assert [x is None for x in dec.rot] == [r is None for r in dec.acts.rotary]
    assert dec.rot[-1] is dec.rot[len(dec.rot) - 1]
    with pytest.raises(IndexError):
        dec.rot[len(dec.rot)]


def test_a_trace_builds_rotations_of_its_layers_only():
    """The ACC baseline (per-token rotation matrices) on a 3-layer Llama whose circuit reaches layers 1-2:
    layer 0's tables, never read, are never built."""
    with float64_exact():
        tracer = Tracer(tiny_model("llama"))
        dec = tracer.decompose(random_prompt(11))
        solver = FiringSolver(dec, tracer.svd)
        acc._firing_contributors(solver, tracer.arch, acc.ACCConfig(), 2, 0, 10, 3)
        assert dec.rot.built == [2]


# ---------------------------------------------------------------- the ACC baseline
def _firings(arch, T: int):
    for L in range(1, arch.n_layers):
        w = arch.layers[L].sliding_window
        for a in range(arch.n_heads):
            for d in (3, T - 1):
                for s in sorted({0, 1, d - 2, d}):
                    if w is None or s > d - w:
                        yield L, a, d, s


@pytest.mark.parametrize("config", ["authors", "legacy"])
def test_acc_contributions_same_as_before(family_tracer, config):
    fam, tracer = family_tracer
    cfg = acc.ACCConfig() if config == "authors" else acc.ACCConfig.legacy()
    dec = tracer.decompose(random_prompt(11))
    n_nonempty = 0
    for L, a, d, s in _firings(tracer.arch, dec.T):
        old = ref.acc_firing_contributors(FiringSolver(dec, tracer.svd), tracer.arch, cfg, L, a, d, s)
        new = acc._firing_contributors(FiringSolver(dec, tracer.svd), tracer.arch, cfg, L, a, d, s)
        assert len(new) == len(old), (L, a, d, s)
        n_nonempty += bool(old)
        for (side_o, tok_o, c_o, lab_o, K_o), (side_n, tok_n, c_n, lab_n, K_n) in zip(old, new):
            assert (side_n, tok_n, K_n) == (side_o, tok_o, K_o)
            assert torch.equal(lab_n, lab_o)
            assert float((c_n - c_o).abs().max()) <= REL * float(c_o.abs().max()), (fam, L, a, d, s, side_o)
    assert n_nonempty >= 4  # the comparison ran on firings with contributors


@pytest.mark.parametrize("config", ["authors", "legacy"])
def test_acc_graphs_same_as_before(family_tracer, config, monkeypatch):
    """Twelve ACC traces per family (three prompts, four answer pairs; on a tiny model most pairs give
    a circuit of a few firings or none), each with the old contributors and the new."""
    fam, tracer = family_tracer
    cfg = acc.ACCConfig() if config == "authors" else acc.ACCConfig.legacy()
    cases = [(random_prompt(14, seed=seed), cw) for seed in (2, 3, 4) for cw in ((7, 11), (11, 7), (3, 9), (9, 3))]
    new = [acc.acc_trace(tracer, ids, *cw, config=cfg) for ids, cw in cases]
    monkeypatch.setattr(acc, "_firing_contributors", ref.acc_firing_contributors)
    old = [acc.acc_trace(tracer, ids, *cw, config=cfg) for ids, cw in cases]
    assert sum(c.n_firings for c in old) >= 5  # the comparison covers expanded firings
    for o, nw in zip(old, new):
        assert o.n_firings == nw.n_firings
        assert sorted(o.graph.nodes(data=True)) == sorted(nw.graph.nodes(data=True))
        assert graph_diff(o.graph, nw.graph, 1e-9) == []
        e_old = sorted((u, v, d["side"], d["token"], tuple(d["sing"])) for u, v, d in o.graph.edges(data=True))
        e_new = sorted((u, v, d["side"], d["token"], tuple(d["sing"])) for u, v, d in nw.graph.edges(data=True))
        assert e_old == e_new


# ---------------------------------------------------------------- signal removals
CONTROLS = ("signal", "random", "random_matched", "random_score")
FIELDS = ("metric_before", "metric_after", "attn_before", "attn_after", "final_resid_cos", "head_input_cos",
          "removed_norm_ratio", "delta_norm_ratio", "score_before", "score_after")


def _same_removals(tracer, ids, correct, wrong, specs, rel=1e-9):
    new_iv, old_iv = Intervener(tracer, ids, correct, wrong), ref.OldIntervener(tracer, ids, correct, wrong)
    n = 0
    for spec in specs:
        for sub in CONTROLS:
            for seed in ((None,) if sub == "signal" else (0, 1)):
                try:
                    o = old_iv.remove(spec, sub, seed=seed)
                except ValueError as err:  # a control that cannot be matched must fail the same way
                    with pytest.raises(type(err), match=None):
                        new_iv.remove(spec, sub, seed=seed)
                    continue
                nw = new_iv.remove(spec, sub, seed=seed)
                assert nw.sing_removed == o.sing_removed
                for f in FIELDS:
                    a, b = getattr(o, f), getattr(nw, f)
                    assert abs(a - b) <= rel * max(abs(a), 1e-3), (spec.describe(), sub, seed, f, a, b)
                for k, a in o.extra.items():
                    assert abs(nw.extra[k] - a) <= rel * max(abs(a), 1e-3), (spec.describe(), sub, k)
                n += 1
    # the caches are reused: asking again gives the very same numbers
    again = new_iv.remove(specs[0])
    assert again.metric_after == new_iv.remove(specs[0]).metric_after
    return n


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
@pytest.mark.parametrize("variant", ["authors", "per-position"])
def test_removals_same_as_before(family, variant, exact):
    """Every signal edge of the strongest firing of each head of the last two layers (both sides)."""
    tracer = Tracer(tiny_model(family), config=TraceConfig(expand_layer0=True, variant=variant))
    ids = random_prompt(11)
    dec = tracer.decompose(ids)
    solver = FiringSolver(dec, tracer.svd, variant=variant)
    specs = []
    for L in (1, 2):
        for a in range(0, tracer.arch.n_heads, 2):
            d = dec.T - 1
            f = Firing(L, a, d, int(dec.acts.attn[L, a, d].argmax()))
            specs += [SignalSpec.from_edge(f, e, variant) for e in solver.solve(f).edges]
    specs = sorted(specs, key=lambda sp: -abs(sp.attribution))[:8]
    assert len(specs) >= 4 and {s.side for s in specs} == {"d", "s"}
    assert _same_removals(tracer, ids, 7, 11, specs) >= 3 * len(specs)


# ---------------------------------------------------------------- evaluation
def _ioi_like(rows):
    return [SimpleNamespace(input_ids=tuple(int(i) for i in r), io_id=7, s_id=11) for r in rows]


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_evaluate_same_as_before(family, exact):
    model = tiny_model(family)
    prompts = _ioi_like([random_prompt(n, seed=s) for n, s in [(9, 1), (11, 2), (9, 3), (11, 4), (9, 5), (6, 6),
                                                                (9, 7)]])
    old = ref.evaluate(model, prompts)
    for batch in (1, 2, 64):
        new = datasets.evaluate(model, prompts, batch=batch)
        assert torch.allclose(new.logit_diff, old.logit_diff, rtol=1e-10, atol=1e-12)
        assert torch.allclose(new.p_io, old.p_io, rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_pronoun_evaluate_same_as_before(family, exact):
    from accpp import pronouns

    model = tiny_model(family)
    prompts = [SimpleNamespace(input_ids=tuple(int(i) for i in random_prompt(n, seed=s)), correct_id=5, wrong_id=9,
                               gender="male" if s % 2 else "female", family="paper")
               for n, s in [(8, 1), (10, 2), (8, 3), (8, 4), (10, 5)]]
    old, new = ref.pronoun_evaluate(model, prompts), pronouns.evaluate(model, prompts)
    assert torch.allclose(new.logit_diff, old.logit_diff, rtol=1e-10, atol=1e-12)
    assert torch.equal(new.male, old.male) and new.family == old.family
    with pytest.raises(ValueError, match="no prompts"):
        pronouns.evaluate(model, [])


def test_last_logits_batches_and_keeps_one_position(exact):
    """At most ``batch`` rows per forward pass, one length per batch, and the model asked for the last
    position's logits only (what bounds the memory)."""
    model = tiny_model("llama")
    calls = []
    orig = model.forward

    def spy(input_ids=None, **kw):
        calls.append((tuple(input_ids.shape), kw.get("logits_to_keep")))
        out = orig(input_ids=input_ids, **kw)
        assert out.logits.shape[1] == 1
        return out

    model.forward = spy
    rows = [random_prompt(n, seed=i).tolist() for i, n in enumerate([5, 5, 5, 7, 5, 7])]
    got = {i: lg for idx, lg in datasets.last_logits(model, rows, batch=2) for i, lg in zip(idx, lg)}
    assert sorted(got) == list(range(6))
    assert calls == [((2, 5), 1), ((2, 5), 1), ((2, 7), 1)]
    with pytest.raises(ValueError, match="batch must be >= 1"):
        next(datasets.last_logits(model, rows, batch=0))


# ---------------------------------------------------------------- one real prompt (SmolLM2)
@pytest.fixture(scope="module")
def smollm2():
    from accpp.models import load_model

    model, tok = load_model("smollm2-135m")
    tracer = Tracer(model, tok, name="smollm2-135m")
    p = datasets.make_prompt(tok, 0, "BABA", "Mary", "John", "store", "drink")
    return tracer, tok, p


@pytest.mark.models
def test_smollm2_acc_graph_and_removals_same_as_before(smollm2, monkeypatch):
    tracer, tok, p = smollm2
    ids = torch.tensor(p.input_ids)
    new = acc.acc_trace(tracer, ids, p.io_id, p.s_id)
    c = tracer.trace(ids, p.io_id, p.s_id)
    specs = top_seed_edges(c.graph, 3, "authors")
    assert _same_removals(tracer, ids, p.io_id, p.s_id, specs, rel=1e-6) >= 3  # float32 forward passes
    monkeypatch.setattr(acc, "_firing_contributors", ref.acc_firing_contributors)
    old = acc.acc_trace(tracer, ids, p.io_id, p.s_id)
    assert new.n_firings == old.n_firings > 1
    assert sorted(old.graph.nodes) == sorted(new.graph.nodes)
    assert graph_diff(old.graph, new.graph, 1e-9) == []


@pytest.mark.models
def test_smollm2_evaluate_same_as_before(smollm2):
    tracer, tok, _ = smollm2
    prompts = datasets.ioi_mixed(tok, n=24, seed=0)
    old, new = ref.evaluate(tracer.model, prompts), datasets.evaluate(tracer.model, prompts, batch=5)
    assert float((new.logit_diff - old.logit_diff).abs().max()) < 1e-4
    assert new.accuracy == old.accuracy
    dec = Decomposition(tracer.arch, collect(tracer.model, tracer.arch, torch.tensor(prompts[0].input_ids)))
    assert dec.rot.built == []
