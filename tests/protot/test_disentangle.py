"""protot.disentangle: the two metrics on planted units (exact values), their invariances, the unit
extractors on tiny random models, bad input, and the trained ProtoT scoring above an untrained one."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from protot import disentangle as D
from protot.models import build_model

VOCAB = 200


def _classes_and_ids(seed=0, n=4000, types=8):
    rng = np.random.default_rng(seed)
    # unequal class frequencies: type t has weight t + 1
    p = np.arange(1, types + 1, dtype=float)
    ids = rng.choice(types, size=n, p=p / p.sum())
    return ids, D.frequent_classes(ids, n_classes=types, min_count=1)


def test_planted_units_score_exactly():
    ids, cls = _classes_and_ids()
    one = (ids == 3).astype(np.float32)                 # active only on class of token 3
    flat = np.ones_like(one)                            # equally active everywhere
    two = np.isin(ids, [1, 5]).astype(np.float32) * 2.0
    u = D.Units("planted", ["one", "flat", "two"], np.stack([one, flat, two], 1))
    means, overall, active = D.class_means(u, cls)
    d = D.disentanglement(means, active, min_active=1)
    C = cls.n
    assert d[0] == pytest.approx(1.0, abs=1e-12)
    assert d[1] == pytest.approx(0.0, abs=1e-12)       # frequencies do not count: class means
    assert d[2] == pytest.approx(1.0 - math.log(2) / math.log(C), abs=1e-12)
    sel = D.selectivity(means, overall)
    c3 = int(np.flatnonzero(cls.token_ids == 3)[0])
    assert sel[0, c3] == pytest.approx(len(ids) / (ids == 3).sum())
    assert D.coverage(sel, 2.0) == pytest.approx(3 / C)  # classes 1, 3, 5 have a selective unit
    assert D.coverage(sel, 2.0, units=[1]) == 0.0


def test_invariant_to_scale_and_ordered_by_concentration():
    ids, cls = _classes_and_ids(1)
    rng = np.random.default_rng(0)
    noisy = (ids == 2) + 0.3 * rng.random(len(ids))
    broad = (ids % 2 == 0) + 0.3 * rng.random(len(ids))
    a = np.stack([noisy, broad], 1).astype(np.float32)
    s1 = D.score(D.Units("x", ["a", "b"], a), cls, match=2, threshold=1.5, min_active=1)
    s2 = D.score(D.Units("x", ["a", "b"], 7.0 * a), cls, match=2, threshold=1.5, min_active=1)
    assert np.allclose(s1.per_unit.disentanglement, s2.per_unit.disentanglement, rtol=1e-6, atol=0)
    assert s1.coverage_all == s2.coverage_all
    assert s1.per_unit.disentanglement[0] > s1.per_unit.disentanglement[1]


def test_rarely_active_units_are_not_scored_and_matched_coverage():
    ids, cls = _classes_and_ids(2)
    rare = np.zeros(len(ids), np.float32)
    rare[np.flatnonzero(ids == 4)[:3]] = 1.0
    dense = np.ones(len(ids), np.float32)
    s = D.score(D.Units("x", ["rare", "dense"], np.stack([rare, dense], 1)), cls, match=1, min_active=5)
    assert s.scored == 1 and np.isnan(s.per_unit.disentanglement[0])
    # one selective unit among two: half the size-1 subsets cover its class
    assert s.coverage_all == pytest.approx(1 / cls.n)
    assert s.coverage_matched == pytest.approx(0.5 / cls.n, abs=0.1 / cls.n)
    assert (D.matched_coverage(D.selectivity(*D.class_means(D.Units("x", ["a", "b"], np.stack([rare, dense], 1)), cls)[:2]),
                               2, 5.0) == s.coverage_all).all()


def test_frequent_classes():
    ids = np.array([5, 5, 5, 7, 7, 9, 9, 9, 9, 11])
    c = D.frequent_classes(ids, n_classes=2, min_count=2)
    assert c.token_ids.tolist() == [9, 5] and c.counts.tolist() == [4, 3]
    assert c.labels.tolist() == [1, 1, 1, -1, -1, 0, 0, 0, 0, -1]
    with pytest.raises(ValueError, match="fewer than 2 token types"):
        D.frequent_classes(ids, n_classes=5, min_count=4)


def test_bad_input():
    ids, cls = _classes_and_ids()
    with pytest.raises(ValueError, match="non-negative"):
        D.Units("neg", ["a"], -np.ones((5, 1), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        D.Units("nan", ["a"], np.full((5, 1), np.nan, np.float32))
    with pytest.raises(ValueError, match="2 names"):
        D.Units("x", ["a", "b"], np.ones((5, 1), np.float32))
    with pytest.raises(ValueError, match="different samples"):
        D.class_means(D.Units("x", ["a"], np.ones((5, 1), np.float32)), cls)
    with pytest.raises(ValueError, match="threshold must exceed 1"):
        D.score(D.Units("x", ["a"], np.ones((len(ids), 1), np.float32)), cls, match=1, threshold=1.0)
    with pytest.raises(ValueError, match="match=3"):
        D.matched_coverage(np.ones((2, 4)), 3, 2.0)
    with pytest.raises(ValueError, match="distinct kinds"):
        u = D.Units("x", ["a"], np.ones((len(ids), 1), np.float32))
        D.compare([u, u], cls)
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="LLaMA baseline"):
        D.head_units(build_model("protot", "tiny", VOCAB), torch.zeros(1, 4, dtype=torch.long))


def test_unit_extractors_on_tiny_models():
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (3, 16), generator=torch.Generator().manual_seed(0))
    p = build_model("protot", "tiny", VOCAB).eval()
    u = D.prototype_units(p, ids, batch_size=2)
    L, R = p.config.num_hidden_layers, p.config.num_prototypes
    assert u.acts.shape == (48, L * R)
    assert np.allclose(u.acts.reshape(48, L, R).sum(-1), 1.0, atol=1e-5)    # write gates: softmax per layer
    # heads: with one head per layer the head's norm is the attention output's norm
    torch.manual_seed(0)
    m = build_model("llama", "tiny", VOCAB, num_attention_heads=1).eval()
    outs = []
    hooks = [b.mixer.register_forward_hook(lambda mod, i, o: outs.append(o[0].norm(dim=-1))) for b in m.layers]
    try:
        h = D.head_units(m, ids, batch_size=3)
    finally:
        for k in hooks:
            k.remove()
    want = torch.stack(outs, -1).reshape(-1, len(m.layers)).numpy()
    assert h.acts.shape == want.shape and np.allclose(h.acts, want, rtol=1e-5, atol=1e-7)
    torch.manual_seed(0)
    m4 = build_model("llama", "tiny", VOCAB).eval()
    h4 = D.head_units(m4, ids, batch_size=2)
    assert h4.count == len(m4.layers) * m4.config.num_attention_heads and h4.acts.shape[0] == 48


def test_trained_prototypes_score_above_untrained():
    """The committed ProtoT's prototypes are more disentangled and cover more than an untrained
    ProtoT of the same config (same sample, same classes)."""
    from protot import concepts
    from protot.train import packing, pretrained

    if "protot-authors-small" not in pretrained.available():
        pytest.fail("models/protot-authors-small is missing: restore the committed models (git checkout -- models/)")
    m = pretrained.load("protot-authors-small").model
    ids = concepts.sample_blocks(packing.token_stream("validation"), 8, 128, seed=0)
    cls = D.frequent_classes(ids, n_classes=60, min_count=5)
    torch.manual_seed(1)
    null = type(m)(m.config).eval()
    table, _ = D.compare([D.prototype_units(m, ids, kind="trained"), D.prototype_units(null, ids, kind="untrained")],
                         cls, threshold=3.0, min_active=5)
    t, u = table.set_index("kind").loc["trained"], table.set_index("kind").loc["untrained"]
    assert t.disentanglement > u.disentanglement + 0.05, table
    assert t.coverage_all > u.coverage_all, table


def test_the_margin_interval_resamples_each_kind_on_its_own():
    import numpy as np
    import pandas as pd

    from protot import disentangle as D

    rng = np.random.default_rng(0)
    per_unit = pd.DataFrame({"kind": ["p"] * 40 + ["h"] * 30 + ["s"] * 50,
                             "disentanglement": np.r_[rng.normal(0.6, 0.05, 40), rng.normal(0.4, 0.05, 30),
                                                      rng.normal(0.5, 0.05, 50)]})
    per_unit.loc[3, "disentanglement"] = np.nan           # a unit not scored is left out
    lo, hi = D.margin_interval(per_unit, "p", ["h", "s"], n_boot=500, seed=1)
    point = per_unit[per_unit.kind == "p"].disentanglement.mean() - per_unit[per_unit.kind == "s"].disentanglement.mean()
    assert lo < point < hi and 0.05 < lo and hi < 0.15      # about 0.1 with a spread of ~0.01
    # by hand for one kind each: the mean of resampled units
    tiny = pd.DataFrame({"kind": ["p", "p", "h"], "disentanglement": [0.2, 0.4, 0.1]})
    rng = np.random.default_rng(5)
    p = np.array([0.2, 0.4])[rng.integers(0, 2, size=(300, 2))].mean(1)
    h = np.array([0.1])[rng.integers(0, 1, size=(300, 1))].mean(1)
    assert D.margin_interval(tiny, "p", ["h"], n_boot=300, seed=5) == (np.quantile(p - h, 0.025), np.quantile(p - h, 0.975))
    with pytest.raises(ValueError, match="no scored units of kind 'x'"):
        D.margin_interval(per_unit, "p", ["x"])


def test_the_excess_margin_interval_resamples_every_kind_and_null_on_its_own():
    import numpy as np
    import pandas as pd

    from protot import disentangle as D

    tiny = pd.DataFrame({"kind": ["p", "p", "p0", "h", "h0", "h0"], "disentanglement": [0.2, 0.4, 0.1, 0.3, 0.05, 0.15]})
    rng = np.random.default_rng(5)
    draw = {k: np.array(v)[rng.integers(0, len(v), size=(300, len(v)))].mean(1)
            for k, v in {"p": [0.2, 0.4], "h": [0.3], "p0": [0.1], "h0": [0.05, 0.15]}.items()}
    m = (draw["p"] - draw["p0"]) - (draw["h"] - draw["h0"])
    got = D.excess_margin_interval(tiny, "p", ["h"], {"p": "p0", "h": "h0"}, n_boot=300, seed=5)
    assert got == (np.quantile(m, 0.025), np.quantile(m, 0.975))
    with pytest.raises(ValueError, match=r"no null named for kind\(s\) \['h'\]"):
        D.excess_margin_interval(tiny, "p", ["h"], {"p": "p0"})
    with pytest.raises(ValueError, match="no scored units of kind 'x0'"):
        D.excess_margin_interval(tiny, "p", ["h"], {"p": "p0", "h": "x0"})


def test_measure_reads_the_table_and_counts_the_scored_prototypes():
    import numpy as np
    import pandas as pd

    from compendium import claims
    from protot import disentangle as D

    table = pd.DataFrame({"kind": ["p", "h", "s", "p0", "h0", "s0"], "units": [10, 4, 12, 10, 4, 12],
                          "scored": [8, 4, 11, 9, 4, 12],
                          "disentanglement": [0.5, 0.2, 0.4, 0.3, 0.1, 0.35],
                          "coverage_at_4": [0.6, 0.1, 0.5, 0.4, 0.0, 0.45]})
    rng = np.random.default_rng(0)
    per_unit = pd.DataFrame({"kind": ["p"] * 8 + ["h"] * 4 + ["s"] * 11 + ["p0"] * 9 + ["h0"] * 4 + ["s0"] * 12,
                             "disentanglement": np.r_[rng.normal(0.5, 0.02, 8), rng.normal(0.2, 0.02, 4),
                                                      rng.normal(0.4, 0.02, 11), rng.normal(0.3, 0.02, 9),
                                                      rng.normal(0.1, 0.02, 4), rng.normal(0.35, 0.02, 12)]})
    m = D.measure(table, prototypes="p", heads="h", sae="s", nulls={"p": "p0", "h": "h0", "s": "s0"},
                  sae_explained_variance=0.8, n_classes=150, per_unit=per_unit, seed=2)
    v = m.values
    assert v["disentanglement_margin"] == pytest.approx(0.5 - 0.4) and v["coverage_margin"] == pytest.approx(0.6 - 0.5)
    assert v["null_gap_min"] == pytest.approx(0.05) and v["n_prototypes_scored"] == 8 and v["n_classes"] == 150
    assert (v["disentanglement_margin_ci_low"], v["disentanglement_margin_ci_high"]) == \
        D.margin_interval(per_unit, "p", ["h", "s"], seed=2)
    # the check's margins: each kind above its null (p +0.2, h +0.1, s +0.05; coverage +0.2, +0.1, +0.05)
    assert v["disentanglement_excess_margin"] == pytest.approx(0.2 - 0.1)
    assert v["coverage_excess_margin"] == pytest.approx(0.2 - 0.1)
    assert (v["disentanglement_excess_margin_ci_low"], v["disentanglement_excess_margin_ci_high"]) == \
        D.excess_margin_interval(per_unit, "p", ["h", "s"], {"p": "p0", "h": "h0", "s": "s0"}, seed=2)
    assert m.evidence["coverage_null_gaps"] == pytest.approx({"p": 0.2, "h": 0.1, "s": 0.05})
    with pytest.raises(ValueError, match=r"no null named for kind\(s\) \['s'\]"):
        D.measure(table, prototypes="p", heads="h", sae="s", nulls={"p": "p0", "h": "h0"},
                  sae_explained_variance=0.8, n_classes=150, per_unit=per_unit, seed=2)
    claim = claims.get_claim(m.claim)
    status, _, _, reason = claims.evaluate(claim, v, "cpu")            # 8 scored prototypes: below the floor
    assert status == claims.INCONCLUSIVE and "min-units" in reason
    assert claims.evaluate(claim, {**v, "n_prototypes_scored": claim.min_units.at_least}, "cpu")[0] == claims.HOLDS
