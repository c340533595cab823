"""Mamba's selective scan (Gu & Dao, arXiv 2312.00752): A discretised by the zero-order hold, B by
dt B (the simplification Mamba's own implementation makes):

    a_t = exp(dt_t A)        b_t = dt_t x_t B_t        h_t = a_t * h_{t-1} + b_t        y_t = C_t h_t + D x_t

per batch row, with x_t, dt_t: (E,), A: (E, N), B_t, C_t: (N,), h_t: (E, N) and h_0 the initial state.
Two forms of the same recurrence, same signature, same results up to rounding:

- ``selective_scan_reference``: one autograd step per token, every intermediate kept by autograd.
  The plain statement of the maths, and the reference the other form is tested against.
- ``selective_scan_chunked`` (the default): the same steps in the same order under a custom
  autograd Function. The forward keeps only the state entering each chunk of ``chunk_size``
  tokens; the backward recomputes one chunk's states from it and runs the adjoint recurrence
  backwards through the chunk:

      g_t = dL/dh_t = a_{t+1} * g_{t+1} + C_t dy_t          (starting from dL/dh_T)
      dL/da_t = g_t * h_{t-1}      dL/db_t = g_t      dL/dh_0 = a_1 * g_1      dL/dC_t = h_t^T dy_t
      then the chain rule through a_t = exp(dt_t A) and b_t = dt_t x_t B_t.

Why a sequential form and not a parallel one: on one CPU thread the scan is bound by memory
traffic, and the sequential form does the least work, O(T E N) per row. A chunked matmul form
(SSD-style masked L x L scores per channel) or a Blelloch scan trade L or log T times more work for
parallelism one thread cannot use, and the matmul form also needs exp(+cumulative log-decay)
factors, which overflow float32 once dt |A| summed over a chunk passes ~88. The reference's cost
lies elsewhere: autograd records several ops per token and keeps (B, T, E, N) tensors (decays,
inputs, every state) several times over, far beyond the caches; here each operation touches one
token's (B, E, N) slice, and what is kept for the backward is one such slice per chunk.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

#: default chunk length of ``selective_scan_chunked``; benchmarks/bench_mamba_scan.py measures others
CHUNK_SIZE = 16


def selective_scan_reference(x, dt, A, Bm, Cm, D, h0=None):
    """x, dt: (B, T, E); A: (E, N); Bm, Cm: (B, T, N); D: (E,); h0: (B, E, N) or None (zeros).
    Returns y (B, T, E) and h_T (B, E, N)."""
    Bsz, T, E = x.shape
    h = x.new_zeros(Bsz, E, A.shape[1]) if h0 is None else h0
    dA = torch.exp(dt[..., None] * A)                                   # (B, T, E, N)
    dBx = (dt * x)[..., None] * Bm[:, :, None, :]                       # (B, T, E, N)
    ys = []
    # unbind (not [:, t]) so that backward stacks the per-step grads once instead of scattering
    # each into a full-size zero tensor (O(T) instead of O(T^2) memory traffic)
    for dA_t, dBx_t, C_t in zip(dA.unbind(1), dBx.unbind(1), Cm.unbind(1)):
        h = dA_t * h + dBx_t
        ys.append(torch.einsum("ben,bn->be", h, C_t))
    y = torch.stack(ys, dim=1) + x * D                                  # (B, T, E)
    return y, h


def _step(dt_t, At, u_t, B_t, h, a, out):
    """One token: a = exp(dt_t A), out = a * h + B_t u_t^T (the state h_t, stored transposed).
    dt_t, u_t = dt_t x_t: (B, E); At: (N, E); B_t: (B, N); h, a, out: (B, N, E)."""
    torch.mul(dt_t[:, None, :], At, out=a).exp_()
    torch.mul(a, h, out=out)
    out.addcmul_(B_t[:, :, None], u_t[:, None, :])


class _ChunkedScan(torch.autograd.Function):
    """y_t = C_t h_t (without D x_t) and h_T. Time-major inputs and the state stored as h^T, so that
    each token's tensors are contiguous and every contraction is a matrix-vector product over
    contiguous rows: x, dt: (T, B, E); At = A^T: (N, E); Bm, Cm: (T, B, N); h0: (B, N, E).

    Every operation works on one token's (B, N, E) slice, which stays in cache, never on a whole
    chunk at once; the chunk is the unit of what is kept: the state entering each chunk in the
    forward, then one chunk's states and decays at a time in the backward."""

    @staticmethod
    def forward(ctx, x, dt, At, Bm, Cm, h0, chunk):
        T, Bsz, E = x.shape
        N = At.shape[0]
        u = dt * x                                                      # (T, B, E)
        h, h_next, a = h0.clone(), x.new_empty(Bsz, N, E), x.new_empty(Bsz, N, E)
        saved = x.new_empty(-(-T // chunk), Bsz, N, E)                 # the state entering each chunk
        y = x.new_full((T, Bsz, 1, E), float("nan"))                   # NaN: a token left unwritten shows
        for t in range(T):
            if t % chunk == 0:
                saved[t // chunk] = h
            _step(dt[t], At, u[t], Bm[t], h, a, h_next)
            torch.matmul(Cm[t][:, None, :], h_next, out=y[t])           # y_t = C_t h_t
            h, h_next = h_next, h
        ctx.save_for_backward(x, dt, At, Bm, Cm, saved)
        ctx.chunk = chunk
        return y.view(T, Bsz, E), h

    @staticmethod
    @once_differentiable
    def backward(ctx, gy, ghT):
        x, dt, At, Bm, Cm, saved = ctx.saved_tensors
        chunk = ctx.chunk
        T, Bsz, E = x.shape
        N = At.shape[0]
        gy = gy.contiguous()
        u = dt * x
        L_max = min(chunk, T)
        H = x.new_empty(L_max + 1, Bsz, N, E)                           # one chunk's states, H[0] entering it
        a = x.new_empty(L_max, Bsz, N, E)                               # and its decays
        G, Q = x.new_empty(Bsz, N, E), x.new_empty(Bsz, N, E)
        carry = [x.new_empty(Bsz, N, E), x.new_empty(Bsz, N, E)]
        W = x.new_zeros(Bsz, N, E)                                      # sum_t dt_t Q_t, summed over B at the end
        nan = float("nan")                                              # as y: a token left unwritten shows
        gu, gB, gC = torch.full_like(u, nan), torch.full_like(Bm, nan), torch.full_like(Cm, nan)
        gdt = torch.full_like(dt, nan)
        g = ghT.contiguous()                                            # a_{t+1} g_{t+1}: dL/dh_t from later tokens
        for c in reversed(range(saved.shape[0])):
            t0, t1 = c * chunk, min((c + 1) * chunk, T)
            H[0] = saved[c]
            for i in range(t1 - t0):                                    # recompute the chunk's states
                _step(dt[t0 + i], At, u[t0 + i], Bm[t0 + i], H[i], a[i], H[i + 1])
            for i in reversed(range(t1 - t0)):
                t = t0 + i
                torch.addcmul(g, Cm[t][:, :, None], gy[t][:, None, :], out=G)          # g_t = dL/dh_t
                # y_t = C_t h_t: dL/dC_t = h_t dy_t; b_t = B_t u_t^T: dL/du_t = B_t^T g_t, dL/dB_t = g_t u_t
                torch.matmul(gy[t][:, None, :], H[i + 1].transpose(1, 2), out=gC[t][:, None, :])
                torch.matmul(Bm[t][:, None, :], G, out=gu[t][:, None, :])
                torch.matmul(u[t][:, None, :], G.transpose(1, 2), out=gB[t][:, None, :])
                g = torch.mul(G, a[i], out=carry[i % 2])                # a_t g_t, for h_{t-1}
                torch.mul(g, H[i], out=Q)                               # Q_t = dL/da_t * a_t = a_t g_t h_{t-1}
                # a_t = exp(dt_t A): dL/d dt_t = sum_n A Q_t, dL/dA = sum_t dt_t Q_t
                W.addcmul_(Q, dt[t][:, None, :])
                torch.sum(Q.mul_(At), 1, out=gdt[t])
        gdt += gu * x
        return gu * dt, gdt, W.sum(0), gB, gC, g.clone(), None


def selective_scan_chunked(x, dt, A, Bm, Cm, D, h0=None, chunk_size: int = CHUNK_SIZE):
    """The recurrence of ``selective_scan_reference`` (same arguments and results), in chunks of
    ``chunk_size`` tokens with a recomputing backward; see the module docstring."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    Bsz, T, E = x.shape
    h0 = x.new_zeros(Bsz, A.shape[1], E) if h0 is None else h0.transpose(1, 2)
    tm = lambda t: t.transpose(0, 1).contiguous()                       # (B, T, .) -> (T, B, .)
    y, hT = _ChunkedScan.apply(tm(x), tm(dt), A.t().contiguous(), tm(Bm), tm(Cm), h0.contiguous(), chunk_size)
    return y.transpose(0, 1) + x * D, hT.transpose(1, 2)                # (B, T, E), (B, E, N)
