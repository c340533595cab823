"""compendium.stats: the one home of the percentile-bootstrap intervals."""
import numpy as np
import pytest

from compendium import stats


def test_mean_ci_is_the_percentile_bootstrap_by_hand():
    x = np.random.default_rng(5).normal(1.0, 2.0, size=40)
    rng = np.random.default_rng(3)
    means = x[rng.integers(0, 40, size=(500, 40))].mean(1)
    want = (np.quantile(means, 0.05), np.quantile(means, 0.95))  # level 0.9
    assert stats.bootstrap_mean_ci(x, n_boot=500, seed=3, level=0.9) == pytest.approx(want, rel=1e-12)
    assert stats.bootstrap_mean_ci(x, seed=1) == stats.bootstrap_mean_ci(x, seed=1)
    assert stats.bootstrap_mean_ci(x, seed=1) != stats.bootstrap_mean_ci(x, seed=2)


def test_mean_ci_covers_the_mean_and_shrinks_with_n():
    rng = np.random.default_rng(0)
    small, large = rng.normal(size=20), rng.normal(size=2000)
    for x in (small, large):
        lo, hi = stats.bootstrap_mean_ci(x)
        assert lo < x.mean() < hi
    w = lambda x: np.subtract(*stats.bootstrap_mean_ci(x)[::-1])  # noqa: E731
    assert w(large) < w(small) / 5
    assert stats.bootstrap_mean_ci(np.full(30, 0.25)) == (0.25, 0.25)


def test_paired_and_unpaired():
    rng = np.random.default_rng(1)
    a = rng.normal(size=50)
    b = a + 0.5 + 0.01 * rng.normal(size=50)
    lo, hi = stats.paired_bootstrap_ci(b, a)
    assert 0.49 < lo < 0.5 < hi < 0.51                     # pairing removes the shared noise
    lo_u, hi_u = stats.bootstrap_diff_ci(b, a)
    assert lo_u < lo and hi_u > hi                         # unpaired: the noise stays in
    with pytest.raises(ValueError, match="shape"):
        stats.paired_bootstrap_ci(a, a[:-1])


@pytest.mark.parametrize("bad", [[], np.zeros((2, 3))])
def test_bad_samples(bad):
    with pytest.raises(ValueError, match="non-empty 1-D"):
        stats.bootstrap_mean_ci(bad)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        stats.bootstrap_diff_ci(bad, [1.0])


def test_bad_level():
    with pytest.raises(ValueError, match="level"):
        stats.bootstrap_mean_ci([1.0, 2.0], level=1.5)


def test_paired_statistic_ci_resamples_units_together():
    rng = np.random.default_rng(2)
    a = rng.uniform(1, 2, size=30)
    b = 3 * a
    # the units move together: the ratio of means is exactly 3 in every resample
    assert stats.bootstrap_paired_ci(lambda x, y: y.mean(1) / x.mean(1), a, b) == pytest.approx((3, 3), rel=1e-12)
    idx = np.random.default_rng(5).integers(0, 30, size=(300, 30))
    want = np.quantile(a[idx].mean(1), [0.025, 0.975])
    assert stats.bootstrap_paired_ci(lambda x: x.mean(1), a, n_boot=300, seed=5) == pytest.approx(tuple(want), rel=1e-12)
    assert stats.bootstrap_paired_ci(lambda x: x.mean(1), a, n_boot=300, seed=5) == stats.bootstrap_mean_ci(a, n_boot=300, seed=5)
    with pytest.raises(ValueError, match="one length"):
        stats.bootstrap_paired_ci(lambda x, y: x.mean(1), a, b[:-1])


def test_the_defaults_are_2000_resamples_seed_0_and_95_percent():
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=25), rng.normal(0.3, 1.0, size=25)
    idx = np.random.default_rng(0).integers(0, 25, size=(2000, 25))

    def q(s):
        return pytest.approx((np.quantile(s, 0.025), np.quantile(s, 0.975)), rel=1e-12)

    assert stats.bootstrap_mean_ci(a) == q(a[idx].mean(1))
    assert stats.paired_bootstrap_ci(b, a) == q((b - a)[idx].mean(1))
    assert stats.bootstrap_paired_ci(lambda x, y: y.mean(1) - x.mean(1), a, b) == q(b[idx].mean(1) - a[idx].mean(1))
    r = np.random.default_rng(0)
    ia, ib = r.integers(0, 25, size=(2000, 25)), r.integers(0, 25, size=(2000, 25))
    assert stats.bootstrap_diff_ci(b, a) == q(b[ia].mean(1) - a[ib].mean(1))


def test_unpaired_samples_may_differ_in_length_and_each_is_checked():
    a, b = np.arange(10.0), np.arange(4.0)
    lo, hi = stats.bootstrap_diff_ci(a, b, n_boot=300, seed=2, level=0.9)
    r = np.random.default_rng(2)
    ia, ib = r.integers(0, 10, size=(300, 10)), r.integers(0, 4, size=(300, 4))
    want = a[ia].mean(1) - b[ib].mean(1)
    assert (lo, hi) == pytest.approx((np.quantile(want, 0.05), np.quantile(want, 0.95)), rel=1e-12)
    with pytest.raises(ValueError, match=r"bootstrap_diff_ci needs a non-empty 1-D sample, got shape \(0,\)"):
        stats.bootstrap_diff_ci([1.0], [])
    with pytest.raises(ValueError, match=r"^bootstrap_paired_ci needs a non-empty 1-D sample"):
        stats.bootstrap_paired_ci(lambda x: x.mean(1), [])
    with pytest.raises(ValueError, match=r"^paired samples must have one length, got \[2, 1\]$"):
        stats.bootstrap_paired_ci(lambda x, y: x.mean(1), [1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match=r"^level must lie in \(0, 1\), got 1$"):
        stats.bootstrap_mean_ci([1.0, 2.0], level=1)
    with pytest.raises(ValueError, match=r"^level must lie in \(0, 1\), got 0$"):
        stats.bootstrap_mean_ci([1.0, 2.0], level=0)


def test_paired_passes_its_settings_on_and_errors_name_the_function():
    rng = np.random.default_rng(11)
    a, b = rng.normal(size=15), rng.normal(size=15)
    assert stats.paired_bootstrap_ci(b, a, n_boot=300, seed=4, level=0.8) == \
        stats.bootstrap_mean_ci(b - a, n_boot=300, seed=4, level=0.8)
    assert stats.paired_bootstrap_ci(b, a, n_boot=300, seed=4, level=0.8) != stats.paired_bootstrap_ci(b, a)
    with pytest.raises(ValueError, match=r"^bootstrap_mean_ci needs a non-empty 1-D sample, got shape \(0,\)$"):
        stats.bootstrap_mean_ci([])
    with pytest.raises(ValueError, match=r"^bootstrap_diff_ci needs a non-empty 1-D sample, got shape \(0,\)$"):
        stats.bootstrap_diff_ci([], [1.0])
    with pytest.raises(ValueError, match=r"^paired samples differ in shape: \(2,\) vs \(1,\)$"):
        stats.paired_bootstrap_ci([1.0, 2.0], [1.0])


def test_geometric_mean_and_its_interval_by_hand():
    x = [1.8, 20.8, 16.1, 5.0]
    assert stats.geometric_mean(x) == pytest.approx((1.8 * 20.8 * 16.1 * 5.0) ** 0.25, rel=1e-12)
    assert stats.geometric_mean([2.0, 0.5]) == pytest.approx(1.0)   # a ratio and its reciprocal cancel
    lo, hi = stats.geometric_mean_ci(x, n_boot=500, seed=3)
    logs = np.log(x)
    idx = np.random.default_rng(3).integers(0, 4, size=(500, 4))
    means = logs[idx].mean(1)
    assert (lo, hi) == pytest.approx((np.exp(np.quantile(means, 0.025)), np.exp(np.quantile(means, 0.975))), rel=1e-12)
    assert lo < stats.geometric_mean(x) < hi


@pytest.mark.parametrize("bad", [[1.0, 0.0], [2.0, -1.0], [1.0, float("inf")], []])
def test_geometric_mean_refuses_what_is_not_a_positive_ratio(bad):
    with pytest.raises(ValueError, match="geometric_mean"):
        stats.geometric_mean(bad)
    with pytest.raises(ValueError, match="geometric_mean_ci"):
        stats.geometric_mean_ci(bad)


def test_groups_ci_by_hand_pairs_within_a_group_and_draws_groups_apart():
    a = np.array([1.0, 2.0, 4.0, 8.0, 3.0])
    b = np.array([0.5, 2.5, 3.0, 9.0, 1.0])            # paired with a
    c = np.array([0.2, 0.9, 0.4])                      # another group, of another length

    def stat(g1, g2):
        (x, y), (z,) = g1, g2
        return y.mean(1) / x.mean(1) - z.mean(1)

    rng = np.random.default_rng(4)
    i1 = rng.integers(0, 5, size=(300, 5))             # the first group's draw, a and b alike
    i2 = rng.integers(0, 3, size=(300, 3))             # then the second group's
    want = b[i1].mean(1) / a[i1].mean(1) - c[i2].mean(1)
    got = stats.bootstrap_groups_ci(stat, (a, b), (c,), n_boot=300, seed=4, level=0.9)
    assert got == pytest.approx((np.quantile(want, 0.05), np.quantile(want, 0.95)), rel=1e-12)


def test_groups_ci_single_units_and_exact_pairs_give_a_point():
    # one unit per group: every resample is the same, the interval is the value itself (5 - 1 = 4)
    assert stats.bootstrap_groups_ci(lambda g, h: h[0].mean(1) - g[0].mean(1), ([1.0],), ([5.0, 5.0],)) == (4.0, 4.0)
    # b = 3 a unit by unit: drawn with the same indices the ratio of means is exactly 3 in every resample
    a = np.random.default_rng(0).uniform(1, 2, size=25)
    assert stats.bootstrap_groups_ci(lambda g: g[1].mean(1) / g[0].mean(1), (a, 3 * a)) == pytest.approx((3, 3), rel=1e-12)


def test_groups_ci_draws_each_group_on_its_own():
    # the same units in two groups: drawn apart, the difference of their means spreads around 0
    # (drawn with one set of indices it would be exactly 0)
    x = np.random.default_rng(1).normal(size=30)
    lo, hi = stats.bootstrap_groups_ci(lambda g, h: g[0].mean(1) - h[0].mean(1), (x,), (x,))
    assert lo < -0.2 and hi > 0.2


def test_groups_ci_of_one_sample_is_the_mean_ci_and_defaults():
    x = np.random.default_rng(2).normal(size=17)
    assert stats.bootstrap_groups_ci(lambda g: g[0].mean(1), (x,)) == stats.bootstrap_mean_ci(x)
    assert stats.bootstrap_groups_ci(lambda g: g[0].mean(1), [x], n_boot=300, seed=6, level=0.8) == \
        stats.bootstrap_mean_ci(x, n_boot=300, seed=6, level=0.8)


def test_groups_ci_refuses_bad_groups_and_statistics():
    with pytest.raises(ValueError, match=r"^bootstrap_groups_ci needs at least one group$"):
        stats.bootstrap_groups_ci(lambda: None)
    with pytest.raises(ValueError, match=r"^group 1 must be a non-empty tuple of samples, got ndarray$"):
        stats.bootstrap_groups_ci(lambda g, h: g[0].mean(1), ([1.0],), np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"^group 0 must be a non-empty tuple of samples, got tuple$"):
        stats.bootstrap_groups_ci(lambda g: g[0].mean(1), ())
    with pytest.raises(ValueError, match=r"^the samples of group 0 must have one length, got \[2, 1\]$"):
        stats.bootstrap_groups_ci(lambda g: g[0].mean(1), ([1.0, 2.0], [1.0]))
    with pytest.raises(ValueError, match=r"^bootstrap_groups_ci needs a non-empty 1-D sample"):
        stats.bootstrap_groups_ci(lambda g: g[0].mean(1), ([],))
    with pytest.raises(ValueError, match=r"must give 2000 finite values, got shape \(2000,\) with 2000 not finite"):
        stats.bootstrap_groups_ci(lambda g: g[0].mean(1) / 0.0 * 0.0, ([1.0, 2.0],))
    with pytest.raises(ValueError, match=r"must give 50 finite values, got shape \(50, 2\)"):
        stats.bootstrap_groups_ci(lambda g: g[0], ([1.0, 2.0],), n_boot=50)

# ----------------------------------------------------------------------------- pooled ratios
def test_ratio_ci_is_the_percentile_bootstrap_of_the_pooled_ratio_by_hand():
    rng = np.random.default_rng(8)
    num, den = rng.uniform(0, 2, size=12), rng.uniform(1, 3, size=12)
    idx = np.random.default_rng(6).integers(0, 12, size=(400, 12))
    pooled = num[idx].sum(1) / den[idx].sum(1)
    want = (np.quantile(pooled, 0.05), np.quantile(pooled, 0.95))  # level 0.9
    assert stats.bootstrap_ratio_ci(num, den, n_boot=400, seed=6, level=0.9) == pytest.approx(want, rel=1e-12)
    idx0 = np.random.default_rng(0).integers(0, 12, size=(2000, 12))
    pooled0 = num[idx0].sum(1) / den[idx0].sum(1)
    assert stats.bootstrap_ratio_ci(num, den) == pytest.approx(
        (np.quantile(pooled0, 0.025), np.quantile(pooled0, 0.975)), rel=1e-12)


def test_ratio_ci_pools_the_units_instead_of_averaging_their_ratios():
    # units (1/1) and (0/99): a resample holds both of one (ratio 1 or 0, each 1/4) or one of each
    # (pooled 1/100, half of the resamples); the mean of the per-unit ratios would give 1/2 there
    assert stats.bootstrap_ratio_ci([1.0, 0.0], [1.0, 99.0], level=0.4) == (0.01, 0.01)


def test_ratio_ci_resamples_with_no_denominator():
    # units (1/1) and (0/0): a resample of the second unit only (a quarter of them) has no ratio
    with pytest.raises(ValueError, match="denominators sum to 0; give `empty`"):
        stats.bootstrap_ratio_ci([1.0, 0.0], [1.0, 0.0])
    assert stats.bootstrap_ratio_ci([1.0, 0.0], [1.0, 0.0], level=0.9, empty=0.0) == (0.0, 1.0)
    assert stats.bootstrap_ratio_ci([1.0, 0.0], [1.0, 0.0], level=0.9, empty=0.5) == (0.5, 1.0)
    with pytest.raises(ValueError, match="denominators >= 0"):
        stats.bootstrap_ratio_ci([1.0, 1.0], [2.0, -1.0])
    with pytest.raises(ValueError, match=r"differ in shape: \(2,\) vs \(1,\)"):
        stats.bootstrap_ratio_ci([1.0, 1.0], [2.0])


# ----------------------------------------------------------------------------- counts
def test_binomial_ci_is_clopper_pearson_by_hand():
    # closed forms: Beta(1, 2) has cdf 1 - (1 - x)^2, Beta(2, 1) has x^2, Beta(1, n) has 1 - (1 - x)^n
    assert stats.binomial_ci(1, 2) == pytest.approx((1 - 0.975 ** 0.5, 0.975 ** 0.5), rel=1e-12)
    assert stats.binomial_ci(0, 10) == pytest.approx((0.0, 1 - 0.025 ** 0.1), rel=1e-12)
    assert stats.binomial_ci(10, 10) == pytest.approx((0.025 ** 0.1, 1.0), rel=1e-12)
    assert stats.binomial_ci(0, 10, level=0.9) == pytest.approx((0.0, 1 - 0.05 ** 0.1), rel=1e-12)
    assert stats.binomial_ci(0, 10)[0] == 0.0 and stats.binomial_ci(1, 10)[0] > 0  # low end > 0 iff k >= 1
    with pytest.raises(ValueError, match="0 <= k <= n"):
        stats.binomial_ci(3, 2)
    with pytest.raises(ValueError, match="must be a count"):
        stats.binomial_ci(0.5, 2)
    with pytest.raises(ValueError, match="level"):
        stats.binomial_ci(1, 2, level=1.0)


def test_permutation_p_keeps_the_plus_one_convention():
    assert stats.permutation_p(0, 99) == 0.01 and stats.permutation_p(5, 19) == 0.3 and stats.permutation_p(19, 19) == 1.0
    with pytest.raises(ValueError, match="0 <= count <= n_perm"):
        stats.permutation_p(20, 19)
    with pytest.raises(ValueError, match="must be a count"):
        stats.permutation_p(-1, 19)


def test_permutation_p_interval_is_clopper_pearson_of_the_count_over_n_perm():
    # count 0 of 99 draws: the high end solves (1 - p)^99 = 0.025; neither count + 1 nor n_perm + 1
    assert stats.permutation_p_interval(0, 99) == pytest.approx((0.0, 1 - 0.025 ** (1 / 99)), rel=1e-12)
    assert stats.permutation_p_interval(99, 99) == pytest.approx((0.025 ** (1 / 99), 1.0), rel=1e-12)
    assert stats.permutation_p_interval(1, 2) == stats.binomial_ci(1, 2)
    # at count 0 the whole interval is <= 0.05 only from 72 draws on (19 draws: inconclusive at best)
    assert stats.permutation_p_interval(0, 71)[1] > 0.05 >= stats.permutation_p_interval(0, 72)[1]
    assert stats.permutation_p_interval(0, 19)[1] == pytest.approx(1 - 0.025 ** (1 / 19), rel=1e-12)
    for n in (19, 99):   # the +1 point value always lies inside its interval
        for count in range(n + 1):
            lo, hi = stats.permutation_p_interval(count, n)
            assert lo <= count / n <= hi and lo < stats.permutation_p(count, n) <= hi
    with pytest.raises(ValueError, match="exceeds n_perm"):
        stats.permutation_p_interval(100, 99)
