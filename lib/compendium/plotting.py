"""Figures: one look for every notebook, saved as PNG under the output folder."""
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


def savefig(fig, name: str, *, profile: str | None = None) -> Path:
    """Save ``fig`` as ``<output>/figures/<name>.png`` (atomically) and return the path.

    ``name`` may contain one folder, e.g. ``"protot/mixer_scaling"``. When ``profile`` is given
    it is stamped in the lower right corner, so a figure never hides the scale it came from.
    """
    if not name or name.startswith("/") or ".." in name.split("/"):
        raise ValueError(f"figure names are relative like 'protot/mixer_scaling', got {name!r}")
    if profile is not None:
        fig.text(0.995, 0.005, f"profile: {profile}", ha="right", va="bottom", fontsize=8, color="0.4")
    path = paths.figures_dir() / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    return path


def publish(papers: list[str]) -> list[Path]:
    """Copy the figures of a run (``<output>/figures/<paper>/*.png``) into ``papers/<paper>/figures/``,
    so that a reader of the repository sees the latest main run's figures without running anything."""
    import shutil

    copied = []
    for paper in papers:
        src = paths.figures_dir() / paper
        if not src.is_dir():
            continue
        dest = paths.papers_dir() / paper / "figures"
        dest.mkdir(parents=True, exist_ok=True)
        for png in sorted(src.glob("*.png")):
            with atomic.atomic_path(dest / png.name) as tmp:
                shutil.copyfile(png, tmp)
            copied.append(dest / png.name)
    return copied


def paper_line(ax, value: float, label: str = "paper", *, axis: str = "y", **kwargs) -> None:
    """Draw the paper's value as a dashed reference line."""
    style = dict(color="0.25", linestyle="--", linewidth=1.2, label=label)
    style.update(kwargs)
    (ax.axhline if axis == "y" else ax.axvline)(value, **style)
