"""Figures: one look for every notebook, saved as PNG into the run folder (see :func:`savefig`).

Figure names follow one rule (:func:`prefixed`): a file a notebook writes into its figure folder
(``savefig``'s PNG, the CSV tables of ``claims.conclude``, a circuit viewer page) starts with the
notebook's number, e.g. ``protot/05_concept_labels`` saving ``"protot/concept_coherence"`` writes
``05_concept_coherence.png``; a name that already starts with that number is kept as it is.
"""
from __future__ import annotations

import re
from pathlib import Path

from compendium import atomic, paths


def use_style() -> None:
    """The compendium's plotting style (seaborn, readable sizes)."""
    import matplotlib
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    matplotlib.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "savefig.bbox": "tight",
                                "axes.titleweight": "bold"})


_NUMBER = re.compile(r"^([0-9]+)_")


def notebook_prefix(notebook: str | None = None) -> str:
    """``"05_"`` for notebook ``protot/05_concept_labels``; ``""`` for an unnumbered notebook.

    ``notebook`` defaults to the running notebook (:func:`compendium.notebook.current_name`).
    """
    if notebook is None:
        from compendium import notebook as _nb

        notebook = _nb.current_name()
    if not notebook:
        return ""
    m = _NUMBER.match(notebook.rsplit("/", 1)[-1])
    return f"{m.group(1)}_" if m else ""


def prefixed(name: str, notebook: str | None = None) -> str:
    """``name`` (a file name, or ``"<paper>/<name>"``) with the notebook's number in front of its
    last part, unless that part already starts with it: ``"protot/concept_coherence"`` ->
    ``"protot/05_concept_coherence"`` in notebook ``protot/05_concept_labels``; idempotent."""
    prefix = notebook_prefix(notebook)
    head, sep, last = name.rpartition("/")
    if not prefix or last.startswith(prefix):
        return name
    return f"{head}{sep}{prefix}{last}"


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

    ``name`` is ``"<paper>/<figure>"``, e.g. ``"protot/mixer_scaling"``, and gets the notebook's
    number in front of the figure's name (:func:`prefixed`); ``<run>`` is this run's folder (:func:`compendium.runs.current`). A copy goes to ``build/figures/<name>.png``, which
    always holds the latest figure of each name. ``compendium run --publish`` copies a completed
    notebook's figures into ``papers/<paper>/figures/``. When ``profile`` is given it is stamped
    in the lower right corner, so a figure never hides the scale it came from.
    """
    import shutil

    from compendium import runs

    if not name or name.startswith("/") or ".." in name.split("/") or name.count("/") > 1:
        raise ValueError(f"figure names look like '<paper>/<figure>', e.g. 'protot/mixer_scaling', got {name!r}")
    name = prefixed(name)
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
