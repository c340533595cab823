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
DEFAULT_MODEL = "protot-cpu-small"
#: the local training run each committed ProtoT was exported from (models/README.md): the fallback of
#: :func:`load_model` when the committed folder is missing
RUNS = {"protot-cpu-small": ".cache/runs/protot-cpu-small", "protot-cpu": ".cache/runs/protot-cpu-hour"}


# -- the model a notebook uses ---------------------------------------------------------------------
@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    description: str  # one line naming the model (for the notebook's output and the claims' notes)
    source: str       # "committed" or "run"
    name: str         # the committed name, or the run folder


def load_model(name: str = DEFAULT_MODEL, run: str | Path | None = None,
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
    run = RUNS.get(name) if run is None else run
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
        "the training and export commands of each committed model are in models/README.md and in its "
        "MANIFEST.json (`reproduce`).")


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


def prototype_usage(stats: GateStats, *, rare: float = 0.1) -> pd.DataFrame:
    """How many prototypes each layer uses over the sample, per gate. One row per (layer, gate):
    ``share`` of prototype k = its mean gate over all positions (the shares of a layer sum to 1);
    ``effective`` = exp(entropy of the shares), R when the mass is spread evenly and 1 when one
    prototype takes it all; ``rarely_used`` = prototypes whose share is below ``rare`` / R;
    ``top_share`` and ``top_prototype`` = the largest share and its prototype."""
    if not 0 < rare < 1:
        raise ValueError(f"rare must lie in (0, 1), got {rare}")
    R, rows = stats.prototypes, []
    for kind in GATE_KINDS:
        g = stats.gate(kind).astype(np.float64)                        # (L, N*T, R)
        share = g.mean(axis=1)
        share = share / share.sum(axis=1, keepdims=True)
        for layer, s in enumerate(share):
            nz = s[s > 0]
            rows.append({"layer": layer, "gate": kind, "prototypes": R,
                         "effective": float(np.exp(-(nz * np.log(nz)).sum())),
                         "rarely_used": int((s < rare / R).sum()),
                         "top_share": float(s.max()), "top_prototype": int(s.argmax())})
    return pd.DataFrame(rows)


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
            logits = model(contexts[a : a + batch_size].to(dev), use_cache=False, logits_to_keep=1).logits
            out.append(_p_last(logits, target))
    finally:
        model.train(was_training)
    return np.concatenate(out) if out else np.zeros(0)


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
    """Percentile bootstrap interval (over contexts, paired) of 100 (mean p1 / mean p0 - 1)."""
    from compendium.stats import bootstrap_paired_ci

    return bootstrap_paired_ci(lambda a, b: 100.0 * (b.mean(1) / a.mean(1) - 1.0), p0, p1,
                               n_boot=n_boot, seed=seed, level=level)


# -- the women ablation as claims measurements ----------------------------------------------------------
def drop_pct(p0: np.ndarray, p1: np.ndarray) -> float:
    """Relative drop of the mean probability, % (positive: p went down): 100 (1 - mean p1 / mean p0)."""
    return float(100.0 * (1.0 - np.mean(p1) / np.mean(p0)))


def mask_scan(model, contexts: torch.Tensor, target: int, candidates: list[tuple[int, int]], *,
              batch_size: int = 16, progress: bool = False) -> pd.DataFrame:
    """Drop of mean p(target) on ``contexts`` (%) when each (layer, prototype) of ``candidates`` is
    masked (both gates), one at a time. Columns layer, prototype, p_mean, drop_pct; largest drop first.

    A mask in layer l leaves the layers below it unchanged, so each masked pass starts from the
    intact run's input to layer l (kept once per batch) and runs only layers l.. and the head: the
    same operations on the same inputs as a full forward (``test_mask_scan_reuses_the_prefix``)."""
    from tqdm.auto import tqdm

    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    try:
        with torch.no_grad():
            batches = [contexts[a : a + batch_size].to(dev) for a in range(0, contexts.shape[0], batch_size)]
            # hidden_states[l]: the input to layer l (the embeddings for l = 0)
            hidden = [model(b, use_cache=False, output_hidden_states=True, logits_to_keep=1) for b in batches]
            p0 = np.concatenate([_p_last(h.logits, target) for h in hidden]) if batches else np.zeros(0)
            rows = []
            for layer, k in tqdm(candidates, desc="mask scan", leave=False, disable=not progress):
                with edited(model, Edit("mask", layer, k)):
                    p = np.concatenate([_p_last(_logits_from_layer(model, h.hidden_states[layer], layer), target)
                                        for h in hidden]) if batches else np.zeros(0)
                rows.append({"layer": int(layer), "prototype": int(k), "p_mean": float(p.mean()),
                             "drop_pct": drop_pct(p0, p)})
    finally:
        model.train(was_training)
    df = pd.DataFrame(rows)
    return df.sort_values("drop_pct", ascending=False, kind="stable").reset_index(drop=True)


def _logits_from_layer(model, x: torch.Tensor, layer: int) -> torch.Tensor:
    """Last-position logits of ``model`` run from ``x``, the input to ``layer``, through the rest."""
    kwargs = model.mixer_kwargs(None)
    for block in model.layers[layer:]:
        x, _ = block(x, None, **kwargs)
    return model.lm_head(model.norm(x)[:, -1:])


def _p_last(logits: torch.Tensor, target: int) -> np.ndarray:
    """(B,) p(target) at the last position of (B, T, vocab) logits, float64."""
    return torch.softmax(logits[:, -1].double(), -1)[:, target].cpu().numpy()


def selectivity_candidates(stats: GateStats, tokenizer, word: str, n: int | None) -> list[tuple[int, int]]:
    """(layer, prototype) pairs to scan: all of them when ``n`` is None, else the union of the n/2
    most write-selective for ``word`` (gates at the word) and the n/2 most read-selective just
    before it (gates at the positions whose next token is the word), in that order, no repeats."""
    L, R = stats.layers, stats.prototypes
    if n is None or n >= L * R:
        return [(l, k) for l in range(L) for k in range(R)]
    if n < 2:
        raise ValueError(f"need at least 2 candidates, got {n}")
    w = find_prototype(None, tokenizer, word, stats=stats, gate="write", min_count=1).table
    r = find_prototype(None, tokenizer, word, stats=stats, gate="read", next_token=True, min_count=1).table
    out: list[tuple[int, int]] = []
    for table in (w, r):
        for row in table.itertuples():
            if len(out) >= (n // 2 if table is w else n):
                break
            key = (int(row.layer), int(row.prototype))
            if key not in out:
                out.append(key)
    return out


@torch.no_grad()
def measure_women_ablation(model, tokenizer, train_stream: np.ndarray, val_stream: np.ndarray, *,
                           word: str = " women", other_words=(" men", " he", " she"),
                           select_windows: int = 64, select_context: int = 64, candidates: int | None = None,
                           context: int = 128, max_contexts: int | None = None, other_contexts: int = 48,
                           n_controls: int | None = 5, n_random: int = 12, reinit_seeds=(0,),
                           ppl_blocks: int = 16, ppl_context: int = 256, effect_context: int = 128,
                           short: int = 8, n_boot: int = 2000, seed: int = 0, model_name: str = "",
                           batch_size: int = 16):
    """The two women-ablation claims as :class:`compendium.claims.Measurement` objects
    (``protot/women-prototype-ablation``, ``protot/women-ablation-ppl``).

    1. *Selection* (training split): windows of ``select_context`` tokens before ``select_windows``
       occurrences of ``word``; every (layer, prototype) is masked in turn (``candidates=None``), or
       the ``candidates`` most selective ones (:func:`selectivity_candidates`); the prototype whose
       mask lowers mean p(word) most is selected.
    2. *Judgement* (validation split): contexts of ``context`` tokens before every occurrence of
       ``word`` (at most ``max_contexts``). drop_pct: relative drop of mean p(word) under the mask,
       with a bootstrap interval (ci_low_pct, ci_high_pct); the same for each reinitialisation
       seed (evidence). specificity_margin: drop_pct minus the largest drop of p(w) for w in
       ``other_words`` (``other_contexts`` validation contexts each) under the same mask.
       control_margin: drop_pct minus the largest drop under masks of ``n_controls`` other
       prototypes of the selected layer (None: all). target_vs_random: drop_pct minus the 95th
       percentile of the drops under ``n_random`` random single-prototype masks (drawn over all
       layers, the selected one excluded). ppl_change_pct_abs: |perplexity change| (%) under the
       mask over ``ppl_blocks`` validation blocks of ``ppl_context`` tokens.
    3. *Power*: context_effect_nats, :func:`protot.context_use.target_context_effect` of ``word``
       with ``effect_context`` vs the last ``short`` tokens (validation).
    """
    from compendium import claims
    from protot import context_use as cu

    if n_random < 1:
        raise ValueError(f"n_random must be >= 1, got {n_random}")
    rng = np.random.default_rng(seed)
    tid = token_id(tokenizer, word)
    L, R = model.config.num_hidden_layers, model.config.num_prototypes

    # 1. selection on training contexts
    sel_ctx = windows_at(train_stream, tid, select_context, where="before", max_windows=select_windows, seed=seed)
    if len(sel_ctx) < 8:
        raise ValueError(f"{word!r} has only {len(sel_ctx)} training contexts of {select_context} tokens; need >= 8")
    stats = collect_gates(model, sel_ctx, batch_size=batch_size)
    cand = selectivity_candidates(stats, tokenizer, word, candidates)
    scan = mask_scan(model, sel_ctx, tid, cand, batch_size=batch_size)
    layer, k = int(scan.layer.iloc[0]), int(scan.prototype.iloc[0])

    # 2. judgement on validation contexts
    ctx = windows_at(val_stream, tid, context, where="before", max_windows=max_contexts, seed=seed)
    if len(ctx) < 10:
        raise ValueError(f"{word!r} has only {len(ctx)} validation contexts of {context} tokens; need >= 10")
    others = [j for j in range(R) if j != k]
    controls = others if n_controls is None else sorted(rng.choice(others, size=min(n_controls, len(others)),
                                                                   replace=False).tolist())
    pool = [(l, j) for l in range(L) for j in range(R) if (l, j) != (layer, k)]
    rand = [pool[i] for i in sorted(rng.choice(len(pool), size=min(n_random, len(pool)), replace=False))]
    sel_edits = [Edit("mask", layer, k, name="selected: mask")]
    sel_edits += [Edit("reinit", layer, k, seed=s, name=f"selected: reinit seed {s}") for s in reinit_seeds]
    main = ablation(model, ctx, tid, sel_edits, ppl_stream=val_stream, ppl_context=ppl_context, ppl_blocks=ppl_blocks,
                    batch_size=batch_size, keep_probs=True)
    ctrl_edits = [Edit("mask", layer, j, name=f"control L{layer} P{j}") for j in controls]
    rand_edits = [Edit("mask", l, j, name=f"random L{l} P{j}") for l, j in rand]
    other = ablation(model, ctx, tid, ctrl_edits + rand_edits, batch_size=batch_size, keep_probs=True).iloc[1:]
    p0 = main["probs"][0]
    main["drop_pct"] = [drop_pct(p0, p) for p in main["probs"]]
    other["drop_pct"] = [drop_pct(p0, p) for p in other["probs"]]
    cis = [bootstrap_change(p0, p, seed=seed, n_boot=n_boot) for p in main["probs"]]
    main["drop_ci_low"], main["drop_ci_high"] = [-c[1] for c in cis], [-c[0] for c in cis]
    mask_row = main[main["kind"] == "mask"].iloc[0]
    drop = float(mask_row["drop_pct"])
    ctrl_drops = other.iloc[:len(ctrl_edits)]["drop_pct"].to_numpy()
    rand_drops = other.iloc[len(ctrl_edits):]["drop_pct"].to_numpy()

    spec_rows = []
    for w in other_words:
        wid = token_id(tokenizer, w)
        wctx = windows_at(val_stream, wid, context, where="before", max_windows=other_contexts, seed=seed)
        if len(wctx) < 5:
            raise ValueError(f"{w!r} has only {len(wctx)} validation contexts; need >= 5")
        d = ablation(model, wctx, wid, sel_edits[:1], batch_size=batch_size)
        spec_rows.append({"word": w, "contexts": len(wctx), "p_intact": float(d["p_mean"].iloc[0]),
                          "p_masked": float(d["p_mean"].iloc[1]), "drop_pct": float(-d["p_change_pct"].iloc[1])})
    spec = pd.DataFrame(spec_rows)

    # 3. power
    eff_df, eff, eff_ci = cu.target_context_effect(model, val_stream, tokenizer, word, context=effect_context,
                                                   short=short, max_contexts=None, batch_size=batch_size,
                                                   n_boot=n_boot, seed=seed)

    p95 = float(np.quantile(rand_drops, 0.95))
    ppl_change = float(mask_row["ppl_change_pct"])
    reinit = main[main["kind"] == "reinit"]
    common_values = {"context_effect_nats": eff, "drop_pct": drop}
    common_evidence = {
        "selected": f"L{layer} P{k}", "selected_train_drop_pct": float(scan.drop_pct.iloc[0]),
        "runner_up": f"L{int(scan.layer.iloc[1])} P{int(scan.prototype.iloc[1])}" if len(scan) > 1 else "",
        "runner_up_train_drop_pct": float(scan.drop_pct.iloc[1]) if len(scan) > 1 else float("nan"),
        "candidates_scanned": len(cand), "selection_contexts": len(sel_ctx), "validation_contexts": len(ctx),
        "p_intact": float(np.mean(p0)), "p_masked": float(mask_row["p_mean"]),
        "context_effect_ci_low": eff_ci[0], "context_effect_ci_high": eff_ci[1],
        "logp_full": float(eff_df.logp_full.mean()), "logp_short": float(eff_df.logp_short.mean()),
        "p_full_mean": float(np.exp(eff_df.logp_full).mean()), "p_short_mean": float(np.exp(eff_df.logp_short).mean()),
        "context_effect_occurrences": len(eff_df),
    }
    config = {"model": model_name, "word": word, "other_words": list(other_words), "select_windows": select_windows,
              "select_context": select_context, "candidates": "all" if candidates is None else candidates,
              "context": context, "max_contexts": max_contexts, "other_contexts": other_contexts,
              "controls": [int(j) for j in controls], "random_masks": [f"L{l} P{j}" for l, j in rand],
              "reinit_seeds": list(reinit_seeds), "ppl_blocks": ppl_blocks, "ppl_context": ppl_context,
              "effect_context": effect_context, "short": short, "n_boot": n_boot, "seed": seed}
    edits_table = pd.concat([main.drop(columns=["probs"]).assign(group="selected"),
                             other.drop(columns=["probs"]).assign(
                                 group=["control"] * len(ctrl_edits) + ["random"] * len(rand_edits))],
                            ignore_index=True)
    ablation_m = claims.Measurement(
        claim="protot/women-prototype-ablation",
        values={**common_values, "ci_low_pct": float(mask_row["drop_ci_low"]), "ci_high_pct": float(mask_row["drop_ci_high"]),
                "specificity_margin": drop - float(spec["drop_pct"].max()),
                "control_margin": drop - float(ctrl_drops.max())},
        evidence={**common_evidence, "reinit_drop_pct": [float(x) for x in reinit["drop_pct"]],
                  "control_drops_pct": [float(x) for x in ctrl_drops],
                  "other_word_drops_pct": {r.word: r.drop_pct for r in spec.itertuples()}},
        tables={"women_selection_scan": scan, "women_ablation_edits": edits_table, "women_ablation_specificity": spec},
        config=config)
    ppl_m = claims.Measurement(
        claim="protot/women-ablation-ppl",
        values={**common_values, "ppl_change_pct_abs": abs(ppl_change), "ppl_change_pct": ppl_change,
                "target_vs_random": drop - p95},
        evidence={**common_evidence, "random_drops_pct": [float(x) for x in rand_drops], "random_p95_pct": p95,
                  "ppl_intact": float(main["ppl"].iloc[0]), "ppl_masked": float(mask_row["ppl"]),
                  "reinit_ppl_change_pct": [float(x) for x in reinit["ppl_change_pct"]]},
        tables={"women_ablation_ppl": main.drop(columns=["probs"])},
        config=config)
    return ablation_m, ppl_m


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


def _search_temperature(model, ids, kind: str, target: float, lo: float = 1e-3, hi: float = 1e2,
                        tol: float = 0.005, max_iter: int = 24) -> float:
    """Bisection on log temperature of ``kind`` ("write"/"read") until the mean gate entropy is within
    ``tol`` (relative) of ``target``; deterministic. Returns the temperature (set on model.config)."""
    attr = f"{kind}_temperature"
    a, b = math.log(lo), math.log(hi)
    for _ in range(max_iter):
        mid = 0.5 * (a + b)
        setattr(model.config, attr, math.exp(mid))
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


def matched_null(trained, seed: int, search_ids: torch.Tensor, target: dict | None = None, *,
                 tol: float = 0.005, rounds: int = 2) -> MatchedNull:
    """An untrained ProtoT with ``trained``'s config (weights drawn with torch seed ``seed``) whose
    write and read temperatures are set by 1-D searches (bisection on log temperature, write then
    read, repeated up to ``rounds`` times) so that its mean write / read gate entropies on
    ``search_ids`` match ``target`` (default: ``trained``'s on the same ids) within ``tol``."""
    import copy

    target = target or mean_gate_entropy(trained, search_ids)
    cfg = copy.deepcopy(trained.config)
    rng_state = torch.get_rng_state()
    try:
        torch.manual_seed(seed)
        null = type(trained)(cfg).to(next(trained.parameters()).device).eval()
    finally:
        torch.set_rng_state(rng_state)
    for _ in range(rounds):
        for kind in ("write", "read"):
            _search_temperature(null, search_ids, kind, target[kind], tol=tol)
        h = mean_gate_entropy(null, search_ids)
        if all(abs(h[k] / target[k] - 1.0) <= tol for k in ("write", "read")):
            break
    return MatchedNull(null, seed, float(cfg.write_temperature), float(cfg.read_temperature), h)


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

    folder = am.cached_folder(name)
    if not (folder / "config.json").exists():
        am.load_model(name)                      # converts once (raises ModelNotInstalled with the install line)
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


def measure_concepts(trained_stats: GateStats, null_stats: list[GateStats], ref: ReferenceEmbeddings, *,
                     trained_entropy: dict, null_entropy: list[dict], top: int = 10, min_count: int = 5,
                     null_info: list[dict] | None = None, config: dict | None = None, seed: int = 0):
    """``protot/concept-prototypes`` as a :class:`compendium.claims.Measurement`.

    coherence_margin = mean over the trained model's prototypes of :func:`coherence` minus the MAX
    over null models of theirs; null_entropy_gap = the largest relative gap |H_null / H_trained - 1|
    of the mean write-gate entropy (on the measured sample) over null models; null_seeds = their
    number. Table concept_coherence: one row per (model, layer, prototype)."""
    from compendium import claims

    if not null_stats or len(null_stats) != len(null_entropy):
        raise ValueError("need one entropy dict per null model, and at least one null model")
    coh_t = coherence(trained_stats, ref, top=top, min_count=min_count)
    coh_n = [coherence(s, ref, top=top, min_count=min_count) for s in null_stats]
    mean_t = float(np.nanmean(coh_t))
    mean_n = [float(np.nanmean(c)) for c in coh_n]
    gaps = [abs(h["write"] / trained_entropy["write"] - 1.0) for h in null_entropy]
    read_gaps = [abs(h["read"] / trained_entropy["read"] - 1.0) for h in null_entropy]
    chance = random_set_coherence(trained_stats, ref, top=top, min_count=min_count, seed=seed)
    rows = []
    for name, c in [("trained", coh_t)] + [(f"null {i}", c) for i, c in enumerate(coh_n)]:
        L, R = c.shape
        rows += [{"model": name, "layer": l, "prototype": r, "coherence": float(c[l, r])} for l in range(L) for r in range(R)]
    beats = float(np.mean(coh_t.reshape(-1) > max(np.nanmax(c) for c in coh_n)))
    return claims.Measurement(
        claim="protot/concept-prototypes",
        values={"coherence_margin": mean_t - max(mean_n), "null_entropy_gap": max(gaps), "null_seeds": len(null_stats),
                "coherence_trained": mean_t, "coherence_null_max": max(mean_n)},
        evidence={"coherence_null": mean_n, "read_entropy_gap_max": max(read_gaps),
                  "entropy_trained": trained_entropy, "entropy_null": null_entropy, "null_models": null_info or [],
                  "chance_coherence_mean": float(chance.mean()),
                  "chance_coherence_p95": float(np.quantile(chance, 0.95)),
                  "trained_share_above_every_null_prototype": beats,
                  "reference_tokens": int(len(ref.ours))},
        tables={"concept_coherence": pd.DataFrame(rows)},
        config=dict(config or {}, top=top, min_count=min_count, reference=ref.name))
