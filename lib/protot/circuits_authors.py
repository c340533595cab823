"""The pieces of :mod:`protot.circuits` for the authors' mixer (``ProtoTConfig(variant="authors")``,
``protot.models.protot_authors``); :mod:`protot.circuits` holds the shared maths and the API and
calls these for a model of that variant.

What differs from compendium-v1 (equations in ``protot.mixer_authors``; H heads of r hubs, hub k
in head h = k // r):

- **routing**: no write projection and no convolution before the routing. With x_t = RMSNorm(h_t),
  the write logit of hub k is <x_t, p_k> / (|tau_h| + 2e-6); the read logit is the same in the
  shared-routing layers (layer 0 of their LM) and <W_r[h] x_t, p_k> / (|tau_r[h]| + 2e-6)
  elsewhere. The readout of hub k is therefore one vector, Wq^T p_k / (|tau| + 2e-6) with Wq the
  identity or W_r[h], at one tap (the token's own position). Centred, it is taken minus the mean
  over the hubs of k's head: each head's softmax sees only differences among its own hubs.
- **channels**: a token reads from the past only, M_t = S_{t-1} / max(n_{t-1}, floor), so hub k's
  term in the mixer output at t is

      (alpha_h / sqrt(H)) U_h sum_{s < t} q_{t,k} (1 - beta_k) beta_k^(t-1-s) Pi_{s,k} v_{s,h},
      q_{t,k} = R_{t,k} / max(n_{t-1,k}, floor),

  with v_s the value the mixer stored at s: after the value convolution in the layers that have
  one (a mix of the values at s-4 .. s), so splitting a channel by source position splits it by
  stored value.
"""
from __future__ import annotations

import math

import torch

from protot.mixer_authors import TAU_OFFSET, causal_value_conv

__all__ = ["is_authors", "values", "readout_vectors", "logits", "channel_terms", "source_terms", "gate_softmax"]


def is_authors(mixer) -> bool:
    from protot.models.protot_authors import AuthorsProtoMixer

    return isinstance(mixer, AuthorsProtoMixer)


def _head(mixer) -> torch.Tensor:
    """(R,) the head of each hub."""
    return torch.arange(mixer.prototypes.shape[0]) // mixer.hubs


def values(mixer, x: torch.Tensor) -> torch.Tensor:
    """The values (B, T, H, V) the mixer computes from its normed input ``x`` (B, T, C): W_v x,
    then v / 2 + conv(v) / 2 where the layer convolves its values (the forward's own operations)."""
    v = torch.einsum("btc,hvc->bthv", x, mixer.value_proj.to(x.dtype))
    if mixer.value_conv is not None:
        conv, _ = causal_value_conv(v, mixer.value_conv)
        v = 0.5 * v + 0.5 * conv
    return v


def _query_side(mixer, gate: str, h: int):
    """(W_q (C, C) or None for the normed token itself, temperature) of head h's ``gate`` routing."""
    if gate == "write" or mixer.shared_routing:
        return None, mixer.write_tau[h]
    return mixer.read_proj[h], mixer.read_tau[h]


def readout_vectors(mixer, gate: str, centered: bool) -> torch.Tensor:
    """(C, R) float64: column k is W_q^T p_k / (|tau| + 2e-6), so that logit_{t,k} = <x_t, column k>;
    centred within k's head when ``centered``."""
    H, r = mixer.num_heads, mixer.hubs
    P = mixer.prototypes.detach().double()
    cols = []
    for h in range(H):
        Wq, tau = _query_side(mixer, gate, h)
        Ph = P[h * r:(h + 1) * r].t()                                  # (C, r)
        U = Ph if Wq is None else Wq.detach().double().t() @ Ph
        U = U / (tau.detach().double().abs() + TAU_OFFSET)
        cols.append(U - U.mean(1, keepdim=True) if centered else U)
    return torch.cat(cols, 1)


def logits(mixer, gate: str, x: torch.Tensor, centered: bool) -> torch.Tensor:
    """The ``gate`` logits (N, R) at normed inputs ``x`` (N, C), computed the model's way (the query,
    then its dot product with each prototype over the temperature); centred within each head."""
    H, r = mixer.num_heads, mixer.hubs
    P = mixer.prototypes.detach().to(x.dtype)
    out = []
    for h in range(H):
        Wq, tau = _query_side(mixer, gate, h)
        q = x if Wq is None else x @ Wq.detach().to(x.dtype).t()
        z = (q @ P[h * r:(h + 1) * r].t()) / (tau.detach().to(x.dtype).abs() + TAU_OFFSET)
        out.append(z - z.mean(-1, keepdim=True) if centered else z)
    return torch.cat(out, -1)


def gate_softmax(mixer, z: torch.Tensor) -> torch.Tensor:
    """Gates (N, R) from logits (N, R): a softmax within each head."""
    N = z.shape[0]
    return torch.softmax(z.reshape(N, mixer.num_heads, mixer.hubs), -1).reshape(N, -1)


def channel_terms(mixer, w: torch.Tensor, r: torch.Tensor, v: torch.Tensor, positions: torch.Tensor):
    """The mixer output at ``positions`` split per hub.

    w: (N, T, R) write routing of the rows; r: (N, R) read routing at the positions; v: (N, T, H, V)
    values. Returns (terms (N, R, C), summing over hubs to the mixer output; coef (N, T, R): the
    weight of the value stored at s in hub k's read, q_{t,k} (1 - beta_k) beta_k^(t-1-s) Pi_{s,k} for
    s < t, zero elsewhere)."""
    g = mixer.log_decay().detach().double().reshape(-1)                 # (R,) log beta
    T = w.shape[1]
    lag = (positions - 1)[:, None] - torch.arange(T)[None, :]           # (N, T): t-1-s
    inside = (lag >= 0).double()[:, :, None]
    a = torch.exp(lag.clamp(min=0).double()[:, :, None] * g) * inside * (1.0 - g.exp()) * w.double()   # (N, T, R)
    q = r.double() / a.sum(1).clamp_min(mixer.config.mass_floor)        # (N, R)
    coef = q[:, None, :] * a
    head = _head(mixer)
    S = torch.einsum("ntr,ntrv->nrv", coef, v.double()[:, :, head, :])   # (N, R, V)
    U = mixer.out_proj.detach().double()[head]                          # (R, C, V)
    scale = mixer.alpha.detach().double()[head] / math.sqrt(mixer.num_heads)   # (R,)
    return scale[None, :, None] * torch.einsum("nrv,rcv->nrc", S, U), coef


def source_terms(mixer, coef: torch.Tensor, v: torch.Tensor, readout: torch.Tensor) -> torch.Tensor:
    """(N, T, R): hub k's term read out by ``readout`` (N, C), split by the position s of the stored
    value: coef_{s,k} (alpha_h / sqrt(H)) <U_h v_{s,h}, readout>."""
    vo = torch.einsum("nthv,hcv,nc->nth", v.double(), mixer.out_proj.detach().double(), readout.double())
    vo = vo * mixer.alpha.detach().double() / math.sqrt(mixer.num_heads)   # (N, T, H)
    return coef * vo[:, :, _head(mixer)]
