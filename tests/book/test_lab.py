"""JupyterLab as ``make lab`` starts it (the server settings of ``jupyter/``, the Lab settings that
``make setup`` installs into the environment): on 127.0.0.1 with a token, ``.py`` notebooks open as
notebooks with a running kernel and no "Select Kernel" dialog, the paired ``.ipynb`` files are not
listed, and tqdm's notebook progress bars have their widgets.

The server works on a copy of ``00_tour`` in a temporary folder, so nothing it saves can touch the
repository's notebooks.
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


@pytest.fixture
def lab(tmp_path, free_port):
    """A JupyterLab server started as `make lab` starts it, on a copy of the tour; yields (url, token, folder)."""
    folder = tmp_path / "work"
    (folder / "notebooks").mkdir(parents=True)
    shutil.copy2(ROOT / "jupytext.toml", folder / "jupytext.toml")
    for suffix in (".py", ".ipynb"):
        shutil.copy2(ROOT / "notebooks" / f"00_tour{suffix}", folder / "notebooks" / f"00_tour{suffix}")
    port, token = free_port, secrets.token_hex(16)
    env = {**os.environ,
           "JUPYTER_CONFIG_PATH": str(ROOT / "jupyter"),            # what `make lab` sets
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "user-settings"),  # no user settings of this machine
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
           "COMPENDIUM_OUTPUT": str(tmp_path / "build"),
           "OMP_NUM_THREADS": "1"}
    cmd = [str(Path(sys.executable).with_name("jupyter")), "lab", "--no-browser", f"--port={port}",
           "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", str(folder / "notebooks")]
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
    assert [c["name"] for c in json.loads(body)["content"]] == ["00_tour.py"]

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
