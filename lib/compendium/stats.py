"""Intervals shared by both papers' measurements (one home, seeded where they resample).

Percentile bootstrap (``bootstrap_*``, ``paired_bootstrap_ci``, ``geometric_mean_ci``): each
resamples the sample's entries with replacement ``n_boot`` times (numpy's default_rng(seed)),
takes the statistic of each resample and returns the (1 - level) / 2 and 1 - (1 - level) / 2
quantiles. Deterministic for a seed; ValueError for an empty or non-1-D sample.

Counts (``binomial_ci``, ``permutation_p_interval``): exact Clopper-Pearson intervals of a
proportion from k successes in n trials, nothing resampled.
"""
from __future__ import annotations

import numpy as np


def _sample(x, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or len(x) == 0:
        raise ValueError(f"{name} needs a non-empty 1-D sample, got shape {x.shape}")
    return x


def _quantiles(stats: np.ndarray, level: float) -> tuple[float, float]:
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    a = (1 - level) / 2
    return float(np.quantile(stats, a)), float(np.quantile(stats, 1 - a))


def bootstrap_mean_ci(x, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Interval of the mean of ``x``."""
    x = _sample(x, "bootstrap_mean_ci")
    rng = np.random.default_rng(seed)
    return _quantiles(x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(1), level)


def bootstrap_paired_ci(statistic, *samples, n_boot: int = 2000, seed: int = 0,
                        level: float = 0.95) -> tuple[float, float]:
    """Interval of ``statistic(*resampled)`` over paired samples (the same units drawn for each):
    ``statistic`` takes arrays of shape (n_boot, n), one per sample, and returns (n_boot,)."""
    xs = [_sample(x, "bootstrap_paired_ci") for x in samples]
    if not xs or len({len(x) for x in xs}) != 1:
        raise ValueError(f"paired samples must have one length, got {[len(x) for x in xs]}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(xs[0]), size=(n_boot, len(xs[0])))
    return _quantiles(np.asarray(statistic(*(x[idx] for x in xs)), dtype=np.float64), level)


def paired_bootstrap_ci(x, y, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Interval of mean(x - y) over paired samples (the pairs resampled together)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"paired samples differ in shape: {x.shape} vs {y.shape}")
    return bootstrap_mean_ci(x - y, n_boot=n_boot, seed=seed, level=level)


def two_level_gap_ci(a, b, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Interval of the gap mean_units(mean_rows(a) - mean_rows(b)) from a two-level bootstrap.

    ``a``: (Sa, n) and ``b``: (Sb, n), one row per replicate (e.g. a model trained with another seed),
    one column per unit (e.g. a validation block), the same units in both. Each resample draws the
    units with replacement (the same units for both), then, independently, Sa rows of ``a`` and Sb rows
    of ``b`` with replacement, and takes the gap of those draws. The units are drawn first, as in
    :func:`paired_bootstrap_ci`, so with one row each the resamples, and the interval, are exactly
    that function's on (a[0], b[0]); with more rows the spread between replicates widens the interval."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1] or 0 in a.shape + b.shape:
        raise ValueError(f"two_level_gap_ci needs non-empty (replicates, units) arrays over the same units, got "
                         f"{a.shape} and {b.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("two_level_gap_ci needs finite values")
    n = a.shape[1]
    rng = np.random.default_rng(seed)
    units = rng.integers(0, n, size=(n_boot, n))

    def weights(k: int) -> np.ndarray:       # (n_boot, k): how often each row is drawn, over k
        draws = rng.integers(0, k, size=(n_boot, k))
        return np.stack([np.bincount(d, minlength=k) for d in draws]) / k

    wa, wb = weights(a.shape[0]), weights(b.shape[0])
    stat = np.empty(n_boot)
    for i in range(n_boot):                  # one resample at a time: (n,) rows of memory, not (n_boot, n)
        d = wa[i] @ a - wb[i] @ b
        stat[i] = d[units[i]].mean()
    return _quantiles(stat, level)


def bootstrap_diff_ci(a, b, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Interval of mean(a) - mean(b), a and b resampled independently (unpaired samples)."""
    a, b = _sample(a, "bootstrap_diff_ci"), _sample(b, "bootstrap_diff_ci")
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, len(a), size=(n_boot, len(a)))
    ib = rng.integers(0, len(b), size=(n_boot, len(b)))
    return _quantiles(a[ia].mean(1) - b[ib].mean(1), level)


def bootstrap_ratio_ci(num, den, n_boot: int = 2000, seed: int = 0, level: float = 0.95,
                       empty: float | None = None) -> tuple[float, float]:
    """Interval of the pooled ratio sum(num) / sum(den) over units (num_i, den_i) resampled together
    (a ratio of sums, not the mean of the per-unit ratios num_i / den_i).

    ``den`` must be >= 0. A resample whose denominators sum to 0 has no ratio: it takes the value
    ``empty``, or, when ``empty`` is None, the call raises ValueError.
    """
    num, den = _sample(num, "bootstrap_ratio_ci"), _sample(den, "bootstrap_ratio_ci")
    if num.shape != den.shape:
        raise ValueError(f"bootstrap_ratio_ci: numerators and denominators differ in shape: {num.shape} vs {den.shape}")
    if not (np.all(np.isfinite(num)) and np.all(np.isfinite(den))) or np.any(den < 0):
        raise ValueError("bootstrap_ratio_ci needs finite numerators and finite denominators >= 0")

    def ratio(n, d):
        sn, sd = n.sum(1), d.sum(1)
        if empty is None and np.any(sd == 0):
            raise ValueError("bootstrap_ratio_ci: a resample's denominators sum to 0; give `empty`, the value such a "
                             "resample takes")
        return np.where(sd > 0, sn / np.where(sd > 0, sd, 1.0), 0.0 if empty is None else empty)

    return bootstrap_paired_ci(ratio, num, den, n_boot=n_boot, seed=seed, level=level)


def binomial_ci(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson (exact) interval of a proportion from ``k`` successes in ``n`` trials: the low
    end is the (1 - level) / 2 quantile of Beta(k, n - k + 1), 0 when k = 0; the high end the
    1 - (1 - level) / 2 quantile of Beta(k + 1, n - k), 1 when k = n. So the low end is above 0 exactly
    when k >= 1, and the high end below 1 exactly when k < n."""
    from scipy.stats import beta

    k, n = _count(k, "k"), _count(n, "n")
    if n < 1 or k > n:
        raise ValueError(f"binomial_ci needs 0 <= k <= n and n >= 1, got k={k}, n={n}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def permutation_p(count: int, n_perm: int) -> float:
    """The Monte-Carlo permutation p-value with the +1 convention: (1 + count) / (n_perm + 1), where
    ``count`` of ``n_perm`` random permutations (or random draws) give a statistic at least as extreme as
    the observed one. The observed arrangement counts as one of the draws, so p is never 0 and
    P(p <= alpha) <= alpha under the null at any n_perm."""
    count, n_perm = _count(count, "count"), _count(n_perm, "n_perm")
    if n_perm < 1 or count > n_perm:
        raise ValueError(f"permutation_p needs 0 <= count <= n_perm and n_perm >= 1, got {count} of {n_perm}")
    return (1 + count) / (n_perm + 1)


def permutation_p_interval(count: int, n_perm: int, level: float = 0.95) -> tuple[float, float]:
    """Monte-Carlo interval of a permutation p-value: the Clopper-Pearson interval (:func:`binomial_ci`)
    of the exact p (the fraction of all permutations at least as extreme, the limit of infinitely many
    draws) from ``count`` of ``n_perm`` draws at least as extreme as the observed statistic; ``count``
    excludes the observed arrangement. The point p that goes with it keeps the +1 convention
    (:func:`permutation_p`, (1 + count) / (n_perm + 1)), which always lies inside this interval (it is the
    mean of the Beta distribution whose upper quantile is the high end). At count 0 the high end is
    1 - ((1 - level) / 2) ** (1 / n_perm): at 95%, at most 0.05 only from n_perm = 72 on."""
    if _count(count, "count") > _count(n_perm, "n_perm"):
        raise ValueError(f"permutation_p_interval: count {count} exceeds n_perm {n_perm}")
    return binomial_ci(count, n_perm, level)


def _count(x, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 0:
        raise ValueError(f"{name} must be a count (an integer >= 0), got {x!r}")
    return int(x)


def geometric_mean(x) -> float:
    """exp(mean(log x)) of positive ratios (a ratio and its reciprocal weigh the same)."""
    x = _positive(x, "geometric_mean")
    return float(np.exp(np.log(x).mean()))


def geometric_mean_ci(x, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Interval of the geometric mean of positive ratios ``x`` (the mean of their logs resampled,
    then exponentiated)."""
    x = _positive(x, "geometric_mean_ci")
    lo, hi = bootstrap_mean_ci(np.log(x), n_boot=n_boot, seed=seed, level=level)
    return float(np.exp(lo)), float(np.exp(hi))


def _positive(x, name: str) -> np.ndarray:
    x = _sample(x, name)
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError(f"{name} needs finite positive ratios, got {x[~(np.isfinite(x) & (x > 0))][:3].tolist()}")
    return x


def bootstrap_groups_ci(statistic, *groups, n_boot: int = 2000, seed: int = 0,
                        level: float = 0.95) -> tuple[float, float]:
    """Interval of ``statistic(*resampled groups)`` over groups of units resampled each on its own.

    A group is a tuple of paired samples of one length (its units, e.g. one set of contexts with the
    intact and the edited probability of each); every sample of a group is drawn with the same
    indices, and the groups one after the other from one generator (numpy's default_rng(seed)), so
    that one group of one sample is :func:`bootstrap_mean_ci`'s draw. ``statistic`` takes one tuple
    of (n_boot, n_group) arrays per group and returns (n_boot,) values, which must be finite."""
    if not groups:
        raise ValueError("bootstrap_groups_ci needs at least one group")
    samples = []
    for g, group in enumerate(groups):
        if not isinstance(group, (tuple, list)) or not group:
            raise ValueError(f"group {g} must be a non-empty tuple of samples, got {type(group).__name__}")
        xs = [_sample(x, "bootstrap_groups_ci") for x in group]
        if len({len(x) for x in xs}) != 1:
            raise ValueError(f"the samples of group {g} must have one length, got {[len(x) for x in xs]}")
        samples.append(xs)
    rng = np.random.default_rng(seed)
    drawn = []
    for xs in samples:
        idx = rng.integers(0, len(xs[0]), size=(n_boot, len(xs[0])))
        drawn.append(tuple(x[idx] for x in xs))
    stats = np.asarray(statistic(*drawn), dtype=np.float64)
    if stats.shape != (n_boot,) or not np.all(np.isfinite(stats)):
        raise ValueError(f"bootstrap_groups_ci: the statistic must give {n_boot} finite values, got shape "
                         f"{stats.shape} with {int(np.sum(~np.isfinite(stats)))} not finite")
    return _quantiles(stats, level)
