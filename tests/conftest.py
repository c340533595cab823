"""Test-wide settings: no network, and nothing a test runs writes into the repository's results.

Recorded claim values and executed notebooks go to a temporary folder for the session;
caches (converted models, SVDs, tokenised data) stay in the repository's .cache so they are
built once.
"""
from __future__ import annotations

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Without a GPU, Triton kernels run under Triton's interpreter. The flag is read when a kernel
# module is imported, so it is set here, before any test module imports one.
try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:  # pragma: no cover
    pass

_session_tmp = tempfile.mkdtemp(prefix="compendium-tests-")
os.environ["COMPENDIUM_RESULTS"] = os.path.join(_session_tmp, "results")
os.environ["COMPENDIUM_OUTPUT"] = os.path.join(_session_tmp, "build")
