"""What notebooks show names no folder of one machine: the run summary of ``notebook.start``,
the path ``plotting.savefig`` returns (shown as nothing), the tables saved beside figures.

Outputs are checked as Jupyter saves them: through IPython's display formatter, which gives the
text/plain, text/markdown, ... of an object shown as the last line of a cell. The executed
notebooks are scanned in tests/test_notebooks.py.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from compendium import notebook, paths, plotting, runs


def _shown(obj) -> dict:
    """What Jupyter saves when ``obj`` is the last line of a cell: {mime type: text}."""
    from IPython.core.formatters import DisplayFormatter

    data, _ = DisplayFormatter().format(obj)
    return data


def _machine_paths(texts, *folders: Path) -> list[str]:
    return [f"{folder} in {text!r}" for text in texts for folder in folders if str(folder) in text]


def test_portable_is_relative_to_the_repository_or_to_the_variable_that_moved_the_folder(demo_root, tmp_path,
                                                                                          monkeypatch):
    assert paths.portable(demo_root / "build" / "runs" / "r1") == "build/runs/r1"
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv("COMPENDIUM_OUTPUT", str(elsewhere))
    assert paths.portable(elsewhere / "runs" / "r1" / "figures") == "$COMPENDIUM_OUTPUT/runs/r1/figures"
    assert paths.portable(elsewhere) == "$COMPENDIUM_OUTPUT"
    monkeypatch.setenv("COMPENDIUM_RUN_DIR", str(tmp_path / "run"))
    assert paths.portable(tmp_path / "run" / "figures" / "demo") == "$COMPENDIUM_RUN_DIR/figures/demo"
    assert paths.portable(tmp_path / "somewhere" / "else.txt") == "else.txt"
    assert paths.portable(demo_root / "papers") == "papers"  # the repository first, even if a variable covers it


@pytest.mark.parametrize("output", ["inside", "outside"])
def test_run_summary_names_no_machine_path(demo_root, tmp_path, monkeypatch, output):
    if output == "outside":  # build outputs moved out of the repository (as the test suite does)
        monkeypatch.setenv("COMPENDIUM_OUTPUT", str(tmp_path / "out"))
    nb = notebook.start("demo/01_good", "cpu", 0, "cpu", threads=None)
    shown = _shown(nb)
    assert set(shown) >= {"text/plain", "text/markdown"}, shown
    texts = [*shown.values(), repr(nb), str(nb)]
    assert not _machine_paths(texts, tmp_path, Path.home()), texts
    where = "build/runs/" if output == "inside" else "$COMPENDIUM_OUTPUT/runs/"
    for text in texts:
        assert f"{where}{nb.run_dir.name}" in text and "figures/demo" in text, text
        assert "profile" in text and "cpu" in text and "seed 0" in text, text
    assert "`demo/01_good`" in shown["text/markdown"] and "`" not in shown["text/plain"]


def test_run_summary_outside_every_known_folder_names_only_the_run(demo_root, tmp_path, monkeypatch):
    monkeypatch.setenv("COMPENDIUM_RUN_DIR", str(tmp_path / "a-run"))
    nb = notebook.start("demo/01_good", "cpu", 0, "cpu", threads=None)
    monkeypatch.delenv("COMPENDIUM_RUN_DIR")
    text = repr(nb)
    assert "run folder a-run (figures in figures/demo)" in text and not _machine_paths([text], tmp_path), text


def test_a_saved_figure_shows_nothing_in_a_notebook(run_dir, demo_root):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1))
    saved = plotting.savefig(fig, "demo/curve", profile="cpu")
    plt.close(fig)
    assert _shown(saved) == {}, "the path of a saved figure is printed above the figure"
    assert saved.path.is_file() and str(saved).endswith("figures/demo/curve.png")  # still the path, for code


def test_save_table_writes_beside_the_figure_with_the_notebooks_number(run_dir, monkeypatch):
    import pandas as pd

    monkeypatch.setenv(runs.NOTEBOOK_ENV, "demo/01_good")
    table = pd.DataFrame({"n": [1, 2]}, index=pd.Index(["a", "b"], name="name"))
    saved = plotting.save_table(table, "demo/curve")
    assert saved.path == run_dir / "figures" / "demo" / "01_curve.csv"
    assert pd.read_csv(saved.path, index_col="name").equals(table)
    assert _shown(saved) == {}
    plotting.save_table(table, "demo/flat", index=False)
    assert (run_dir / "figures" / "demo" / "01_flat.csv").read_text().splitlines() == ["n", "1", "2"]
    for bad in ("../escape", "/abs", "a/b/c", ""):
        with pytest.raises(ValueError, match="table names look like '<paper>/<table>'"):
            plotting.save_table(table, bad)
