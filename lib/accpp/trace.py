"""Whole-prompt ACC++ circuit: seeds on the logit difference, recursion through heads.

    tracer = Tracer(model, name="smollm2-135m")       # SVDs cached on disk per model
    circuit = tracer.trace(input_ids, correct_id, wrong_id)
    circuit.graph                                      # networkx.MultiDiGraph

Seeds (notes, "Whole-prompt circuit"): the final residual at the answer position is split into
components, each projected on the logit-difference direction (after the final norm's scale and
gain); sorted descending, the seeds are the components at or above the value where the
cumulative sum first exceeds the total, that cutoff capped at total/2. If the total is <= 0,
nothing is traced.

Recursion runs through attention heads only (MLPs, biases, embedding, offsets are leaves):
each signal edge into a firing that comes from an upstream head's output at (token t, source
s') leads to the firing (l', h', t, s') when A >= tau there. Not expanded (kept as nodes):
firings of layer 0 (their inputs are embeddings only), firings whose destination or source is
position 0 (the attention sink / first token), and already traced firings (memoised).
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass, field

import networkx as nx
import torch

from accpp import arch as arch_mod
from accpp.decompose import KIND_BIAS, KIND_EMB, KIND_HEAD, KIND_MLP, KIND_OFFSET, Decomposition, collect, head_svds
from accpp.signals import Firing, FiringSolver, tau_for
from accpp.decompose import visible

__all__ = ["TraceConfig", "Circuit", "Tracer", "answer_direction", "node_id", "seeds"]


@dataclass(frozen=True)
class TraceConfig:
    expand_layer0: bool = False
    expand_position0: bool = False
    max_firings: int | None = None  # safety cap on the number of decomposed firings


def node_id(kind: int, layer: int, head: int, token: int, src: int) -> str:
    """Stable string ids: A{l}.{h}@{d}<{s} (head firing), M{l}@{t}, E@{t}, B{l}@{t}, O{l}.{h}@{t}."""
    if kind == KIND_HEAD:
        return f"A{layer}.{head}@{token}<{src}"
    if kind == KIND_MLP:
        return f"M{layer}@{token}"
    if kind == KIND_EMB:
        return f"E@{token}"
    if kind == KIND_BIAS:
        return f"B{layer}@{token}"
    if kind == KIND_OFFSET:
        return f"O{layer}.{head}@{token}"
    raise ValueError(kind)


_KIND = {KIND_HEAD: "head", KIND_MLP: "mlp", KIND_EMB: "emb", KIND_BIAS: "bias", KIND_OFFSET: "offset"}


def seeds(proj: torch.Tensor) -> torch.Tensor:
    """Indices of seed components given their projections on the logit-difference direction."""
    total = float(proj.sum())
    if total <= 0:
        return torch.zeros(0, dtype=torch.long)
    vals, order = torch.sort(proj, descending=True)
    cum = torch.cumsum(vals, 0)
    over = torch.nonzero(cum > total)
    cutoff = float(vals[int(over[0, 0])]) if over.numel() else float(vals[-1])
    cutoff = min(cutoff, total / 2)
    return order[vals >= cutoff]


def _as_ids(tokens, what: str) -> list[int]:
    ids = [int(tokens)] if isinstance(tokens, int) or (torch.is_tensor(tokens) and tokens.ndim == 0) else [int(t) for t in tokens]
    if not ids:
        raise ValueError(f"{what}: an empty set of answer tokens")
    return ids


def answer_direction(arch, dec: Decomposition, correct, wrong, pos: int) -> tuple[torch.Tensor, float]:
    """The seed direction in the final residual at ``pos``, and the metric it reads out.

    ``correct`` and ``wrong`` are token ids or sets of token ids. The metric is the mean logit of the
    correct set minus the mean logit of the wrong set (a plain logit difference for single tokens; for
    Greater-Than, years above the start year against the others). It is linear in the unembedding, so
    it pulls back through the final norm to one direction, as for a single logit difference.
    """
    c_ids, w_ids = _as_ids(correct, "correct"), _as_ids(wrong, "wrong")
    if set(c_ids) & set(w_ids):
        raise ValueError(f"tokens in both the correct and the wrong set: {sorted(set(c_ids) & set(w_ids))}")
    delta = arch.unembed(c_ids).mean(0) - arch.unembed(w_ids).mean(0)
    L = arch.n_layers
    direction = arch.ln_final.fold(delta[:, None])[:, 0] / arch.ln_final.scale(dec.acts.resid[L, pos])
    logits = dec.acts.logits
    metric = float(logits[c_ids].mean() - logits[w_ids].mean())
    return direction, metric


def _meta_ids(tokens):
    """An int for a single token id, a list for a set of them (as given)."""
    ids = _as_ids(tokens, "answer")
    scalar = isinstance(tokens, int) or (torch.is_tensor(tokens) and tokens.ndim == 0)
    return ids[0] if scalar else ids


@dataclass
class Circuit:
    graph: nx.MultiDiGraph
    tokens: list[str]
    logit_diff: float
    seconds: float
    n_firings: int
    meta: dict = field(default_factory=dict)

    @property
    def heads(self) -> set[tuple[int, int]]:
        return {(d["layer"], d["head"]) for _, d in self.graph.nodes(data=True) if d["kind"] == "head"}

    def to_json(self) -> dict:
        from accpp.graph import graph_to_json

        return dict(graph=graph_to_json(self.graph), tokens=self.tokens, logit_diff=self.logit_diff,
                    seconds=self.seconds, n_firings=self.n_firings, meta=self.meta)

    @classmethod
    def from_json(cls, data: dict) -> "Circuit":
        from accpp.graph import graph_from_json

        return cls(graph_from_json(data["graph"]), data["tokens"], data["logit_diff"], data["seconds"],
                   data["n_firings"], data.get("meta", {}))


class Tracer:
    """Holds a model, its architecture adapter, nnsight wrapper and per-head SVDs."""

    def __init__(self, model, tokenizer=None, name: str | None = None, config: TraceConfig = TraceConfig()):
        from nnsight import NNsight

        self.model, self.tokenizer, self.name, self.config = model, tokenizer, name, config
        self.arch = arch_mod.from_model(model)
        self.nn = NNsight(model)
        self._svd = None

    @property
    def svd(self):
        if self._svd is None:
            self._svd = head_svds(self.arch, cache_name=self.name)
        return self._svd

    def decompose(self, input_ids: torch.Tensor) -> Decomposition:
        acts = collect(self.model, self.arch, torch.as_tensor(input_ids), self.nn)
        return Decomposition(self.arch, acts)

    def trace(self, input_ids, correct, wrong, position: int = -1) -> Circuit:
        """Trace the circuit of the metric ``mean logit(correct) - mean logit(wrong)`` at ``position``.

        ``correct`` / ``wrong``: a token id each (IOI: the indirect object vs the subject) or sets of
        token ids (Greater-Than: the digits that make a later year vs the others).
        """
        t0 = time.perf_counter()
        dec = self.decompose(input_ids)
        solver = FiringSolver(dec, self.svd)
        cfg, arch = self.config, self.arch
        T = dec.T
        pos = position % T
        # seeds on the logit-difference direction
        L = arch.n_layers
        vecs, labels = dec.components(L, pos)
        direction, logit_diff = answer_direction(arch, dec, correct, wrong, pos)
        proj = vecs @ direction
        g = nx.MultiDiGraph()
        tokens = self._tokens(dec.acts.input_ids)
        out_node = f"LOGITS@{pos}"
        g.add_node(out_node, kind="logits", layer=L, head=-1, dest=pos, src=-1)
        queue: deque[Firing] = deque()
        seen: set[tuple] = set()

        def add_component(kind, layer, head, token, src):
            nid = node_id(kind, layer, head, token, src)
            if nid not in g:
                A = float(dec.acts.attn[layer, head, token, src]) if kind == KIND_HEAD else None
                g.add_node(nid, kind=_KIND[kind], layer=layer, head=head, dest=token, src=src, A=A, traced=False)
            if kind == KIND_HEAD:
                key = (layer, head, token, src)
                if key not in seen and self._expandable(dec, *key):
                    seen.add(key)
                    queue.append(Firing(*key))
            return nid

        for i in seeds(proj).tolist():
            kind, layer, head, src = labels[i].tolist()
            nid = add_component(kind, layer, head, pos, src)
            g.add_edge(nid, out_node, side="seed", token=pos, sing=[], rank=0, attribution=float(proj[i]),
                       drop=float(proj[i]))
        n = 0
        while queue and (cfg.max_firings is None or n < cfg.max_firings):
            f = queue.popleft()
            res = solver.solve(f)
            n += 1
            fid = node_id(KIND_HEAD, f.layer, f.head, f.dest, f.src)
            g.nodes[fid].update(traced=True, tau=res.tau, A_after_d=res.A_after["d"], A_after_s=res.A_after["s"])
            for e in res.edges:
                if e.kind == KIND_OFFSET:
                    uid = add_component(KIND_OFFSET, f.layer, f.head, e.token, -1)
                else:
                    uid = add_component(e.kind, e.layer, e.head, e.token, e.src)
                g.add_edge(uid, fid, side=e.side, token=e.token, sing=e.sing, rank=e.rank,
                           attribution=e.attribution, drop=e.drop)
        meta = dict(model=self.name, model_type=arch.model_type, correct=_meta_ids(correct), wrong=_meta_ids(wrong),
                    position=pos, config=asdict(cfg), truncated=bool(queue))
        return Circuit(g, tokens, logit_diff, time.perf_counter() - t0, n, meta)

    def _expandable(self, dec: Decomposition, layer: int, head: int, dest: int, src: int) -> bool:
        cfg = self.config
        if layer == 0 and not cfg.expand_layer0:
            return False
        if (dest == 0 or src == 0) and not cfg.expand_position0:
            return False
        if dest == 0:
            return False
        n = len(visible(dec.T, dest, self.arch.layers[layer].sliding_window))
        return float(dec.acts.attn[layer, head, dest, src]) >= tau_for(n)

    def _tokens(self, ids) -> list[str]:
        if self.tokenizer is None:
            return [str(int(i)) for i in ids]
        return [self.tokenizer.decode([int(i)]) for i in ids]
