"""Labels of ProtoT prototypes (paper §6) and the check that they name concepts.

A prototype's label, as the paper labels them: the token types that write into it most
(:func:`top_tokens`, ``gate="write"``), those that read from it most (``gate="read"``), and its
top-activating contexts (:func:`top_contexts`: the window before a position with a large write
gate). :func:`prototype_table` gives one row per (layer, prototype) with the dead ones marked
(:mod:`protot.usage`).

Whether the labels name concepts (``protot/concept-prototypes``): :func:`coherence` of each
prototype's top write tokens in an independent model's embedding space, compared by
:func:`measure_concepts` with null models that keep everything but what the prototypes learned:
untrained ProtoTs (:func:`matched_null`), and the trained model with its prototype vectors, or its
prototype vectors and read-routing projections, re-drawn (:func:`redrawn_null`); every null's
gate temperatures are set so its gates are as sharp as the trained model's.

Finding a prototype by its label: :func:`find_prototype` (one word's selectivity) and
:func:`word_gates` / :func:`label_scores` / :func:`select_by_label` (a class of words against
matched words, e.g. female words against non-gender words; they live in :mod:`protot.label_select`
and are reachable from here).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from protot.concepts import GATE_KINDS, GateStats, collect_gates, token_id, token_table
from protot.label_select import LabelSelection, label_scores, select_by_label, top_token_share, word_gates  # noqa: F401
from protot.usage import DEAD_FLOOR, alive_mask, gate_shares

NULL_FAMILIES = ("untrained", "prototypes redrawn", "prototypes and read projections redrawn")


def _purity_entropy(sums: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """From (L, V, R) masses: share of each prototype's mass on its top-``top`` token types, and the
    entropy of its mass over token types divided by log(number of types present)."""
    mass = sums.sum(1)                                                # (L, R)
    srt = -np.sort(-sums, axis=1)                                     # (L, V, R) descending
    purity = srt[:, :top].sum(1) / np.maximum(mass, 1e-300)
    p = sums / np.maximum(mass[:, None], 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(p > 0, p * np.log(p), 0.0).sum(1)
    n_types = max(int((sums.sum((0, 2)) > 0).sum()), 2)
    return purity, h / math.log(n_types)


def _tok(tokenizer, i: int) -> str:
    return tokenizer.decode([int(i)])


def top_tokens(stats: GateStats, tokenizer, layer: int, k: int, *, gate: str = "write", top: int = 10,
               min_count: int = 5, by: str = "mean") -> pd.DataFrame:
    """Token types that write into (``gate="read"``: read from) prototype k of ``layer`` most.

    ``by="mean"``: mean gate per occurrence (types seen at least ``min_count`` times);
    ``by="mass"``: share of the prototype's total gate mass. Columns: token, id, count, mean_gate,
    lift (mean gate on the type / mean gate over all positions), mass_share.
    """
    if by not in ("mean", "mass"):
        raise ValueError(f"by must be 'mean' or 'mass', got {by!r}")
    sums, counts = token_table(stats, gate)
    s = sums[layer, :, k]
    overall = s.sum() / counts.sum()
    keep = np.flatnonzero(counts >= min_count)
    mean = s[keep] / counts[keep]
    order = np.argsort(-(mean if by == "mean" else s[keep]), kind="stable")[:top]
    sel = keep[order]
    return pd.DataFrame({"token": [_tok(tokenizer, i) for i in sel], "id": sel, "count": counts[sel],
                         "mean_gate": s[sel] / counts[sel], "lift": s[sel] / counts[sel] / overall,
                         "mass_share": s[sel] / s.sum()})


def top_contexts(stats: GateStats, tokenizer, layer: int, k: int, *, gate: str = "write", top: int = 5,
                 width: int = 8) -> pd.DataFrame:
    """The ``top`` positions with the largest gate k of ``layer``, each shown with ``width`` tokens
    of left context and 2 of right context; the token itself is marked [[like this]]."""
    g = (stats.write if gate == "write" else stats.read)[layer, :, :, k]   # (N, T)
    flat = np.argsort(-g.reshape(-1), kind="stable")[:top]
    rows = []
    for f in flat:
        n, t = divmod(int(f), g.shape[1])
        seq = stats.ids[n]
        left = tokenizer.decode(seq[max(0, t - width) : t].tolist())
        right = tokenizer.decode(seq[t + 1 : t + 3].tolist())
        rows.append({"gate": float(g[n, t]), "token": _tok(tokenizer, seq[t]),
                     "context": f"{left}[[{_tok(tokenizer, seq[t])}]]{right}".replace("\n", "⏎")})
    return pd.DataFrame(rows)


def prototype_table(stats: GateStats, tokenizer, *, gate: str = "write", top: int = 10, min_count: int = 5,
                    label_tokens: int = 5, contexts: int = 0, width: int = 8,
                    floor: float = DEAD_FLOOR) -> pd.DataFrame:
    """One row per (layer, prototype): half_life, share (its mean ``gate``: fraction of the layer's
    gate mass), write_share, read_share, alive (max share >= ``floor`` / R, :mod:`protot.usage`),
    purity (share of its mass on its top-``top`` token types), entropy (normalised, 0..1), label
    (its ``label_tokens`` top token types by mean ``gate``, count >= ``min_count``), top_lift (lift of
    the first of them), write_tokens and read_tokens (the same ranking by write and by read gate)
    and, when ``contexts`` > 0, top_contexts: its ``contexts`` top-activating write contexts
    (``width`` tokens before the position, the token marked [[so]]), joined by " || "."""
    sums, counts = token_table(stats, gate)
    purity, entropy = _purity_entropy(sums, top)
    share = sums.sum(1) / counts.sum()
    shares, alive = gate_shares(stats), alive_mask(stats, floor)

    def joined(tt):
        return " | ".join(repr(t)[1:-1] for t in tt["token"])

    rows = []
    for layer in range(stats.layers):
        for k in range(stats.prototypes):
            ranked = {kind: top_tokens(stats, tokenizer, layer, k, gate=kind, top=label_tokens, min_count=min_count)
                      for kind in GATE_KINDS}
            tt = ranked[gate]
            row = {"layer": layer, "prototype": k, "half_life": float(stats.half_life[layer, k]),
                   "share": float(share[layer, k]), "write_share": float(shares["write"][layer, k]),
                   "read_share": float(shares["read"][layer, k]), "alive": bool(alive[layer, k]),
                   "purity": float(purity[layer, k]), "entropy": float(entropy[layer, k]),
                   "label": joined(tt), "top_lift": float(tt["lift"].iloc[0]) if len(tt) else float("nan"),
                   "write_tokens": joined(ranked["write"]), "read_tokens": joined(ranked["read"])}
            if contexts > 0:
                row["top_contexts"] = " || ".join(
                    top_contexts(stats, tokenizer, layer, k, gate="write", top=contexts, width=width).context)
            rows.append(row)
    return pd.DataFrame(rows)


def shuffled_purity(stats: GateStats, *, gate: str = "write", top: int = 10, n_perm: int = 5,
                    seed: int = 0) -> np.ndarray:
    """(n_perm, L, R) purities of the same gates with the sample's token ids permuted across positions
    (the null: every gate vector and every token frequency kept, which token got which gate broken)."""
    rng = np.random.default_rng(seed)
    tid = stats.ids.reshape(-1)
    out = []
    for _ in range(n_perm):
        sums, _c = token_table(stats, gate, token_ids=rng.permutation(tid))
        out.append(_purity_entropy(sums, top)[0])
    return np.stack(out)


# -- which prototype is selective for a word ------------------------------------------------------------
@dataclass
class Selection:
    word: str
    token_id: int
    layer: int
    prototype: int
    selectivity: float
    count: int           # occurrences of the word in the sample
    table: pd.DataFrame  # every (layer, prototype), most selective first


def find_prototype(model, tokenizer, word: str, ids: torch.Tensor | None = None, *,
                   stats: GateStats | None = None, gate: str = "write", min_count: int = 3,
                   layers: list[int] | None = None, batch_size: int = 8, next_token: bool = False) -> Selection:
    """The (layer, prototype) most selective for ``word`` (one token): mean ``gate`` on that token
    divided by the mean gate over all positions of the sample (``stats``, or gates collected over
    ``ids``). ``gate="both"`` uses the mean of the write and read selectivities. ``layers``
    restricts the search. ``next_token=True``: gates at the positions *preceding* the word (the
    prototypes active when the word is about to be predicted) instead of at the word itself.
    ValueError when the word is not one token or is rarer than ``min_count``."""
    tid = token_id(tokenizer, word)
    if gate not in (*GATE_KINDS, "both"):
        raise ValueError(f"gate must be 'write', 'read' or 'both', got {gate!r}")
    if stats is None:
        if ids is None:
            raise ValueError("find_prototype needs a sample: ids (N, T) or stats from collect_gates")
        stats = collect_gates(model, ids, batch_size=batch_size)
    kinds = GATE_KINDS if gate == "both" else (gate,)
    sel, on, allm = [], [], []
    for kind in kinds:
        sums, counts = token_table(stats, kind, next_token=next_token)
        n = int(counts[tid])
        if n < min_count:
            raise ValueError(f"{word!r} (token {tid}) occurs {n} times in the sample; need >= {min_count}")
        m_on = sums[:, tid] / n                                        # (L, R)
        m_all = sums.sum(1) / counts.sum()
        on.append(m_on); allm.append(m_all); sel.append(m_on / np.maximum(m_all, 1e-300))
    S = np.mean(sel, 0)
    L, R = S.shape
    rows = [{"layer": l, "prototype": k, "selectivity": float(S[l, k]),
             **{f"{kind}_selectivity": float(sel[i][l, k]) for i, kind in enumerate(kinds)},
             **{f"{kind}_on_word": float(on[i][l, k]) for i, kind in enumerate(kinds)},
             **{f"{kind}_mean": float(allm[i][l, k]) for i, kind in enumerate(kinds)},
             "half_life": float(stats.half_life[l, k])}
            for l in range(L) for k in range(R) if layers is None or l in layers]
    if not rows:
        raise ValueError(f"no layer of {list(range(L))} selected by layers={layers}")
    table = pd.DataFrame(rows).sort_values("selectivity", ascending=False, kind="stable").reset_index(drop=True)
    best = table.iloc[0]
    return Selection(word, tid, int(best["layer"]), int(best["prototype"]), float(best["selectivity"]), n, table)


# -- concept null with matched gate sharpness, and semantic coherence -------------------------------------
REFERENCE_MODEL = "gemma-3-270m"


@torch.no_grad()
def mean_gate_entropy(model, ids: torch.Tensor, batch_size: int = 8) -> dict[str, float]:
    """Mean entropy (nats) of the write and read gates over prototypes, averaged over every layer and
    position of ``ids`` (N, T): {"write": ..., "read": ...}."""
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    tot = {"write": 0.0, "read": 0.0}
    n = 0
    try:
        for a in range(0, ids.shape[0], batch_size):
            out = model(ids[a:a + batch_size].to(dev), use_cache=False, output_gates=True, logits_to_keep=1)
            for g in out.gates:
                for kind in tot:
                    p = g[f"{kind}_gate"].double()
                    tot[kind] += float(-(p * torch.log(p.clamp_min(1e-300))).sum(-1).sum())
            n += ids[a:a + batch_size].numel() * len(out.gates)
    finally:
        model.train(was)
    return {k: v / n for k, v in tot.items()}


def set_temperature(model, kind: str, value: float) -> None:
    """Set the ``kind`` ("write"/"read") gate temperature of a null model to ``value``: the config's
    temperature (compendium-v1 divides its gate logits by it at every forward), and, for a mixer
    with learned temperatures (the authors' ``write_tau`` / ``read_tau`` per head), each of them
    set to ``value`` times its value when first set (so ``value`` is a factor there). The authors'
    layer 0 reads with its write routing, so its read gate follows the write temperature."""
    setattr(model.config, f"{kind}_temperature", float(value))
    for mixer in model.mixers():
        tau = getattr(mixer, f"{kind}_tau", None)
        if tau is None:
            continue
        base = mixer.__dict__.setdefault(f"_{kind}_tau_base", tau.detach().clone())
        with torch.no_grad():
            tau.copy_(base * value)


def _search_temperature(model, ids, kind: str, target: float, lo: float = 1e-3, hi: float = 1e2,
                        tol: float = 0.005, max_iter: int = 24) -> float:
    """Bisection on log temperature of ``kind`` ("write"/"read", :func:`set_temperature`) until the
    mean gate entropy is within ``tol`` (relative) of ``target``; deterministic. Returns the
    temperature (also on model.config)."""
    attr = f"{kind}_temperature"
    a, b = math.log(lo), math.log(hi)
    for _ in range(max_iter):
        mid = 0.5 * (a + b)
        set_temperature(model, kind, math.exp(mid))
        h = mean_gate_entropy(model, ids)[kind]
        if abs(h / target - 1.0) <= tol:
            break
        if h > target:     # too flat: lower the temperature
            b = mid
        else:
            a = mid
    return float(getattr(model.config, attr))


@dataclass
class MatchedNull:
    model: torch.nn.Module
    seed: int
    write_temperature: float
    read_temperature: float
    entropy: dict          # mean gate entropies on the search sample after matching
    family: str = "untrained"   # one of NULL_FAMILIES


def _match_temperatures(null, search_ids, target: dict, tol: float, rounds: int) -> dict:
    """Set ``null``'s write then read temperature by bisection (up to ``rounds`` times) so its mean
    gate entropies on ``search_ids`` match ``target``; returns the entropies reached."""
    for _ in range(rounds):
        for kind in ("write", "read"):
            _search_temperature(null, search_ids, kind, target[kind], tol=tol)
        h = mean_gate_entropy(null, search_ids)
        if all(abs(h[k] / target[k] - 1.0) <= tol for k in ("write", "read")):
            break
    return h


def _fresh(trained, seed: int):
    """A freshly initialised model of ``trained``'s type and config (weights drawn with torch seed
    ``seed``; the caller's RNG state kept)."""
    cfg = copy.deepcopy(trained.config)
    rng_state = torch.get_rng_state()
    try:
        torch.manual_seed(seed)
        return type(trained)(cfg).to(next(trained.parameters()).device).eval()
    finally:
        torch.set_rng_state(rng_state)


def matched_null(trained, seed: int, search_ids: torch.Tensor, target: dict | None = None, *,
                 tol: float = 0.005, rounds: int = 2) -> MatchedNull:
    """An untrained ProtoT with ``trained``'s config (weights drawn with torch seed ``seed``) whose
    write and read temperatures are set by 1-D searches (bisection on log temperature, write then
    read, repeated up to ``rounds`` times) so that its mean write / read gate entropies on
    ``search_ids`` match ``target`` (default: ``trained``'s on the same ids) within ``tol``."""
    target = target or mean_gate_entropy(trained, search_ids)
    null = _fresh(trained, seed)
    h = _match_temperatures(null, search_ids, target, tol, rounds)
    return MatchedNull(null, seed, float(null.config.write_temperature), float(null.config.read_temperature), h,
                       "untrained")


def read_projection(mixer):
    """The parameter a token's read query goes through before it meets the prototypes: the shared
    key projection W_k (``key_proj``) of a model that shares keys, else W_r (``read_proj``); None
    when the mixer reads with the normed token itself (the authors' layer 0)."""
    for name in ("key_proj", "read_proj"):
        m = getattr(mixer, name, None)
        if m is not None:
            return m.weight if isinstance(m, torch.nn.Module) else m
    return None


def redrawn_null(trained, seed: int, search_ids: torch.Tensor, target: dict | None = None, *,
                 read_projections: bool = False, tol: float = 0.005, rounds: int = 2) -> MatchedNull:
    """A copy of ``trained`` with every layer's prototype vectors (and, with ``read_projections``,
    every layer's :func:`read_projection`) replaced by a fresh draw from the model's own
    initialisation (a new model of the same config, torch seed ``seed``), everything else trained;
    its temperatures then matched to ``target`` as in :func:`matched_null`. ``trained`` is left as
    it was (the copy has its own config)."""
    target = target or mean_gate_entropy(trained, search_ids)
    fresh = _fresh(trained, seed)
    null = copy.deepcopy(trained).eval()
    with torch.no_grad():
        for mine, new in zip(null.mixers(), fresh.mixers()):
            mine.prototypes.copy_(new.prototypes)
            if read_projections:
                a, b = read_projection(mine), read_projection(new)
                if a is not None:
                    a.copy_(b)
    h = _match_temperatures(null, search_ids, target, tol, rounds)
    family = NULL_FAMILIES[2] if read_projections else NULL_FAMILIES[1]
    return MatchedNull(null, seed, float(null.config.write_temperature), float(null.config.read_temperature), h,
                       family)


def null_model(trained, family: str, seed: int, search_ids: torch.Tensor, target: dict | None = None,
               **kwargs) -> MatchedNull:
    """The null model of ``family`` (one of :data:`NULL_FAMILIES`) drawn with ``seed``."""
    if family == NULL_FAMILIES[0]:
        return matched_null(trained, seed, search_ids, target, **kwargs)
    if family in NULL_FAMILIES[1:]:
        return redrawn_null(trained, seed, search_ids, target, read_projections=family == NULL_FAMILIES[2], **kwargs)
    raise ValueError(f"family must be one of {NULL_FAMILIES}, got {family!r}")


@dataclass
class ReferenceEmbeddings:
    """Input embeddings, in an independent model, of our token types that are one token there.
    ``ours``: our token ids (sorted); ``vectors``: (n, d) rows, centred (the mean over the ``n``
    rows subtracted) and L2-normalised, so a dot product is a centred cosine similarity."""
    name: str
    ours: np.ndarray
    theirs: np.ndarray
    vectors: np.ndarray

    def index(self) -> dict[int, int]:
        return {int(t): i for i, t in enumerate(self.ours)}


def reference_embeddings(tokenizer, name: str = REFERENCE_MODEL) -> ReferenceEmbeddings:
    """Map our token types to ``name``'s (Gemma-3-270M's) input embeddings, offline.

    Each of our ids is decoded to its string and encoded by the reference tokenizer without special
    tokens; only strings that are exactly one reference token are kept (the others, and our special
    tokens, are left out). Loads the reference model's cached folder (converted once by
    :func:`accpp.models.load_model`, which says how to install it when missing), reads only its
    embedding matrix, and caches the mapped rows under ``<cache>/concepts/``.
    """
    from compendium import paths
    from protot.train import tokenizer as tk

    cache = paths.cache_dir() / "concepts" / f"{name}-embed-{tk.tokenizer_hash()[:16]}.npz"
    if cache.exists():
        z = np.load(cache)
        return ReferenceEmbeddings(name, z["ours"], z["theirs"], z["vectors"])
    from accpp import models as am
    from safetensors import safe_open
    from transformers import AutoTokenizer

    folder = am.converted_folder(name)  # converted once and checked (ModelNotInstalled names the install line)
    ref_tok = AutoTokenizer.from_pretrained(folder)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    ours, theirs = [], []
    for i in range(len(tokenizer)):
        if i in special:
            continue
        s = tokenizer.decode([i])
        if not s or "\ufffd" in s:
            continue
        enc = ref_tok.encode(s, add_special_tokens=False)
        if len(enc) == 1:
            ours.append(i)
            theirs.append(enc[0])
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        key = next(k for k in f.keys() if k.endswith("embed_tokens.weight"))
        E = f.get_tensor(key).float()
    v = E[torch.tensor(theirs)].double().numpy()
    v = v - v.mean(0, keepdims=True)
    v = v / np.linalg.norm(v, axis=1, keepdims=True).clip(1e-12)
    out = ReferenceEmbeddings(name, np.asarray(ours), np.asarray(theirs), v.astype(np.float32))
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp.npz")
    np.savez(tmp, ours=out.ours, theirs=out.theirs, vectors=out.vectors)
    tmp.replace(cache)
    return out


def coherence(stats: GateStats, ref: ReferenceEmbeddings, *, gate: str = "write", top: int = 10,
              min_count: int = 5) -> np.ndarray:
    """(L, R): for each prototype, the mean pairwise cosine similarity (``ref``'s centred vectors) of
    its ``top`` token types by mean gate, among the types seen at least ``min_count`` times that are
    one reference token. NaN when fewer than 2 such types exist."""
    sums, counts = token_table(stats, gate)
    pos = ref.index()
    keep = np.array([i for i in np.flatnonzero(counts >= min_count) if int(i) in pos], dtype=np.int64)
    if len(keep) < 2:
        raise ValueError(f"only {len(keep)} token types are seen >= {min_count} times and map to {ref.name}")
    vecs = ref.vectors[[pos[int(i)] for i in keep]].astype(np.float64)
    mean = sums[:, keep] / counts[keep][None, :, None]             # (L, n, R)
    L, _, R = mean.shape
    out = np.full((L, R), np.nan)
    k = min(top, len(keep))
    for l in range(L):
        order = np.argsort(-mean[l], axis=0, kind="stable")[:k]    # (k, R)
        for r in range(R):
            v = vecs[order[:, r]]
            g = v @ v.T
            out[l, r] = (g.sum() - np.trace(g)) / (k * (k - 1))
    return out


def random_set_coherence(stats: GateStats, ref: ReferenceEmbeddings, *, top: int = 10, min_count: int = 5,
                         n: int = 200, seed: int = 0) -> np.ndarray:
    """(n,) coherence of random sets of ``top`` token types drawn from the same pool as
    :func:`coherence` (seen >= ``min_count`` times, one reference token): the chance level."""
    _, counts = token_table(stats, "write")
    pos = ref.index()
    keep = [int(i) for i in np.flatnonzero(counts >= min_count) if int(i) in pos]
    vecs = ref.vectors[[pos[i] for i in keep]].astype(np.float64)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        v = vecs[rng.choice(len(keep), size=min(top, len(keep)), replace=False)]
        g = v @ v.T
        out.append((g.sum() - np.trace(g)) / (len(v) * (len(v) - 1)))
    return np.asarray(out)


def margin_interval(trained: np.ndarray, pool: np.ndarray, n_boot: int = 2000, seed: int = 0,
                    level: float = 0.95) -> tuple[float, float, float]:
    """(margin, low, high): mean(trained) - mean(pool) and its percentile bootstrap interval, the
    two sets of per-prototype values resampled independently (NaNs dropped first)."""
    t, p = np.asarray(trained, float), np.asarray(pool, float)
    t, p = t[np.isfinite(t)], p[np.isfinite(p)]
    if len(t) < 2 or len(p) < 2:
        raise ValueError(f"need at least 2 values on each side, got {len(t)} and {len(p)}")
    rng = np.random.default_rng(seed)
    d = t[rng.integers(0, len(t), (n_boot, len(t)))].mean(1) - p[rng.integers(0, len(p), (n_boot, len(p)))].mean(1)
    lo, hi = np.quantile(d, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(t.mean() - p.mean()), float(lo), float(hi)


def min_margin_interval(trained: np.ndarray, pools: list[np.ndarray], n_boot: int = 2000, seed: int = 0,
                        level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the smallest margin over null families, mean(trained) - max over
    ``pools`` of mean(pool): the trained prototypes resampled once per resample (shared by every
    family's margin), each family's pool on its own (NaNs dropped first; :func:`compendium.stats.
    bootstrap_groups_ci`). With one pool it is :func:`margin_interval`'s interval."""
    from compendium.stats import bootstrap_groups_ci

    def finite(x):
        x = np.asarray(x, float)
        return x[np.isfinite(x)]

    t, ps = finite(trained), [finite(p) for p in pools]
    if len(t) < 2 or not ps or min(len(p) for p in ps) < 2:
        raise ValueError(f"need at least 2 values on each side, got {len(t)} and {[len(p) for p in ps]}")
    return bootstrap_groups_ci(lambda tr, *pl: tr[0].mean(1) - np.max([p[0].mean(1) for p in pl], axis=0),
                               (t,), *((p,) for p in ps), n_boot=n_boot, seed=seed, level=level)


def measure_concepts(trained_stats: GateStats, null_stats: list[GateStats], ref: ReferenceEmbeddings, *,
                     trained_entropy: dict, null_entropy: list[dict], top: int = 10, min_count: int = 5,
                     null_info: list[dict] | None = None, null_families: list[str] | None = None,
                     floor: float | None = DEAD_FLOOR, n_boot: int = 2000, config: dict | None = None,
                     seed: int = 0):
    """``protot/concept-prototypes`` as a :class:`compendium.claims.Measurement`.

    Per null family (``null_families[i]`` names null model i's family; default: all "untrained"):
    margin = mean :func:`coherence` over the trained model's alive prototypes minus the mean over
    the family's pooled alive prototypes, with a bootstrap interval over prototypes
    (:func:`margin_interval`). ``floor``: the dead-prototype floor of :mod:`protot.usage` (None:
    every prototype counts). Values: coherence_margin (the smallest margin over families: the trained
    mean minus the largest family mean) and its interval coherence_margin_ci_low / _ci_high
    (:func:`min_margin_interval`), alive_prototypes (the trained model's alive prototypes with a
    coherence: the interval's units on the trained side), null_entropy_gap (largest |H_null / H_trained - 1| of the mean write-gate
    entropy), null_seeds (the smallest number of null models in a family), coherence_trained.
    Tables: concept_coherence (one row per model, layer, prototype, with family and alive) and
    concept_null_families (one row per family)."""
    from compendium import claims

    if not null_stats or len(null_stats) != len(null_entropy):
        raise ValueError("need one entropy dict per null model, and at least one null model")
    families = list(null_families) if null_families is not None else [NULL_FAMILIES[0]] * len(null_stats)
    if len(families) != len(null_stats):
        raise ValueError(f"{len(families)} family names for {len(null_stats)} null models")

    def alive_of(stats):
        return alive_mask(stats, floor) if floor is not None else np.ones((stats.layers, stats.prototypes), bool)

    coh_t, alive_t = coherence(trained_stats, ref, top=top, min_count=min_count), alive_of(trained_stats)
    coh_n = [coherence(s, ref, top=top, min_count=min_count) for s in null_stats]
    alive_n = [alive_of(s) for s in null_stats]
    mean_t = float(np.nanmean(coh_t[alive_t]))
    mean_n = [float(np.nanmean(c[a])) for c, a in zip(coh_n, alive_n)]
    gaps = [abs(h["write"] / trained_entropy["write"] - 1.0) for h in null_entropy]
    read_gaps = [abs(h["read"] / trained_entropy["read"] - 1.0) for h in null_entropy]
    chance = random_set_coherence(trained_stats, ref, top=top, min_count=min_count, seed=seed)
    fam_rows = []
    for fam in dict.fromkeys(families):
        idx = [i for i, f in enumerate(families) if f == fam]
        pool = np.concatenate([coh_n[i][alive_n[i]] for i in idx])
        margin, lo, hi = margin_interval(coh_t[alive_t], pool, n_boot=n_boot, seed=seed)
        fam_rows.append({"family": fam, "models": len(idx), "alive_prototypes": int(sum(alive_n[i].sum() for i in idx)),
                         "coherence": float(np.nanmean(pool)), "margin": margin, "ci_low": lo, "ci_high": hi})
    fam_df = pd.DataFrame(fam_rows)
    fams = list(dict.fromkeys(families))
    pools = [np.concatenate([coh_n[i][alive_n[i]] for i, f in enumerate(families) if f == fam]) for fam in fams]
    trained_alive = coh_t[alive_t]
    min_lo, min_hi = min_margin_interval(trained_alive, pools, n_boot=n_boot, seed=seed)
    rows = []
    for name, fam, c, a in [("trained", "trained", coh_t, alive_t)] + [
            (f"null {i}", families[i], c, alive_n[i]) for i, c in enumerate(coh_n)]:
        L, R = c.shape
        rows += [{"model": name, "family": fam, "layer": l, "prototype": r, "alive": bool(a[l, r]),
                  "coherence": float(c[l, r])} for l in range(L) for r in range(R)]
    worst = fam_df.loc[fam_df["ci_low"].idxmin()]
    return claims.Measurement(
        claim="protot/concept-prototypes",
        values={"coherence_margin": float(fam_df["margin"].min()), "coherence_margin_ci_low": min_lo,
                "coherence_margin_ci_high": min_hi, "alive_prototypes": int(np.isfinite(trained_alive).sum()),
                "null_entropy_gap": max(gaps), "null_seeds": int(fam_df["models"].min()),
                "coherence_trained": mean_t, "coherence_null_max": max(mean_n)},
        evidence={"coherence_null": mean_n, "null_families": families, "read_entropy_gap_max": max(read_gaps),
                  "closest_family": str(worst["family"]),
                  "family_margins": {r.family: [r.margin, r.ci_low, r.ci_high] for r in fam_df.itertuples()},
                  "alive_trained": int(alive_t.sum()), "prototypes": int(alive_t.size),
                  "entropy_trained": trained_entropy, "entropy_null": null_entropy, "null_models": null_info or [],
                  "chance_coherence_mean": float(chance.mean()),
                  "chance_coherence_p95": float(np.quantile(chance, 0.95)),
                  "reference_tokens": int(len(ref.ours))},
        tables={"concept_coherence": pd.DataFrame(rows), "concept_null_families": fam_df},
        config=dict(config or {}, top=top, min_count=min_count, reference=ref.name, dead_floor=floor, n_boot=n_boot))
