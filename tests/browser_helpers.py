"""What the browser tests share: the Chromium executable and Python playwright, or a skip saying which is missing."""
from __future__ import annotations

import shutil

import pytest


def browser_or_skip() -> str:
    """The Chromium executable; skips the test, naming what is missing, when Chromium or playwright is absent."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium); the page was not checked in a browser")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("Python playwright is not installed in .venv; the page was not checked in a browser")
    return exe
