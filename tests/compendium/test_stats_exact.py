"""compendium.stats against values worked out by hand, and every refusal with its whole message.

The closed forms: Clopper-Pearson at k = 0 has the high end 1 - (alpha/2) ** (1/n), at k = n the low
end (alpha/2) ** (1/n); the interval of k successes mirrors that of n - k failures. A bootstrap over
identical units has no spread, so its interval is the statistic itself.
"""
import re

import numpy as np
import pytest

from compendium import stats


@pytest.mark.parametrize("n", [1, 4, 37])
@pytest.mark.parametrize("level", [0.95, 0.8])
def test_clopper_pearson_ends_in_closed_form(n, level):
    a = (1 - level) / 2
    lo0, hi0 = stats.binomial_ci(0, n, level)
    lon, hin = stats.binomial_ci(n, n, level)
    assert lo0 == 0.0 and hin == 1.0
    assert hi0 == pytest.approx(1 - a ** (1 / n), rel=1e-12)
    assert lon == pytest.approx(a ** (1 / n), rel=1e-12)


def test_clopper_pearson_mirrors_successes_and_failures():
    lo, hi = stats.binomial_ci(3, 11)
    mlo, mhi = stats.binomial_ci(8, 11)
    assert lo == pytest.approx(1 - mhi, abs=1e-14) and hi == pytest.approx(1 - mlo, abs=1e-14)
    assert 0 < lo < 3 / 11 < hi < 1


def test_clopper_pearson_one_trial_at_95_percent():
    # n = 1, k = 1: low end 0.025 exactly; k = 0: high end 0.975
    assert stats.binomial_ci(1, 1) == (pytest.approx(0.025, abs=1e-14), 1.0)
    assert stats.binomial_ci(0, 1) == (0.0, pytest.approx(0.975, abs=1e-14))


@pytest.mark.parametrize("level", [0.0, 1.0, -0.5, 1.5])
def test_clopper_pearson_refuses_a_level_outside_the_open_unit_interval(level):
    with pytest.raises(ValueError, match=re.escape(f"level must lie in (0, 1), got {level}")):
        stats.binomial_ci(1, 2, level)


@pytest.mark.parametrize("k,n,bad", [(-1, 5, "k must be a count (an integer >= 0), got -1"),
                                     (1.0, 5, "k must be a count (an integer >= 0), got 1.0"),
                                     (True, 5, "k must be a count (an integer >= 0), got True"),
                                     (1, -5, "n must be a count (an integer >= 0), got -5"),
                                     (1, 2.5, "n must be a count (an integer >= 0), got 2.5")])
def test_clopper_pearson_names_the_argument_that_is_not_a_count(k, n, bad):
    with pytest.raises(ValueError) as e:
        stats.binomial_ci(k, n)
    assert str(e.value) == bad


@pytest.mark.parametrize("k,n", [(0, 0), (3, 2)])
def test_clopper_pearson_refuses_impossible_counts(k, n):
    with pytest.raises(ValueError) as e:
        stats.binomial_ci(k, n)
    assert str(e.value) == f"binomial_ci needs 0 <= k <= n and n >= 1, got k={k}, n={n}"


def test_permutation_p_uses_the_plus_one_convention_at_its_edges():
    assert stats.permutation_p(0, 1) == 0.5
    assert stats.permutation_p(1, 1) == 1.0
    assert stats.permutation_p(0, 999) == 0.001
    assert stats.permutation_p(49, 999) == 0.05


@pytest.mark.parametrize("fn,count,n_perm,msg", [
    ("permutation_p", -1, 10, "count must be a count (an integer >= 0), got -1"),
    ("permutation_p", 1, 10.0, "n_perm must be a count (an integer >= 0), got 10.0"),
    ("permutation_p", 0, 0, "permutation_p needs 0 <= count <= n_perm and n_perm >= 1, got 0 of 0"),
    ("permutation_p", 11, 10, "permutation_p needs 0 <= count <= n_perm and n_perm >= 1, got 11 of 10"),
    ("permutation_p_interval", -2, 10, "count must be a count (an integer >= 0), got -2"),
    ("permutation_p_interval", 2, -10, "n_perm must be a count (an integer >= 0), got -10"),
    ("permutation_p_interval", 11, 10, "permutation_p_interval: count 11 exceeds n_perm 10"),
])
def test_permutation_refusals(fn, count, n_perm, msg):
    with pytest.raises(ValueError) as e:
        getattr(stats, fn)(count, n_perm)
    assert str(e.value) == msg


def test_permutation_p_interval_is_clopper_pearson_at_the_level_asked():
    assert stats.permutation_p_interval(0, 72, 0.8) == stats.binomial_ci(0, 72, 0.8)
    assert stats.permutation_p_interval(0, 72, 0.8) != stats.binomial_ci(0, 72)
    lo, hi = stats.permutation_p_interval(0, 72)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 72), rel=1e-12) and hi < 0.05


def test_geometric_mean_of_a_ratio_and_its_reciprocal_is_one():
    assert stats.geometric_mean([4.0, 0.25]) == pytest.approx(1.0, abs=1e-15)
    assert stats.geometric_mean([2.0, 8.0]) == pytest.approx(4.0, rel=1e-15)


def test_geometric_mean_ci_of_identical_ratios_is_that_ratio_and_follows_the_seed_and_size():
    assert stats.geometric_mean_ci([3.0] * 5) == (pytest.approx(3.0, rel=1e-14), pytest.approx(3.0, rel=1e-14))
    x = [0.5, 1.0, 2.0, 4.0, 8.0, 1.5]
    lo, hi = stats.geometric_mean_ci(x)
    # the same as exponentiating bootstrap_mean_ci of the logs with the default 2000 resamples, seed 0
    blo, bhi = stats.bootstrap_mean_ci(np.log(x), n_boot=2000, seed=0)
    assert (lo, hi) == (pytest.approx(np.exp(blo), rel=1e-15), pytest.approx(np.exp(bhi), rel=1e-15))
    assert stats.geometric_mean_ci(x, seed=1) != (lo, hi)
    # n_boot and level reach the resampling: 500 resamples or a 50% level give the logs' interval for those
    for kw in ({"n_boot": 500}, {"level": 0.5}):
        blo, bhi = stats.bootstrap_mean_ci(np.log(x), seed=0, **kw)
        assert stats.geometric_mean_ci(x, **kw) == (pytest.approx(np.exp(blo), rel=1e-15),
                                                    pytest.approx(np.exp(bhi), rel=1e-15))


@pytest.mark.parametrize("bad,shown", [([1.0, 0.0, 2.0], "[0.0]"), ([1.0, -3.0, np.inf], "[-3.0, inf]"),
                                       ([np.nan, 2.0], "[nan]"),
                                       ([0.0, -1.0, -2.0, -3.0, 5.0], "[0.0, -1.0, -2.0]")])   # the first three only
def test_geometric_mean_refuses_non_positive_ratios_and_shows_them(bad, shown):
    with pytest.raises(ValueError) as e:
        stats.geometric_mean(bad)
    assert str(e.value) == f"geometric_mean needs finite positive ratios, got {shown}"
    with pytest.raises(ValueError) as e:
        stats.geometric_mean_ci(bad)
    assert str(e.value) == f"geometric_mean_ci needs finite positive ratios, got {shown}"


def test_bootstrap_ratio_ci_is_a_ratio_of_sums_not_a_mean_of_ratios():
    # identical units: no spread, so the interval is the pooled ratio itself
    lo, hi = stats.bootstrap_ratio_ci([2.0, 2.0, 2.0], [4.0, 4.0, 4.0])
    assert lo == pytest.approx(0.5, rel=1e-15) and hi == pytest.approx(0.5, rel=1e-15)
    # two kinds of unit, (1, 1) and (3, 9): a resample of m units (1, 1) and 6 - m units (3, 9) has the
    # pooled ratio (m + 3(6 - m)) / (m + 9(6 - m)), one of seven values; with 4000 resamples the order
    # statistics around each quantile are equal, so both ends are such values
    num, den = [1.0, 1.0, 1.0, 3.0, 3.0, 3.0], [1.0, 1.0, 1.0, 9.0, 9.0, 9.0]
    lo, hi = stats.bootstrap_ratio_ci(num, den, n_boot=4000)
    allowed = {round((m + 3 * (6 - m)) / (m + 9 * (6 - m)), 12) for m in range(7)}
    assert round(lo, 12) in allowed and round(hi, 12) in allowed
    assert lo < 12 / 30 < hi   # the pooled ratio (3 + 9) / (3 + 27) lies inside
    assert hi <= 1 / 3 + 2 / 3 * 0.5   # below 2/3, the mean of the per-unit ratios of the whole sample


def test_bootstrap_ratio_ci_level_and_seed_are_used():
    rng = np.random.default_rng(3)
    num, den = rng.uniform(0, 2, 40), rng.uniform(1, 3, 40)
    wide, narrow = stats.bootstrap_ratio_ci(num, den), stats.bootstrap_ratio_ci(num, den, level=0.5)
    assert wide[0] < narrow[0] < narrow[1] < wide[1]
    assert stats.bootstrap_ratio_ci(num, den, seed=1) != wide
    assert stats.bootstrap_ratio_ci(num, den, n_boot=500) != wide


def test_bootstrap_ratio_ci_empty_resamples():
    # one unit with den 0 among units with den 1: resamples of only that unit take `empty`
    num, den = [1.0, 5.0], [0.0, 1.0]
    with pytest.raises(ValueError) as e:
        stats.bootstrap_ratio_ci(num, den, n_boot=200)
    assert str(e.value) == ("bootstrap_ratio_ci: a resample's denominators sum to 0; give `empty`, the value such a "
                            "resample takes")
    lo, hi = stats.bootstrap_ratio_ci(num, den, n_boot=200, empty=-7.0)
    # denominators that sum to exactly 1 (or any positive value) are not empty: no refusal without `empty`
    assert stats.bootstrap_ratio_ci([3.0, 3.0], [0.5, 0.5], n_boot=50) == (6.0, 6.0)   # every resample: 6 / 1
    assert stats.bootstrap_ratio_ci([3.0], [1.0], n_boot=50) == (3.0, 3.0)
    assert lo == -7.0 and hi == pytest.approx(6.0, rel=1e-15)   # resamples: (A, A) -> empty, (A, B) -> 6 / 1, (B, B) -> 10 / 2


@pytest.mark.parametrize("num,den,msg", [
    ([1.0, 2.0], [1.0], "bootstrap_ratio_ci: numerators and denominators differ in shape: (2,) vs (1,)"),
    ([], [1.0], "bootstrap_ratio_ci needs a non-empty 1-D sample, got shape (0,)"),
    ([1.0], [[1.0]], "bootstrap_ratio_ci needs a non-empty 1-D sample, got shape (1, 1)"),
    ([1.0, np.nan], [1.0, 1.0], "bootstrap_ratio_ci needs finite numerators and finite denominators >= 0"),
    ([1.0, 1.0], [1.0, np.inf], "bootstrap_ratio_ci needs finite numerators and finite denominators >= 0"),
    ([1.0, 1.0], [1.0, -0.5], "bootstrap_ratio_ci needs finite numerators and finite denominators >= 0"),
])
def test_bootstrap_ratio_ci_refusals(num, den, msg):
    with pytest.raises(ValueError) as e:
        stats.bootstrap_ratio_ci(num, den)
    assert str(e.value) == msg
