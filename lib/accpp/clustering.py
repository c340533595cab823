"""Clustering per-prompt circuits (paper §5, IOI clustering) and scoring clusters against labels.

    sets = [multilingual.component_set(c.graph) for c in circuits]
    D = distance_matrix(sets)                      # Jaccard distance 1 - |a & b| / |a | b|
    Z = average_linkage(D)                         # UPGMA, scipy's linkage-matrix format
    clusters = cut(Z, k)                           # labels 0..k-1
    adjusted_rand(clusters, templates), normalized_mutual_info(clusters, templates)
    permutation_test(stat, labels, n=999, seed=0)  # one-sided p-value, seeded
    permanova(D, {"template": t, "order": o}, covariates={"size": sizes}, n_perm=999, seed=0)

The main statistic for "circuits cluster by template" is the two-way PERMANOVA (:func:`permanova`:
template x order, circuit size as a covariate, Freedman-Lane permutation F tests); the k-cut ARI
of the average-linkage dendrogram is kept as evidence (it depends on where the tree is cut and
on the linkage, and says nothing about the other factor or about size).

Position-free component and signal sets and the Jaccard similarity come from
:mod:`accpp.multilingual` (``component_set``, ``signal_set``, ``jaccard``); the linkage is scipy's
average linkage and the adjusted Rand index and normalised mutual information (arithmetic-mean
normalisation) are scikit-learn's. Figures: a dendrogram with one colour strip per labelling
(``dendrogram_with_labels``) and a distance heatmap sorted by labels (``sorted_heatmap``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from accpp.multilingual import average_linkage as _ml_average_linkage
from accpp.multilingual import jaccard

__all__ = ["distance_matrix", "average_linkage", "cut", "leaf_order", "contingency", "adjusted_rand",
           "normalized_mutual_info", "within_between", "distance_by_cell", "permutation_test",
           "label_alignment", "permanova", "gower_centred", "dendrogram_with_labels", "sorted_heatmap", "measure_template_clusters"]


def distance_matrix(sets: Sequence, metric: Callable = jaccard) -> np.ndarray:
    """Square matrix of 1 - metric(a, b) over a list of sets (Jaccard by default); symmetric,
    zero diagonal."""
    sets = [frozenset(s) for s in sets]
    n = len(sets)
    D = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            D[i, j] = D[j, i] = 1.0 - metric(sets[i], sets[j])
    return D


def average_linkage(D) -> np.ndarray:
    """Average linkage (UPGMA) in scipy's linkage-matrix format; see :func:`accpp.multilingual.average_linkage`."""
    return _ml_average_linkage(D)


def cut(Z: np.ndarray, k: int) -> np.ndarray:
    """Flat clusters from a linkage matrix, at most ``k`` of them (scipy's ``fcluster`` 'maxclust'),
    labelled 0, 1, ... in order of first appearance over the leaf indices."""
    from scipy.cluster.hierarchy import fcluster

    n = len(Z) + 1
    if not 1 <= k <= n:
        raise ValueError(f"k must be in 1..{n}")
    if n == 1:
        return np.zeros(1, dtype=int)
    raw = fcluster(Z, k, criterion="maxclust")
    names: dict[int, int] = {}
    return np.array([names.setdefault(int(r), len(names)) for r in raw])


def leaf_order(Z: np.ndarray) -> list[int]:
    """Leaves left to right as scipy's dendrogram draws them."""
    from scipy.cluster.hierarchy import leaves_list

    return leaves_list(Z).tolist()


def _codes(labels) -> np.ndarray:
    return np.unique(np.asarray(labels, dtype=object).astype(str), return_inverse=True)[1]


def contingency(a, b) -> np.ndarray:
    """Counts table: rows = distinct values of a, columns = distinct values of b (sorted as strings)."""
    from sklearn.metrics.cluster import contingency_matrix

    ai, bi = _codes(a), _codes(b)
    if len(ai) != len(bi):
        raise ValueError("the two labellings have different lengths")
    return contingency_matrix(ai, bi)


def adjusted_rand(a, b) -> float:
    """Adjusted Rand index (scikit-learn): 1 for identical partitions (up to label names), 0 in
    expectation for independent ones, can be negative."""
    from sklearn.metrics import adjusted_rand_score

    return float(adjusted_rand_score(_codes(a), _codes(b)))


def normalized_mutual_info(a, b) -> float:
    """Normalised mutual information (scikit-learn, arithmetic-mean normalisation), in [0, 1]."""
    from sklearn.metrics import normalized_mutual_info_score

    return float(normalized_mutual_info_score(_codes(a), _codes(b)))


def _upper(D):
    m = np.asarray(D, dtype=float)
    return np.triu_indices(len(m), 1), m


def within_between(D, labels) -> tuple[float, float]:
    """Mean distance over pairs (i < j) with the same label, and over pairs with different labels."""
    (i, j), m = _upper(D)
    lab = np.asarray(labels, dtype=object)
    same = lab[i] == lab[j]
    d = m[i, j]
    return (float(d[same].mean()) if same.any() else float("nan"),
            float(d[~same].mean()) if (~same).any() else float("nan"))


def distance_by_cell(D, labels: dict[str, Sequence]) -> pd.DataFrame:
    """Mean distance and pair count over pairs (i < j), grouped by whether each labelling agrees
    ("same"/"diff" per labelling), e.g. {"template": [...], "order": [...]}."""
    (i, j), m = _upper(D)
    df = pd.DataFrame({k: np.where(np.asarray(v, dtype=object)[i] == np.asarray(v, dtype=object)[j], "same", "diff")
                       for k, v in labels.items()})
    df["distance"] = m[i, j]
    return df.groupby(list(labels))["distance"].agg(["mean", "count"]).reset_index()


def permutation_test(stat: Callable, labels, n: int = 999, seed: int = 0, strata=None) -> tuple[float, float, np.ndarray]:
    """One-sided permutation test of ``stat(labels)`` (larger = more structure): shuffle the labels
    n times with a seeded generator (within each stratum when ``strata`` is given, e.g. shuffle the
    ABBA/BABA order only among prompts of the same template). Returns (observed statistic,
    p-value = (1 + #{null >= observed}) / (n + 1), the null statistics)."""
    lab = np.asarray(labels)
    rng = np.random.default_rng(seed)
    groups = [np.arange(len(lab))] if strata is None else \
        [np.flatnonzero(np.asarray(strata, dtype=object) == s) for s in dict.fromkeys(list(strata))]
    observed = float(stat(lab))
    null = np.empty(n)
    for r in range(n):
        perm = lab.copy()
        for g in groups:
            perm[g] = lab[g][rng.permutation(len(g))]
        null[r] = stat(perm)
    p = (1 + int((null >= observed - 1e-12).sum())) / (n + 1)
    return observed, p, null


def permuted_labels(labels, n: int, seed: int = 0, strata=None) -> np.ndarray:
    """(n, N): the ``n`` shuffles of :func:`permutation_test` (same generator, same order of draws), one per row."""
    lab = np.asarray(labels)
    rng = np.random.default_rng(seed)
    groups = [np.arange(len(lab))] if strata is None else \
        [np.flatnonzero(np.asarray(strata, dtype=object) == s) for s in dict.fromkeys(list(strata))]
    out = np.empty((n, len(lab)), dtype=lab.dtype)
    for r in range(n):
        out[r] = lab
        for g in groups:
            out[r, g] = lab[g][rng.permutation(len(g))]
    return out


def _ari_rows(clusters: np.ndarray, X: np.ndarray) -> np.ndarray:
    """:func:`adjusted_rand` (clusters, x) for every row x of the integer codes X (B, N), from the pair counts
    in integers as scikit-learn computes them (so bit-for-bit the same values)."""
    c = np.unique(clusters, return_inverse=True)[1].astype(np.int64)
    N = c.size
    K = int(X.max()) + 1 if X.size else 1
    cell = c[None, :] * K + X.astype(np.int64)  # (B, N) contingency cell of each item
    B = X.shape[0]
    counts = np.bincount((cell + (np.arange(B) * (int(c.max()) + 1) * K)[:, None]).ravel(),
                         minlength=B * (int(c.max()) + 1) * K).reshape(B, -1)
    ss = (counts.astype(np.int64) ** 2).sum(1)
    sum_c2 = int((np.bincount(c) ** 2).sum())
    Xi = X.astype(np.int64) + (np.arange(B) * K)[:, None]
    sum_k2 = (np.bincount(Xi.ravel(), minlength=B * K).reshape(B, K).astype(np.int64) ** 2).sum(1)
    tp, fp, fn = ss - N, sum_k2 - ss, sum_c2 - ss
    tn = N * N - fp - fn - ss
    with np.errstate(divide="ignore", invalid="ignore"):
        ari = 2.0 * (tp * tn - fn * fp) / ((tp + fn) * (fn + tn) + (tp + fp) * (fp + tn))
    return np.where((fn == 0) & (fp == 0), 1.0, ari)


def _gap_rows(D, X: np.ndarray, chunk: int = 32) -> np.ndarray:
    """between - within mean distance (pairs i < j) for every row x of the integer codes X (B, N): the
    within-label sum is sum_c 1_c' U 1_c with U the strict upper triangle of D, a matrix product per chunk
    of rows; the pair counts do not change between relabellings."""
    U = np.triu(np.asarray(D, dtype=float), 1)
    N = U.shape[0]
    K = int(X.max()) + 1 if X.size else 1
    n_pairs = N * (N - 1) / 2
    n_same = float((np.bincount(X[0].astype(np.int64), minlength=K) * (np.bincount(X[0].astype(np.int64),
                                                                               minlength=K) - 1)).sum() / 2)
    total = float(U.sum())
    out = np.empty(X.shape[0])
    if n_same == 0 or n_same == n_pairs:
        out[:] = np.nan
        return out
    eye = np.eye(K)
    for b in range(0, X.shape[0], chunk):
        Y = eye[X[b: b + chunk]].transpose(1, 0, 2).reshape(N, -1)  # (N, chunk * K) one-hot per row
        w = (Y * (U @ Y)).reshape(N, -1, K).sum((0, 2))  # within-label sums
        out[b: b + chunk] = (total - w) / (n_pairs - n_same) - w / n_same
    return out


def label_alignment(D, Z: np.ndarray, labels, n_perm: int = 999, seed: int = 0, k: int | None = None,
                    strata=None) -> dict:
    """How well a labelling explains the distances and the clustering: the k-cluster cut (k = number
    of distinct labels by default) scored by ARI and NMI, within- and between-label mean distances,
    and permutation p-values for the ARI and for the gap (between - within).

    The permutations are those of :func:`permutation_test` (``seed``, ``strata``; the two tests share
    them), each statistic computed for all of them at once (:func:`_ari_rows`, :func:`_gap_rows`)."""
    names, lab = np.unique(np.asarray(labels, dtype=object).astype(str), return_inverse=True)  # integer codes
    k = k or len(names)
    clusters = cut(Z, k)
    X = np.vstack([lab[None], permuted_labels(lab, n_perm, seed, strata)])  # row 0: the observed labels
    ari_all, gap_all = _ari_rows(clusters, X), _gap_rows(D, X)
    ari, g = float(ari_all[0]), float(gap_all[0])
    p_ari = (1 + int((ari_all[1:] >= ari - 1e-12).sum())) / (n_perm + 1)
    p_gap = (1 + int((gap_all[1:] >= g - 1e-12).sum())) / (n_perm + 1)
    within, between = within_between(D, lab)
    return dict(k=k, ari=ari, p_ari=p_ari, nmi=normalized_mutual_info(clusters, lab), within=within,
                between=between, gap=g, p_gap=p_gap)


# ---------------------------------------------------------------- PERMANOVA

def gower_centred(D) -> np.ndarray:
    """G = -1/2 C (D o D) C with C = I - 11'/n: the Gram matrix whose traces give PERMANOVA's sums of
    squares (tr G = total sum of squared distances to the centroid = sum_{i<j} d_ij^2 / n)."""
    m = np.asarray(D, dtype=float)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or not np.allclose(m, m.T) or np.any(np.diag(m) != 0):
        raise ValueError("need a symmetric square distance matrix with a zero diagonal")
    n = len(m)
    C = np.eye(n) - 1.0 / n
    return -0.5 * C @ (m * m) @ C


def _basis(X: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the column space of X (rank-revealing SVD)."""
    if X.shape[1] == 0:
        return np.zeros((X.shape[0], 0))
    u, sv, _ = np.linalg.svd(X, full_matrices=False)
    tol = sv.max() * max(X.shape) * np.finfo(float).eps if sv.size else 0
    return u[:, sv > tol]


def _dummies(labels) -> np.ndarray:
    lab = np.asarray(labels, dtype=object).astype(str)
    levels = sorted(set(lab))
    return np.stack([(lab == v).astype(float) for v in levels[1:]], 1) if len(levels) > 1 else np.zeros((len(lab), 0))


def permanova(D, factors: dict, covariates: dict | None = None, interaction: bool = True, n_perm: int = 999,
              seed: int = 0) -> pd.DataFrame:
    """Distance-based (permutational) multivariate ANOVA (Anderson 2001; McArdle & Anderson 2001).

    ``factors``: one or two labellings ({"template": [...], "order": [...]}); ``covariates``: numeric
    per-item values (e.g. {"size": circuit sizes}); with two factors and ``interaction`` their
    interaction is a term too. Sums of squares are traces of the hat matrices against the
    Gower-centred matrix G (:func:`gower_centred`). Each term is tested adjusted for every other term
    that does not contain it ("type II": a main effect given the covariates and the other factor, the
    interaction given everything else), against the residual of the complete model:

        F = (SS_term / df_term) / (SS_res / df_res).

    p-values: Freedman-Lane permutation of the residuals of the reduced model (the model without the
    term), ``n_perm`` seeded permutations, p = (1 + n_extreme) / (n_perm + 1) with n_extreme = #{F* >= F}
    (:func:`compendium.stats.permutation_p`; n_extreme is kept for the p's Monte-Carlo interval). In distance form the
    permuted data are G* = M G M' with M = H_r + P (I - H_r) (H_r: hat matrix of the reduced model,
    P: the permutation), so no embedding of the distances is needed and non-Euclidean distances are
    handled as they are.

    Returns a DataFrame indexed by term (then "Residual", "Total") with df, SS, R2 (SS / SS_total), F, p,
    n_extreme (NaN where nothing is tested: no permutations, a term without degrees of freedom, the
    residual and total rows).
    """
    from compendium.stats import permutation_p

    G = gower_centred(D)
    n = len(G)
    if not 1 <= len(factors) <= 2:
        raise ValueError("permanova takes one or two factors")
    covariates = covariates or {}
    terms: dict[str, tuple[np.ndarray, set]] = {}
    for name, vals in covariates.items():
        v = np.asarray(vals, dtype=float)
        if v.shape != (n,):
            raise ValueError(f"covariate {name!r} has shape {v.shape}, expected ({n},)")
        terms[name] = ((v - v.mean())[:, None], {name})
    dums = {}
    for name, lab in factors.items():
        if len(lab) != n:
            raise ValueError(f"factor {name!r} has {len(lab)} labels for {n} items")
        dums[name] = _dummies(lab)
        terms[name] = (dums[name], {name})
    if interaction and len(factors) == 2:
        a, b = list(factors)
        X = np.stack([dums[a][:, i] * dums[b][:, j] for i in range(dums[a].shape[1]) for j in range(dums[b].shape[1])],
                     1) if dums[a].shape[1] and dums[b].shape[1] else np.zeros((n, 0))
        terms[f"{a} x {b}"] = (X, {a, b})
    one = np.ones((n, 1))

    def design(names):
        return np.hstack([one] + [terms[t][0] for t in names])

    Qc = _basis(design(list(terms)))
    df_res = n - Qc.shape[1]
    if df_res <= 0:
        raise ValueError(f"no residual degrees of freedom ({n} items, model rank {Qc.shape[1]})")
    ss_total = float(np.trace(G))
    rng = np.random.default_rng(seed)
    perms = [rng.permutation(n) for _ in range(n_perm)]
    rows, tested = {}, {}
    for t, (_, tset) in terms.items():
        reduced = [u for u, (_, uset) in terms.items() if u != t and not tset <= uset]
        Qr = _basis(design(reduced))
        Qa = _basis(design(reduced + [t]))
        df_t = Qa.shape[1] - Qr.shape[1]
        if df_t <= 0:
            rows[t] = dict(df=0, SS=0.0, R2=0.0, F=float("nan"), p=float("nan"), n_extreme=float("nan"))
            continue
        GQr = G @ Qr
        tested[t] = dict(df=df_t, Qr=Qr, GQr=GQr, QrQc=Qr.T @ Qc, Ta=Qc.T @ Qa, Tr=Qc.T @ Qr,
                         A=GQr - Qr @ (Qr.T @ GQr))  # A = E G Q_r: tr(P E G H_r) = sum_i (A[perm] * Q_r)[i]

    def stats(perm) -> dict:
        """(F, SS_term, SS_res) of every tested term for one permutation, from ONE (n x n)(n x p) product.

        Term t (reduced model's hat H_r = Q_r Q_r', E = I - H_r) needs tr(Q' M G M' Q) for Q in Q_a, Q_r, Q_c,
        with M' Q = H_r Q + E P' Q. Every Q lies in the span of the complete model's basis Q_c (Q = Q_c T,
        T = Q_c' Q), so with X = P' Q_c = Q_c[inv] and W = H_r Q_c + E X, tr(Q' M G M' Q) = tr(T' (W' G W) T),
        and G W = (G Q_r)(Q_r' Q_c - Q_r' X) + G X: G X is the one product, shared by every term.
        tr(M G M') = tr(G) + 2 tr(P E G H_r) (E and H_r idempotent)."""
        inv = np.empty(n, dtype=int)
        inv[perm] = np.arange(n)
        X = Qc[inv]
        GX = G @ X
        out = {}
        for t, c in tested.items():
            B = c["QrQc"] - c["Qr"].T @ X
            S = (c["Qr"] @ B + X).T @ (c["GQr"] @ B + GX)  # W' G W, (p_c, p_c)
            tr_a = float(np.einsum("ij,ij->", S @ c["Ta"], c["Ta"]))
            tr_r = float(np.einsum("ij,ij->", S @ c["Tr"], c["Tr"]))
            tr_all = ss_total + 2.0 * float(np.einsum("ij,ij->", c["A"][perm], c["Qr"]))
            ss_t, ss_r = tr_a - tr_r, tr_all - float(np.trace(S))
            out[t] = ((ss_t / c["df"]) / (ss_r / df_res) if ss_r > 0 else float("inf"), ss_t, ss_r)
        return out

    observed = stats(np.arange(n))
    null = {t: np.empty(n_perm) for t in tested}
    for r, p in enumerate(perms):
        for t, v in stats(p).items():
            null[t][r] = v[0]
    for t in terms:
        if t not in tested:
            continue
        F, ss_t, _ = observed[t]
        n_extreme = int((null[t] >= F - 1e-12 * abs(F)).sum()) if n_perm else float("nan")
        pval = permutation_p(n_extreme, n_perm) if n_perm else float("nan")
        rows[t] = dict(df=tested[t]["df"], SS=ss_t, R2=ss_t / ss_total if ss_total > 0 else float("nan"), F=F, p=pval,
                       n_extreme=n_extreme)
    rows = {t: rows[t] for t in terms}  # the terms' order
    ss_res = ss_total - float(np.einsum("ij,ij->", Qc, G @ Qc))
    rows["Residual"] = dict(df=df_res, SS=ss_res, R2=ss_res / ss_total if ss_total > 0 else float("nan"),
                            F=float("nan"), p=float("nan"), n_extreme=float("nan"))
    rows["Total"] = dict(df=n - 1, SS=ss_total, R2=1.0, F=float("nan"), p=float("nan"), n_extreme=float("nan"))
    return pd.DataFrame.from_dict(rows, orient="index")


# ---------------------------------------------------------------- figures

def _colours(values, palette: str = "tab10") -> tuple[list, dict]:
    import seaborn as sns

    levels = list(dict.fromkeys(values))
    cols = dict(zip(levels, sns.color_palette(palette, len(levels))))
    return [cols[v] for v in values], cols


def dendrogram_with_labels(Z: np.ndarray, labels: dict[str, Sequence], title: str = "", palettes=None,
                           figsize=(11, 5)):
    """A dendrogram (:func:`accpp.multilingual.draw_dendrogram`) with one colour strip per labelling
    under the leaves, e.g. {"template": [...], "order": [...]}; returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from accpp.multilingual import draw_dendrogram

    names = list(labels)
    palettes = palettes or {}
    n = len(Z) + 1
    fig, axes = plt.subplots(1 + len(names), 1, figsize=figsize, sharex=True,
                             gridspec_kw=dict(height_ratios=[6] + [0.6] * len(names), hspace=0.06))
    draw_dendrogram(Z, [""] * n, ax=axes[0], title=title)
    axes[0].set_xlim(0, 10 * n)  # scipy puts leaf i of the order at x = 5 + 10 i
    order = leaf_order(Z)
    for ax, name in zip(axes[1:], names):
        vals = [str(v) for v in labels[name]]
        cols, legend = _colours(vals, palettes.get(name, "tab10"))
        ax.imshow(np.array([[cols[i] for i in order]]), aspect="auto", extent=(0, 10 * n, 0, 1))
        ax.set_yticks([0.5])
        ax.set_yticklabels([name])
        ax.grid(False)
        ax.legend(handles=[Patch(color=c, label=v) for v, c in legend.items()], loc="center left",
                  bbox_to_anchor=(1.01, 0.5), ncol=min(len(legend), 8), fontsize=8, frameon=False,
                  handlelength=1, columnspacing=0.8)
    axes[-1].set_xticks([])
    axes[-1].set_xlabel(f"{n} prompts, leaves in dendrogram order")
    return fig


def sorted_heatmap(D, keys: Sequence[tuple], ax=None, title: str = "", cmap: str = "viridis", fmt=None):
    """Distance heatmap with rows/columns sorted by ``keys`` (e.g. (template, order) per prompt);
    lines separate blocks of equal first key, ticks name each block of equal full key
    (``fmt(key)``, default the key's parts joined by spaces)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    ax = ax or plt.subplots(figsize=(6, 5))[1]
    keys = [tuple(k) for k in keys]
    idx = sorted(range(len(keys)), key=lambda i: (keys[i], i))
    m = np.asarray(D, dtype=float)[np.ix_(idx, idx)]
    sns.heatmap(m, ax=ax, cmap=cmap, square=True, xticklabels=False, yticklabels=False,
                cbar_kws=dict(shrink=0.8, label="Jaccard distance"))
    sk = [keys[i] for i in idx]
    starts = [i for i in range(len(sk)) if i == 0 or sk[i] != sk[i - 1]] + [len(sk)]
    centres = [(a + b) / 2 for a, b in zip(starts[:-1], starts[1:])]
    ax.set_yticks(centres)
    fmt = fmt or (lambda k: " ".join(map(str, k)))
    ax.set_yticklabels([fmt(sk[a]) for a in starts[:-1]], fontsize=7, rotation=0)
    for i in range(1, len(sk)):
        if sk[i][0] != sk[i - 1][0]:
            ax.axhline(i, color="white", lw=1.5)
            ax.axvline(i, color="white", lw=1.5)
        elif sk[i] != sk[i - 1]:
            ax.axhline(i, color="white", lw=0.5, ls=":")
            ax.axvline(i, color="white", lw=0.5, ls=":")
    ax.set_title(title, fontsize=9)
    return ax


def measure_template_clusters(align: pd.DataFrame, perm: dict[str, pd.DataFrame], cells: pd.DataFrame, n_perm: int,
                              n_traced: int, n_planned: int, config: dict | None = None):
    """Claim accpp/ioi-template-clusters: which labelling (template or order) the circuits' clusters follow.

    ``align``: :func:`label_alignment` rows indexed by (level, labelling), with at least the
    "components" level and the "template" and "order" labellings; ``perm``: :func:`permanova` tables per
    level (terms template, order, template x order, size); ``cells``: the mean distances by cell (the
    figure's table); ``n_traced`` of ``n_planned`` prompts were traced. The labelling with the larger
    ARI on the component level (template on a tie) is the one the values read. The template term's p
    carries its Monte-Carlo 95% interval: Clopper-Pearson of its ``n_extreme`` over ``n_perm``
    (:func:`compendium.stats.permutation_p_interval`), so the table must hold ``n_extreme``.
    """
    from compendium.claims import Measurement
    from compendium.stats import permutation_p, permutation_p_interval

    who = "measure_template_clusters"
    if "components" not in perm:
        raise ValueError(f"{who}: no PERMANOVA on the component level (levels {sorted(perm)})")
    try:
        a = align.loc["components"]
        a.loc[["template", "order"], ["ari", "p_ari", "gap", "p_gap"]]
    except KeyError as err:
        raise ValueError(f"{who}: the alignment table needs the component level's template and order rows with "
                         f"ari, p_ari, gap, p_gap ({err})") from None
    pc = perm["components"]
    missing = [t for t in ("template", "order", "template x order", "size") if t not in pc.index]
    if missing:
        raise ValueError(f"{who}: the component PERMANOVA lacks term(s) {missing}")
    if "n_extreme" not in pc or not np.isfinite(pc.loc["template", "n_extreme"]):
        raise ValueError(f"{who}: the component PERMANOVA has no permutation count (n_extreme) for its template term")
    n_extreme = int(pc.loc["template", "n_extreme"])
    if permutation_p(n_extreme, n_perm) != pc.loc["template", "p"]:
        raise ValueError(f"{who}: the template term's p {pc.loc['template', 'p']} is not (1 + {n_extreme}) / "
                         f"({n_perm} + 1): the table was computed with another number of permutations")
    p_lo, p_hi = permutation_p_interval(n_extreme, n_perm)
    if not 0 < n_traced <= n_planned:
        raise ValueError(f"{who}: {n_traced} traced of {n_planned} planned prompts")
    best = "template" if a.loc["template", "ari"] >= a.loc["order", "ari"] else "order"
    perm_table = pd.concat(perm, names=["level", "term"]).reset_index()
    return Measurement(
        claim="accpp/ioi-template-clusters",
        values=dict(ari_best=float(a.loc[best, "ari"]), p_ari_best=float(a.loc[best, "p_ari"]),
                    gap_best=float(a.loc[best, "gap"]), p_gap_best=float(a.loc[best, "p_gap"]), n_perm=n_perm,
                    traced_fraction=n_traced / n_planned,
                    permanova_template_F=float(pc.loc["template", "F"]), permanova_template_p=float(pc.loc["template", "p"]),
                    permanova_template_p_ci_low=p_lo, permanova_template_p_ci_high=p_hi,
                    permanova_template_R2=float(pc.loc["template", "R2"]),
                    permanova_order_F=float(pc.loc["order", "F"]), permanova_order_p=float(pc.loc["order", "p"]),
                    permanova_order_R2=float(pc.loc["order", "R2"]),
                    permanova_interaction_p=float(pc.loc["template x order", "p"]),
                    permanova_size_p=float(pc.loc["size", "p"])),
        evidence=dict(best=best, alignment={f"{lvl}/{lab}": {k: float(v) for k, v in r.items() if np.isfinite(v)}
                                            for (lvl, lab), r in align.iterrows()},
                      permanova_signals={t: {k: float(v) for k, v in r.items() if np.isfinite(v)}
                                         for t, r in perm["signals"].iterrows()} if "signals" in perm else {}),
        tables={"05_ioi_alignment": align.reset_index(), "05_ioi_permanova": perm_table, "05_ioi_cells": cells},
        config=dict(config or {}), unit="p-value of PERMANOVA's template term (component Jaccard distances)",
        note=(f"{(config or {}).get('model', 'the model')}, {n_traced} prompts; PERMANOVA on component Jaccard "
              f"distances: template R2 {pc.loc['template', 'R2']:.3f} (p={pc.loc['template', 'p']:.3f}, Monte-Carlo "
              f"interval {p_lo:.4f}-{p_hi:.4f}), order R2 "
              f"{pc.loc['order', 'R2']:.3f} (p={pc.loc['order', 'p']:.3f}), interaction "
              f"p={pc.loc['template x order', 'p']:.3f}, size p={pc.loc['size', 'p']:.3f}; the k-cut follows {best} "
              f"(ARI {a.loc[best, 'ari']:.3f})"))
