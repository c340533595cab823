"""Prototype circuits: a ProtoT gate decision decomposed exactly into the upstream components.

A gate logit of layer l is linear in the token's normalised residual stream. With the residual
h_t = e_t + sum_{j<l} (y_{j,t} + f_{j,t}) (embedding, mixer outputs, MLP outputs), the RMSNorm
x_t = g * h_t * sigma_t (sigma_t = 1 / sqrt(mean(h_t^2) + eps): a per-token scale, held at its
value in the forward pass, as ACC++ holds its norms), the optional causal convolution
x'_t = sum_o c_o * x_{t-o} (taps o = 0 .. W-1) and the gate projection a_t = W x'_t (W = W_w, W_r,
or the shared W_k), the similarity to prototype k divided by the temperature is

    z_{t,k} = <a_t, p_k> / (sqrt(P) tau)  =  sum_o sum_c <C_c(t-o), rho_{t,o,k}>,
    rho_{t,o,k} = sigma_{t-o} * g * c_o * (W^T p_k) / (sqrt(P) tau)               ("dot")

for components C_c: the embedding, each earlier MLP output, and each earlier mixer's output split
per prototype channel: y_{j,t} = alpha W_o sum_k r_{t,k} c_{t,k} = sum_k alpha W_o q_{t,k} S_{t,k},
q = r / (n + eps) (``protot.mixer.read_query``). With ``similarity="cosine"`` the frozen 1 / |a_t|
joins sigma, and p_k is the unit prototype. ``centered=True`` decomposes z_{t,k} - mean_j z_{t,j}
(the softmax sees only differences: the *decision*), using W^T (p_k - mean_j p_j). Every term is
an *atom*: (component, tap); taps before position 0 are zero padding and contribute 0. In float64
the atoms sum to the model's own logit to rounding (tests/protot/test_circuits.py).

That is compendium-v1's mixer. The authors' mixer (the default ProtoT; its pieces are in
:mod:`protot.circuits_authors`) has no gate projection on the write side (the normed token x_t itself
meets the prototypes), W_r on the read side past its shared-routing layer, no convolution before the
routing (one tap), learned temperatures per head (centred: within the head), and channels read from
the past only (s < t) with the values after its value convolution; the atoms are the same kinds.

    capture(model, ids) -> Capture                one forward pass with what the decomposition needs
    decompose(model, cap, layer, gate, ...)       -> Decomposition (atoms x prototypes, per row)
    gate_softmax(model, layer, logits)            the gates from (summed) logits
    channel_sources(model, cap, layer, rows, positions, readout)   the channel terms split by source token
    trace(model, ids, positions, layer, prototype, ...) -> Trace   level 0 + one level of recursion
    draw_trace(trace, ax)                         the trace as a layered graph
    select_prototype(...)                         notebook 06's selection rule (mask scan, training split)
    measure_write_circuit(...)                    ``protot/women-write-circuit`` as a Measurement

Layers, prototypes and positions count from 0. The decomposition reads the gates the model
computed (masks and clamps of :mod:`protot.intervene` included); run it on a float64 copy of the
model (:func:`float64_copy`) for exactness.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from compendium.stats import bootstrap_diff_ci as bootstrap_diff  # noqa: F401  (re-exported)
from compendium.stats import bootstrap_mean_ci
from protot import circuits_authors as authors
from protot.mixer import gate_logits, read_query

GATES = ("write", "read")


# -- the forward pass ------------------------------------------------------------------------------
@dataclass
class Capture:
    """One forward pass of a ProtoT model over ``ids`` (B, T). Per layer l (lists of L tensors):
    ``block_in`` h_l (B, T, d), ``mixer_in`` RMSNorm(h_l) (B, T, d), ``mixer_out`` y_l (alpha
    included), ``mlp_out`` f_l (B, T, d), ``write`` / ``read`` gates (B, T, R), ``values`` v_l
    (B, T, d_v; after the convolution where there is one). ``embed`` (B, T, d)."""

    ids: torch.Tensor
    embed: torch.Tensor
    block_in: list
    mixer_in: list
    mixer_out: list
    mlp_out: list
    write: list
    read: list
    values: list

    @property
    def layers(self) -> int:
        return len(self.block_in)


def _check_protot(model):
    from protot.models.protot import ProtoMixer
    from protot.models.protot_authors import AuthorsProtoMixer

    layers = getattr(model, "layers", None)
    if layers is None or len(layers) == 0 or not isinstance(layers[0].mixer, (ProtoMixer, AuthorsProtoMixer)):
        raise ValueError("not a ProtoT model (no ProtoMixer layers)")


def float64_copy(model):
    """A float64 copy of ``model`` in eval mode (the original is left as it is)."""
    _check_protot(model)
    return copy.deepcopy(model).double().eval()


@torch.no_grad()
def capture(model, ids: torch.Tensor) -> Capture:
    """Run ``model`` over ``ids`` (B, T) and keep the residual stream's parts, the gates and the values."""
    _check_protot(model)
    if not torch.is_tensor(ids) or ids.ndim != 2 or ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"ids must be a non-empty (B, T) tensor, got {getattr(ids, 'shape', type(ids))}")
    L = len(model.layers)
    rec = {k: [None] * L for k in ("block_in", "mixer_in", "mixer_out", "mlp_out", "values")}
    hooks = []

    def keep(name, l, what):
        def hook(module, args, output=None):
            rec[name][l] = what(args, output)
        return hook

    for l, block in enumerate(model.layers):
        hooks.append(block.register_forward_pre_hook(keep("block_in", l, lambda a, o: a[0])))
        hooks.append(block.mixer.register_forward_hook(keep("mixer_in", l, lambda a, o: a[0])))
        hooks.append(block.mixer.register_forward_hook(keep("mixer_out", l, lambda a, o: o[0])))
        hooks.append(block.ffn.register_forward_hook(keep("mlp_out", l, lambda a, o: o)))
        if not authors.is_authors(block.mixer):   # the authors' values are recomputed below
            hooks.append(block.mixer.value_proj.register_forward_hook(keep("values", l, lambda a, o: o)))
    was_training = model.training
    model.eval()
    try:
        dev = next(model.parameters()).device
        out = model(ids.to(dev), use_cache=False, output_gates=True, output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    for l, block in enumerate(model.layers):
        if authors.is_authors(block.mixer):
            rec["values"][l] = authors.values(block.mixer, rec["mixer_in"][l])
    return Capture(ids=ids.cpu(), embed=out.hidden_states[0], block_in=rec["block_in"], mixer_in=rec["mixer_in"],
                   mixer_out=rec["mixer_out"], mlp_out=rec["mlp_out"],
                   write=[g["write_gate"] for g in out.gates], read=[g["read_gate"] for g in out.gates],
                   values=rec["values"])


# -- pieces of one layer --------------------------------------------------------------------------------
def _gate_projection(mixer, gate: str) -> tuple[torch.Tensor, float]:
    """(W (P, d), temperature) of ``gate`` in this mixer (shared keys: one W for both gates)."""
    if gate not in GATES:
        raise ValueError(f"gate must be one of {GATES}, got {gate!r}")
    cfg = mixer.config
    tau = cfg.write_temperature if gate == "write" else cfg.read_temperature
    if getattr(cfg, "shared_keys", False):
        return mixer.key_proj.weight, tau
    return (mixer.write_proj if gate == "write" else mixer.read_proj).weight, tau


def _rows_positions(cap: Capture, rows, positions) -> tuple[torch.Tensor, torch.Tensor]:
    B, T = cap.ids.shape
    rows = torch.arange(B) if rows is None else torch.as_tensor(rows, dtype=torch.long).reshape(-1)
    if positions is None:
        raise ValueError("positions is required: one position per row (an int for all rows)")
    pos = torch.as_tensor(positions, dtype=torch.long).reshape(-1)
    if pos.numel() == 1 and rows.numel() > 1:
        pos = pos.expand(rows.numel()).clone()
    if pos.numel() != rows.numel():
        raise ValueError(f"{pos.numel()} positions for {rows.numel()} rows")
    if rows.numel() == 0:
        raise ValueError("no rows to decompose")
    if int(rows.min()) < 0 or int(rows.max()) >= B:
        raise ValueError(f"rows must lie in [0, {B}), got {rows.min().item()}..{rows.max().item()}")
    if int(pos.min()) < 0 or int(pos.max()) >= T:
        raise ValueError(f"positions must lie in [0, {T}), got {pos.min().item()}..{pos.max().item()}")
    return rows, pos


def channel_terms(model, cap: Capture, layer: int, rows: torch.Tensor, positions: torch.Tensor):
    """Layer ``layer``'s mixer output at (rows, positions) split per prototype channel.

    Returns (terms (N, R, d): alpha W_o q_{t,k} S_{t,k}, summing over k to y_t; coef (N, T, R): the
    weight of source v_s in channel k's term, q_{t,k} beta_k^{t'-s} w_{s,k}, with t' = t (s <= t) or
    t - 1 (include_current=False); zero for sources outside the prefix). The authors' mixer:
    :func:`protot.circuits_authors.channel_terms`."""
    mixer = model.layers[layer].mixer
    cfg = mixer.config
    if authors.is_authors(mixer):
        return authors.channel_terms(mixer, cap.write[layer][rows], cap.read[layer][rows, positions],
                                     cap.values[layer][rows], positions)
    w = cap.write[layer][rows].double()                                 # (N, T, R)
    v = cap.values[layer][rows].double()                                # (N, T, d_v)
    r = cap.read[layer][rows, positions].double()                       # (N, R)
    g = mixer.log_decay().detach().double()                             # (R,)
    T = w.shape[1]
    t_eff = positions - (0 if getattr(cfg, "include_current", True) else 1)
    lag = t_eff[:, None] - torch.arange(T)[None, :]                     # (N, T)
    inside = (lag >= 0).double()
    dec = torch.exp(lag.clamp(min=0).double()[:, :, None] * g) * inside[:, :, None]   # (N, T, R)
    a = dec * w
    if cfg.normalization == "write_mass":
        q = read_query(r, a.sum(1), cfg.norm_eps)
    elif cfg.normalization == "count":
        q = read_query(r, dec.sum(1), cfg.norm_eps)
    else:
        q = r
    coef = q[:, None, :] * a                                            # (N, T, R)
    S = torch.einsum("ntr,ntv->nrv", coef, v)                            # (N, R, d_v)
    alpha = mixer.alpha.detach().double()
    terms = alpha * S @ mixer.out_proj.weight.detach().double().t()      # (N, R, d)
    return terms, coef


def _readout(model, cap: Capture, layer: int, gate: str, rows, pos, protos, centered: bool):
    """rho (N, O, d, K) with z = sum_o <h_{t-o}, rho_o>, and the model's own logit (N, K) at (rows, pos)."""
    mixer = model.layers[layer].mixer
    cfg = mixer.config
    norm = model.layers[layer].mixer_norm
    h = cap.block_in[layer].double()
    eps = torch.finfo(h.dtype).eps if norm.eps is None else norm.eps   # as the model's RMSNorm
    gain = norm.weight.detach().double()
    if authors.is_authors(mixer):   # one tap, no projection on the write side (protot.circuits_authors)
        if gate not in GATES:
            raise ValueError(f"gate must be one of {GATES}, got {gate!r}")
        U = authors.readout_vectors(mixer, gate, centered)[:, protos]   # (d, K)
        ht = h[rows, pos]
        sigma = torch.rsqrt(ht.pow(2).mean(-1, keepdim=True) + eps)    # (N, 1)
        rho = (sigma[:, :, None] * gain[None, :, None] * U[None])[:, None]   # (N, 1, d, K)
        logit = authors.logits(mixer, gate, cap.mixer_in[layer][rows, pos].double(), centered)
        return rho, logit[:, protos]
    Wp, tau = _gate_projection(mixer, gate)
    Wp = Wp.detach().double()                                           # (P, d)
    Pm = mixer.prototypes.detach().double()                             # (R, P)
    R, P = Pm.shape
    if cfg.similarity == "cosine":
        Pm = torch.nn.functional.normalize(Pm, dim=-1)
        scale = 1.0 / tau
    elif cfg.similarity == "dot":
        scale = 1.0 / (math.sqrt(P) * tau)
    else:
        raise ValueError(f"unknown similarity {cfg.similarity!r}")
    U = Wp.t() @ Pm.t() * scale                                         # (d, R)
    if centered:
        U = U - U.mean(1, keepdim=True)
    U = U[:, protos]                                                    # (d, K)
    W = mixer.conv.size if mixer.conv is not None else 1
    cw = mixer.conv.weight.detach().double() if mixer.conv is not None else None   # (d, W)
    xin = cap.mixer_in[layer].double()
    rho, xconv = [], 0.0
    for o in range(W):
        tp = pos - o
        ok = (tp >= 0).double()[:, None]
        tpc = tp.clamp(min=0)
        ht = h[rows, tpc]                                               # (N, d)
        sigma = torch.rsqrt(ht.pow(2).mean(-1, keepdim=True) + eps) * ok          # (N, 1)
        tap = gain if cw is None else gain * cw[:, W - 1 - o]
        rho.append(sigma[:, :, None] * tap[None, :, None] * U[None])    # (N, d, K)
        xconv = xconv + ok * (xin[rows, tpc] if cw is None else cw[:, W - 1 - o] * xin[rows, tpc])
    rho = torch.stack(rho, 1)                                           # (N, O, d, K)
    a = xconv @ Wp.t()                                                  # (N, P): the gate's key, the model's way
    logit = gate_logits(a[:, None], mixer.prototypes.detach().double(), cfg.similarity)[:, 0] / tau   # (N, R)
    if cfg.similarity == "cosine":
        rho = rho / a.norm(dim=-1).clamp(min=1e-12)[:, None, None, None]
    if centered:
        logit = logit - logit.mean(-1, keepdim=True)
    return rho, logit[:, protos]


def gate_softmax(model, layer: int, logits: torch.Tensor) -> torch.Tensor:
    """The gates (N, R) of ``layer`` from its uncentred or centred logits (N, R), e.g. a
    :class:`Decomposition`'s ``total()`` over all prototypes: the softmax over the layer's
    prototypes, within each head for the authors' mixer."""
    mixer = model.layers[layer].mixer
    return authors.gate_softmax(mixer, logits) if authors.is_authors(mixer) else torch.softmax(logits, -1)


# -- the decomposition ------------------------------------------------------------------------------------
@dataclass
class Decomposition:
    """``contrib`` (N, A, K): the atoms' terms of the gate logit of ``prototypes`` (K) at (rows, positions);
    ``meta`` (A rows): atom, component, kind ("embed", "channel", "mixer", "mlp"), layer (-1: the
    embedding), channel (-1: none), offset (the conv tap: the atom sits at position t - offset);
    ``logit`` (N, K): the model's own logit (centred when ``centered``). Sum over atoms = logit."""

    layer: int
    gate: str
    prototypes: list
    centered: bool
    rows: torch.Tensor
    positions: torch.Tensor
    meta: pd.DataFrame
    contrib: torch.Tensor
    logit: torch.Tensor
    readout: torch.Tensor = field(repr=False)   # rho (N, O, d, K)

    def total(self) -> torch.Tensor:
        return self.contrib.sum(1)

    def error(self) -> float:
        """max |sum of atoms - logit| / max(1, max |logit|)."""
        return float((self.total() - self.logit).abs().max() / self.logit.abs().max().clamp(min=1.0))

    def positive_shares(self, j: int = 0) -> torch.Tensor:
        """(N, A): max(atom, 0) / sum of max(atom, 0), for the j-th prototype asked."""
        pos = self.contrib[:, :, j].clamp(min=0)
        return pos / pos.sum(1, keepdim=True).clamp(min=1e-300)

    def atom_index(self, component: str, offset: int = 0) -> int:
        hit = self.meta.index[(self.meta.component == component) & (self.meta.offset == offset)]
        if len(hit) != 1:
            raise KeyError(f"no atom {component!r} at offset {offset}")
        return int(hit[0])

    def summary(self, j: int = 0) -> pd.DataFrame:
        """One row per atom for the j-th prototype: mean / std of the term over rows, mean positive share."""
        c = self.contrib[:, :, j]
        df = self.meta.copy()
        df["mean"] = c.mean(0).numpy()
        df["std"] = c.std(0).numpy() if c.shape[0] > 1 else 0.0
        df["mean_abs"] = c.abs().mean(0).numpy()
        df["pos_share"] = self.positive_shares(j).mean(0).numpy()
        return df


def decompose(model, cap: Capture, layer: int, gate: str = "write", positions=None, *, rows=None,
              prototypes=None, centered: bool = False, split_channels: bool = True) -> Decomposition:
    """The ``gate`` logit of ``prototypes`` (None: all R) of ``layer`` at (``rows``, ``positions``)
    (one position per row; rows default to every row of ``cap``) as a sum of atoms, see the module
    docstring. ``split_channels=False`` keeps each earlier mixer's output whole."""
    _check_protot(model)
    L = len(model.layers)
    if not 0 <= layer < L:
        raise ValueError(f"layer must be in [0, {L}), got {layer}")
    R = model.layers[layer].mixer.prototypes.shape[0]
    protos = list(range(R)) if prototypes is None else [int(k) for k in np.atleast_1d(prototypes)]
    if not protos or min(protos) < 0 or max(protos) >= R:
        raise ValueError(f"prototypes must lie in [0, {R}), got {protos}")
    rows, pos = _rows_positions(cap, rows, positions)
    rho, logit = _readout(model, cap, layer, gate, rows, pos, protos, centered)
    O = rho.shape[1]
    meta, parts = [], []
    for o in range(O):
        tp = (pos - o).clamp(min=0)
        ro = rho[:, o]                                                  # (N, d, K)
        parts.append(torch.einsum("nd,ndk->nk", cap.embed[rows, tp].double(), ro)[:, None])
        meta.append(("embed", "embed", -1, -1, o))
        for j in range(layer):
            if split_channels:
                terms, _ = channel_terms(model, cap, j, rows, tp)      # (N, R_j, d)
                parts.append(torch.einsum("nrd,ndk->nrk", terms, ro))
                meta += [(f"L{j}.P{k}", "channel", j, k, o) for k in range(terms.shape[1])]
            else:
                parts.append(torch.einsum("nd,ndk->nk", cap.mixer_out[j][rows, tp].double(), ro)[:, None])
                meta.append((f"L{j}.mixer", "mixer", j, -1, o))
            parts.append(torch.einsum("nd,ndk->nk", cap.mlp_out[j][rows, tp].double(), ro)[:, None])
            meta.append((f"L{j}.mlp", "mlp", j, -1, o))
    meta = pd.DataFrame(meta, columns=["component", "kind", "layer", "channel", "offset"])
    meta.insert(0, "atom", [c if o == 0 else f"{c}@-{o}" for c, o in zip(meta.component, meta.offset)])
    return Decomposition(layer, gate, protos, centered, rows, pos, meta, torch.cat(parts, 1), logit, rho)


def channel_sources(model, cap: Capture, layer: int, rows, positions, readout: torch.Tensor) -> torch.Tensor:
    """(N, T, R): channel k of ``layer``'s term at (rows, positions), read out by ``readout`` (N, d),
    split by source position s: q_{t,k} beta_k^{t'-s} w_{s,k} <alpha W_o v_s, readout>. Summed over s
    it is the channel atom of :func:`decompose` (with the matching readout rho_o)."""
    mixer = model.layers[layer].mixer
    _, coef = channel_terms(model, cap, layer, rows, positions)         # (N, T, R)
    if authors.is_authors(mixer):
        return authors.source_terms(mixer, coef, cap.values[layer][rows], readout)
    v = cap.values[layer][rows].double()                                # (N, T, d_v)
    vo = mixer.alpha.detach().double() * v @ mixer.out_proj.weight.detach().double().t()   # (N, T, d)
    return coef * torch.einsum("ntd,nd->nt", vo, readout.double())[:, :, None]


# -- the trace ----------------------------------------------------------------------------------------------
@dataclass
class Trace:
    """``table``: one row per (target, atom): level (0: the chosen gate; 1: the read gate of a top
    channel atom), target, atom, component, kind, layer, channel, offset, mean, std, mean_abs, pos_share.
    ``sources``: for each traced channel atom, its term split by source token (relative position
    t' - s and token), mean over rows. ``graph``: networkx DiGraph, edges atom -> target with the
    mean term as ``weight`` (the strongest ``edges`` per target by |mean|). ``decomposition``: level 0."""

    table: pd.DataFrame
    sources: pd.DataFrame
    graph: object
    decomposition: Decomposition
    target: str


def _target_name(layer: int, gate: str, k: int) -> str:
    return f"L{layer}.{gate}.P{k}"


def trace(model, ids: torch.Tensor, positions, layer: int, prototype: int, *, gate: str = "write",
          centered: bool = True, recurse: int = 3, edges: int = 6, tokenizer=None, cap: Capture | None = None,
          rows=None) -> Trace:
    """Which upstream atoms make the tokens at ``positions`` (one per row of ``ids``) write into
    (``gate="read"``: read from) ``prototype`` of ``layer``, and, one level down, for the
    ``recurse`` channel atoms with the largest mean term: which atoms make the token read from that
    earlier channel (its read logit at the atom's position) and which source tokens fill it."""
    if recurse < 0 or edges < 1:
        raise ValueError(f"recurse must be >= 0 and edges >= 1, got {recurse}, {edges}")
    import networkx as nx

    cap = capture(model, ids) if cap is None else cap
    dec = decompose(model, cap, layer, gate, positions, rows=rows, prototypes=[prototype], centered=centered)
    target = _target_name(layer, gate, prototype)
    s0 = dec.summary(0).assign(level=0, target=target)
    tables = [s0]
    chan = s0[s0.kind == "channel"].sort_values("mean", ascending=False, kind="stable").head(recurse)
    src_rows = []
    for row in chan.itertuples():
        j, k, o = int(row.layer), int(row.channel), int(row.offset)
        tp = (dec.positions - o).clamp(min=0)
        sub = decompose(model, cap, j, "read", tp, rows=dec.rows, prototypes=[k], centered=centered)
        tables.append(sub.summary(0).assign(level=1, target=row.atom))
        src = channel_sources(model, cap, j, dec.rows, tp, dec.readout[:, o, :, 0])[:, :, k]   # (N, T)
        for n in range(src.shape[0]):
            t_eff = int(tp[n])
            for s in range(t_eff + 1):
                tok = int(cap.ids[dec.rows[n], s])
                src_rows.append({"channel_atom": row.atom, "row": n, "lag": t_eff - s, "token_id": tok,
                                 "token": tokenizer.decode([tok]) if tokenizer is not None else str(tok),
                                 "term": float(src[n, s])})
    table = pd.concat(tables, ignore_index=True)
    cols = ["level", "target", "atom", "component", "kind", "layer", "channel", "offset", "mean", "std",
            "mean_abs", "pos_share"]
    table = table[cols]
    sources = pd.DataFrame(src_rows, columns=["channel_atom", "row", "lag", "token_id", "token", "term"])
    G = nx.DiGraph()
    G.add_node(target, layer=layer, kind="target", level=0)
    for r in chan.itertuples():                                         # level-1 targets: the traced channels
        G.add_node(r.atom, layer=int(r.layer), kind="channel", level=1)
    for tgt, grp in table.groupby("target", sort=False):
        keep = grp.reindex(grp["mean"].abs().sort_values(ascending=False, kind="stable").index).head(edges)
        for r in keep.itertuples():
            if r.atom not in G:
                G.add_node(r.atom, layer=int(r.layer), kind=r.kind, level=int(r.level) + 1)
            G.add_edge(r.atom, tgt, weight=float(r.mean), pos_share=float(r.pos_share))
    return Trace(table, sources, G, dec, target)


def draw_trace(tr: Trace, ax, *, title: str | None = None):
    """Draw ``tr.graph`` left to right by layer (embedding left, the target right); edge width ~ |mean
    term|, red positive, blue negative; labels carry the mean term."""
    G = tr.graph
    xs = {n: (d["layer"] + 1 if d["kind"] != "target" else d["layer"] + 1.6) for n, d in G.nodes(data=True)}
    cols: dict = {}
    for n in sorted(G.nodes, key=lambda n: (xs[n], n)):
        cols.setdefault(xs[n], []).append(n)
    pos = {}
    for x, ns in cols.items():
        for i, n in enumerate(ns):
            pos[n] = (x, (i - (len(ns) - 1) / 2) * 1.0)
    wmax = max((abs(d["weight"]) for *_, d in G.edges(data=True)), default=1.0) or 1.0
    for u, v, d in G.edges(data=True):
        (x0, y0), (x1, y1) = pos[u], pos[v]
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                    arrowprops=dict(arrowstyle="-|>", lw=0.5 + 4.0 * abs(d["weight"]) / wmax,
                                    color="C3" if d["weight"] > 0 else "C0", alpha=0.75,
                                    shrinkA=14, shrinkB=14))
        ax.text(0.35 * x0 + 0.65 * x1, 0.35 * y0 + 0.65 * y1, f"{d['weight']:+.2f}", fontsize=6.5, color="0.25",
                ha="center", va="center")
    for n, (x, y) in pos.items():
        kind = G.nodes[n]["kind"]
        ax.text(x, y, n, ha="center", va="center", fontsize=7.5,
                bbox=dict(boxstyle="round,pad=0.25", fc={"target": "#fde0c5", "channel": "#dbe9f6", "embed": "#e3f1dd",
                                                          "mlp": "#eeeeee", "mixer": "#dbe9f6"}.get(kind, "white"),
                          ec="0.5", lw=0.6))
    xs_all = sorted(cols)
    ax.set_xlim(min(xs_all) - 0.6, max(xs_all) + 0.6)
    ys = [p[1] for p in pos.values()]
    ax.set_ylim(min(ys) - 0.8, max(ys) + 0.8)
    ax.set_xticks([x for x in xs_all])
    ax.set_xticklabels([("embedding" if x == 0 else "target" if x % 1 else f"layer {int(x) - 1}") for x in xs_all],
                       fontsize=8)
    ax.set_yticks([])
    for s in ("left", "right", "top"):
        ax.spines[s].set_visible(False)
    ax.set_title(title or f"{tr.target}: strongest mean terms (red +, blue -)", fontsize=10)
    return ax


# -- notebook 06's selection rule and the claim ------------------------------------------------------------
@torch.no_grad()
def select_prototype(model, tokenizer, train_stream: np.ndarray, word: str = " women", *, candidates: int | None = 16,
                     select_windows: int = 48, select_context: int = 64, seed: int = 0, batch_size: int = 16):
    """(layer, prototype, scan): the prototype chosen as the causal scan of notebook 06
    (``women.measure_women``, claim ``protot/women-causal-scan``) chooses it (the same functions
    and arguments; that scan masks every prototype, ``candidates=None``): windows before ``select_windows`` training occurrences of
    ``word``, the ``candidates`` most selective prototypes (None: all) masked one at a time, the
    largest drop of mean p(word) wins."""
    from protot import ablation, concepts

    tid = concepts.token_id(tokenizer, word)
    ctx = concepts.windows_at(train_stream, tid, select_context, where="before", max_windows=select_windows, seed=seed)
    if len(ctx) < 8:
        raise ValueError(f"{word!r} has only {len(ctx)} training contexts of {select_context} tokens; need >= 8")
    stats = concepts.collect_gates(model, ctx, batch_size=batch_size)
    cand = ablation.selectivity_candidates(stats, tokenizer, word, candidates)
    scan = ablation.mask_scan(model, ctx, tid, cand, batch_size=batch_size)
    return int(scan.layer.iloc[0]), int(scan.prototype.iloc[0]), scan


def null_positions(cap: Capture, layer: int, prototype: int, exclude_token: int, *, min_position: int = 0,
                   top: float = 0.05, max_positions: int = 200, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, positions) of the null: positions >= ``min_position`` of ``cap`` whose token is not
    ``exclude_token`` and where the write gate of ``prototype`` is in its top ``top`` fraction there;
    a seeded random subset of at most ``max_positions``."""
    if not 0 < top <= 1:
        raise ValueError(f"top must lie in (0, 1], got {top}")
    g = cap.write[layer][:, :, prototype].double().cpu()                # (B, T)
    ok = torch.ones_like(g, dtype=torch.bool)
    ok[:, :min_position] = False
    ok &= cap.ids != exclude_token
    vals = g[ok]
    if vals.numel() == 0:
        raise ValueError("no candidate null positions")
    cut = torch.quantile(vals, 1.0 - top)
    rr, pp = torch.nonzero(ok & (g >= cut), as_tuple=True)
    if len(rr) > max_positions:
        pick = np.sort(np.random.default_rng(seed).choice(len(rr), size=max_positions, replace=False))
        rr, pp = rr[pick], pp[pick]
    return rr, pp


def _embed_share(dec: Decomposition) -> np.ndarray:
    return dec.positive_shares(0)[:, dec.atom_index("embed", 0)].numpy()


@torch.no_grad()
def measure_write_circuit(model, tokenizer, val_stream: np.ndarray, layer: int, prototype: int, *,
                          word: str = " women", context: int = 64, max_windows: int | None = None,
                          null_blocks: int = 32, null_top: float = 0.05, null_max: int = 200, n_boot: int = 2000,
                          seed: int = 0, model_name: str = "", selection: dict | None = None, batch_size: int = 16):
    """``protot/women-write-circuit`` as a :class:`compendium.claims.Measurement` (see claims.yaml).

    ``model`` should be float64 (:func:`float64_copy`). Occurrences: validation windows of
    ``context`` tokens with ``word`` at position context // 2 (``concepts.windows_at``, "center").
    Null: ``null_blocks`` random validation blocks of ``context`` tokens, positions >= context // 2,
    other tokens, write gate of the prototype in its top ``null_top`` (at most ``null_max``).
    values: embed_share with its interval over occurrences (embed_share_ci_low / _ci_high), embed_share_margin
    (minus the null positions' share) with its interval (occurrences and null positions resampled each on
    their own), write_selectivity, decomposition_error, n_occurrences. Tables: circuit_atoms (mean term and share per atom, word vs null)."""
    from compendium import claims
    from protot import concepts

    tid = concepts.token_id(tokenizer, word)
    mid = context // 2
    ctx = concepts.windows_at(val_stream, tid, context, where="center", max_windows=max_windows, seed=seed)
    if len(ctx) == 0:
        raise ValueError(f"{word!r} has no validation window of {context} tokens")
    blocks = concepts.sample_blocks(val_stream, null_blocks, context, seed=seed)

    def cap_batched(ids):
        caps = [capture(model, ids[a:a + batch_size]) for a in range(0, len(ids), batch_size)]
        return Capture(ids=torch.cat([c.ids for c in caps]), embed=torch.cat([c.embed for c in caps]),
                       **{f: [torch.cat([getattr(c, f)[l] for c in caps]) for l in range(caps[0].layers)]
                          for f in ("block_in", "mixer_in", "mixer_out", "mlp_out", "write", "read", "values")})

    cw, cn = cap_batched(ctx), cap_batched(blocks)
    dw = decompose(model, cw, layer, "write", mid, prototypes=[prototype], centered=True)
    nr, npos = null_positions(cn, layer, prototype, tid, min_position=mid, top=null_top, max_positions=null_max,
                              seed=seed)
    dn = decompose(model, cn, layer, "write", npos, rows=nr, prototypes=[prototype], centered=True)
    sw, sn = _embed_share(dw), _embed_share(dn)
    share_lo, share_hi = bootstrap_mean_ci(sw, n_boot=n_boot, seed=seed)
    lo, hi = bootstrap_diff(sw, sn, n_boot=n_boot, seed=seed)
    gate_word = cw.write[layer][:, mid, prototype].double()
    gate_all = cn.write[layer][:, :, prototype].double()
    selectivity = float(gate_word.mean() / gate_all.mean())
    err = max(dw.error(), dn.error())
    a_w, a_n = dw.summary(0), dn.summary(0)
    atoms = a_w[["atom", "component", "kind", "layer", "channel", "offset"]].copy()
    atoms["word_mean"], atoms["word_pos_share"] = a_w["mean"], a_w["pos_share"]
    atoms["null_mean"], atoms["null_pos_share"] = a_n["mean"], a_n["pos_share"]
    by_kind = {}
    for name, d in (("word", dw), ("null", dn)):
        sh = d.positive_shares(0).numpy()
        own = (d.meta.offset == 0).to_numpy()
        by_kind[name] = {
            "embed": float(sh[:, (d.meta.kind == "embed").to_numpy() & own].sum(1).mean()),
            "mlp": float(sh[:, (d.meta.kind == "mlp").to_numpy() & own].sum(1).mean()),
            "channel": float(sh[:, d.meta.kind.isin(["channel", "mixer"]).to_numpy() & own].sum(1).mean()),
            "earlier taps": float(sh[:, ~own].sum(1).mean()),
        }
    values = {"embed_share": float(sw.mean()), "embed_share_ci_low": share_lo, "embed_share_ci_high": share_hi,
              "embed_share_margin": float(sw.mean() - sn.mean()), "embed_share_margin_ci_low": lo,
              "embed_share_margin_ci_high": hi, "write_selectivity": selectivity,
              "decomposition_error": err, "n_occurrences": int(len(sw))}
    evidence = {"embed_share_null": float(sn.mean()), "n_null_positions": int(len(sn)),
                "selected": f"L{layer} P{prototype}", "share_by_kind": by_kind,
                "mean_centred_logit_word": float(dw.logit[:, 0].mean()),
                "mean_centred_logit_null": float(dn.logit[:, 0].mean()),
                "mean_write_gate_word": float(gate_word.mean()), "mean_write_gate_all": float(gate_all.mean()),
                "top_atoms_word": a_w.sort_values("pos_share", ascending=False).head(5)[["atom", "pos_share"]]
                .round(4).values.tolist(), **({"selection": selection} if selection else {})}
    config = {"model": model_name, "word": word, "layer": layer, "prototype": prototype, "context": context,
              "word_position": mid, "max_windows": max_windows, "null_blocks": null_blocks, "null_top": null_top,
              "null_max": null_max, "n_boot": n_boot, "seed": seed, "centered": True, "dtype": "float64"}
    shares = pd.DataFrame({"group": ["word"] * len(sw) + ["null"] * len(sn), "embed_share": np.r_[sw, sn]})
    return claims.Measurement(claim="protot/women-write-circuit", values=values, evidence=evidence,
                              tables={"circuit_atoms": atoms, "circuit_embed_shares": shares}, config=config)
