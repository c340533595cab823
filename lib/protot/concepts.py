"""Concept labels of ProtoT prototypes and ablations of one prototype (paper §6: "women" L9 P7).

Everything works on the write / read gates that ``model(ids, output_gates=True)`` returns: the
write gate w_{t,k} says how much token t sends into channel k of a layer, the read gate r_{t,k}
how much it reads from it. Layers and prototypes count from 0, as in :mod:`protot.intervene`.

- :func:`load_model`: the trained ProtoT a notebook uses (a committed model, else the latest
  checkpoint of a training run, else a clear error saying how to get one) and a line naming it.
- :func:`sample_blocks`, :func:`windows_at`: token windows from the cached token streams.
- :func:`collect_gates` -> :class:`GateStats`: the gates of every layer over a text sample.
- :func:`token_table`, :func:`top_tokens`, :func:`top_contexts`: which token types / contexts
  write into (read from) a prototype most (mean gate per token type, with a minimum count).
- :func:`prototype_table`: a data-driven label per (layer, prototype): its top tokens and the
  concentration of its gate mass (``purity``: share of the mass on its top-10 token types;
  ``entropy``: normalised entropy of the mass over token types). :func:`shuffled_purity` is the
  null: the same gates with the token ids permuted across positions (token frequencies and gate
  distributions kept, their association broken).
- :func:`find_prototype`: the (layer, prototype) most selective for one word (mean gate on that
  token / mean gate on all tokens).
- :func:`target_probs`, :func:`ablation`: p(target) at positions whose next token is the target,
  and perplexity, intact vs with a prototype masked / reinitialised (context managers of
  :mod:`protot.intervene`, which restore the weights exactly).
"""
from __future__ import annotations

import json
import math
import random
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from protot import intervene

GATE_KINDS = ("write", "read")
EDITS = ("none", "mask", "reinit", "mask-write", "mask-read")
DEFAULT_MODEL = "protot-cpu"
DEFAULT_RUN = ".cache/runs/protot-cpu-hour"


# -- the model a notebook uses ---------------------------------------------------------------------
@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    description: str  # one line naming the model (for the notebook's output and the claims' notes)
    source: str       # "committed" or "run"
    name: str         # the committed name, or the run folder


def load_model(name: str = DEFAULT_MODEL, run: str | Path | None = DEFAULT_RUN,
               device: str | torch.device = "cpu") -> LoadedModel:
    """The trained ProtoT a notebook uses.

    ``name`` is a committed model (``models/<name>``, loaded with :func:`protot.train.pretrained.load`)
    or a path to a training run folder. When no committed model ``name`` exists, the latest
    checkpoint of ``run`` (relative paths are under the repository root) is loaded instead. When
    neither exists, FileNotFoundError says how to get one.
    """
    from compendium import paths
    from protot.train import checkpoint, pretrained, sweep
    from protot.train import tokenizer as tk

    if name in pretrained.available():
        m = pretrained.load(name, device=device)
        return LoadedModel(m.model, m.tokenizer, pretrained.describe(name), "committed", name)
    tried = [f"models/{name} (committed models: {pretrained.available() or 'none'})"]
    candidates = [Path(name)] if ("/" in name or Path(name).is_dir()) else []
    if run is not None:
        candidates.append(Path(run))
    for folder in candidates:
        folder = folder if folder.is_absolute() else paths.repo_root() / folder
        ck = checkpoint.latest(folder) if (folder / "checkpoints").is_dir() else None
        if ck is None:
            tried.append(f"{folder} (no checkpoint)")
            continue
        rng = torch.get_rng_state(), random.getstate()
        try:
            model, cfg = sweep.load_run(folder, device=str(device))
        finally:   # loading a checkpoint restores its training RNG state: keep the caller's
            torch.set_rng_state(rng[0])
            random.setstate(rng[1])
        state = json.loads((ck / "state.json").read_text())
        n = sum(p.numel() for p in model.parameters())
        ppl = [m for m in _read_jsonl(folder / "metrics.jsonl") if m.get("split") == "validation"]
        ppl_text = f", last validation ppl {ppl[-1]['ppl']:.1f} (step {ppl[-1]['step']})" if ppl else ""
        desc = (f"run {folder.name} checkpoint {ck.name} (not a committed model): {cfg.arch} "
                f"({n / 1e6:.1f} M params, {model.config.num_hidden_layers} layers x {model.config.hidden_size}), "
                f"{state['tokens_seen'] / 1e6:.2f} M tokens of {cfg.tokens / 1e6:.2f} M planned{ppl_text}")
        return LoadedModel(model, tk.load_hf_tokenizer(), desc, "run", str(folder))
    raise FileNotFoundError(
        f"no trained ProtoT model: looked for {'; '.join(tried)}. Get one with `make setup` (the committed "
        "models/ ship with the repository: `git checkout -- models/`), or train and export it: "
        "`python -m protot.train --arch protot --profile cpu-hour --out .cache/runs/protot-cpu-hour --resume "
        "--threads 1` then `python -m protot.train.pretrained export .cache/runs/protot-cpu-hour protot-cpu`.")


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written by a running training
            pass
    return out


# -- text samples ------------------------------------------------------------------------------------
def sample_blocks(stream: np.ndarray, n_blocks: int, context: int, seed: int = 0) -> torch.Tensor:
    """(n, context) int64: ``n_blocks`` distinct non-overlapping blocks of ``stream``, seeded."""
    from protot.train import packing

    total = packing.blocks(stream, context)
    if total < 1:
        raise ValueError(f"the stream ({len(stream)} tokens) is shorter than one block of {context}")
    ids = np.sort(np.random.default_rng(seed).choice(total, size=min(n_blocks, total), replace=False))
    return packing.gather(stream, ids, context)


def token_id(tokenizer, word: str) -> int:
    """The id of ``word`` when it is exactly one token, else ValueError naming the word."""
    ids = tokenizer.encode(word, add_special_tokens=False)
    if len(ids) != 1:
        pieces = [tokenizer.decode([i]) for i in ids]
        raise ValueError(f"{word!r} is not a single token of this tokenizer (it encodes to {len(ids)} tokens: "
                         f"{pieces}); probe a word that is one token, e.g. with its leading space")
    return int(ids[0])


def windows_at(stream: np.ndarray, target: int, context: int, *, where: str = "before",
               max_windows: int | None = None, seed: int = 0) -> torch.Tensor:
    """(n, context) int64 windows of ``stream`` at the occurrences of token ``target``.

    ``where="before"``: the ``context`` tokens just before an occurrence (the last position's next
    token is ``target``: the positions where p(target) is measured). ``where="center"``: windows
    holding the occurrence at position ``context // 2``. Occurrences too close to either end are
    skipped; ``max_windows`` keeps a seeded random subset (in stream order).
    """
    if where not in ("before", "center"):
        raise ValueError(f"where must be 'before' or 'center', got {where!r}")
    s = np.asarray(stream)
    pos = np.flatnonzero(s == target)
    start = pos - context if where == "before" else pos - context // 2
    ok = (start >= 0) & (start + context <= len(s))
    start = start[ok]
    if max_windows is not None and len(start) > max_windows:
        start = np.sort(np.random.default_rng(seed).choice(start, size=max_windows, replace=False))
    if len(start) == 0:
        return torch.zeros(0, context, dtype=torch.long)
    return torch.from_numpy(np.stack([s[a : a + context].astype(np.int64) for a in start]))


# -- gates over a sample -------------------------------------------------------------------------------
@dataclass
class GateStats:
    """Gates of every layer over a sample: ``ids`` (N, T); ``write`` / ``read`` (L, N, T, R) float32;
    ``half_life`` (L, R) in tokens; ``vocab_size``."""

    ids: np.ndarray
    write: np.ndarray
    read: np.ndarray
    half_life: np.ndarray
    vocab_size: int
    _tables: dict = field(default_factory=dict, repr=False)

    @property
    def layers(self) -> int:
        return self.write.shape[0]

    @property
    def prototypes(self) -> int:
        return self.write.shape[-1]

    def gate(self, kind: str) -> np.ndarray:
        """(L, N*T, R) gates of ``kind`` ("write" or "read") with positions flattened."""
        if kind not in GATE_KINDS:
            raise ValueError(f"gate must be one of {GATE_KINDS}, got {kind!r}")
        g = self.write if kind == "write" else self.read
        return g.reshape(g.shape[0], -1, g.shape[-1])


@torch.no_grad()
def collect_gates(model, ids: torch.Tensor, batch_size: int = 8) -> GateStats:
    """Run ``model`` over ``ids`` (N, T) and keep every layer's write and read gates."""
    if ids.ndim != 2 or ids.shape[0] == 0:
        raise ValueError(f"ids must be a non-empty (N, T) tensor, got shape {tuple(ids.shape)}")
    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    writes, reads = [], []
    try:
        for a in range(0, ids.shape[0], batch_size):
            out = model(ids[a : a + batch_size].to(dev), use_cache=False, output_gates=True)
            if out.gates is None:
                raise ValueError("the model returned no gates (not a ProtoT model?)")
            writes.append(torch.stack([g["write_gate"] for g in out.gates]).float().cpu())
            reads.append(torch.stack([g["read_gate"] for g in out.gates]).float().cpu())
    finally:
        model.train(was_training)
    hl = torch.stack([g["half_life"] for g in out.gates]).float().cpu().numpy()
    return GateStats(ids=ids.cpu().numpy().astype(np.int64), write=torch.cat(writes, 1).numpy(),
                     read=torch.cat(reads, 1).numpy(), half_life=hl, vocab_size=int(model.config.vocab_size))


def token_table(stats: GateStats, gate: str = "write", token_ids: np.ndarray | None = None, *,
                next_token: bool = False):
    """(sums (L, V, R): gate mass per token type, counts (V,)); ``token_ids`` replaces the sample's
    (flattened) ids, e.g. a permutation of them for the shuffled null. ``next_token=True``
    attributes the gate at position t to the token at t + 1 (which prototypes are written / read
    just before a token is predicted); the last position of each row is then left out."""
    key = (gate, next_token) if token_ids is None else None
    if key is not None and key in stats._tables:
        return stats._tables[key]
    g = stats.write if gate == "write" else stats.read if gate == "read" else stats.gate(gate)
    ids = stats.ids
    if next_token:
        g, ids = g[:, :, :-1], ids[:, 1:]
    g = torch.from_numpy(np.ascontiguousarray(g).reshape(g.shape[0], -1, g.shape[-1])).double()   # (L, M, R)
    tid = ids.reshape(-1) if token_ids is None else np.asarray(token_ids).reshape(-1)
    if tid.shape[0] != g.shape[1]:
        raise ValueError(f"token_ids has {tid.shape[0]} entries for {g.shape[1]} positions")
    V = stats.vocab_size
    sums = torch.zeros(g.shape[0], V, g.shape[-1], dtype=torch.float64)
    sums.index_add_(1, torch.from_numpy(tid), g)
    counts = np.bincount(tid, minlength=V)
    out = (sums.numpy(), counts)
    if key is not None:
        stats._tables[key] = out
    return out


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
                    label_tokens: int = 5) -> pd.DataFrame:
    """One row per (layer, prototype): half_life, share (its mean gate: fraction of all gate mass),
    purity (share of its mass on its top-``top`` token types), entropy (normalised, 0..1),
    label (its ``label_tokens`` top token types by mean gate, count >= ``min_count``) and the lift
    of the first of them."""
    sums, counts = token_table(stats, gate)
    purity, entropy = _purity_entropy(sums, top)
    share = sums.sum(1) / counts.sum()
    rows = []
    for layer in range(stats.layers):
        for k in range(stats.prototypes):
            tt = top_tokens(stats, tokenizer, layer, k, gate=gate, top=label_tokens, min_count=min_count)
            rows.append({"layer": layer, "prototype": k, "half_life": float(stats.half_life[layer, k]),
                         "share": float(share[layer, k]), "purity": float(purity[layer, k]),
                         "entropy": float(entropy[layer, k]),
                         "label": " | ".join(repr(t)[1:-1] for t in tt["token"]),
                         "top_lift": float(tt["lift"].iloc[0]) if len(tt) else float("nan")})
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


def class_selectivity(stats: GateStats, token_ids, *, gate: str = "write") -> pd.DataFrame:
    """Selectivity of every (layer, prototype) for a class of token types (e.g. all digit tokens):
    mean gate over the positions holding one of ``token_ids`` / mean gate over all positions.
    Columns layer, prototype, selectivity, on_class, mean, count (positions of the class); most
    selective first."""
    sums, counts = token_table(stats, gate)
    tids = np.unique(np.asarray(list(token_ids), dtype=np.int64))
    n = int(counts[tids].sum())
    if n == 0:
        raise ValueError("none of the class's tokens occurs in the sample")
    on = sums[:, tids].sum(1) / n
    allm = sums.sum(1) / counts.sum()
    L, R = on.shape
    df = pd.DataFrame([{"layer": l, "prototype": k, "selectivity": float(on[l, k] / max(allm[l, k], 1e-300)),
                        "on_class": float(on[l, k]), "mean": float(allm[l, k]), "count": n,
                        "half_life": float(stats.half_life[l, k])} for l in range(L) for k in range(R)])
    return df.sort_values("selectivity", ascending=False, kind="stable").reset_index(drop=True)


def token_class(tokenizer, predicate) -> list[int]:
    """Ids of the token types whose decoded text satisfies ``predicate`` (e.g. str.isdigit after strip)."""
    return [i for i in range(len(tokenizer)) if predicate(tokenizer.decode([i]))]


# -- ablation ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Edit:
    """An edit of prototype ``k`` of ``layer``: kind "none" (the intact model), "mask" (both gates),
    "mask-write", "mask-read", or "reinit" (p_k redrawn from N(0, 1) with ``seed``)."""

    kind: str
    layer: int = 0
    k: int = 0
    seed: int = 0
    name: str = ""

    def label(self) -> str:
        return self.name or ("intact" if self.kind == "none" else f"{self.kind} L{self.layer} P{self.k}")


@contextmanager
def edited(model, edit: Edit):
    """Context manager applying ``edit`` to ``model`` (restored exactly on exit)."""
    if edit.kind not in EDITS:
        raise ValueError(f"edit kind must be one of {EDITS}, got {edit.kind!r}")
    if edit.kind == "none":
        cm = nullcontext()
    elif edit.kind == "reinit":
        cm = intervene.reinit_prototype(model, edit.layer, edit.k, seed=edit.seed)
    else:
        gate = {"mask": "both", "mask-write": "write", "mask-read": "read"}[edit.kind]
        cm = intervene.mask_prototype(model, edit.layer, edit.k, gate=gate)
    with cm:
        yield model


@torch.no_grad()
def target_probs(model, contexts: torch.Tensor, target: int, batch_size: int = 16) -> np.ndarray:
    """(n,) p(target | context) at the last position of each row of ``contexts`` (n, T), float64."""
    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    out = []
    try:
        for a in range(0, contexts.shape[0], batch_size):
            logits = model(contexts[a : a + batch_size].to(dev), use_cache=False).logits[:, -1].double()
            out.append(torch.softmax(logits, -1)[:, target].cpu())
    finally:
        model.train(was_training)
    return torch.cat(out).numpy() if out else np.zeros(0)


def perplexity(model, stream: np.ndarray, context: int, max_blocks: int, batch_size: int = 16) -> float:
    """exp(mean next-token NLL) over the first ``max_blocks`` blocks of ``stream`` (protot.train.evaluate)."""
    from protot.train import evaluate

    total, count = evaluate.stream_nll(model, stream, context, batch_size=batch_size, max_blocks=max_blocks)
    return math.exp(total / count)


def ablation(model, contexts: torch.Tensor, target: int, edits: list[Edit], *,
             ppl_stream: np.ndarray | None = None, ppl_context: int = 256, ppl_blocks: int = 8,
             batch_size: int = 16, keep_probs: bool = False) -> pd.DataFrame:
    """p(target) on ``contexts`` and perplexity on ``ppl_stream`` (optional) for the intact model and
    each edit. One row per edit (the intact model first): p_mean, p_change_pct (relative change of
    the mean p(target) vs intact, %), and when ``ppl_stream`` is given ppl and ppl_change_pct.
    ``keep_probs``: a column ``probs`` holding the per-context p(target) arrays."""
    rows = []
    for e in [Edit("none"), *edits]:
        with edited(model, e):
            p = target_probs(model, contexts, target, batch_size)
            ppl = perplexity(model, ppl_stream, ppl_context, ppl_blocks, batch_size) if ppl_stream is not None else None
        row = {"edit": e.label(), "kind": e.kind, "layer": e.layer if e.kind != "none" else None,
               "prototype": e.k if e.kind != "none" else None, "p_mean": float(p.mean()) if len(p) else float("nan"),
               "n_contexts": len(p)}
        if ppl is not None:
            row["ppl"] = ppl
        if keep_probs:
            row["probs"] = p
        rows.append(row)
    df = pd.DataFrame(rows)
    df["p_change_pct"] = 100.0 * (df["p_mean"] / df["p_mean"].iloc[0] - 1.0)
    if ppl_stream is not None:
        df["ppl_change_pct"] = 100.0 * (df["ppl"] / df["ppl"].iloc[0] - 1.0)
    return df


def bootstrap_change(p0: np.ndarray, p1: np.ndarray, n_boot: int = 2000, seed: int = 0,
                     level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval (over contexts) of 100 (mean p1 / mean p0 - 1)."""
    p0, p1 = np.asarray(p0, float), np.asarray(p1, float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(p0), size=(n_boot, len(p0)))
    ch = 100.0 * (p1[idx].mean(1) / p0[idx].mean(1) - 1.0)
    lo, hi = np.quantile(ch, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)
