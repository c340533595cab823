"""Per-type summaries of the pair metrics and their comparison with the authors' tables.

The authors' JS is not the bounded per-distribution divergence (their values exceed ln 2), so raw
values are never compared; orders are:

- :func:`order_agreement`: for one model, the Spearman correlation (and Kendall's tau) between our
  mean JS per meaning-preserving type and theirs, a percentile bootstrap interval of it (pairs
  resampled within each type) and the exact permutation p-value (the share of all orderings of the
  types that agree with theirs at least as well); :func:`min_order_agreement`: the smallest of these
  correlations over the models, with its own interval (the same pairs drawn for every model);
- :func:`direction_comparison`: per type, whether ProtoT's mean JS lies above or below LLaMA's,
  ours decided by a paired bootstrap interval over the pairs, theirs by the sign of the
  difference (a tie when it is below ``tie_rel`` of the two values' mean);
- :func:`control_separation`: whether a model's JS under meaning-changing edits exceeds its JS
  under meaning-preserving ones (type means averaged with equal weight, bootstrap interval);
- :func:`measure_robustness`: the claim ``protot/robustness-jsd`` as a Measurement;
  :func:`model_labels`: the protocol's models under the names the authors' tables use.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from compendium.stats import bootstrap_groups_ci, bootstrap_mean_ci, paired_bootstrap_ci
from protot.robustness.rules import CHANGING, PRESERVING

#: the authors' model names -> ours
AUTHOR_MODELS = {"ProtoAttn": "ProtoT", "ProtoT": "ProtoT", "LLaMA": "LLaMA", "Mamba": "Mamba",
                 "Deltanet": "DeltaNet", "DeltaNet": "DeltaNet"}
#: our architectures (a committed model's MANIFEST ``arch``) -> the names the authors' tables use
ARCH_LABELS = {"protot": "ProtoT", "llama": "LLaMA", "mamba": "Mamba", "deltanet": "DeltaNet"}
METRICS = {"JS_mean": "js", "overlap_mean": "overlap", "spearman_mean": "spearman", "top1_same_rate": "top1"}


def model_labels(names, arch_of) -> dict:
    """{label: name} for the models ``names`` (a protocol's list of committed models), each labelled as
    the authors' tables name its architecture (``arch_of(name)``, e.g. its manifest's ``arch``), in
    the order given. ValueError for an architecture the tables do not name, or two models of one."""
    out = {}
    for name in names:
        arch = arch_of(name)
        if arch not in ARCH_LABELS:
            raise ValueError(f"{name}: architecture {arch!r} is not one of the authors' ({sorted(ARCH_LABELS)})")
        label = ARCH_LABELS[arch]
        if label in out:
            raise ValueError(f"two {label} models: {out[label]} and {name}")
        out[label] = name
    if "ProtoT" not in out or "LLaMA" not in out:
        raise ValueError(f"the comparison needs a ProtoT and a LLaMA model, got {list(names)}")
    return out


def authors_table(folder: str | Path) -> pd.DataFrame:
    """The authors' two result tables (robustness_summary_table.csv, intervention_comparison_table.csv
    in ``folder``) as one long table: type, model (our names), metric (js, overlap, spearman, top1),
    value, meaning ("preserved" / "changed")."""
    folder = Path(folder)
    rows = []
    wide = pd.read_csv(folder / "robustness_summary_table.csv", header=[0, 1], index_col=0, skiprows=[2])
    for (metric, model), col in wide.items():
        for typ, v in col.items():
            rows.append((typ, AUTHOR_MODELS[model], METRICS[metric], float(v), "preserved"))
    flat = pd.read_csv(folder / "intervention_comparison_table.csv", index_col=0)
    for name, col in flat.items():
        metric, model = name.split("__")
        for typ, v in col.items():
            rows.append((typ, AUTHOR_MODELS[model], METRICS[metric], float(v), "changed"))
    out = pd.DataFrame(rows, columns=["type", "model", "metric", "value", "meaning"])
    unknown = set(out["type"]) - set(PRESERVING) - set(CHANGING)
    if unknown:
        raise ValueError(f"the authors' tables in {folder} hold unknown types {sorted(unknown)}")
    return out


def _values(pairs: pd.DataFrame, scores: pd.DataFrame, col: str, typ: str) -> np.ndarray:
    if not scores.index.equals(pairs.index):
        raise ValueError("the scores do not have the pairs' index")
    x = scores.loc[pairs.index[pairs["edit_type"] == typ], col].to_numpy(dtype=float)
    if len(x) == 0:
        raise ValueError(f"no pairs of type {typ!r}")
    return x


def type_means(pairs: pd.DataFrame, scores: pd.DataFrame, col: str = "js",
               types: Sequence[str] = PRESERVING) -> pd.Series:
    """Mean of ``scores[col]`` per type (in ``types`` order)."""
    return pd.Series({t: float(_values(pairs, scores, col, t).mean()) for t in types}, name=col)


def type_summary(pairs: pd.DataFrame, scores: pd.DataFrame, col: str = "js", *,
                 types: Sequence[str] = PRESERVING + CHANGING, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per type: mean, 95% bootstrap interval (ci_lo, ci_hi), median and n of ``scores[col]``."""
    rows = {}
    for t in types:
        x = _values(pairs, scores, col, t)
        lo, hi = bootstrap_mean_ci(x, n_boot=n_boot, seed=seed)
        rows[t] = {"mean": float(x.mean()), "ci_lo": lo, "ci_hi": hi, "median": float(np.median(x)), "n": len(x)}
    return pd.DataFrame.from_dict(rows, orient="index")


def _boot_means(pairs, scores, col, types, n_boot, seed) -> np.ndarray:
    """(n_boot, len(types)) bootstrap type means: pairs resampled with replacement within each type."""
    rng = np.random.default_rng(seed)
    out = np.empty((n_boot, len(types)))
    for j, t in enumerate(types):
        x = _values(pairs, scores, col, t)
        out[:, j] = x[rng.integers(0, len(x), (n_boot, len(x)))].mean(1)
    return out


def _rank_rho(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman of each row of a (n, k) with the vector b (k,)."""
    ra = stats.rankdata(a, axis=-1)
    rb = stats.rankdata(b)
    ra = ra - ra.mean(-1, keepdims=True)
    rb = rb - rb.mean()
    den = np.sqrt((ra ** 2).sum(-1) * (rb ** 2).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (ra * rb).sum(-1) / np.where(den > 0, den, 1), np.nan)


def permutation_p(rho: float, k: int) -> float:
    """Exact one-sided p-value of a Spearman correlation ``rho`` between two orders of ``k`` items
    (no ties): the share of the k! orders whose correlation with a fixed one is >= rho."""
    if not 3 <= k <= 9:
        raise ValueError(f"the exact permutation p-value is computed for 3..9 items, got {k}")
    base = np.arange(k, dtype=float)
    perms = np.array(list(itertools.permutations(range(k))), dtype=float)
    all_rho = _rank_rho(perms, base)
    return float(np.mean(all_rho >= rho - 1e-12))


def order_agreement(pairs: pd.DataFrame, scores: pd.DataFrame, theirs: Mapping[str, float], *,
                    col: str = "js", types: Sequence[str] = PRESERVING, n_boot: int = 2000, seed: int = 0,
                    level: float = 0.95) -> dict:
    """How well our order of ``types`` by mean ``col`` agrees with the authors' (``theirs``: type ->
    value): rho (Spearman), tau (Kendall), rho_ci_lo / rho_ci_hi (percentile bootstrap over pairs,
    resampled within types), perm_p (exact permutation p-value of rho), ours and theirs (the means)."""
    missing = [t for t in types if t not in theirs]
    if missing:
        raise ValueError(f"the authors' values lack the types {missing}")
    ours = type_means(pairs, scores, col, types).to_numpy()
    ref = np.array([float(theirs[t]) for t in types])
    rho = float(_rank_rho(ours[None], ref)[0])
    tau = float(stats.kendalltau(ours, ref).statistic)
    boot = _rank_rho(_boot_means(pairs, scores, col, types, n_boot, seed), ref)
    boot = boot[np.isfinite(boot)]
    a = (1 - level) / 2
    return {"rho": rho, "tau": tau, "rho_ci_lo": float(np.quantile(boot, a)), "rho_ci_hi": float(np.quantile(boot, 1 - a)),
            "perm_p": permutation_p(rho, len(types)), "ours": dict(zip(types, ours.tolist())),
            "theirs": dict(zip(types, ref.tolist()))}


def min_order_agreement(pairs: pd.DataFrame, scores: Mapping[str, pd.DataFrame], theirs: Mapping[str, Mapping[str, float]],
                        *, col: str = "js", types: Sequence[str] = PRESERVING, n_boot: int = 2000, seed: int = 0,
                        level: float = 0.95) -> tuple[float, float, float]:
    """(rho, low, high): the smallest over the models of ``scores`` of the Spearman correlation between
    our mean ``col`` per type and the authors' (``theirs[model]``: type -> value), and its percentile
    bootstrap interval: pairs resampled within each type, the same pairs for every model (the models
    score the same pairs), the smallest correlation taken in each resample
    (:func:`compendium.stats.bootstrap_groups_ci`). With one model its interval is
    :func:`order_agreement`'s."""
    models = list(scores)
    if not models:
        raise ValueError("min_order_agreement needs at least one model's scores")
    refs = [np.array([float(theirs[m][t]) for t in types]) for m in models]
    point = min(float(_rank_rho(type_means(pairs, scores[m], col, types).to_numpy()[None], r)[0])
                for m, r in zip(models, refs))

    def smallest(*per_type):          # per type: one (n_boot, n_type) array per model
        return np.min([_rank_rho(np.stack([g[i].mean(1) for g in per_type], axis=1), r)
                       for i, r in enumerate(refs)], axis=0)

    groups = [tuple(_values(pairs, scores[m], col, t) for m in models) for t in types]
    lo, hi = bootstrap_groups_ci(smallest, *groups, n_boot=n_boot, seed=seed, level=level)
    return point, lo, hi


def direction_comparison(pairs: pd.DataFrame, a: pd.DataFrame, b: pd.DataFrame, theirs_a: Mapping[str, float],
                         theirs_b: Mapping[str, float], *, col: str = "js", types: Sequence[str] = PRESERVING,
                         tie_rel: float = 0.01, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per type: is model a's mean ``col`` above or below model b's, ours and theirs.

    Ours: the paired 95% bootstrap interval of mean(a - b) over the same pairs: "above" (ci_lo > 0),
    "below" (ci_hi < 0) or "undecided". Theirs: "above"/"below" by the sign of a - b, "tie" when
    |a - b| < tie_rel x (a + b) / 2. ``agree``: True (same side), False (opposite sides, both
    decided), None (ours undecided or theirs a tie)."""
    rows = []
    for t in types:
        x, y = _values(pairs, a, col, t), _values(pairs, b, col, t)
        lo, hi = paired_bootstrap_ci(x, y, n_boot=n_boot, seed=seed)
        ours = "above" if lo > 0 else "below" if hi < 0 else "undecided"
        ta, tb = float(theirs_a[t]), float(theirs_b[t])
        theirs = "tie" if abs(ta - tb) < tie_rel * (ta + tb) / 2 else "above" if ta > tb else "below"
        agree = None if "undecided" in (ours,) or theirs == "tie" else ours == theirs
        rows.append({"type": t, "ours_diff": float(x.mean() - y.mean()), "ci_lo": lo, "ci_hi": hi, "ours": ours,
                     "theirs_diff": ta - tb, "theirs": theirs, "agree": agree})
    return pd.DataFrame(rows).set_index("type")


def control_separation(pairs: pd.DataFrame, scores: pd.DataFrame, *, col: str = "js", n_boot: int = 2000,
                       seed: int = 0, level: float = 0.95) -> dict:
    """Mean over the meaning-changing types of the type means minus the same over the
    meaning-preserving types (``diff``), its bootstrap interval (pairs resampled within types) and
    ``separates``: the interval lies above 0."""
    chg = [t for t in CHANGING if (pairs["edit_type"] == t).any()]
    pre = [t for t in PRESERVING if (pairs["edit_type"] == t).any()]
    if not chg or not pre:
        raise ValueError(f"control separation needs meaning-changing {CHANGING} and meaning-preserving "
                         f"{PRESERVING} pairs; have {sorted(set(pairs['edit_type']))}")
    boot = _boot_means(pairs, scores, col, chg + pre, n_boot, seed)
    d = boot[:, :len(chg)].mean(1) - boot[:, len(chg):].mean(1)
    m = type_means(pairs, scores, col, chg + pre)
    diff = float(m[chg].mean() - m[pre].mean())
    a = (1 - level) / 2
    lo, hi = float(np.quantile(d, a)), float(np.quantile(d, 1 - a))
    return {"diff": diff, "ci_lo": lo, "ci_hi": hi, "separates": bool(lo > 0)}


def measure_robustness(pairs: pd.DataFrame, scores: Mapping[str, pd.DataFrame], paper_js: Mapping[str, Mapping[str, float]],
                       *, protot: str = "ProtoT", llama: str = "LLaMA", n_boot: int = 2000, seed: int = 0,
                       tie_rel: float = 0.01, config: dict | None = None, evidence: dict | None = None):
    """``protot/robustness-jsd`` as a :class:`compendium.claims.Measurement`.

    ``scores``: model label -> :func:`protot.robustness.scoring.score_pairs` result on ``pairs``;
    ``paper_js``: model label -> {type: the authors' JS} (claims.yaml). Values (the claim's check):

    - min_order_rho with min_order_rho_ci_low / _ci_high: over the measured models, the smallest
      order agreement (Spearman) of the seven types by JS and its interval (:func:`min_order_agreement`);
      max_order_perm_p: the largest permutation p-value of those agreements;
    - direction_matches / direction_mismatches: types where ProtoT-vs-LLaMA lies on the authors'
      side / the opposite side (:func:`direction_comparison`);
    - control_separates (every model, :func:`control_separation`) and min_pairs_per_type.
    """
    from compendium import claims

    if protot not in scores or llama not in scores:
        raise ValueError(f"the check compares {protot!r} with {llama!r}; scores hold {sorted(scores)}")
    for name in scores:
        if name not in paper_js:
            raise ValueError(f"no paper values for model {name!r}; have {sorted(paper_js)}")
    counts = pairs["edit_type"].value_counts()
    missing = [t for t in PRESERVING + CHANGING if t not in counts]
    if missing:
        raise ValueError(f"the pairs lack the types {missing}")
    order = {n: order_agreement(pairs, s, paper_js[n], n_boot=n_boot, seed=seed) for n, s in scores.items()}
    sep = {n: control_separation(pairs, s, n_boot=n_boot, seed=seed) for n, s in scores.items()}
    dirs = direction_comparison(pairs, scores[protot], scores[llama], paper_js[protot], paper_js[llama],
                                tie_rel=tie_rel, n_boot=n_boot, seed=seed)
    rho, rho_lo, rho_hi = min_order_agreement(pairs, scores, paper_js, n_boot=n_boot, seed=seed)
    values = {"min_order_rho": rho, "min_order_rho_ci_low": rho_lo, "min_order_rho_ci_high": rho_hi,
              "max_order_perm_p": max(o["perm_p"] for o in order.values()),
              "direction_matches": int((dirs["agree"] == True).sum()),  # noqa: E712  (None is neither)
              "direction_mismatches": int((dirs["agree"] == False).sum()),  # noqa: E712
              "control_separates": all(s["separates"] for s in sep.values()),
              "min_pairs_per_type": int(counts[list(PRESERVING + CHANGING)].min())}
    ev = {"models": sorted(scores), "order": {n: {k: v for k, v in o.items()} for n, o in order.items()},
          "control_separation": sep, "directions_undecided_or_tied": int(dirs["agree"].isna().sum()),
          **(evidence or {})}
    order_tab = pd.DataFrame([{"model": n, "type": t, "ours": o["ours"][t], "theirs": o["theirs"][t]}
                              for n, o in order.items() for t in PRESERVING])
    summ = pd.concat([type_summary(pairs, s, n_boot=n_boot, seed=seed).assign(model=n).rename_axis("type").reset_index()
                      for n, s in scores.items()], ignore_index=True)
    return claims.Measurement(claim="protot/robustness-jsd", values=values, evidence=ev, unit="JS (nats), orders",
                              tables={"robustness_js": summ, "robustness_order": order_tab,
                                      "robustness_direction": dirs.reset_index()},
                              config=dict(config or {}, n_boot=n_boot, seed=seed, tie_rel=tie_rel))
