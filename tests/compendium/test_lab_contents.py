"""compendium.lab: the contents manager of ``make lab`` writes both halves of a pair on save, and a
notebook read from its ``.py`` carries the default kernel's metadata, which a save leaves out again.

The server-level checks (the real ``make lab`` settings over HTTP) are in tests/book/test_lab.py.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import sys
from types import SimpleNamespace

import jupytext
import nbformat
import pytest
from traitlets.config import Config

from compendium import lab
from compendium.paths import repo_root

ROOT = repo_root()


class _Specs:
    """A kernel spec manager that knows one kernel."""

    def __init__(self, name, argv, display_name="Some kernel", language="python"):
        self.spec = SimpleNamespace(argv=argv, display_name=display_name, language=language)
        self.name = name

    def get_kernel_spec(self, name):
        from jupyter_client.kernelspec import NoSuchKernel

        if name != self.name:
            raise NoSuchKernel(name)
        return self.spec


def test_kernelspec_metadata_is_what_lab_writes():
    specs = _Specs("k1", [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"], "K one", "python")
    assert lab.kernelspec_metadata("k1", specs) == {"name": "k1", "display_name": "K one", "language": "python"}
    assert lab.kernelspec_metadata("other", specs) is None


def test_language_info_only_for_ipykernel_on_this_interpreter():
    from ipykernel.ipkernel import IPythonKernel

    here = _Specs("k", [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
    info = lab.language_info_metadata("k", here)
    assert info == IPythonKernel.language_info and info["version"] == sys.version.split()[0]
    info["name"] = "changed"  # a copy: the cached value is not shared
    assert lab.language_info_metadata("k", here)["name"] == "python"
    elsewhere = _Specs("k", ["/nonexistent/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"])
    assert lab.language_info_metadata("k", elsewhere) is None
    not_ipykernel = _Specs("k", [sys.executable, "-m", "some_other_kernel", "-f", "{connection_file}"])
    assert lab.language_info_metadata("k", not_ipykernel) is None
    assert lab.language_info_metadata("missing", here) is None


def test_add_then_drop_restores_the_metadata():
    defaults = {"kernelspec": {"name": "k", "display_name": "K", "language": "python"},
                "language_info": {"name": "python", "version": "3.x"}}
    stored = {"jupytext": {"notebook_metadata_filter": "-all"}}
    opened = lab.add_kernel_metadata(json.loads(json.dumps(stored)), defaults)
    assert opened == {**stored, **defaults}
    opened["kernelspec"]["name"] = "edited"  # added as copies
    assert defaults["kernelspec"]["name"] == "k"
    opened["kernelspec"]["name"] = "k"
    assert lab.drop_kernel_metadata(opened, defaults) == stored


def test_drop_keeps_other_kernels_and_add_keeps_what_is_there():
    defaults = {"kernelspec": {"name": "k", "display_name": "K", "language": "python"}, "language_info": None}
    other = {"kernelspec": {"name": "julia", "display_name": "Julia", "language": "julia"}}
    assert lab.drop_kernel_metadata(json.loads(json.dumps(other)), defaults) == other
    assert lab.add_kernel_metadata(json.loads(json.dumps(other)), defaults) == other
    assert lab.add_kernel_metadata({}, defaults) == {"kernelspec": defaults["kernelspec"]}  # None: nothing added


@pytest.fixture
def manager(tmp_path):
    """The contents manager on a copy of the tour's pair and the notebooks' jupytext settings."""
    shutil.copy2(ROOT / "notebooks" / "jupytext.toml", tmp_path / "jupytext.toml")
    for suffix in (".py", ".ipynb"):
        shutil.copy2(ROOT / "notebooks" / f"00_tour{suffix}", tmp_path / f"00_tour{suffix}")
    # the notary's signatures in memory: none left by earlier tests or runs on the machine
    return lab.PairedContentsManager(root_dir=str(tmp_path),
                                     config=Config({"NotebookNotary": {"db_file": ":memory:"}}))


def _without_trust(nb) -> dict:
    """A notebook model without the per-cell ``trusted`` flag that the notary sets on signing."""
    cells = [{**c, "metadata": {k: v for k, v in c["metadata"].items() if k != "trusted"}} for c in nb["cells"]]
    return {**nb, "cells": cells}


def test_manager_reads_with_the_kernel_metadata_and_saves_without_it(manager, tmp_path):
    defaults = manager.kernel_defaults()
    assert defaults["kernelspec"] is not None, "no python3 kernel installed: `make setup` installs it"
    before = {p.name: p.read_bytes() for p in tmp_path.glob("00_tour.*")}
    model = asyncio.run(manager.get("00_tour.py"))
    meta = model["content"]["metadata"]
    assert meta["kernelspec"] == defaults["kernelspec"] and meta.get("language_info") == defaults["language_info"]
    asyncio.run(manager.save({"type": "notebook", "format": "json", "content": model["content"]}, "00_tour.py"))
    after = {p.name: p.read_bytes() for p in tmp_path.glob("00_tour.*")}
    assert after == before, "saving the unchanged notebook rewrote a half of the pair differently"
    saved = nbformat.reads(after["00_tour.ipynb"].decode(), as_version=4)
    assert "kernelspec" not in saved.metadata and "language_info" not in saved.metadata
    # saving signs the notebook, so the next read marks its cells trusted; trust is the notary's, not the files'
    assert _without_trust(asyncio.run(manager.get("00_tour.py"))["content"]) == _without_trust(model["content"])


def test_manager_saves_both_halves(manager, tmp_path):
    model = asyncio.run(manager.get("00_tour.py"))
    nb = model["content"]
    nb["cells"][0]["source"] += "\n\nAn edit."
    asyncio.run(manager.save({"type": "notebook", "format": "json", "content": nb}, "00_tour.py"))
    py = jupytext.read(tmp_path / "00_tour.py")
    ipynb = nbformat.read(tmp_path / "00_tour.ipynb", as_version=4)
    assert py.cells[0].source.endswith("An edit.") and ipynb.cells[0].source.endswith("An edit.")
    assert [c.source for c in py.cells] == [c.source for c in ipynb.cells]


def test_manager_leaves_a_plain_ipynb_as_it_is(manager, tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    nbformat.write(nb, tmp_path / "plain.ipynb")
    model = asyncio.run(manager.get("plain.ipynb"))
    assert "kernelspec" not in model["content"]["metadata"]
    model["content"]["metadata"]["kernelspec"] = manager.kernel_defaults()["kernelspec"]
    asyncio.run(manager.save({"type": "notebook", "format": "json", "content": model["content"]}, "plain.ipynb"))
    assert nbformat.read(tmp_path / "plain.ipynb", as_version=4).metadata["kernelspec"]["name"] == "python3"
