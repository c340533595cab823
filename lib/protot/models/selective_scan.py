"""Mamba's selective scan (Gu & Dao, arXiv 2312.00752, eq. 2 with the zero-order hold of eq. 4):

    a_t = exp(dt_t A)        b_t = dt_t x_t B_t        h_t = a_t * h_{t-1} + b_t        y_t = C_t h_t + D x_t

per batch row, with x_t, dt_t: (E,), A: (E, N), B_t, C_t: (N,), h_t: (E, N) and h_0 the initial state.
Two forms of the same recurrence, same signature, same results up to rounding:

- ``selective_scan_reference``: one autograd step per token, every intermediate kept by autograd.
  The plain statement of the maths, and the reference the other form is tested against.
- ``selective_scan_chunked`` (the default): the same steps in the same order, run in time chunks
  of ``chunk_size`` tokens under a custom autograd Function. The forward keeps only the state
  entering each chunk; the backward recomputes a chunk's states from it and runs the adjoint
  recurrence backwards through the chunk:

      g_t = dL/dh_t = a_{t+1} * g_{t+1} + dy_t C_t^T          (g_T starts from dL/dh_T)
      dL/da_t = g_t * h_{t-1}      dL/db_t = g_t      dL/dh_0 = a_1 * g_1
      dL/dC_t = h_t^T dy_t         then the chain rule through a_t = exp(dt_t A) and b_t.

Why this and not a parallel form: on one CPU thread the scan is memory-bound, and the sequential
form does the least work (O(T E N) per row). A chunked matmul form (SSD-style, masked L x L scores
per channel) or a Blelloch scan trade O(L) or O(log T) times more work for parallelism one thread
cannot use, and the matmul form also needs exp(+cumulative log-decay) factors that overflow in
float32 once dt * |A| summed over a chunk passes ~88. The reference's cost is elsewhere: autograd
records ~5 ops per token and keeps every state and every per-token intermediate, (B, T, E, N)
tensors several times over; here each chunk's working set, (chunk, B, E, N), stays in cache and
the saved state is one (B, E, N) per chunk.
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


def _chunk_states(a, u, Bm, H):
    """H[0] holds the state entering the chunk; fill H[1..L] with the chunk's states.
    a: (L, B, N, E) decays; u = dt * x: (L, B, E); Bm: (L, B, N); H: (L + 1, B, N, E)."""
    for i in range(a.shape[0]):
        torch.mul(a[i], H[i], out=H[i + 1])                             # a_t * h_{t-1}
        H[i + 1].addcmul_(Bm[i][:, :, None], u[i][:, None, :])          # + dt_t x_t B_t


class _ChunkedScan(torch.autograd.Function):
    """y_t = C_t h_t (without D x_t) and h_T. Time-major inputs and a transposed state, so that
    every contraction is a matrix-vector product over contiguous rows: x, dt: (T, B, E);
    At = A^T: (N, E); Bm, Cm: (T, B, N); h0: (B, N, E)."""

    @staticmethod
    def forward(ctx, x, dt, At, Bm, Cm, h0, chunk):
        T, Bsz, E = x.shape
        N = At.shape[0]
        n_chunks = -(-T // chunk)
        Lmax = min(chunk, T)
        u = dt * x                                                      # (T, B, E)
        H = x.new_empty(Lmax + 1, Bsz, N, E)                            # one chunk's states, H[0] entering it
        a = x.new_empty(Lmax, Bsz, N, E)
        saved = x.new_empty(n_chunks, Bsz, N, E)                        # the state entering each chunk
        y = x.new_full((T, Bsz, 1, E), float("nan"))                   # NaN: a chunk left unwritten shows
        H[0] = h0
        for c in range(n_chunks):
            t0, t1 = c * chunk, min((c + 1) * chunk, T)
            L = t1 - t0
            saved[c] = H[0]
            torch.mul(dt[t0:t1, :, None, :], At, out=a[:L]).exp_()      # a_t = exp(dt_t A)
            _chunk_states(a[:L], u[t0:t1], Bm[t0:t1], H[:L + 1])
            torch.matmul(Cm[t0:t1, :, None, :], H[1:L + 1], out=y[t0:t1])   # y_t = C_t h_t
            H[0] = H[L]
        ctx.save_for_backward(x, dt, At, Bm, Cm, saved)
        ctx.chunk = chunk
        return y.view(T, Bsz, E), H[0].clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, gy, ghT):
        x, dt, At, Bm, Cm, saved = ctx.saved_tensors
        chunk = ctx.chunk
        T, Bsz, E = x.shape
        N = At.shape[0]
        gy = gy.contiguous()
        g = ghT.clone()                                                 # a_{t+1} g_{t+1}, carried backwards
        u = dt * x
        Lmax = min(chunk, T)
        H = x.new_empty(Lmax + 1, Bsz, N, E)
        a = x.new_empty(Lmax, Bsz, N, E)
        G = x.new_empty(Lmax, Bsz, N, E)                                # g_t = dL/dh_t
        P = x.new_empty(Lmax, Bsz, N, E)                                # a_t g_t, then dL/da_t * a_t
        R = x.new_empty(Lmax, Bsz, N, E)                                # scratch
        nan = float("nan")                                              # as y: a chunk left unwritten shows
        gu, gB, gC = torch.full_like(u, nan), torch.full_like(Bm, nan), torch.full_like(Cm, nan)
        gdt = torch.full_like(dt, nan)
        gAt = torch.zeros_like(At)
        for c in reversed(range(saved.shape[0])):
            t0, t1 = c * chunk, min((c + 1) * chunk, T)
            L = t1 - t0
            H[0] = saved[c]
            torch.mul(dt[t0:t1, :, None, :], At, out=a[:L]).exp_()
            _chunk_states(a[:L], u[t0:t1], Bm[t0:t1], H[:L + 1])
            for i in reversed(range(L)):
                torch.addcmul(g, Cm[t0 + i][:, :, None], gy[t0 + i][:, None, :], out=G[i])  # g_t
                g = torch.mul(G[i], a[i], out=P[i])                                         # a_t g_t
            g = g.clone()                                               # P is overwritten by the next chunk
            Q = P[:L].mul_(H[:L])                                       # dL/da_t * a_t = a_t g_t h_{t-1}
            # through a_t = exp(dt_t A): dL/dA += sum_t dt_t Q_t, dL/d dt_t = sum_n A Q_t
            gAt += torch.mul(Q, dt[t0:t1, :, None, :], out=R[:L]).sum((0, 1))
            torch.sum(Q.mul_(At), 2, out=gdt[t0:t1])
            # b_t = B_t u_t^T with u_t = dt_t x_t: dL/du_t = B_t^T g_t, dL/dB_t = g_t u_t; y_t = C_t h_t: dL/dC_t = h_t dy_t
            torch.matmul(Bm[t0:t1, :, None, :], G[:L], out=gu[t0:t1, :, None, :])
            torch.matmul(u[t0:t1, :, None, :], G[:L].transpose(2, 3), out=gB[t0:t1, :, None, :])
            torch.matmul(gy[t0:t1, :, None, :], H[1:L + 1].transpose(2, 3), out=gC[t0:t1, :, None, :])
        gdt += gu * x
        return gu * dt, gdt, gAt, gB, gC, g, None


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
