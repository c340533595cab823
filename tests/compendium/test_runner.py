from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from compendium import runner


@pytest.fixture
def fake_root(tmp_path, monkeypatch):
    """A minimal compendium with one good and one failing notebook."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "papers").mkdir()
    nbdir = tmp_path / "notebooks" / "demo"
    nbdir.mkdir(parents=True)
    header = '# %% [markdown]\n# # Demo\n\n# %% tags=["parameters"]\nPROFILE = "cpu"\nSEED = 0\nDEVICE = "cpu"\n\n'
    (nbdir / "01_good.py").write_text(header + "# %%\nimport pathlib\npathlib.Path('seen.txt').write_text(f'{PROFILE} {SEED} {DEVICE}')\n")
    (nbdir / "02_bad.py").write_text(header + "# %%\nx = 1\n\n# %%\nassert x == 2, 'the claim fails'\n")
    monkeypatch.setenv("COMPENDIUM_ROOT", str(tmp_path))
    return tmp_path


def test_list_and_resolve(fake_root):
    assert runner.list_notebooks() == ["demo/01_good", "demo/02_bad"]
    assert runner.resolve("01_good") == "demo/01_good"
    assert runner.resolve("notebooks/demo/02_bad.py") == "demo/02_bad"
    with pytest.raises(ValueError, match="does not exist; available notebooks: demo/01_good, demo/02_bad"):
        runner.resolve("03_missing")
    with pytest.raises(ValueError, match="ambiguous"):
        runner.resolve("0")


@pytest.mark.slow
def test_parameters_reach_the_notebook_and_failures_name_the_cell(fake_root):
    res = runner.run_notebook("01_good", profile="paper", seed=7, device="cuda", progress=False)
    assert (fake_root / "seen.txt").read_text() == "paper 7 cuda"
    assert res.output.exists()
    with pytest.raises(runner.NotebookFailed, match=r"'demo/02_bad' failed in cell 4: AssertionError: the claim fails\n  cell starts: assert x == 2"):
        runner.run_notebook("02_bad", progress=False)


def test_unknown_profile(fake_root):
    with pytest.raises(ValueError, match="unknown profile 'big'"):
        runner.run_notebook("01_good", profile="big")


def test_cli_rejects_bad_names_and_profiles(fake_root):
    for args, message in ((["run", "nope"], "does not exist"), (["run", "--profile", "huge"], "unknown profile 'huge'")):
        out = subprocess.run([sys.executable, "-m", "compendium", *args], capture_output=True, text=True)
        assert out.returncode == 2 and message in out.stderr, out.stderr


def test_publish_copies_a_papers_figures(fake_root, monkeypatch):
    from compendium import paths, plotting

    monkeypatch.setenv("COMPENDIUM_OUTPUT", str(fake_root / "build"))
    (fake_root / "papers" / "demo").mkdir()
    fig_dir = paths.figures_dir() / "demo"
    fig_dir.mkdir(parents=True)
    (fig_dir / "a.png").write_bytes(b"png")
    copied = plotting.publish(["demo", "absent"])
    assert [p.relative_to(fake_root).as_posix() for p in copied] == ["papers/demo/figures/a.png"]
    assert (fake_root / "papers/demo/figures/a.png").read_bytes() == b"png"
