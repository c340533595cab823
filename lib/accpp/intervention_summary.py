"""Summaries of many signal removals (:mod:`accpp.interventions`) and the claim they measure.

The input is a table with one row per removal (:meth:`accpp.interventions.InterventionResult.row`
plus ``edge`` and ``prompt`` columns). :func:`paired_summary` compares signal removals with a
control per edge (Wilcoxon signed-rank), per prompt (ratio of medians of |dLD|,
:func:`prompt_ratios`, aggregated as a geometric mean over prompts with its bootstrap interval) and
pooled over edges (ratio of medians with a bootstrap CI over prompts). :func:`score_matching_error`
checks that the score-matched control changed the firing's score as the signal did, and
:func:`measure_intervention_selective` makes the measurement of claim accpp/intervention-selective.
"""
from __future__ import annotations

from accpp.interventions import CONTROLS, Intervener, compare_subspaces, top_seed_edges

__all__ = ["intervention_rows", "prompt_ratios", "paired_summary", "score_matching_error",
           "measure_intervention_selective"]


def intervention_rows(tracer, prompts, circuits, edges_per_prompt: int, n_random: int, seed: int,
                      controls=CONTROLS, cache=None) -> list[dict]:
    """The table's rows: per IOI prompt i and its circuit, the ``edges_per_prompt`` signal edges of
    highest attribution into the seed firings (:func:`accpp.interventions.top_seed_edges`), each removed
    and compared with ``n_random`` draws per control (seeds ``1000 * seed + 100 * edge + r``, edge =
    i * edges_per_prompt + j); each row with ``prompt``, ``order`` and ``edge`` ("p{i}:{j}").
    ``cache``: an :class:`accpp.item_cache.ItemCache`, one item per prompt (its rows); None: all computed."""
    def one(i, p, c) -> list[dict]:
        iv = Intervener(tracer, p.ids(), p.io_id, p.s_id)
        rows = []
        for j, spec in enumerate(top_seed_edges(c.graph, edges_per_prompt, c.meta["variant"])):
            for r in compare_subspaces(iv, spec, n_random, seed=1000 * seed + 100 * (i * edges_per_prompt + j),
                                       controls=controls):
                rows.append(r.row() | dict(prompt=i, order=p.order, edge=f"p{i}:{j}"))
        return rows

    if cache is None:
        return [row for i, (p, c) in enumerate(zip(prompts, circuits)) for row in one(i, p, c)]
    from accpp import item_cache

    base = item_cache.base_key(tracer, __name__) | dict(edges_per_prompt=edges_per_prompt, n_random=n_random,
                                                        seed=seed, controls=list(controls))
    out = []
    for i, (p, c) in enumerate(zip(prompts, circuits)):
        key = base | dict(index=i, prompt=item_cache.prompt_key(p), circuit=item_cache.circuit_digest(c))
        out += cache.get("intervention-rows", key, lambda i=i, p=p, c=c: one(i, p, c))
    return out


def prompt_ratios(df, control: str = "random_score"):
    """Per prompt: median |dLD| of its signal removals, median |dLD| of its ``control`` removals (every
    draw of every edge of the prompt) and their ratio. ``df`` as for :func:`paired_summary`. Returns a
    DataFrame indexed by prompt with columns ``median_abs_dld_signal``, ``median_abs_dld_control``,
    ``ratio``, ``n_edges``, ``n_control``; a prompt without both kinds of rows, or whose control
    removals leave the metric exactly unchanged, is a ValueError (its ratio would be undefined)."""
    import pandas as pd

    need = {"prompt", "subspace", "metric_change"}
    missing = need - set(df.columns)
    if missing:
        raise ValueError(f"prompt_ratios: missing columns {sorted(missing)}")
    d = df.assign(abs_dld=df["metric_change"].abs())
    sig, ctl = d[d["subspace"] == "signal"], d[d["subspace"] == control]
    if sig.empty or ctl.empty:
        raise ValueError(f"prompt_ratios: need rows with subspace 'signal' and {control!r}")
    sig, ctl = sig.groupby("prompt")["abs_dld"], ctl.groupby("prompt")["abs_dld"]
    out = pd.DataFrame(dict(median_abs_dld_signal=sig.median(), median_abs_dld_control=ctl.median(),
                            n_edges=sig.size(), n_control=ctl.size()))
    lacking = out.index[out[["median_abs_dld_signal", "median_abs_dld_control"]].isna().any(axis=1)].tolist()
    if lacking:
        raise ValueError(f"prompt_ratios: prompts {lacking[:5]} lack signal or {control!r} removals")
    zero = out.index[out["median_abs_dld_control"] <= 0].tolist()
    if zero:
        raise ValueError(f"prompt_ratios: on prompts {zero[:5]} the median {control!r} removal leaves the metric "
                         "unchanged; the ratio is undefined")
    out["n_edges"], out["n_control"] = out["n_edges"].astype(int), out["n_control"].astype(int)
    out["ratio"] = out["median_abs_dld_signal"] / out["median_abs_dld_control"]
    return out


def paired_summary(df, control: str = "random_score", seed: int = 0, n_boot: int = 2000) -> dict:
    """Signal removals against a control, per prompt, per edge and over edges.

    ``df``: one row per intervention (:meth:`accpp.interventions.InterventionResult.row` plus ``edge``
    and ``prompt`` columns), with ``subspace`` "signal" for one row per edge and ``control`` for that
    edge's draws.
    Returns (all |dLD| = |change of the metric|):

    - ``gm_ratio``: the geometric mean over prompts of the per-prompt ratio of median |dLD|, signal /
      control (:func:`prompt_ratios`); ``gm_ratio_ci_low`` / ``_ci_high``: its percentile bootstrap
      interval over prompts (``compendium.stats.geometric_mean_ci``, seeded); ``prompt_ratios``: the
      per-prompt ratios (in prompt order);
    - ``abs_dld_ratio``: median |dLD| of all signal removals / median |dLD| of all control removals
      (pooled over prompts); ``abs_dld_ratio_ci_low`` / ``_ci_high``: 2.5th / 97.5th percentiles over
      ``n_boot`` bootstrap resamples of the prompts (each brings its edges and their draws), seeded;
    - ``wilcoxon_p``: one-sided Wilcoxon signed-rank test, per edge signal |dLD| minus the mean |dLD|
      of its control draws (paired, > 0); ``frac_edges_signal_above``: edges where the signal's |dLD|
      exceeds every one of its draws';
    - ``median_rel_dld_signal`` / ``_control``: median of dLD / LD before (negative: the metric falls);
    - ``median_head_input_cos_signal`` / ``_control``: cosine at the intervention point;
      ``median_final_resid_cos_signal``; ``median_removed_norm_signal`` / ``_control``;
    - ``n_edges``, ``n_prompts``, ``n_draws`` (draws per edge, the minimum over edges).
    """
    import numpy as np
    from scipy.stats import wilcoxon

    from compendium.stats import geometric_mean, geometric_mean_ci

    need = {"edge", "prompt", "subspace", "metric_change", "metric_before", "head_input_cos", "final_resid_cos",
            "removed_norm_ratio"}
    missing = need - set(df.columns)
    if missing:
        raise ValueError(f"paired_summary: missing columns {sorted(missing)}")
    d = df.assign(abs_dld=df["metric_change"].abs(), rel_dld=df["metric_change"] / df["metric_before"])
    sig = d[d["subspace"] == "signal"].set_index("edge")
    ctl = d[d["subspace"] == control]
    if sig.empty or ctl.empty:
        raise ValueError(f"paired_summary: need rows with subspace 'signal' and {control!r}")
    if sig.index.duplicated().any():
        raise ValueError("paired_summary: more than one signal row for an edge")
    by_edge = ctl.groupby("edge")["abs_dld"]
    missing_edges = set(sig.index) - set(by_edge.groups)
    if missing_edges:
        raise ValueError(f"paired_summary: edges without {control!r} draws: {sorted(missing_edges)[:5]}")
    ctl_mean, ctl_max = by_edge.mean().reindex(sig.index), by_edge.max().reindex(sig.index)
    diff = (sig["abs_dld"] - ctl_mean).to_numpy()
    p = float(wilcoxon(diff, alternative="greater").pvalue) if np.any(diff != 0) else 1.0

    per_prompt = prompt_ratios(df, control)
    gm_lo, gm_hi = geometric_mean_ci(per_prompt["ratio"], n_boot=n_boot, seed=seed)
    prompts = np.array(sorted(d["prompt"].unique()))
    sig_by_p = {q: g["abs_dld"].to_numpy() for q, g in sig.groupby("prompt")}
    ctl_by_p = {q: g["abs_dld"].to_numpy() for q, g in ctl.groupby("prompt")}
    rng = np.random.default_rng(seed)
    boot = np.empty(n_boot)
    for b in range(n_boot):
        pick = rng.choice(prompts, size=len(prompts), replace=True)
        s_ = np.concatenate([sig_by_p.get(q, np.zeros(0)) for q in pick])
        c_ = np.concatenate([ctl_by_p.get(q, np.zeros(0)) for q in pick])
        boot[b] = np.median(s_) / np.median(c_) if len(s_) and len(c_) and np.median(c_) > 0 else np.nan
    boot = boot[np.isfinite(boot)]
    ratio = float(sig["abs_dld"].median() / ctl["abs_dld"].median())
    return dict(
        gm_ratio=geometric_mean(per_prompt["ratio"]), gm_ratio_ci_low=gm_lo, gm_ratio_ci_high=gm_hi,
        prompt_ratios=[float(x) for x in per_prompt["ratio"]],
        abs_dld_ratio=ratio,
        abs_dld_ratio_ci_low=float(np.percentile(boot, 2.5)) if len(boot) else float("nan"),
        abs_dld_ratio_ci_high=float(np.percentile(boot, 97.5)) if len(boot) else float("nan"),
        wilcoxon_p=p, frac_edges_signal_above=float((sig["abs_dld"] > ctl_max).mean()),
        median_abs_dld_signal=float(sig["abs_dld"].median()), median_abs_dld_control=float(ctl["abs_dld"].median()),
        median_rel_dld_signal=float(sig["rel_dld"].median()), median_rel_dld_control=float(ctl["rel_dld"].median()),
        median_head_input_cos_signal=float(sig["head_input_cos"].median()),
        median_head_input_cos_control=float(ctl["head_input_cos"].median()),
        median_final_resid_cos_signal=float(sig["final_resid_cos"].median()),
        median_removed_norm_signal=float(sig["removed_norm_ratio"].median()),
        median_removed_norm_control=float(ctl["removed_norm_ratio"].median()),
        n_edges=int(len(sig)), n_prompts=int(len(prompts)), n_draws=int(by_edge.size().min()),
        n_boot=int(len(boot)))


def score_matching_error(df, control: str = "random_score") -> float:
    """Largest |score change of a ``control`` removal - score change of its edge's signal removal| over
    the table (the model's raw scores at the matched entry, ``score_change`` of the rows), relative to
    the largest |signal score change|: ~1e-7 for a float32 model, 0 up to rounding in float64."""
    need = {"edge", "subspace", "score_change"}
    missing = need - set(df.columns)
    if missing:
        raise ValueError(f"score_matching_error: missing columns {sorted(missing)}")
    sig = df[df["subspace"] == "signal"].set_index("edge")["score_change"]
    ctl = df[df["subspace"] == control]
    if sig.empty or ctl.empty:
        raise ValueError(f"score_matching_error: need rows with subspace 'signal' and {control!r}")
    gap = (ctl["score_change"].to_numpy() - sig.reindex(ctl["edge"]).to_numpy())
    return float(abs(gap).max() / max(float(sig.abs().max()), 1e-300))


def measure_intervention_selective(df, paired: dict[str, dict], consistency: float, n_random: int,
                                   config: dict | None = None):
    """Claim accpp/intervention-selective: removing a traced signal moves the task metric more than
    removing a random same-rank subspace that changes the firing's score as much.

    ``df``: one row per intervention (as for :func:`paired_summary`, plus ``attn_drop`` and
    ``score_change``; a ``sing`` column is left out of the recorded table); ``paired``:
    :func:`paired_summary` against each control, keyed "random_score" (the check's control: matched in
    the removed score), "random_matched" (matched in removed norm) and "random" (as drawn), all
    evidence but the first; ``consistency``: the largest |A_after - (A - traced drop)| over the signal
    removals (the model against the tracer's prediction). The check reads ``abs_dld_ratio``: the
    geometric mean over prompts of the per-prompt ratio of median |dLD| (signal / score-matched), with
    its bootstrap interval over prompts. The brief's cosine (the claim's paper value) goes into the
    note beside the measured cosines.
    """
    from compendium.claims import Measurement, get_claim

    who = "measure_intervention_selective"
    missing = [c for c in CONTROLS if c not in paired]
    if missing:
        raise ValueError(f"{who}: no paired summary against {missing}")
    for col in ("subspace", "attn_drop", "score_change"):
        if col not in df:
            raise ValueError(f"{who}: the intervention table lacks column {col!r}")
    sig = df[df["subspace"] == "signal"]
    if len(sig) == 0:
        raise ValueError(f"{who}: no signal removals in the table")
    main, norm, rnd = paired["random_score"], paired["random_matched"], paired["random"]
    paper_cos = float(get_claim("accpp/intervention-selective").paper_value)
    cfg = dict(config or {})
    n_edges = int(len(sig))
    score_ctl = df[df["subspace"] == "random_score"]
    scale = score_ctl["score_scale"].abs() if "score_scale" in score_ctl else None
    return Measurement(
        claim="accpp/intervention-selective",
        values=dict(abs_dld_ratio=main["gm_ratio"], abs_dld_ratio_ci_low=main["gm_ratio_ci_low"],
                    abs_dld_ratio_ci_high=main["gm_ratio_ci_high"], n_prompts=main["n_prompts"],
                    n_edges=n_edges, n_random=n_random),
        evidence=dict(
            control="random_score (same directions as random, rescaled so that the firing's raw score changes as "
                    "much as under the signal's removal)",
            prompt_ratios=[round(x, 4) for x in main["prompt_ratios"]],
            score_matching_rel_error=score_matching_error(df, "random_score"),
            median_abs_score_scale=float(scale.median()) if scale is not None else float("nan"),
            pooled_abs_dld_ratio=main["abs_dld_ratio"], pooled_abs_dld_ratio_ci_low=main["abs_dld_ratio_ci_low"],
            pooled_abs_dld_ratio_ci_high=main["abs_dld_ratio_ci_high"], wilcoxon_p=main["wilcoxon_p"],
            frac_edges_signal_above=main["frac_edges_signal_above"],
            median_abs_dld_signal=main["median_abs_dld_signal"],
            median_abs_dld_score_matched=main["median_abs_dld_control"],
            median_rel_dld_signal=main["median_rel_dld_signal"],
            median_rel_dld_score_matched=main["median_rel_dld_control"],
            median_removed_norm_score_matched=main["median_removed_norm_control"],
            abs_dld_ratio_vs_norm_matched=norm["gm_ratio"],
            abs_dld_ratio_vs_norm_matched_ci_low=norm["gm_ratio_ci_low"],
            abs_dld_ratio_vs_norm_matched_ci_high=norm["gm_ratio_ci_high"],
            pooled_abs_dld_ratio_vs_norm_matched=norm["abs_dld_ratio"], wilcoxon_p_vs_norm_matched=norm["wilcoxon_p"],
            median_abs_dld_norm_matched=norm["median_abs_dld_control"],
            median_rel_dld_norm_matched=norm["median_rel_dld_control"],
            median_head_input_cos_signal=main["median_head_input_cos_signal"],
            median_head_input_cos_norm_matched=norm["median_head_input_cos_control"],
            median_head_input_cos_score_matched=main["median_head_input_cos_control"],
            median_final_resid_cos_signal=main["median_final_resid_cos_signal"],
            median_removed_norm_signal=main["median_removed_norm_signal"],
            median_removed_norm_random=rnd["median_removed_norm_control"],
            abs_dld_ratio_vs_random=rnd["gm_ratio"], abs_dld_ratio_vs_random_ci_low=rnd["gm_ratio_ci_low"],
            abs_dld_ratio_vs_random_ci_high=rnd["gm_ratio_ci_high"], wilcoxon_p_vs_random=rnd["wilcoxon_p"],
            median_attn_drop_signal=float(sig["attn_drop"].median()),
            tracer_consistency_max_abs=float(consistency)),
        tables={"04_signal_interventions": df.drop(columns=["sing"], errors="ignore")},
        config=cfg, unit="x (median |dLD| per prompt, signal / score-matched random; geometric mean over prompts)",
        note=(f"{cfg.get('model', 'the model')}, {main['n_prompts']} IOI prompts, {n_edges} signal edges into "
              f"seed firings, {n_random} draws per control. Signal / score-matched random: geometric mean "
              f"{main['gm_ratio']:.2f} (95% interval {main['gm_ratio_ci_low']:.2f}-{main['gm_ratio_ci_high']:.2f}); "
              f"signal / norm-matched random: {norm['gm_ratio']:.2f} ({norm['gm_ratio_ci_low']:.2f}-"
              f"{norm['gm_ratio_ci_high']:.2f}). Cosine at the intervention point: median "
              f"{main['median_head_input_cos_signal']:.4f} for signals (brief: about {paper_cos}); final residual "
              f"{main['median_final_resid_cos_signal']:.4f}. Relative change of the logit difference: median "
              f"{main['median_rel_dld_signal']:+.2f} (signal) vs {main['median_rel_dld_control']:+.3f} (score-matched), "
              f"{norm['median_rel_dld_control']:+.3f} (norm-matched)."))
