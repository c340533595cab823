"""The maths of the authors' prototype mixer (ProtoT as built in its public code, commit 4262fc2).

Written from the equations in tests/protot/golden/README.md (our own words of what their module
computes); no code of theirs is used. For one head with r hubs (prototypes) p_k, input x_t (the
RMS-normed residual stream, width C), value width C_v:

    write routing   Pi_{t,k} = softmax_k( <x_t, p_k> / (|tau| + 2e-6) )        raw dot, no projection
    read routing    R_{t,k}  = Pi_{t,k}                                          (shared routing)
                            or softmax_k( <W_r x_t, p_k> / (|tau_r| + 2e-6) )   (separate routing)
    values          v_t = W_v x_t;  in the first layers  v_t <- v_t / 2 + conv5(v)_t / 2   (causal,
                    depthwise, kernel 5 over the values only; the routing never sees it)
    accumulation    S_t = sum_{s<=t} (1 - beta_k) beta_k^(t-s) Pi_{s,k} v_s,
                    n_t = sum_{s<=t} (1 - beta_k) beta_k^(t-s) Pi_{s,k}              beta_k = sigmoid(theta_k)
    read (past only) M_0 = 0,  M_t = S_{t-1} / max(n_{t-1}, floor)                   floor = 1e-6
    output          y_t = (1 / sqrt(H)) sum_h alpha_h U_h sum_k R_{t,k} M_{t,k}      (the caller adds
                    the residual)

Since sum_k R_{t,k} M_{t,k} = q_t S_{t-1} with q_t = R_t / max(n_{t-1}, floor), the read is the op of
``kernels.proto_mixer`` (gated linear attention with a constant per-channel decay) fed with keys
(1 - beta) Pi and values v shifted by one token. ``exact_read`` computes it that way, in any of the
op's forms; ``authors_float32_read`` reproduces the arithmetic their code uses instead,
beta^t * cumsum_s[(1 - beta) Pi_s v_s / (beta^s + 1e-12)] in float32, which departs from the
equation once beta^s approaches 1e-12 (README: "decay arithmetic").
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.proto_mixer import DEFAULT_CHUNK_SIZE, decay_linear_attn
from protot.mixer import decay_cumsum, gate

__all__ = ["TAU_OFFSET", "DECAY_ARITHMETIC", "routing", "causal_value_conv", "shift_by_one",
           "exact_read", "authors_float32_read", "read_by_definition"]

#: |tau| + 2e-6: their temperature gets +1e-6 twice on its way into the softmax.
TAU_OFFSET = 2e-6
#: How the discounted prefix is computed: the equation itself, or their float32 arithmetic.
DECAY_ARITHMETIC = ("exact", "authors-float32")


def routing(q: torch.Tensor, prototypes: torch.Tensor, tau: torch.Tensor, mask=(), clamp=None) -> torch.Tensor:
    """softmax_k(<q_t, p_k> / (|tau| + 2e-6)): q (B, T, C), prototypes (r, C), tau () -> (B, T, r).

    ``mask``: hub indices removed from the softmax (logit -inf, the rest renormalised); ``clamp``:
    {k: value} set after the softmax (the other hubs unchanged): the interventions of protot.intervene."""
    logits = (q @ prototypes.t()) / (tau.abs() + TAU_OFFSET)
    return gate(logits, 1.0, mask, clamp)                              # masked / clamped softmax


def causal_value_conv(v: torch.Tensor, weight: torch.Tensor, prev: torch.Tensor | None = None):
    """Depthwise causal convolution over time of the values, per channel, one kernel for all heads.

    v: (B, T, H, V); weight: (V, W); prev: (B, W-1, H, V) inputs before this call (zeros at the
    sequence start). conv(v)_t = sum_j weight[:, j] * v_{t-W+1+j}. Returns (conv (B, T, H, V), the
    last W-1 inputs (B, W-1, H, V) for the next call)."""
    B, T, H, V = v.shape
    W = weight.shape[1]
    if prev is None:
        prev = v.new_zeros(B, W - 1, H, V)
    vp = torch.cat([prev.to(v.dtype), v], dim=1)                       # (B, W-1+T, H, V)
    x = vp.permute(0, 2, 3, 1).reshape(B, H * V, W - 1 + T)            # channels (h, c), time last
    kernel = weight.to(v.dtype).repeat(H, 1)[:, None, :]                # (H V, 1, W)
    y = F.conv1d(x, kernel, groups=H * V)                               # (B, H V, T)
    y = y.reshape(B, H, V, T).permute(0, 3, 1, 2)                       # (B, T, H, V)
    return y, vp[:, vp.shape[1] - (W - 1):]


def shift_by_one(x: torch.Tensor, pending: torch.Tensor | None = None) -> torch.Tensor:
    """x (B, T, ...) -> (B, T, ...) with row t holding x_{t-1}; row 0 holds ``pending`` (the last
    token of the previous call) or zeros: what "read from the past only" feeds the op."""
    first = x.new_zeros(x[:, :1].shape) if pending is None else pending.to(x.dtype)
    return torch.cat([first, x[:, :-1]], dim=1)


def exact_read(Pi, R, v, log_beta, *, floor: float = 1e-6, state=None, form: str = "chunk",
               backend: str = "auto", chunk_size: int = DEFAULT_CHUNK_SIZE):
    """sum_k R_{t,k} M_{t,k} by the equation, through the op.

    Pi, R: (B, T, H, r) write and read routing; v: (B, T, H, V) values; log_beta: (H, r) log beta.
    ``state``: None at the sequence start, else a dict from the previous call with "S" (B, H, r, V),
    "n" (B, H, r), "pending_k" (B, 1, H, r), "pending_v" (B, 1, H, V); the returned dict continues
    the sequence (S, n up to the last token before this call's last, and this call's last token as
    pending). Returns (read (B, T, H, V), new state)."""
    B, T, H, r = Pi.shape
    beta = log_beta.exp()                                               # (H, r)
    k = (1.0 - beta) * Pi                                               # (B, T, H, r): weights of the writes
    st = state or {}
    k_in = shift_by_one(k, st.get("pending_k"))                        # token t reads the writes of s < t
    v_in = shift_by_one(v, st.get("pending_v"))
    n0 = st.get("n")
    n, nT = decay_cumsum(k_in.reshape(B, T, H * r), log_beta.reshape(H * r),
                         None if n0 is None else n0.reshape(B, H * r),
                         form="recurrent" if T == 1 else form, chunk_size=chunk_size)
    q = R / n.reshape(B, T, H, r).clamp_min(floor).to(R.dtype)         # (B, T, H, r): R / max(n_{t-1}, floor)
    o, ST = decay_linear_attn(q, k_in, v_in, log_beta, st.get("S"), True,
                              form="recurrent" if T == 1 else form, backend=backend, chunk_size=chunk_size)
    new = {"S": ST.detach(), "n": nT.reshape(B, H, r).detach(),
           "pending_k": k[:, -1:].detach(), "pending_v": v[:, -1:].detach()}
    return o, new


def authors_float32_read(Pi, R, v, log_beta, *, floor: float = 1e-6):
    """sum_k R_{t,k} M_{t,k} with their float32 arithmetic (whole sequences only, no state):

        S'_t = beta^t cumsum_{s<=t}[ (1-beta) Pi_s v_s / (beta^s + 1e-12) ],  n'_t likewise,
        M_t  = S'_{t-1} / max(n'_{t-1}, floor),  M_0 = 0.

    Where beta^s is far above 1e-12 this is the equation; past s ~ ln(1e-10) / ln(beta) late tokens
    lose weight, and once beta^t underflows in float32 the hub reads exactly 0. The result comes
    back in the dtype of v."""
    B, T, H, r = Pi.shape
    out_dtype = v.dtype
    beta = log_beta.exp().float()                                       # (H, r)
    s = torch.arange(T, device=Pi.device, dtype=torch.float32)
    b_pow = beta[None] ** s[:, None, None]                              # (T, H, r): beta^s in float32
    w = (1.0 - beta) * Pi.float() / (b_pow + 1e-12)                     # (B, T, H, r)
    S = torch.cumsum(w[..., None] * v.float()[:, :, :, None, :], dim=1) * b_pow[..., None]   # (B, T, H, r, V)
    n = torch.cumsum(w, dim=1) * b_pow                                  # (B, T, H, r)
    S_prev = shift_by_one(S)
    n_prev = shift_by_one(n)
    M = S_prev / n_prev.clamp_min(floor)[..., None]                     # (B, T, H, r, V)
    return torch.einsum("bthr,bthrv->bthv", R.float(), M).to(out_dtype)


def read_by_definition(Pi, R, v, log_beta, *, floor: float = 1e-6):
    """The same read by explicit sums over s < t (float64 reference, O(T^2)): M_t from the weights
    (1 - beta) beta^(t-1-s) Pi_s for s <= t-1, divided by max(their sum, floor)."""
    B, T, H, r = Pi.shape
    dt = torch.float64
    beta = log_beta.to(dt).exp()
    Pi, R, v = Pi.to(dt), R.to(dt), v.to(dt)
    out = torch.zeros(B, T, H, v.shape[-1], dtype=dt, device=v.device)
    for t in range(1, T):
        lag = (t - 1 - torch.arange(t, dtype=dt, device=v.device))     # (t,): t-1-s for s < t
        w = (1 - beta) * beta[None] ** lag[:, None, None] * Pi[:, :t]    # (B, t, H, r)
        S = torch.einsum("bshr,bshv->bhrv", w, v[:, :t])
        n = w.sum(1)                                                    # (B, H, r)
        M = S / n.clamp_min(floor)[..., None]
        out[:, t] = torch.einsum("bhr,bhrv->bhv", R[:, t], M)
    return out
