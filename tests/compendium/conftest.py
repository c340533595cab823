"""A miniature compendium in a temporary folder (COMPENDIUM_ROOT), so that tests of the ledger,
the runner and publishing never read or write the real papers/."""
from __future__ import annotations

import pytest

from ledger_demo import make_root


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "determinism: executes every notebook twice at one seed and compares what they recorded "
                   "(make test-determinism); deselected unless -m names it")


def pytest_collection_modifyitems(config, items):
    """The determinism tests run only when asked for (``-m determinism``): they take one to two hours."""
    if "determinism" in (config.getoption("markexpr") or ""):
        return
    drop = [item for item in items if item.get_closest_marker("determinism")]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if not item.get_closest_marker("determinism")]


@pytest.fixture
def demo_root(tmp_path, monkeypatch):
    """A compendium with the demo paper and no notebooks; its own build/ folder; no run folder set."""
    root = make_root(tmp_path / "root", {"demo/01_good": "x = 1\n", "demo/02_bad": "x = 1\n",
                                         "demo/03_dies": "x = 1\n"})
    monkeypatch.setenv("COMPENDIUM_ROOT", str(root))
    monkeypatch.setenv("COMPENDIUM_OUTPUT", str(root / "build"))
    monkeypatch.delenv("COMPENDIUM_RUN_DIR", raising=False)
    monkeypatch.delenv("COMPENDIUM_NOTEBOOK", raising=False)
    return root


@pytest.fixture
def run_dir(demo_root, monkeypatch):
    """A run folder made as the runner makes one, set as this process's COMPENDIUM_RUN_DIR."""
    from compendium import runs

    run = runs.create("cpu", 0, notebooks=["demo/01_good", "demo/02_bad", "demo/03_dies"])
    monkeypatch.setenv("COMPENDIUM_RUN_DIR", str(run))
    return run


@pytest.fixture
def kernel_root(tmp_path, monkeypatch):
    """A demo repository whose notebooks run in a kernel, with its outputs under its own build/."""
    from ledger_demo import KERNEL_NOTEBOOKS

    root = make_root(tmp_path / "root", KERNEL_NOTEBOOKS)
    monkeypatch.setenv("COMPENDIUM_ROOT", str(root))
    monkeypatch.setenv("COMPENDIUM_OUTPUT", str(root / "build"))
    monkeypatch.delenv("COMPENDIUM_RUN_DIR", raising=False)
    monkeypatch.delenv("COMPENDIUM_NOTEBOOK", raising=False)
    return root
