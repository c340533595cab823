"""The prototype mixer's own maths: gates, the normaliser, the channel mix and its definition.

Working specification (the paper's PDF could not be read; the open choices are ProtoTConfig fields). For one layer,
token states x_t (after RMSNorm), R prototypes p_k, key projections a^w_t = W_w x_t, a^r_t = W_r x_t (d -> P;
one shared projection W_k when ``shared_keys``: a^w_t = a^r_t = W_k x_t), values v_t = W_v x_t (d -> d_v):

    write gate  w_{t,k} = softmax_k( sim(a^w_t, p_k) / tau_w )                         (B, T, R)
    read gate   r_{t,k} = softmax_k( sim(a^r_t, p_k) / tau_r )                         (B, T, R)
    state       S_{t,k} = sum_{s<=t} beta_k^{t-s} w_{s,k} v_s = beta_k S_{t-1,k} + w_{t,k} v_t
    normaliser  n_{t,k} = sum_{s<=t} beta_k^{t-s} m_{s,k}     = beta_k n_{t-1,k} + m_{t,k}   (m = w or 1)
    channel     c_{t,k} = S_{t,k} / (n_{t,k} + eps)     (a discounted prefix mean of values; 0 where n + eps = 0)
    output      y_t     = alpha * W_o sum_k r_{t,k} c_{t,k}

(with ``include_current=False`` the sums run over s < t: c_{t,k} is read from S_{t-1}, n_{t-1}), so
sum_k r_{t,k} c_{t,k} = q_t S_t with q_t = r_t / (n_t + eps) and keys k_t = w_t: the mixer is gated
linear attention with a constant per-channel decay beta_k (one head, K = R, V = d_v). That op lives in
``kernels.proto_mixer`` (its torch forms, Triton kernels and the dispatch ``decay_linear_attn``); this
module keeps what is particular to the mixer:

    gate_logits, gate          similarity to the prototypes and the (masked / clamped) softmax gate
    decay_cumsum               the normaliser n (one scalar scan per channel), in three forms
    read_query                 q = r / (n + eps), with 0 where the normaliser is 0
    channel_mix                the mixer through the op;  channel_mix_by_definition: by explicit sums
    half_life_to_log_decay, log_decay_to_half_life, log_decay_from_param, param_from_log_decay
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from kernels.proto_mixer import BACKENDS, DEFAULT_CHUNK_SIZE, FORMS, decay_linear_attn

__all__ = [
    "FORMS", "BACKENDS", "DEFAULT_CHUNK_SIZE", "SIMILARITIES",
    "gate_logits", "gate", "clear_interventions", "decay_cumsum", "read_query", "channel_mix", "channel_mix_by_definition",
    "half_life_to_log_decay", "log_decay_to_half_life", "log_decay_from_param", "param_from_log_decay",
    "measure_forms_agree",
]

SIMILARITIES = ("dot", "cosine")


# ---------------------------------------------------------------------------------------------
# Gates
# ---------------------------------------------------------------------------------------------
def gate_logits(a: torch.Tensor, prototypes: torch.Tensor, similarity: str = "dot") -> torch.Tensor:
    """sim(a_t, p_k): a (B, T, P), prototypes (R, P) -> (B, T, R).
    "dot": <a, p> / sqrt(P);  "cosine": cos(a, p)."""
    if similarity == "cosine":
        return F.normalize(a, dim=-1) @ F.normalize(prototypes, dim=-1).t()
    if similarity == "dot":
        return a @ prototypes.t() / math.sqrt(a.shape[-1])
    raise ValueError(f"similarity must be one of {SIMILARITIES}, got {similarity!r}")


def clear_interventions(mixer) -> None:
    """Give a mixer (either variant) its intervention sets, empty: ``mask_write`` / ``mask_read``
    (prototype indices removed from the softmax) and ``clamp_write`` / ``clamp_read`` ({k: value})."""
    mixer.mask_write: set[int] = set()
    mixer.mask_read: set[int] = set()
    mixer.clamp_write: dict[int, float] = {}
    mixer.clamp_read: dict[int, float] = {}


def gate(logits: torch.Tensor, temperature: float, mask=(), clamp=None) -> torch.Tensor:
    """softmax_k(logits / temperature) over the last axis (R prototypes).

    ``mask``: prototype indices removed from the softmax (logit -inf, the rest renormalised);
    ``clamp``: {k: value}, gate k set to value after the softmax (the others left as they are)."""
    logits = logits / temperature
    if mask:
        keep = torch.ones(logits.shape[-1], dtype=torch.bool, device=logits.device)
        keep[sorted(mask)] = False
        if not bool(keep.any()):
            raise ValueError("all prototypes masked")
        logits = logits.masked_fill(~keep, float("-inf"))
    g = torch.softmax(logits, dim=-1)
    if clamp:
        g = g.clone()
        for k, val in clamp.items():
            g[..., k] = val
    return g


# ---------------------------------------------------------------------------------------------
# The normaliser
# ---------------------------------------------------------------------------------------------
def decay_cumsum(x, log_decay, initial=None, form: str = "chunk", chunk_size: int = DEFAULT_CHUNK_SIZE):
    """Per-channel discounted prefix sum n_t = beta * n_{t-1} + x_t, n_{-1} = initial (or 0).

    x: (B, T, K); log_decay: (K,), <= 0; initial: (B, K). Returns (n (B, T, K), n_T (B, K)), in
    float64 for float64 inputs and float32 otherwise. It is the op with q = v = 1 and k = x, but
    written for one scalar per channel (no (C, C) attention matrix per channel, ~10x faster):
      "quadratic":  n_t = sum_{s<=t} exp((t-s) a) x_s + exp((t+1) a) n_{-1}      ((T, T, K) table)
      "recurrent":  the scan itself, one token at a time
      "chunk":      the scan inside every chunk at once (C steps on (B, T/C, K)), then a scan of T / C
                    steps over the (B, K) carries between chunks: C + T/C sequential steps, not T;
                    elementwise only, so the result does not depend on the batch it is computed in.
    """
    if x.dim() != 3 or log_decay.shape != x.shape[-1:]:
        raise ValueError(f"x must be (B, T, K) and log_decay (K,); got {tuple(x.shape)}, {tuple(log_decay.shape)}")
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    B, T, K = x.shape
    dt = torch.float64 if torch.promote_types(x.dtype, log_decay.dtype) == torch.float64 else torch.float32
    x, a = x.to(dt), log_decay.to(dt)
    n0 = None if initial is None else initial.to(dt)
    if initial is not None and initial.shape != (B, K):
        raise ValueError(f"initial must be (B, K) = ({B}, {K}); got {tuple(initial.shape)}")
    if T == 0:
        nT = x.new_zeros(B, K) if n0 is None else n0
        return x.new_zeros(B, 0, K), nT
    if form == "recurrent":
        beta = a.exp()
        prev = x.new_zeros(B, K) if n0 is None else n0
        out = []
        for x_t in x.unbind(1):
            prev = beta * prev + x_t                                    # (B, K)
            out.append(prev)
        n = torch.stack(out, 1)
        return n, n[:, -1]
    if form == "quadratic":
        t = torch.arange(T, device=x.device, dtype=dt)
        lag = t[:, None] - t[None, :]                                   # (T, T): t - s
        D = torch.exp(lag.clamp(min=0)[..., None] * a) * (lag >= 0)[..., None]   # (T, T, K)
        n = torch.einsum("tsk,bsk->btk", D, x)
        if n0 is not None:
            n = n + torch.exp((t + 1)[:, None] * a) * n0[:, None]       # (B, T, K)
        return n, n[:, -1]
    C = int(chunk_size)
    if C < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    N = math.ceil(T / C)
    pad = N * C - T
    xc = F.pad(x, (0, 0, 0, pad)).view(B, N, C, K)                      # zeros add nothing
    beta = a.exp()                                                      # (K,)
    # within every chunk at once: n_local_i = beta n_local_{i-1} + x_i, from 0 (C steps on (B, N, K));
    # elementwise only, so a sequence gets the same bits alone or in any batch (a (C, C) matmul would not)
    prev, local = torch.zeros_like(xc[:, :, 0]), []
    for x_i in xc.unbind(2):
        prev = beta * prev + x_i
        local.append(prev)
    n_local = torch.stack(local, 2)                                     # (B, N, C, K)
    # between chunks: the carry into chunk n, scanned over N steps (every chunk but the last is full)
    chunk_decay = torch.exp(C * a)                                      # (K,): beta^C
    carry, before = x.new_zeros(B, K) if n0 is None else n0, []
    for u_n in n_local[:, :, C - 1].unbind(1):                          # u_n: the chunk's own sum at its end
        before.append(carry)
        carry = chunk_decay * carry + u_n
    i = torch.arange(C, device=x.device, dtype=dt)
    carry_in = torch.exp((i + 1)[:, None] * a)                          # (C, K): exp((i+1) a)
    n = n_local + carry_in * torch.stack(before, 1)[:, :, None]         # (B, N, C, K)
    n = n.reshape(B, N * C, K)[:, :T]
    return n, n[:, -1]


def read_query(r: torch.Tensor, n: torch.Tensor, eps: float) -> torch.Tensor:
    """q = r / (n + eps), the read gate over the normaliser. n >= 0 (a discounted sum of gates);
    where n + eps = 0 (possible only with eps = 0: a channel that has received nothing, such as every
    channel at position 0 with include_current=False, or a masked prototype) q = 0, so the channel
    reads 0, with finite gradients. With eps > 0 this is the plain division."""
    if eps > 0:
        return r / (n + eps)
    empty = n <= 0
    return torch.where(empty, torch.zeros_like(r), r / torch.where(empty, torch.ones_like(n), n))


# ---------------------------------------------------------------------------------------------
# The channel mix: through the op, and by its definition (slow; the reference)
# ---------------------------------------------------------------------------------------------
def channel_mix_by_definition(w, r, v, log_decay, normalization: str = "write_mass",
                              include_current: bool = True, eps: float = 1e-6):
    """sum_k r_{t,k} c_{t,k} with c_{t,k} = sum_s beta_k^(t'-s) w_{s,k} v_s / (sum_s beta_k^(t'-s) m_{s,k} + eps),
    s <= t (t' = t) or s < t (t' = t - 1); m = w ("write_mass") or 1 ("count"); no division for "none";
    c = 0 where the denominator is 0 (eps = 0 and nothing received).

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
        if normalization == "none":
            c = num
        else:
            d = den[..., None] + eps
            c = torch.where(d > 0, num / torch.where(d > 0, d, torch.ones_like(d)), torch.zeros_like(num))
        out.append(torch.einsum("br,brv->bv", r[:, t], c))              # (B, V)
    return torch.stack(out, 1)


def channel_mix(w, r, v, log_decay, normalization: str = "write_mass", include_current: bool = True,
                eps: float = 1e-6, form: str = "chunk", chunk_size: int = DEFAULT_CHUNK_SIZE, backend: str = "torch"):
    """The same quantity through the op: q = r / (n + eps) (``read_query``), k = w (both shifted by one
    token when include_current is False), v; n from ``decay_cumsum``. Shapes as in ``channel_mix_by_definition``."""
    m = {"write_mass": w, "count": torch.ones_like(w), "none": None}[normalization]
    k_in, v_in, m_in = w, v, m
    if not include_current:
        shift = lambda x: torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], 1)
        k_in, v_in, m_in = shift(w), shift(v), None if m is None else shift(m)
    q = r if m_in is None else read_query(r, decay_cumsum(m_in, log_decay, form=form, chunk_size=chunk_size)[0], eps)
    o, _ = decay_linear_attn(q[:, :, None], k_in[:, :, None], v_in[:, :, None], log_decay[None],
                             form=form, backend=backend, chunk_size=chunk_size)
    return o[:, :, 0]


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
# The claim protot/mixer-forms-agree (notebook protot/01_mixer_derivation)
# ---------------------------------------------------------------------------------------------
def measure_forms_agree(agree, steps: dict[str, dict[str, float]], config: dict | None = None):
    """Claim protot/mixer-forms-agree: the largest difference over every derivation step and every form.

    ``agree``: one row per (normalisation, include_current, form) with ``max_abs_diff`` (against the
    definition's explicit sums) and ``scale`` (the largest |output| compared); ``steps``: the derivation's
    intermediate checks, {step name: {what: max abs difference}}. ``output_scale`` (the smallest scale)
    is the precondition's quantity: agreement of outputs of order one, not of zeros.
    """
    from compendium.claims import Measurement

    missing = [c for c in ("max_abs_diff", "scale") if c not in agree]
    if missing or len(agree) == 0:
        raise ValueError(f"measure_forms_agree: needs a non-empty table with max_abs_diff and scale (missing {missing})")
    diffs = [float(agree["max_abs_diff"].max()), *(float(x) for d in steps.values() for x in d.values())]
    if not all(math.isfinite(x) for x in diffs):
        raise ValueError(f"measure_forms_agree: a difference is not finite: {diffs}")
    return Measurement(
        "protot/mixer-forms-agree",
        values={"max_abs_diff": max(diffs), "output_scale": float(agree["scale"].min())},
        evidence={**steps, "full mixer, worst case": float(agree["max_abs_diff"].max())},
        tables={"mixer_forms_agree": agree}, config=dict(config or {}),
        note="definition vs quadratic / recurrent / chunked forms, all normalisations, s<=t and s<t")
