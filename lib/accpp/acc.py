"""ACC, the predecessor (Franco & Crovella 2024), as the baseline for circuit size.

Same seeds and the same decomposition as ACC++, but: a firing is traced when A_ds >= 1/(d+1)
(the uniform weight); its linear pre-softmax score S_ds is split into per-component
contributions on the query side (component at d, key held at its full value) and on the key
side (component at s); on each side the largest contributors are kept until they make up 70% of
S_ds (nothing is kept when S_ds <= 0). No IG, no greedy, no singular-direction selection.
"""
from __future__ import annotations

import time
from collections import deque

import networkx as nx
import torch

from accpp.decompose import KIND_HEAD, KIND_OFFSET, visible
from accpp.signals import FiringSolver
from accpp.trace import Circuit, Tracer, _KIND, answer_direction, node_id, seeds

__all__ = ["acc_trace", "KEEP_FRACTION"]

KEEP_FRACTION = 0.7


def _top_share(contrib: torch.Tensor, total: float, frac: float = KEEP_FRACTION) -> torch.Tensor:
    if total <= 0:
        return torch.zeros(0, dtype=torch.long)
    vals, order = torch.sort(contrib, descending=True)
    cum = torch.cumsum(vals, 0)
    k = int(torch.searchsorted(cum, torch.tensor(frac * total, dtype=cum.dtype))) + 1
    return order[: min(k, order.numel())]


def acc_trace(tracer: Tracer, input_ids, correct, wrong, position: int = -1,
              max_firings: int | None = 2000) -> Circuit:
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
            g.add_node(nid, kind=_KIND[kind], layer=layer, head=head, dest=token, src=src, traced=False)
        if kind == KIND_HEAD and (layer, head, token, src) not in seen and token > 0 and layer > 0:
            if float(dec.acts.attn[layer, head, token, src]) >= 1.0 / (token + 1):
                seen.add((layer, head, token, src))
                queue.append((layer, head, token, src))
        return nid

    for i in seeds(proj).tolist():
        kind, layer, head, src = labels[i].tolist()
        g.add_edge(add(kind, layer, head, pos, src), out, side="seed", token=pos, sing=[], rank=0)
    n = 0
    while queue and (max_firings is None or n < max_firings):
        L_, a, d, s = queue.popleft()
        n += 1
        lw = arch.layers[L_]
        J = visible(dec.T, d, lw.sliding_window)
        S, _, alpha, beta = solver.scores(L_, a, d)
        s_idx = int(s - J[0])
        sig = solver.svd.S[L_, a]
        total = float(S[s_idx])
        fid = node_id(KIND_HEAD, L_, a, d, s)
        g.nodes[fid]["traced"] = True
        Cq, lab_q = solver.token_coeffs(L_, a, d, "q")
        Ck, lab_k = solver.key_coeffs(L_, a, s)
        for side, contrib, lab, tok in (("d", lw.scale * (Cq * sig * beta[s_idx]).sum(-1), lab_q, d),
                                        ("s", lw.scale * (Ck * sig * alpha).sum(-1), lab_k, s)):
            for c in _top_share(contrib, total).tolist():
                kind, layer, head, src = lab[c].tolist()
                uid = add(kind, L_ if kind == KIND_OFFSET else layer, a if kind == KIND_OFFSET else head, tok, src)
                g.add_edge(uid, fid, side=side, token=tok, sing=[], rank=0, share=float(contrib[c]) / total)
    return Circuit(g, tracer._tokens(dec.acts.input_ids), logit_diff, time.perf_counter() - t0, n,
                   dict(method="ACC", truncated=bool(queue)))
