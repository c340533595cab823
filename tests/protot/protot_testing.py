"""Shared test helpers for tests/protot: the one place where tolerances live.

Tolerances are on the max abs difference scaled by max(1, max|ref|): in float64 every form is exact
up to rounding (~1e-15 seen), so 1e-10 leaves room only for summation order; in float32 the forms
differ by ~3e-7 relative (measured at T=63, decays 1e-6 .. 1-1e-6), so 1e-5 is ~30x that.
"""

import torch

TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


def err_ratio(ref: torch.Tensor, got: torch.Tensor) -> float:
    """max |ref - got| / max(1, max |ref|), computed in float64."""
    ref, got = ref.detach().double(), got.detach().double()
    return ((ref - got).abs().max() / ref.abs().max().clamp(min=1.0)).item()


def assert_close(name: str, ref: torch.Tensor, got: torch.Tensor, dtype: torch.dtype | None = None,
                 tol: float | None = None):
    """Assert ``got`` matches ``ref`` within the tolerance of ``dtype`` (default: got's dtype)."""
    assert ref.shape == got.shape, f"{name}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    assert torch.isfinite(got).all(), f"{name}: non-finite values"
    tol = TOL[dtype or got.dtype] if tol is None else tol
    e = err_ratio(ref, got)
    assert e <= tol, f"{name}: error ratio {e:.3e} > {tol:.1e}"
