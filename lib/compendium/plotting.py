"""Figures: one look for every notebook, saved as PNG into the run folder (see :func:`savefig`)."""
from __future__ import annotations

from pathlib import Path

from compendium import atomic, paths


def use_style() -> None:
    """The compendium's plotting style (seaborn, readable sizes)."""
    import matplotlib
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    matplotlib.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "savefig.bbox": "tight",
                                "axes.titleweight": "bold"})


class SavedFigure(str):
    """The path of a saved figure, relative to the repository root (shown without quotes)."""

    def __repr__(self) -> str:
        return str(self)

    @property
    def path(self) -> Path:
        p = Path(self)
        return p if p.is_absolute() else paths.repo_root() / p


def savefig(fig, name: str, *, profile: str | None = None) -> SavedFigure:
    """Save ``fig`` as ``<run>/figures/<name>.png`` (atomically) and return its path relative to
    the repository root.

    ``name`` is ``"<paper>/<figure>"``, e.g. ``"protot/mixer_scaling"``; ``<run>`` is this run's
    folder (:func:`compendium.runs.current`). A copy goes to ``build/figures/<name>.png``, which
    always holds the latest figure of each name. ``compendium run --publish`` copies a completed
    notebook's figures into ``papers/<paper>/figures/``. When ``profile`` is given it is stamped
    in the lower right corner, so a figure never hides the scale it came from.
    """
    import shutil

    from compendium import runs

    if not name or name.startswith("/") or ".." in name.split("/") or name.count("/") > 1:
        raise ValueError(f"figure names look like '<paper>/<figure>', e.g. 'protot/mixer_scaling', got {name!r}")
    if profile is not None:
        fig.text(0.995, 0.005, f"profile: {profile}", ha="right", va="bottom", fontsize=8, color="0.4")
    path = runs.figures_dir(run=None) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    mirror = paths.figures_dir() / f"{name}.png"
    mirror.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_path(mirror) as tmp:
        shutil.copyfile(path, tmp)
    return SavedFigure(paths.display(path))


def paper_line(ax, value: float, label: str = "paper", *, axis: str = "y", **kwargs) -> None:
    """Draw the paper's value as a dashed reference line."""
    style = dict(color="0.25", linestyle="--", linewidth=1.2, label=label)
    style.update(kwargs)
    (ax.axhline if axis == "y" else ax.axvline)(value, **style)
