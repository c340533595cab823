"""The concept check of protot.concepts and protot.labels on tiny random ProtoT models and planted
gates: coherence with a reference embedding, the smallest margin over the null families and its
interval, nulls with matched sharpness (untrained, prototypes re-drawn, prototypes and read
projections re-drawn; of both variants), each of which fails the check, and dead prototypes leaving it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from protot import labels, usage
from protot import concepts as C
from protot.models import build_model
from tests.protot.concepts_standins import _ids, _model, _stats_with


def _authors_model(vocab, seed=0, **overrides):
    """A tiny ProtoT of the authors' variant (the default: the committed protot-authors-small's)."""
    torch.manual_seed(seed)
    m = build_model("protot", "tiny", vocab, **overrides).eval()
    assert m.config.variant == "authors"
    return m


VARIANT_MODELS = {"compendium-v1": _model, "authors": _authors_model}


# -- concept null with matched sharpness, coherence --------------------------------------------------------
def _synthetic_reference(n_types=400, dim=16, clusters=8, seed=0):
    """Token ids 1..n_types-1 with reference vectors in ``clusters`` tight clusters (id % clusters)."""
    rng = np.random.default_rng(seed)
    ours = np.arange(1, n_types)
    centres = rng.normal(size=(clusters, dim))
    v = centres[ours % clusters] + 0.3 * rng.normal(size=(len(ours), dim))
    v -= v.mean(0)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return labels.ReferenceEmbeddings("synthetic", ours, ours, v.astype(np.float32))


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
    coh = labels.coherence(_stats_with(planted, ids, 400), ref, top=10, min_count=2)
    assert coh.shape == (1, R) and (coh > 0.5).all()                # top tokens of each prototype: one cluster
    nulls = [_stats_with(random_gates(s), ids, 400) for s in (2, 3, 4)]
    assert all(np.nanmean(labels.coherence(s, ref, top=10, min_count=2)) < 0.3 for s in nulls)
    H = {"write": 1.0, "read": 1.0}
    m = labels.measure_concepts(_stats_with(planted, ids, 400), nulls, ref, trained_entropy=H,
                           null_entropy=[{"write": 1.02, "read": 1.0}] * 3, top=10, min_count=2)
    assert m.values["coherence_margin"] > 0.2 and m.values["null_seeds"] == 3
    assert m.values["null_entropy_gap"] == pytest.approx(0.02)
    claim = claims.get_claim(m.claim)
    assert _judged_at_the_floor(claim, m.values) == claims.HOLDS
    # a null whose gates are not as sharp fails the precondition: inconclusive, naming it
    m2 = labels.measure_concepts(_stats_with(planted, ids, 400), nulls, ref, trained_entropy=H,
                            null_entropy=[{"write": 1.3, "read": 1.0}] * 3, top=10, min_count=2)
    status, _, _, reason = claims.evaluate(claim, m2.values, "cpu")
    assert status == claims.INCONCLUSIVE and "null-entropy-matched" in reason
    with pytest.raises(ValueError, match="map to"):
        labels.coherence(_stats_with(planted, ids, 400), labels.ReferenceEmbeddings("none", np.array([0]), np.array([0]),
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
    m = labels.measure_concepts(_stats_with(planted, ids, 400), nulls, ref, trained_entropy=H, null_entropy=[H] * 4, top=10,
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
    target = {k: 0.5 * v for k, v in labels.mean_gate_entropy(trained, ids).items()}     # sharper than at init
    nulls = [labels.matched_null(trained, s, ids, target, tol=0.01) for s in (11, 12, 13, 14)]
    for n in nulls:
        for kind in ("write", "read"):
            assert n.entropy[kind] == pytest.approx(target[kind], rel=0.01)
        assert n.write_temperature < 1.0 and n.model.config is not trained.config
    assert trained.config.write_temperature == 1.0                  # the trained model is untouched
    if variant == "authors":   # its learned temperatures are scaled by the factor found, the trained one's kept
        for mt, mn in zip(trained.mixers(), nulls[0].model.mixers()):
            assert float(mt.write_tau[0]) in (1.0, 3.0)
            assert float(mn.write_tau[0]) == pytest.approx(float(mt.write_tau[0]) * nulls[0].write_temperature)
    again = labels.matched_null(trained, 11, ids, target, tol=0.01)
    assert again.write_temperature == nulls[0].write_temperature     # deterministic
    ref = _synthetic_reference()
    stats = [C.collect_gates(n.model, ids) for n in nulls]
    ents = [labels.mean_gate_entropy(n.model, ids) for n in nulls]
    claim = claims.get_claim("protot/concept-prototypes")
    m = labels.measure_concepts(stats[0], stats[1:], ref, trained_entropy=ents[0], null_entropy=ents[1:], min_count=2)
    assert m.values["null_seeds"] == 3 and m.values["null_entropy_gap"] <= 0.05
    status, *_ = claims.evaluate(claim, m.values, "cpu")
    assert status in (claims.DOES_NOT_HOLD, claims.INCONCLUSIVE), m.values   # never holds


# -- the nulls of the concept check: every one of them fails it ----------------------------------------------
def test_redrawn_null_changes_only_what_it_redraws(tokenizer):
    from protot import labels

    trained = _model(tokenizer.vocab_size, seed=0, shared_keys=True)
    before = {n: p.detach().clone() for n, p in trained.state_dict().items()}
    ids = _ids(6, C.token_id(tokenizer, " women"), seed=2)
    target = labels.mean_gate_entropy(trained, ids)
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
    target = {k: 0.6 * v for k, v in labels.mean_gate_entropy(trained, ids).items()}
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
    target = {k: 0.6 * v for k, v in labels.mean_gate_entropy(trained, ids).items()}
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
    target = {k: 0.6 * v for k, v in labels.mean_gate_entropy(trained, ids).items()}    # sharper than at init
    ref = _synthetic_reference()
    claim = claims.get_claim("protot/concept-prototypes")
    nulls = {fam: [labels.null_model(trained, fam, s, ids, target, tol=0.01) for s in (11, 12, 13, 14)]
             for fam in labels.NULL_FAMILIES}
    stats = {fam: [C.collect_gates(n.model, ids) for n in ns] for fam, ns in nulls.items()}
    ents = {fam: [labels.mean_gate_entropy(n.model, ids) for n in ns] for fam, ns in nulls.items()}

    def check(role, pool):
        m = labels.measure_concepts(stats[role][0], [stats[f][i] for f, i in pool], ref, trained_entropy=ents[role][0],
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
    assert usage.alive_mask(alive_stats)[0, 0] and not usage.alive_mask(dead_stats)[0, 0]
    assert list(usage.dead_prototypes(dead_stats).itertuples(index=False, name=None))[0][:2] == (0, 0)
    nulls = [_stats_with(np.random.default_rng(s).dirichlet(np.full(R, 0.3), size=(1, 20, 64)), ids, 400) for s in (2, 3, 4)]
    H = [{"write": 1.0, "read": 1.0}] * 3
    a = labels.measure_concepts(alive_stats, nulls, ref, trained_entropy=H[0], null_entropy=H, min_count=2, n_boot=200)
    d = labels.measure_concepts(dead_stats, nulls, ref, trained_entropy=H[0], null_entropy=H, min_count=2, n_boot=200)
    coh = labels.coherence(alive_stats, ref, min_count=2)
    assert a.values["coherence_trained"] == pytest.approx(np.nanmean(coh))
    assert d.values["coherence_trained"] == pytest.approx(np.nanmean(coh[0, 1:]))
    assert a.evidence["alive_trained"] == R and d.evidence["alive_trained"] == R - 1
    assert a.values["alive_prototypes"] == R and d.values["alive_prototypes"] == R - 1   # min_units' count
