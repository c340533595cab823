"""Interventions on traced signals: remove one signal at ONE head's query or key input.

    iv = Intervener(tracer, prompt.ids(), prompt.io_id, prompt.s_id)   # one decomposition, one clean run
    spec = SignalSpec.from_graph(circuit.graph, u, v, key)             # or SignalSpec.from_edge(firing, edge)
    iv.remove(spec)                                                    # the traced signal
    iv.remove(spec, subspace="random", seed=3)                         # same component, same size,
                                                                       # other singular directions
    iv.remove(spec, subspace="random_score", seed=3)                   # the same, rescaled to change the
                                                                       # firing's score as the signal does
    remove_signal(tracer, ids, spec, correct, wrong, subspace=..., seed=...)   # one-off version

Each call returns an :class:`InterventionResult`: the task metric (logit(correct) - logit(wrong)
at the answer position), the downstream firing's attention weight A_ds and raw score S_ds (before
and after, as the model computes them in that pass), and two cosines:

- ``head_input_cos`` = cos(x_t, x_t - dx) at the intervention point (the residual entering the
  downstream head's layer at the signal's token): the paper's "the residual barely changes";
- ``final_resid_cos``: the final residual at the answer position with vs without. This one is
  ~1 by construction (only one head's query or key input is edited, everything else is the real
  forward pass), so it says little; it is kept as evidence.

plus the size of the removed vector relative to the head's input. :func:`paired_summary` compares
signal removals with a control per edge (Wilcoxon signed-rank), per prompt (ratio of medians of
|dLD|, :func:`prompt_ratios`, aggregated as a geometric mean over prompts with its bootstrap
interval) and pooled over edges (ratio of medians with a bootstrap CI over prompts).

Derivation (row vectors; notation of :mod:`accpp.arch`, :mod:`accpp.signals`)
------------------------------------------------------------------------------
Downstream firing (layer L, head a, destination d, source s); kv = the key/value head of a.
With x~_t = x_t / sigma_t (sigma_t: the input RMSNorm's per-token scale) and the gain g folded
into W_Q^eff = diag(g) W_Q[a], W_K^eff = diag(g) W_K[kv], the vectors that enter the dot product are

    qf_d = rot_d( n_q( x~_d W_Q^eff + b ) )        kf_j = rot_j( n_k( x~_j W_K^eff + b ) )
    S_dj = scale * qf_d . kf_j

(rot_t(v) = v R_t: RoPE, rotate-half convention; n_q, n_k: Gemma-3's q/k RMSNorm, identity
otherwise; its per-token scale rho is held fixed like sigma, its gain is diagonal.) The SVD of
Omega = W_Q^eff W_K^eff^T = U diag(S) V^T is kept in head space: U = W_Q^eff Ut, V = W_K^eff Vt,
with Ut diag(S) Vt^T = I (dh x dh). The tracer's coordinates are

    alpha_d = qf_d Ut,   beta_j = kf_j Vt,   S_dj = scale * sum_k S_k alpha_{d,k} beta_{j,k},

and alpha_d (beta_j) is the sum over residual components c of coefficients alpha_{c,k}
(beta_{c,j,k}), each the component divided by the norm scales and mapped the same way
(``FiringSolver.token_coeffs``). A query-side signal edge (component c at d, singular indices
K) is the part of alpha_d on K that c contributes; removing it means

    alpha_d' = alpha_d - alpha_c * 1_K     <=>     qf_d' = qf_d - delta,   delta = (alpha_c * 1_K) Ut^{-1},

because qf = alpha Ut^{-1} is linear (Ut^{-1} = diag(S) Vt^T). The key side is the same with
beta_{c,j}, Vt and kf_j at the edge's token j. So the intervention changes exactly the score
contributions the tracer attributed to the signal: in exact arithmetic A_ds after the removal
equals A_ds - edge.drop (a test). With K = all dh indices, delta is the whole contribution of c
to qf_d, i.e. the same as removing c from head a's (normalised) query input (a test).

In the head's input space the same change is any dx with dx W_Q^eff (then n_q's fixed scale and
gain, then R_d) = delta; the minimum-norm one is

    dx~ = (delta R_d^{-1} * rho / g_q) (W_Q^eff)^+           (g_q: q-norm gain, 1 if none)

which, without RoPE and q-norm, is exactly the orthogonal projection of c / sigma_d onto the left
singular directions {u_k : k in K} (the u_k are orthonormal and alpha_{c,k} = (c/sigma_d) . u_k).
In residual units dx = sigma_d dx~ ("divided by the downstream norm scale" undone). We report
|dx~| / |x~_t| and cos(x_t, x_t - dx) as the size of the removal at the head's input.

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

Random controls: the same component, side and token, with |K| singular indices drawn (seeded)
from the head's other dh - |K| directions (:func:`random_subspace`): ``"random"`` removes the
component's part on them (usually much smaller than its part on the signal's directions: a signal
carries its component's norm, that is how it was found); ``"random_matched"`` rescales that removal
so |dx~| equals the signal's, a control matched in removed norm; ``"random_score"`` rescales it so
that its change of head a's raw score at the firing, scale * qf_d . kf_s, equals the signal's (same
sign and size), a control matched in removed score. The score is linear in delta (query side:
dS_ds = -scale * delta . kf_s; key side: -scale * qf_d . delta_s, the row of delta at s), so one
factor lambda = dS_signal / dS_random matches it exactly; with the score removed the same, what is
left to differ is the directions the removal acts along (the rest of the score row moves
differently, and so do the pattern and the head's output). For a key-side signal at one key
position j other than the source (the per-position variant) the matched entry is (d, j), the only
one it changes. Soft-capping (Gemma-2) comes after this score and is not part of the match.

Supported: the llama-like adapters (``llama`` = SmolLM2, ``gemma2``, ``gemma3_text``); other
families raise :class:`accpp.arch.UnsupportedArchitecture`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from accpp.arch import UnsupportedArchitecture
from accpp.arch import get_path
from accpp.decompose import KIND_BIAS, KIND_EMB, KIND_HEAD, KIND_MLP, KIND_NAMES, KIND_OFFSET, visible
from accpp.signals import Firing, FiringSolver, SignalEdge, softcap

__all__ = ["SUPPORTED", "CONTROLS", "SIDES", "NotASignalEdge", "SignalSpec", "InterventionResult", "Intervener",
           "random_subspace", "remove_signal", "head_patch", "top_seed_edges", "compare_subspaces", "prompt_ratios",
           "paired_summary", "score_matching_error", "measure_intervention_selective"]

SUPPORTED = ("llama", "gemma2", "gemma3_text")
CONTROLS = ("random", "random_matched", "random_score")
SIDES = {"d": "query", "s": "key"}
_KIND_OF_NAME = {v: k for k, v in KIND_NAMES.items()}


class NotASignalEdge(ValueError):
    """The edge given is not a signal edge of a traced firing (or names no component there)."""


def check_supported(arch) -> None:
    if arch.model_type not in SUPPORTED:
        raise UnsupportedArchitecture(
            f"signal interventions are implemented for the llama-like adapters ({', '.join(SUPPORTED)}): "
            f"they hook q_proj/k_proj/v_proj/o_proj (and q_norm/k_norm) of the attention module; "
            f"model_type {arch.model_type!r} is not supported")


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SignalSpec:
    """One signal edge: component (kind, comp_layer, comp_head, comp_src) at ``token`` into one side
    of the firing (layer, head, dest, src), carried by singular directions ``sing`` of that head."""

    layer: int
    head: int
    dest: int
    src: int
    side: str  # "d": query side, "s": key side
    kind: int
    comp_layer: int
    comp_head: int
    comp_src: int
    token: int
    sing: tuple[int, ...]
    attribution: float | None = None
    drop: float | None = None
    span: bool = False  # key side only: the signal spans every visible key position (the authors' variant)

    @property
    def firing(self) -> Firing:
        return Firing(self.layer, self.head, self.dest, self.src)

    @property
    def rank(self) -> int:
        return len(self.sing)

    @property
    def label(self) -> tuple[int, int, int, int]:
        """The component's row label in ``FiringSolver.token_coeffs`` ([kind, layer, head, src])."""
        return (self.kind, self.comp_layer, self.comp_head, self.comp_src)

    def describe(self) -> str:
        k = KIND_NAMES.get(self.kind, "?")
        comp = {"head": f"A{self.comp_layer}.{self.comp_head}<{self.comp_src}", "mlp": f"M{self.comp_layer}",
                "emb": "E", "bias": f"B{self.comp_layer}", "offset": f"O{self.comp_layer}.{self.comp_head}"}.get(k, k)
        where = "all keys" if self.span else SIDES.get(self.side, self.side)
        return (f"{comp}@{self.token} -> A{self.layer}.{self.head}@{self.dest}<{self.src} "
                f"({where}, k={list(self.sing)})")

    @classmethod
    def from_edge(cls, firing: Firing, edge: SignalEdge, variant: str = "authors") -> "SignalSpec":
        """From a :class:`accpp.signals.SignalEdge` of ``FiringSolver.solve(firing)``; ``variant``: the
        solver's (with "authors" a key-side signal spans every visible key position)."""
        if not isinstance(edge, SignalEdge):
            raise NotASignalEdge(f"expected a SignalEdge, got {type(edge).__name__}")
        return cls(firing.layer, firing.head, firing.dest, firing.src, edge.side, edge.kind, edge.layer,
                   edge.head, edge.src, edge.token, tuple(int(k) for k in edge.sing), edge.attribution, edge.drop,
                   _span(edge.side, variant))

    @classmethod
    def from_graph(cls, graph, u: str, v: str, key=None, variant: str = "authors") -> "SignalSpec":
        """From the circuit graph edge u -> v (``key`` picks among parallel edges; needed if several);
        ``variant``: the tracer's (``circuit.meta["variant"]``)."""
        if not graph.has_edge(u, v):
            raise NotASignalEdge(f"the circuit has no edge {u!r} -> {v!r}")
        if key is None:
            keys = list(graph[u][v])
            if len(keys) != 1:
                raise NotASignalEdge(f"{len(keys)} parallel edges {u!r} -> {v!r}; pass key= (one of {keys})")
            key = keys[0]
        data, src_node, dst_node = graph.edges[u, v, key], graph.nodes[u], graph.nodes[v]
        if data.get("side") not in SIDES:
            raise NotASignalEdge(
                f"edge {u!r} -> {v!r} has side {data.get('side')!r}: only signal edges (side 'd' or 's', into a "
                "traced head firing) can be removed; seed edges into the logits carry no signal subspace")
        if dst_node.get("kind") != "head":
            raise NotASignalEdge(f"edge {u!r} -> {v!r} does not end at an attention firing")
        kind = _KIND_OF_NAME.get(src_node.get("kind"))
        if kind is None:
            raise NotASignalEdge(f"node {u!r} has unknown kind {src_node.get('kind')!r}")
        # graph nodes first created as seeds carry src = their token; token_coeffs labels use -1
        lay, head, src = src_node["layer"], src_node["head"], src_node["src"]
        if kind != KIND_HEAD:
            src = -1
            head = head if kind == KIND_OFFSET else -1
            lay = -1 if kind == KIND_EMB else lay
        return cls(dst_node["layer"], dst_node["head"], dst_node["dest"], dst_node["src"], data["side"], kind,
                   lay, head, src, data["token"],
                   tuple(int(k) for k in data["sing"]), data.get("attribution"), data.get("drop"),
                   _span(data["side"], variant))

    def with_sing(self, sing) -> "SignalSpec":
        return SignalSpec(**{**self.__dict__, "sing": tuple(int(k) for k in sing)})


def _span(side: str, variant: str) -> bool:
    if variant not in ("authors", "per-position"):
        raise ValueError(f"unknown tracer variant {variant!r}: 'authors' or 'per-position'")
    return side == "s" and variant == "authors"


def random_subspace(sing, dh: int, seed: int) -> tuple[int, ...]:
    """|sing| singular indices drawn uniformly (seeded) from the dh - |sing| indices not in ``sing``."""
    sing = sorted({int(k) for k in sing})
    if len(sing) == 0:
        raise ValueError("empty signal subspace")
    if any(k < 0 or k >= dh for k in sing):
        raise ValueError(f"singular indices {sing} outside 0..{dh - 1}")
    pool = torch.tensor([k for k in range(dh) if k not in sing], dtype=torch.long)
    if len(sing) > pool.numel():
        raise ValueError(f"a rank-{len(sing)} signal leaves only {pool.numel()} other directions of {dh}: "
                         "no disjoint random subspace of the same size")
    gen = torch.Generator().manual_seed(int(seed))
    pick = pool[torch.randperm(pool.numel(), generator=gen)[: len(sing)]]
    return tuple(sorted(pick.tolist()))


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


# ---------------------------------------------------------------------------------------------
@dataclass
class RunOutput:
    metric: float  # logit(correct) - logit(wrong) at the position
    final_resid: torch.Tensor  # (d,) the final norm's input at the position, float64
    attn: torch.Tensor  # (L, H, T, T) attention weights, float64
    logits: torch.Tensor  # (V,) at the position


@dataclass
class InterventionResult:
    spec: SignalSpec
    subspace: str  # "signal" | "random" | "random_matched" | "random_score" | "custom"
    sing_removed: tuple[int, ...]
    seed: int | None
    metric_before: float
    metric_after: float
    attn_before: float  # A_ds of the downstream firing, clean run
    attn_after: float
    final_resid_cos: float  # cos(final residual at the position, with vs without)
    head_input_cos: float  # cos(x_t, x_t - dx) at the head's input (t = d or the key token)
    removed_norm_ratio: float  # |dx~| / |x~_t|
    delta_norm_ratio: float  # |delta| / |qf_d| (or |kf_j|) in head space
    score_before: float = float("nan")  # head a's raw score at score_entry(spec), clean (this pass's q, k)
    score_after: float = float("nan")  # the same with the removal
    extra: dict = field(default_factory=dict)

    @property
    def metric_change(self) -> float:
        return self.metric_after - self.metric_before

    @property
    def attn_change(self) -> float:
        return self.attn_after - self.attn_before

    @property
    def score_change(self) -> float:
        """Change of head a's raw (pre-softmax) score at the entry the removal is matched on."""
        return self.score_after - self.score_before

    def row(self) -> dict:
        return dict(signal=self.spec.describe(), side=self.spec.side, rank=self.spec.rank, subspace=self.subspace,
                    seed=self.seed, sing=list(self.sing_removed), metric_before=self.metric_before,
                    metric_after=self.metric_after, metric_change=self.metric_change, attn_before=self.attn_before,
                    attn_after=self.attn_after, attn_change=self.attn_change, final_resid_cos=self.final_resid_cos,
                    head_input_cos=self.head_input_cos, removed_norm_ratio=self.removed_norm_ratio,
                    delta_norm_ratio=self.delta_norm_ratio, score_before=self.score_before,
                    score_after=self.score_after, score_change=self.score_change, attribution=self.spec.attribution,
                    traced_drop=self.spec.drop, **self.extra)


def _cos(x: torch.Tensor, y: torch.Tensor) -> float:
    """Cosine of two vectors (or of two matrices as flattened vectors: over all positions)."""
    x, y = x.reshape(-1), y.reshape(-1)
    return float((x @ y) / (x.norm() * y.norm()).clamp_min(1e-300))


class Intervener:
    """Signal interventions on one prompt: one decomposition and one clean run, then one forward
    pass per intervention. ``correct``/``wrong``: the metric's token ids at ``position``.
    ``replay=True`` skips recomputing the layers below the intervened one (identical results)."""

    def __init__(self, tracer, input_ids, correct: int, wrong: int, position: int = -1, replay: bool = True):
        check_supported(tracer.arch)
        self.tracer, self.model, self.arch = tracer, tracer.model, tracer.arch
        self.ids = torch.as_tensor(input_ids).reshape(-1)
        self.correct, self.wrong = int(correct), int(wrong)
        self.dec = tracer.decompose(self.ids)
        self.variant = getattr(tracer.config, "variant", "authors")
        self.solver = FiringSolver(self.dec, tracer.svd, variant=self.variant)
        self.T = self.dec.T
        self.position = position % self.T
        self.replay = replay  # replay the clean outputs of the layers below the intervention
        self.clean = self.run()

    # -- forward passes -------------------------------------------------------------------------
    @torch.no_grad()
    def run(self, patch: head_patch | None = None, skip_below: int = 0) -> RunOutput:
        """One forward pass (optionally under ``patch``). ``skip_below=L`` replays the clean run's
        outputs of layers < L instead of recomputing them (they cannot change: an intervention at
        layer L acts after them), which is the same computation, only cheaper."""
        layers = get_path(self.model, self.arch.layers_path)
        seen, attn, handles, swapped = {}, {}, [], []
        final = get_path(self.model, self.arch.final_norm_path)
        handles.append(final.register_forward_pre_hook(lambda mod, args: seen.__setitem__("x", args[0])))
        for i, layer in enumerate(layers):
            mod = getattr(layer, self.arch.attn_name)
            handles.append(mod.register_forward_hook(
                lambda mod, args, out, i=i: attn.__setitem__(i, out[1])))
            if patch is None and skip_below == 0 and not hasattr(self, "_layer_out"):
                handles.append(layer.register_forward_hook(
                    lambda mod, args, out, i=i: seen.__setitem__(("layer", i), out)))
        try:
            for i in range(skip_below):
                layer = layers[i]
                swapped.append((layer, layer.__dict__.get("forward")))
                layer.forward = (lambda *a, _out=self._layer_out[i], **k: _out)
            keep = self.T - self.position  # logits for positions >= self.position only
            if patch is None:
                out = self.model(self.ids[None], logits_to_keep=keep)
            else:
                with patch:
                    out = self.model(self.ids[None], logits_to_keep=keep)
        finally:
            for h in handles:
                h.remove()
            for layer, fwd in swapped:
                if fwd is None:
                    del layer.forward
                else:
                    layer.forward = fwd
        if not hasattr(self, "_layer_out"):
            self._layer_out = [seen[("layer", i)] for i in range(len(layers))]
        clean_attn = getattr(self, "clean", None)
        maps = []
        for i in range(len(layers)):
            if i in attn and attn[i] is not None:
                maps.append(attn[i][0].detach().to(torch.float64))
            else:  # a replayed layer: the clean run's weights
                maps.append(clean_attn.attn[i])
        A = torch.stack(maps)
        if patch is not None:  # the module still returns head a's clean weights; report the patched ones
            A[patch.L, patch.a] = patch.pattern
        logits = out.logits[0, 0].detach().to(torch.float64)
        return RunOutput(float(logits[self.correct] - logits[self.wrong]),
                         seen["x"][0, self.position].detach().to(torch.float64), A, logits)

    # -- the signal in head space and in the input space ------------------------------------------
    def validate(self, spec: SignalSpec) -> None:
        """Raise ValueError / NotASignalEdge if ``spec`` cannot be a signal edge of this prompt."""
        arch, T = self.arch, self.T
        if spec.side not in SIDES:
            raise ValueError(f"unknown side {spec.side!r}: 'd' (query side) or 's' (key side)")
        if not (0 <= spec.layer < arch.n_layers and 0 <= spec.head < arch.n_heads):
            raise ValueError(f"no head {spec.layer}.{spec.head} in a {arch.n_layers}-layer, {arch.n_heads}-head model")
        J = visible(T, spec.dest, arch.layers[spec.layer].sliding_window) if 0 <= spec.dest < T else None
        if J is None or spec.src not in J.tolist():
            raise ValueError(f"firing {spec.dest}<{spec.src} is not a visible pair in a {T}-token prompt")
        if spec.side == "d" and spec.token != spec.dest:
            raise NotASignalEdge(f"a query-side signal sits at the destination token {spec.dest}, not {spec.token}")
        if spec.side == "s" and spec.token not in J.tolist():
            raise NotASignalEdge(f"key token {spec.token} is not visible from destination {spec.dest}")
        dh = arch.d_head
        if len(spec.sing) == 0 or len(set(spec.sing)) != len(spec.sing) or any(not 0 <= k < dh for k in spec.sing):
            raise ValueError(f"singular indices must be distinct, non-empty, in 0..{dh - 1}; got {list(spec.sing)}")
        if spec.kind not in (KIND_EMB, KIND_HEAD, KIND_MLP, KIND_BIAS, KIND_OFFSET):
            raise NotASignalEdge(f"unknown component kind {spec.kind}")

    def rows(self, spec: SignalSpec) -> list[int]:
        """Token rows the signal acts at: [d] (query side), [j] (key side at one position), or every
        key position visible from d (``spec.span``, the authors' key side)."""
        if spec.span:
            return visible(self.T, spec.dest, self.arch.layers[spec.layer].sliding_window).tolist()
        return [spec.token]

    def _coef_at(self, spec: SignalSpec, t: int) -> torch.Tensor | None:
        C, labels = self.solver.token_coeffs(spec.layer, spec.head, t, "q" if spec.side == "d" else "k")
        hit = torch.nonzero((labels == torch.tensor(spec.label)).all(-1))
        return C[int(hit[0, 0])] if hit.numel() == 1 else None

    def coefficients(self, spec: SignalSpec) -> torch.Tensor:
        """The component's coefficients on head (layer, head)'s singular directions at the signal's
        token(s): alpha_c (dh,) (query side), beta_{c,j} (dh,) (key side), or (n, dh) over the rows of
        :meth:`rows` for a spanning key-side signal (zeros where the component is absent: an upstream
        head's output from source j' exists at key positions >= j' only)."""
        self.validate(spec)
        rows = self.rows(spec)
        found = [self._coef_at(spec, t) for t in rows]
        if all(c is None for c in found):
            raise NotASignalEdge(
                f"{spec.describe()}: no component {KIND_NAMES.get(spec.kind)} (layer {spec.comp_layer}, head "
                f"{spec.comp_head}, source {spec.comp_src}) in the residual entering layer {spec.layer} at token "
                f"{spec.token}" + (" or any other visible key position" if spec.span else ""))
        if not spec.span:
            return found[0]
        dh = self.arch.d_head
        return torch.stack([c if c is not None else torch.zeros(dh, dtype=torch.float64) for c in found])

    def head_delta(self, spec: SignalSpec, sing=None) -> torch.Tensor:
        """delta subtracted from the rotated query qf_d (or head a's key kf_j): (coef * 1_K) Ut^{-1}
        (or Vt^{-1}), K = ``sing`` (default: the signal's own indices); (dh,), or (n, dh) for a
        spanning key-side signal (one row per position of :meth:`rows`)."""
        coef = self.coefficients(spec)
        sing = spec.sing if sing is None else tuple(sing)
        dh = coef.shape[-1]
        if any(not 0 <= k < dh for k in sing):
            raise ValueError(f"singular indices {list(sing)} outside 0..{dh - 1}")
        masked = torch.zeros_like(coef)
        idx = torch.tensor(sing, dtype=torch.long)
        masked[..., idx] = coef[..., idx]
        B = (self.solver.svd.Ut if spec.side == "d" else self.solver.svd.Vt)[spec.layer, spec.head]
        return torch.linalg.solve(B.mT, masked.reshape(-1, dh).T).T.reshape(coef.shape)  # delta B = masked

    def input_delta(self, spec: SignalSpec, delta: torch.Tensor) -> torch.Tensor:
        """Minimum-norm dx~ (in units of x / sigma_t) whose effect on head a is ``delta``: (d_model,),
        or (n, d_model) for a spanning key-side signal."""
        if spec.span:
            return torch.stack([self._input_delta_at(spec, t, delta[i]) for i, t in enumerate(self.rows(spec))])
        return self._input_delta_at(spec, spec.token, delta)

    def _input_delta_at(self, spec: SignalSpec, t: int, delta: torch.Tensor) -> torch.Tensor:
        L, lw = spec.layer, self.arch.layers[spec.layer]
        side = "q" if spec.side == "d" else "k"
        v = delta
        if self.dec.rot[L] is not None:
            v = torch.linalg.solve(self.dec.rot[L][t].mT, v)  # undo v -> v R_t
        norm = lw.q_norm if side == "q" else lw.k_norm
        if norm is not None:
            rho = self.dec.rho_q(L)[t, spec.head] if side == "q" else self.dec.rho_k(L)[t, lw.kv_of(spec.head)]
            g = norm.gain
            v = torch.where(g != 0, v / torch.where(g != 0, g, torch.ones_like(g)), torch.zeros_like(v)) * rho
        W = lw.wq_eff(spec.head) if side == "q" else lw.wk_eff(lw.kv_of(spec.head))
        # gelsd (SVD): the default CPU driver, gelsy, reads an uninitialised pivot array in torch and can
        # return rank 0 on exactly repeated or zero rows of W (pytorch/pytorch#71222)
        return torch.linalg.lstsq(W.T, v[:, None], driver="gelsd").solution[:, 0]

    # -- interventions ----------------------------------------------------------------------------
    def apply(self, spec: SignalSpec, delta: torch.Tensor | None) -> tuple[RunOutput, head_patch]:
        """Forward pass with ``delta`` subtracted at head (layer, head)'s query/key (see head_patch)."""
        row = torch.tensor(self.rows(spec)) if spec.span else spec.token
        patch = head_patch(self.model, self.arch, spec.layer, spec.head, spec.side, row, delta)
        return self.run(patch, skip_below=spec.layer if self.replay else 0), patch

    def score_entry(self, spec: SignalSpec) -> tuple[int, int]:
        """(d, j): the entry of head (layer, head)'s score matrix a removal is matched on. The firing's
        own score (dest, src), except for a key-side signal at one key position j other than the source
        (the per-position variant), whose removal changes the score (dest, j) alone."""
        if spec.side == "s" and not spec.span:
            return spec.dest, spec.token
        return spec.dest, spec.src

    def _clean_vec(self, L: int, a: int, t: int, side: str) -> torch.Tensor:
        """qf_t (side "q") or head a's kf_t (side "k") of the clean run, from the decomposition."""
        B = (self.solver.svd.Ut if side == "q" else self.solver.svd.Vt)[L, a]
        return torch.linalg.solve(B.mT, self.solver.token_coeffs(L, a, t, side)[0].sum(0))

    def score_change(self, spec: SignalSpec, delta: torch.Tensor) -> float:
        """Change of head a's raw score scale * qf_d . kf_j at :meth:`score_entry` when ``delta`` (as
        :meth:`head_delta` returns it) is subtracted: -scale * delta . kf_j (query side) or
        -scale * qf_d . delta_j (key side, the row of delta at j; 0 if the removal does not act at j).
        Exact: the score is linear in each of qf_d and kf_j (before soft-capping, which Gemma-2 applies
        after it)."""
        d, j = self.score_entry(spec)
        L, a = spec.layer, spec.head
        scale = self.arch.layers[L].scale
        if spec.side == "d":
            return -scale * float(delta @ self._clean_vec(L, a, j, "k"))
        rows = self.rows(spec)
        if j not in rows:
            return 0.0
        row = delta[rows.index(j)] if spec.span else delta
        return -scale * float(self._clean_vec(L, a, d, "q") @ row)

    def remove(self, spec: SignalSpec, subspace: str = "signal", seed: int | None = None,
               sing=None) -> InterventionResult:
        """Remove the signal (``subspace="signal"``), a random same-size subspace of the other singular
        directions (``"random"``, ``seed`` required), or that same random subspace with its removal
        rescaled by one factor so that

        - ``"random_matched"``: |dx~| equals the signal's (matched in removed norm; the random
          directions carry less of the component), or
        - ``"random_score"``: its change of head a's raw score at :meth:`score_entry` equals the
          signal's (matched in removed score: same sign and size, so the two removals differ only in
          which directions they act along; the factor is negative where the component's part on the
          random directions raises that score),

        or explicit indices (``"custom"``, ``sing``). ``extra["norm_scale"]`` / ``extra["score_scale"]``
        is the rescaling factor (1 unless so matched); ``extra["predicted_score_change"]`` the change of
        the score :meth:`score_change` predicts (the result's ``score_change`` is the model's)."""
        self.validate(spec)
        if subspace == "signal":
            K = spec.sing
        elif subspace in ("random", "random_matched", "random_score"):
            if seed is None:
                raise ValueError(f"subspace={subspace!r} needs a seed")
            K = random_subspace(spec.sing, self.arch.d_head, seed)
        elif subspace == "custom":
            if sing is None:
                raise ValueError("subspace='custom' needs sing=")
            K = tuple(int(k) for k in sing)
        else:
            raise ValueError(f"unknown subspace {subspace!r}: 'signal', 'random', 'random_matched', 'random_score' "
                             "or 'custom'")
        delta = self.head_delta(spec, K)
        dx = self.input_delta(spec, delta)
        norm_scale = score_scale = 1.0
        if subspace == "random_matched":  # same directions as 'random', rescaled to the signal's removed norm
            target = self.input_delta(spec, self.head_delta(spec, spec.sing)).norm()
            if not float(dx.norm()) > 0:
                raise ValueError(f"{spec.describe()}: the component has no part on the random directions {list(K)}; "
                                 "cannot match the signal's removed norm")
            norm_scale = float(target / dx.norm())
            delta, dx = delta * norm_scale, dx * norm_scale
        elif subspace == "random_score":  # same directions, rescaled to the signal's change of the score
            target = self.score_change(spec, self.head_delta(spec, spec.sing))
            got = self.score_change(spec, delta)
            if got == 0.0:
                raise ValueError(f"{spec.describe()}: removing the component's part on the random directions {list(K)} "
                                 f"leaves the score at {self.score_entry(spec)} unchanged; cannot match the signal's "
                                 "change of the score")
            score_scale = target / got
            delta, dx = delta * score_scale, dx * score_scale
        predicted = self.score_change(spec, delta)
        out, patch = self.apply(spec, delta)
        L, a, d, s = spec.layer, spec.head, spec.dest, spec.src
        ed, ej = self.score_entry(spec)
        t = torch.tensor(self.rows(spec)) if spec.span else spec.token
        x = self.dec.acts.resid[L, t] / (self.dec.sigma[L, t][:, None] if spec.span else self.dec.sigma[L, t])  # x~_t
        clean_head = self._clean_head_vector(spec)
        return InterventionResult(
            spec=spec, subspace=subspace, sing_removed=tuple(K), seed=seed,
            metric_before=self.clean.metric, metric_after=out.metric,
            attn_before=float(self.clean.attn[L, a, d, s]), attn_after=float(out.attn[L, a, d, s]),
            final_resid_cos=_cos(self.clean.final_resid, out.final_resid),
            head_input_cos=_cos(x, x - dx), removed_norm_ratio=float(dx.norm() / x.norm()),
            delta_norm_ratio=float(delta.norm() / clean_head.norm()),
            score_before=float(patch.clean_scores[ed, ej]), score_after=float(patch.scores[ed, ej]),
            extra=dict(norm_scale=norm_scale, score_scale=score_scale, predicted_score_change=predicted))

    def _clean_head_vector(self, spec: SignalSpec) -> torch.Tensor:
        """qf_d (query side) or kf_j (key side; every row of :meth:`rows` when spanning) of the clean
        run, from the decomposition."""
        side = "q" if spec.side == "d" else "k"
        B = (self.solver.svd.Ut if side == "q" else self.solver.svd.Vt)[spec.layer, spec.head]
        out = [torch.linalg.solve(B.mT, self.solver.token_coeffs(spec.layer, spec.head, t, side)[0].sum(0))
               for t in self.rows(spec)]
        return torch.stack(out) if spec.span else out[0]


def remove_signal(tracer, input_ids, spec: SignalSpec, correct: int, wrong: int, subspace: str = "signal",
                  seed: int | None = None, position: int = -1) -> InterventionResult:
    """One-off: :class:`Intervener` on the prompt, then ``remove(spec, subspace, seed)``."""
    return Intervener(tracer, input_ids, correct, wrong, position).remove(spec, subspace, seed)


# ---------------------------------------------------------------------------------------------
def top_seed_edges(graph, k: int, variant: str = "authors") -> list[SignalSpec]:
    """The ``k`` signal edges of highest attribution into the circuit's seed firings (the head
    firings with an edge into the logits node: the ones that write the metric directly);
    ``variant``: the tracer's (``circuit.meta["variant"]``)."""
    seeds = {u for u, _, d in graph.edges(data=True)
             if d.get("side") == "seed" and graph.nodes[u].get("kind") == "head" and graph.nodes[u].get("traced")}
    edges = [(d["attribution"], u, v, key) for v in seeds
             for u, _, key, d in graph.in_edges(v, keys=True, data=True) if d.get("side") in SIDES]
    edges.sort(key=lambda e: (-e[0], e[1], e[2], e[3]))
    return [SignalSpec.from_graph(graph, u, v, key, variant) for _, u, v, key in edges[:k]]


def compare_subspaces(iv: Intervener, spec: SignalSpec, n_random: int, seed: int = 0,
                      controls=("random",)) -> list[InterventionResult]:
    """The signal removed, then for each control in ``controls`` ("random", "random_matched",
    "random_score") ``n_random`` random same-size subspaces (seeds seed, seed+1, ...; the same draws for
    every control)."""
    for c in controls:
        if c not in CONTROLS:
            raise ValueError(f"unknown control {c!r}: one of {', '.join(map(repr, CONTROLS))}")
    return [iv.remove(spec)] + [iv.remove(spec, c, seed=seed + r) for c in controls for r in range(n_random)]


def prompt_ratios(df, control: str = "random_score"):
    """Per prompt: median |dLD| of its signal removals, median |dLD| of its ``control`` removals (every
    draw of every edge of the prompt) and their ratio. ``df`` as for :func:`paired_summary`. Returns a
    DataFrame indexed by prompt with columns ``median_abs_dld_signal``, ``median_abs_dld_control``,
    ``ratio``, ``n_edges``, ``n_control``; a prompt without both kinds of rows, or whose control
    removals leave the metric exactly unchanged, is a ValueError (its ratio would be undefined)."""
    import pandas as pd

    need = {"prompt", "subspace", "metric_change"}
    missing = need - set(df.columns)
    if missing:
        raise ValueError(f"prompt_ratios: missing columns {sorted(missing)}")
    d = df.assign(abs_dld=df["metric_change"].abs())
    sig, ctl = d[d["subspace"] == "signal"], d[d["subspace"] == control]
    if sig.empty or ctl.empty:
        raise ValueError(f"prompt_ratios: need rows with subspace 'signal' and {control!r}")
    sig, ctl = sig.groupby("prompt")["abs_dld"], ctl.groupby("prompt")["abs_dld"]
    out = pd.DataFrame(dict(median_abs_dld_signal=sig.median(), median_abs_dld_control=ctl.median(),
                            n_edges=sig.size(), n_control=ctl.size()))
    lacking = out.index[out[["median_abs_dld_signal", "median_abs_dld_control"]].isna().any(axis=1)].tolist()
    if lacking:
        raise ValueError(f"prompt_ratios: prompts {lacking[:5]} lack signal or {control!r} removals")
    zero = out.index[out["median_abs_dld_control"] <= 0].tolist()
    if zero:
        raise ValueError(f"prompt_ratios: on prompts {zero[:5]} the median {control!r} removal leaves the metric "
                         "unchanged; the ratio is undefined")
    out["n_edges"], out["n_control"] = out["n_edges"].astype(int), out["n_control"].astype(int)
    out["ratio"] = out["median_abs_dld_signal"] / out["median_abs_dld_control"]
    return out


def paired_summary(df, control: str = "random_score", seed: int = 0, n_boot: int = 2000) -> dict:
    """Signal removals against a control, per prompt, per edge and over edges.

    ``df``: one row per intervention (:meth:`InterventionResult.row` plus ``edge`` and ``prompt``
    columns), with ``subspace`` "signal" for one row per edge and ``control`` for that edge's draws.
    Returns (all |dLD| = |change of the metric|):

    - ``gm_ratio``: the geometric mean over prompts of the per-prompt ratio of median |dLD|, signal /
      control (:func:`prompt_ratios`); ``gm_ratio_ci_low`` / ``_ci_high``: its percentile bootstrap
      interval over prompts (``compendium.stats.geometric_mean_ci``, seeded); ``prompt_ratios``: the
      per-prompt ratios (in prompt order);
    - ``abs_dld_ratio``: median |dLD| of all signal removals / median |dLD| of all control removals
      (pooled over prompts); ``abs_dld_ratio_ci_low`` / ``_ci_high``: 2.5th / 97.5th percentiles over
      ``n_boot`` bootstrap resamples of the prompts (each brings its edges and their draws), seeded;
    - ``wilcoxon_p``: one-sided Wilcoxon signed-rank test, per edge signal |dLD| minus the mean |dLD|
      of its control draws (paired, > 0); ``frac_edges_signal_above``: edges where the signal's |dLD|
      exceeds every one of its draws';
    - ``median_rel_dld_signal`` / ``_control``: median of dLD / LD before (negative: the metric falls);
    - ``median_head_input_cos_signal`` / ``_control``: cosine at the intervention point;
      ``median_final_resid_cos_signal``; ``median_removed_norm_signal`` / ``_control``;
    - ``n_edges``, ``n_prompts``, ``n_draws`` (draws per edge, the minimum over edges).
    """
    import numpy as np
    from scipy.stats import wilcoxon

    from compendium.stats import geometric_mean, geometric_mean_ci

    need = {"edge", "prompt", "subspace", "metric_change", "metric_before", "head_input_cos", "final_resid_cos",
            "removed_norm_ratio"}
    missing = need - set(df.columns)
    if missing:
        raise ValueError(f"paired_summary: missing columns {sorted(missing)}")
    d = df.assign(abs_dld=df["metric_change"].abs(), rel_dld=df["metric_change"] / df["metric_before"])
    sig = d[d["subspace"] == "signal"].set_index("edge")
    ctl = d[d["subspace"] == control]
    if sig.empty or ctl.empty:
        raise ValueError(f"paired_summary: need rows with subspace 'signal' and {control!r}")
    if sig.index.duplicated().any():
        raise ValueError("paired_summary: more than one signal row for an edge")
    by_edge = ctl.groupby("edge")["abs_dld"]
    missing_edges = set(sig.index) - set(by_edge.groups)
    if missing_edges:
        raise ValueError(f"paired_summary: edges without {control!r} draws: {sorted(missing_edges)[:5]}")
    ctl_mean, ctl_max = by_edge.mean().reindex(sig.index), by_edge.max().reindex(sig.index)
    diff = (sig["abs_dld"] - ctl_mean).to_numpy()
    p = float(wilcoxon(diff, alternative="greater").pvalue) if np.any(diff != 0) else 1.0

    per_prompt = prompt_ratios(df, control)
    gm_lo, gm_hi = geometric_mean_ci(per_prompt["ratio"], n_boot=n_boot, seed=seed)
    prompts = np.array(sorted(d["prompt"].unique()))
    sig_by_p = {q: g["abs_dld"].to_numpy() for q, g in sig.groupby("prompt")}
    ctl_by_p = {q: g["abs_dld"].to_numpy() for q, g in ctl.groupby("prompt")}
    rng = np.random.default_rng(seed)
    boot = np.empty(n_boot)
    for b in range(n_boot):
        pick = rng.choice(prompts, size=len(prompts), replace=True)
        s_ = np.concatenate([sig_by_p.get(q, np.zeros(0)) for q in pick])
        c_ = np.concatenate([ctl_by_p.get(q, np.zeros(0)) for q in pick])
        boot[b] = np.median(s_) / np.median(c_) if len(s_) and len(c_) and np.median(c_) > 0 else np.nan
    boot = boot[np.isfinite(boot)]
    ratio = float(sig["abs_dld"].median() / ctl["abs_dld"].median())
    return dict(
        gm_ratio=geometric_mean(per_prompt["ratio"]), gm_ratio_ci_low=gm_lo, gm_ratio_ci_high=gm_hi,
        prompt_ratios=[float(x) for x in per_prompt["ratio"]],
        abs_dld_ratio=ratio,
        abs_dld_ratio_ci_low=float(np.percentile(boot, 2.5)) if len(boot) else float("nan"),
        abs_dld_ratio_ci_high=float(np.percentile(boot, 97.5)) if len(boot) else float("nan"),
        wilcoxon_p=p, frac_edges_signal_above=float((sig["abs_dld"] > ctl_max).mean()),
        median_abs_dld_signal=float(sig["abs_dld"].median()), median_abs_dld_control=float(ctl["abs_dld"].median()),
        median_rel_dld_signal=float(sig["rel_dld"].median()), median_rel_dld_control=float(ctl["rel_dld"].median()),
        median_head_input_cos_signal=float(sig["head_input_cos"].median()),
        median_head_input_cos_control=float(ctl["head_input_cos"].median()),
        median_final_resid_cos_signal=float(sig["final_resid_cos"].median()),
        median_removed_norm_signal=float(sig["removed_norm_ratio"].median()),
        median_removed_norm_control=float(ctl["removed_norm_ratio"].median()),
        n_edges=int(len(sig)), n_prompts=int(len(prompts)), n_draws=int(by_edge.size().min()),
        n_boot=int(len(boot)))


def score_matching_error(df, control: str = "random_score") -> float:
    """Largest |score change of a ``control`` removal - score change of its edge's signal removal| over
    the table (the model's raw scores at the matched entry, ``score_change`` of the rows), relative to
    the largest |signal score change|: ~1e-7 for a float32 model, 0 up to rounding in float64."""
    need = {"edge", "subspace", "score_change"}
    missing = need - set(df.columns)
    if missing:
        raise ValueError(f"score_matching_error: missing columns {sorted(missing)}")
    sig = df[df["subspace"] == "signal"].set_index("edge")["score_change"]
    ctl = df[df["subspace"] == control]
    if sig.empty or ctl.empty:
        raise ValueError(f"score_matching_error: need rows with subspace 'signal' and {control!r}")
    gap = (ctl["score_change"].to_numpy() - sig.reindex(ctl["edge"]).to_numpy())
    return float(abs(gap).max() / max(float(sig.abs().max()), 1e-300))


def measure_intervention_selective(df, paired: dict[str, dict], consistency: float, n_random: int,
                                   config: dict | None = None):
    """Claim accpp/intervention-selective: removing a traced signal moves the task metric more than
    removing a random same-rank subspace that changes the firing's score as much.

    ``df``: one row per intervention (as for :func:`paired_summary`, plus ``attn_drop`` and
    ``score_change``; a ``sing`` column is left out of the recorded table); ``paired``:
    :func:`paired_summary` against each control, keyed "random_score" (the check's control: matched in
    the removed score), "random_matched" (matched in removed norm) and "random" (as drawn), all
    evidence but the first; ``consistency``: the largest |A_after - (A - traced drop)| over the signal
    removals (the model against the tracer's prediction). The check reads ``abs_dld_ratio``: the
    geometric mean over prompts of the per-prompt ratio of median |dLD| (signal / score-matched), with
    its bootstrap interval over prompts. The brief's cosine (the claim's paper value) goes into the
    note beside the measured cosines.
    """
    from compendium.claims import Measurement, get_claim

    who = "measure_intervention_selective"
    missing = [c for c in CONTROLS if c not in paired]
    if missing:
        raise ValueError(f"{who}: no paired summary against {missing}")
    for col in ("subspace", "attn_drop", "score_change"):
        if col not in df:
            raise ValueError(f"{who}: the intervention table lacks column {col!r}")
    sig = df[df["subspace"] == "signal"]
    if len(sig) == 0:
        raise ValueError(f"{who}: no signal removals in the table")
    main, norm, rnd = paired["random_score"], paired["random_matched"], paired["random"]
    paper_cos = float(get_claim("accpp/intervention-selective").paper_value)
    cfg = dict(config or {})
    n_edges = int(len(sig))
    score_ctl = df[df["subspace"] == "random_score"]
    scale = score_ctl["score_scale"].abs() if "score_scale" in score_ctl else None
    return Measurement(
        claim="accpp/intervention-selective",
        values=dict(abs_dld_ratio=main["gm_ratio"], abs_dld_ratio_ci_low=main["gm_ratio_ci_low"],
                    abs_dld_ratio_ci_high=main["gm_ratio_ci_high"], n_prompts=main["n_prompts"],
                    n_edges=n_edges, n_random=n_random),
        evidence=dict(
            control="random_score (same directions as random, rescaled so that the firing's raw score changes as "
                    "much as under the signal's removal)",
            prompt_ratios=[round(x, 4) for x in main["prompt_ratios"]],
            score_matching_rel_error=score_matching_error(df, "random_score"),
            median_abs_score_scale=float(scale.median()) if scale is not None else float("nan"),
            pooled_abs_dld_ratio=main["abs_dld_ratio"], pooled_abs_dld_ratio_ci_low=main["abs_dld_ratio_ci_low"],
            pooled_abs_dld_ratio_ci_high=main["abs_dld_ratio_ci_high"], wilcoxon_p=main["wilcoxon_p"],
            frac_edges_signal_above=main["frac_edges_signal_above"],
            median_abs_dld_signal=main["median_abs_dld_signal"],
            median_abs_dld_score_matched=main["median_abs_dld_control"],
            median_rel_dld_signal=main["median_rel_dld_signal"],
            median_rel_dld_score_matched=main["median_rel_dld_control"],
            median_removed_norm_score_matched=main["median_removed_norm_control"],
            abs_dld_ratio_vs_norm_matched=norm["gm_ratio"],
            abs_dld_ratio_vs_norm_matched_ci_low=norm["gm_ratio_ci_low"],
            abs_dld_ratio_vs_norm_matched_ci_high=norm["gm_ratio_ci_high"],
            pooled_abs_dld_ratio_vs_norm_matched=norm["abs_dld_ratio"], wilcoxon_p_vs_norm_matched=norm["wilcoxon_p"],
            median_abs_dld_norm_matched=norm["median_abs_dld_control"],
            median_rel_dld_norm_matched=norm["median_rel_dld_control"],
            median_head_input_cos_signal=main["median_head_input_cos_signal"],
            median_head_input_cos_norm_matched=norm["median_head_input_cos_control"],
            median_head_input_cos_score_matched=main["median_head_input_cos_control"],
            median_final_resid_cos_signal=main["median_final_resid_cos_signal"],
            median_removed_norm_signal=main["median_removed_norm_signal"],
            median_removed_norm_random=rnd["median_removed_norm_control"],
            abs_dld_ratio_vs_random=rnd["gm_ratio"], abs_dld_ratio_vs_random_ci_low=rnd["gm_ratio_ci_low"],
            abs_dld_ratio_vs_random_ci_high=rnd["gm_ratio_ci_high"], wilcoxon_p_vs_random=rnd["wilcoxon_p"],
            median_attn_drop_signal=float(sig["attn_drop"].median()),
            tracer_consistency_max_abs=float(consistency)),
        tables={"04_signal_interventions": df.drop(columns=["sing"], errors="ignore")},
        config=cfg, unit="x (median |dLD| per prompt, signal / score-matched random; geometric mean over prompts)",
        note=(f"{cfg.get('model', 'the model')}, {main['n_prompts']} IOI prompts, {n_edges} signal edges into "
              f"seed firings, {n_random} draws per control. Signal / score-matched random: geometric mean "
              f"{main['gm_ratio']:.2f} (95% interval {main['gm_ratio_ci_low']:.2f}-{main['gm_ratio_ci_high']:.2f}); "
              f"signal / norm-matched random: {norm['gm_ratio']:.2f} ({norm['gm_ratio_ci_low']:.2f}-"
              f"{norm['gm_ratio_ci_high']:.2f}). Cosine at the intervention point: median "
              f"{main['median_head_input_cos_signal']:.4f} for signals (brief: about {paper_cos}); final residual "
              f"{main['median_final_resid_cos_signal']:.4f}. Relative change of the logit difference: median "
              f"{main['median_rel_dld_signal']:+.2f} (signal) vs {main['median_rel_dld_control']:+.3f} (score-matched), "
              f"{norm['median_rel_dld_control']:+.3f} (norm-matched)."))
