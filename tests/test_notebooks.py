"""Every notebook: paired, headed by its claim, parametrised, and executed by papermill at the
smoke profile (the cpu profile's code with the smaller protocols claims.yaml registers for tests)
into a temporary run folder, recording every claim that claims.yaml assigns to it and changing no
tracked file of the repository."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import jupytext
import nbformat
import pytest

from compendium import claims, paths, provenance, runner

NOTEBOOKS = runner.list_notebooks()


def _cells(nb):
    return [(c.cell_type, c.source.strip(), tuple(c.metadata.get("tags", ()))) for c in nb.cells]


def test_there_are_notebooks_for_both_papers():
    assert "00_tour" in NOTEBOOKS
    assert any(n.startswith("protot/") for n in NOTEBOOKS) and any(n.startswith("accpp/") for n in NOTEBOOKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_pair_is_in_sync(name):
    py = paths.notebooks_dir() / f"{name}.py"
    ipynb = py.with_suffix(".ipynb")
    assert ipynb.exists(), f"{ipynb.name} is missing: run `make sync`"
    assert _cells(jupytext.read(py)) == _cells(jupytext.read(ipynb)), f"{name}: .py and .ipynb differ; run `make sync`"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_header_and_parameters(name):
    nb = jupytext.read(paths.notebooks_dir() / f"{name}.py")
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# "), "the first cell is the title"
    assert "**Claim (" in first.source, "the first cell states the claim: **Claim (<paper>, <where>):**"
    assert "**Checked here:**" in first.source, "the first cell says what is checked and at what scale"
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", ())]
    assert len(params) == 1, "exactly one cell tagged 'parameters'"
    names = {line.split("=")[0].strip() for line in params[0].source.splitlines() if "=" in line}
    assert {"PROFILE", "SEED", "DEVICE"} <= names
    assert 'PROFILE = "cpu"' in params[0].source
    body = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "notebook.start(" in body or "profiles.check(PROFILE)" in body, \
        "the notebook checks its parameters (compendium.notebook.start)"
    owned = [c for p in claims.paper_ids() for c in claims.load_paper(p).claims.values() if c.notebook == name]
    for c in owned:
        assert f'"{c.key}"' in body, f"{name} owns {c.key} in claims.yaml but never records it"


@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_executes_at_smoke_profile(name, tmp_path, monkeypatch):
    run = tmp_path / "run"
    monkeypatch.setenv("COMPENDIUM_RUN_DIR", str(run))
    tracked_before = provenance.changed_tracked_files()
    res = runner.run_notebook(name, profile="smoke", seed=0, output_dir=tmp_path / "out", progress=False)
    assert res.output.exists() and res.run_dir == run.resolve()
    assert json.loads((run / "status.json").read_text())["notebooks"][name]["status"] == "completed"
    # a notebook writes only into its run folder: no tracked file of the repository changed
    # (compares the content of every tracked file that differs from HEAD, before and after)
    tracked_after = provenance.changed_tracked_files()
    changed = sorted(k for k in tracked_before.keys() | tracked_after.keys() if tracked_before.get(k) != tracked_after.get(k))
    assert not changed, f"tracked files changed while {name} ran (by the notebook, or by an edit made meanwhile): {changed}"
    owned = [c for p in claims.paper_ids() for c in claims.load_paper(p).claims.values() if c.notebook == name]
    for c in owned:
        path = run / "results" / c.paper / f"{c.id}.smoke.json"
        assert path.exists(), f"{name} did not record {c.key}"
        entry = json.loads(path.read_text())
        assert entry["profile"] == "smoke" and entry["value"] is not None
        assert entry["verdict"] in claims.VERDICTS


def _output_texts(nb) -> list[tuple[int, str, str]]:
    """(cell number, kind, text) of every saved output: streams, errors and every non-image MIME type."""
    found = []
    for number, cell in enumerate(nb.cells, 1):
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                found.append((number, f"stream {out.name}", out.text))
            elif out.output_type == "error":
                found.append((number, "error", "\n".join(out.traceback)))
            for mime, value in out.get("data", {}).items():
                if not mime.startswith("image/") or mime == "image/svg+xml":
                    found.append((number, mime, value if isinstance(value, str) else json.dumps(value)))
    return found


@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.parametrize("name", ["00_tour", "accpp/00_method"])  # cheap ones that show run summaries and figures
def test_saved_outputs_name_no_folder_of_this_machine(name, tmp_path, monkeypatch):
    """An executed notebook's saved outputs hold no temporary path, no path of the repository and no
    path of the home folder (what the book and a shared .ipynb would otherwise show)."""
    monkeypatch.setenv("COMPENDIUM_RUN_DIR", str(tmp_path / "run"))
    res = runner.run_notebook(name, profile="cpu", seed=0, output_dir=tmp_path / "out", progress=False)
    texts = _output_texts(nbformat.read(res.output, as_version=4))
    assert any(kind == "text/plain" for _, kind, _ in texts), f"{name}: no outputs were saved"
    folders = {str(tmp_path), str(Path(tempfile.gettempdir()).resolve()), str(paths.repo_root())}
    folders |= {str(Path(tempfile.gettempdir()))}
    if Path.home() != Path(Path.home().anchor):
        folders.add(str(Path.home()))
    leaks = []
    for number, kind, text in texts:
        at = min((text.find(folder) for folder in folders if folder in text), default=-1)
        if at >= 0:
            leaks.append(f"cell {number} ({kind}): ...{text[max(0, at - 80):at + 120]}...")
    assert not leaks, f"{name}: saved outputs name folders of this machine:\n" + "\n".join(leaks)
    # and its figures and the tables behind them sit together, in one folder, named with its number
    written = sorted(p.relative_to(tmp_path / "run" / "figures") for p in (tmp_path / "run" / "figures").rglob("*")
                     if p.is_file())
    assert written, f"{name} saved no figure"
    number = name.rsplit("/", 1)[-1].split("_", 1)[0] + "_"
    misplaced = [str(p) for p in written if len(p.parts) != 2 or not p.name.startswith(number)]
    assert not misplaced, f"{name}: files outside figures/<folder>/{number}*: {misplaced}"
    assert len({p.parent for p in written}) == 1, f"{name}: figures in several folders: {written}"
