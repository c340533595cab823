"""The prototype mixer and the generic op it reduces to.

Working specification (the paper's PDF could not be read; the open choices are ProtoTConfig fields). For one layer,
token states x_t (after RMSNorm), R prototypes p_k, projections W_w, W_r (d -> P), W_v (d -> d_v):

    write gate  w_{t,k} = softmax_k( sim(W_w x_t, p_k) / tau_w )                       (B, T, R)
    read gate   r_{t,k} = softmax_k( sim(W_r x_t, p_k) / tau_r )                       (B, T, R)
    values      v_t     = W_v x_t                                                      (B, T, d_v)
    state       S_{t,k} = sum_{s<=t} beta_k^{t-s} w_{s,k} v_s = beta_k S_{t-1,k} + w_{t,k} v_t
    normaliser  n_{t,k} = sum_{s<=t} beta_k^{t-s} w_{s,k}     = beta_k n_{t-1,k} + w_{t,k}
    channel     c_{t,k} = S_{t,k} / (n_{t,k} + eps)          (discounted prefix mean of values)
    output      y_t     = alpha * W_o sum_k r_{t,k} c_{t,k}

so  sum_k r_{t,k} c_{t,k} = q_t S_t  with  q_t = r_t / (n_t + eps),  k_t = w_t:  the mixer is
gated linear attention with a constant per-channel decay beta_k (one "head", K = R, V = d_v).
The generic op, shared with the Triton kernels in ``kernels/proto_mixer``:

    op(q, k, v, log_decay, initial_state=None, output_final_state=False) -> (o, final_state | None)
    q, k: (B, T, H, K)   v: (B, T, H, V)   log_decay: (H, K), <= 0   S: (B, H, K, V)
    S_t = diag(exp(log_decay)) S_{t-1} + k_t^T v_t,     o_t = q_t S_t

Three torch forms of it live here: ``decay_linear_attn_quadratic`` (the masked "attention" form,
the reference: O(T^2 K)), ``decay_linear_attn_recurrent`` (one step per token: O(K V) per token,
what decoding uses), and ``decay_linear_attn_chunk`` (intra-chunk matmuls + an inter-chunk state
scan: O(T C K + T K V)). ``decay_linear_attn`` dispatches between them and the Triton kernels.
Inside a chunk the decay factors are built directly as beta^(i-j) for i >= j (never as
beta^i * beta^-j, which overflows when beta is near 0), so every factor lies in [0, 1].
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

FORMS = ("chunk", "quadratic", "recurrent")
BACKENDS = ("auto", "torch", "triton")


# ---------------------------------------------------------------------------------------------
# The generic op in three torch forms
# ---------------------------------------------------------------------------------------------
def _check_op_inputs(q, k, v, log_decay, initial_state):
    if q.dim() != 4 or k.shape != q.shape:
        raise ValueError(f"q and k must both be (B, T, H, K); got {tuple(q.shape)} and {tuple(k.shape)}")
    B, T, H, K = q.shape
    if v.dim() != 4 or v.shape[:3] != (B, T, H):
        raise ValueError(f"v must be (B, T, H, V) = ({B}, {T}, {H}, V); got {tuple(v.shape)}")
    if log_decay.shape != (H, K):
        raise ValueError(f"log_decay must be (H, K) = ({H}, {K}); got {tuple(log_decay.shape)}")
    if initial_state is not None and initial_state.shape != (B, H, K, v.shape[-1]):
        raise ValueError(f"initial_state must be (B, H, K, V); got {tuple(initial_state.shape)}")


def decay_linear_attn_quadratic(q, k, v, log_decay, initial_state=None, output_final_state=False):
    """Reference masked form: o_t = sum_{s<=t} (q_t * beta^(t-s)) . k_s  v_s  (+ initial state term)."""
    _check_op_inputs(q, k, v, log_decay, initial_state)
    B, T, H, K = q.shape
    g = log_decay.to(q.dtype)                                           # (H, K)
    t = torch.arange(T, device=q.device, dtype=q.dtype)
    delta = t[:, None] - t[None, :]                                     # (T, T): t - s
    # D[h, k, t, s] = beta_hk^(t-s) if s <= t else 0
    dpos, mask = delta.clamp(min=0), (delta >= 0).to(q.dtype)           # (T, T)
    qh, kh = q.permute(0, 2, 3, 1), k.permute(0, 2, 3, 1)               # (B, H, K, T)
    A = q.new_zeros(B, H, T, T)
    for c in range(K):   # one channel at a time: memory O(T^2), not O(T^2 K)
        D_c = torch.exp(g[:, c, None, None] * dpos) * mask              # (H, T, T): beta^(t-s), s <= t
        A = A + qh[:, :, c, :, None] * kh[:, :, c, None, :] * D_c       # (B, H, T, T)
    o = torch.einsum("bhts,bshv->bthv", A, v)                           # (B, T, H, V)
    if initial_state is not None:
        q_dec = q * torch.exp(g * (t + 1)[:, None, None])               # (B, T, H, K): q_t beta^(t+1)
        o = o + torch.einsum("bthk,bhkv->bthv", q_dec, initial_state)
    final = None
    if output_final_state:
        k_dec = k * torch.exp(g * (T - 1 - t)[:, None, None])           # (B, T, H, K): k_s beta^(T-1-s)
        final = torch.einsum("bthk,bthv->bhkv", k_dec, v)               # (B, H, K, V)
        if initial_state is not None:
            final = final + torch.exp(g * T)[None, :, :, None] * initial_state
    return o, final


def decay_linear_attn_recurrent(q, k, v, log_decay, initial_state=None, output_final_state=False):
    """Recurrent form: one state update per token, S_t = beta * S_{t-1} + k_t^T v_t, o_t = q_t S_t."""
    _check_op_inputs(q, k, v, log_decay, initial_state)
    B, T, H, K = q.shape
    V = v.shape[-1]
    beta = torch.exp(log_decay.to(q.dtype))[None, :, :, None]          # (1, H, K, 1)
    S = q.new_zeros(B, H, K, V) if initial_state is None else initial_state.to(q.dtype)
    outs = []
    # unbind, not [:, t]: backward then stacks the step grads once (O(T), not O(T^2))
    for q_t, k_t, v_t in zip(q.unbind(1), k.unbind(1), v.unbind(1)):
        S = beta * S + k_t[..., None] * v_t[..., None, :]               # (B, H, K, V)
        outs.append(torch.einsum("bhk,bhkv->bhv", q_t, S))              # (B, H, V)
    o = torch.stack(outs, dim=1) if T > 0 else q.new_zeros(B, 0, H, V)  # (B, T, H, V)
    return o, (S if output_final_state else None)


def decay_linear_attn_chunk(q, k, v, log_decay, initial_state=None, output_final_state=False,
                            chunk_size: int = 64):
    """Chunked form: exact intra-chunk masked products + a scan over per-chunk states.

    For chunk n with positions i = 0..L_n-1 (L_n = chunk length, the last one may be short):
        o_i   = sum_{j<=i} (q_i * beta^(i-j)) . k_j v_j   +   (q_i * beta^(i+1)) S_{n-1}
        S_n   = beta^(L_n) S_{n-1} + sum_j beta^(L_n-1-j) k_j^T v_j
    """
    _check_op_inputs(q, k, v, log_decay, initial_state)
    B, T, H, K = q.shape
    V = v.shape[-1]
    C = int(chunk_size)
    N = max(1, math.ceil(T / C))
    pad = N * C - T
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
    qc, kc, vc = q.view(B, N, C, H, K), k.view(B, N, C, H, K), v.view(B, N, C, H, V)
    g = log_decay.to(q.dtype)                                           # (H, K)
    i = torch.arange(C, device=q.device, dtype=q.dtype)
    delta = i[:, None] - i[None, :]                                     # (C, C): i - j
    D = torch.exp(g[:, None, None, :] * delta.clamp(min=0)[..., None]) * (delta >= 0)[..., None]  # (H, C, C, K)
    # intra-chunk: A[b,n,h,i,j] = sum_k q_ik beta_k^(i-j) k_jk   (elementwise: O(T C K))
    qp, kp = qc.permute(0, 1, 3, 2, 4), kc.permute(0, 1, 3, 2, 4)       # (B, N, H, C, K)
    A = (qp[:, :, :, :, None, :] * kp[:, :, :, None, :, :] * D).sum(-1)  # (B, N, H, C, C)
    o = torch.einsum("bnhij,bnjhv->bnihv", A, vc)                       # (B, N, C, H, V)
    # per-chunk local states U_n = sum_j beta^(L_n-1-j) k_j^T v_j
    lens = torch.full((N,), C, device=q.device, dtype=q.dtype)
    lens[-1] = C - pad
    e = lens[:, None] - 1 - i[None, :]                                  # (N, C), < 0 on padding
    k_dec = torch.exp(g * e.clamp(min=0)[:, :, None, None]) * (e >= 0)[:, :, None, None]  # (N, C, H, K)
    U = torch.einsum("bnjhk,bnjhv->bnhkv", kc * k_dec, vc)              # (B, N, H, K, V)
    chunk_decay = torch.exp(g * lens[:, None, None])[..., None]         # (N, H, K, 1)
    # inter-chunk scan (sequential over N = T / C chunks)
    S = q.new_zeros(B, H, K, V) if initial_state is None else initial_state.to(q.dtype)
    before = []
    for decay_n, U_n in zip(chunk_decay.unbind(0), U.unbind(1)):
        before.append(S)
        S = decay_n * S + U_n                                           # (B, H, K, V)
    S_before = torch.stack(before, dim=1)                               # (B, N, H, K, V)
    q_dec = qc * torch.exp(g * (i + 1)[:, None, None])                  # (B, N, C, H, K)
    o = o + torch.einsum("bnihk,bnhkv->bnihv", q_dec, S_before)
    o = o.reshape(B, N * C, H, V)[:, :T]
    return o, (S if output_final_state else None)


_TORCH_FORMS = {
    "chunk": decay_linear_attn_chunk,
    "quadratic": decay_linear_attn_quadratic,
    "recurrent": decay_linear_attn_recurrent,
}


def _triton_ops():
    """Import the Triton kernels lazily; returns (chunk_op, recurrent_op) or raises ImportError."""
    from kernels.proto_mixer import chunk_decay_linear_attn, fused_recurrent_decay_linear_attn
    return chunk_decay_linear_attn, fused_recurrent_decay_linear_attn


def resolve_backend(backend: str, device: torch.device) -> str:
    """'auto' -> 'triton' on CUDA when ``kernels.proto_mixer`` imports, else 'torch'."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
    if backend == "torch" or (backend == "auto" and device.type != "cuda"):
        return "torch"   # (no import attempt on the CPU: it would cost a file-system search per call)
    try:
        _triton_ops()
        ok = device.type == "cuda"
    except Exception as err:  # the kernel package may not exist yet
        if backend == "triton":
            raise RuntimeError(f"backend='triton' asked for but kernels.proto_mixer is unusable: {err}") from err
        ok = False
    if backend == "triton" and device.type != "cuda":
        raise RuntimeError("backend='triton' needs CUDA tensors")
    return "triton" if ok else "torch"


def decay_linear_attn(q, k, v, log_decay, initial_state=None, output_final_state=False,
                      form: str = "chunk", backend: str = "auto", chunk_size: int = 64):
    """The generic op, dispatched: torch ``form`` in FORMS, or the Triton kernels (``backend``)."""
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}; got {form!r}")
    if resolve_backend(backend, q.device) == "triton":
        chunk_op, rec_op = _triton_ops()
        op = rec_op if (form == "recurrent" or q.shape[1] == 1) else chunk_op
        return op(q, k, v, log_decay, initial_state=initial_state, output_final_state=output_final_state)
    # torch forms: compute in one dtype, at least float32 (decay factors and states in half
    # precision lose the slow channels); the output comes back in the inputs' promoted dtype
    out_dtype = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
    dt = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    q, k, v, log_decay = q.to(dt), k.to(dt), v.to(dt), log_decay.to(dt)
    initial_state = None if initial_state is None else initial_state.to(dt)
    fn = _TORCH_FORMS[form]
    if form == "chunk":
        o, S = fn(q, k, v, log_decay, initial_state, output_final_state, chunk_size=chunk_size)
    else:
        o, S = fn(q, k, v, log_decay, initial_state, output_final_state)
    return o.to(out_dtype), S


def decay_cumsum(x, log_decay, initial=None, form: str = "chunk", chunk_size: int = 64):
    """Per-channel discounted prefix sum n_t = beta * n_{t-1} + x_t; x: (B, T, K), log_decay: (K,).

    It is the generic op with one head per channel and K = V = 1 (q = 1, k = x, v = 1).
    Returns (n: (B, T, K), n_T: (B, K)).
    """
    B, T, K = x.shape
    ones = torch.ones_like(x)[..., None]                                # (B, T, K, 1): heads = channels
    init = None if initial is None else initial[:, :, None, None]       # (B, K, 1, 1)
    n, nT = decay_linear_attn(ones, x[..., None], ones, log_decay[:, None], init, True,
                              form=form, backend="torch", chunk_size=chunk_size)
    return n[..., 0], nT[:, :, 0, 0]


# ---------------------------------------------------------------------------------------------
# Decay parametrisation helpers
# ---------------------------------------------------------------------------------------------
def half_life_to_log_decay(half_life: torch.Tensor) -> torch.Tensor:
    """beta^h = 1/2  ->  log beta = ln(1/2) / h."""
    return math.log(0.5) / half_life


def log_decay_to_half_life(log_decay: torch.Tensor) -> torch.Tensor:
    """half-life = ln(1/2) / ln(beta) (in tokens)."""
    return math.log(0.5) / log_decay


def log_decay_from_param(theta: torch.Tensor, parametrization: str) -> torch.Tensor:
    """Map the unconstrained parameter theta to log beta < 0."""
    if parametrization == "sigmoid":          # beta = sigmoid(theta)
        return F.logsigmoid(theta)
    if parametrization == "exp_softplus":     # beta = exp(-softplus(theta))
        return -F.softplus(theta)
    raise ValueError(f"unknown decay_parametrization {parametrization!r}")


def param_from_log_decay(log_decay: torch.Tensor, parametrization: str) -> torch.Tensor:
    """Inverse of ``log_decay_from_param`` (for initialisation from half-lives)."""
    log_decay = log_decay.double()
    if parametrization == "sigmoid":          # theta = logit(beta) = log beta - log(1 - beta)
        return log_decay - torch.log(-torch.expm1(log_decay))
    if parametrization == "exp_softplus":     # softplus(theta) = -log beta -> theta = log(expm1(-log beta))
        return torch.log(torch.expm1(-log_decay))
    raise ValueError(f"unknown decay_parametrization {parametrization!r}")


# ---------------------------------------------------------------------------------------------
# The mixer's definition, by explicit sums (slow; the reference for the derivation notebook)
# ---------------------------------------------------------------------------------------------
def channel_mix_by_definition(w, r, v, log_decay, normalization: str = "write_mass",
                              include_current: bool = True, eps: float = 1e-6):
    """sum_k r_{t,k} c_{t,k} with c_{t,k} = sum_s beta_k^(t'-s) w_{s,k} v_s / (sum_s beta_k^(t'-s) m_{s,k} + eps),
    s <= t (t' = t) or s < t (t' = t - 1); m = w ("write_mass") or 1 ("count"); no division for "none".

    w, r: (B, T, R); v: (B, T, V); log_decay: (R,). Returns (B, T, V). O(T^2) loops: small T only.
    """
    B, T, R = w.shape
    beta = log_decay.exp()
    out = []
    for t in range(T):
        last = t if include_current else t - 1
        num = w.new_zeros(B, R, v.shape[-1])
        den = w.new_zeros(B, R)
        for s in range(last + 1):
            f = beta ** (last - s)                                      # (R,)
            num = num + f[None, :, None] * w[:, s, :, None] * v[:, s, None, :]
            den = den + f[None] * (w[:, s] if normalization == "write_mass" else 1.0)
        c = num if normalization == "none" else num / (den[..., None] + eps)     # (B, R, V)
        out.append(torch.einsum("br,brv->bv", r[:, t], c))
    return torch.stack(out, 1)


def channel_mix(w, r, v, log_decay, normalization: str = "write_mass", include_current: bool = True,
                eps: float = 1e-6, form: str = "chunk", chunk_size: int = 64):
    """The same quantity through the generic op: q = r / (n + eps), k = w (shifted by one token when
    include_current is False), v; n from ``decay_cumsum``. Shapes as in ``channel_mix_by_definition``."""
    m = {"write_mass": w, "count": torch.ones_like(w), "none": None}[normalization]
    k_in, v_in, m_in = w, v, m
    if not include_current:
        shift = lambda x: torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], 1)
        k_in, v_in, m_in = shift(w), shift(v), None if m is None else shift(m)
    q = r if m_in is None else r / (decay_cumsum(m_in, log_decay, form=form, chunk_size=chunk_size)[0] + eps)
    o, _ = decay_linear_attn(q[:, :, None], k_in[:, :, None], v_in[:, :, None], log_decay[None],
                             form=form, backend="torch", chunk_size=chunk_size)
    return o[:, :, 0]
