"""Fixtures for the training tests."""
import pytest


@pytest.fixture(scope="session")
def streams():
    """Build (or reuse) the cached token streams once per session."""
    from protot.train import packing

    return packing.token_stream("train"), packing.token_stream("validation")


@pytest.fixture
def tracked_unchanged():
    """Assert that the test changed no file git tracks under models/ or data/ (nor added any file there)."""
    import hashlib
    import subprocess

    from train_helpers import ROOT

    def state():
        files = subprocess.run(["git", "ls-files", "-z", "--", "models", "data"], cwd=ROOT, check=True,
                               capture_output=True).stdout.decode().split("\0")
        digests = {f: hashlib.sha256((ROOT / f).read_bytes()).hexdigest() if (ROOT / f).is_file() else None
                   for f in files if f}
        untracked = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", "models", "data"],
                                   cwd=ROOT, check=True, capture_output=True, text=True).stdout
        return digests, untracked

    before = state()
    yield
    after = state()
    changed = sorted(f for f in before[0] if before[0][f] != after[0].get(f))
    assert not changed, f"tracked files changed: {changed}"
    assert after[1] == before[1], f"git status of models/ data/ changed:\n{before[1]}\n->\n{after[1]}"
