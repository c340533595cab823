"""Disentanglement and coverage of interpretable units: ProtoT prototypes, LLaMA attention heads and
sparse-autoencoder (SAE) features, on the same text and the same labels.

What the paper says, as far as we know it: ProtoT's prototypes score higher on "disentanglement"
and "coverage" than LLaMA attention heads and SAE features. This comes from the brief only; the
paper's own definitions could not be read. The definitions below are OUR operationalisation,
after the SAE literature's per-feature specificity/monosemanticity measures (e.g. Bricken et al.
2023, "Towards Monosemanticity", transformer-circuits.pub; Gao et al. 2024, arXiv 2406.04093) and
the class-selectivity / coverage measures of network dissection (Bau et al. 2017, arXiv 1704.05796).
``docs/protot_disentanglement.md`` states them in prose.

Units and their activations. A unit u has a non-negative activation a_u(t) at every token position t:

- a ProtoT prototype (layer l, k): its write gate w_{t,k} in layer l (how much token t sends into
  channel k; :func:`prototype_units`);
- a LLaMA attention head (layer l, h): the L2 norm of the head's contribution to the residual stream
  at t, ||W_O[:, h] z_{t,h}|| (its attention-weighted values through its slice of the output
  projection; :func:`head_units`). Chosen over an attention-pattern statistic because it is, like a
  write gate, "how much this unit writes at this token", it is defined at every position, and it is
  what the head adds to the stream (a head that attends but writes nothing does nothing);
- an SAE feature: its top-k code z_{t,f} (:func:`sae_units`, :mod:`protot.sae`).

Labels. Classes are the ``n_classes`` most frequent token types of the sample (each seen at least
``min_count`` times; :func:`frequent_classes`); positions of other types are not labelled.

Per unit and class: m_u(c) = mean of a_u over the positions of class c; mu_u = mean of a_u over all
positions of the sample.

- **Disentanglement** of a unit: D_u = 1 - H(q_u) / log C, where q_u(c) = m_u(c) / sum_c' m_u(c')
  is the unit's class profile (mean activation per class, normalised) and C the number of classes.
  D = 1: the unit is active on one class only; D = 0: equally active on every class. Using class
  *means* (not mass) removes the classes' frequencies, and the ratio removes the unit's scale, so
  gates, norms and SAE codes are comparable. Units active (a > 0) at fewer than ``min_active``
  labelled positions are not scored (their profile is noise); their number is reported. A kind's
  disentanglement is the mean D over its scored units (a per-unit mean: independent of the count).
- **Coverage** of a set of units: the fraction of the C classes for which some unit is selective,
  selectivity s_u(c) = m_u(c) / mu_u >= ``threshold`` (the unit is on average ``threshold`` times
  more active on the class than on text overall; the same ratio as :func:`protot.labels.find_prototype`).
  Coverage grows with the number of units, so kinds are compared at a **matched size**: the mean
  coverage over ``n_subsets`` random subsets of ``match`` units (default: the smallest kind's count).

Nulls (a metric that cannot tell learned units from unlearned ones measures nothing):
:func:`random_sae_units` (a random dictionary with the same top-k encoding on the same residual
stream) and, in the notebook, untrained models (an untrained ProtoT with gate sharpness matched to
the trained one, an untrained LLaMA).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from compendium.stats import bootstrap_mean_ci


@dataclass
class Units:
    """Activations of a set of units over a sample: ``acts`` (M, U) non-negative float32 at the M
    positions of ``ids`` (N, T) flattened in row order; ``names`` one per unit."""

    kind: str
    names: list[str]
    acts: np.ndarray

    def __post_init__(self):
        a = self.acts
        if not isinstance(a, np.ndarray) or a.ndim != 2:
            raise ValueError(f"{self.kind}: acts must be a 2-D (positions, units) array, got "
                             f"{getattr(a, 'shape', type(a).__name__)}")
        if a.shape[1] != len(self.names):
            raise ValueError(f"{self.kind}: {a.shape[1]} units of activations but {len(self.names)} names")
        if a.shape[1] == 0 or a.shape[0] == 0:
            raise ValueError(f"{self.kind}: no units or no positions (acts shape {a.shape})")
        if not np.isfinite(a).all():
            raise ValueError(f"{self.kind}: activations contain NaN or inf")
        if (a < 0).any():
            raise ValueError(f"{self.kind}: activations must be non-negative (min {a.min():.3g}); "
                             "pass a gate, a norm or a rectified code")

    @property
    def count(self) -> int:
        return self.acts.shape[1]


# -- the three kinds of unit ----------------------------------------------------------------------------
def prototype_units(model, ids: torch.Tensor, batch_size: int = 8, kind: str = "prototypes") -> Units:
    """Write gates of every (layer, prototype) of a ProtoT over ``ids`` (N, T)."""
    from protot import concepts

    st = concepts.collect_gates(model, ids, batch_size=batch_size)
    L, N, T, R = st.write.shape
    acts = np.ascontiguousarray(st.write.transpose(1, 2, 0, 3).reshape(N * T, L * R))
    return Units(kind, [f"L{l} P{k}" for l in range(L) for k in range(R)], acts)


@torch.no_grad()
def head_units(model, ids: torch.Tensor, batch_size: int = 8, kind: str = "heads") -> Units:
    """Per-token output norm ||W_O[:, h] z_{t,h}|| of every (layer, head) of a LLaMA baseline."""
    if not ids.ndim == 2 or ids.shape[0] == 0:
        raise ValueError(f"ids must be a non-empty (N, T) tensor, got shape {tuple(ids.shape)}")
    attn = [b.mixer for b in model.layers]
    if not all(hasattr(a, "o_proj") and hasattr(a, "H") for a in attn):
        raise ValueError("head_units needs a LLaMA baseline (attention mixers with o_proj and H heads)")
    L, H, hd = len(attn), attn[0].H, attn[0].hd
    captured: list = [None] * L

    def hook(l):
        def f(module, inputs):
            z = inputs[0]                                             # (B, T, H*hd): heads concatenated
            B, T, _ = z.shape
            W = module.weight.view(module.weight.shape[0], H, hd)     # (d, H, hd)
            out = torch.einsum("bthe,dhe->bthd", z.view(B, T, H, hd).double(), W.double())
            captured[l] = out.norm(dim=-1).float()                    # (B, T, H)
        return f

    handles = [a.o_proj.register_forward_pre_hook(hook(l)) for l, a in enumerate(attn)]
    dev = next(model.parameters()).device
    was = model.training
    model.eval()
    rows = []
    try:
        for a in range(0, ids.shape[0], batch_size):
            model(ids[a : a + batch_size].to(dev), use_cache=False)
            rows.append(torch.stack(captured, 2).cpu())              # (B, T, L, H)
    finally:
        for h in handles:
            h.remove()
        model.train(was)
    acts = torch.cat(rows).reshape(-1, L * H).numpy()
    return Units(kind, [f"L{l} H{h}" for l in range(L) for h in range(H)], np.ascontiguousarray(acts))


def sae_units(sae, model, ids: torch.Tensor, layer: int, batch_size: int = 8, kind: str = "SAE features") -> Units:
    """Top-k codes of every feature of ``sae`` on the residual stream after block ``layer``."""
    from protot import sae as S

    acts = S.features(sae, model, ids, layer, batch_size=batch_size).reshape(-1, sae.n_features)
    return Units(kind, [f"F{f}" for f in range(sae.n_features)], np.ascontiguousarray(acts))


def random_sae_units(trained_sae, model, ids: torch.Tensor, layer: int, seed: int = 0,
                     kind: str = "random directions") -> Units:
    """The null of the SAE: a dictionary of random unit directions (seeded) with the trained SAE's
    width, k, scale and decoder bias, encoding the same residual stream."""
    from protot import sae as S

    g = torch.Generator().manual_seed(seed)
    null = S.TopKSAE(trained_sae.d, trained_sae.n_features, trained_sae.k)
    with torch.no_grad():
        W = torch.randn(trained_sae.n_features, trained_sae.d, generator=g, dtype=torch.float32)
        W /= W.norm(dim=1, keepdim=True)
        null.W_enc.copy_(W)
        null.W_dec.copy_(W)
        null.b_enc.zero_()
        null.b_dec.copy_(trained_sae.b_dec.detach().cpu())
        null.scale.copy_(trained_sae.scale.detach().cpu())
    null = null.to(next(model.parameters()).device).eval()
    return sae_units(null, model, ids, layer, kind=kind)


# -- labels ------------------------------------------------------------------------------------------------
@dataclass
class Classes:
    """``labels`` (M,) class index per position (-1: not labelled); ``token_ids`` (C,) the token type
    of each class; ``counts`` (C,) its positions."""

    labels: np.ndarray
    token_ids: np.ndarray
    counts: np.ndarray

    @property
    def n(self) -> int:
        return len(self.token_ids)


def frequent_classes(ids, n_classes: int = 200, min_count: int = 10) -> Classes:
    """The ``n_classes`` most frequent token types of ``ids`` seen at least ``min_count`` times
    (ties broken by token id)."""
    tid = np.asarray(ids.cpu() if torch.is_tensor(ids) else ids).reshape(-1).astype(np.int64)
    if n_classes < 2:
        raise ValueError(f"need at least 2 classes, got n_classes={n_classes}")
    types, counts = np.unique(tid, return_counts=True)
    order = np.lexsort((types, -counts))
    keep = [i for i in order if counts[i] >= min_count][:n_classes]
    if len(keep) < 2:
        raise ValueError(f"fewer than 2 token types occur at least {min_count} times in the sample "
                         f"({tid.size} positions): use more text or a lower min_count")
    cls_ids = types[keep]
    lut = {int(t): c for c, t in enumerate(cls_ids)}
    labels = np.fromiter((lut.get(int(t), -1) for t in tid), dtype=np.int64, count=tid.size)
    return Classes(labels, cls_ids, counts[keep])


# -- the metrics -----------------------------------------------------------------------------------------
def class_means(units: Units, classes: Classes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(means (U, C): m_u(c); overall (U,): mu_u over all positions; active (U,): labelled positions
    with a > 0), in float64."""
    if units.acts.shape[0] != classes.labels.shape[0]:
        raise ValueError(f"{units.kind}: {units.acts.shape[0]} positions of activations but "
                         f"{classes.labels.shape[0]} labels: the units and the classes come from different samples")
    a = torch.from_numpy(units.acts).double()
    lab = torch.from_numpy(classes.labels)
    keep = lab >= 0
    sums = torch.zeros(classes.n, a.shape[1], dtype=torch.float64)
    sums.index_add_(0, lab[keep], a[keep])
    means = (sums / torch.from_numpy(classes.counts).double()[:, None]).T.numpy()
    overall = a.mean(0).numpy()
    active = (a[keep] > 0).sum(0).numpy()
    return means, overall, active


def disentanglement(means: np.ndarray, active: np.ndarray, min_active: int = 20) -> np.ndarray:
    """(U,) D_u = 1 - H(q_u) / log C of each unit's class profile; NaN for units active at fewer than
    ``min_active`` labelled positions (or never)."""
    C = means.shape[1]
    tot = means.sum(1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = means / tot
        h = -np.where(q > 0, q * np.log(q), 0.0).sum(1)
    d = 1.0 - h / math.log(C)
    d[(active < min_active) | (tot[:, 0] <= 0)] = np.nan
    return d


def selectivity(means: np.ndarray, overall: np.ndarray) -> np.ndarray:
    """(U, C) s_u(c) = m_u(c) / mu_u (0 for a unit never active)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        s = means / overall[:, None]
    return np.where(overall[:, None] > 0, s, 0.0)


def coverage(sel: np.ndarray, threshold: float, units=None) -> float:
    """Fraction of classes with max over ``units`` (default all) of s_u(c) >= ``threshold``."""
    s = sel if units is None else sel[np.asarray(units)]
    if s.shape[0] == 0:
        return 0.0
    return float((s.max(0) >= threshold).mean())


def matched_coverage(sel: np.ndarray, match: int, threshold: float, n_subsets: int = 200,
                     seed: int = 0) -> np.ndarray:
    """(n_subsets,) coverage of random subsets of ``match`` units (all of them when there are exactly
    ``match``: one value repeated)."""
    U = sel.shape[0]
    if not 1 <= match <= U:
        raise ValueError(f"match={match} must be between 1 and the number of units ({U})")
    if match == U:
        return np.full(n_subsets, coverage(sel, threshold))
    rng = np.random.default_rng(seed)
    return np.array([coverage(sel, threshold, rng.choice(U, size=match, replace=False)) for _ in range(n_subsets)])


@dataclass
class Score:
    kind: str
    units: int
    scored: int                 # units with a disentanglement (active often enough)
    disentanglement: float      # mean D over scored units
    d_ci: tuple[float, float]   # bootstrap over units (95%)
    coverage_all: float         # all units
    coverage_matched: float     # mean over random subsets of `match` units
    cov_ci: tuple[float, float] # 2.5 / 97.5 percentiles over the subsets
    match: int
    per_unit: pd.DataFrame      # unit, D, best class token id, its selectivity, active


def score(units: Units, classes: Classes, *, match: int, threshold: float = 5.0, min_active: int = 20,
          n_subsets: int = 200, n_boot: int = 1000, seed: int = 0) -> Score:
    """Both metrics for one set of units (module docstring)."""
    if not threshold > 1:
        raise ValueError(f"a selectivity threshold must exceed 1 (1 = as active as on average), got {threshold}")
    means, overall, active = class_means(units, classes)
    D = disentanglement(means, active, min_active)
    sel = selectivity(means, overall)
    ok = D[~np.isnan(D)]
    if len(ok):
        d_mean, d_ci = float(ok.mean()), bootstrap_mean_ci(ok, n_boot=n_boot, seed=seed)
    else:
        d_mean, d_ci = float("nan"), (float("nan"), float("nan"))
    cov = matched_coverage(sel, match, threshold, n_subsets, seed)
    best = sel.argmax(1)
    per_unit = pd.DataFrame({"kind": units.kind, "unit": units.names, "disentanglement": D,
                             "best_token_id": classes.token_ids[best], "best_selectivity": sel[np.arange(len(best)), best],
                             "active_positions": active})
    return Score(units.kind, units.count, int(len(ok)), d_mean, d_ci, coverage(sel, threshold), float(cov.mean()),
                 (float(np.quantile(cov, 0.025)), float(np.quantile(cov, 0.975))), match, per_unit)


def compare(unit_sets: list[Units], classes: Classes, *, match: int | None = None, **kw) -> tuple[pd.DataFrame, list[Score]]:
    """One row per set of units (kind): units, scored, disentanglement (+ CI), coverage of all units,
    coverage at ``match`` units (default: the smallest count among the sets) (+ CI)."""
    if not unit_sets:
        raise ValueError("no unit sets to compare")
    kinds = [u.kind for u in unit_sets]
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"unit sets need distinct kinds, got {kinds}")
    match = match or min(u.count for u in unit_sets)
    scores = [score(u, classes, match=match, **kw) for u in unit_sets]
    table = pd.DataFrame([{"kind": s.kind, "units": s.units, "scored": s.scored,
                           "disentanglement": s.disentanglement, "d_ci_low": s.d_ci[0], "d_ci_high": s.d_ci[1],
                           "coverage_all": s.coverage_all, f"coverage_at_{match}": s.coverage_matched,
                           "cov_ci_low": s.cov_ci[0], "cov_ci_high": s.cov_ci[1]} for s in scores])
    return table, scores


def margin_interval(per_unit: pd.DataFrame, first: str, others: list[str], n_boot: int = 2000, seed: int = 0,
                    level: float = 0.95) -> tuple[float, float]:
    """Percentile-bootstrap interval of mean D(first) - max over ``others`` of mean D(other): each
    kind's scored units (rows of ``per_unit`` with a disentanglement) resampled on their own (the
    kinds are different units, so unpaired)."""
    rng = np.random.default_rng(seed)
    draws = {}
    for kind in (first, *others):
        d = per_unit.loc[per_unit["kind"] == kind, "disentanglement"].dropna().to_numpy(dtype=np.float64)
        if len(d) == 0:
            raise ValueError(f"no scored units of kind {kind!r} for the margin's interval")
        draws[kind] = d[rng.integers(0, len(d), size=(n_boot, len(d)))].mean(1)
    margins = draws[first] - np.max(np.stack([draws[k] for k in others]), axis=0)
    a = (1 - level) / 2
    return float(np.quantile(margins, a)), float(np.quantile(margins, 1 - a))


def excess_margin_interval(per_unit: pd.DataFrame, first: str, others: list[str], nulls: dict[str, str],
                           n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile-bootstrap interval of the null-corrected margin [D(first) - D(its null)] - max over
    ``others`` of [D(other) - D(its null)] (``nulls``: {kind: its null's kind}, one for ``first`` and
    each of ``others``): every kind's scored units, trained and null, resampled on their own."""
    rng = np.random.default_rng(seed)
    kinds = (first, *others)
    missing = [k for k in kinds if k not in nulls]
    if missing:
        raise ValueError(f"no null named for kind(s) {missing} (nulls: {nulls})")
    draws = {}
    for kind in dict.fromkeys([*kinds, *(nulls[k] for k in kinds)]):
        d = per_unit.loc[per_unit["kind"] == kind, "disentanglement"].dropna().to_numpy(dtype=np.float64)
        if len(d) == 0:
            raise ValueError(f"no scored units of kind {kind!r} for the margin's interval")
        draws[kind] = d[rng.integers(0, len(d), size=(n_boot, len(d)))].mean(1)
    excess = {k: draws[k] - draws[nulls[k]] for k in kinds}
    margins = excess[first] - np.max(np.stack([excess[k] for k in others]), axis=0)
    a = (1 - level) / 2
    return float(np.quantile(margins, a)), float(np.quantile(margins, 1 - a))


def measure(table: pd.DataFrame, *, prototypes: str, heads: str, sae: str, nulls: dict[str, str],
            sae_explained_variance: float, n_classes: int, per_unit: pd.DataFrame, config: dict | None = None,
            tables: dict | None = None, seed: int = 0):
    """``protot/disentanglement-coverage`` as a :class:`compendium.claims.Measurement` from a
    :func:`compare` table. ``prototypes``, ``heads``, ``sae``: the kinds (rows) of the trained units;
    ``nulls``: {trained kind: its null's kind}. disentanglement_margin = D(prototypes) - max(D(heads),
    D(SAE)), with its interval from :func:`margin_interval` over ``per_unit`` (one row per unit: kind,
    disentanglement); coverage_margin likewise on the matched-size coverage; null_gap_min = the
    smallest D(kind) - D(its null) over ``nulls``; n_prototypes_scored = the scored prototypes (the units
    that make most of the interval's width, min_units' count).

    The check reads the null-corrected margins: each kind's score minus its own null's (what its units
    learned beyond what their encoding gives untrained: a random dictionary with the SAE's top-k
    encoding already scores high on both metrics), the prototypes' excess minus the larger of the
    heads' and the SAE features' excess. disentanglement_excess_margin, with its interval from
    :func:`excess_margin_interval`; coverage_excess_margin on the matched-size coverage. The raw
    margins stay in the values, not judged."""
    from compendium import claims

    t = table.set_index("kind")
    cov_col = next(c for c in table.columns if c.startswith("coverage_at_"))
    for k in (prototypes, heads, sae, *nulls, *nulls.values()):
        if k not in t.index:
            raise ValueError(f"kind {k!r} is not a row of the table (rows: {list(t.index)})")
    d = t["disentanglement"]
    c = t[cov_col]
    gaps = {k: float(d[k] - d[n]) for k, n in nulls.items()}
    lo, hi = margin_interval(per_unit, prototypes, [heads, sae], seed=seed)
    missing = [k for k in (prototypes, heads, sae) if k not in nulls]
    if missing:
        raise ValueError(f"no null named for kind(s) {missing}: the check compares each kind's score above its null")
    cov_gaps = {k: float(c[k] - c[nulls[k]]) for k in (prototypes, heads, sae)}
    x_lo, x_hi = excess_margin_interval(per_unit, prototypes, [heads, sae], nulls, seed=seed)
    values = {"disentanglement_margin": float(d[prototypes] - max(d[heads], d[sae])),
              "disentanglement_margin_ci_low": lo, "disentanglement_margin_ci_high": hi,
              "coverage_margin": float(c[prototypes] - max(c[heads], c[sae])),
              "null_gap_min": min(gaps.values()), "sae_explained_variance": float(sae_explained_variance),
              "n_classes": int(n_classes), "n_prototypes_scored": int(t.loc[prototypes, "scored"]),
              "d_prototypes": float(d[prototypes]), "d_heads": float(d[heads]), "d_sae": float(d[sae]),
              "coverage_prototypes": float(c[prototypes]), "coverage_heads": float(c[heads]),
              "coverage_sae": float(c[sae]),
              "disentanglement_excess_margin": float(gaps[prototypes] - max(gaps[heads], gaps[sae])),
              "disentanglement_excess_margin_ci_low": x_lo, "disentanglement_excess_margin_ci_high": x_hi,
              "coverage_excess_margin": float(cov_gaps[prototypes] - max(cov_gaps[heads], cov_gaps[sae]))}
    evidence = {"null_gaps": gaps, "coverage_null_gaps": cov_gaps,
                "matched_units": int(cov_col.removeprefix("coverage_at_")),
                "rows": table.round(4).to_dict(orient="records")}
    return claims.Measurement(claim="protot/disentanglement-coverage", values=values, evidence=evidence,
                              tables=dict(tables or {}, disentanglement_coverage=table), config=dict(config or {}))
