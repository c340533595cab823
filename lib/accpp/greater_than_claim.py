"""The claim accpp/greater-than-circuit from the pieces of :mod:`accpp.greater_than`: the seed shares
of the traced circuits, the held-out knock-out of the year heads, and the 95% interval of every judged
quantity (frac_year_head over the traced circuits, the shares over the traced prompts, the knock-out
p over its random head sets)."""
from __future__ import annotations

from accpp.trace import Circuit

__all__ = ["mlp_seed_shares", "seed_table", "mlp_share_intervals", "knockout_table", "knockout_p_interval",
           "measure_greater_than_circuit"]


def mlp_seed_shares(seeds, late_from: int) -> tuple[float, float]:
    """(MLP share of the positive seed attribution, share of the MLPs' that layers >= ``late_from`` carry).

    ``seeds``: one row per seed edge of the traced circuits, columns ``kind`` ("head", "mlp", "emb"),
    ``layer`` and ``attribution``. The late share is NaN when no MLP seed is positive.
    """
    missing = [c for c in ("kind", "layer", "attribution") if c not in seeds]
    if missing:
        raise ValueError(f"mlp_seed_shares: the seed table lacks column(s) {missing}")
    pos = seeds[seeds["attribution"] > 0]
    if len(pos) == 0:
        raise ValueError("mlp_seed_shares: no seed with positive attribution")
    mlp = pos[pos["kind"] == "mlp"]
    mlp_total = mlp["attribution"].sum()
    late = mlp[mlp["layer"] >= late_from]["attribution"].sum()
    return float(mlp_total / pos["attribution"].sum()), float(late / mlp_total) if mlp_total > 0 else float("nan")


def seed_table(circuits: list[Circuit]):
    """One row per seed edge of the circuits: ``prompt`` (the circuit's index), ``kind``, ``layer``,
    ``attribution`` (the table :func:`mlp_seed_shares` and :func:`mlp_share_intervals` read)."""
    import pandas as pd

    rows = [dict(prompt=i, kind=c.graph.nodes[u]["kind"], layer=c.graph.nodes[u]["layer"], attribution=d["attribution"])
            for i, c in enumerate(circuits) for u, _, d in c.graph.edges(data=True) if d["side"] == "seed"]
    return pd.DataFrame(rows, columns=["prompt", "kind", "layer", "attribution"])


def mlp_share_intervals(seeds, late_from: int, n_prompts: int, n_boot: int = 2000, seed: int = 0,
                        level: float = 0.95) -> dict[str, float]:
    """Percentile-bootstrap intervals of the two shares of :func:`mlp_seed_shares`, the traced prompts
    resampled (each with all its seeds; ``seeds["prompt"]`` in 0 .. n_prompts - 1, a prompt without
    seeds counts as a unit with none). Each share stays what :func:`mlp_seed_shares` computes, a pooled
    ratio over the prompts (sum of the parts / sum of the wholes), not a mean of per-prompt shares:
    mlp_share = sum_i MLP_i / sum_i POS_i and late_mlp_share = sum_i LATE_i / sum_i MLP_i, with POS_i,
    MLP_i, LATE_i prompt i's positive seed attribution in all, from MLPs, from MLPs of layers >=
    ``late_from``. A resample whose denominator is 0 (no positive seed, or no positive MLP seed, in any
    of its prompts) counts as share 0. Returns {mlp_share, late_mlp_share}_ci_{low, high}."""
    import numpy as np

    from compendium.stats import bootstrap_ratio_ci

    if "prompt" not in seeds:
        raise ValueError("mlp_share_intervals: the seed table lacks column 'prompt' (seed_table)")
    if len(seeds) and not seeds["prompt"].between(0, n_prompts - 1).all():
        raise ValueError(f"mlp_share_intervals: prompt indices must lie in 0..{n_prompts - 1}")
    pos = seeds[seeds["attribution"] > 0]
    mlp = pos[pos["kind"] == "mlp"]
    late = mlp[mlp["layer"] >= late_from]
    per = [np.bincount(t["prompt"].to_numpy(dtype=int), weights=t["attribution"].to_numpy(dtype=float),
                       minlength=n_prompts) for t in (pos, mlp, late)]
    out = {}
    for name, (num, den) in (("mlp_share", (per[1], per[0])), ("late_mlp_share", (per[2], per[1]))):
        lo, hi = bootstrap_ratio_ci(num, den, n_boot=n_boot, seed=seed, level=level, empty=0.0)
        out[f"{name}_ci_low"], out[f"{name}_ci_high"] = lo, hi
    return out


def knockout_table(ko: dict, named: dict[str, list[tuple[int, int]]]):
    """One row per head choice of :func:`accpp.greater_than.knockout_comparison`: heads, k, drop, p,
    n_extreme, random drops' mean and max."""
    import numpy as np
    import pandas as pd

    unknown = set(ko["methods"]) - set(named)
    if unknown:
        raise ValueError(f"knockout_table: no head set named {sorted(unknown)}")
    return pd.DataFrame([dict(method=name, heads=", ".join(f"A{l}.{h}" for l, h in named[name]), k=r["k"],
                              drop=r["drop"], p=r["p"], n_extreme=r["n_extreme"],
                              random_drop_mean=float(np.mean(r["random_drops"])) if r["random_drops"] else float("nan"),
                              random_drop_max=float(np.max(r["random_drops"])) if r["random_drops"] else float("nan"))
                         for name, r in ko["methods"].items()])


def knockout_p_interval(r: dict, level: float = 0.95) -> tuple[float, float]:
    """Monte-Carlo interval of one head set's knock-out p (a method of
    :func:`accpp.greater_than.knockout_comparison`): the Clopper-Pearson interval of the exact p from
    its ``n_extreme`` of ``len(random_drops)`` random sets (:func:`compendium.stats.permutation_p_interval`);
    (1, 1) for an empty head set (p is 1, nothing drawn)."""
    from compendium.stats import permutation_p_interval

    if r["k"] == 0:
        return 1.0, 1.0
    return permutation_p_interval(r["n_extreme"], len(r["random_drops"]), level)


def measure_greater_than_circuit(circuits_table, seeds, ko: dict, named: dict[str, list[tuple[int, int]]],
                                 ranks: list[int], prob_diff: float, late_from: int, n_random: int,
                                 config: dict | None = None, n_boot: int = 2000):
    """Claim accpp/greater-than-circuit, each judged quantity with its 95% interval.

    ``circuits_table``: one row per traced circuit with ``n_year_heads`` (and ``mlp_layers``, dropped
    from the recorded table); ``seeds``: the seed edges of those circuits (:func:`seed_table`, ``prompt``
    the row of ``circuits_table``); ``ko`` and ``named``:
    :func:`accpp.greater_than.knockout_comparison`'s result and the head sets it knocked out, which
    must include "traced year heads" (the heads chosen on the selection half); ``ranks``: the signal ranks of every traced circuit; ``prob_diff``: the model's mean
    P(YY' > YY) - P(YY' <= YY). Intervals: frac_year_head, Clopper-Pearson over the traced circuits
    (its low end is above 0 exactly when a circuit has a year head); mlp_share and late_mlp_share,
    :func:`mlp_share_intervals` (``n_boot`` resamples of the prompts, seed 0); knockout_p,
    :func:`knockout_p_interval`.
    """
    from compendium.claims import Measurement
    from compendium.stats import binomial_ci

    if len(circuits_table) == 0 or "n_year_heads" not in circuits_table:
        raise ValueError("measure_greater_than_circuit: needs a non-empty circuit table with 'n_year_heads'")
    if "traced year heads" not in ko.get("methods", {}):
        raise ValueError("measure_greater_than_circuit: the knock-outs lack the 'traced year heads' head set")
    mlp_share, late_mlp_share = mlp_seed_shares(seeds, late_from)
    shares_ci = mlp_share_intervals(seeds, late_from, len(circuits_table), n_boot=n_boot)
    traced = named["traced year heads"]
    methods = ko["methods"]
    with_year_head = int((circuits_table["n_year_heads"] > 0).sum())
    frac_lo, frac_hi = binomial_ci(with_year_head, len(circuits_table))
    p_ci = {name: knockout_p_interval(r) for name, r in methods.items()}
    cfg = dict(config or {})
    return Measurement(
        claim="accpp/greater-than-circuit",
        values=dict(frac_year_head=with_year_head / len(circuits_table), frac_year_head_ci_low=frac_lo,
                    frac_year_head_ci_high=frac_hi, n_year_heads_selection=len(traced), mlp_share=mlp_share,
                    late_mlp_share=late_mlp_share, **shares_ci,
                    knockout_p=float(methods["traced year heads"]["p"]),
                    knockout_p_ci_low=p_ci["traced year heads"][0], knockout_p_ci_high=p_ci["traced year heads"][1],
                    prob_diff=float(prob_diff), n_random=n_random, n_circuits=len(circuits_table)),
        evidence=dict(year_heads_selection=[f"A{l}.{h}" for l, h in traced],
                      knockout={name: dict(k=r["k"], drop=r["drop"], p=r["p"], n_extreme=r["n_extreme"],
                                           p_ci=list(p_ci[name])) for name, r in methods.items()},
                      units_prob_diff_test=ko["base"], rank1=sum(r == 1 for r in ranks) / max(len(ranks), 1)),
        tables={"02_greater_than_knockouts": knockout_table(ko, named),
                "02_greater_than_circuits": circuits_table.drop(columns=["mlp_layers"], errors="ignore")},
        config=cfg, unit="fraction of circuits with a year head",
        note=(f"{cfg.get('model', 'the model')}, {len(circuits_table)} traced prompts; heads chosen on "
              f"{cfg.get('n_selection', '?')}, knocked out on {cfg.get('n_test', '?')}: "
              + "; ".join(f"{n} drop {r['drop']:.3f} (p={r['p']:.2f}, interval {p_ci[n][0]:.3f}-{p_ci[n][1]:.3f})"
                          for n, r in methods.items())))
