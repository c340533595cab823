"""Figures for the ProtoT notebooks (compute first, plot second).

- :func:`scaling_figure` (protot/03_scaling): our perplexity against parameters and tokens with the
  fitted power laws, in our own range, and a third panel that sets the paper's large-setting values
  beside our fits extrapolated to the paper's size, so both are read on one scale instead of the
  paper's stars sitting decades away in an empty corner.
- :func:`mixer_cost_figure` (protot/01_mixer_derivation): time and memory of the mixer forms against
  the sequence length, legends below the axes (never over the data).
- :func:`concept_coherence_figure` (protot/05), :func:`women_ablation_figure` (protot/06),
  :func:`disentanglement_figure` (protot/09), :func:`glue_cola_figure` (protot/11): each claim's
  figure from its measurement's tables and values. The claims' notes: :mod:`protot.notes`.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["scaling_figure", "mixer_cost_figure", "concept_coherence_figure", "women_ablation_figure",
           "disentanglement_figure", "glue_cola_figure"]


def _power(fit: Mapping, x):
    return fit["coef"] * np.asarray(x, dtype=float) ** fit["exponent"]


def scaling_figure(grid, fits: Mapping, archs, *, data_tokens: int, paper_params: float, paper_tokens: float,
                   paper_ppl: Mapping, caption: str | None = None, figsize=(15, 4.6)):
    """Three panels: ppl vs non-embedding parameters (at ``data_tokens``), ppl vs tokens (largest
    size), and the paper's value next to each fit extrapolated to ``paper_params`` / ``paper_tokens``.

    ``grid``: one row per run with columns arch, params, tokens, ppl; ``fits[arch]["params"|"tokens"]``:
    dicts with coef and exponent (``ppl = coef * x ** exponent``); ``paper_ppl[arch]``: the paper's
    value or None; ``caption`` goes above the panels (the legends are below them). Returns the figure.
    """
    import matplotlib.pyplot as plt

    for col in ("arch", "params", "tokens", "ppl"):
        if col not in grid.columns:
            raise ValueError(f"scaling_figure: grid lacks the column {col!r} (has {', '.join(map(str, grid.columns))})")
    missing = [a for a in archs if a not in fits]
    if missing:
        raise ValueError(f"scaling_figure: no fits for {missing}")
    fig, axes = plt.subplots(1, 3, figsize=figsize, gridspec_kw={"width_ratios": [1.15, 1.15, 1]})
    for i, arch in enumerate(archs):
        g = grid[grid.arch == arch]
        full = g[g.tokens == data_tokens].sort_values("params")
        big = g[g.params == g.params.max()].sort_values("tokens")
        for ax, d, key in ((axes[0], full, "params"), (axes[1], big, "tokens")):
            f = fits[arch][key]
            xs = np.geomspace(d[key].min(), d[key].max(), 50)
            ax.scatter(d[key], d.ppl, color=f"C{i}", label=f"{arch} (exponent {f['exponent']:.2f})")
            ax.plot(xs, _power(f, xs), color=f"C{i}", alpha=0.6, linestyle=":")
        at_params = float(_power(fits[arch]["params"], paper_params))
        at_tokens = float(_power(fits[arch]["tokens"], paper_tokens))
        axes[2].scatter([i - 0.15], [at_params], color=f"C{i}", marker="o", facecolor="none", s=60,
                        label="our fit vs parameters, at the paper's size" if i == 0 else None)
        axes[2].scatter([i], [at_tokens], color=f"C{i}", marker="D", facecolor="none", s=50,
                        label="our fit vs tokens, at the paper's tokens" if i == 0 else None)
        paper = paper_ppl.get(arch)
        if paper is not None:
            axes[2].scatter([i + 0.15], [paper], color=f"C{i}", marker="*", s=200, edgecolor="k",
                            label="the paper (large setting)" if i == 0 else None)
    axes[0].set(xscale="log", yscale="log", xlabel="non-embedding parameters", ylabel="validation perplexity",
                title=f"vs parameters ({data_tokens:,} tokens)")
    axes[1].set(xscale="log", yscale="log", xlabel="training tokens", title="vs tokens (largest size)")
    axes[2].set(yscale="log", xticks=range(len(archs)), xlim=(-0.6, len(archs) - 0.4),
                title=f"at the paper's scale ({paper_params / 1e6:.0f} M params, {paper_tokens / 1e6:.0f} M tokens)",
                ylabel="validation perplexity")
    axes[2].set_xticklabels(list(archs))
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for ax in axes:  # perplexities as plain numbers; minor ticks labelled only in our narrow range
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain if ax is not axes[2] else NullFormatter())
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    fig.tight_layout()
    if caption:
        import textwrap

        fig.suptitle("\n".join(textwrap.wrap(caption, 190)), fontsize=8, y=1.0, va="bottom")
    return fig


def mixer_cost_figure(cost, slopes: Mapping, fit_from: Mapping, *, clock: str, n_threads: int, figsize=(11, 4.6)):
    """Forward time and saved activation memory of each mixer form against T (log-log), with the
    fitted slopes in the legends (below the axes) and the chunked form's fitting range shaded.

    ``cost``: rows of form, T, seconds, saved_bytes; ``slopes[form]``: {"time", "memory"};
    ``fit_from[form]``: the smallest T of the time fit. Returns the figure.
    """
    import matplotlib.pyplot as plt

    for col in ("form", "T", "seconds", "saved_bytes"):
        if col not in cost.columns:
            raise ValueError(f"mixer_cost_figure: cost lacks the column {col!r}")
    fig, axes = plt.subplots(1, 2, figsize=figsize)
    for form, d in cost.groupby("form"):
        start = max(fit_from.get(form, 0), d["T"].min())
        axes[0].loglog(d["T"], d["seconds"], "o-", label=f"{form} (slope {slopes[form]['time']:.2f} from T={start})")
        axes[1].loglog(d["T"], d["saved_bytes"] / 2**20, "o-", label=f"{form} (slope {slopes[form]['memory']:.2f})")
    axes[0].set(xlabel="sequence length T", ylabel=f"forward time (s, {clock} clock)", title="time")
    axes[1].set(xlabel="sequence length T", ylabel="activation memory (MiB)", title="memory saved for backward")
    if "chunk" in fit_from and (cost.form == "chunk").any():
        axes[0].axvspan(fit_from["chunk"], cost[cost.form == "chunk"]["T"].max() * 1.3, color="0.9", zorder=0,
                        label="chunk slope fitted here")
    for ax in axes:
        ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.17), frameon=False)
    fig.suptitle(f"Prototype mixer forms on the CPU (R=32, V=128, batch 1, float32, "
                 f"{n_threads} thread{'s' if n_threads > 1 else ''})")
    fig.tight_layout()
    return fig


# -- the study notebooks' figures (protot/05, 06, 08-11) --------------------------------------------------
def concept_coherence_figure(coh, fams, coherence_trained: float, chance: float, *, top: int, reference: str):
    """protot/05: left, the coherence of each alive prototype's top write tokens, trained against each null
    family (``coh``: labels.measure_concepts' concept_coherence table); right, the means with the 95%
    interval of each family's margin (``fams``: its concept_null_families table), shifted onto the mean."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, axes = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [1.4, 1]})
    ax = axes[0]
    sns.histplot(data=coh[coh.alive], x="coherence", hue="family", element="step", stat="density", common_norm=False,
                 bins=30, ax=ax)
    ax.axvline(chance, color="0.3", ls=":", lw=1, label="random token sets")
    ax.set_xlabel(f"coherence of the top-{top} write tokens (mean pairwise cosine, {reference})")
    ax.set_title("Alive prototypes: trained vs null families (gates as sharp)", fontsize=10)
    ax = axes[1]
    ax.bar(["trained"] + list(fams.family.str.replace(" and ", " +\n").str.replace(" redrawn", "\nredrawn")),
           [coherence_trained] + list(fams.coherence), color=["C3"] + ["0.55"] * len(fams))
    ax.errorbar(np.arange(1, len(fams) + 1), fams.coherence, yerr=[fams.ci_high - fams.margin, fams.margin - fams.ci_low],
                fmt="none", color="k", capsize=3)
    ax.axhline(chance, color="0.3", ls=":", lw=1)
    ax.set_ylabel("mean coherence over alive prototypes")
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title("Means; bars on the nulls: 95% interval of the margin, shifted", fontsize=10)
    fig.tight_layout()
    return fig


def women_ablation_figure(strata, spec, ppl_table, *, paper_drop: float, paper_ppl: float, ppl_blocks: int):
    """protot/06: the drop of mean p(" women") per stratum (``strata``: women_strata) for each selection,
    the same masks on other words (``spec``: women.specificity_table), and the perplexity change of the
    label-selected prototype's edits and its controls (``ppl_table``: women_ppl)."""
    import matplotlib.pyplot as plt

    from compendium import plotting

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), gridspec_kw={"width_ratios": [1.4, 1.6, 1.3]})
    ax = axes[0]
    for i, (key, g) in enumerate(strata.groupby("selected_by", sort=False)):
        x = np.arange(len(g)) + (i - 0.5) * 0.35 * (strata.selected_by.nunique() - 1)
        ax.bar(x, g.drop_pct, width=0.35, label=f"{key}: {g.prototype.iloc[0]}", color=f"C{i}")
        ax.errorbar(x, g.drop_pct, yerr=[g.drop_pct - g.ci_low_pct, g.ci_high_pct - g.drop_pct], fmt="none", color="k",
                    capsize=3)
    ax.set_xticks(range(3), [f"{s}\n(n={n})" for s, n in zip(strata.stratum[:3], strata.contexts[:3])])
    plotting.paper_line(ax, paper_drop, f"paper (L9 P7): {paper_drop:g}%")
    ax.axhline(0, color="0.6", lw=0.8)
    ax.set_ylabel('drop of mean p(" women") (%)')
    ax.legend(fontsize=8)
    ax.set_title("Per stratum (validation)", fontsize=10)
    ax = axes[1]
    words = list(dict.fromkeys(spec.word))
    for i, (key, g) in enumerate(spec.groupby("selected_by", sort=False)):
        g = g.set_index("word").loc[words]
        x = np.arange(len(words)) + (i - 0.5) * 0.35
        ax.bar(x, g.drop_pct, width=0.35, color=f"C{i}", label=key)
        ax.errorbar(x, g.drop_pct, yerr=[g.drop_pct - g.ci_low_pct, g.ci_high_pct - g.drop_pct], fmt="none", color="k",
                    capsize=2)
    ax.set_xticks(range(len(words)), [w.replace("gender-free coordination", "coord.\npairs") for w in words], fontsize=8)
    ax.axhline(0, color="0.6", lw=0.8)
    ax.legend(fontsize=8)
    ax.set_ylabel("drop of mean p(word) (%)")
    ax.set_title("Specificity", fontsize=10)
    ax = axes[2]
    y = np.arange(len(ppl_table))
    ax.errorbar(ppl_table.ppl_change_pct, y, xerr=[ppl_table.ppl_change_pct - ppl_table.ci_low_pct,
                                                   ppl_table.ci_high_pct - ppl_table.ppl_change_pct],
                fmt="o", color="k", capsize=3)
    ax.set_yticks(y, ppl_table.edit, fontsize=7.5)
    ax.invert_yaxis()
    ax.axvline(0, color="0.6", lw=0.8)
    ax.axvline(paper_ppl, color="C2", ls="--", lw=1, label=f"paper: < {paper_ppl:g}%")
    ax.set_xlabel("perplexity change (%)")
    ax.legend(fontsize=8)
    ax.set_title(f"Perplexity ({ppl_blocks} random blocks)", fontsize=10)
    fig.tight_layout()
    return fig


def disentanglement_figure(scores, table, *, n_classes: int, threshold: float):
    """protot/09: disentanglement per unit of each kind (box) with its mean, and the coverage at the
    matched size (bar, 95% of subsets) and with all units; ``scores``/``table``: disentangle.compare's."""
    import matplotlib.pyplot as plt

    match = scores[0].match
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    ax = axes[0]
    kinds = [s.kind for s in scores]
    data = [s.per_unit.disentanglement.dropna().to_numpy() for s in scores]
    colors = ["C3", "C0", "C2", "0.6", "0.6", "0.6"]
    parts = ax.boxplot(data, orientation="horizontal", widths=0.6, patch_artist=True, showfliers=False)
    for patch, c in zip(parts["boxes"], colors):
        patch.set_facecolor(c)
        patch.set_alpha(0.6)
    ax.scatter(table.disentanglement, np.arange(1, len(kinds) + 1), color="k", zorder=3, s=14, label="mean")
    ax.set_yticks(np.arange(1, len(kinds) + 1), [f"{k} ({s.scored})" for k, s in zip(kinds, scores)], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("disentanglement per unit: 1 - H(class profile) / log C")
    ax.set_title("Disentanglement (box: units; dot: mean)", fontsize=10)
    ax.legend(fontsize=8)
    ax = axes[1]
    y = np.arange(len(kinds))
    cov = table[f"coverage_at_{match}"].to_numpy()
    err = np.stack([cov - table.cov_ci_low, table.cov_ci_high - cov])
    ax.barh(y, cov, color=colors, alpha=0.8, xerr=err, capsize=3)
    ax.scatter(table.coverage_all, y, marker="|", color="k", s=120, zorder=3, label="all units")
    ax.set_yticks(y, kinds, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"share of the {n_classes} classes with a unit >= {threshold:g}x selective")
    ax.set_title(f"Coverage at {match} units (bar, 95% of subsets) and with all units (|)", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def glue_cola_figure(values: Mapping, per_seed: Mapping, floors: Mapping, *, protot: str, llama: str,
                     paper_value: float, threshold: float, n_dev: int, profile: str):
    """protot/11: each model's seed-mean MCC with its interval and its seeds, the floors (``floors``:
    {name: MCC}) and the paper's value; and the ProtoT - LLaMA gap with its interval and the threshold."""
    import matplotlib.pyplot as plt

    v = values
    rows = [("ProtoT", v["protot_cola"], v["protot_cola_ci_low"], v["protot_cola_ci_high"]),
            ("LLaMA", v["llama_cola"], v["llama_cola_ci_low"], v["llama_cola_ci_high"])]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.2))
    ax = axes[0]
    for i, (_, val, lo, hi) in enumerate(rows):
        ax.errorbar(val, i, xerr=[[val - lo], [hi - val]], fmt="o", color=f"C{i}", capsize=4)
        seeds = per_seed[protot if i == 0 else llama]
        ax.scatter(seeds, [i] * len(seeds), marker="x", color=f"C{i}", alpha=0.6)
    for j, (k, mcc) in enumerate(floors.items()):
        ax.axvline(mcc, color="0.5", ls=[":", "--"][j], lw=1, label=k)
    ax.axvline(paper_value, color="C3", ls="-.", lw=1, label="paper: ProtoT (larger model)")
    ax.set_yticks(range(2), [r[0] for r in rows])
    ax.invert_yaxis()
    ax.legend(fontsize=8)
    ax.set_xlabel("CoLA validation MCC x 100 (x: seeds; bar: 95% interval of the seed mean)")
    ax = axes[1]
    ax.errorbar(v["cola_gap_to_llama"], 0, xerr=[[v["cola_gap_to_llama"] - v["cola_gap_to_llama_ci_low"]],
                                                  [v["cola_gap_to_llama_ci_high"] - v["cola_gap_to_llama"]]],
                fmt="o", color="k", capsize=4)
    ax.axvline(threshold, color="C3", ls="--", lw=1, label=f"threshold: {threshold:g}")
    ax.axvline(0, color="0.6", lw=0.8)
    ax.set_yticks([])
    ax.set_xlabel("ProtoT - LLaMA (MCC x 100)")
    ax.legend(fontsize=8)
    ax.set_title(f"{n_dev} validation sentences ({profile})", fontsize=10)
    fig.tight_layout()
    return fig
