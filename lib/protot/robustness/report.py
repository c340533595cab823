"""Tables, figures and the claim note of protot/07_robustness, for both measurements (the authors'
inputs and the rule-generated pairs).

    rank_table      per slice and model: our mean and its rank beside the authors' value and rank
    order_figure    per model, our rank of each meaning-preserving slice against the authors'; and
                    every model's mean JS per slice with its interval
    metrics_figure  the four metrics, ours against the authors', one point per model and slice
    benchmark_note  the claim's note, formatted from the Measurement of
                    :func:`protot.robustness.benchmark_compare.measure_benchmark`
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from protot.robustness.rules import CHANGING, PRESERVING

PALETTE = {"ProtoT": "C0", "LLaMA": "C1", "Mamba": "C2", "DeltaNet": "C3"}


def _colour(label: str, i: int) -> str:
    return PALETTE.get(label, f"C{4 + i}")


def rank_table(means: Mapping[str, Mapping[str, float]], theirs: Mapping[str, Mapping[str, float]],
               slices: Sequence[str] = PRESERVING) -> pd.DataFrame:
    """Rows: ``slices``; columns (model, ours | ours_rank | theirs | theirs_rank): our mean per slice
    (``means[model]``) and the authors' value (``theirs[model]``), each ranked 1 = largest within
    the model."""
    cols = {}
    for name, m in means.items():
        ours = pd.Series({s: float(m[s]) for s in slices})
        ref = pd.Series({s: float(theirs[name][s]) for s in slices})
        cols[(name, "ours")] = ours
        cols[(name, "ours_rank")] = ours.rank(ascending=False).astype(int)
        cols[(name, "theirs")] = ref
        cols[(name, "theirs_rank")] = ref.rank(ascending=False).astype(int)
    out = pd.DataFrame(cols)
    out.index.name = "slice"
    return out


def order_figure(summaries: Mapping[str, pd.DataFrame], theirs: Mapping[str, Mapping[str, float]],
                 orders: pd.DataFrame, *, title: str, js_label: str = "mean JS (nats, bounded by ln 2)",
                 preserving: Sequence[str] = PRESERVING, changing: Sequence[str] = CHANGING):
    """One panel per model: the rank of each of ``preserving`` by our mean JS (``summaries[model]``:
    index slice, columns mean, ci_lo, ci_hi) against the rank by the authors' value, titled with
    its row of ``orders`` (model, rho, rho_ci_lo, rho_ci_hi, perm_p); and a last panel with every
    model's mean JS per slice and its interval (``changing`` shaded)."""
    n = len(summaries)
    fig, axes = plt.subplots(1, n + 1, figsize=(4.2 * (n + 1), 4.2))
    k = len(preserving)
    for i, (ax, (label, summ)) in enumerate(zip(axes, summaries.items())):
        r_o = summ["mean"].reindex(list(preserving)).rank()
        r_t = pd.Series({s: float(theirs[label][s]) for s in preserving}).rank()
        ax.scatter(r_t, r_o, color=_colour(label, i), s=40, zorder=3)
        for s in preserving:
            ax.annotate(s, (r_t[s], r_o[s]), fontsize=8, xytext=(4, 3), textcoords="offset points")
        ax.plot([1, k], [1, k], color="0.7", lw=1, ls="--", zorder=1)
        o = orders.set_index("model").loc[label]
        ax.set_title(f"{label}: rho {o.rho:.2f} (95% CI {o.rho_ci_lo:.2f}..{o.rho_ci_hi:.2f}), p {o.perm_p:.3f}",
                     fontsize=9.5)
        ax.set_xlabel("rank of the slice by JS, authors")
        ax.set_ylabel("rank by JS, ours")
        ax.set_xticks(range(1, k + 1))
        ax.set_yticks(range(1, k + 1))
    ax = axes[-1]
    order = list(preserving) + list(changing)
    x = np.arange(len(order))
    for i, (label, summ) in enumerate(summaries.items()):
        s = summ.reindex(order)
        ax.errorbar(x, s["mean"], yerr=[s["mean"] - s.ci_lo, s.ci_hi - s["mean"]], fmt="o-", ms=5, capsize=2,
                    color=_colour(label, i), label=label)
    ax.axvspan(k - 0.5, len(order) - 0.5, color="0.92", zorder=0)
    ax.set_xticks(x, order, rotation=40, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel(js_label)
    ax.set_title("ours: mean JS, 95% CI (grey: meaning-changing)", fontsize=9.5)
    ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=11, fontweight="bold")
    fig.tight_layout()
    return fig


def metrics_figure(summary: pd.DataFrame, authors: pd.DataFrame, authors_model: Callable[[str], str] = lambda m: m,
                   metrics: Sequence[str] = ("js", "overlap", "spearman", "top1")):
    """One panel per metric: our mean (``summary``: model, metric, slice, mean) against the authors'
    (``authors``: :func:`protot.robustness.compare.authors_table`), filled for meaning-preserving
    slices, open for meaning-changing ones. Raw JS values are on different scales (theirs is not
    bounded), so only the arrangement within a panel is comparable."""
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.25 * len(metrics), 4))
    models = list(dict.fromkeys(summary["model"]))
    for ax, col in zip(axes, metrics):
        for i, label in enumerate(models):
            ours = summary[(summary.model == label) & (summary.metric == col)].set_index("slice")["mean"]
            t = authors[(authors.model == authors_model(label)) & (authors.metric == col)].set_index("type")["value"]
            pre = [s for s in PRESERVING if s in t.index and s in ours.index]
            chg = [s for s in CHANGING if s in t.index and s in ours.index]
            ax.scatter(t[pre], ours[pre], color=_colour(label, i), label=label, s=30)
            ax.scatter(t[chg], ours[chg], facecolors="none", edgecolors=_colour(label, i), s=30)
        ax.set_xlabel(f"authors' {col}")
        ax.set_ylabel(f"ours: {col}" + (" (nats)" if col == "js" else ""))
        ax.set_title(col, fontsize=10)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def _fmt_orders(order: Mapping[str, Mapping[str, float]]) -> str:
    return "; ".join(f"{k} rho {o['rho']:.2f} [{o['rho_ci_lo']:.2f}, {o['rho_ci_hi']:.2f}] p {o['perm_p']:.3f}"
                     for k, o in order.items())


def benchmark_note(m, *, not_compared: Sequence[str], models: Mapping[str, str]) -> str:
    """The claim's note: both measurements' numbers, formatted from ``m`` (values and evidence)."""
    v, ev = m.values, m.evidence
    rule = ev["rule_pairs"]
    rv = rule["values"]
    tags = "; ".join(f"{d['slice']} {d['ours']} (theirs {d['theirs']})" for d in ev["tag_flip_directions"])
    return (
        f"Primary, the authors' inputs as released: {sum(ev['records_per_slice'][s] for s in PRESERVING)} "
        f"meaning-preserving records ({sum(ev['distinct_pairs_per_slice'][s] for s in PRESERVING)} distinct; "
        f"fewest distinct in a slice {v['min_pairs_per_type']}) and "
        f"{sum(ev['records_per_slice'][s] for s in CHANGING)} tag flips; the four metrics after each side's last token; "
        f"intervals resample distinct pairs with their copies. JS order of the seven slices against theirs: "
        f"{_fmt_orders(ev['order'])}; smallest {v['min_order_rho']:.2f} [{v['min_order_rho_ci_low']:.2f}, "
        f"{v['min_order_rho_ci_high']:.2f}], largest p {v['max_order_perm_p']:.3f}. ProtoT vs LLaMA: "
        f"{v['direction_matches']} slices on the authors' side, {v['direction_mismatches']} opposite, "
        f"{ev['directions_undecided_or_tied']} undecided or tied; tag flips (shown, not judged): {tags}. "
        f"Second, rule-generated validation pairs: JS order {_fmt_orders(rule['order'])}; smallest "
        f"{rv['min_order_rho']:.2f} [{rv['min_order_rho_ci_low']:.2f}, {rv['min_order_rho_ci_high']:.2f}]; "
        f"ProtoT vs LLaMA {rv['direction_matches']} on the authors' side, {rv['direction_mismatches']} opposite; "
        f"control separates (the precondition): "
        + "; ".join(f"{k} {s['diff']:.4f} [{s['ci_lo']:.4f}, {s['ci_hi']:.4f}]" for k, s in rule["control_separation"].items())
        + f". Not compared (not in the protocol, or not committed yet): {', '.join(not_compared) or 'none'}. Models: {'; '.join(models.values())}.")
