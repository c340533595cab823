"""Describers and a judge for the signals of :mod:`accpp.interpret`, and the claim they measure.

    found = top_contexts(...)                                        # accpp.interpret: top contexts per signal
    lm = [lm_describe(model, tok, found.describe(i)) for i in range(len(signals))]
    judge = LMJudge(model, tok)
    table = judge_signals(judge, lm, found, seed=0)                 # balanced accuracy, own vs other description
    m = measure_auto_interpretation(table, baseline=..., config=...)    # claim accpp/auto-interpretation

The signals, their activations and their top contexts (with the random reservoir and the corpus
token counts) are :mod:`accpp.interpret`, whose docstring says how each is defined.

Describers. The top contexts are split: ranks 1, 3, 5, ... (up to ``n_heldout``) are held out for
the judge, the others are shown to the describer, with the activating (last) token in brackets.
(a) :func:`baseline_describe`: the tokens most over-represented at the activating positions against
the corpus counts; (b) :func:`lm_describe`: a local instruction model (SmolLM2-135M-Instruct here),
chat template, greedy decoding, a short phrase.

Judge. :class:`LMJudge` scores a context under a description by how much the description raises
the context's log-likelihood under a language model, per token: ``log p(context | "Feature:
<description>\\nText where the feature is active:\\n") - log p(context | "Text:\\n")``, divided by
the context's token count. For each signal, its held-out top contexts and as many random contexts
(from the reservoir) are scored under a description; the contexts above the median score are
called "top", and the balanced accuracy of that call is the description's accuracy (with equal
class sizes and a median threshold it is the fraction of held-out top contexts above the
median). ``ba_own`` uses the signal's own description, ``ba_other`` the description of another
signal (a seeded derangement). The claim's score is ``ba_own - ba_other`` per signal; its
``ci_low`` is the 2.5th percentile of a bootstrap over signals of the mean score.
"""
from __future__ import annotations

import random
from collections import Counter
from typing import Callable, Sequence

import numpy as np
import torch

from accpp.interpret import Context, TopContexts, render_context
from compendium.stats import bootstrap_mean_ci

__all__ = ["baseline_describe", "lm_describe", "LMJudge", "balanced_accuracy", "derangement", "judge_signals",
           "measure_auto_interpretation"]


# ---------------------------------------------------------------------------------------------
# Describers
# ---------------------------------------------------------------------------------------------
def baseline_describe(tokenizer, contexts: Sequence[Context], token_counts: dict[int, int], n_tokens: int,
                      n_words: int = 3) -> str:
    """The tokens most over-represented at the activating positions, against the corpus counts.

    Tokens are ranked by smoothed log ratio log((n_top + 0.5) / N_top) - log((n_corpus + 0.5) / N_corpus)
    (ties by the token id), keeping tokens seen at least twice when there are any.
    """
    if not contexts:
        raise ValueError("baseline_describe: no contexts")
    last = Counter(c.ids[-1] for c in contexts)
    N = len(contexts)
    score = {t: np.log((n + 0.5) / N) - np.log((token_counts.get(t, 0) + 0.5) / max(n_tokens, 1))
             for t, n in last.items()}
    pool = [t for t in last if last[t] >= 2] or list(last)
    best = sorted(pool, key=lambda t: (-score[t], t))[:n_words]
    words = [repr(tokenizer.decode([t]).strip() or tokenizer.decode([t])) for t in best]
    return "the word " + words[0] if len(words) == 1 else "the words " + ", ".join(words)


DESCRIBE_INSTRUCTION = (
    "Each line below is a short text. In each one, the last word, in [brackets], is where one feature of a "
    "language model is strongly active. In a few words, say what the feature responds to.")


def lm_describe(model, tokenizer, contexts: Sequence[Context], max_new_tokens: int = 16,
                instruction: str = DESCRIBE_INSTRUCTION) -> str:
    """A short description from an instruction model: chat template (when the tokenizer has one),
    the contexts numbered with the activating token marked, greedy decoding, the first line kept."""
    if not contexts:
        raise ValueError("lm_describe: no contexts")
    body = instruction + "\n\n" + "\n".join(f"{i + 1}. {render_context(tokenizer, c)}" for i, c in enumerate(contexts))
    if getattr(tokenizer, "chat_template", None):
        enc = tokenizer.apply_chat_template([{"role": "user", "content": body}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)
        ids = enc["input_ids"]
    else:
        ids = torch.tensor([tokenizer(body + "\nThe feature responds to:")["input_ids"]])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=tokenizer.eos_token_id)
    text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True).strip()
    text = text.splitlines()[0].strip() if text else ""
    return text or "(no description)"


# ---------------------------------------------------------------------------------------------
# Judge
# ---------------------------------------------------------------------------------------------
class LMJudge:
    """Scores a context under a description: per-token log-likelihood gain from the description.

    score(d, c) = [log p(c | cond(d)) - log p(c | uncond)] / len(c), with the prefixes ``cond`` and
    ``uncond`` below; scores are memoised per (description, context). The prefix is run once per
    description and its cache reused by a batch of contexts (right-padded).
    """

    COND = "Feature: {description}\nText where the feature is active:\n"
    UNCOND = "Text:\n"

    def __init__(self, model, tokenizer, batch: int = 32):
        self.model, self.tok, self.batch = model, tokenizer, batch
        self._memo: dict[tuple[str | None, tuple[int, ...]], float] = {}
        self.n_scored = 0

    def _prefix(self, description: str | None) -> list[int]:
        text = self.UNCOND if description is None else self.COND.format(description=description)
        return self.tok(text, add_special_tokens=True)["input_ids"]

    def logprob(self, prefix: list[int], contexts: Sequence[Sequence[int]]) -> np.ndarray:
        """Summed log p(context tokens | prefix) per context (the prefix run once, its cache shared)."""
        out = np.empty(len(contexts))
        if not prefix:
            raise ValueError("the judge needs a non-empty prefix")
        with torch.no_grad():
            pre = self.model(torch.tensor([prefix]), use_cache=True)
            past = _cache_of(pre)
            first = torch.log_softmax(pre.logits[0, -1], -1)
            for s in range(0, len(contexts), self.batch):
                chunk = contexts[s:s + self.batch]
                B, C = len(chunk), max(len(c) for c in chunk)
                ids = torch.zeros(B, C, dtype=torch.long)
                mask = torch.zeros(B, C, dtype=torch.long)
                for b, c in enumerate(chunk):
                    ids[b, : len(c)] = torch.tensor(c)
                    mask[b, : len(c)] = 1
                res = self.model(ids, **{_cache_arg(self.model): _copy_cache(past, B)}, use_cache=True,
                                 attention_mask=torch.cat([torch.ones(B, len(prefix), dtype=torch.long), mask], 1))
                lp = torch.log_softmax(res.logits, -1)  # the model's dtype
                for b, c in enumerate(chunk):
                    t = torch.tensor(c)
                    total = float(first[t[0]]) + float(lp[b, torch.arange(len(c) - 1), t[1:]].double().sum())
                    out[s + b] = float(total)
        self.n_scored += len(contexts)
        return out

    def scores(self, description: str, contexts: Sequence[Sequence[int]]) -> np.ndarray:
        """score(description, c) for each context (token ids of the judge's tokenizer)."""
        keys = [tuple(int(t) for t in c) for c in contexts]
        if any(len(k) == 0 for k in keys):
            raise ValueError("an empty context")
        for desc in (None, description):
            todo = sorted({k for k in keys if (desc, k) not in self._memo})
            if todo:
                for k, v in zip(todo, self.logprob(self._prefix(desc), todo)):
                    self._memo[(desc, k)] = v
        return np.array([(self._memo[(description, k)] - self._memo[(None, k)]) / len(k) for k in keys])


def _cache_arg(model) -> str:
    """The forward argument that takes a KV cache (``cache`` in recent transformers, else
    ``past_key_values``)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _cache_of(out):
    c = getattr(out, "cache", None)
    return c if c is not None else out.past_key_values


def _copy_cache(cache, B: int):
    import copy

    new = copy.deepcopy(cache)
    new.batch_repeat_interleave(B)
    return new


def balanced_accuracy(top_scores: Sequence[float], random_scores: Sequence[float]) -> float:
    """Balanced accuracy of calling the upper half of the pooled scores "top" (equal class sizes, so
    the threshold is the pooled median).

    Ties across the threshold are split evenly: the result is the mean of breaking them for and
    against the top contexts (all scores equal gives 0.5, chance)."""
    a, r = np.asarray(top_scores, float), np.asarray(random_scores, float)
    if len(a) == 0 or len(a) != len(r):
        raise ValueError(f"balanced_accuracy needs equal, non-zero numbers of top and random scores "
                         f"(got {len(a)} and {len(r)})")
    if not (np.isfinite(a).all() and np.isfinite(r).all()):
        raise ValueError("balanced_accuracy: non-finite scores")
    n = len(a)

    def ba(top_first_at_ties: bool) -> float:
        ka, kr = (0, 1) if top_first_at_ties else (1, 0)
        order = sorted([(x, kr, 0) for x in r] + [(x, ka, 1) for x in a])
        tp = sum(lab for *_, lab in order[n:])  # top contexts called top
        return tp / n  # with equal classes and n called top, TN = TP, so BA = TP / n

    return 0.5 * (ba(True) + ba(False))


def derangement(n: int, seed: int) -> list[int]:
    """A seeded permutation with no fixed point (n >= 2)."""
    if n < 2:
        raise ValueError(f"a derangement needs n >= 2, got {n}")
    rng = random.Random(seed)
    while True:
        p = list(range(n))
        rng.shuffle(p)
        if all(i != j for i, j in enumerate(p)):
            return p


def judge_signals(judge, descriptions: Sequence[str], found: TopContexts, seed: int = 0,
                  names: Sequence[str] | None = None, encode: Callable | None = None):
    """Per signal: balanced accuracy of its own description and of another signal's (a seeded
    derangement) at picking its held-out top contexts out of as many random ones.

    ``judge``: an object with ``scores(description, contexts) -> array`` (:class:`LMJudge`, or a
    synthetic judge in tests); ``encode``: maps a :class:`Context` to what the judge takes (default:
    its token ids). Random contexts of signal i: a seeded sample of the reservoir (without contexts
    equal to one of signal i's top contexts).
    """
    import pandas as pd

    n = len(descriptions)
    if n != len(found.top):
        raise ValueError(f"{n} descriptions for {len(found.top)} signals")
    other = derangement(n, seed)
    encode = encode or (lambda c: c.ids)
    rng = random.Random(seed + 1)
    ctxs, sizes = [], []
    for i in range(n):
        held = found.heldout(i)
        if len(held) < found.n_heldout:
            raise ValueError(f"signal {i} has {len(held)} held-out contexts, fewer than {found.n_heldout}")
        own_ids = {tuple(c.ids) for c in found.top[i]}
        pool = [c for c in found.random if tuple(c.ids) not in own_ids]
        if len(pool) < len(held):
            raise ValueError(f"signal {i}: only {len(pool)} random contexts not among its top contexts")
        rand = rng.sample(pool, len(held))
        ctxs.append([encode(c) for c in held] + [encode(c) for c in rand])
        sizes.append(len(held))
    # each description is scored once, on its own signal's contexts and on those of the signal that
    # gets it as "another signal's description" (one prefix, one batch)
    inverse = {j: i for i, j in enumerate(other)}
    own_s, other_s = [None] * n, [None] * n
    for j in range(n):
        i = inverse[j]
        s = judge.scores(descriptions[j], ctxs[j] + ctxs[i])
        own_s[j], other_s[i] = s[: len(ctxs[j])], s[len(ctxs[j]):]
    rows = []
    for i in range(n):
        m, s_own, s_oth = sizes[i], own_s[i], other_s[i]
        rows.append(dict(signal=names[i] if names else i, description=descriptions[i], other=other[i],
                         other_description=descriptions[other[i]],
                         ba_own=balanced_accuracy(s_own[:m], s_own[m:]),
                         ba_other=balanced_accuracy(s_oth[:m], s_oth[m:]),
                         score_own_top=float(np.mean(s_own[:m])), score_own_random=float(np.mean(s_own[m:])),
                         n_heldout=m))
    df = pd.DataFrame(rows)
    df["gap"] = df["ba_own"] - df["ba_other"]
    return df


def _summary(table, n_boot: int, seed: int) -> dict:
    lo, hi = bootstrap_mean_ci(table["gap"].to_numpy(), n_boot=n_boot, seed=seed)
    return dict(score_gap_mean=float(table["gap"].mean()), score_gap_ci_low=lo, score_gap_ci_high=hi,
                ba_own_mean=float(table["ba_own"].mean()), ba_other_mean=float(table["ba_other"].mean()),
                n_signals=int(len(table)), heldout_per_signal=int(table["n_heldout"].min()))


def measure_auto_interpretation(table, baseline=None, config: dict | None = None, n_boot: int = 2000,
                                seed: int = 0):
    """Claim accpp/auto-interpretation from :func:`judge_signals` tables: ``table`` of the LM describer
    (the claim's value: the mean gap with its bootstrap interval over signals), ``baseline`` of the
    token-statistics describer (evidence). ``heldout_per_signal`` (the fewest held-out contexts of a
    signal) sets the balanced accuracy's resolution, 1 / (2 x held-out), which the claim's power
    precondition reads."""
    from compendium.claims import Measurement
    import pandas as pd

    need = ("ba_own", "ba_other", "gap", "n_heldout")
    for name, t in (("table", table), ("baseline", baseline)):
        if t is None:
            continue
        missing = [c for c in need if c not in t]
        if missing:
            raise ValueError(f"measure_auto_interpretation: {name} lacks column(s) {missing}")
        if len(t) < 2:
            raise ValueError(f"measure_auto_interpretation: {name} has {len(t)} signal(s); need at least 2")
    values = _summary(table, n_boot, seed)
    evidence: dict = dict(n_boot=n_boot, gaps=table["gap"].round(3).tolist())
    tables = {"07_signal_interpretation_judge": table.assign(describer="lm")}
    note = (f"LM describer: balanced accuracy {values['ba_own_mean']:.3f} with the signal's own description vs "
            f"{values['ba_other_mean']:.3f} with another signal's, gap {values['score_gap_mean']:+.3f} "
            f"(95% bootstrap CI {values['score_gap_ci_low']:+.3f} to {values['score_gap_ci_high']:+.3f}) over "
            f"{values['n_signals']} signals")
    if baseline is not None:
        b = _summary(baseline, n_boot, seed)
        evidence.update({f"baseline_{k}": v for k, v in b.items()})
        tables["07_signal_interpretation_judge"] = pd.concat([tables["07_signal_interpretation_judge"],
                                                              baseline.assign(describer="baseline")], ignore_index=True)
        note += (f"; token-statistics baseline: {b['ba_own_mean']:.3f} vs {b['ba_other_mean']:.3f}, gap "
                 f"{b['score_gap_mean']:+.3f} (CI {b['score_gap_ci_low']:+.3f} to {b['score_gap_ci_high']:+.3f})")
    return Measurement(claim="accpp/auto-interpretation", values=values, evidence=evidence, tables=tables,
                       config=dict(config or {}), note=note)
