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
    """The path of a file saved into the run's figure folder, relative to the repository root
    (``repr`` without quotes). As the last line of a notebook cell it shows nothing: the figure
    itself is the cell's output, and a path there would name one machine's folders when the run
    folder lies outside the repository; the run's status.json lists every file it wrote."""

    def __repr__(self) -> str:
        return str(self)

    def _ipython_display_(self) -> None:
        """Displayed by IPython: no output."""

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

    name = _checked(name, "figure", "protot/mixer_scaling")
    if profile is not None:
        fig.text(0.995, 0.005, f"profile: {profile}", ha="right", va="bottom", fontsize=8, color="0.4")
    path = _run_figure_path(name, ".png")
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    mirror = paths.figures_dir() / f"{name}.png"
    mirror.parent.mkdir(parents=True, exist_ok=True)
    with atomic.atomic_path(mirror) as tmp:
        shutil.copyfile(path, tmp)
    return SavedFigure(paths.display(path))


def save_table(table, name: str, **to_csv) -> SavedFigure:
    """Save ``table`` (a pandas DataFrame or Series) as ``<run>/figures/<name>.csv``, the data behind
    a figure, named as :func:`savefig` names its PNG: ``"tour/claims_coverage"`` in notebook
    ``00_tour`` writes ``figures/tour/00_claims_coverage.csv`` beside ``00_claims_coverage.png``.
    ``to_csv`` goes to ``DataFrame.to_csv`` (e.g. ``index=False``). Returns the path as
    :func:`savefig` does."""
    name = _checked(name, "table", "tour/claims_coverage")
    path = _run_figure_path(name, ".csv")
    with atomic.atomic_path(path) as tmp:
        table.to_csv(tmp, **to_csv)
    return SavedFigure(paths.display(path))


def _checked(name: str, what: str, example: str) -> str:
    """``name`` as ``"<paper>/<name>"`` with the notebook's number (:func:`prefixed`); ValueError otherwise."""
    if not isinstance(name, str) or not name or name.startswith("/") or ".." in name.split("/") \
            or name.count("/") > 1:
        raise ValueError(f"{what} names look like '<paper>/<{what}>', e.g. {example!r}, got {name!r}")
    return prefixed(name)


def _run_figure_path(name: str, suffix: str) -> Path:
    from compendium import runs

    path = runs.figures_dir(run=None) / f"{name}{suffix}"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def paper_line(ax, value: float, label: str = "paper", *, axis: str = "y", **kwargs) -> None:
    """Draw the paper's value as a dashed reference line."""
    style = dict(color="0.25", linestyle="--", linewidth=1.2, label=label)
    style.update(kwargs)
    (ax.axhline if axis == "y" else ax.axvline)(value, **style)
