"""Percentile-bootstrap intervals shared by both papers' measurements (one home, seeded).

Each resamples the sample's entries with replacement ``n_boot`` times (numpy's default_rng(seed)),
takes the statistic of each resample and returns the (1 - level) / 2 and 1 - (1 - level) / 2
quantiles. Deterministic for a seed; ValueError for an empty or non-1-D sample.
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


def bootstrap_diff_ci(a, b, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Interval of mean(a) - mean(b), a and b resampled independently (unpaired samples)."""
    a, b = _sample(a, "bootstrap_diff_ci"), _sample(b, "bootstrap_diff_ci")
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, len(a), size=(n_boot, len(a)))
    ib = rng.integers(0, len(b), size=(n_boot, len(b)))
    return _quantiles(a[ia].mean(1) - b[ib].mean(1), level)


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
