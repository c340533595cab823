"""JupyterLab as ``make lab`` starts it (the server settings of ``jupyter/``, the Lab settings that
``make setup`` installs into the environment, ``notebooks/`` as the served folder): on 127.0.0.1
with a token, ``.py`` notebooks open as notebooks with a running kernel, no "Select Kernel" dialog
and no unsaved-changes mark, the paired ``.ipynb`` files are not listed, saving writes both halves
of a pair, and tqdm's notebook progress bars have their widgets.

The server works on a copy of ``notebooks/`` in a temporary folder, so nothing it saves can touch
the repository's notebooks.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import jupytext
import nbformat
import pytest

from compendium.paths import repo_root

pytestmark = pytest.mark.browser

ROOT = repo_root()
STARTUP_S = 150


_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy


def _get(url: str) -> tuple[int, bytes]:
    """(HTTP status, body); status 0 while nothing listens."""
    try:
        with _LOCAL.open(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, b""
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, b""


def test_lab_settings_are_installed():
    """make setup copies jupyter/overrides.json into the environment's Lab settings."""
    installed = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    assert installed.is_file(), f"{installed} is missing: `make setup` installs it"
    assert json.loads(installed.read_text()) == json.loads((ROOT / "jupyter" / "overrides.json").read_text())


def test_tqdm_notebook_bars_have_their_widgets():
    from tqdm.notebook import IProgress  # None (and a TqdmWarning in notebooks) without ipywidgets

    assert IProgress is not None


def _api(url: str, token: str, method: str, path: str, model: dict | None = None) -> dict:
    """One call of the server's contents API (what JupyterLab does to open and save a file)."""
    request = urllib.request.Request(
        f"{url}/api/contents/{path}?token={token}", method=method,
        data=None if model is None else json.dumps(model).encode(), headers={"Content-Type": "application/json"})
    try:
        with _LOCAL.open(request, timeout=60) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as err:
        raise AssertionError(f"{method} /api/contents/{path}: HTTP {err.code}: {err.read()[:2000]!r}") from None


def _cells(nb) -> list[tuple]:
    """What a pair's two halves share: each cell's type, source and tags."""
    return [(c["cell_type"], c["source"].strip(), tuple(c.get("metadata", {}).get("tags", ()))) for c in nb["cells"]]


def _without_trust(nb: dict) -> dict:
    """A notebook model without the per-cell ``trusted`` flag that the server's notary sets."""
    cells = [{**c, "metadata": {k: v for k, v in c["metadata"].items() if k != "trusted"}} for c in nb["cells"]]
    return {**nb, "cells": cells}


def _halves(folder: Path, name: str) -> dict[str, bytes]:
    return {suffix: (folder / "notebooks" / f"{name}{suffix}").read_bytes() for suffix in (".py", ".ipynb")}


@pytest.fixture
def lab(tmp_path, free_port):
    """A JupyterLab server started as `make lab` starts it (the server settings of jupyter/, serving
    the notebooks folder), on a copy of notebooks/; yields (url, token, folder holding the copy)."""
    folder = tmp_path / "work"
    folder.mkdir()
    shutil.copytree(ROOT / "notebooks", folder / "notebooks",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    port, token = free_port, secrets.token_hex(16)
    env = {**os.environ,
           "JUPYTER_CONFIG_PATH": str(ROOT / "jupyter"),            # what `make lab` sets
           # the server imports this checkout's compendium (its contents manager), as `make lab` does
           "PYTHONPATH": os.pathsep.join([str(ROOT / "lib"), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "user-settings"),  # no user settings of this machine
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
           "COMPENDIUM_OUTPUT": str(tmp_path / "build"),
           "OMP_NUM_THREADS": "1"}
    cmd = [str(Path(sys.executable).with_name("jupyter")), "lab", "--no-browser", f"--port={port}",
           "--ServerApp.port_retries=0", "--NotebookNotary.db_file=:memory:", f"--IdentityProvider.token={token}", str(folder / "notebooks")]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while _get(f"{url}/api/status?token={token}")[0] != 200:
            assert proc.poll() is None, "jupyter lab exited:\n" + (tmp_path / "lab.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "jupyter lab did not answer:\n" + (tmp_path / "lab.log").read_text()[-3000:]
            time.sleep(1)
        yield url, token, folder
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_lab_opens_and_runs_the_tour(lab, watched):
    url, token, folder = lab
    # token authentication is on; the listing shows each notebook once (its .py)
    assert _get(f"{url}/api/contents/")[0] == 403
    status, body = _get(f"{url}/api/contents/?token={token}")
    assert status == 200
    listed = json.loads(body)["content"]
    assert sorted(c["name"] for c in listed if c["type"] != "directory") == ["00_tour.py"], listed

    w = watched("lab-tour")
    page = w.page
    page.goto(f"{url}/lab/tree/00_tour.py?token={token}", timeout=120_000)
    page.wait_for_function("() => document.querySelector('.jp-NotebookPanel, .jp-FileEditor')", timeout=120_000)
    assert page.locator(".jp-FileEditor").count() == 0, "00_tour.py opened in the text editor, not as a notebook"
    panel = page.locator(".jp-NotebookPanel")
    # the kernel starts by itself: no "Select Kernel" dialog, the toolbar names the compendium's kernel
    page.wait_for_function("""() => document.querySelector('.jp-Dialog') || (
        (document.querySelector('.jp-NotebookPanel .jp-KernelName') || {}).textContent || '').includes('Python 3')""",
                           timeout=120_000)
    assert page.locator(".jp-Dialog").count() == 0, page.locator(".jp-Dialog").inner_text()
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=120_000)
    # opened and its kernel started, nothing edited: the tab has no unsaved-changes mark
    tab = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="00_tour.py")
    page.wait_for_timeout(2_000)  # the kernel's language_info arrives just after it is idle
    assert "jp-mod-dirty" not in (tab.get_attribute("class") or ""), "00_tour.py is marked modified on opening"

    # run the first cells: the title (markdown), the parameters, the set-up cell that prints the profile
    cells = panel.locator(".jp-Notebook .jp-Cell")
    cells.nth(0).click()
    page.keyboard.press("Escape")
    for _ in range(3):
        page.keyboard.press("Shift+Enter")
    output = cells.nth(2).locator(".jp-OutputArea-output")
    output.first.wait_for(timeout=120_000)
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=120_000)
    text = cells.nth(2).locator(".jp-OutputArea").inner_text()
    assert "profile: cpu" in text, text
    assert "Error" not in text and "Warning" not in text, text
    # JupyterLab fetches nothing from outside the machine, and does not ask to
    assert not w.external, w.external
    assert not w.page_errors, w.page_errors
    assert page.get_by_text("get notified about official Jupyter news").count() == 0


@pytest.mark.parametrize("name", ["00_tour", "accpp/00_method"])  # at the top of the served folder, and below it
def test_saving_writes_both_halves(lab, name):
    """A save through the contents API (as Lab saves) writes the .py and the .ipynb, with the same cells."""
    url, token, folder = lab
    model = _api(url, token, "GET", f"{name}.py")
    assert model["type"] == "notebook", model["type"]
    nb = model["content"]
    marker = f"Saved from JupyterLab ({secrets.token_hex(4)})."
    nb["cells"].append({"cell_type": "markdown", "id": secrets.token_hex(4), "metadata": {}, "source": marker})
    _api(url, token, "PUT", f"{name}.py", {"type": "notebook", "format": "json", "content": nb})
    py = jupytext.read(folder / "notebooks" / f"{name}.py")
    ipynb = nbformat.read(folder / "notebooks" / f"{name}.ipynb", as_version=4)
    assert py.cells[-1].source == marker, f"{name}.py was not written by the save"
    assert ipynb.cells[-1].source == marker, f"{name}.ipynb was not written by the save: the pair is stale"
    assert _cells(py) == _cells(ipynb), f"{name}: the saved .py and .ipynb differ"
    assert _cells(py) == _cells(nb), f"{name}: the saved files differ from the notebook that was saved"


@pytest.mark.parametrize("name", ["00_tour", "accpp/00_method"])
def test_opening_and_saving_unchanged_changes_nothing(lab, name):
    """What a GET returns is what a save writes: a GET then a PUT of the same model leaves both halves
    byte for byte as they were, and the next GET returns the same notebook. (JupyterLab marks a
    notebook modified on opening when the model it gets lacks what Lab would add to it: the
    kernelspec and the kernel's language_info.)"""
    url, token, folder = lab
    before = _halves(folder, name)
    first = _api(url, token, "GET", f"{name}.py")["content"]
    for key in ("kernelspec", "language_info"):
        assert key in first["metadata"], f"{name}.py opens without {key}: JupyterLab adds it and marks the notebook modified"
    assert first["metadata"]["kernelspec"]["name"] == "python3", first["metadata"]["kernelspec"]
    _api(url, token, "PUT", f"{name}.py", {"type": "notebook", "format": "json", "content": first})
    after = _halves(folder, name)
    for suffix in before:
        assert after[suffix] == before[suffix], f"saving {name} unchanged rewrote its {suffix} differently"
    second = _api(url, token, "GET", f"{name}.py")["content"]
    # The server's notary signs a notebook when it saves it and marks its cells trusted on the next GET;
    # trust lives in the notary's database (in memory here), not in the files compared above
    assert _without_trust(second) == _without_trust(first), \
        f"{name}: a GET after saving the unchanged notebook returns another notebook"
