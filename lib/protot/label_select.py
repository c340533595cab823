"""A prototype found by its label, as the paper finds its "women" prototype: a class of words (e.g.
female words) against matched words (non-gender words of the same kind). :func:`word_gates` (the
mean gates at each word), :func:`label_scores` (per layer, prototype and gate, the mean log ratio
of the class's gates to the matched words'), :func:`top_token_share` and :func:`select_by_label`
(the best alive candidate, and whether its label earns the class's name). Re-exported by
:mod:`protot.labels`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from protot.concepts import GATE_KINDS, GateStats, token_id, token_table, windows_at


@torch.no_grad()
def word_gates(model, tokenizer, stream: np.ndarray, words, *, windows: int = 64, context: int = 64,
               seed: int = 0, batch_size: int = 16) -> dict[str, dict]:
    """Mean write and read gate at each word of ``words`` (one token each): over up to ``windows``
    windows of ``stream`` of ``context`` tokens centred on its occurrences (seeded), the gates at the
    centre. {word: {"write": (L, R), "read": (L, R), "count": windows used}}."""
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    out = {}
    try:
        for w in words:
            win = windows_at(stream, token_id(tokenizer, w), context, where="center", max_windows=windows, seed=seed)
            if len(win) == 0:
                raise ValueError(f"{w!r} has no window of {context} tokens in the stream")
            sums = {kind: 0.0 for kind in GATE_KINDS}
            for a in range(0, len(win), batch_size):
                g = model(win[a:a + batch_size].to(dev), use_cache=False, output_gates=True, logits_to_keep=1).gates
                for kind in GATE_KINDS:   # (L, B, R) at the centre position, summed over the batch
                    sums[kind] = sums[kind] + torch.stack([x[f"{kind}_gate"][:, context // 2] for x in g]).double().sum(1)
            out[w] = {kind: (sums[kind] / len(win)).cpu().numpy() for kind in GATE_KINDS} | {"count": len(win)}
    finally:
        model.train(was)
    return out


def label_scores(gates: dict[str, dict], pairs, alive: np.ndarray | None = None, floor: float = 1e-12) -> pd.DataFrame:
    """Score of every (layer, prototype, gate) for a class of words against matched words:
    mean over ``pairs`` (word, matched word) of ln(mean gate on the word / mean gate on the matched
    word), gates floored at ``floor``. Columns layer, prototype, gate, score, alive (``alive`` (L, R),
    default all); highest score first."""
    rows = []
    for kind in GATE_KINDS:
        s = np.mean([np.log(np.maximum(gates[a][kind], floor) / np.maximum(gates[b][kind], floor)) for a, b in pairs], 0)
        L, R = s.shape
        al = np.ones((L, R), bool) if alive is None else alive
        rows += [{"layer": l, "prototype": k, "gate": kind, "score": float(s[l, k]), "alive": bool(al[l, k])}
                 for l in range(L) for k in range(R)]
    return pd.DataFrame(rows).sort_values("score", ascending=False, kind="stable").reset_index(drop=True)


def top_token_share(stats: GateStats, gates: dict[str, dict], words, layer: int, k: int, gate: str, *,
                    top: int = 10, min_count: int = 5) -> float:
    """Share of ``words`` whose mean ``gate`` (from :func:`word_gates`) is at or above the ``top``-th
    largest mean gate of prototype k of ``layer`` over the token types of ``stats`` seen at least
    ``min_count`` times: how many of the words would enter its top-``top`` tokens."""
    sums, counts = token_table(stats, gate)
    keep = np.flatnonzero(counts >= min_count)
    if len(keep) < top:
        raise ValueError(f"only {len(keep)} token types are seen >= {min_count} times; need {top}")
    mean = np.sort(sums[layer, keep, k] / counts[keep])[::-1]
    bar = mean[top - 1]
    return float(np.mean([gates[w][gate][layer, k] >= bar for w in words]))


@dataclass
class LabelSelection:
    layer: int
    prototype: int
    gate: str            # the gate whose profile singled the class out
    score: float         # label_scores' score
    top_share: float     # top_token_share of the class's words
    labelled: bool       # score >= ln(min_ratio) and top_share >= min_top_share
    table: pd.DataFrame  # label_scores over every (layer, prototype, gate)

    @property
    def name(self) -> str:
        return f"L{self.layer} P{self.prototype}"


def select_by_label(scores: pd.DataFrame, stats: GateStats, gates: dict[str, dict], words, *, top: int = 10,
                    min_count: int = 5, min_ratio: float = 2.0, min_top_share: float = 0.5) -> LabelSelection:
    """The alive (layer, prototype) with the largest score (over both gates) in ``scores``
    (:func:`label_scores`), and whether its label earns the class's name: score >= ln(``min_ratio``)
    and at least ``min_top_share`` of ``words`` among its top-``top`` tokens (:func:`top_token_share`
    on ``stats``)."""
    cand = scores[scores["alive"]]
    if cand.empty:
        raise ValueError("no alive prototype to select")
    best = cand.iloc[0]
    layer, k, gate = int(best["layer"]), int(best["prototype"]), str(best["gate"])
    share = top_token_share(stats, gates, words, layer, k, gate, top=top, min_count=min_count)
    labelled = bool(best["score"] >= math.log(min_ratio) and share >= min_top_share)
    return LabelSelection(layer, k, gate, float(best["score"]), share, labelled, scores)
