"""Figures for the ProtoT notebooks (compute first, plot second).

- :func:`scaling_figure` (protot/03_scaling): our perplexity against parameters and tokens with the
  fitted power laws, in our own range, and a third panel that sets the paper's large-setting values
  beside our fits extrapolated to the paper's size, so both are read on one scale instead of the
  paper's stars sitting decades away in an empty corner.
- :func:`mixer_cost_figure` (protot/01_mixer_derivation): time and memory of the mixer forms against
  the sequence length, legends below the axes (never over the data).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["scaling_figure", "mixer_cost_figure"]


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
