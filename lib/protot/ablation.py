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
  other words and alive same-layer controls); :func:`measure_women`: the claims
  ``protot/women-prototype-ablation``, ``protot/women-ablation-ppl`` and ``protot/women-causal-scan``
  as :class:`compendium.claims.Measurement` objects.
"""
from __future__ import annotations

import math
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from protot import intervene
from protot.concepts import GateStats, collect_gates, token_id, windows_at

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
    from protot.concepts import token_id

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
    "controls": DataFrame}; a row is a dict of contexts, p_intact, p_edited, drop_pct, ci_low_pct,
    ci_high_pct."""
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
    ctrl_rows = []
    for j in controls:
        with edited(model, Edit("mask", layer, j)):
            ctrl_rows.append({"layer": layer, "prototype": j,
                              **_drop_row(p0, target_probs(model, main.contexts, main.target, batch_size), n_boot, seed)})
    return {"overall": overall, "strata": pd.DataFrame(strata_rows), "reinit": reinit,
            "others": pd.DataFrame(other_rows), "controls": pd.DataFrame(ctrl_rows, columns=[
                "layer", "prototype", "contexts", "p_intact", "p_edited", "drop_pct", "ci_low_pct", "ci_high_pct"])}


def effect_class(labelled: bool, strata: pd.DataFrame) -> str:
    """"female" when ``labelled``; else "coordination" when the coordination stratum's interval lies
    above 0 and neither the topical nor the rest stratum's does; else "other"."""
    if labelled:
        return "female"
    above = {r.stratum: bool(np.isfinite(r.ci_low_pct) and r.ci_low_pct > 0) for r in strata.itertuples()}
    if above.get("coordination") and not above.get("topical") and not above.get("rest"):
        return "coordination"
    return "other"


_DESCRIPTIVE = frozenset({"model", "word", "selection", "aggregation"})


def women_settings(protocol: dict, *, seed: int) -> dict:
    """The keyword arguments of :func:`measure_women` from the women claims' registered protocol
    (``claims.protocol("protot/women-prototype-ablation", profile)``): every sample size and context
    length as registered; ``n_controls: all`` means every alive control; ``n_reinit: k`` gives the
    reinitialisation seeds ``seed .. seed + k - 1``. The descriptive entries (model, word, selection,
    aggregation) are read by the notebook. A setting :func:`measure_women` does not take is an error."""
    import inspect

    known = set(inspect.signature(measure_women).parameters)
    out = {}
    for key, value in protocol.items():
        if key in _DESCRIPTIVE:
            continue
        if key == "n_reinit":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"women protocol: n_reinit must be a positive whole number, got {value!r}")
            out["reinit_seeds"] = tuple(range(seed, seed + value))
        elif key == "n_controls" and value == "all":
            out["n_controls"] = None
        elif key in known and key not in ("word", "seed", "model_name"):
            out[key] = value
        else:
            raise ValueError(f"women protocol: unknown setting {key!r}; measure_women takes "
                             f"{', '.join(sorted(known - {'model', 'tokenizer', 'train_stream', 'val_stream'}))}")
    return out


@torch.no_grad()
def measure_women(model, tokenizer, train_stream: np.ndarray, val_stream: np.ndarray, *,
                  word: str = " women", pairs=FEMALE_PAIRS, male_words=MALE_WORDS, coordinators=COORDINATORS,
                  human_groups=HUMAN_GROUPS, gender_check_words=GENDER_CHECK_WORDS,
                  label_blocks: int = 48, label_context: int = 256, word_windows: int = 64, word_context: int = 64,
                  min_ratio: float = 2.0, min_top_share: float = 0.5, top: int = 10, min_count: int = 5,
                  floor: float = 0.1, select_windows: int = 48, select_context: int = 64,
                  context: int = 128, max_contexts: int | None = None, other_contexts: int = 64,
                  coordination_n: int = 64, gender_contexts: int = 48, n_controls: int | None = 8,
                  reinit_seeds=(0,), ppl_blocks: int = 128, ppl_context: int = 256, effect_context: int = 128,
                  short: int = 8, n_boot: int = 2000, seed: int = 0, model_name: str = "", batch_size: int = 16):
    """The women claims as :class:`compendium.claims.Measurement` objects:
    (``protot/women-prototype-ablation``, ``protot/women-ablation-ppl``, ``protot/women-causal-scan``).
    Every rule and number is the one registered in ``papers/protot/claims.yaml``; the arguments
    name them.

    1. Label (training split): alive prototypes (:func:`protot.usage.alive_mask` over
       ``label_blocks`` random blocks, ``floor``); :func:`protot.labels.word_gates` of every word
       of ``pairs`` (``word_windows`` windows of ``word_context`` tokens); the alive prototype whose
       write or read profile most singles out the female words (:func:`protot.labels.label_scores`,
       :func:`protot.labels.select_by_label`), and whether its label earns the name.
    2. Causal scan (training split): every (layer, prototype) masked on ``select_windows`` contexts
       of ``select_context`` tokens before ``word``; the largest drop of mean p(word) wins.
    3. Judgement (validation): the ``context`` tokens before every occurrence of ``word`` (at most
       ``max_contexts``), stratified (:func:`stratify`: ``coordinators``; topical = a female or
       male word, or its capitalised form, in the window); :func:`judge_edit` for each selected prototype, against
       ``human_groups`` and gender-free coordination contexts (validation) and
       ``gender_check_words`` (training: too rare in validation), with up to ``n_controls`` alive
       same-layer controls.
    4. Perplexity (validation): ``ppl_blocks`` random blocks of ``ppl_context`` tokens, intact, with
       the label-selected prototype masked or reinitialised, and with each of its controls masked;
       :func:`ppl_change_interval`.
    5. Power: :func:`protot.context_use.target_context_effect` of ``word``.
    """
    from compendium import claims
    from protot import context_use as cu
    from protot import labels as lb
    from protot.concepts import sample_blocks
    from protot.usage import alive_mask, dead_prototypes

    tid = token_id(tokenizer, word)
    L, R = model.config.num_hidden_layers, model.config.num_prototypes
    female = [a for a, _ in pairs]
    ids_of = lambda words: [token_id(tokenizer, w) for w in words]   # noqa: E731

    # 1. the prototype found by its label (training split)
    label_stats = collect_gates(model, sample_blocks(train_stream, label_blocks, label_context, seed=seed), batch_size=8)
    alive = alive_mask(label_stats, floor)
    gates = lb.word_gates(model, tokenizer, train_stream, [w for p in pairs for w in p], windows=word_windows,
                          context=word_context, seed=seed, batch_size=batch_size)
    scores = lb.label_scores(gates, pairs, alive)
    sel = lb.select_by_label(scores, label_stats, gates, female, top=top, min_count=min_count,
                             min_ratio=min_ratio, min_top_share=min_top_share)

    def label_of(layer, k):
        """(gate, score, top_share, labelled, write tokens, read tokens) of any prototype, by the same rule."""
        row = scores[(scores.layer == layer) & (scores.prototype == k)].iloc[0]   # its best gate
        share = lb.top_token_share(label_stats, gates, female, layer, k, row.gate, top=top, min_count=min_count)
        tt = {g: " | ".join(repr(t)[1:-1] for t in lb.top_tokens(label_stats, tokenizer, layer, k, gate=g, top=top,
                                                                 min_count=min_count)["token"]) for g in ("write", "read")}
        ctxs = " || ".join(lb.top_contexts(label_stats, tokenizer, layer, k, top=3).context)
        return {"gate": row.gate, "score": float(row.score), "top_share": share,
                "labelled": bool(row.score >= math.log(min_ratio) and share >= min_top_share),
                "write_tokens": tt["write"], "read_tokens": tt["read"], "top_contexts": ctxs, "alive": bool(alive[layer, k])}

    # 2. the causal scan (training split)
    sel_ctx = windows_at(train_stream, tid, select_context, where="before", max_windows=select_windows, seed=seed)
    if len(sel_ctx) < 8:
        raise ValueError(f"{word!r} has only {len(sel_ctx)} training contexts of {select_context} tokens; need >= 8")
    scan = mask_scan(model, sel_ctx, tid, [(l, k) for l in range(L) for k in range(R)], batch_size=batch_size)
    scan["alive"] = [bool(alive[l, k]) for l, k in zip(scan.layer, scan.prototype)]
    win = (int(scan.layer.iloc[0]), int(scan.prototype.iloc[0]))

    # 3. validation contexts, strata and the other words
    ctx = windows_at(val_stream, tid, context, where="before", max_windows=max_contexts, seed=seed)
    if len(ctx) < 10:
        raise ValueError(f"{word!r} has only {len(ctx)} validation contexts of {context} tokens; need >= 10")
    gender_ids = word_ids(tokenizer, female + list(male_words), capitalised=True)
    strata = stratify(ctx, ids_of(coordinators), gender_ids)
    main = ContextSet(word, ctx, tid, "validation")
    others = []
    for w in human_groups:
        c = windows_at(val_stream, token_id(tokenizer, w), context, where="before", max_windows=other_contexts, seed=seed)
        others.append(ContextSet(w, c, token_id(tokenizer, w), "validation"))
    cc, ct = coordination_contexts(val_stream, tokenizer, context, coordination_n, coordinator_ids=ids_of(coordinators),
                                   exclude_ids=gender_ids + word_ids(tokenizer, human_groups, capitalised=True), seed=seed)
    others.append(ContextSet("gender-free coordination", cc, ct, "validation"))
    for w in gender_check_words:
        c = windows_at(train_stream, token_id(tokenizer, w), context, where="before", max_windows=gender_contexts, seed=seed)
        others.append(ContextSet(w, c, token_id(tokenizer, w), "train"))
    for s in [main, *others]:
        if len(s.contexts) < 5:
            raise ValueError(f"{s.name!r} has only {len(s.contexts)} {s.split} contexts of {context} tokens; need >= 5")
        s.p_intact = target_probs(model, s.contexts, s.target, batch_size)
    checked = [word for word in [o.name for o in others] if word not in gender_check_words]

    judged = {}
    for key, (layer, k) in (("label", (sel.layer, sel.prototype)), ("scan", win)):
        if (layer, k) in [v["at"] for v in judged.values()]:
            judged[key] = next(v for v in judged.values() if v["at"] == (layer, k))
            continue
        controls = alive_controls(alive, layer, k, n_controls, seed)
        j = judge_edit(model, main, strata, others, layer, k, controls=controls, reinit_seeds=reinit_seeds,
                       n_boot=n_boot, seed=seed, batch_size=batch_size)
        o = j["others"].set_index("word")
        drop = j["overall"]["drop_pct"]
        j.update(at=(layer, k), controls_at=controls, label=label_of(layer, k),
                 specificity_margin=float(drop - o.loc[checked, "drop_pct"].max()),
                 control_margin=float(drop - j["controls"]["drop_pct"].max()) if controls else float("nan"))
        j["class"] = effect_class(j["label"]["labelled"], j["strata"])
        judged[key] = j

    # 4. perplexity on random validation blocks: the label-selected prototype and its controls
    blocks = sample_blocks(val_stream, ppl_blocks, ppl_context, seed=seed)
    nll0 = block_nll(model, blocks)
    lab = judged["label"]
    ppl_rows = []
    edits = [Edit("mask", sel.layer, sel.prototype, name="selected: mask")]
    edits += [Edit("reinit", sel.layer, sel.prototype, seed=s, name=f"selected: reinit seed {s}") for s in reinit_seeds]
    edits += [Edit("mask", sel.layer, j, name=f"control L{sel.layer} P{j}") for j in lab["controls_at"]]
    for e in edits:
        with edited(model, e):
            ch, lo, hi = ppl_change_interval(nll0, block_nll(model, blocks), ppl_context - 1, n_boot=n_boot, seed=seed)
        ppl_rows.append({"edit": e.label(), "layer": e.layer, "prototype": e.k, "ppl_change_pct": ch,
                         "ci_low_pct": lo, "ci_high_pct": hi})
    ppl_df = pd.DataFrame(ppl_rows)
    ppl_intact = float(math.exp(nll0.sum() / (len(nll0) * (ppl_context - 1))))

    # 5. power
    eff_df, eff, eff_ci = cu.target_context_effect(model, val_stream, tokenizer, word, context=effect_context,
                                                   short=short, max_contexts=None, batch_size=batch_size,
                                                   n_boot=n_boot, seed=seed)

    def strata_table(key):
        j = judged[key]
        return j["strata"].assign(prototype=f"L{j['at'][0]} P{j['at'][1]}", selected_by=key)

    strata_df = pd.concat([strata_table("label"), strata_table("scan")], ignore_index=True)
    if judged["label"] is judged["scan"]:
        strata_df = strata_table("label").assign(selected_by="label and scan")
    config = {"model": model_name, "word": word, "pairs": [list(p) for p in pairs], "male_words": list(male_words),
              "coordinators": list(coordinators), "human_groups": list(human_groups),
              "gender_check_words": list(gender_check_words), "label_blocks": label_blocks,
              "label_context": label_context, "word_windows": word_windows, "word_context": word_context,
              "min_ratio": min_ratio, "min_top_share": min_top_share, "top": top, "min_count": min_count,
              "dead_floor": floor, "select_windows": select_windows, "select_context": select_context,
              "context": context, "max_contexts": max_contexts, "other_contexts": other_contexts,
              "coordination_contexts": coordination_n, "gender_contexts": gender_contexts, "n_controls": n_controls,
              "reinit_seeds": list(reinit_seeds), "ppl_blocks": ppl_blocks, "ppl_context": ppl_context,
              "effect_context": effect_context, "short": short, "n_boot": n_boot, "seed": seed}
    power = {"context_effect_nats": eff}
    power_ev = {"context_effect_ci_low": eff_ci[0], "context_effect_ci_high": eff_ci[1],
                "context_effect_occurrences": len(eff_df), "validation_contexts": len(ctx),
                "strata_counts": {s: int((strata == s).sum()) for s in STRATA},
                "dead_prototypes": int((~alive).sum()), "alive_per_layer": [int(a.sum()) for a in alive]}

    def values_of(j):
        st = j["strata"].set_index("stratum")
        v = {"drop_pct": j["overall"]["drop_pct"], "ci_low_pct": j["overall"]["ci_low_pct"],
             "ci_high_pct": j["overall"]["ci_high_pct"], "specificity_margin": j["specificity_margin"],
             "control_margin": j["control_margin"]}
        for s in STRATA:
            v |= {f"{s}_drop_pct": float(st.loc[s, "drop_pct"]), f"{s}_ci_low_pct": float(st.loc[s, "ci_low_pct"]),
                  f"{s}_ci_high_pct": float(st.loc[s, "ci_high_pct"]), f"{s}_contexts": int(st.loc[s, "contexts"])}
        return v

    def evidence_of(j):
        return {"prototype": f"L{j['at'][0]} P{j['at'][1]}", "label": j["label"], "class": j["class"],
                "reinit_drop_pct": [r["drop_pct"] for r in j["reinit"]],
                "other_drops_pct": {r.word: r.drop_pct for r in j["others"].itertuples()},
                "control_drops_pct": {f"L{r.layer} P{r.prototype}": r.drop_pct for r in j["controls"].itertuples()},
                "p_intact": j["overall"]["p_intact"], "p_masked": j["overall"]["p_edited"]}

    scores_top = scores.head(20).copy()
    ablation_m = claims.Measurement(
        claim="protot/women-prototype-ablation",
        values={**values_of(lab), **power, "labelled_female": bool(sel.labelled)},
        evidence={**evidence_of(lab), **power_ev, "selection_score": sel.score, "selection_gate": sel.gate,
                  "female_top_share": sel.top_share, "runner_up": f"L{int(scores[scores.alive].layer.iloc[1])} "
                  f"P{int(scores[scores.alive].prototype.iloc[1])} ({scores[scores.alive].gate.iloc[1]})"},
        tables={"women_label_scores": scores_top, "women_strata": strata_df,
                "women_specificity": lab["others"].assign(prototype=f"L{sel.layer} P{sel.prototype}"),
                "women_controls": lab["controls"], "dead_prototypes": dead_prototypes(label_stats, floor)},
        config=config)
    mask_ppl = ppl_df.iloc[0]
    ctrl_ppl = ppl_df[ppl_df.edit.str.startswith("control")]
    ppl_m = claims.Measurement(
        claim="protot/women-ablation-ppl",
        values={"ppl_change_pct": float(mask_ppl.ppl_change_pct), "ppl_ci_low_pct": float(mask_ppl.ci_low_pct),
                "ppl_ci_high_pct": float(mask_ppl.ci_high_pct), "ppl_blocks": int(len(blocks)),
                "target_vs_controls": lab["control_margin"], "drop_pct": lab["overall"]["drop_pct"],
                "labelled_female": bool(sel.labelled), **power},
        evidence={"prototype": f"L{sel.layer} P{sel.prototype}", "ppl_intact": ppl_intact,
                  "reinit_ppl_change_pct": [float(x) for x in ppl_df[ppl_df.edit.str.contains("reinit")].ppl_change_pct],
                  "control_ppl_change_pct": {r.edit: r.ppl_change_pct for r in ctrl_ppl.itertuples()},
                  "controls_costlier": int((ctrl_ppl.ppl_change_pct >= mask_ppl.ppl_change_pct).sum()),
                  **power_ev},
        tables={"women_ppl": ppl_df}, config=config)
    sj = judged["scan"]
    scan_m = claims.Measurement(
        claim="protot/women-causal-scan",
        values={**values_of(sj), **power},
        evidence={**evidence_of(sj), **power_ev, "selected_train_drop_pct": float(scan.drop_pct.iloc[0]),
                  "runner_up": f"L{int(scan.layer.iloc[1])} P{int(scan.prototype.iloc[1])}",
                  "runner_up_train_drop_pct": float(scan.drop_pct.iloc[1]), "candidates_scanned": len(scan),
                  "selection_contexts": len(sel_ctx)},
        tables={"women_selection_scan": scan, "women_scan_specificity": sj["others"], "women_scan_controls": sj["controls"]},
        config=config)
    return ablation_m, ppl_m, scan_m
