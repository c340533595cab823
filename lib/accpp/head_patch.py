"""One attention head patched inside the model's own forward pass: :class:`head_patch`.

:mod:`accpp.interventions` removes a traced signal from head a of layer L as a change delta of
that head's rotated query at the destination row d (query side) or of its rotated key at row j
(key side); dx is the same change in the head's input space (see the derivation there).

Where it acts in the model. Hugging Face computes every head's query from one normalised input,
and with grouped-query attention one key head serves several query heads, so subtracting dx from
the input of q_proj/k_proj would change other heads too. Since head a reads its input only
through W_Q[a] (W_K[kv]), subtracting dx from a private copy of head a's input is the same as
subtracting delta from head a's rotated query (key) alone. The implementation therefore, inside
the model's own forward pass at layer L:

1. captures head a's query, its kv head's key and value as the model computes them (forward hooks
   on ``q_norm``/``k_norm`` when the family has them, else on ``q_proj``/``k_proj``; ``v_proj``) and
   the rotary (cos, sin) passed to the attention module;
2. rotates them, subtracts delta at row d (query side) or at row j of head a's own copy of the
   key (key side), recomputes head a's scores (scale, soft-cap, causal/sliding-window mask),
   softmax and weighted values;
3. writes that output into head a's slice of ``o_proj``'s input (forward pre-hook); head a's new
   pattern is kept on the patch (and reported in place of the module's own weights for head a).

Everything else (other heads of layer L, all later layers, the logits) is the real model's
computation. Layers below L are untouched, so the captured q, k, v equal the clean run's.

Supported: the llama-like adapters (``llama`` = SmolLM2, ``gemma2``, ``gemma3_text``); other
families raise :class:`accpp.arch.UnsupportedArchitecture`.
"""
from __future__ import annotations

import torch

from accpp.arch import UnsupportedArchitecture, get_path
from accpp.decompose import visible
from accpp.signals import softcap

__all__ = ["SUPPORTED", "SIDES", "check_supported", "head_patch"]

SUPPORTED = ("llama", "gemma2", "gemma3_text")
SIDES = {"d": "query", "s": "key"}


def check_supported(arch) -> None:
    if arch.model_type not in SUPPORTED:
        raise UnsupportedArchitecture(
            f"signal interventions are implemented for the llama-like adapters ({', '.join(SUPPORTED)}): "
            f"they hook q_proj/k_proj/v_proj/o_proj (and q_norm/k_norm) of the attention module; "
            f"model_type {arch.model_type!r} is not supported")


# ---------------------------------------------------------------------------------------------
def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE (rotate-half) on the first cos.shape[-1] dims of x (T, dh); the rest passes through."""
    rd = cos.shape[-1]
    r, rest = x[..., :rd], x[..., rd:]
    half = rd // 2
    rh = torch.cat((-r[..., half:], r[..., :half]), -1)
    return torch.cat((r * cos + rh * sin, rest), -1)


class head_patch:
    """Context manager: in the model's forward pass, subtract ``delta`` (dh,) from head ``a`` of layer
    ``L``'s rotated query at row ``row`` (side "d") or from its own copy of the rotated key at row
    ``row`` (side "s"). ``delta=None``: recompute head a unchanged (a no-op up to rounding).
    After the pass, ``self.pattern`` is head a's (T, T) attention pattern (float64), ``self.scores``
    its raw scores scale * q k^T (before soft-capping and the mask) and ``self.clean_scores`` the
    same from the unpatched q and k of this pass."""

    def __init__(self, model, arch, L: int, a: int, side: str, row: int, delta: torch.Tensor | None):
        check_supported(arch)
        if side not in SIDES:
            raise ValueError(f"unknown side {side!r}: 'd' (query side) or 's' (key side)")
        self.arch, self.lw = arch, arch.layers[L]
        self.attn = getattr(get_path(model, arch.layers_path)[L], arch.attn_name)
        self.L, self.a, self.kv, self.side, self.row = L, a, self.lw.kv_of(a), side, row
        self.delta = None if delta is None else delta.detach().to(torch.float64)
        self.pattern = None
        self.scores = self.clean_scores = None  # head a's raw scores scale * q k^T (T, T), with / without delta
        self._seen: dict = {}
        self._handles: list = []

    def _capture(self, name):
        def hook(mod, args, out):
            self._seen[name] = out
        return hook

    def _grab_rope(self, mod, args, kwargs):
        pe = kwargs.get("position_embeddings")
        if pe is None and len(args) > 1:
            pe = args[1]
        self._seen["rope"] = pe

    def _head_tensors(self):
        dh, lw = self.arch.d_head, self.lw
        f = lambda t: t.detach().to(torch.float64)  # noqa: E731

        def pick(name, idx, normed):
            t = self._seen[name]
            if t.shape[0] != 1:
                raise ValueError("interventions run one prompt at a time (batch size 1)")
            # projection outputs: (1, T, n*dh); q/k-norm outputs: (1, n, T, dh)
            return f(t[0, idx]) if normed else f(t[0].view(t.shape[1], -1, dh)[:, idx])

        q = pick("q", self.a, lw.q_norm is not None)
        k = pick("k", self.kv, lw.k_norm is not None)
        v = pick("v", self.kv, False)
        rope = self._seen.get("rope")
        if rope is not None and lw.rotary_dims > 0:
            cos, sin = (f(t[0]) for t in rope)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        return q, k, v

    def _patch_o(self, mod, args):
        (x,) = args
        q, k, v = self._head_tensors()
        lw = self.lw
        self.clean_scores = lw.scale * q @ k.T
        if self.delta is not None:
            if self.side == "d":
                q = q.clone()
                q[self.row] -= self.delta
            else:
                k = k.clone()
                k[self.row] -= self.delta
        T = q.shape[0]
        self.scores = lw.scale * q @ k.T
        S = softcap(self.scores, lw.softcap)
        mask = torch.zeros(T, T, dtype=torch.bool)
        for t in range(T):
            mask[t, visible(T, t, lw.sliding_window)] = True
        P = torch.softmax(S.masked_fill(~mask, float("-inf")), -1)
        self.pattern = P
        out = x.clone()
        dh = self.arch.d_head
        out[0, :, self.a * dh:(self.a + 1) * dh] = (P @ v).to(x.dtype)
        return (out,)

    def __enter__(self):
        a, lw = self.attn, self.lw
        q_src = a.q_norm if lw.q_norm is not None else a.q_proj
        k_src = a.k_norm if lw.k_norm is not None else a.k_proj
        self._handles = [q_src.register_forward_hook(self._capture("q")),
                         k_src.register_forward_hook(self._capture("k")),
                         a.v_proj.register_forward_hook(self._capture("v")),
                         a.register_forward_pre_hook(self._grab_rope, with_kwargs=True),
                         a.o_proj.register_forward_pre_hook(self._patch_o)]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []
        return False
