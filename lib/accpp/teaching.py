"""ACC++ written out plainly, one step at a time, for the method notebook (``notebooks/accpp/00_method``).

Every quantity is recomputed here from the Hugging Face model's own weights and activations with
plain float64 algebra in the paper's row-vector notation, without the tracer's code
(:mod:`accpp.decompose`, :mod:`accpp.signals`, :mod:`accpp.trace`), so that the notebook can
assert that both give the same numbers. For the firing (layer L, head a, destination d, source s):

    x~_t = x_t / sigma_t                          sigma_t: RMSNorm scale of the residual x_t at t
    W_Q, W_K (d_model, d_head)                    the head's projections, input-norm gain folded in
    Omega = W_Q W_K^T = U diag(sig) V^T           truncated to rank d_head
    M_t = W_Q R_t W_Q^+ (query), W_K R_t W_K^+ (key)   R_t: rotary matrix, rot_t(v) = v R_t
    S_j = scale * (x~_d M_d) Omega (x~_j M_j)^T   score of key j <= d

Llama-family models only (SmolLM2 and the tiny "llama" of :mod:`accpp.testing`): RMSNorm, rotary
positions, grouped-query attention, no biases. The candidates of one side are formed as one dense
(candidates x keys) matrix and the greedy loop removes one candidate at a time: fine for one
prompt of a small model, far slower than the tracer.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

from accpp.decompose import KIND_EMB, KIND_HEAD, KIND_MLP, KIND_NAMES
from accpp.trace import node_id

__all__ = ["Forward", "HeadForms", "FiringSteps", "run_forward", "components", "head_forms", "rotation_matrices",
           "fold_rotation", "rebuilt_residual", "query_key_forms", "score_row", "query_candidates", "key_candidates", "ig_gradient",
           "greedy_removal", "signal_edges", "tau", "explain_firing", "signals_at", "seed_projections", "seed_cutoff",
           "trace_circuit"]

F64 = torch.float64


def _check_llama(model) -> None:
    mt = getattr(model.config, "model_type", type(model).__name__)
    if mt != "llama":
        raise ValueError(f"accpp.teaching writes the method out for Llama-family models only (SmolLM2, the tiny "
                         f"'llama' of accpp.testing); got model_type {mt!r}. Use accpp.trace for other families.")


def _f64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().to(F64)


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm's per-token scale sigma = sqrt(mean(x^2) + eps): (..., d) -> (...)."""
    return torch.sqrt(x.pow(2).mean(-1) + eps)


# ---------------------------------------------------------------------------------------------
# The forward pass and the residual stream's components
# ---------------------------------------------------------------------------------------------
@dataclass
class Forward:
    """What one forward pass of one prompt gives, float64 on the CPU."""

    ids: torch.Tensor  # (T,)
    resid: torch.Tensor  # (L+1, T, d): resid[l] enters layer l; resid[L] enters the final norm
    attn: torch.Tensor  # (L, H, T, T): the model's attention weights A^l_h[t, s]
    vo: torch.Tensor  # (L, H, T, d): value of token s through head h, v^l_h[s] W_O^l[h]
    mlp: torch.Tensor  # (L, T, d): each MLP's addition to the residual
    cos: torch.Tensor  # (T, d_head): the model's rotary tables at the prompt's positions
    sin: torch.Tensor
    logits: torch.Tensor  # (V,) at the last position

    @property
    def n_layers(self) -> int:
        return self.attn.shape[0]


def run_forward(model, ids) -> Forward:
    """Run the model once on one prompt and keep, through forward hooks, the residual entering each
    layer, the attention weights, the rotary tables and the MLP outputs; the per-head values vo are
    recomputed in float64 from the weights."""
    _check_llama(model)
    ids = torch.as_tensor(ids).reshape(-1)
    layers = model.model.layers
    got: dict[str, list] = {"x": [], "pe": [], "A": [], "mlp": [], "final": []}

    def pre_layer(_m, args, kwargs):
        got["x"].append(kwargs["hidden_states"] if "hidden_states" in kwargs else args[0])
        got["pe"].append(kwargs["position_embeddings"])

    hooks = []
    for layer in layers:
        hooks.append(layer.register_forward_pre_hook(pre_layer, with_kwargs=True))
        hooks.append(layer.self_attn.register_forward_hook(lambda _m, _a, out: got["A"].append(out[1])))
        hooks.append(layer.mlp.register_forward_hook(lambda _m, _a, out: got["mlp"].append(out)))
    hooks.append(model.model.norm.register_forward_pre_hook(lambda _m, args: got["final"].append(args[0])))
    try:
        with torch.no_grad():
            logits = model(ids[None].to(model.device)).logits[0, -1]
    finally:
        for h in hooks:
            h.remove()
    if any(a is None for a in got["A"]):
        raise ValueError("the model returned no attention weights: load it with attn_implementation='eager'")
    resid = torch.stack([_f64(x[0]) for x in got["x"]] + [_f64(got["final"][0][0])])  # (L+1, T, d)
    attn = torch.stack([_f64(a[0]) for a in got["A"]])  # (L, H, T, T)
    mlp = torch.stack([_f64(m[0]) for m in got["mlp"]])  # (L, T, d)
    vo = []
    for l, layer in enumerate(layers):
        sa, cfg = layer.self_attn, model.config
        H, KV, dh = cfg.num_attention_heads, cfg.num_key_value_heads, sa.head_dim
        g = _f64(layer.input_layernorm.weight)
        xn = resid[l] / _rms(resid[l], layer.input_layernorm.variance_epsilon)[:, None] * g  # (T, d)
        v = xn @ _f64(sa.v_proj.weight).T  # (T, KV*dh)
        v = v.view(-1, KV, dh).transpose(0, 1)  # (KV, T, dh)
        W_O = _f64(sa.o_proj.weight).view(-1, H, dh).permute(1, 2, 0)  # (H, dh, d)
        vo.append(torch.einsum("hte,hed->htd", v[[h // (H // KV) for h in range(H)]], W_O))
    cos, sin = (_f64(t[0]) for t in got["pe"][0])  # (T, dh) each (the same at every layer)
    return Forward(ids.cpu(), resid, attn, torch.stack(vo), mlp, cos, sin, _f64(logits))


def components(fw: Forward, L: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual entering layer L at token t split into its parts: the embedding, every upstream
    head's output from every source s <= t (A^l_h[t, s] vo^l_h[s]) and every upstream MLP.

    Returns vectors (N, d) and labels (N, 4) [kind, layer, head, source] (-1 where not applicable),
    in the order embedding, heads by (layer, head, source), MLPs. They sum to ``fw.resid[L, t]``.
    """
    H, d = fw.attn.shape[1], fw.resid.shape[2]
    heads = fw.attn[:L, :, t, : t + 1, None] * fw.vo[:L, :, : t + 1]  # (L, H, t+1, d)
    vecs = torch.cat([fw.resid[0, t][None], heads.reshape(-1, d), fw.mlp[:L, t]])
    labels = ([(KIND_EMB, -1, -1, -1)] + [(KIND_HEAD, l, h, s) for l in range(L) for h in range(H) for s in range(t + 1)]
              + [(KIND_MLP, l, -1, -1) for l in range(L)])
    return vecs, torch.tensor(labels)


# ---------------------------------------------------------------------------------------------
# Step 1-2: the bilinear form, its SVD, and the rotation folded into the token vectors
# ---------------------------------------------------------------------------------------------
@dataclass
class HeadForms:
    """One head's folded projections, bilinear form and its SVD (truncated to rank d_head)."""

    layer: int
    head: int
    W_Q: torch.Tensor  # (d, dh) diag(g) W_Q: the input RMSNorm's gain folded in
    W_K: torch.Tensor  # (d, dh) diag(g) W_K of the head's key-value group
    Omega: torch.Tensor  # (d, d) = W_Q W_K^T
    U: torch.Tensor  # (d, dh) left singular vectors u_k (columns)
    sig: torch.Tensor  # (dh,) singular values, descending
    V: torch.Tensor  # (d, dh) right singular vectors v_k
    scale: float  # the attention scale (1/sqrt(d_head))
    eps: float  # the input RMSNorm's epsilon


def head_forms(model, L: int, a: int) -> HeadForms:
    _check_llama(model)
    layer, cfg = model.model.layers[L], model.config
    sa = layer.self_attn
    H, KV, dh = cfg.num_attention_heads, cfg.num_key_value_heads, sa.head_dim
    if not 0 <= a < H:
        raise ValueError(f"head {a} does not exist: layer {L} has heads 0..{H - 1}")
    g = _f64(layer.input_layernorm.weight)
    W_Q = g[:, None] * _f64(sa.q_proj.weight).view(H, dh, -1)[a].T  # (d, dh)
    W_K = g[:, None] * _f64(sa.k_proj.weight).view(KV, dh, -1)[a // (H // KV)].T
    Omega = W_Q @ W_K.T  # (d, d), rank dh
    U, sig, Vh = torch.linalg.svd(Omega)
    return HeadForms(L, a, W_Q, W_K, Omega, U[:, :dh], sig[:dh], Vh[:dh].T, float(sa.scaling),
                     float(layer.input_layernorm.variance_epsilon))


def rotation_matrices(fw: Forward) -> torch.Tensor:
    """R (T, dh, dh) with rot_t(v) = v R_t, read off the model's own rotary function: row i of R_t is
    the rotated basis vector e_i at position t."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    T, dh = fw.cos.shape
    eye = torch.eye(dh, dtype=F64)[None, :, None, :].expand(1, dh, T, dh)  # e_i at every position
    rot, _ = apply_rotary_pos_emb(eye, eye, fw.cos[None], fw.sin[None])  # (1, dh, T, dh): rot_t(e_i)
    return rot[0].transpose(0, 1).contiguous()  # (T, dh, dh)


def fold_rotation(W: torch.Tensor, R_t: torch.Tensor) -> torch.Tensor:
    """M_t = W R_t W^+ (d, d): x M_t W = x W R_t, so the rotation moves into residual space."""
    return W @ R_t @ torch.linalg.pinv(W)


def rebuilt_residual(fw: Forward, L: int, n: int) -> torch.Tensor:
    """The residual entering layer L at tokens 0..n-1 as the sum of its components (n, d).

    Equal to ``fw.resid[L, :n]`` in exact arithmetic. A float32 model computed its residual in
    float32, so there the two differ by float32 rounding; the candidates are built from the
    components, so the score row that they sum to exactly is this one (as in the tracer)."""
    heads = torch.einsum("lhts,lhsd->td", fw.attn[:L, :, :n, :n], fw.vo[:L, :, :n])
    return fw.resid[0, :n] + fw.mlp[:L, :n].sum(0) + heads


def query_key_forms(fw: Forward, hf: HeadForms, R: torch.Tensor, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The folded, rotated query x~_d M_d (d_model,) and keys x~_j M_j (d+1, d_model), j <= d, with x_t
    the sum of the residual's components and sigma_t the norm scale of the model's own residual."""
    x = rebuilt_residual(fw, hf.layer, d + 1)
    xt = x / _rms(fw.resid[hf.layer, : d + 1], hf.eps)[:, None]  # x~_t = x_t / sigma_t
    q_hat = xt[d] @ fold_rotation(hf.W_Q, R[d])
    k_hat = torch.stack([xt[j] @ fold_rotation(hf.W_K, R[j]) for j in range(d + 1)])
    return q_hat, k_hat


def score_row(hf: HeadForms, q_hat: torch.Tensor, k_hat: torch.Tensor) -> torch.Tensor:
    """S_j = scale * q^_d Omega k^_j^T over the visible keys j <= d."""
    return hf.scale * (k_hat @ hf.Omega.T @ q_hat)


# ---------------------------------------------------------------------------------------------
# Step 3-4: candidate signals, one per (component, singular direction)
# ---------------------------------------------------------------------------------------------
def query_candidates(fw: Forward, hf: HeadForms, R: torch.Tensor, d: int, k_hat: torch.Tensor):
    """Query side: candidate (component c at d, k) contributes, to the score of every key j,
    scale * sig_k * (r_c / sigma_d) M_d u_k * k^_j v_k (the key side held whole).

    Returns rows (N*dh, d+1), candidate i = (component i // dh, index i % dh), and labels (N, 4)."""
    vecs, labels = components(fw, hf.layer, d)  # (N, d_model)
    sigma_d = _rms(fw.resid[hf.layer, d], hf.eps)
    alpha = (vecs / sigma_d) @ (fold_rotation(hf.W_Q, R[d]) @ hf.U)  # (N, dh): alpha_{c,k}
    beta = k_hat @ hf.V  # (d+1, dh): beta_{j,k} = k^_j v_k
    rows = hf.scale * (hf.sig * alpha)[:, :, None] * beta.T[None]  # (N, dh, d+1)
    return rows.reshape(-1, d + 1), labels


def key_candidates(fw: Forward, hf: HeadForms, R: torch.Tensor, d: int, q_hat: torch.Tensor):
    """Key side (the authors' form): the query held whole, the key vector at EVERY visible position j
    split into components. Candidate (component c, k) spans all keys: its entry at j is
    scale * sig_k * (q^_d u_k) * (r_{c,j} / sigma_j) M_j v_k, with r_{c,j} the part of the residual at j
    that c wrote (a head (l, h, source j') writes A^l_h[j, j'] vo^l_h[j'], zero when j' > j; the
    embedding and each MLP write one vector per position).

    Returns rows (N*dh, d+1) and labels (N, 4) in the layout of :func:`components` at d."""
    L = hf.layer
    _, labels = components(fw, L, d)
    alpha = q_hat @ hf.U  # (dh,): q^_d u_k
    cols = []
    for j in range(d + 1):
        B = fold_rotation(hf.W_K, R[j]) @ hf.V / _rms(fw.resid[L, j], hf.eps)  # (d_model, dh): M_j v_k / sigma_j
        heads = fw.attn[:L, :, j, : d + 1, None] * (fw.vo[:L, :, : d + 1] @ B)  # (L, H, d+1, dh)
        cols.append(torch.cat([(fw.resid[0, j] @ B)[None], heads.reshape(-1, B.shape[1]), fw.mlp[:L, j] @ B]))
    coef = torch.stack(cols, -1)  # (N, dh, d+1): (r_{c,j} / sigma_j) M_j v_k
    rows = hf.scale * (hf.sig * alpha)[None, :, None] * coef
    return rows.reshape(-1, d + 1), labels


# ---------------------------------------------------------------------------------------------
# Step 5-6: Integrated Gradients on A_ds, greedy removal, signals per component
# ---------------------------------------------------------------------------------------------
def tau(n_visible: int) -> float:
    """The threshold on A_ds: 2.5 times the uniform weight 1/n, capped at 1."""
    return min(1.0, 2.5 / n_visible)


def ig_gradient(S: torch.Tensor, s: int, steps: int = 64) -> torch.Tensor:
    """G_j = int_0^1 dA_s/dS_j (t S) dt along the straight path from S = 0 (uniform attention), by the
    trapezoid rule with ``steps`` intervals; dA_s/dS_j = A_s (delta_sj - A_j). A candidate's attribution
    is its row . G."""
    G = torch.zeros_like(S)
    for i in range(steps + 1):
        p = torch.softmax(i / steps * S, -1)
        e_s = torch.zeros_like(S)
        e_s[s] = 1.0
        w = 0.5 if i in (0, steps) else 1.0
        G += w / steps * p[s] * (e_s - p)
    return G


def greedy_removal(S: torch.Tensor, rows: torch.Tensor, attribution: torch.Tensor, s: int, threshold: float):
    """Remove candidates in decreasing attribution, recomputing the softmax after each, until
    A_ds < threshold. Returns the removed candidates (in order) and A_ds after each removal."""
    removed, A_after, cur = [], [], S.clone()
    for i in torch.argsort(attribution, descending=True, stable=True).tolist():
        cur = cur - rows[i]
        removed.append(i)
        A_after.append(float(torch.softmax(cur, -1)[s]))
        if A_after[-1] < threshold:
            break
    return removed, A_after


def signal_edges(side: str, removed: list[int], A_after: list[float], A0: float, rows: torch.Tensor,
                 attribution: torch.Tensor, labels: torch.Tensor, dh: int, S: torch.Tensor, d: int, s: int) -> list[dict]:
    """Group the removed candidates by component: one signal per component, its singular indices in
    removal order. ``weight``: the drops in A_ds at the greedy steps that removed its candidates;
    ``drop``: A_ds minus A_ds with only its candidates removed; ``attribution``: their IG sum.
    Query side ("d"): the signal sits at d. Key side ("s"): at the firing's source s, and signals from
    heads whose source j' > s are left out (they were still removed in the greedy)."""
    steps = [A0] + A_after
    groups: dict[int, list[int]] = {}
    for n, i in enumerate(removed):
        groups.setdefault(i // dh, []).append(n)
    out = []
    for c, at in groups.items():
        kind, layer, head, src = labels[c].tolist()
        if side == "s" and kind == KIND_HEAD and src > s:
            continue
        idx = [removed[n] for n in at]
        contribution = rows[idx].sum(0)
        out.append(dict(side=side, kind=KIND_NAMES[kind], layer=layer, head=head, token=d if side == "d" else s,
                        src=src, sing=[i % dh for i in idx], attribution=float(attribution[idx].sum()),
                        drop=A0 - float(torch.softmax(S - contribution, -1)[s]),
                        weight=sum(steps[n] - steps[n + 1] for n in at)))
    return out


@dataclass
class FiringSteps:
    """Every intermediate of one firing, for plotting and checking."""

    layer: int
    head: int
    dest: int
    src: int
    forms: HeadForms
    q_hat: torch.Tensor  # (d_model,)
    k_hat: torch.Tensor  # (n, d_model)
    S: torch.Tensor  # (n,) score row
    A: float  # A_ds
    tau: float
    G: torch.Tensor  # (n,) IG path-integrated gradient
    sides: dict = field(default_factory=dict)  # "d"/"s" -> dict(rows, labels, attribution, removed, A_after)
    edges: list = field(default_factory=list)


def explain_firing(model, fw: Forward, L: int, a: int, d: int, s: int, R: torch.Tensor | None = None) -> FiringSteps:
    """Steps 1-6 for the firing (L, a, d, s)."""
    if not 0 <= s <= d < fw.ids.numel():
        raise ValueError(f"firing ({L}, {a}, d={d}, s={s}): need 0 <= s <= d < {fw.ids.numel()} (causal attention)")
    R = rotation_matrices(fw) if R is None else R
    hf = head_forms(model, L, a)
    q_hat, k_hat = query_key_forms(fw, hf, R, d)
    S = score_row(hf, q_hat, k_hat)
    A = float(torch.softmax(S, -1)[s])
    n = d + 1
    out = FiringSteps(L, a, d, s, hf, q_hat, k_hat, S, A, tau(n), ig_gradient(S, s))
    dh = hf.sig.numel()
    for side, (rows, labels) in (("d", query_candidates(fw, hf, R, d, k_hat)),
                                 ("s", key_candidates(fw, hf, R, d, q_hat))):
        attribution = rows @ out.G
        removed, A_after = greedy_removal(S, rows, attribution, s, out.tau)
        out.sides[side] = dict(rows=rows, labels=labels, attribution=attribution, removed=removed, A_after=A_after)
        out.edges += signal_edges(side, removed, A_after, A, rows, attribution, labels, dh, S, d, s)
    return out


def signals_at(steps: FiringSteps, threshold: float) -> dict:
    """Steps 6-7 of a firing again with another threshold on A_ds, its candidates and attributions kept.

    Per side ("d", "s"): ``removed`` (candidates, in removal order), ``A_after`` (A_ds after each removal)
    and ``edges`` (the signals, as :func:`signal_edges`). The removal order does not depend on the
    threshold, so a lower one continues the same list and a higher one stops it earlier. When A_ds is
    already below the threshold nothing is removed (the tracer would not expand the firing)."""
    dh = steps.forms.sig.numel()
    out = {}
    for side, c in steps.sides.items():
        removed, A_after = ([], []) if steps.A < threshold else greedy_removal(
            steps.S, c["rows"], c["attribution"], steps.src, threshold)
        out[side] = dict(removed=removed, A_after=A_after, edges=signal_edges(
            side, removed, A_after, steps.A, c["rows"], c["attribution"], c["labels"], dh, steps.S, steps.dest, steps.src))
    return out


# ---------------------------------------------------------------------------------------------
# Whole prompt: seeds on the logit difference, recursion through heads
# ---------------------------------------------------------------------------------------------
def seed_projections(model, fw: Forward, pos: int, correct: int, wrong: int):
    """Components of the final residual at ``pos`` projected on the logit-difference direction read
    back through the final RMSNorm: g * (W_U[correct] - W_U[wrong]) / sigma. They sum to the logit
    difference. Returns (projections (N,), labels (N, 4))."""
    _check_llama(model)
    L = fw.n_layers
    vecs, labels = components(fw, L, pos)
    norm = model.model.norm
    W_U = model.get_output_embeddings().weight
    direction = _f64(norm.weight) * (_f64(W_U[correct]) - _f64(W_U[wrong])) / _rms(fw.resid[L, pos],
                                                                                  norm.variance_epsilon)
    return vecs @ direction, labels


def seed_cutoff(proj: torch.Tensor) -> float | None:
    """Sorted descending, the value at which the cumulative sum first exceeds the total, capped at
    total / 2; the seeds are the components at or above it. None when the total is <= 0."""
    total = float(proj.sum())
    if total <= 0:
        return None
    vals = sorted(proj.tolist(), reverse=True)
    running, cutoff = 0.0, vals[-1]
    for v in vals:
        running += v
        if running > total:
            cutoff = v
            break
    return min(cutoff, total / 2)


def trace_circuit(model, fw: Forward, pos: int, correct: int, wrong: int) -> tuple[dict, list]:
    """Seeds, then breadth-first recursion through attention heads (MLPs and the embedding are leaves).

    A head firing (l, h, t, s') is expanded when l > 0, t > 0 and A >= tau(t + 1), once. Returns the
    nodes {id: attributes} and the edges [(upstream id, downstream id, attributes)]."""
    R = rotation_matrices(fw)
    proj, labels = seed_projections(model, fw, pos, correct, wrong)
    cutoff = seed_cutoff(proj)
    seed_idx = [] if cutoff is None else [i for i in range(len(proj)) if float(proj[i]) >= cutoff]
    if not any(int(labels[i, 0]) == KIND_HEAD for i in seed_idx):
        seed_idx = []  # no attention head among the seeds: nothing to trace
    out_id = f"LOGITS@{pos}"
    nodes, edges, queue, seen = {out_id: dict(kind="logits")}, [], deque(), set()

    def add(kind, layer, head, token, src):
        nid = node_id(kind, layer, head, token, src)
        nodes.setdefault(nid, dict(kind=KIND_NAMES[kind], traced=False))
        if kind == KIND_HEAD and (layer, head, token, src) not in seen:
            seen.add((layer, head, token, src))
            if layer > 0 and token > 0 and float(fw.attn[layer, head, token, src]) >= tau(token + 1):
                queue.append((layer, head, token, src))
        return nid

    for i in seed_idx:
        kind, layer, head, src = labels[i].tolist()
        edges.append((add(kind, layer, head, pos, src), out_id, dict(side="seed", weight=float(proj[i]))))
    while queue:
        layer, head, d, s = queue.popleft()
        steps = explain_firing(model, fw, layer, head, d, s, R)
        fid = node_id(KIND_HEAD, layer, head, d, s)
        nodes[fid]["traced"] = True
        for e in steps.edges:
            kind = {v: k for k, v in KIND_NAMES.items()}[e["kind"]]
            uid = add(kind, e["layer"], e["head"], e["token"], e["src"])
            edges.append((uid, fid, e))
    return nodes, edges
