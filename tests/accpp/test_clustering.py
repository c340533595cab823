"""Circuit clustering: Jaccard distance matrices, average linkage, flat cuts, ARI / NMI against
hand-computed values, and the seeded permutation test (no model needed)."""
from __future__ import annotations

import random
from itertools import combinations

import numpy as np
import pytest

from accpp import clustering as cl


def _planted(n_per=10, seed=0, shared=12, noise=0.15):
    """Two groups of sets: each member keeps every item of its group's core with prob 1 - noise and
    adds a few random items from a common pool."""
    rng = random.Random(seed)
    cores = [{f"g{g}_{i}" for i in range(shared)} for g in range(2)]
    pool = [f"x{i}" for i in range(40)]
    sets, labels = [], []
    for g in range(2):
        for _ in range(n_per):
            s = {c for c in cores[g] if rng.random() > noise} | set(rng.sample(pool, 4))
            sets.append(frozenset(s))
            labels.append(g)
    return sets, np.array(labels)


def _null(n=24, seed=1):
    rng = random.Random(seed)
    pool = [f"x{i}" for i in range(30)]
    return [frozenset(rng.sample(pool, 10)) for _ in range(n)], np.array([i % 2 for i in range(n)])


def test_distance_matrix_symmetric_zero_diagonal_and_jaccard():
    sets, _ = _planted()
    D = cl.distance_matrix(sets)
    assert D.shape == (20, 20)
    assert np.array_equal(D, D.T) and np.all(np.diag(D) == 0)
    assert np.all((D >= 0) & (D <= 1))
    a, b = frozenset("abc"), frozenset("bcd")
    D2 = cl.distance_matrix([a, b, frozenset()])
    assert D2[0, 1] == pytest.approx(1 - 2 / 4)
    assert D2[0, 2] == 1.0 and D2[2, 2] == 0.0


def test_average_linkage_merges_at_mean_member_distance():
    rng = np.random.default_rng(0)
    sets, _ = _planted(n_per=6, seed=3)
    for D in [np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1)) for x in (rng.normal(size=(n, 3)) for n in (2, 5, 13))] \
            + [cl.distance_matrix(sets)]:
        n = len(D)
        Z = cl.average_linkage(D)
        members = {i: [i] for i in range(n)}
        for r, (i, j, d, size) in enumerate(Z):
            a, b = members[int(i)], members[int(j)]
            assert d == pytest.approx(np.mean([D[p, q] for p in a for q in b]), abs=1e-12)
            members[n + r] = a + b
            assert size == len(a) + len(b)
        assert np.all(np.diff(Z[:, 2]) >= -1e-12)  # UPGMA heights never decrease
        assert sorted(cl.leaf_order(Z)) == list(range(n))


def test_average_linkage_hand_example():
    # points 0, 1 on a line and 10: merge (0,1) at 1, then {0,1} with 2 at mean(10, 9) = 9.5
    D = np.array([[0, 1, 10], [1, 0, 9], [10, 9, 0]], dtype=float)
    Z = cl.average_linkage(D)
    np.testing.assert_allclose(Z, [[0, 1, 1, 2], [2, 3, 9.5, 3]])
    assert cl.cut(Z, 2).tolist() == [0, 0, 1]
    assert cl.cut(Z, 1).tolist() == [0, 0, 0] and cl.cut(Z, 3).tolist() == [0, 1, 2]
    assert sorted(cl.leaf_order(Z)) == [0, 1, 2]
    with pytest.raises(ValueError):
        cl.cut(Z, 4)
    with pytest.raises(ValueError):
        cl.average_linkage(np.array([[0, 1], [2, 0]], dtype=float))


def test_clustering_recovers_planted_groups():
    sets, labels = _planted()
    Z = cl.average_linkage(cl.distance_matrix(sets))
    clusters = cl.cut(Z, 2)
    assert cl.adjusted_rand(clusters, labels) == 1.0
    assert cl.normalized_mutual_info(clusters, labels) == pytest.approx(1.0)
    assert np.all(np.diff(Z[:, 2]) >= -1e-12)  # UPGMA heights are monotone


def test_ari_identical_relabelled_and_trivial():
    a = [0, 0, 1, 1, 2, 2, 2]
    assert cl.adjusted_rand(a, a) == 1.0
    assert cl.adjusted_rand(a, ["z", "z", "y", "y", "x", "x", "x"]) == 1.0  # label names do not matter
    assert cl.adjusted_rand([0] * 5, [1] * 5) == 1.0
    assert cl.adjusted_rand(range(5), range(5)) == 1.0
    assert cl.normalized_mutual_info(a, [5, 5, 7, 7, 1, 1, 1]) == pytest.approx(1.0)


def test_ari_hand_computed():
    # a = [0,0,0,1,1,1], b = [0,0,1,1,2,2]: contingency [[2,1,0],[0,1,2]]
    # sum C(n_ij,2) = 1+1 = 2; rows C(3,2)*2 = 6; cols C(2,2)*3 = 3; C(6,2) = 15
    # expected = 6*3/15 = 1.2; max = (6+3)/2 = 4.5; ARI = (2-1.2)/(4.5-1.2) = 0.8/3.3
    a, b = [0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 2, 2]
    assert cl.contingency(a, b).tolist() == [[2, 1, 0], [0, 1, 2]]
    assert cl.adjusted_rand(a, b) == pytest.approx(0.8 / 3.3)
    assert cl.adjusted_rand(b, a) == pytest.approx(0.8 / 3.3)
    # NMI: H(a) = ln 2, H(b) = ln 3, MI = sum p_ij ln(p_ij / (p_i p_j))
    p = np.array([[2, 1, 0], [0, 1, 2]]) / 6
    pi, pj = p.sum(1), p.sum(0)
    mi = sum(p[i, j] * np.log(p[i, j] / (pi[i] * pj[j])) for i in range(2) for j in range(3) if p[i, j] > 0)
    assert cl.normalized_mutual_info(a, b) == pytest.approx(mi / ((np.log(2) + np.log(3)) / 2))
    # a perfectly "anti-aligned" 2x2 case: pairs split across clusters, ARI = -0.5
    assert cl.adjusted_rand([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(-0.5)


def test_ari_near_zero_for_independent_labellings():
    # a crossed design: every cluster of a holds each label of b equally often -> ARI slightly < 0
    # (hand: pairs 4*C(15,2) = 420, rows = cols = 2*C(30,2) = 870, C(60,2) = 1770), NMI exactly 0;
    # and random labellings average to ~0
    a = np.repeat(np.arange(2), 30)
    b = np.tile(np.arange(2), 30)
    expected = 870 * 870 / 1770
    assert cl.adjusted_rand(a, b) == pytest.approx((420 - expected) / (870 - expected))
    assert -0.05 < cl.adjusted_rand(a, b) < 0
    assert cl.normalized_mutual_info(a, b) == pytest.approx(0.0, abs=1e-12)
    rng = np.random.default_rng(0)
    aris = [cl.adjusted_rand(rng.integers(0, 3, 60), rng.integers(0, 3, 60)) for _ in range(200)]
    assert abs(np.mean(aris)) < 0.01


def test_within_between_and_cells():
    D = np.array([[0, 1, 4, 5], [1, 0, 6, 7], [4, 6, 0, 2], [5, 7, 2, 0]], dtype=float)
    w, b = cl.within_between(D, ["a", "a", "b", "b"])
    assert w == pytest.approx(1.5) and b == pytest.approx((4 + 5 + 6 + 7) / 4)
    cells = cl.distance_by_cell(D, {"g": ["a", "a", "b", "b"], "h": [0, 1, 0, 1]})
    assert cells["count"].sum() == len(list(combinations(range(4), 2)))
    same_g = cells[cells["g"] == "same"]
    assert set(same_g["h"]) == {"diff"} and same_g["mean"].item() == pytest.approx(1.5)


def test_permutation_test_planted_vs_null_and_seeded():
    sets, labels = _planted()
    D = cl.distance_matrix(sets)
    Z = cl.average_linkage(D)
    res = cl.label_alignment(D, Z, labels, n_perm=199, seed=0)
    assert res["ari"] == 1.0 and res["within"] < res["between"]
    # (seed 0 happens to draw the group-swapping permutation once, which scores the same)
    assert res["p_ari"] <= 2 / 200 and res["p_gap"] <= 2 / 200
    assert cl.label_alignment(D, Z, labels, n_perm=199, seed=0) == res  # seeded: same numbers
    sets0, labels0 = _null()
    D0 = cl.distance_matrix(sets0)
    res0 = cl.label_alignment(D0, cl.average_linkage(D0), labels0, n_perm=199, seed=0)
    assert res0["p_gap"] > 0.1 and res0["p_ari"] > 0.1, res0
    stat = lambda x: cl.within_between(D0, x)[1] - cl.within_between(D0, x)[0]  # noqa: E731
    _, p1, null1 = cl.permutation_test(stat, labels0, n=50, seed=3)
    _, p2, null2 = cl.permutation_test(stat, labels0, n=50, seed=3)
    _, _, null3 = cl.permutation_test(stat, labels0, n=50, seed=4)
    assert p1 == p2 and np.array_equal(null1, null2) and not np.array_equal(null1, null3)


def test_permutation_test_strata_keep_strata_fixed():
    labels = np.array(["x", "y"] * 6)
    strata = np.repeat([0, 1, 2], 4)
    seen = []

    def stat(lab):
        seen.append(lab.copy())
        return 0.0

    cl.permutation_test(stat, labels, n=20, seed=0, strata=strata)
    for lab in seen:  # each stratum keeps its own multiset of labels
        for s in range(3):
            assert sorted(lab[strata == s]) == sorted(labels[strata == s])


# ---------------------------------------------------------------- PERMANOVA

def _ols_f(y, cols_reduced, cols_term, cols_full):
    n = len(y)

    def rss(cols):
        X = np.column_stack([np.ones(n)] + cols)
        b, *_ = np.linalg.lstsq(X, y, rcond=None)
        r = y - X @ b
        return r @ r, np.linalg.matrix_rank(X)

    r_red, k_red = rss(cols_reduced)
    r_term, k_term = rss(cols_reduced + cols_term)
    r_full, k_full = rss(cols_full)
    return ((r_red - r_term) / (k_term - k_red)) / (r_full / (n - k_full))


def _design(n=40, seed=0, effect=1.0):
    rng = np.random.default_rng(seed)
    t = np.array([f"T{i % 4}" for i in range(n)])
    o = np.array(["ABBA", "BABA"])[(np.arange(n) // 4) % 2]
    size = rng.normal(size=n)
    y = effect * (t == "T1") + 0.5 * size + rng.normal(size=n)
    return t, o, size, y


def test_permanova_equals_anova_on_euclidean_distances():
    """On 1-D data with D = |y_i - y_j|, PERMANOVA's F of each term is the OLS type-II F."""
    t, o, size, y = _design()
    res = cl.permanova(np.abs(y[:, None] - y[None, :]), {"template": t, "order": o}, {"size": size}, n_perm=0)
    T, O, S = cl._dummies(t), cl._dummies(o), (size - size.mean())[:, None]
    I = np.column_stack([T[:, i] * O[:, 0] for i in range(T.shape[1])])
    full = [S, T, O, I]
    assert res.loc["template", "F"] == pytest.approx(_ols_f(y, [S, O], [T], full), rel=1e-9)
    assert res.loc["order", "F"] == pytest.approx(_ols_f(y, [S, T], [O], full), rel=1e-9)
    assert res.loc["template x order", "F"] == pytest.approx(_ols_f(y, [S, T, O], [I], full), rel=1e-9)
    assert res.loc["size", "F"] == pytest.approx(_ols_f(y, [T, O, I], [S], full), rel=1e-9)
    assert res.loc["template", "df"] == 3 and res.loc["template x order", "df"] == 3
    assert res.loc["Residual", "df"] == 40 - 1 - 1 - 3 - 1 - 3
    assert res.loc["Total", "SS"] == pytest.approx(((y - y.mean()) ** 2).sum())


def test_permanova_permutation_p_planted_vs_null():
    t, o, size, y = _design(n=48, seed=1, effect=3.0)
    D = np.abs(y[:, None] - y[None, :])
    res = cl.permanova(D, {"template": t, "order": o}, {"size": size}, n_perm=199, seed=0)
    assert res.loc["template", "p"] == pytest.approx(1 / 200)  # planted: no permutation reaches it
    assert res.loc["template", "n_extreme"] == 0
    assert res.loc["order", "p"] > 0.05  # no order effect planted
    for term in ("template", "order", "template x order", "size"):  # p = (1 + n_extreme) / (n_perm + 1)
        assert res.loc[term, "p"] == (1 + res.loc[term, "n_extreme"]) / 200
    assert np.isnan(res.loc["Residual", "n_extreme"]) and np.isnan(res.loc["Total", "n_extreme"])
    assert res.equals(cl.permanova(D, {"template": t, "order": o}, {"size": size}, n_perm=199, seed=0))
    # null: p-values over many datasets are not concentrated near 0
    ps = []
    for s in range(20):
        tt, oo, ss, yy = _design(n=24, seed=100 + s, effect=0.0)
        ps.append(cl.permanova(np.abs(yy[:, None] - yy[None, :]), {"template": tt}, n_perm=99, seed=s).loc["template", "p"])
    assert np.mean(np.array(ps) < 0.05) <= 0.2 and np.median(ps) > 0.2


def test_permanova_on_jaccard_sets_and_bad_input():
    sets, labels = _planted(n_per=10, seed=2)
    D = cl.distance_matrix(sets)
    order = np.array(["A", "B"] * 10)
    res = cl.permanova(D, {"group": labels.astype(str), "order": order}, {"size": [len(s) for s in sets]},
                       n_perm=99, seed=0)
    assert res.loc["group", "p"] == pytest.approx(0.01) and res.loc["group", "R2"] > 0.3
    assert res.loc["order", "p"] > 0.05
    with pytest.raises(ValueError, match="zero diagonal"):
        cl.permanova(D + 1, {"group": labels})
    with pytest.raises(ValueError, match="labels for"):
        cl.permanova(D, {"group": labels[:5]})
    with pytest.raises(ValueError, match="one or two factors"):
        cl.permanova(D, {})
