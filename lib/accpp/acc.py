"""ACC, the predecessor (Franco & Crovella, "Pinpointing Attention-Causal Communication in Language
Models", NeurIPS 2025; papers/accpp/citation.bib), as the baseline for circuit size.

    circuit = acc_trace(tracer, ids, correct, wrong)                      # the authors' ACC (default)
    circuit = acc_trace(tracer, ids, correct, wrong, config=ACCConfig.legacy())   # this project's first baseline

Both use the same seeds and the same residual decomposition as ACC++ (:mod:`accpp.trace`), trace a
firing (layer L, head a, destination d, source s) when A_ds >= 1/(d+1) (the uniform weight), recurse
through attention heads only, and keep, on each side, the upstream contributors that make up 70% of
a linear score (no IG, no greedy). They differ in which score and which singular directions.

The ACC definition, as the authors' code implements it (default, ``ACCConfig()``):

1. Comparative score. What the softmax sees is the score of s against the other keys, so ACC
   splits S_ds - mean_{s' != s} S_ds' (s' over the keys visible from d) rather than S_ds. Per
   singular direction k of the head's Omega = W_Q W_K^T:
   c_k = scale * sigma_k * alpha_k * (beta_{s,k} - mean_{s' != s} beta_{s',k}), summing to that score.
2. Singular-direction selection. If sum_k c_k <= 0 the firing is not expanded. Otherwise the
   directions are sorted by c_k (descending) and the shortest prefix whose cumulative sum reaches
   the total (fraction ``sv_fraction`` = 1.0, compared after rounding to 5 decimals as the authors do)
   is kept: a sparse set K of directions that carries the whole comparative score.
3. Contributors, restricted to K. Query side: component c at d contributes
   scale * sum_{k in K} sigma_k alpha_{c,k} (beta_{s,k} - mean_{s'} beta_{s',k}). Key side: component c
   taken at s minus its mean over the other visible keys (the same component label at every key
   position; an upstream head's output is split per upstream source j') contributes
   scale * sum_{k in K} sigma_k alpha_k (beta_{c,s,k} - mean_{s'} beta_{c,s',k}).
4. The 70% rule as the authors write it: sort the contributions (descending), take the value at the
   first place where the cumulative sum exceeds 0.7 of their total, keep every contributor at or
   above it (ties included). Key-side contributors that are upstream-head outputs from a source
   j' > s are counted in the total but not added (they cannot be a firing at s), as in the authors' code.

Where ours still departs from the authors' ACC (kept on purpose, because the ACC++ tracer here
does the same and the baseline must share it):
- RoPE models: the authors decompose W_Q R_{d-s} W_K^T separately for every offset d - s; here,
  as in the ACC++ tracer, the SVD is of the unrotated Omega and the rotations are folded into the
  token vectors (one basis per head). The rank-1 terms, so the set K, can differ.
- Biases: the authors augment x with a constant 1 and decompose [W_Q W_K^T, W_Q b_K] (and the
  transposed form for the key side); here the biases are the ``offset`` component of the
  decomposition. On the key side of the comparative score the key bias cancels in both.
- Sliding-window layers: s' runs over the keys visible from d (the authors' models had none).
- The traced-firing threshold is 1/(d+1) as the authors', also for sliding-window layers.

``ACCConfig.legacy()`` is this project's first baseline, kept for comparison: the raw score S_ds
(not comparative), all singular directions (no selection), the key side only at s, and the 70% cut
taken as the shortest prefix reaching 0.7 of the total (no tie rule). It gives much larger circuits.

``max_firings`` caps the number of expanded firings; ``circuit.meta["truncated"]`` says whether the
cap stopped a trace (then the circuit is incomplete and the size ratio is a lower bound).
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass

import networkx as nx
import torch

from accpp.decompose import KIND_BIAS, KIND_EMB, KIND_HEAD, KIND_MLP, KIND_NAMES, KIND_OFFSET, head_labels, visible
from accpp.signals import FiringSolver
from accpp.trace import Circuit, Tracer, answer_direction, node_id, seeds

__all__ = ["ACCConfig", "acc_trace", "KEEP_FRACTION", "select_singular", "top_share", "measure_smaller_than_acc"]

KEEP_FRACTION = 0.7


@dataclass(frozen=True)
class ACCConfig:
    """How the ACC baseline scores a firing; the default is the authors' ACC (module docstring)."""

    comparative: bool = True  # split S_ds - mean_{s' != s} S_ds' (authors) rather than S_ds
    select_singular: bool = True  # keep the sparse set of singular directions first (authors)
    ties: bool = True  # 70% cut: keep every contributor >= the value at the cut (authors)
    keep_fraction: float = KEEP_FRACTION
    sv_fraction: float = 1.0
    max_firings: int | None = 2000

    def __post_init__(self):
        if not 0 < self.keep_fraction <= 1 or not 0 < self.sv_fraction <= 1:
            raise ValueError(f"keep_fraction and sv_fraction must be in (0, 1]; got {self.keep_fraction}, "
                             f"{self.sv_fraction}")
        if self.max_firings is not None and self.max_firings < 1:
            raise ValueError(f"max_firings must be None or >= 1, got {self.max_firings}")

    @classmethod
    def legacy(cls, max_firings: int | None = 2000) -> "ACCConfig":
        """This project's first baseline: raw S_ds, all singular directions, shortest 70% prefix."""
        return cls(comparative=False, select_singular=False, ties=False, max_firings=max_firings)


def top_share(contrib: torch.Tensor, total: float, frac: float = KEEP_FRACTION, ties: bool = True) -> torch.Tensor:
    """Indices of the contributors kept by the 70% rule (nothing when ``total`` <= 0).

    ``ties=True`` (the authors'): the cut value is the sorted contribution at the first place where
    the cumulative sum exceeds ``frac * total``; every contributor >= that value is kept.
    ``ties=False`` (legacy): the shortest prefix of the sorted contributions whose sum reaches it.
    """
    if total <= 0 or contrib.numel() == 0:
        return torch.zeros(0, dtype=torch.long)
    vals, order = torch.sort(contrib, descending=True)
    cum = torch.cumsum(vals, 0)
    target = torch.tensor(frac * total, dtype=cum.dtype)
    if not ties:
        k = int(torch.searchsorted(cum, target)) + 1
        return order[: min(k, order.numel())]
    over = torch.nonzero(cum > target)
    cutoff = vals[int(over[0, 0])] if over.numel() else vals[-1]
    return torch.nonzero(contrib >= cutoff)[:, 0]


def select_singular(c: torch.Tensor, frac: float = 1.0) -> torch.Tensor:
    """The authors' singular-direction selection: sort the per-direction contributions ``c``
    (descending) and keep the shortest prefix whose cumulative sum, divided by the total and rounded
    to 5 decimals, reaches ``frac``. Raises ValueError if the total is not positive."""
    total = float(c.sum())
    if not total > 0:
        raise ValueError(f"the per-direction contributions sum to {total}: nothing to select")
    vals, order = torch.sort(c, descending=True)
    frac_cum = torch.round(torch.cumsum(vals, 0) / total, decimals=5)
    hit = torch.nonzero(frac_cum >= frac)
    k = int(hit[0, 0]) + 1 if hit.numel() else c.numel()
    return order[:k]


def _union_labels(L: int, H: int, d: int, labels_like: torch.Tensor, offset_head: int) -> torch.Tensor:
    """Labels of every component that can sit at a token t <= d in the residual entering layer L."""
    parts = [torch.tensor([[KIND_EMB, -1, -1, -1]]), head_labels(L, H, d + 1),
             torch.stack([torch.full((L,), KIND_MLP), torch.arange(L), torch.full((L,), -1), torch.full((L,), -1)], 1),
             torch.stack([torch.full((L,), KIND_BIAS), torch.arange(L), torch.full((L,), -1), torch.full((L,), -1)], 1),
             torch.tensor([[KIND_OFFSET, L, offset_head, -1]])]
    return torch.cat(parts).to(labels_like.dtype)


def _union_index(labels: torch.Tensor, L: int, H: int, d: int) -> torch.Tensor:
    """Row of each label (N, 4) in :func:`_union_labels` (L, H, d)."""
    kind, layer, head, src = labels.unbind(-1)
    base = 1 + L * H * (d + 1)
    idx = torch.zeros(labels.shape[0], dtype=torch.long)
    idx = torch.where(kind == KIND_HEAD, 1 + (layer * H + head) * (d + 1) + src, idx)
    idx = torch.where(kind == KIND_MLP, base + layer, idx)
    idx = torch.where(kind == KIND_BIAS, base + L + layer, idx)
    idx = torch.where(kind == KIND_OFFSET, torch.full_like(idx, base + 2 * L), idx)
    return idx


def acc_trace(tracer: Tracer, input_ids, correct, wrong, position: int = -1,
              max_firings: int | None = None, config: ACCConfig | None = None) -> Circuit:
    """ACC circuit of ``mean logit(correct) - mean logit(wrong)`` at ``position`` (module docstring).

    ``max_firings`` (if given) overrides ``config.max_firings``. ``meta`` holds the config, whether the
    cap truncated the trace, and per traced firing nothing more than the graph's node attributes.
    """
    cfg = config or ACCConfig()
    cap = cfg.max_firings if max_firings is None else max_firings
    t0 = time.perf_counter()
    dec = tracer.decompose(input_ids)
    solver, arch = FiringSolver(dec, tracer.svd), tracer.arch
    pos = position % dec.T
    L = arch.n_layers
    vecs, labels = dec.components(L, pos)
    direction, logit_diff = answer_direction(arch, dec, correct, wrong, pos)
    proj = vecs @ direction
    g = nx.MultiDiGraph()
    out = f"LOGITS@{pos}"
    g.add_node(out, kind="logits", layer=L, head=-1, dest=pos, src=-1)
    queue, seen = deque(), set()

    def add(kind, layer, head, token, src):
        nid = node_id(kind, layer, head, token, src)
        if nid not in g:
            g.add_node(nid, kind=KIND_NAMES[kind], layer=layer, head=head, dest=token, src=src, traced=False)
        if kind == KIND_HEAD and (layer, head, token, src) not in seen and token > 0 and layer > 0:
            if float(dec.acts.attn[layer, head, token, src]) >= 1.0 / (token + 1):
                seen.add((layer, head, token, src))
                queue.append((layer, head, token, src))
        return nid

    for i in seeds(proj).tolist():
        kind, layer, head, src = labels[i].tolist()
        g.add_edge(add(kind, layer, head, pos, src), out, side="seed", token=pos, sing=[], rank=0)
    n = 0
    while queue and (cap is None or n < cap):
        L_, a, d, s = queue.popleft()
        n += 1
        fid = node_id(KIND_HEAD, L_, a, d, s)
        g.nodes[fid]["traced"] = True
        for side, tok, contrib, lab, K in _firing_contributors(solver, arch, cfg, L_, a, d, s):
            g.nodes[fid][f"sv_{side}"] = K
            total = float(contrib.sum())  # the (comparative) score on K; legacy: S_ds itself
            for c in top_share(contrib, total, cfg.keep_fraction, cfg.ties).tolist():
                kind, layer, head, src = lab[c].tolist()
                if kind == KIND_HEAD and side == "s" and src > s:
                    continue  # counted in the total, not a firing at s (authors)
                uid = add(kind, L_ if kind == KIND_OFFSET else layer, a if kind == KIND_OFFSET else head, tok, src)
                g.add_edge(uid, fid, side=side, token=tok, sing=K, rank=len(K), share=float(contrib[c]) / total)
    meta = dict(method="ACC", config=asdict(cfg), max_firings=cap, truncated=bool(queue), queued_left=len(queue))
    return Circuit(g, tracer._tokens(dec.acts.input_ids), logit_diff, time.perf_counter() - t0, n, meta)


def _firing_contributors(solver: FiringSolver, arch, cfg: ACCConfig, L: int, a: int, d: int, s: int):
    """[(side, token, contributions (N,), labels (N, 4), kept singular indices)] for one firing;
    empty when the (comparative) score is not positive.

    Every contribution is a component's coefficients on the singular directions times one weight
    vector, so it is computed as matrix-vector products (:func:`_coeff_dot`) without forming the
    per-component coefficient matrices; beta is the sum of the authors' key-side components
    (equal to the key coefficients' sums to float rounding)."""
    lw = arch.layers[L]
    J = visible(solver.dec.T, d, lw.sliding_window)
    n = len(J)
    s_idx = int(s - J[0])
    sig = solver.svd.S[L, a]
    alpha = _coeff_sum(solver, L, a, d, "q")
    beta = solver._authors_beta(L, a, d)  # (n, dh)
    if cfg.comparative:
        if n < 2:
            return []
        bref = beta[s_idx] - (beta.sum(0) - beta[s_idx]) / (n - 1)
    else:
        bref = beta[s_idx]
    c_k = lw.scale * sig * alpha * bref  # per singular direction, sums to the (comparative) score
    dh = sig.numel()
    mask = torch.ones(dh, dtype=c_k.dtype)
    K = list(range(dh))
    if cfg.select_singular:
        if not float(c_k.sum()) > 0:
            return []
        sel = select_singular(c_k, cfg.sv_fraction)
        mask = torch.zeros(dh, dtype=c_k.dtype)
        mask[sel] = 1
        K = sorted(sel.tolist())
    elif cfg.comparative and not float(c_k.sum()) > 0:
        return []
    w_q = lw.scale * sig * bref * mask  # query side: component coefficients . w_q
    contrib_q, lab_q = _coeff_dot(solver, L, a, d, "q", w_q)
    w_k = lw.scale * sig * alpha * mask  # key side
    if cfg.comparative:
        lab_u = _union_labels(L, lw.n_heads, d, lab_q, a)
        per_j = _key_dots_union(solver, L, a, d, J, w_k)  # (n, N_union)
        at_s = per_j[s_idx]
        contrib_k = at_s - (per_j.sum(0) - at_s) / (n - 1)
        lab_k = lab_u
    else:
        contrib_k, lab_k = _coeff_dot(solver, L, a, s, "k", w_k)
    return [("d", d, contrib_q, lab_q, K), ("s", s, contrib_k, lab_k, K)]


def _fold(solver: FiringSolver, L: int, a: int, t: int, side: str):
    """(projections, M (dh, dh), 1 / (sigma_t rho_t), rho_t, head weights (L, H, t+1) / (sigma_t rho_t)) of
    :meth:`FiringSolver.token_coeffs` at token t: its coefficient rows are (projection @ M) * weight."""
    dec, lw = solver.dec, solver.dec.arch.layers[L]
    kv = lw.kv_of(a)
    P = solver._projections(L, side, a if side == "q" else kv)
    rho = dec.rho_q(L)[t, a] if side == "q" else dec.rho_k(L)[t, kv]
    inv = 1.0 / (dec.sigma[L, t] * rho)
    M = solver.svd.Ut[L, a] if side == "q" else solver.svd.Vt[L, a]
    if dec.rot[L] is not None:
        M = dec.rot[L][t] @ M
    qk_norm = lw.q_norm if side == "q" else lw.k_norm
    if qk_norm is not None:
        M = qk_norm.gain[:, None] * M
    return P, M, inv, rho, dec.head_weights(L, t)[:, :, : t + 1] * inv


def _coeff_sum(solver: FiringSolver, L: int, a: int, t: int, side: str) -> torch.Tensor:
    """``token_coeffs(L, a, t, side)[0].sum(0)`` (alpha or beta_t, (dh,)): the components summed first."""
    P, M, inv, rho, w = _fold(solver, L, a, t, side)
    z = torch.einsum("lhs,lhse->e", w, P["heads"][:, :, : t + 1]) + (P["emb"][t] + P["mlp"][:, t].sum(0)) * inv
    if P["bias"] is not None:
        z = z + P["bias"].sum(0) * inv
    if P["offset"] is not None:
        z = z + P["offset"] / rho
    return z @ M


def _coeff_dot(solver: FiringSolver, L: int, a: int, t: int, side: str, wv: torch.Tensor):
    """``C @ wv`` and the labels of ``token_coeffs(L, a, t, side)`` (same row layout), by matrix-vector
    products: row c of C is (projection_c @ M) * weight_c, so C @ wv = (projection_c @ (M @ wv)) * weight_c."""
    P, M, inv, rho, w = _fold(solver, L, a, t, side)
    m = M @ wv  # (dh,)
    lw = solver.dec.arch.layers[L]
    parts = [(P["emb"][t] @ m)[None] * inv, ((P["heads"][:, :, : t + 1] @ m) * w).reshape(-1), (P["mlp"][:, t] @ m) * inv]
    labels = [torch.tensor([[KIND_EMB, -1, -1, -1]]), head_labels(L, lw.n_heads, t + 1),
              torch.stack([torch.full((L,), KIND_MLP), torch.arange(L), torch.full((L,), -1), torch.full((L,), -1)], 1)]
    if P["bias"] is not None:
        parts.append((P["bias"] @ m) * inv)
        labels.append(torch.stack([torch.full((L,), KIND_BIAS), torch.arange(L), torch.full((L,), -1),
                                   torch.full((L,), -1)], 1))
    if P["offset"] is not None:
        parts.append((P["offset"] @ m)[None] / rho)
        labels.append(torch.tensor([[KIND_OFFSET, L, a, -1]]))
    return torch.cat(parts), torch.cat(labels)


def _key_dots_union(solver: FiringSolver, L: int, a: int, d: int, J: torch.Tensor, wv: torch.Tensor) -> torch.Tensor:
    """(n, N_union): row i is ``key_coeffs(L, a, J[i])`` @ ``wv`` placed in the layout of
    :func:`_union_labels` (L, H, d) (zeros for the components absent at J[i]), for every visible key at
    once: one (L H (d+1), dh) x (dh, n) product for all heads and keys."""
    dec, lw = solver.dec, solver.dec.arch.layers[L]
    kv, H, n = lw.kv_of(a), lw.n_heads, J.numel()
    P = solver._projections(L, "k", kv)
    rho = dec.rho_k(L)[J, kv]  # (n,)
    inv = 1.0 / (dec.sigma[L, J] * rho)  # (n,)
    v = solver.svd.Vt[L, a] @ wv  # (dh,)
    m = torch.einsum("jef,f->je", dec.rot[L][J], v) if dec.rot[L] is not None else v.expand(n, -1)  # (n, dh)
    if lw.k_norm is not None:
        m = m * lw.k_norm.gain
    nd = d + 1
    Y = P["heads"][:, :, :nd] @ m.T  # (L, H, nd, n): projection of every upstream head output at source j'
    w = dec.acts.attn[:L, :, J, :nd] * dec.pscale[:L, J][:, None, :, None]  # (L, H, n, nd) head weights at each key
    causal = (torch.arange(nd)[None, :] <= J[:, None]).to(w.dtype)  # source j' <= key position j
    heads = (w * causal * inv[None, None, :, None]) * Y.transpose(2, 3)  # (L, H, n, nd)
    out = torch.zeros(n, 1 + L * H * nd + 2 * L + 1, dtype=wv.dtype)
    out[:, 0] = (P["emb"][J] * m).sum(-1) * inv
    out[:, 1: 1 + L * H * nd] = heads.permute(2, 0, 1, 3).reshape(n, -1)
    base = 1 + L * H * nd
    out[:, base: base + L] = torch.einsum("ljd,jd->jl", P["mlp"][:, J], m) * inv[:, None]
    if P["bias"] is not None:
        out[:, base + L: base + 2 * L] = (m @ P["bias"].T) * inv[:, None]
    if P["offset"] is not None:
        out[:, base + 2 * L] = (m @ P["offset"]) / rho
    return out


def measure_smaller_than_acc(acc_table, accuracy: float, config: dict | None = None):
    """Claim accpp/smaller-than-acc: geometric mean ACC / ACC++ node ratio over prompts traced by
    both, with its bootstrap interval over prompts (``compendium.stats.geometric_mean_ci``).

    ``acc_table``: one row per prompt with ``accpp_nodes``, ``acc_nodes``, ``legacy_nodes`` (the raw-score
    baseline, :meth:`ACCConfig.legacy`), ``acc_truncated`` and ``legacy_truncated``; the ratio columns
    ``ratio`` and ``legacy_ratio`` are added here (to a copy) when absent.
    """
    from compendium.claims import Measurement

    need = ("accpp_nodes", "acc_nodes", "legacy_nodes", "acc_truncated", "legacy_truncated")
    missing = [c for c in need if c not in acc_table]
    if missing:
        raise ValueError(f"measure_smaller_than_acc: the table lacks column(s) {missing}")
    if len(acc_table) == 0:
        raise ValueError("measure_smaller_than_acc: no compared prompts")
    if (acc_table["accpp_nodes"] <= 0).any():
        raise ValueError("measure_smaller_than_acc: an ACC++ circuit with no nodes (ratio undefined)")
    t = acc_table.copy()
    t["ratio"] = t["acc_nodes"] / t["accpp_nodes"]
    t["legacy_ratio"] = t["legacy_nodes"] / t["accpp_nodes"]
    from compendium.stats import geometric_mean, geometric_mean_ci

    ratio, legacy = geometric_mean(t["ratio"]), geometric_mean(t["legacy_ratio"])
    lo, hi = geometric_mean_ci(t["ratio"])
    model = (config or {}).get("model", "the model")
    return Measurement(
        claim="accpp/smaller-than-acc",
        values=dict(size_ratio=ratio, size_ratio_ci_low=lo, size_ratio_ci_high=hi, ioi_accuracy=float(accuracy),
                    n_compared=len(t)),
        evidence=dict(ratios=t["ratio"].round(3).tolist(), arithmetic_mean_ratio=float(t["ratio"].mean()),
                      legacy_ratio=legacy,
                      any_truncated=bool(t["acc_truncated"].any()), legacy_any_truncated=bool(t["legacy_truncated"].any()),
                      direction="below" if hi < 2 else "above" if lo > 10 else "within" if 2 <= lo and hi <= 10
                      else "straddles"),
        tables={"01_ioi_acc": t}, config=dict(config or {}) | dict(acc="authors' ACC (ACCConfig())"),
        note=f"geometric mean ACC/ACC++ node ratio over {len(t)} IOI prompts of {model} (95% interval "
             f"{lo:.2f}-{hi:.2f}); the project's first "
             f"baseline (raw score, all singular directions) gives {legacy:.1f}")
