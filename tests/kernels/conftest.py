"""Settings for the kernel tests.

Without a GPU the Triton kernels run under Triton's CPU interpreter. triton.jit reads
TRITON_INTERPRET when a kernel module is imported (kernels/proto_mixer imports its Triton modules
only on first use), so setting it here at import time is early enough even when triton itself
was imported before. With a GPU the flag is left alone, so the compiled kernels are tested
(export TRITON_INTERPRET=1 to test the interpreter there too).
"""
from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _fill_kernel_outputs_with_nan(monkeypatch):
    """Every buffer a kernel is meant to write starts as NaN, so unwritten memory fails a test."""
    from kernels.proto_mixer import _utils

    monkeypatch.setattr(_utils, "FILL_OUTPUTS_WITH_NAN", True)
