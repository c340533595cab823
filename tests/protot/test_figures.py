"""protot.figures: the scaling figure keeps the paper's values on their own panel, and the mixer cost
figure's legends sit below the axes, off the data."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from protot import figures


def _grid():
    rows = []
    for arch, base in (("protot", 1300.0), ("llama", 1600.0)):
        for params in (2e4, 9e4, 1.3e5):
            for tokens in (7680, 15360, 30720):
                rows.append(dict(arch=arch, params=params, tokens=tokens, ppl=base * (params / 2e4) ** -0.03 * (tokens / 7680) ** -0.3))
    return pd.DataFrame(rows)


def test_scaling_figure_puts_the_paper_on_its_own_panel():
    grid = _grid()
    fits = {a: {"params": {"coef": 2000.0, "exponent": -0.03}, "tokens": {"coef": 9000.0, "exponent": -0.3}}
            for a in ("protot", "llama")}
    fig = figures.scaling_figure(grid, fits, ["protot", "llama"], data_tokens=30720, paper_params=85e6,
                                 paper_tokens=2e9, paper_ppl={"protot": 25.0, "llama": None})
    ours, vs_tokens, paper = fig.axes
    lo, hi = ours.get_ylim()  # our panels span our own values, not the paper's
    assert lo > 25.0 * 10 and hi < grid.ppl.max() * 1.5
    assert paper.get_ylim()[0] < 25.0 < paper.get_ylim()[1]
    stars = [c for c in paper.collections if c.get_label() == "the paper (large setting)"]
    assert len(stars) == 1
    plt.close(fig)
    with pytest.raises(ValueError, match="no fits"):
        figures.scaling_figure(grid, {}, ["protot"], data_tokens=1, paper_params=1, paper_tokens=1, paper_ppl={})


def test_mixer_cost_legends_are_below_the_axes():
    cost = pd.DataFrame([dict(form=f, T=t, seconds=t * k, saved_bytes=t * 1000 * k)
                         for f, k in (("chunk", 1e-5), ("recurrent", 5e-5), ("quadratic", 1e-6))
                         for t in (1024, 4096, 16384, 65536)])
    slopes = {f: {"time": 1.0, "memory": 1.0} for f in cost.form.unique()}
    fig = figures.mixer_cost_figure(cost, slopes, {"chunk": 16384, "recurrent": 0, "quadratic": 0},
                                    clock="thread", n_threads=1)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend, frame = ax.get_legend().get_window_extent(r), ax.get_window_extent(r)
        assert legend.y1 <= frame.y0, "the legend overlaps the axes"
    plt.close(fig)
    with pytest.raises(ValueError, match="saved_bytes"):
        figures.mixer_cost_figure(cost.drop(columns="saved_bytes"), slopes, {}, clock="thread", n_threads=1)
