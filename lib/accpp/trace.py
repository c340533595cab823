"""Whole-prompt ACC++ circuit: seeds at the answer position, recursion through heads.

    tracer = Tracer(model, tok, name="smollm2-135m")  # SVDs cached on disk per model
    circuit = tracer.trace(input_ids, correct_id, wrong_id)
    circuit.graph                                      # networkx.MultiDiGraph
    circuit.status, circuit.reason                     # "traced", or why the circuit is empty or small

Method: docs/accpp_method.md, steps 8 (seeds) and 9 (recursion). Seeds (:mod:`accpp.seeding`):
``TraceConfig.seeding="linear"`` (default, the paper's) projects the final residual's components on
the logit-difference direction and keeps the largest by the cumulative-sum rule; ``"prob"`` (the
authors' tracer's default since its v0.3.0) attributes the answer's log-probability to them by
Integrated Gradients and keeps the fewest that remove 0.8 of it. With ``variant="authors"`` nothing
is traced either when no seed is an attention head (as the authors' tracer).

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

Input contract (checked before any work, each refusal naming the problem): one prompt of integer
token ids within the vocabulary and within the model's positions; ``correct`` and ``wrong`` one
token id each inside the vocabulary (a set of ids only as :class:`accpp.seeding.TokenSet`); with
``"prob"`` seeding no ``wrong``.
With a tokenizer, a prompt ending in whitespace and a single-token answer lacking the leading space
the prompt implies each raise a :class:`accpp.prompt_checks.PromptWarning` (traced all the same).

Every circuit says why it is empty or small (``circuit.status``, :data:`STATUSES`):
``"traced"`` (at least one firing expanded), ``"negative_logit_diff"`` (linear: the metric's
components sum to <= 0, the model does not prefer the answer; nothing traced),
``"nonpositive_completeness"`` (prob: the answer is no more likely than under the bias-only
logits), ``"no_head_seed"`` (no seed is an attention head), ``"tau_cut"`` (head seeds, none of whose
firings passes the expansion rule: A_ds < tau, layer 0, or position 0; ``circuit.reason`` lists
each), ``"truncated"`` (``max_firings`` = 0).

Resources: a trace runs at ``TraceConfig.threads`` torch threads (default 1; restored afterwards)
and refuses, before any work, a prompt whose estimated peak memory (:func:`estimate_trace_gb`)
exceeds ``TraceConfig.max_memory_gb`` (default: 80% of the memory available at trace time).
"""
from __future__ import annotations

import os
import time
import warnings
from collections import deque
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import networkx as nx
import torch

from accpp import arch as arch_mod
from accpp.decompose import (KIND_BIAS, KIND_EMB, KIND_HEAD, KIND_MLP, KIND_NAMES, KIND_OFFSET, LABEL_HEAD, LABEL_KIND,
                             LABEL_LAYER, LABEL_SRC, Decomposition)
from accpp.decompose import collect, head_svds, visible
from accpp.graph import STATUSES, Circuit
from accpp.seeding import SEEDINGS, TokenSet, answer_direction, answer_ids, prob_seeds, seeds
from accpp.prompt_checks import PromptWarning, prompt_problems
from accpp.signals import TAU_FACTOR, VARIANTS, Firing, FiringSolver, check_variant, tau_for

__all__ = ["TraceConfig", "Circuit", "Tracer", "TraceTooLarge", "TokenSet", "answer_direction", "node_id", "seeds",
           "torch_threads", "estimate_trace_gb", "available_memory_gb", "max_positions", "VARIANTS", "SEEDINGS",
           "STATUSES"]


class TraceTooLarge(MemoryError):
    """The prompt would need more memory than the configured limit; the message gives both."""


@dataclass(frozen=True)
class TraceConfig:
    """How a circuit is traced.

    variant: "authors" (default: the authors' tracer) or "per-position" (key-side signals at their
        exact key positions); see :mod:`accpp.signals`.
    seeding: "linear" (default: the paper's logit-difference seeds) or "prob" (the answer's
        log-probability, the authors' tracer's default since its v0.3.0); see :mod:`accpp.seeding`.
    prob_tau, prob_ig_steps: the "prob" rule's coverage (fraction of the completeness the seeds
        remove, 0.8) and Integrated Gradients intervals (64); unused by "linear".
    expand_layer0: expand firings of layer 0 (their inputs are the embeddings only).
    expand_position0: expand firings whose source is token 0; None = the variant's rule
        (authors: yes; per-position: no). Firings whose destination is token 0 are never expanded.
    max_firings: cap on the number of decomposed firings (``circuit.meta["truncated"]`` tells).
    threads: torch threads while tracing (restored afterwards); None leaves torch's setting.
    max_memory_gb: refuse prompts whose estimated peak exceeds this; None = 80% of the memory
        available when the trace starts.
    tau_factor: the threshold tau(d) = min(1, tau_factor / number of visible tokens) on A_ds, both for
        expanding a firing and for ending its greedy removal (the paper's 2.5).
    """

    variant: str = "authors"
    seeding: str = "linear"
    prob_tau: float = 0.8
    prob_ig_steps: int = 64
    expand_layer0: bool = False
    expand_position0: bool | None = None
    max_firings: int | None = None
    threads: int | None = 1
    max_memory_gb: float | None = None
    tau_factor: float = TAU_FACTOR

    def __post_init__(self):
        check_variant(self.variant)
        if self.seeding not in SEEDINGS:
            raise ValueError(f"unknown seeding {self.seeding!r}: 'linear' (the paper's logit-difference seeds, the "
                             "default) or 'prob' (the answer's log-probability, the authors' tracer since v0.3.0)")
        if not 0 < self.prob_tau <= 1:
            raise ValueError(f"prob_tau must lie in (0, 1], got {self.prob_tau!r}")
        if not isinstance(self.prob_ig_steps, int) or self.prob_ig_steps < 1:
            raise ValueError(f"prob_ig_steps must be a positive int, got {self.prob_ig_steps!r}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise ValueError(f"threads must be a positive int or None, got {self.threads!r}")
        if self.max_memory_gb is not None and not self.max_memory_gb > 0:
            raise ValueError(f"max_memory_gb must be positive or None, got {self.max_memory_gb!r}")
        if isinstance(self.tau_factor, bool) or not isinstance(self.tau_factor, (int, float)) or \
                not self.tau_factor > 0:
            raise ValueError(f"tau_factor must be a positive number (the paper's: {TAU_FACTOR}), got {self.tau_factor!r}")
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


def max_positions(model) -> int | None:
    """The number of positions the model was built for (``max_position_embeddings``, GPT-2's
    ``n_positions``), or None if its config names none."""
    cfg = model.config
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        v = getattr(cfg, key, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def _meta_ids(tokens, ids: list[int]):
    """An int for a single token id, a list for a TokenSet."""
    return list(ids) if isinstance(tokens, TokenSet) else ids[0]


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
            bad = sorted({int(i) for i in ids if not 0 <= int(i) < vocab})
            raise ValueError(f"token ids must lie in 0..{vocab - 1} (the model's vocabulary); got "
                             f"{int(ids.min())}..{int(ids.max())} (outside: {bad[:10]})")
        n_pos = max_positions(self.model)
        if n_pos is not None and ids.numel() > n_pos:
            raise ValueError(f"a {ids.numel()}-token prompt is longer than the {n_pos} positions the model "
                             f"({self.arch.model_type}) was built for; use at most {n_pos} tokens")
        return ids.long()

    def check_answers(self, correct, wrong) -> tuple[list[int], list[int] | None]:
        """The metric's token ids, checked against the contract (module docstring): one id each (a set
        only as :class:`TokenSet`), inside the unembedding's vocabulary, no id on both sides; ``wrong``
        required by "linear" seeding and refused by "prob"."""
        vocab = self.arch.W_U.shape[0]
        c_ids = answer_ids(correct, "correct", vocab, self.tokenizer)
        if self.config.seeding == "prob":
            if wrong is not None:
                raise ValueError(
                    "seeding='prob' traces the answer's own log-probability and takes no counterfactual: pass "
                    "wrong=None (a contrastive log-probability is the logit difference, i.e. seeding='linear')")
            return c_ids, None
        if wrong is None:
            raise ValueError("seeding='linear' traces logit(correct) - logit(wrong): the counterfactual token "
                             "`wrong` is required (or use TraceConfig(seeding='prob'))")
        w_ids = answer_ids(wrong, "wrong", vocab, self.tokenizer)
        both = sorted(set(c_ids) & set(w_ids))
        if both:
            raise ValueError(f"token id(s) {both} are both the correct and the wrong answer: the metric would "
                             "compare a token with itself")
        return c_ids, w_ids

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
    def trace(self, input_ids, correct, wrong=None, position: int = -1) -> Circuit:
        """Trace the circuit of the metric at ``position`` (default: the last token).

        ``input_ids``: ONE prompt's token ids ((T,) or (1, T)). ``correct``: the answer's token id;
        ``wrong``: the counterfactual's (IOI: the indirect object vs the subject); the metric is
        logit(correct) - logit(wrong) ("linear" seeding). A set of ids (Greater-Than: the digits that
        make a later year vs the others) only as :class:`TokenSet` (mean logit of each set). With
        ``TraceConfig(seeding="prob")``, ``wrong`` is None and the metric is the answer's
        log-probability (``circuit.logit_diff`` then holds its completeness, in nats). Every input is
        checked before any work. Runs at ``config.threads`` torch threads.
        """
        ids = self.check_input(input_ids)
        T = ids.numel()
        if not -T <= position < T:
            raise ValueError(f"position {position} is outside a {T}-token prompt")
        c_ids, w_ids = self.check_answers(correct, wrong)
        single = lambda tok, ids_: ids_[0] if ids_ is not None and not isinstance(tok, TokenSet) else None  # noqa: E731
        for msg in prompt_problems(self.tokenizer, ids, single(correct, c_ids), single(wrong, w_ids)):
            warnings.warn(PromptWarning(msg), stacklevel=2)
        self.check_fits(T)
        with torch_threads(self.config.threads):
            return self._trace(ids, correct, wrong, c_ids, w_ids, position % T)

    def _trace(self, ids: torch.Tensor, correct, wrong, c_ids, w_ids, pos: int) -> Circuit:
        t0 = time.perf_counter()
        cfg, arch = self.config, self.arch
        dec = Decomposition(arch, collect(self.model, arch, ids, self.nn, position=pos))
        solver = FiringSolver(dec, self.svd, variant=cfg.variant, tau_factor=cfg.tau_factor)
        L = arch.n_layers
        vecs, labels = dec.components(L, pos)
        seed_meta: dict = {}
        if cfg.seeding == "linear":  # step 8, the paper's rule
            direction, metric = answer_direction(arch, dec, TokenSet(c_ids), TokenSet(w_ids), pos)
            weight = vecs @ direction
            seed_idx = seeds(weight).tolist()
            total = float(weight.sum())
            empty = None if total > 0 else (
                "negative_logit_diff", f"the metric's components sum to {total:.4g} <= 0 (logit difference "
                f"{metric:.4g}): the model does not prefer the answer, nothing is traced")
        else:  # step 8, the authors' tracer since v0.3.0
            ps = prob_seeds(arch, vecs, dec.acts.resid[L, pos], c_ids, cfg.prob_tau, cfg.prob_ig_steps)
            weight, seed_idx, metric = ps.attribution, ps.idx.tolist(), ps.completeness
            seed_meta = dict(log_prob=ps.log_prob, completeness=ps.completeness, seed_drop=ps.drop,
                             seed_target=ps.target, seed_target_reached=ps.reached, support_weights=ps.q)
            empty = None if ps.completeness > 0 else (
                "nonpositive_completeness", f"the answer's log-probability gains {ps.completeness:.4g} nats <= 0 "
                "over the bias-only logits: nothing is traced")
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
                if key not in seen and self._why_not_expanded(dec, *key) is None:
                    seen.add(key)
                    queue.append(Firing(*key))
            return nid

        head_seeds = [i for i in seed_idx if int(labels[i, LABEL_KIND]) == KIND_HEAD]
        n_seeds = len(seed_idx)
        if empty is None and not head_seeds:
            kinds = sorted({KIND_NAMES[int(labels[i, LABEL_KIND])] for i in seed_idx})
            empty = ("no_head_seed", f"none of the {len(seed_idx)} seeds is an attention head (seed kinds: "
                     f"{', '.join(kinds) or 'none'}): " + ("nothing is traced (as the authors' tracer)"
                                                          if cfg.variant == "authors" else "no firing to expand"))
            if cfg.variant == "authors":
                seed_idx = []  # the authors' tracer builds no circuit without an attention-head seed
        for i in seed_idx:
            kind, layer, head, src = labels[i].tolist()
            nid = add_component(kind, layer, head, pos, src)
            w = float(weight[i])
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
        if empty is None and n == 0:
            if queue:
                empty = ("truncated", f"max_firings={cfg.max_firings}: no firing was expanded")
            else:
                why = []
                for i in head_seeds:
                    layer, head, src = (int(labels[i, c]) for c in (LABEL_LAYER, LABEL_HEAD, LABEL_SRC))
                    why.append(f"A{layer}.{head}@{pos}<{src}: {self._why_not_expanded(dec, layer, head, pos, src)}")
                empty = ("tau_cut", f"no head seed's firing is expanded ({'; '.join(why)})")
        status, reason = empty if empty is not None else ("traced", "")
        meta = dict(model=self.name, model_type=arch.model_type, correct=_meta_ids(correct, c_ids),
                    wrong=None if w_ids is None else _meta_ids(wrong, w_ids), position=pos, config=asdict(cfg),
                    variant=cfg.variant, seeding=cfg.seeding,
                    metric="logit difference" if cfg.seeding == "linear" else "log-probability completeness (nats)",
                    threads=torch.get_num_threads(), truncated=bool(queue), status=status, status_reason=reason,
                    n_seeds=n_seeds, n_head_seeds=len(head_seeds), **seed_meta)
        return Circuit(g, tokens, metric, time.perf_counter() - t0, n, meta)

    def _why_not_expanded(self, dec: Decomposition, layer: int, head: int, dest: int, src: int) -> str | None:
        """None if the firing is expanded (step 9), else the rule that stops it."""
        cfg = self.config
        if layer == 0 and not cfg.expand_layer0:
            return "layer 0 (inputs are embeddings only)"
        if dest == 0:
            return "destination is token 0"
        if src == 0 and not cfg.expands_source0:
            return "source is token 0 (per-position variant)"
        n = len(visible(dec.T, dest, self.arch.layers[layer].sliding_window))
        A, tau = float(dec.acts.attn[layer, head, dest, src]), tau_for(n, cfg.tau_factor)
        return None if A >= tau else f"A_ds {A:.3f} < tau {tau:.3f}"

    def _tokens(self, ids) -> list[str]:
        if self.tokenizer is None:
            return [str(int(i)) for i in ids]
        return [self.tokenizer.decode([int(i)]) for i in ids]
