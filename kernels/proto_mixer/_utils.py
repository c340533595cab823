"""Host-side helpers shared by the Triton wrappers (no triton import here)."""
from __future__ import annotations

import os

import torch

# Tests set this to True (tests/kernels/conftest.py) so every buffer a kernel should write is
# pre-filled with NaN: a kernel that leaves part of its output unwritten then fails the test.
FILL_OUTPUTS_WITH_NAN = False


def interpreting() -> bool:
    """True when Triton runs under its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def check_interpreter_stack(triton_version: str | None = None, numpy_version: str | None = None) -> None:
    """Under the Triton interpreter, refuse triton < 3.7 with numpy >= 2.4 (that interpreter breaks
    on numpy 2.4); compiled GPU kernels do not use numpy, so nothing is checked there."""
    if not interpreting():
        return
    import importlib.metadata as md

    tv = triton_version or md.version("triton")
    nv = numpy_version or md.version("numpy")
    if _version(tv) < (3, 7) and _version(nv) >= (2, 4):
        raise RuntimeError(f"the Triton interpreter (TRITON_INTERPRET=1) of triton {tv} does not work with numpy {nv}: "
                           "install numpy<2.4 or triton>=3.7")


def alloc_output(shape, dtype: torch.dtype, device) -> torch.Tensor:
    if FILL_OUTPUTS_WITH_NAN:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def block_sizes(K: int, V: int) -> tuple[int, int]:
    """(BK, BV). tl.dot needs every block dimension >= 16. Under the interpreter each program
    costs Python overhead, so blocks are as large as the problem (up to 256); on a GPU they stay
    at 64 to bound registers."""
    cap = 256 if interpreting() else 64
    BK = min(cap, max(16, _next_pow2(K)))
    BV = min(cap, max(16, _next_pow2(V)))
    return BK, BV


def dot_precision(dtype: torch.dtype) -> str:
    """input_precision of every tl.dot (operands are float32 in registers): exact "ieee" for
    float32 inputs and under the interpreter; "tf32" tensor cores for 16-bit inputs on a GPU
    (a 10-bit mantissa, finer than bfloat16's 7 bits, so no accuracy is lost against the input)."""
    if interpreting() or dtype == torch.float32:
        return "ieee"
    return "tf32"


# CUDA launch-grid limits: axis 0 up to 2^31 - 1 programs, axes 1 and 2 up to 65535.
GRID_X_MAX = 2**31 - 1
GRID_YZ_MAX = 65535


def launch_grid(large: int, small: int = 1) -> tuple[int, int]:
    """The launch grid of every kernel here: ``(large, small)``. ``large`` is the product of the
    axes that grow with the input (batch * heads, times chunks or sub-chunks), so it goes on axis 0,
    the only one not capped at 65535; ``small`` counts key / value blocks (a few). The kernels
    decode axis 0 in int64 (batch * head first, then the chunk), so no offset wraps at 2^31
    elements. Raises ValueError naming the axis when a grid cannot be launched."""
    large, small = int(large), int(small)
    if large < 1 or small < 1:
        raise ValueError(f"launch grid axes must be >= 1, got ({large}, {small})")
    if large > GRID_X_MAX:
        raise ValueError(f"launch grid axis 0 (batch * heads * chunks = {large}) exceeds {GRID_X_MAX}: "
                         "split the batch")
    if small > GRID_YZ_MAX:
        raise ValueError(f"launch grid axis 1 (key / value blocks = {small}) exceeds {GRID_YZ_MAX}")
    return large, small


def common_dtype(q, k, v) -> torch.dtype:
    """The dtype the kernels run in: the autocast dtype when CUDA autocast is on (as
    torch.amp.custom_fwd would cast), else the promotion of the three inputs (e.g. a float32
    softmax gate with bfloat16 values runs in float32)."""
    if q.is_cuda and torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    return torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)


def check_inputs(q, k, v, log_decay, initial_state):
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"expected q, k (B, T, H, K) and v (B, T, H, V); got {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}")
    B, T, H, K = q.shape
    V = v.shape[-1]
    if log_decay.shape != (H, K):
        raise ValueError(f"log_decay must be (H, K) = {(H, K)}, got {tuple(log_decay.shape)}")
    dtype = common_dtype(q, k, v)
    if dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"q, k, v must be float16, bfloat16 or float32, got {q.dtype}, {k.dtype}, {v.dtype}")
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    if T == 0:
        raise ValueError("T must be >= 1")
    if initial_state is not None:
        if initial_state.shape != (B, H, K, V):
            raise ValueError(f"initial_state must be (B, H, K, V) = {(B, H, K, V)}, got {tuple(initial_state.shape)}")
        initial_state = initial_state.float().contiguous()
    return q.contiguous(), k.contiguous(), v.contiguous(), log_decay, initial_state
