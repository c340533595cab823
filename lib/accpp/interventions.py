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

plus the size of the removed vector relative to the head's input. Summaries over many removals
(per edge, per prompt, pooled) and the claim's measurement are :mod:`accpp.intervention_summary`.

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

Where it acts in the model: :class:`accpp.head_patch.head_patch` subtracts delta from head a's own
rotated query (key) inside the model's forward pass at layer L, so no other head changes; everything
else (other heads of layer L, all later layers, the logits) is the real model's computation. Layers
below L are untouched. The details are in :mod:`accpp.head_patch`.

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

from accpp.arch import get_path
from accpp.decompose import KIND_BIAS, KIND_EMB, KIND_HEAD, KIND_MLP, KIND_NAMES, KIND_OFFSET, visible
from accpp.head_patch import SIDES, check_supported, head_patch
from accpp.signals import Firing, FiringSolver, SignalEdge

__all__ = ["CONTROLS", "NotASignalEdge", "SignalSpec", "InterventionResult", "Intervener", "random_subspace",
           "remove_signal", "top_seed_edges", "compare_subspaces"]

CONTROLS = ("random", "random_matched", "random_score")
_KIND_OF_NAME = {v: k for k, v in KIND_NAMES.items()}


class NotASignalEdge(ValueError):
    """The edge given is not a signal edge of a traced firing (or names no component there)."""


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

    def _memo(self, name: str) -> dict:
        """A per-prompt cache (the same numbers every time they are asked): "coef" (each edge's
        coefficients), "clean_sum" / "clean" (the clean head vectors, per layer, head, token, side),
        "pinv" (one pseudo-inverse per head and side)."""
        return self.__dict__.setdefault("_caches", {}).setdefault(name, {})

    def _coef_at(self, spec: SignalSpec, t: int) -> torch.Tensor | None:
        side = "q" if spec.side == "d" else "k"
        C, labels = self.solver.token_coeffs(spec.layer, spec.head, t, side)
        self._memo("clean_sum")[(spec.layer, spec.head, t, side)] = C.sum(0)  # the clean vector's, for free
        hit = torch.nonzero((labels == torch.tensor(spec.label)).all(-1))
        return C[int(hit[0, 0])] if hit.numel() == 1 else None

    def coefficients(self, spec: SignalSpec) -> torch.Tensor:
        """The component's coefficients on head (layer, head)'s singular directions at the signal's
        token(s): alpha_c (dh,) (query side), beta_{c,j} (dh,) (key side), or (n, dh) over the rows of
        :meth:`rows` for a spanning key-side signal (zeros where the component is absent: an upstream
        head's output from source j' exists at key positions >= j' only)."""
        self.validate(spec)
        rows = self.rows(spec)
        key = (spec.side, spec.layer, spec.head, spec.label, tuple(rows))
        if key in self._memo("coef"):
            return self._memo("coef")[key]
        found = [self._coef_at(spec, t) for t in rows]
        if all(c is None for c in found):
            raise NotASignalEdge(
                f"{spec.describe()}: no component {KIND_NAMES.get(spec.kind)} (layer {spec.comp_layer}, head "
                f"{spec.comp_head}, source {spec.comp_src}) in the residual entering layer {spec.layer} at token "
                f"{spec.token}" + (" or any other visible key position" if spec.span else ""))
        if not spec.span:
            out = found[0]
        else:
            dh = self.arch.d_head
            out = torch.stack([c if c is not None else torch.zeros(dh, dtype=torch.float64) for c in found])
        self._memo("coef")[key] = out
        return out

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
        return self._pinv_head(L, spec.head, side) @ v

    def _pinv_head(self, L: int, head: int, side: str) -> torch.Tensor:
        """pinv((W^eff)^T) (d_model, dh) of the q head ("q") or the head's kv head ("k"), once per head: the
        minimum-norm dx with dx W = v is pinv(W^T) v (an SVD, as the gelsd least-squares driver; not gelsy's
        pivoted QR, which can return rank 0 on repeated or zero rows of W, pytorch/pytorch#71222)."""
        lw = self.arch.layers[L]
        key, memo = (L, head if side == "q" else lw.kv_of(head), side), self._memo("pinv")
        if key not in memo:
            W = lw.wq_eff(head) if side == "q" else lw.wk_eff(lw.kv_of(head))
            memo[key] = torch.linalg.pinv(W.T)
        return memo[key]

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
        key, memo = (L, a, t, side), self._memo("clean")
        if key not in memo:
            B = (self.solver.svd.Ut if side == "q" else self.solver.svd.Vt)[L, a]
            total = self._memo("clean_sum").get(key)
            if total is None:
                total = self.solver.token_coeffs(L, a, t, side)[0].sum(0)
            memo[key] = torch.linalg.solve(B.mT, total)
        return memo[key]

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
        out = [self._clean_vec(spec.layer, spec.head, t, side) for t in self.rows(spec)]
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
