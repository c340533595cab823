"""Stand-ins shared by the value-level tests of accpp.interventions (test_interventions_exact.py and
test_interventions_removal.py): an Intervener without a model, whose ``arch`` / ``dec`` / ``solver`` are
small hand-made objects whose outputs are worked out by hand in the comments, and the whole-message
``pytest.raises``.
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch

from accpp.decompose import KIND_EMB, KIND_HEAD, KIND_MLP
from accpp.interventions import Intervener, SignalSpec

def _raises(exc, message: str):
    """pytest.raises on the whole message."""
    return pytest.raises(exc, match="^" + re.escape(message) + "$")


def _spec(**kw) -> SignalSpec:
    base = dict(layer=2, head=1, dest=9, src=4, side="d", kind=KIND_HEAD, comp_layer=1, comp_head=3, comp_src=2,
                token=9, sing=(0, 4))
    return SignalSpec(**(base | kw))


def _bare(**attrs) -> Intervener:
    """An Intervener without a model: only the attributes the method under test reads."""
    iv = object.__new__(Intervener)
    iv.__dict__.update(attrs)
    return iv


# A head-space stand-in: layer 1, head 3 (its kv head is 1) of a 2-layer, 4-head model with d_head 2, on a
# 4-token prompt; firing A1.3@3<1. Ut[1, 3] and Vt[1, 3] are triangular (not symmetric: x B != x B^T):
#   x Ut = (x0, 2 x0 + x1)        x Vt = (x0 + 3 x1, x1)
# token_coeffs rows: [emb, head A0.1<0, MLP 0] (no MLP row at key token 0).
EMB, HEAD01, MLP0 = [KIND_EMB, -1, -1, -1], [KIND_HEAD, 0, 1, 0], [KIND_MLP, 0, -1, -1]
COEFFS = {
    (3, "q"): ([[1, 0], [2, 1], [5, 7]], [EMB, HEAD01, MLP0]),    # sum (8, 8):  qf_3 = (8, -8)
    (0, "k"): ([[2, 0], [1, 1]], [EMB, HEAD01]),                  # sum (3, 1):  kf_0 = (0, 1)
    (1, "k"): ([[1, 1], [0, 2], [3, -1]], [EMB, HEAD01, MLP0]),   # sum (4, 2):  kf_1 = (-2, 2)
    (2, "k"): ([[0, 1], [1, 0], [4, 2]], [EMB, HEAD01, MLP0]),    # sum (5, 3):  kf_2 = (-4, 3)
    (3, "k"): ([[1, 0], [0, 0], [-2, 1]], [EMB, HEAD01, MLP0]),   # sum (-1, 1): kf_3 = (-4, 1)
}


def _head_space() -> Intervener:
    f64 = dict(dtype=torch.float64)
    Ut = torch.eye(2, **f64).repeat(2, 4, 1, 1) * 7  # every other head: 7 I (a wrong head would show)
    Vt = Ut.clone()
    Ut[1, 3] = torch.tensor([[1.0, 2.0], [0.0, 1.0]])
    Vt[1, 3] = torch.tensor([[1.0, 0.0], [3.0, 1.0]])

    def token_coeffs(L, a, t, side):
        assert (L, a) == (1, 3)
        C, labels = COEFFS[(t, side)]
        return torch.tensor(C, **f64), torch.tensor(labels)

    layers = [SimpleNamespace(sliding_window=None, scale=9.0),
              SimpleNamespace(sliding_window=None, scale=0.5, kv_of=lambda h: h // 2)]
    return _bare(arch=SimpleNamespace(n_layers=2, n_heads=4, d_head=2, layers=layers), T=4,
                 solver=SimpleNamespace(svd=SimpleNamespace(Ut=Ut, Vt=Vt), token_coeffs=token_coeffs))


def _hspec(**kw) -> SignalSpec:
    base = dict(layer=1, head=3, dest=3, src=1, side="d", kind=KIND_MLP, comp_layer=0, comp_head=-1, comp_src=-1,
                token=3, sing=(0,))
    return SignalSpec(**(base | kw))


def _list(t: torch.Tensor):
    return t.tolist()


def _input_space() -> Intervener:
    """d_model 3, d_head 2, 4 heads (kv head of h: h // 2), 4 tokens. Layer 0: no RoPE, no q/k-norm;
    layer 1: rotation matrices R_t and q/k-norm gains (one q gain exactly 0). Head 3's matrices:
        W_Q[3] = [[1, 0], [0, 1], [1, 0]]   x W_Q = (x0 + x2, x1)  (min-norm: x0 = x2)
        W_K[1] = [[0, 1], [2, 0], [0, 0]]   x W_K = (2 x1, x0)     (min-norm: x2 = 0)
    any other head's matrix is 5 * ones (a wrong head would show)."""
    f64 = dict(dtype=torch.float64)
    Wq = {3: torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], **f64)}
    Wk = {1: torch.tensor([[0.0, 1.0], [2.0, 0.0], [0.0, 0.0]], **f64)}
    other = torch.full((3, 2), 5.0, **f64)

    def layer(q_gain, k_gain):
        norm = lambda g: None if g is None else SimpleNamespace(gain=torch.tensor(g, **f64))  # noqa: E731
        return SimpleNamespace(sliding_window=None, kv_of=lambda h: h // 2, q_norm=norm(q_gain), k_norm=norm(k_gain),
                               wq_eff=lambda h: Wq.get(h, other), wk_eff=lambda kv: Wk.get(kv, other))

    rot = torch.eye(2, **f64).repeat(4, 1, 1) * 3  # R_t = 3 I except
    rot[2] = torch.tensor([[1.0, 1.0], [0.0, 1.0]])  # v R_2 = (v0, v0 + v1)
    rot[3] = torch.tensor([[1.0, 0.0], [2.0, 1.0]])  # v R_3 = (v0 + 2 v1, v1)
    rho_q = torch.full((4, 4), 9.0, **f64)
    rho_q[3, 3] = 2.0  # token 3, head 3
    rho_k = torch.full((4, 2), 9.0, **f64)
    rho_k[2, 1] = 4.0  # token 2, kv head 1
    tables = {1: (rho_q, rho_k)}
    dec = SimpleNamespace(rot=[None, rot], rho_q=lambda L: tables[L][0], rho_k=lambda L: tables[L][1])
    arch = SimpleNamespace(n_layers=2, n_heads=4, d_head=2, layers=[layer(None, None), layer([2.0, 0.0], [0.5, 4.0])])
    return _bare(arch=arch, dec=dec, T=4)
