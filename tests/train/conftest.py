"""Fixtures for the training tests."""
import pytest


@pytest.fixture(scope="session")
def streams():
    """Build (or reuse) the cached token streams once per session."""
    from protot.train import packing

    return packing.token_stream("train"), packing.token_stream("validation")
