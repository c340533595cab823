"""Browser fixtures: Playwright driving the system's Chromium (Debian's package, which
``make setup`` installs), never a browser that Playwright would download.

Every page a test opens goes through :class:`Watched`: requests to anything but ``file:``,
``data:``, ``blob:`` and this machine's loopback addresses are aborted and remembered, console
errors and uncaught page errors are collected, and a test that fails leaves a screenshot in
``build/test-screenshots/``.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
from pathlib import Path
from urllib.parse import urlparse

import pytest

from compendium.paths import repo_root

SCREENSHOTS = repo_root() / "build" / "test-screenshots"
LOCAL_SCHEMES = ("file", "data", "blob", "about")
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


def chromium_executable() -> str:
    """Path of the system's Chromium; fails (with what to do) when there is none."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("no Chromium on PATH (`which chromium chromium-browser`): `make setup` installs Debian's "
                "chromium as root; otherwise `sudo apt-get install -y chromium`", pytrace=False)


def is_local(url: str) -> bool:
    parsed = urlparse(url)
    return parsed.scheme in LOCAL_SCHEMES or (parsed.hostname or "") in LOCAL_HOSTS


@pytest.fixture
def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Watched:
    """A page with its external requests blocked and its errors collected."""

    def __init__(self, context, name: str):
        self.name = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        self.external: list[str] = []
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []
        self.page = context.new_page()
        self.page.route("**/*", self._route)
        self.page.on("console", lambda m: self.console_errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.page_errors.append(str(e)))

    def _route(self, route):
        if is_local(route.request.url):
            route.continue_()
        else:
            self.external.append(route.request.url)
            route.abort()

    def screenshot(self, suffix: str = "") -> Path | None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{self.name}{suffix}.png"
        try:
            self.page.screenshot(path=str(path), full_page=True)
        except Exception:  # the page may already be gone; the assertion says what failed
            return None
        return path

    def assert_clean(self):
        problems = []
        if self.external:
            problems.append(f"external requests attempted: {self.external}")
        if self.console_errors:
            problems.append(f"console errors: {self.console_errors}")
        if self.page_errors:
            problems.append(f"page errors: {self.page_errors}")
        assert not problems, f"{self.name}: " + "; ".join(problems)


@pytest.fixture(scope="module")
def browser():
    """One Chromium per test module, closed after it: Playwright's sync API allows one running
    instance per thread, so a browser kept for the whole session would break the browser tests of
    other folders (tests/accpp) that run after it."""
    from playwright.sync_api import sync_playwright

    args = ["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []  # Chromium refuses root otherwise
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_executable(), headless=True, args=args)
        yield b
        b.close()


@pytest.fixture
def context(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    yield ctx
    ctx.close()


@pytest.fixture
def watched(context, request):
    """``watched(name)`` opens a watched page; a failing test screenshots each page it opened."""
    pages: list[Watched] = []

    def make(name: str) -> Watched:
        w = Watched(context, f"{request.node.name}-{name}")
        pages.append(w)
        return w

    yield make
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for w in pages:
            w.screenshot("-failed")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
