"""Same results from the faster PERMANOVA and label-alignment statistics (issue 35) as from the code they
replaced (frozen in tests/accpp/speed_reference.py), on the same random distance matrices.

Tolerances: the permutation counts and p-values must be equal; the F statistics and sums of squares are
sums of the same products taken in another order (one (n x n)(n x p) product per permutation instead of
six per term), so they agree to float rounding, relative 1e-10 asserted (seen: ~6e-15); the ARI is
computed from the same integer pair counts and must be bit-for-bit equal; the gap (between - within
mean distance) from sums instead of means, 1e-12 absolute (seen: ~4e-15)."""
from __future__ import annotations

import numpy as np
import pytest
import speed_reference as ref

from accpp import clustering as cl


def _data(n: int, K: int, seed: int, euclid: bool = True):
    rng = np.random.default_rng(seed)
    tpl = np.repeat(np.arange(K), n // K)
    order = np.tile(["ABBA", "BABA"], n // 2)
    if euclid:
        X = rng.normal(size=(n, 5))
        X[:, 0] += 0.4 * tpl
        X[:, 1] += 0.3 * (order == "ABBA")
        D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
    else:  # Jaccard distances between random sets: not Euclidean embeddable in general
        sets = [set(np.flatnonzero(rng.random(30) < 0.2 + 0.05 * t)) for t in tpl]
        D = cl.distance_matrix(sets)
    return D, tpl, order, rng.normal(size=n)


@pytest.mark.parametrize("euclid", [True, False])
@pytest.mark.parametrize("design", ["two factors + size", "one factor", "no interaction"])
def test_permanova_same_as_before(design, euclid):
    D, tpl, order, size = _data(48, 4, seed=5, euclid=euclid)
    kw = {"two factors + size": dict(factors={"template": tpl, "order": order}, covariates={"size": size}),
          "one factor": dict(factors={"template": tpl}),
          "no interaction": dict(factors={"template": tpl, "order": order}, interaction=False)}[design]
    old = ref.permanova(D, n_perm=199, seed=3, **kw)
    new = cl.permanova(D, n_perm=199, seed=3, **kw)
    assert list(new.index) == list(old.index) and list(new.columns) == list(old.columns)
    assert (new["df"] == old["df"]).all()
    tested = old["n_extreme"].notna()
    assert tested.sum() >= 1
    assert (new.loc[tested, "n_extreme"] == old.loc[tested, "n_extreme"]).all()
    assert (new.loc[tested, "p"] == old.loc[tested, "p"]).all()
    for col in ("SS", "R2", "F"):
        a, b = old[col].to_numpy(float), new[col].to_numpy(float)
        ok = np.isnan(a) == np.isnan(b)
        assert ok.all()
        m = ~np.isnan(a)
        assert np.max(np.abs(a[m] - b[m]) / np.maximum(np.abs(a[m]), 1e-300)) < 1e-10, col


def test_permanova_null_distribution_same_as_before():
    """Not only the counts: every permuted F of one term equals the old code's (a planted wrong
    permutation algebra would move these even where a count happened to agree)."""
    D, tpl, order, size = _data(40, 4, seed=9)
    kw = dict(factors={"template": tpl, "order": order}, covariates={"size": size})
    for n_perm in (0, 1, 37):
        old, new = ref.permanova(D, n_perm=n_perm, seed=1, **kw), cl.permanova(D, n_perm=n_perm, seed=1, **kw)
        assert np.allclose(new["F"].to_numpy(float), old["F"].to_numpy(float), rtol=1e-10, equal_nan=True)
        assert new["n_extreme"].equals(old["n_extreme"]) if n_perm else new["n_extreme"].isna().all()


@pytest.mark.parametrize("case", ["templates", "order within template", "string labels", "two clusters"])
def test_label_alignment_same_as_before(case):
    D, tpl, order, _ = _data(90, 6, seed=2)
    labels, strata, k = {"templates": (tpl, None, None), "order within template": (order, tpl, None),
                         "string labels": ([f"t{t}" for t in tpl], None, None),
                         "two clusters": (tpl, None, 2)}[case]
    Z = cl.average_linkage(D)
    old = ref.label_alignment(D, Z, labels, n_perm=199, seed=4, k=k, strata=strata)
    new = cl.label_alignment(D, Z, labels, n_perm=199, seed=4, k=k, strata=strata)
    assert set(new) == set(old)
    for key in ("k", "ari", "p_ari", "nmi", "within", "between", "p_gap"):
        assert new[key] == old[key], key
    assert abs(new["gap"] - old["gap"]) < 1e-12


def test_permuted_labels_are_permutation_tests_draws():
    """The label alignment's permutations are exactly permutation_test's (same stream, same strata)."""
    lab = np.repeat(np.arange(3), 5)
    strata = np.tile([0, 1, 2], 5)
    rows = cl.permuted_labels(lab, 20, seed=7, strata=strata)
    _, _, null = cl.permutation_test(lambda x: float(x @ np.arange(len(x))), lab, 20, seed=7, strata=strata)
    assert np.array_equal(rows @ np.arange(len(lab)), null)
    for s in np.unique(strata):  # shuffled within strata only
        assert (np.sort(rows[:, strata == s], 1) == np.sort(lab[strata == s])).all()


def test_ari_rows_equals_sklearn_on_every_row():
    rng = np.random.default_rng(0)
    clusters = rng.integers(0, 4, 50)
    X = np.vstack([rng.permutation(np.repeat(np.arange(5), 10)) for _ in range(30)] + [clusters[None] * 0 + clusters])
    got = cl._ari_rows(clusters, X)
    want = np.array([cl.adjusted_rand(clusters, x) for x in X])
    assert np.array_equal(got, want)
    assert got[-1] == 1.0  # identical partitions
