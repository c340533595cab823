"""Ablations of one ProtoT prototype (paper §6: masking or reinitialising the "women" prototype
L9 P7 lowers p("women") with <1% perplexity change).

- :class:`Edit`, :func:`edited`: an edit of one prototype (mask, reinitialise), undone on exit
  (context managers of :mod:`protot.intervene`, which restore the weights exactly).
- :func:`target_probs`, :func:`ablation`, :func:`mask_scan`: p(target) at the last position of
  contexts, intact and edited; :func:`block_nll`, :func:`ppl_change_interval`: perplexity over
  random blocks with a paired bootstrap interval.
- :func:`stratify`, :func:`coordination_contexts`: contexts by kind (ending in a coordinator, a
  gender word earlier in the window, the rest) and gender-free coordination contexts.
- :func:`judge_edit`: one prototype's mask judged on validation contexts (per stratum, against
  other words and alive same-layer controls); :func:`edit_margins`: its specificity and control
  margins with bootstrap intervals over contexts. The claims ``protot/women-prototype-ablation``,
  ``protot/women-ablation-ppl`` and ``protot/women-causal-scan`` are measured by
  :func:`protot.women.measure_women` with these tools.
"""
from __future__ import annotations

import math
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from protot import intervene
from protot.concepts import GateStats, token_id

EDITS = ("none", "mask", "reinit", "mask-write", "mask-read")


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
def target_probs(model, contexts: torch.Tensor, target, batch_size: int = 16) -> np.ndarray:
    """(n,) p(target | context) at the last position of each row of ``contexts`` (n, T), float64;
    ``target``: one token id, or one per row (an (n,) array)."""
    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    out = []
    try:
        for a in range(0, contexts.shape[0], batch_size):
            logits = model(contexts[a : a + batch_size].to(dev), use_cache=False, logits_to_keep=1).logits
            out.append(_p_last(logits, target if np.ndim(target) == 0 else np.asarray(target)[a : a + batch_size]))
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


def _p_last(logits: torch.Tensor, target) -> np.ndarray:
    """(B,) p(target) at the last position of (B, T, vocab) logits, float64; ``target``: one id or (B,) ids."""
    p = torch.softmax(logits[:, -1].double(), -1)
    if np.ndim(target) == 0:
        return p[:, int(target)].cpu().numpy()
    return p[torch.arange(p.shape[0]), torch.as_tensor(np.asarray(target, dtype=np.int64))].cpu().numpy()


def selectivity_candidates(stats: GateStats, tokenizer, word: str, n: int | None) -> list[tuple[int, int]]:
    """(layer, prototype) pairs to scan: all of them when ``n`` is None, else the union of the n/2
    most write-selective for ``word`` (gates at the word) and the n/2 most read-selective just
    before it (gates at the positions whose next token is the word), in that order, no repeats."""
    L, R = stats.layers, stats.prototypes
    if n is None or n >= L * R:
        return [(l, k) for l in range(L) for k in range(R)]
    if n < 2:
        raise ValueError(f"need at least 2 candidates, got {n}")
    from protot.labels import find_prototype

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


# -- the women claims: word lists and strata (registered in papers/protot/claims.yaml) -------------------
#: female words and their matched non-gender words (same word class, a human referent or its pronoun)
FEMALE_PAIRS = ((" women", " workers"), (" woman", " person"), (" girls", " students"), (" girl", " teacher"),
                (" she", " they"), (" her", " their"), (" mother", " friend"), (" mothers", " parents"),
                (" female", " adult"), (" daughter", " partner"), (" wife", " doctor"))
MALE_WORDS = (" men", " man", " boys", " he", " his", " him", " father", " male", " son", " husband", " brother")
COORDINATORS = (" and", " or")
HUMAN_GROUPS = (" people", " children")        # non-gender human groups: the edit should spare them
GENDER_CHECK_WORDS = (" girls", " female", " mothers")   # a female prototype's edit should lower these too
STRATA = ("coordination", "topical", "rest")


def stratify(contexts, coordinator_ids, topic_ids) -> np.ndarray:
    """(n,) stratum of each row of ``contexts`` (n, T): "coordination" when its last token is one of
    ``coordinator_ids``; else "topical" when one of ``topic_ids`` occurs in it; else "rest"."""
    c = np.asarray(contexts)
    if c.ndim != 2:
        raise ValueError(f"contexts must be (n, T), got shape {c.shape}")
    coord = np.isin(c[:, -1], np.asarray(list(coordinator_ids)))
    topical = np.isin(c, np.asarray(list(topic_ids))).any(1) & ~coord
    return np.where(coord, STRATA[0], np.where(topical, STRATA[1], STRATA[2]))


def word_ids(tokenizer, words, *, capitalised: bool = False) -> list[int]:
    """Token ids of ``words`` (each one token); with ``capitalised``, also of each word with a capital
    first letter, with and without its leading space (" she" -> " She", "She": a sentence may start
    after a space or at a line start), where that is one token."""
    out = [token_id(tokenizer, w) for w in words]
    if capitalised:
        for w in words:
            bare = w.lstrip(" ")
            cap = bare[:1].upper() + bare[1:]
            for form in (" " + cap, cap):
                ids = tokenizer.encode(form, add_special_tokens=False)
                if len(ids) == 1 and int(ids[0]) not in out:
                    out.append(int(ids[0]))
    return out


def word_start_ids(tokenizer) -> np.ndarray:
    """(V,) bool: the token types whose text is a space followed by a letter (a word's first piece)."""
    out = np.zeros(len(tokenizer), bool)
    for i in range(len(tokenizer)):
        s = tokenizer.decode([i])
        out[i] = len(s) >= 2 and s[0] == " " and s[1].isalpha()
    return out


def coordination_contexts(stream: np.ndarray, tokenizer, context: int, n: int, *, coordinator_ids,
                          exclude_ids=(), seed: int = 0) -> tuple[torch.Tensor, np.ndarray]:
    """Up to ``n`` (seeded) contexts of ``context`` tokens of ``stream`` that end in a coordinator and
    whose next token starts a word and is not in ``exclude_ids``: ((m, context) ids, (m,) next tokens)."""
    s = np.asarray(stream).astype(np.int64)
    starts = word_start_ids(tokenizer)
    pos = np.flatnonzero(np.isin(s[:-1], np.asarray(list(coordinator_ids))))
    pos = pos[pos + 1 >= context]
    nxt = s[pos + 1]
    ok = starts[np.clip(nxt, 0, len(starts) - 1)] & (nxt < len(starts)) & ~np.isin(nxt, np.asarray(list(exclude_ids) or [-1]))
    pos = pos[ok]
    if len(pos) > n:
        pos = np.sort(np.random.default_rng(seed).choice(pos, size=n, replace=False))
    if len(pos) == 0:
        return torch.zeros(0, context, dtype=torch.long), np.zeros(0, np.int64)
    ctx = np.stack([s[p + 1 - context : p + 1] for p in pos])
    return torch.from_numpy(ctx), s[pos + 1]


@torch.no_grad()
def block_nll(model, blocks: torch.Tensor, batch_size: int = 8) -> np.ndarray:
    """(n,) summed next-token NLL (nats, float64) of each row of ``blocks`` (n, T): T - 1 predictions each."""
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    out = []
    try:
        for a in range(0, blocks.shape[0], batch_size):
            x = blocks[a : a + batch_size].to(dev)
            logits = model(x, use_cache=False).logits[:, :-1].double()               # (B, T-1, V)
            nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none")   # (B, T-1)
            out.append(nll.sum(1).cpu().numpy())
    finally:
        model.train(was)
    return np.concatenate(out)


def ppl_change_interval(nll0: np.ndarray, nll1: np.ndarray, tokens_per_block: int, n_boot: int = 2000,
                        seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """(change, low, high): relative perplexity change (%), 100 (ppl1 / ppl0 - 1) = 100 (exp(mean over
    blocks of (nll1 - nll0) / ``tokens_per_block``) - 1), of an edited model (per-block NLL sums
    ``nll1``, :func:`block_nll`) vs the intact one (``nll0``) on the same blocks, and its percentile
    bootstrap interval with the blocks resampled in pairs."""
    d = np.asarray(nll1, float) - np.asarray(nll0, float)
    if np.shape(nll0) != np.shape(nll1) or d.ndim != 1 or len(d) < 2:
        raise ValueError(f"need two 1-D arrays of the same length >= 2, got {np.shape(nll0)} and {np.shape(nll1)}")
    rng = np.random.default_rng(seed)
    boot = d[rng.integers(0, len(d), (n_boot, len(d)))].mean(1)
    lo, hi = np.quantile(boot, [(1 - level) / 2, 1 - (1 - level) / 2])

    def pct(x):
        return float(100.0 * math.expm1(x / tokens_per_block))

    return pct(d.mean()), pct(lo), pct(hi)


def alive_controls(alive: np.ndarray, layer: int, k: int, n: int | None, seed: int = 0) -> list[int]:
    """Control prototypes for an edit of prototype k of ``layer``: the alive ones (``alive`` (L, R)
    bool) of the same layer other than k, at most ``n`` of them drawn with ``seed`` (None: all),
    sorted. Dead prototypes are never controls: their masks change nothing."""
    pool = [int(j) for j in np.flatnonzero(alive[layer]) if j != k]
    if n is not None and len(pool) > n:
        pool = sorted(np.random.default_rng(seed).choice(pool, size=n, replace=False).tolist())
    return pool


@dataclass
class ContextSet:
    """Contexts (n, T), the token whose probability is read at the last position (one id or (n,)
    ids), and the intact model's probabilities (filled by :func:`judge_edit`'s caller)."""
    name: str
    contexts: torch.Tensor
    target: object
    split: str
    p_intact: np.ndarray = field(default=None, repr=False)


def _drop_row(p0, p1, n_boot, seed) -> dict:
    from protot.concepts import bootstrap_change

    if len(p0) == 0:
        return {"contexts": 0, "p_intact": float("nan"), "p_edited": float("nan"), "drop_pct": float("nan"),
                "ci_low_pct": float("nan"), "ci_high_pct": float("nan")}
    lo, hi = bootstrap_change(p0, p1, n_boot=n_boot, seed=seed)
    return {"contexts": len(p0), "p_intact": float(np.mean(p0)), "p_edited": float(np.mean(p1)),
            "drop_pct": drop_pct(p0, p1), "ci_low_pct": -hi, "ci_high_pct": -lo}


def judge_edit(model, main: ContextSet, strata: np.ndarray, others: list[ContextSet], layer: int, k: int, *,
               controls: list[int], reinit_seeds=(0,), n_boot: int = 2000, seed: int = 0,
               batch_size: int = 16) -> dict:
    """The mask of prototype k of ``layer`` judged on ``main`` (its ``p_intact`` filled): the drop of
    mean p(target) over all contexts and per stratum (``strata`` (n,) labels, :func:`stratify`) with
    bootstrap intervals; the drops under reinitialisations (``reinit_seeds``); the drop on each of
    ``others`` (their ``p_intact`` filled); the drops under masks of ``controls`` (prototypes of the
    same layer). Returns {"overall": row, "strata": DataFrame, "reinit": [rows], "others": DataFrame,
    "controls": DataFrame, "probs": {...}}; a row is a dict of contexts, p_intact, p_edited, drop_pct,
    ci_low_pct, ci_high_pct; "probs" holds the probabilities behind the drops, for
    :func:`edit_margins`: "intact" and "edited" ((n,) on ``main``), "others" ({name: (intact,
    edited)}), "controls" ({prototype: edited on ``main``})."""
    p0 = main.p_intact
    with edited(model, Edit("mask", layer, k)):
        p1 = target_probs(model, main.contexts, main.target, batch_size)
        other_p = [target_probs(model, o.contexts, o.target, batch_size) for o in others]
    overall = _drop_row(p0, p1, n_boot, seed)
    strata_rows = [{"stratum": s, **_drop_row(p0[strata == s], p1[strata == s], n_boot, seed)} for s in STRATA]
    reinit = []
    for rs in reinit_seeds:
        with edited(model, Edit("reinit", layer, k, seed=rs)):
            reinit.append({"seed": rs, **_drop_row(p0, target_probs(model, main.contexts, main.target, batch_size),
                                                    n_boot, seed)})
    other_rows = [{"word": o.name, "split": o.split, **_drop_row(o.p_intact, p, n_boot, seed)}
                  for o, p in zip(others, other_p)]
    ctrl_rows, ctrl_p = [], {}
    for j in controls:
        with edited(model, Edit("mask", layer, j)):
            ctrl_p[j] = target_probs(model, main.contexts, main.target, batch_size)
        ctrl_rows.append({"layer": layer, "prototype": j, **_drop_row(p0, ctrl_p[j], n_boot, seed)})
    probs = {"intact": p0, "edited": p1, "others": {o.name: (o.p_intact, p) for o, p in zip(others, other_p)},
             "controls": ctrl_p}
    return {"overall": overall, "strata": pd.DataFrame(strata_rows), "reinit": reinit,
            "others": pd.DataFrame(other_rows), "controls": pd.DataFrame(ctrl_rows, columns=[
                "layer", "prototype", "contexts", "p_intact", "p_edited", "drop_pct", "ci_low_pct", "ci_high_pct"]),
            "probs": probs}


def _drops(p0, p1):
    """Relative drop of the mean, % (:func:`drop_pct`), of each row of resampled (n_boot, n) arrays."""
    return 100.0 * (1.0 - p1.mean(1) / p0.mean(1))


def edit_margins(judged: dict, checked, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> dict:
    """The margins of an edit judged by :func:`judge_edit`, each with its percentile bootstrap interval
    (:func:`compendium.stats.bootstrap_groups_ci`):

    - specificity_margin: its drop of mean p(target) on the main contexts minus the largest drop on the
      context sets named ``checked`` (of ``judged``'s others); the main contexts and each checked set
      resampled each on its own (contexts paired with themselves, intact and edited);
    - control_margin: the drop minus the largest drop under the masks of the controls, all on the main
      contexts (resampled once per resample, shared by the edit and every control); NaN (and a NaN
      interval) without controls.

    Returns {specificity_margin, specificity_margin_ci_low, _ci_high, control_margin, control_margin_ci_low,
    _ci_high}."""
    from compendium.stats import bootstrap_groups_ci

    pr = judged["probs"]
    p0, p1 = pr["intact"], pr["edited"]
    missing = [c for c in checked if c not in pr["others"]]
    if not checked or missing:
        raise ValueError(f"edit_margins needs checked context sets among {sorted(pr['others'])}, got {list(checked)}")
    sets = [pr["others"][c] for c in checked]
    spec = drop_pct(p0, p1) - max(drop_pct(a, b) for a, b in sets)
    lo, hi = bootstrap_groups_ci(lambda main, *oth: _drops(*main) - np.max([_drops(*o) for o in oth], axis=0),
                                 (p0, p1), *sets, n_boot=n_boot, seed=seed, level=level)
    out = {"specificity_margin": float(spec), "specificity_margin_ci_low": lo, "specificity_margin_ci_high": hi}
    ctrl = list(pr["controls"].values())
    if not ctrl:
        return out | {"control_margin": float("nan"), "control_margin_ci_low": float("nan"),
                      "control_margin_ci_high": float("nan")}
    margin = drop_pct(p0, p1) - max(drop_pct(p0, c) for c in ctrl)
    lo, hi = bootstrap_groups_ci(lambda g: _drops(g[0], g[1]) - np.max([_drops(g[0], c) for c in g[2:]], axis=0),
                                 (p0, p1, *ctrl), n_boot=n_boot, seed=seed, level=level)
    return out | {"control_margin": float(margin), "control_margin_ci_low": lo, "control_margin_ci_high": hi}
