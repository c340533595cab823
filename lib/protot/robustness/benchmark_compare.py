"""Per-slice summaries on the authors' inputs and their comparison with the authors' tables.

``pairs`` are the distinct pairs of :func:`protot.robustness.benchmark.distinct_pairs` (columns
``slice``, ``copies``); ``scores`` a model's :func:`protot.robustness.scoring.score_pairs` on them
(same index). A slice's mean weighs each pair by its copies, as the authors' tables weigh their
records. Its interval comes from :func:`draws`: per slice, the distinct pairs drawn with
replacement (as many as the slice has), each drawn pair entering with its copies, the same draws
for every model and metric; copies, which a model scores identically, never narrow an interval.

    draws, slice_means, boot_means, slice_summary   the per-slice means and their resamples
    orders            per model the slices ranked by a metric against the authors' values, and the
                      smallest agreement over the models with its interval
    directions        per slice, model a above or below model b, ours and theirs
    separation        the tag flips' mean of slice means minus the meaning-preserving one
    table_agreement   per model and metric, Spearman over slices of ours against the authors' table
    benchmark_labels  the protocol's models and those that join once committed, labelled
    measure_benchmark the claim protot/robustness-jsd as a Measurement, the rule-generated pairs'
                      measurement kept beside it
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from protot.robustness.compare import ARCH_LABELS, _rank_rho, model_labels, permutation_p
from protot.robustness.rules import CHANGING, PRESERVING


def _check(pairs: pd.DataFrame, scores: pd.DataFrame, col: str) -> None:
    if not scores.index.equals(pairs.index):
        raise ValueError("the scores do not have the pairs' index")
    if col not in scores:
        raise ValueError(f"the scores have no column {col!r}; have {list(scores.columns)}")


def _rows(pairs: pd.DataFrame, s: str) -> np.ndarray:
    rows = np.flatnonzero((pairs["slice"] == s).to_numpy())
    if len(rows) == 0:
        raise ValueError(f"no pairs of slice {s!r}")
    return rows


def draws(pairs: pd.DataFrame, slices: Sequence[str], n_boot: int = 2000, seed: int = 0) -> dict[str, np.ndarray]:
    """Per slice (in ``slices`` order, one generator numpy default_rng(seed)): an (n_boot, m) array
    of positions of ``pairs`` drawn with replacement among the slice's m distinct pairs."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be at least 1, got {n_boot}")
    rng = np.random.default_rng(seed)
    out = {}
    for s in slices:
        rows = _rows(pairs, s)
        out[s] = rows[rng.integers(0, len(rows), (n_boot, len(rows)))]
    return out


def slice_means(pairs: pd.DataFrame, scores: pd.DataFrame, col: str = "js",
                slices: Sequence[str] = PRESERVING) -> pd.Series:
    """Mean of ``scores[col]`` per slice over its records: each distinct pair weighed by its copies."""
    _check(pairs, scores, col)
    x, w = scores[col].to_numpy(dtype=float), pairs["copies"].to_numpy(dtype=float)
    return pd.Series({s: float(np.average(x[_rows(pairs, s)], weights=w[_rows(pairs, s)])) for s in slices}, name=col)


def boot_means(pairs: pd.DataFrame, scores: pd.DataFrame, col: str, slices: Sequence[str],
               drawn: Mapping[str, np.ndarray]) -> np.ndarray:
    """(n_boot, len(slices)) copy-weighted slice means of the resamples ``drawn`` (:func:`draws`)."""
    _check(pairs, scores, col)
    x, w = scores[col].to_numpy(dtype=float), pairs["copies"].to_numpy(dtype=float)
    missing = [s for s in slices if s not in drawn]
    if missing:
        raise ValueError(f"no draws for the slices {missing}")
    return np.stack([(x[drawn[s]] * w[drawn[s]]).sum(1) / w[drawn[s]].sum(1) for s in slices], axis=1)


def _ends(boot: np.ndarray, level: float) -> tuple[float, float]:
    boot = boot[np.isfinite(boot)]
    if len(boot) == 0:
        return float("nan"), float("nan")
    a = (1 - level) / 2
    return float(np.quantile(boot, a)), float(np.quantile(boot, 1 - a))


def slice_summary(pairs: pd.DataFrame, scores: pd.DataFrame, col: str, slices: Sequence[str],
                  drawn: Mapping[str, np.ndarray], level: float = 0.95) -> pd.DataFrame:
    """Per slice: mean (copy-weighted), its percentile interval (ci_lo, ci_hi) over ``drawn``,
    records (copies counted) and distinct pairs."""
    means = slice_means(pairs, scores, col, slices)
    boot = boot_means(pairs, scores, col, slices, drawn)
    rows = {}
    for j, s in enumerate(slices):
        lo, hi = _ends(boot[:, j], level)
        r = _rows(pairs, s)
        rows[s] = {"mean": means[s], "ci_lo": lo, "ci_hi": hi, "records": int(pairs["copies"].iloc[r].sum()),
                   "distinct": len(r)}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("slice")


def orders(pairs: pd.DataFrame, scores: Mapping[str, pd.DataFrame], theirs: Mapping[str, Mapping[str, float]],
           drawn: Mapping[str, np.ndarray], *, col: str = "js", slices: Sequence[str] = PRESERVING,
           level: float = 0.95) -> tuple[pd.DataFrame, tuple[float, float, float]]:
    """Per model of ``scores``: the Spearman (rho) and Kendall (tau) correlation of our slice means
    of ``col`` with the authors' values (``theirs[model]``: slice -> value), rho's percentile
    interval over ``drawn`` and its exact permutation p-value; and (rho, low, high): the smallest rho
    over the models with the interval of the smallest rho of each resample (the same draws)."""
    if not scores:
        raise ValueError("orders needs at least one model's scores")
    rows, boots = [], []
    for name, sc in scores.items():
        if name not in theirs:
            raise ValueError(f"no authors' values for model {name!r}; have {sorted(theirs)}")
        missing = [s for s in slices if s not in theirs[name]]
        if missing:
            raise ValueError(f"the authors' values of {name} lack the slices {missing}")
        ref = np.array([float(theirs[name][s]) for s in slices])
        ours = slice_means(pairs, sc, col, slices).to_numpy()
        rho = float(_rank_rho(ours[None], ref)[0])
        boot = _rank_rho(boot_means(pairs, sc, col, slices, drawn), ref)
        boots.append(boot)
        lo, hi = _ends(boot, level)
        rows.append({"model": name, "metric": col, "rho": rho, "tau": float(stats.kendalltau(ours, ref).statistic),
                     "rho_ci_lo": lo, "rho_ci_hi": hi, "perm_p": permutation_p(rho, len(slices))})
    table = pd.DataFrame(rows)
    smallest = np.min(np.stack(boots), axis=0)
    lo, hi = _ends(smallest, level)
    return table, (float(table["rho"].min()), lo, hi)


def directions(pairs: pd.DataFrame, a: pd.DataFrame, b: pd.DataFrame, theirs_a: Mapping[str, float],
               theirs_b: Mapping[str, float], drawn: Mapping[str, np.ndarray], *, col: str = "js",
               slices: Sequence[str] = PRESERVING, tie_rel: float = 0.01, level: float = 0.95) -> pd.DataFrame:
    """Per slice: model a's mean ``col`` minus model b's on the same pairs, ours with its paired
    percentile interval over ``drawn`` ("above": ci_lo > 0, "below": ci_hi < 0, else "undecided"),
    theirs by the sign of their difference ("tie" when |a - b| < tie_rel x (a + b) / 2); ``agree``:
    True (same side), False (opposite sides, both decided), None (ours undecided or theirs a tie)."""
    diff = pd.DataFrame({col: a[col].to_numpy(dtype=float) - b[col].to_numpy(dtype=float)}, index=a.index)
    _check(pairs, b, col)
    ours = slice_means(pairs, diff, col, slices)
    boot = boot_means(pairs, diff, col, slices, drawn)
    rows = []
    for j, s in enumerate(slices):
        lo, hi = _ends(boot[:, j], level)
        side = "above" if lo > 0 else "below" if hi < 0 else "undecided"
        ta, tb = float(theirs_a[s]), float(theirs_b[s])
        their = "tie" if abs(ta - tb) < tie_rel * (ta + tb) / 2 else "above" if ta > tb else "below"
        agree = None if side == "undecided" or their == "tie" else side == their
        rows.append({"slice": s, "ours_diff": float(ours[s]), "ci_lo": lo, "ci_hi": hi, "ours": side,
                     "theirs_diff": ta - tb, "theirs": their, "agree": agree})
    return pd.DataFrame(rows).set_index("slice")


def separation(pairs: pd.DataFrame, scores: pd.DataFrame, drawn: Mapping[str, np.ndarray], *, col: str = "js",
               changing: Sequence[str] = CHANGING, preserving: Sequence[str] = PRESERVING,
               level: float = 0.95) -> dict:
    """The mean of the ``changing`` slice means minus the mean of the ``preserving`` ones (``diff``),
    its interval over ``drawn`` and ``separates`` (the interval lies above 0)."""
    sl = list(changing) + list(preserving)
    m = slice_means(pairs, scores, col, sl).to_numpy()
    boot = boot_means(pairs, scores, col, sl, drawn)
    k = len(changing)
    lo, hi = _ends(boot[:, :k].mean(1) - boot[:, k:].mean(1), level)
    return {"diff": float(m[:k].mean() - m[k:].mean()), "ci_lo": lo, "ci_hi": hi, "separates": bool(lo > 0)}


def table_agreement(pairs: pd.DataFrame, scores: Mapping[str, pd.DataFrame], authors: pd.DataFrame,
                    authors_model: Callable[[str], str] = lambda m: m) -> pd.DataFrame:
    """Per model, metric and meaning ("preserved": the seven slices, "changed": the three tag
    flips): the Spearman correlation over the slices of our means with the authors' (``authors``:
    :func:`protot.robustness.compare.authors_table`, its model column read through
    ``authors_model``), and the slices compared. A metric their table lacks for a model is left out."""
    rows = []
    for name, sc in scores.items():
        for meaning, slices in (("preserved", PRESERVING), ("changed", CHANGING)):
            for col in ("js", "overlap", "spearman", "top1"):
                t = authors[(authors["model"] == authors_model(name)) & (authors["metric"] == col)
                            & (authors["meaning"] == meaning)].set_index("type")["value"]
                common = [s for s in slices if s in t.index]
                if len(common) < 3:
                    continue
                ours = slice_means(pairs, sc, col, common).to_numpy()
                rows.append({"model": name, "metric": col, "meaning": meaning, "slices": len(common),
                             "rho": float(_rank_rho(ours[None], t[common].to_numpy(dtype=float))[0])})
    return pd.DataFrame(rows, columns=["model", "metric", "meaning", "slices", "rho"])


def benchmark_labels(names: Sequence[str], once_committed: Sequence[str], available: Sequence[str],
                     arch_of: Callable[[str], str]) -> tuple[dict[str, str], list[str]]:
    """({label: name}, not_compared): the protocol's ``names`` labelled as the authors' tables name
    their architectures (:func:`protot.robustness.compare.model_labels`), then each model of
    ``once_committed`` that is in ``available``, labelled "<architecture> (<name>)"; those not yet
    committed are returned as not compared."""
    labels = model_labels(names, arch_of)
    missing = []
    for name in once_committed:
        if name not in available:
            missing.append(name)
            continue
        arch = arch_of(name)
        if arch not in ARCH_LABELS:
            raise ValueError(f"{name}: architecture {arch!r} is not one of the authors' ({sorted(ARCH_LABELS)})")
        labels[f"{ARCH_LABELS[arch]} ({name})"] = name
    return labels, missing


def authors_column(label: str) -> str:
    """The authors' model a label is compared with: "DeltaNet (x)" -> "DeltaNet"."""
    return label.split(" (")[0]


def _records(df: pd.DataFrame) -> list[dict]:
    return [{k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in r.items()}
            for r in df.reset_index().to_dict("records")]


def measure_benchmark(pairs: pd.DataFrame, scores: Mapping[str, pd.DataFrame], paper_js: Mapping[str, Mapping[str, float]],
                      rule, *, protot: str = "ProtoT", llama: str = "LLaMA", n_boot: int = 2000, seed: int = 0,
                      tie_rel: float = 0.01, authors: pd.DataFrame | None = None, config: dict | None = None,
                      evidence: dict | None = None):
    """``protot/robustness-jsd`` measured on the authors' inputs, as a :class:`compendium.claims.Measurement`.

    ``pairs``: the distinct pairs of both files (``slice``, ``copies``); ``scores``: label ->
    score_pairs on them; ``paper_js``: the authors' model -> {slice: JS} (claims.yaml; a label
    "X (name)" is compared with X); ``rule``: the rule-generated pairs' Measurement
    (:func:`protot.robustness.compare.measure_robustness`), the second measurement, which gives the
    precondition control_separates and is kept in the evidence and tables. Values (the check):
    min_order_rho with its interval and max_order_perm_p over the models (the seven
    meaning-preserving slices by JS, :func:`orders`), direction_matches / direction_mismatches
    (ProtoT against LLaMA per slice, :func:`directions`), control_separates (from ``rule``) and
    min_pairs_per_type (distinct pairs of the rarest meaning-preserving slice)."""
    from compendium import claims

    if protot not in scores or llama not in scores:
        raise ValueError(f"the check compares {protot!r} with {llama!r}; scores hold {sorted(scores)}")
    theirs = {}
    for name in scores:
        col = authors_column(name)
        if col not in paper_js:
            raise ValueError(f"no paper values for model {name!r} (the authors' {col!r}); have {sorted(paper_js)}")
        theirs[name] = paper_js[col]
    present = set(pairs["slice"])
    missing = [s for s in PRESERVING + CHANGING if s not in present]
    if missing:
        raise ValueError(f"the pairs lack the slices {missing}")
    drawn = draws(pairs, PRESERVING + CHANGING, n_boot, seed)
    order_tab, (rho, lo, hi) = orders(pairs, scores, theirs, drawn)
    tag_orders, _ = orders(pairs, scores, theirs, drawn, slices=CHANGING)
    dirs = directions(pairs, scores[protot], scores[llama], theirs[protot], theirs[llama], drawn, tie_rel=tie_rel)
    tag_dirs = directions(pairs, scores[protot], scores[llama], theirs[protot], theirs[llama], drawn,
                          slices=CHANGING, tie_rel=tie_rel)
    sep = {n: separation(pairs, s, drawn) for n, s in scores.items()}
    distinct = pairs["slice"].value_counts()
    values = {"min_order_rho": rho, "min_order_rho_ci_low": lo, "min_order_rho_ci_high": hi,
              "max_order_perm_p": float(order_tab["perm_p"].max()),
              "direction_matches": int((dirs["agree"] == True).sum()),  # noqa: E712  (None is neither)
              "direction_mismatches": int((dirs["agree"] == False).sum()),  # noqa: E712
              "control_separates": bool(rule.values["control_separates"]),
              "min_pairs_per_type": int(distinct[list(PRESERVING)].min())}
    summ = pd.concat([slice_summary(pairs, s, c, PRESERVING + CHANGING, drawn).assign(model=n, metric=c)
                      for n, s in scores.items() for c in ("js", "overlap", "spearman", "top1")]).reset_index()
    tables = {"benchmark_slices": summ, "benchmark_orders": pd.concat([order_tab.assign(meaning="preserved"),
                                                                      tag_orders.assign(meaning="changed")]),
              "benchmark_directions": pd.concat([dirs.assign(meaning="preserved"),
                                                 tag_dirs.assign(meaning="changed")]).reset_index()}
    if authors is not None:
        tables["benchmark_tables"] = table_agreement(pairs, scores, authors, authors_column)
    tables.update({f"rule_{k}": v for k, v in rule.tables.items()})
    ev = {"models": sorted(scores),
          "order": {r["model"]: {k: r[k] for k in ("rho", "tau", "rho_ci_lo", "rho_ci_hi", "perm_p")}
                    for r in _records(order_tab)},
          "directions": _records(dirs), "directions_undecided_or_tied": int(dirs["agree"].isna().sum()),
          "tag_flip_directions": _records(tag_dirs), "tag_flip_separation": sep,
          "records_per_slice": {s: int(pairs.loc[pairs["slice"] == s, "copies"].sum()) for s in PRESERVING + CHANGING},
          "distinct_pairs_per_slice": {s: int(distinct[s]) for s in PRESERVING + CHANGING},
          "records_whose_edit_reaches_the_last_token": (
              {s: int(pairs["copies"][(pairs["slice"] == s) & (scores[protot]["tokens_after"] == 0)].sum())
               for s in PRESERVING + CHANGING} if "tokens_after" in scores[protot] else None),
          "rule_pairs": {"values": dict(rule.values), "order": rule.evidence.get("order"),
                         "control_separation": rule.evidence.get("control_separation")},
          **(evidence or {})}
    return claims.Measurement(claim="protot/robustness-jsd", values=values, evidence=ev,
                              unit="JS (nats), orders over the authors' slices", tables=tables,
                              config=dict(config or {}, n_boot=n_boot, seed=seed, tie_rel=tie_rel))
