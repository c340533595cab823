"""Whole-prompt ACC++ circuit: seeds on the logit difference, recursion through heads.

    tracer = Tracer(model, tok, name="smollm2-135m")  # SVDs cached on disk per model
    circuit = tracer.trace(input_ids, correct_id, wrong_id)
    circuit.graph                                      # networkx.MultiDiGraph

Method: docs/accpp_method.md ("Whole-prompt circuit"). Seeds: the final residual at the answer
position is split into components, each projected on the logit-difference direction (after the
final norm's scale and gain); sorted descending, the seeds are the components at or above the
value where the cumulative sum first exceeds the total, that cutoff capped at total/2. If the
total is <= 0, nothing is traced; with ``variant="authors"`` nothing is traced either when no seed
is an attention head (as the authors' tracer).

Recursion runs through attention heads only (MLPs, biases, embedding, offsets are leaves):
each signal edge into a firing that comes from an upstream head's output at (token t, source
s') leads to the firing (l', h', t, s') when A >= tau there. Not expanded (kept as nodes):
firings of layer 0 (their inputs are embeddings only), firings whose destination is position 0,
firings whose source is position 0 unless the variant expands them (``authors``: expanded, as
the authors' tracer; ``per-position``: not, unless ``expand_position0=True``), and already traced
firings (memoised).

``TraceConfig.variant`` selects the key-side candidates and the edge weights
(:mod:`accpp.signals`): ``"authors"`` (default) reproduces the authors' tracer, ``"per-position"``
is our refinement that places each key-side signal at its exact key position.

Resources: a trace runs at ``TraceConfig.threads`` torch threads (default 1; restored afterwards)
and refuses, before any work, a prompt whose estimated peak memory (:func:`estimate_trace_gb`)
exceeds ``TraceConfig.max_memory_gb`` (default: 80% of the memory available at trace time).
"""
from __future__ import annotations

import os
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import networkx as nx
import torch

from accpp import arch as arch_mod
from accpp.decompose import KIND_BIAS, KIND_EMB, KIND_HEAD, KIND_MLP, KIND_NAMES, KIND_OFFSET, Decomposition
from accpp.decompose import collect, head_svds, visible
from accpp.graph import Circuit
from accpp.signals import VARIANTS, Firing, FiringSolver, check_variant, tau_for

__all__ = ["TraceConfig", "Circuit", "Tracer", "TraceTooLarge", "answer_direction", "node_id", "seeds",
           "torch_threads", "estimate_trace_gb", "available_memory_gb", "VARIANTS"]


class TraceTooLarge(MemoryError):
    """The prompt would need more memory than the configured limit; the message gives both."""


@dataclass(frozen=True)
class TraceConfig:
    """How a circuit is traced.

    variant: "authors" (default: the authors' tracer) or "per-position" (key-side signals at their
        exact key positions); see :mod:`accpp.signals`.
    expand_layer0: expand firings of layer 0 (their inputs are the embeddings only).
    expand_position0: expand firings whose source is token 0; None = the variant's rule
        (authors: yes; per-position: no). Firings whose destination is token 0 are never expanded.
    max_firings: cap on the number of decomposed firings (``circuit.meta["truncated"]`` tells).
    threads: torch threads while tracing (restored afterwards); None leaves torch's setting.
    max_memory_gb: refuse prompts whose estimated peak exceeds this; None = 80% of the memory
        available when the trace starts.
    """

    variant: str = "authors"
    expand_layer0: bool = False
    expand_position0: bool | None = None
    max_firings: int | None = None
    threads: int | None = 1
    max_memory_gb: float | None = None

    def __post_init__(self):
        check_variant(self.variant)
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise ValueError(f"threads must be a positive int or None, got {self.threads!r}")
        if self.max_memory_gb is not None and not self.max_memory_gb > 0:
            raise ValueError(f"max_memory_gb must be positive or None, got {self.max_memory_gb!r}")
        if self.max_firings is not None and self.max_firings < 0:
            raise ValueError(f"max_firings must be >= 0 or None, got {self.max_firings!r}")

    @property
    def expands_source0(self) -> bool:
        return self.variant == "authors" if self.expand_position0 is None else bool(self.expand_position0)


@contextmanager
def torch_threads(n: int | None):
    """Run the block with ``n`` torch (intra-op) threads and restore the previous count afterwards."""
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def available_memory_gb() -> float:
    """Memory the OS can give this process now (Linux MemAvailable; else free physical pages), GB."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024**2
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 1024**3


def estimate_trace_gb(arch, T: int, variant: str = "authors") -> float:
    """Estimated peak memory (GB) of tracing a T-token prompt, beyond the loaded model.

    The float64 tensors that grow with T (docs/accpp_method.md, "Cost and agreement"): attention
    maps with their float32 copies from the forward pass (1.5 L H T^2 values), per-head value
    outputs (L H T d), rotation matrices (L T dh^2), the key side of one late firing (authors:
    attention-weight tables, ~3 L H T^2; per-position: per-(position, component) coefficients in
    ~4 copies, 2 L H T^2 dh) and the bounded caches of :class:`accpp.signals.FiringSolver`.
    Calibrated on SmolLM2-135M, authors variant, with ``benchmarks/bench_accpp.py --memory``
    (measured above the loaded model / estimate, GB: T=32 0.67/0.93, T=64 0.97/1.07,
    T=128 1.32/1.40, T=256 2.21/2.33; T=512 estimated 5.3). The per-position key-side term is
    from the tensor sizes, not measured.
    """
    L, H, d, dh = arch.n_layers, arch.n_heads, arch.d_model, arch.d_head
    f8 = 8 / 1024**3
    acts = (1.5 * L * H * T * T + 4 * (L + 1) * T * d) * f8
    vo = L * H * T * d * f8
    rot = L * T * dh * dh * f8 if arch.has_rotary else 0.0
    key_side = (2 * L * H * T * T * dh if variant == "per-position" else 3 * L * H * T * T) * f8
    caches = (FiringSolver.max_cache_elems + FiringSolver.max_proj_elems) * f8
    return 1.2 * (acts + vo + rot + key_side + caches) + 0.5  # allocator slack, temporaries


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


class Tracer:
    """Holds a model, its architecture adapter, nnsight wrapper and per-head SVDs."""

    def __init__(self, model, tokenizer=None, name: str | None = None, config: TraceConfig = TraceConfig()):
        from nnsight import NNsight

        if not isinstance(config, TraceConfig):
            raise TypeError(f"config must be a TraceConfig, got {type(config).__name__}")
        self.model, self.tokenizer, self.name, self.config = model, tokenizer, name, config
        self.arch = arch_mod.from_model(model)
        self.nn = NNsight(model)
        self._svd = None

    @property
    def svd(self):
        if self._svd is None:
            with torch_threads(self.config.threads):
                self._svd = head_svds(self.arch, cache_name=self.name)
        return self._svd

    def decompose(self, input_ids, position: int = -1) -> Decomposition:
        """The residual decomposition of one prompt (``acts.logits`` at ``position``)."""
        ids = self.check_input(input_ids)
        with torch_threads(self.config.threads):
            acts = collect(self.model, self.arch, ids, self.nn, position=position)
            return Decomposition(self.arch, acts)

    # -- input checks ---------------------------------------------------------------------------
    def check_input(self, input_ids) -> torch.Tensor:
        """One prompt's token ids as a 1-D long tensor, or a ValueError/TypeError saying what is wrong.

        Accepted: a 1-D sequence/tensor of ids, or a batch of exactly one (shape (1, T)). A batch of
        several prompts is refused (trace them one at a time: the circuit is per prompt).
        """
        if isinstance(input_ids, str):
            raise TypeError("input_ids is a string: tokenize it first (e.g. tokenizer(text).input_ids)")
        try:
            ids = torch.as_tensor(input_ids)
        except (TypeError, ValueError) as err:
            raise TypeError(f"input_ids must be token ids (a 1-D sequence or tensor of ints): {err}") from err
        if ids.numel() == 0:
            raise ValueError("empty prompt: input_ids has no tokens")
        if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
            raise TypeError(f"input_ids must be integer token ids, got dtype {ids.dtype}")
        if ids.dim() == 2:
            if ids.shape[0] != 1:
                raise ValueError(
                    f"a batch of {ids.shape[0]} prompts: the tracer traces one prompt at a time (a circuit is "
                    "per prompt); call trace() once per prompt, e.g. [tracer.trace(row, ...) for row in ids]")
            ids = ids[0]
        if ids.dim() != 1:
            raise ValueError(f"input_ids must be 1-D (T,) or one prompt (1, T); got shape {tuple(ids.shape)}")
        vocab = self.model.get_input_embeddings().num_embeddings
        if int(ids.min()) < 0 or int(ids.max()) >= vocab:
            raise ValueError(f"token ids must lie in 0..{vocab - 1} (the model's vocabulary); got "
                             f"{int(ids.min())}..{int(ids.max())}")
        return ids.long()

    def memory_limit_gb(self) -> float:
        cfg = self.config
        return cfg.max_memory_gb if cfg.max_memory_gb is not None else 0.8 * available_memory_gb()

    def check_fits(self, T: int) -> float:
        """Raise :class:`TraceTooLarge` if a T-token trace is estimated to need more than the limit;
        return the estimate (GB)."""
        need, limit = estimate_trace_gb(self.arch, T, self.config.variant), self.memory_limit_gb()
        if need > limit:
            which = "TraceConfig.max_memory_gb" if self.config.max_memory_gb else "80% of the memory available now"
            raise TraceTooLarge(
                f"a {T}-token prompt needs about {need:.1f} GB to trace ({self.arch.model_type}, "
                f"{self.arch.n_layers} layers x {self.arch.n_heads} heads; the cost grows as T^2), over "
                f"the limit of {limit:.1f} GB ({which}). "
                "Use a shorter prompt, or raise TraceConfig(max_memory_gb=...) if the machine has the memory.")
        return need

    # -- tracing ----------------------------------------------------------------------------------
    def trace(self, input_ids, correct, wrong, position: int = -1) -> Circuit:
        """Trace the circuit of the metric ``mean logit(correct) - mean logit(wrong)`` at ``position``.

        ``input_ids``: ONE prompt's token ids ((T,) or (1, T)). ``correct`` / ``wrong``: a token id
        each (IOI: the indirect object vs the subject) or sets of token ids (Greater-Than: the digits
        that make a later year vs the others). Runs at ``config.threads`` torch threads.
        """
        ids = self.check_input(input_ids)
        T = ids.numel()
        if not -T <= position < T:
            raise ValueError(f"position {position} is outside a {T}-token prompt")
        self.check_fits(T)
        with torch_threads(self.config.threads):
            return self._trace(ids, correct, wrong, position % T)

    def _trace(self, ids: torch.Tensor, correct, wrong, pos: int) -> Circuit:
        t0 = time.perf_counter()
        cfg, arch = self.config, self.arch
        dec = Decomposition(arch, collect(self.model, arch, ids, self.nn, position=pos))
        solver = FiringSolver(dec, self.svd, variant=cfg.variant)
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
                g.add_node(nid, kind=KIND_NAMES[kind], layer=layer, head=head, dest=token, src=src, A=A, traced=False)
            if kind == KIND_HEAD:
                key = (layer, head, token, src)
                if key not in seen and self._expandable(dec, *key):
                    seen.add(key)
                    queue.append(Firing(*key))
            return nid

        seed_idx = seeds(proj).tolist()
        if cfg.variant == "authors" and not any(int(labels[i, 0]) == KIND_HEAD for i in seed_idx):
            seed_idx = []  # the authors' tracer builds no circuit without an attention-head seed
        for i in seed_idx:
            kind, layer, head, src = labels[i].tolist()
            nid = add_component(kind, layer, head, pos, src)
            w = float(proj[i])
            g.add_edge(nid, out_node, side="seed", token=pos, sing=[], rank=0, attribution=w, drop=w, weight=w)
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
                           attribution=e.attribution, drop=e.drop, weight=e.weight)
        meta = dict(model=self.name, model_type=arch.model_type, correct=_meta_ids(correct), wrong=_meta_ids(wrong),
                    position=pos, config=asdict(cfg), variant=cfg.variant, threads=torch.get_num_threads(),
                    truncated=bool(queue))
        return Circuit(g, tokens, logit_diff, time.perf_counter() - t0, n, meta)

    def _expandable(self, dec: Decomposition, layer: int, head: int, dest: int, src: int) -> bool:
        cfg = self.config
        if layer == 0 and not cfg.expand_layer0:
            return False
        if dest == 0 or (src == 0 and not cfg.expands_source0):
            return False
        n = len(visible(dec.T, dest, self.arch.layers[layer].sliding_window))
        return float(dec.acts.attn[layer, head, dest, src]) >= tau_for(n)

    def _tokens(self, ids) -> list[str]:
        if self.tokenizer is None:
            return [str(int(i)) for i in ids]
        return [self.tokenizer.decode([int(i)]) for i in ids]
