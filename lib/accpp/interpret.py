"""Automated interpretation of ACC++ signals, scaled down: the signals, their activations, top contexts.

    signals = select_signals(tracer, circuits, n=32)                 # distinct signals of traced circuits
    found = top_contexts(model, tok, signals, CorpusSpec(n_windows=256))   # streamed, cached under .cache/

The describers and the judge that read these contexts, and the claim's measurement, are
:mod:`accpp.interpret_judge`.

The paper (Franco, Tassis, Rohr, Crovella, arXiv 2602.13483) describes each signal from its top
activating contexts with a 70B instruction model and validates the description with a 27B judge.
Offline, only small local models exist, so this module and :mod:`accpp.interpret_judge` are a
small-scale stand-in, with the same structure and our own choices at every step (all documented
in the two docstrings):

Signal. A traced signal edge is (upstream component, downstream head, side, singular indices K):
the component's part on the singular directions K of the downstream head's bilinear form
``Omega = W_Q^eff W_K^eff^T = U diag(S) V^T`` (:mod:`accpp.decompose`; query side: the left
directions u_k, key side: the right directions v_k; orthonormal columns in the residual space of
``x~ = centred(x) / sigma``, the downstream layer's input-norm scale). Edges that name the same
(component without position, downstream head, side, set of K) over prompts and positions are one
signal; its weight is the sum of their edge weights. Bias and bias-offset components are skipped
(they do not depend on the text).

Activation. On any text, the signal's activation at token t is

    a_t = (centred(c_t) / sigma_t) . w,

c_t the component's output at t (an attention head's whole output there, i.e. summed over its
sources, as the tracer's per-source components sum to it; an MLP's output; the embedding),
sigma_t the downstream layer's input-norm scale at t, and w the signal's direction: the unit
vector of the traced component's projection on span{u_k : k in K} (resp. v_k) at the traced
prompt, from the edge of largest weight. For a rank-1 signal w = +-u_k, with the sign the traced
signal had; for rank > 1, the direction inside the subspace that the traced signal took. The
rotary embedding is not applied (it acts after W_Q / W_K and depends on the position pair, so a
reading of one token cannot include it); neither are Gemma's per-token q/k-norm scales.

Contexts. The offline English corpus (:mod:`compendium.data`, its training mix) is streamed
document by document, files in turn, cut into windows of ``window`` tokens (at most
``per_doc`` windows per document). A window's activation is the maximum of a_t over positions
t >= ``min_pos`` (position 0 excluded: the first token of a window is an attention sink) and its
context is the window up to and including that token, exactly the tokens the model had seen
when it produced the activation. Per signal the ``k`` windows of highest activation are kept
(a bounded top-k merged batch by batch), plus a seeded reservoir of random windows with a random
end position and the corpus token counts; memory is bounded by ``k``, the reservoir size and the
vocabulary, not by the corpus. Results are cached in ``compendium.paths.cache_dir() /
"interpret"`` under a hash of every input (model weights, signal directions, corpus files and
sizes, parameters).

What a reader is shown of the descriptions (each with its judge score and its describer's checks,
e.g. in the circuit viewer) is :mod:`accpp.interpret_view`.
"""
from __future__ import annotations

import gzip
import hashlib
import heapq
import json
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Iterator, Sequence

import numpy as np
import torch

from accpp.arch import UnsupportedArchitecture, get_path
from accpp.decompose import KIND_EMB, KIND_HEAD, KIND_MLP, Decomposition, fingerprint

__all__ = ["Signal", "CorpusSpec", "Context", "TopContexts", "signal_basis", "component_vector", "select_signals",
           "signal_activations", "corpus_windows", "top_contexts", "render_context", "SUPPORTED"]

SUPPORTED = ("llama", "gemma2", "gemma3_text")
_KINDS = {"head": KIND_HEAD, "mlp": KIND_MLP, "emb": KIND_EMB}
_VERSION = "interpret-v1"


# ---------------------------------------------------------------------------------------------
# Signals and their directions
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Signal:
    """One signal: an upstream component read by one side of a downstream head through ``sing``."""

    kind: int  # KIND_HEAD, KIND_MLP or KIND_EMB
    comp_layer: int  # -1 for the embedding
    comp_head: int  # -1 unless a head
    layer: int  # downstream head
    head: int
    side: str  # "d" query, "s" key
    sing: tuple[int, ...]  # sorted singular indices
    direction: torch.Tensor = field(compare=False, repr=False)  # (d_model,) float64, unit
    weight: float = field(default=0.0, compare=False)
    n_edges: int = field(default=0, compare=False)

    @property
    def upstream(self) -> str:
        return {KIND_HEAD: f"A{self.comp_layer}.{self.comp_head}", KIND_MLP: f"M{self.comp_layer}",
                KIND_EMB: "E"}[self.kind]

    @property
    def downstream(self) -> str:
        return f"A{self.layer}.{self.head}"

    @property
    def key(self) -> tuple:
        """The viewer's key form ``(upstream, downstream, side, sing)``."""
        return (self.upstream, self.downstream, self.side, self.sing)

    @property
    def name(self) -> str:
        return f"{self.upstream}->{self.downstream}:{self.side}{list(self.sing)}"


def signal_basis(arch, svd, layer: int, head: int, side: str, sing: Sequence[int]) -> torch.Tensor:
    """Orthonormal residual-space directions (d, r) of singular indices ``sing`` of head (layer, head):
    columns of U = W_Q^eff Ut (side "d") or V = W_K^eff Vt (side "s")."""
    if side not in ("d", "s"):
        raise ValueError(f"side must be 'd' (query) or 's' (key), got {side!r}")
    lw = arch.layers[layer]
    dh = svd.S.shape[-1]
    idx = [int(k) for k in sing]
    if not idx or any(not 0 <= k < dh for k in idx):
        raise ValueError(f"singular indices {list(sing)} must be a non-empty subset of 0..{dh - 1}")
    if side == "d":
        full = lw.wq_eff(head) @ svd.Ut[layer, head]
    else:
        full = lw.wk_eff(lw.kv_of(head)) @ svd.Vt[layer, head]
    return full[:, idx]


def component_vector(dec: Decomposition, kind: int, comp_layer: int, comp_head: int, token: int,
                     src: int | None = None) -> torch.Tensor:
    """The component's vector in the residual at ``token`` (float64, (d,)): a head's output from
    ``src`` (or summed over sources when ``src`` is None), an MLP's output, the embedding."""
    if kind == KIND_EMB:
        return dec.emb[token]
    if kind == KIND_MLP:
        return dec.mlp[comp_layer, token]
    if kind == KIND_HEAD:
        w = dec.acts.attn[comp_layer, comp_head, token, : token + 1] * dec.pscale[comp_layer, token]
        vo = dec.vo[comp_layer, comp_head, : token + 1]
        return w[src] * vo[src] if src is not None else w @ vo
    raise ValueError(f"component kind {kind} has no text-dependent output (only head, mlp, emb)")


def _orient(basis: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    proj = basis @ (basis.T @ x)
    n = float(proj.norm())
    if n == 0.0 or not np.isfinite(n):
        raise ValueError("the traced component has no part on the signal's singular directions")
    return proj / n


def select_signals(tracer, circuits, n: int, ids: Sequence | None = None) -> list[Signal]:
    """The ``n`` distinct signals of largest summed edge weight over ``circuits`` (traced by ``tracer``).

    ``ids``: the token ids of each circuit's prompt (default: re-encoded from ``circuit.meta["text"]``
    is not reliable, so pass them). Each signal's direction comes from its edge of largest weight.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if ids is None or len(ids) != len(circuits):
        raise ValueError("select_signals needs the token ids of every circuit's prompt (ids=[...], one per circuit)")
    groups: dict[tuple, dict] = {}
    for ci, c in enumerate(circuits):
        g = c.graph
        for u, v, d in g.edges(data=True):
            if d.get("side") not in ("d", "s"):
                continue
            nu, nv = g.nodes[u], g.nodes[v]
            kind = _KINDS.get(nu["kind"])
            if kind is None:  # bias, offset: constant, nothing to read from text
                continue
            cl = nu["layer"] if kind != KIND_EMB else -1
            ch = nu["head"] if kind == KIND_HEAD else -1
            key = (kind, cl, ch, nv["layer"], nv["head"], d["side"], tuple(sorted(int(k) for k in d["sing"])))
            w = float(d.get("weight", 0.0))
            gr = groups.setdefault(key, dict(weight=0.0, n=0, best=None))
            gr["weight"] += w
            gr["n"] += 1
            src = nu["src"] if kind == KIND_HEAD else None
            if gr["best"] is None or w > gr["best"][0]:
                gr["best"] = (w, ci, nu["dest"], src)
    ranked = sorted(groups.items(), key=lambda kv: (-kv[1]["weight"], kv[0]))[:n]
    decs: dict[int, Decomposition] = {}
    out = []
    for key, gr in ranked:
        kind, cl, ch, L, h, side, sing = key
        _, ci, token, src = gr["best"]
        if ci not in decs:
            decs[ci] = tracer.decompose(ids[ci])
        dec = decs[ci]
        lw = tracer.arch.layers[L]
        x = lw.ln_in.centred(component_vector(dec, kind, cl, ch, token, src)) / dec.sigma[L, token]
        basis = signal_basis(tracer.arch, tracer.svd, L, h, side, sing)
        out.append(Signal(kind, cl, ch, L, h, side, sing, _orient(basis, x), gr["weight"], gr["n"]))
    return out


# ---------------------------------------------------------------------------------------------
# Activations on batches of text (plain forward hooks, batched)
# ---------------------------------------------------------------------------------------------
class _Stop(Exception):
    pass


def signal_activations(model, arch, signals: Sequence[Signal], input_ids: torch.Tensor) -> torch.Tensor:
    """Activations a_t (B, T, S) float64 of every signal at every token of a batch (B, T) of ids.

    One forward pass (stopped after the last layer any signal needs), hooks on the decoder layers,
    the attention output projection and the MLP; the per-head outputs are (o_proj input of head h)
    @ W_O[h] (times the post-attention norm's gain and per-token 1/scale where the model has one).
    """
    if arch.model_type not in SUPPORTED:
        raise UnsupportedArchitecture(f"signal activations are implemented for {', '.join(SUPPORTED)}; "
                                      f"model_type {arch.model_type!r} is not supported")
    if not signals:
        raise ValueError("no signals given")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be a batch (B, T), got shape {tuple(input_ids.shape)}")
    layers = get_path(model, arch.layers_path)
    need_resid = sorted({s.layer for s in signals} | ({0} if any(s.kind == KIND_EMB for s in signals) else set()))
    need_heads = sorted({s.comp_layer for s in signals if s.kind == KIND_HEAD})
    need_mlp = sorted({s.comp_layer for s in signals if s.kind == KIND_MLP})
    last = max(s.layer for s in signals)
    cap: dict = {}
    hooks = []

    def resid_hook(l):
        def f(mod, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            cap[("resid", l)] = x.detach().double()
            if l == last:
                raise _Stop
        return f

    def o_hook(l):
        def pre(mod, args):
            cap[("o_in", l)] = args[0].detach().double()

        def post(mod, args, out):
            cap[("o_out", l)] = out.detach().double()
        return pre, post

    def mlp_hook(l):
        def f(mod, args, out):
            cap[("mlp", l)] = (out[0] if isinstance(out, tuple) else out).detach().double()
        return f

    try:
        for l in need_resid:
            hooks.append(layers[l].register_forward_pre_hook(resid_hook(l), with_kwargs=True))
        if last not in need_resid:
            hooks.append(layers[last].register_forward_pre_hook(resid_hook(last), with_kwargs=True))
        for l in need_heads:
            o = getattr(layers[l], arch.attn_name).o_proj
            pre, post = o_hook(l)
            hooks += [o.register_forward_pre_hook(pre), o.register_forward_hook(post)]
        for l in need_mlp:
            hooks.append(get_path(layers[l], arch.mlp_contrib_name).register_forward_hook(mlp_hook(l)))
        try:
            with torch.no_grad():
                model(input_ids=input_ids, use_cache=False)
        except _Stop:
            pass
    finally:
        for h in hooks:
            h.remove()
    B, T = input_ids.shape
    out = torch.empty(B, T, len(signals), dtype=torch.float64)
    head_out: dict = {}
    for i, s in enumerate(signals):
        lw = arch.layers[s.layer]
        if s.kind == KIND_EMB:
            c = cap[("resid", 0)]
        elif s.kind == KIND_MLP:
            c = cap[("mlp", s.comp_layer)]
        else:
            key = (s.comp_layer, s.comp_head)
            if key not in head_out:
                ul = arch.layers[s.comp_layer]
                dh = ul.W_O.shape[1]
                o_in = cap[("o_in", s.comp_layer)][..., s.comp_head * dh:(s.comp_head + 1) * dh]
                c = o_in @ ul.W_O[s.comp_head]
                if ul.post_attn_norm is not None:
                    pn = ul.post_attn_norm
                    c = c * pn.gain / pn.scale(cap[("o_out", s.comp_layer)])[..., None]
                head_out[key] = c
            c = head_out[key]
        resid = cap[("resid", s.layer)]
        out[..., i] = (lw.ln_in.centred(c) @ s.direction) / lw.ln_in.scale(resid)
    return out


# ---------------------------------------------------------------------------------------------
# Streaming the corpus, top contexts, cache
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CorpusSpec:
    """Which windows of the offline corpus are read (see the module docstring)."""

    n_windows: int = 256
    window: int = 16
    per_doc: int = 2
    min_pos: int = 4
    lang: str = "en"
    sources: tuple[str, ...] | None = None  # glob patterns; None: the training mix
    max_chars: int = 4000  # characters of a document tokenized (the first ones)

    def __post_init__(self):
        if self.n_windows < 1 or self.per_doc < 1:
            raise ValueError(f"n_windows and per_doc must be >= 1, got {self.n_windows}, {self.per_doc}")
        if not 1 <= self.min_pos < self.window:
            raise ValueError(f"min_pos must lie in 1..window-1 = 1..{self.window - 1}, got {self.min_pos}")


@dataclass
class Context:
    ids: list[int]  # the window up to and including the activating (last) token
    value: float  # the activation there

    def as_dict(self) -> dict:
        return dict(ids=self.ids, value=self.value)


@dataclass
class TopContexts:
    """Per signal its top contexts (descending), a random reservoir, and corpus token counts."""

    top: list[list[Context]]
    random: list[Context]
    token_counts: dict[int, int]
    n_tokens: int
    n_windows: int
    n_heldout: int
    seconds: float = 0.0
    cached: bool = False

    def heldout(self, i: int) -> list[Context]:
        """Ranks 1, 3, 5, ... (0-based odd ranks) of signal i, ``n_heldout`` of them: the judge's."""
        return self.top[i][1::2][: self.n_heldout]

    def describe(self, i: int) -> list[Context]:
        """The top contexts of signal i not held out: what the describers see."""
        held = {id(c) for c in self.heldout(i)}
        return [c for c in self.top[i] if id(c) not in held]

    def to_json(self) -> dict:
        return dict(top=[[c.as_dict() for c in t] for t in self.top], random=[c.as_dict() for c in self.random],
                    token_counts={str(k): v for k, v in self.token_counts.items()}, n_tokens=self.n_tokens,
                    n_windows=self.n_windows, n_heldout=self.n_heldout, seconds=self.seconds)

    @classmethod
    def from_json(cls, d: dict) -> "TopContexts":
        return cls([[Context(**c) for c in t] for t in d["top"]], [Context(**c) for c in d["random"]],
                   {int(k): v for k, v in d["token_counts"].items()}, d["n_tokens"], d["n_windows"],
                   d["n_heldout"], d.get("seconds", 0.0), cached=True)


def _read_docs(path) -> Iterator[str]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line:
                yield json.loads(line)["text"]


def project_corpus(spec: CorpusSpec) -> list:
    """The corpus files ``spec`` names, each checked to hold records of the corpus's schema
    (:func:`compendium.data.check_records`: an empty or malformed file is refused naming the line)."""
    from compendium import data

    files = data.corpus_files(spec.lang, spec.sources)
    for f in files:
        data.check_records(f)
    return files


def corpus_windows(tokenizer, spec: CorpusSpec, files=None) -> Iterator[list[int]]:
    """Windows of ``spec.window`` token ids, streamed: documents of the files in turn (one from each
    file, then the next from each), at most ``spec.per_doc`` non-overlapping windows per document."""
    files = list(files) if files is not None else project_corpus(spec)
    readers = [_read_docs(f) for f in files]
    n = 0
    while readers and n < spec.n_windows:
        alive = []
        for r in readers:
            text = next(r, None)
            if text is None:
                continue
            alive.append(r)
            ids = tokenizer(text[: spec.max_chars], add_special_tokens=False)["input_ids"]
            for k in range(min(spec.per_doc, len(ids) // spec.window)):
                yield ids[k * spec.window:(k + 1) * spec.window]
                n += 1
                if n >= spec.n_windows:
                    return
        readers = alive


def _cache_key(model, arch, signals, spec: CorpusSpec, files, k, n_random, seed) -> str:
    h = hashlib.sha256(_VERSION.encode())
    h.update(fingerprint(arch).encode())
    emb = model.get_input_embeddings().weight.detach()
    h.update(f"{tuple(emb.shape)}{float(emb.double().sum()):.10e}{float(emb.double().abs().sum()):.10e}".encode())
    for s in signals:
        h.update(repr((s.kind, s.comp_layer, s.comp_head, s.layer, s.head, s.side, s.sing)).encode())
        h.update(np.round(s.direction.numpy(), 9).tobytes())
    for f in files:
        h.update(f"{f.name}:{f.stat().st_size}".encode())
    h.update(json.dumps(asdict(spec), sort_keys=True).encode())
    h.update(f"{k}:{n_random}:{seed}".encode())
    return h.hexdigest()[:24]


def top_contexts(model, tokenizer, arch, signals: Sequence[Signal], spec: CorpusSpec = CorpusSpec(), *,
                 k: int = 9, n_heldout: int = 4, n_random: int = 32, batch: int = 32, seed: int = 0,
                 files=None, cache: bool = True) -> TopContexts:
    """Top-``k`` contexts of every signal over the streamed corpus, a random reservoir of ``n_random``
    contexts, and the corpus token counts (see the module docstring). Cached when ``cache``."""
    from compendium import paths
    from compendium.atomic import write_text

    if k < 2 or n_heldout < 1 or 2 * n_heldout > k + 1:
        raise ValueError(f"k={k}, n_heldout={n_heldout}: need k >= 2 and n_heldout <= (k + 1) // 2 (held-out "
                         "contexts are the odd ranks)")
    if n_random < n_heldout:
        raise ValueError(f"n_random={n_random} must be >= n_heldout={n_heldout}")
    files = list(files) if files is not None else project_corpus(spec)
    path = paths.cache_dir() / "interpret" / f"{_cache_key(model, arch, signals, spec, files, k, n_random, seed)}.json"
    if cache and path.exists():
        return TopContexts.from_json(json.loads(path.read_text(encoding="utf-8")))
    t0 = time.perf_counter()
    rng = random.Random(seed)
    S = len(signals)
    heaps: list[list] = [[] for _ in range(S)]  # min-heaps of (value, window number, ids)
    reservoir: list[tuple[int, list[int]]] = []
    counts: Counter = Counter()
    n_seen, n_tokens = 0, 0
    buf: list[list[int]] = []

    def flush():
        nonlocal n_seen
        ids = torch.tensor(buf)
        acts = signal_activations(model, arch, signals, ids)[:, spec.min_pos:]  # (B, T', S)
        best, where = acts.max(1)  # (B, S)
        for b, win in enumerate(buf):
            wno = n_seen + b
            for i in range(S):
                v = float(best[b, i])
                item = (v, -wno, win[: spec.min_pos + int(where[b, i]) + 1])
                if len(heaps[i]) < k:
                    heapq.heappush(heaps[i], item)
                elif item > heaps[i][0]:
                    heapq.heapreplace(heaps[i], item)
            # reservoir sampling (Algorithm R) of random contexts, random end position
            j = wno if wno < n_random else rng.randrange(wno + 1)
            if j < n_random:
                end = rng.randrange(spec.min_pos, spec.window)
                entry = (wno, win[: end + 1])
                if wno < n_random:
                    reservoir.append(entry)
                else:
                    reservoir[j] = entry
        n_seen += len(buf)
        buf.clear()

    for win in corpus_windows(tokenizer, spec, files):
        counts.update(win)
        n_tokens += len(win)
        buf.append(win)
        if len(buf) == batch:
            flush()
    if buf:
        flush()
    if n_seen < max(k, n_random):
        raise ValueError(f"the corpus gave only {n_seen} windows of {spec.window} tokens; need at least "
                         f"max(k, n_random) = {max(k, n_random)}")
    # random contexts' activations are not needed; their value is recorded as nan
    top = [[Context(list(ids), v) for v, _, ids in sorted(h, reverse=True)] for h in heaps]
    rand = [Context(list(ids), float("nan")) for _, ids in sorted(reservoir)]
    out = TopContexts(top, rand, dict(counts), n_tokens, n_seen, n_heldout, time.perf_counter() - t0)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(out.to_json()))
    return out


# ---------------------------------------------------------------------------------------------
# Contexts as text
# ---------------------------------------------------------------------------------------------
def render_context(tokenizer, ctx: Context, mark: bool = True) -> str:
    """The context as text, its activating (last) token in [brackets] when ``mark``."""
    head = tokenizer.decode(ctx.ids[:-1])
    last = tokenizer.decode(ctx.ids[-1:])
    text = f"{head}[{last}]" if mark else head + last
    return " ".join(text.split())
