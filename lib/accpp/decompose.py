"""One nnsight forward pass, then the residual stream split into components (float64).

Components of the residual stream entering layer L at token t (paper Sec. 3; docs/accpp_method.md,
step 3):

    x_t^(L) = emb_t + sum_{l<L} [ sum_h sum_s A^l_h[t,s] * vo^l_h[s] * pscale^l[t]  +  b_O^l  +  mlp^l_t ]

vo^l_h[s] = v^l_{kv(h)}[s] W_O^l[h] (times the post-attention norm gain for Gemma), pscale^l[t] the
post-attention norm's per-token 1/scale (1 where there is no such norm). Attention weights
A come from the model (nnsight); values, norm scales and everything else are recomputed in
float64 from the weights and the cached layer inputs.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from accpp.arch import Arch, get_path

__all__ = ["Activations", "collect", "Decomposition", "HeadSVD", "head_svds", "rotation_matrices", "LazyRotations",
           "head_labels",
           "visible", "KIND_NAMES", "LABEL_KIND", "LABEL_LAYER", "LABEL_HEAD", "LABEL_SRC"]

KIND_EMB, KIND_HEAD, KIND_MLP, KIND_BIAS, KIND_OFFSET = 0, 1, 2, 3, 4
# the columns of a component's label row: [kind, layer, head, source] (-1 where one does not apply)
LABEL_KIND, LABEL_LAYER, LABEL_HEAD, LABEL_SRC = 0, 1, 2, 3
KIND_NAMES = {KIND_EMB: "emb", KIND_HEAD: "head", KIND_MLP: "mlp", KIND_BIAS: "bias", KIND_OFFSET: "offset"}


@dataclass
class Activations:
    """What one forward pass gives (batch of one prompt), float64."""

    input_ids: torch.Tensor  # (T,)
    resid: torch.Tensor  # (L+1, T, d): resid[l] enters layer l; resid[L] enters the final norm
    attn: torch.Tensor  # (L, H, T, T) attention weights
    attn_contrib: torch.Tensor  # (L, T, d) the attention block's addition to the residual
    mlp: torch.Tensor  # (L, T, d) the MLP block's addition to the residual
    rotary: list  # per layer: (cos, sin) each (T, rotary_dims), or None
    logits: torch.Tensor  # (V,) logits at the traced position (the last one by default)


def collect(model, arch: Arch, input_ids: torch.Tensor, nn_model=None, position: int = -1) -> Activations:
    """Run the prompt once through nnsight and keep what the decomposition needs.

    Only the logits at ``position`` are computed (``logits_to_keep``; the unembedding of every
    position would cost more than the rest of a small model's forward pass).
    """
    from nnsight import NNsight

    nn_model = nn_model if nn_model is not None else NNsight(model)
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    T = input_ids.shape[1]
    keep = T - position % T  # logits for positions >= position; ours is the first of them
    layers = get_path(nn_model, arch.layers_path)
    saved: list = []
    with torch.no_grad(), nn_model.trace(input_ids, logits_to_keep=keep):
        for layer in layers:
            x = layer.input.save()
            pe = layer.inputs[1].get("position_embeddings").save() if arch.has_rotary else None
            attn_mod = getattr(layer, arch.attn_name)
            a_out = attn_mod.output.save()
            contrib = getattr(layer, arch.attn_contrib_name).output.save() if arch.attn_contrib_name else None
            mlp = getattr(layer, arch.mlp_contrib_name).output.save()
            saved.append((x, pe, a_out, contrib, mlp))
        final = get_path(nn_model, arch.final_norm_path).input.save()
        logits = nn_model.output.logits[0, 0].save()
    f = lambda t: t.detach().to(torch.float64)[0]  # noqa: E731
    resid = torch.stack([f(s[0]) for s in saved] + [f(final)])
    attn = torch.stack([f(s[2][1]) for s in saved])
    contrib = torch.stack([f(s[3]) if s[3] is not None else f(s[2][0]) for s in saved])
    mlp = torch.stack([f(s[4][0] if isinstance(s[4], tuple) else s[4]) for s in saved])
    rot = []
    for lw, s in zip(arch.layers, saved):
        if s[1] is None or lw.rotary_dims == 0:
            rot.append(None)
        else:
            cos, sin = s[1]  # (T, rotary dims): the model rotates the first cos.shape[-1] dims
            rot.append((f(cos), f(sin)))
    return Activations(input_ids[0].clone(), resid, attn, contrib, mlp, rot, logits.detach().double())


def rotation_matrices(cos: torch.Tensor | None, sin: torch.Tensor | None, dh: int) -> torch.Tensor:
    """R_t (T, dh, dh) with rot_t(v) = v @ R_t (rotate-half convention, first rotary dims only)."""
    if cos is None:
        raise ValueError("no rotary")
    T, rd = cos.shape
    eye = torch.eye(dh, dtype=torch.float64)
    r = eye[None].repeat(T, 1, 1)
    base = eye[:, :rd]  # (dh, rd): rows e_i restricted to rotary dims
    half = rd // 2
    rot_half = torch.cat((-base[:, half:], base[:, :half]), dim=-1)  # rotate_half(e_i)
    r[:, :, :rd] = base[None] * cos[:, None, :] + rot_half[None] * sin[:, None, :]
    return r


class LazyRotations:
    """``rot[L]``: the rotation matrices R_t (T, dh, dh) of layer L (:func:`rotation_matrices`), or None
    without rotary; each layer's are built on first use and kept (a trace touches few layers, and the
    (L, T, dh, dh) float64 tables of every layer cost more than the rest of the decomposition)."""

    def __init__(self, rotary: list, dh: int):
        self._rotary, self._dh, self._built = rotary, dh, {}

    def __len__(self) -> int:
        return len(self._rotary)

    def __getitem__(self, L: int):
        if isinstance(L, slice):
            return [self[i] for i in range(len(self))[L]]
        L = range(len(self))[L]  # IndexError outside, negative layers counted from the end
        if self._rotary[L] is None:
            return None
        if L not in self._built:
            self._built[L] = rotation_matrices(*self._rotary[L], self._dh)
        return self._built[L]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    @property
    def built(self) -> list[int]:
        """The layers whose matrices have been built so far."""
        return sorted(self._built)


def visible(T: int, d: int, window: int | None) -> torch.Tensor:
    """Key positions the query at d sees (causal, sliding window if any)."""
    lo = 0 if window is None else max(0, d - window + 1)
    return torch.arange(lo, d + 1)


# ---------------------------------------------------------------------------------------------
# Per-head SVD of the bilinear form Omega = W_Q W_K^T (folded weights), kept in head space.
# ---------------------------------------------------------------------------------------------
@dataclass
class HeadSVD:
    """Omega_h = U diag(S) V^T with U = W_Q^eff Ut, V = W_K^eff Vt (so Ut diag(S) Vt^T = I_dh)."""

    Ut: torch.Tensor  # (L, H, dh, dh)  columns: W_Q^+ u_k
    S: torch.Tensor  # (L, H, dh)
    Vt: torch.Tensor  # (L, H, dh, dh)  columns: W_K^+ v_k


def _svd_one(wq: torch.Tensor, wk: torch.Tensor):
    qq, rq = torch.linalg.qr(wq)  # (d, dh), (dh, dh)
    qk, rk = torch.linalg.qr(wk)
    p, s, th = torch.linalg.svd(rq @ rk.mT)
    ut = torch.linalg.solve_triangular(rq, p, upper=True)
    vt = torch.linalg.solve_triangular(rk, th.mT, upper=True)
    return ut, s, vt


def fingerprint(arch: Arch) -> str:
    h = hashlib.sha1(("v2" + arch.model_type).encode())
    for lw in arch.layers:
        for t in (lw.q_w, lw.k_w, lw.ln_in.gain):  # the model's own tensors: no float64 copies
            h.update(f"{tuple(t.shape)}{float(t.sum(dtype=torch.float64)):.12e}"
                     f"{float(t.abs().sum(dtype=torch.float64)):.12e}".encode())
    return h.hexdigest()[:16]


def head_svds(arch: Arch, cache_name: str | None = None) -> HeadSVD:
    """SVD of every head's folded Omega, cached on disk per model when ``cache_name`` is given."""
    path = None
    if cache_name is not None:
        from compendium import paths

        path = paths.cache_dir() / "svd" / f"{cache_name}-{fingerprint(arch)}.pt"
        if path.exists():
            return HeadSVD(**torch.load(path))
    wq = torch.stack([torch.stack([lw.wq_eff(h) for h in range(lw.n_heads)]) for lw in arch.layers])
    wk = torch.stack([torch.stack([lw.wk_eff(lw.kv_of(h)) for h in range(lw.n_heads)]) for lw in arch.layers])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # batched small LAPACK calls are ~50x slower when threads oversubscribe
    try:
        ut, s, vt = _svd_one(wq, wk)  # batched over (L, H)
    finally:
        torch.set_num_threads(threads)
    out = HeadSVD(ut, s, vt)
    if path is not None:
        from compendium.atomic import atomic_path

        with atomic_path(path) as tmp:
            torch.save({"Ut": out.Ut, "S": out.S, "Vt": out.Vt}, tmp)
    return out


# ---------------------------------------------------------------------------------------------
class Decomposition:
    """Residual-stream components of one prompt, and the per-head q/k folds of every layer."""

    def __init__(self, arch: Arch, acts: Activations):
        self.arch, self.acts = arch, acts
        L, T, d = acts.resid.shape[0] - 1, acts.resid.shape[1], acts.resid.shape[2]
        self.L, self.T = L, T
        self.emb = acts.resid[0]  # (T, d)
        self.mlp = acts.mlp  # (L, T, d)
        vo, pscale, bias = [], [], []
        for l, lw in enumerate(arch.layers):
            xn = lw.ln_in(acts.resid[l])  # (T, d)
            v = torch.einsum("td,kde->kte", xn, lw.W_V)  # (KV, T, dh)
            if lw.b_V is not None:
                v = v + lw.b_V[:, None, :]
            v = v[[lw.kv_of(h) for h in range(lw.n_heads)]]  # (H, T, dh)
            vo_l = torch.einsum("hte,hed->htd", v, lw.W_O)  # (H, T, d)
            b_o = lw.b_O if lw.b_O is not None else torch.zeros(d, dtype=torch.float64)
            if lw.post_attn_norm is not None:
                out = torch.einsum("hts,hsd->td", acts.attn[l], vo_l) + b_o  # (T, d)
                pn = lw.post_attn_norm
                pscale.append(1.0 / pn.scale(out))
                vo_l = vo_l * pn.gain
                b_o = b_o * pn.gain
                if pn.bias is not None or pn.kind != "rms":
                    raise NotImplementedError("post-attention LayerNorm")
            else:
                pscale.append(torch.ones(T, dtype=torch.float64))
            vo.append(vo_l)
            bias.append(b_o)
        self.vo = torch.stack(vo)  # (L, H, T, d)
        self.pscale = torch.stack(pscale)  # (L, T)
        self.bias = torch.stack(bias)  # (L, d) attention-output bias (zeros if none)
        self.has_bias = any(lw.b_O is not None for lw in arch.layers)
        self.rot = LazyRotations(acts.rotary, arch.d_head)  # R_t per layer, built when a layer is first used
        # per-layer query/key norm scales (sigma: input norm, rho: q/k RMSNorm)
        self.sigma = torch.stack([lw.ln_in.scale(acts.resid[l]) for l, lw in enumerate(arch.layers)])  # (L, T)
        self._rho_q, self._rho_k = {}, {}

    # -- rotary, elementwise ----------------------------------------------------------------
    def rotation_factors(self, L: int, t: torch.Tensor):
        """(cos_x, sin_x), each (k, dh), with rot_t(v) = v * cos_x + rotate_half_x(v) * sin_x at the
        positions t (k,): cos/sin on the rotary dims, 1/0 on the others (None without rotary)."""
        if self.acts.rotary[L] is None:
            return None
        cos, sin = self.acts.rotary[L]
        dh, rd = self.arch.d_head, cos.shape[-1]
        ones = torch.ones(t.numel(), dh - rd, dtype=cos.dtype)
        return torch.cat((cos[t], ones), -1), torch.cat((sin[t], 0 * ones), -1)

    def rotate_half_x(self, L: int, v: torch.Tensor) -> torch.Tensor:
        """rotate_half on the rotary dims of v (..., dh), zero on the others."""
        rd = self.acts.rotary[L][0].shape[-1]
        half = rd // 2
        zeros = torch.zeros(*v.shape[:-1], v.shape[-1] - rd, dtype=v.dtype)
        return torch.cat((-v[..., half:rd], v[..., :half], zeros), -1)

    def rotate(self, L: int, v: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """rot_t(v) = v R_t (as ``self.rot[L][t]``) for v (..., k, dh) at positions t (k,), elementwise."""
        f = self.rotation_factors(L, t)
        if f is None:
            return v
        return v * f[0] + self.rotate_half_x(L, v) * f[1]

    # -- residual components ----------------------------------------------------------------
    def head_weights(self, L: int, t: int) -> torch.Tensor:
        """Coefficients of vo[l,h,s] in the residual entering layer L at token t: (L, H, T)."""
        return self.acts.attn[:L, :, t, :] * self.pscale[:L, t, None, None]

    def components(self, L: int, t: int):
        """All components of resid[L][t]: vectors (N, d) and labels (N, 4) [kind, layer, head, src]."""
        H = self.arch.n_heads
        w = self.head_weights(L, t)[:, :, : t + 1]  # (L, H, t+1)
        heads = (w[..., None] * self.vo[:L, :, : t + 1]).reshape(-1, self.emb.shape[1])
        vecs = [self.emb[t][None], heads, self.mlp[:L, t]]
        labels = [torch.tensor([[KIND_EMB, -1, -1, t]]), head_labels(L, H, t + 1),
                  torch.stack([torch.full((L,), KIND_MLP), torch.arange(L), torch.full((L,), -1),
                               torch.full((L,), t)], 1)]
        if self.has_bias:
            vecs.append(self.bias[:L])
            labels.append(torch.stack([torch.full((L,), KIND_BIAS), torch.arange(L),
                                       torch.full((L,), -1), torch.full((L,), t)], 1))
        return torch.cat(vecs), torch.cat(labels)

    # -- q/k folds ---------------------------------------------------------------------------
    def rho_q(self, L: int) -> torch.Tensor:
        """(T, H) per-token per-head q-norm scale (ones if the model has no q-norm)."""
        if L not in self._rho_q:
            self._rho_q[L] = self._rho(L, "q")
        return self._rho_q[L]

    def rho_k(self, L: int) -> torch.Tensor:
        """(T, KV)."""
        if L not in self._rho_k:
            self._rho_k[L] = self._rho(L, "k")
        return self._rho_k[L]

    def _rho(self, L: int, side: str) -> torch.Tensor:
        lw = self.arch.layers[L]
        norm = lw.q_norm if side == "q" else lw.k_norm
        n = lw.n_heads if side == "q" else lw.n_kv
        if norm is None:
            return torch.ones(self.T, n, dtype=torch.float64)
        W, b = (lw.W_Q, lw.b_Q) if side == "q" else (lw.W_K, lw.b_K)
        raw = torch.einsum("td,hde->the", lw.ln_in(self.acts.resid[L]), W)
        if b is not None:
            raw = raw + b
        return norm.scale(raw)


def head_labels(L: int, H: int, S: int) -> torch.Tensor:
    """Labels [KIND_HEAD, layer, head, source] of the head components of layers < L, sources < S,
    in (layer, head, source) order: (L*H*S, 4)."""
    l, h, s = torch.meshgrid(torch.arange(L), torch.arange(H), torch.arange(S), indexing="ij")
    return torch.stack([torch.full_like(l, KIND_HEAD), l, h, s], -1).reshape(-1, 4)

