"""Pairwise preference of an LLM judge between continuations, aggregated into Elo ratings.

The measurement behind ``protot/generation-elo`` (the paper's §7: an LLM judge's pairwise
preferences rank ProtoT above LLaMA and DeltaNet and near Mamba, on an Elo scale):

1. **Prompts** (:func:`select_prompts`): seeded, non-overlapping windows of ``prefix + continuation``
   tokens of the validation split that lie inside one document (no end-of-text token); the first
   ``prefix`` tokens are the prompt, the rest is the held-out *human* continuation.
2. **Continuations** (:func:`continuations`): each model samples ``continuation`` tokens after the
   prompt (softmax(logits / temperature) within the ``top_k`` most likely tokens), with a generator
   seeded ``seed + i`` for the i-th prompt, the same for every model.
3. **Judgements** (:func:`judge_all`): for every prompt, every pair of items (each model's
   continuation and the human one) is shown to the judge in both orders, as "A" and "B", in one
   fixed template. The judge's answer is the log-odds ``log p(A) - log p(B)`` of its next token
   after the template (:class:`LMJudge`): no free text is parsed.
4. **Outcomes** (:func:`pair_outcomes`): x beats y when the judge prefers x in both orders, loses
   when it prefers y in both, and the two tie (half a win each) when the orders disagree; the
   judgement is *order-consistent* when both orders name the same winner
   (:func:`order_consistency`). :func:`human_preference`: the human continuation's mean score
   against the models' (1 win, 0.5 tie, 0 loss).
5. **Ratings** (:func:`bradley_terry`, :func:`elo`): Bradley-Terry strengths, p(i beats j) =
   sigmoid(theta_i - theta_j), fitted by maximum likelihood to the models' summed scores with
   ``prior_ties`` virtual tied games per pair of models (finite ratings when one model wins every
   game), on the 400-point Elo scale (Elo_i - Elo_j = 400 log10 e (theta_i - theta_j)) with mean
   1000 over the compared models. Gaps ProtoT - other get 95% intervals from a percentile
   bootstrap over prompts (:func:`elo_gaps`, :func:`compendium.stats.bootstrap_paired_ci`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd
import torch

__all__ = ["ARCHITECTURES", "HUMAN", "Prompt", "select_prompts", "continuations", "items_of", "LMJudge", "judge_all",
           "pair_outcomes", "order_consistency", "human_preference", "position_bias", "debiased", "win_matrix", "bradley_terry", "elo",
           "elo_gaps", "measure"]

#: the architectures the claim names, ProtoT first (the one every gap is taken from)
ARCHITECTURES = ("protot", "llama", "deltanet", "mamba")
#: the item name of the held-out human continuation
HUMAN = "human"
#: Elo points per unit of Bradley-Terry strength (natural log-odds)
ELO_PER_LOGIT = 400 / math.log(10)
ELO_MEAN = 1000.0


# ---------------------------------------------------------------------------------------------
# prompts and continuations
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Prompt:
    index: int               # position in the selection (seeds the i-th prompt's sampling)
    start: int               # first token's offset in the stream
    prefix_ids: tuple[int, ...]
    human_ids: tuple[int, ...]


def select_prompts(stream, n: int, prefix_tokens: int, continuation_tokens: int, *, eos: int,
                   seed: int = 0) -> list[Prompt]:
    """``n`` prompts from ``stream``: of its non-overlapping windows of ``prefix_tokens +
    continuation_tokens`` tokens, those without ``eos`` (inside one document), ``n`` drawn without
    replacement by numpy's default_rng(seed), in stream order."""
    if min(n, prefix_tokens, continuation_tokens) < 1:
        raise ValueError(f"n, prefix_tokens and continuation_tokens must be positive, got {n}, {prefix_tokens}, "
                         f"{continuation_tokens}")
    stream = np.asarray(stream)
    width = prefix_tokens + continuation_tokens
    windows = stream[: len(stream) // width * width].reshape(-1, width)
    eligible = np.flatnonzero(~(windows == eos).any(axis=1))
    if len(eligible) < n:
        raise ValueError(f"only {len(eligible)} windows of {width} tokens lie inside one document; {n} asked for")
    chosen = np.sort(np.random.default_rng(seed).choice(eligible, size=n, replace=False))
    return [Prompt(i, int(w) * width, tuple(int(t) for t in windows[w, :prefix_tokens]),
                   tuple(int(t) for t in windows[w, prefix_tokens:])) for i, w in enumerate(chosen)]


def continuations(model, prompts: list[Prompt], *, max_new_tokens: int, temperature: float, top_k: int | None,
                  seed: int, eos: int | None = None) -> list[list[int]]:
    """The token ids ``model`` samples after each prompt (the i-th with a generator seeded
    ``seed + i``; stops early after ``eos``, which is then dropped)."""
    from protot.generate import continue_ids

    was = model.training
    model.eval()
    try:
        out = []
        for p in prompts:
            gen = torch.Generator().manual_seed(seed + p.index)
            ids = continue_ids(model, list(p.prefix_ids), max_new_tokens=max_new_tokens, greedy=False,
                               temperature=temperature, top_k=top_k, generator=gen, stop_id=eos)
            out.append(ids[:-1] if eos is not None and ids and ids[-1] == eos else ids)
    finally:
        model.train(was)
    return out


def items_of(tokenizer, prompts: list[Prompt], conts: dict[str, list[list[int]]]) -> tuple[list[str], dict[str, list[str]]]:
    """(the prompts' prefixes as text, {item: one text per prompt}): the human continuation first,
    then each model's (``conts``: {model name: its continuation ids per prompt})."""
    if HUMAN in conts:
        raise ValueError(f"{HUMAN!r} names the human continuation, not a model")
    prefixes = [tokenizer.decode(list(p.prefix_ids)) for p in prompts]
    items = {HUMAN: [tokenizer.decode(list(p.human_ids)) for p in prompts]}
    for name, ids in conts.items():
        if len(ids) != len(prompts):
            raise ValueError(f"{name!r} has {len(ids)} continuations for {len(prompts)} prompts")
        items[name] = [tokenizer.decode(x) for x in ids]
    return prefixes, items


# ---------------------------------------------------------------------------------------------
# the judge
# ---------------------------------------------------------------------------------------------
class LMJudge:
    """An instruction-tuned causal LM as a pairwise judge.

    ``template`` holds ``{prefix}``, ``{a}`` and ``{b}``; it is the user's message of the model's
    chat template, and the answer is read at the first token of the assistant's turn:
    ``log p(labels[0]) - log p(labels[1])`` (each label one token). The tokens up to the first
    continuation are encoded and run once per prompt (their key/value cache is reused by every pair);
    the rest is encoded separately, so a pair is scored on ``encode(head) + encode(rest)``."""

    def __init__(self, model, tokenizer, template: str, labels: tuple[str, str] = ("A", "B")):
        for key in ("{prefix}", "{a}", "{b}"):
            if key not in template:
                raise ValueError(f"the judge's template must hold {key}")
        if template.index("{a}") > template.index("{b}") or template.index("{prefix}") > template.index("{a}"):
            raise ValueError("the judge's template must place {prefix}, {a} and {b} in that order")
        self.model, self.tokenizer, self.template = model, tokenizer, template
        ids = [tokenizer.encode(x, add_special_tokens=False) for x in labels]
        if any(len(i) != 1 for i in ids):
            raise ValueError(f"each label must be one token of the judge's tokenizer, got {ids}")
        self.label_ids = (ids[0][0], ids[1][0])
        self.labels = tuple(labels)

    def render(self, prefix: str, a: str, b: str) -> str:
        msgs = [{"role": "user", "content": self.template.format(prefix=prefix, a=a, b=b)}]
        return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)

    def _split(self, prefix: str, a: str, b: str) -> tuple[str, str]:
        """(the text shared by every pair of this prompt, the rest)."""
        marker = "\x00"
        head = self.render(prefix, marker, marker).split(marker, 1)[0]
        full = self.render(prefix, a, b)
        if not full.startswith(head):
            raise ValueError("the rendered template does not start with its shared part")
        return head, full[len(head):]

    @torch.no_grad()
    def logodds(self, prefix: str, pairs: list[tuple[str, str]], *, cache: bool = True) -> np.ndarray:
        """(len(pairs),) float64: log p(A) - log p(B) for each (A text, B text) after ``prefix``.
        ``cache=False`` runs every pair from its first token (the same ids; for tests)."""
        from transformers import DynamicCache

        dev = next(self.model.parameters()).device
        head = self._split(prefix, *pairs[0])[0] if pairs else ""
        head_ids = self.tokenizer.encode(head, add_special_tokens=False)
        past = None
        if cache and pairs:
            past = DynamicCache(config=self.model.config)
            self.model(torch.tensor([head_ids], device=dev), cache=past, use_cache=True)
        out = []
        for a, b in pairs:
            h, rest = self._split(prefix, a, b)
            assert h == head
            rest_ids = self.tokenizer.encode(rest, add_special_tokens=False)
            if past is not None:
                extra = past.get_seq_length() - len(head_ids)      # the previous pair's tokens
                if extra:
                    past.crop(-extra)
                logits = self.model(torch.tensor([rest_ids], device=dev), cache=past, use_cache=True,
                                    logits_to_keep=1).logits
            else:
                logits = self.model(torch.tensor([head_ids + rest_ids], device=dev), logits_to_keep=1).logits
            lp = torch.log_softmax(logits[0, -1].double(), -1)
            out.append(float(lp[self.label_ids[0]] - lp[self.label_ids[1]]))
        return np.array(out, dtype=np.float64)


def judge_all(judge, prefixes: list[str], items: dict[str, list[str]], *, progress: bool = False) -> pd.DataFrame:
    """Every pair of ``items`` ({item name: one text per prompt}) judged after each prompt's prefix,
    in both orders: one row per judgement (prompt, a, b, logodds: the judge's log p(a) - log p(b),
    a shown first). ``judge.logodds(prefix, [(a text, b text), ...])`` answers a prompt's pairs."""
    names = list(items)
    if len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(f"need two or more distinct items, got {names}")
    for name, texts in items.items():
        if len(texts) != len(prefixes):
            raise ValueError(f"{name!r} has {len(texts)} texts for {len(prefixes)} prompts")
    ordered = [(x, y) for x, y in combinations(names, 2)] + [(y, x) for x, y in combinations(names, 2)]
    rows = []
    it = range(len(prefixes))
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc="judging", unit="prompt")
    for i in it:
        lo = judge.logodds(prefixes[i], [(items[a][i], items[b][i]) for a, b in ordered])
        rows += [{"prompt": i, "a": a, "b": b, "logodds": float(v)} for (a, b), v in zip(ordered, lo)]
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# outcomes
# ---------------------------------------------------------------------------------------------
def pair_outcomes(judgements: pd.DataFrame) -> pd.DataFrame:
    """One row per prompt and unordered pair (x, y): the two orders' log-odds for x (``x_first``: x
    shown as A; ``x_second``: x shown as B, sign turned so that > 0 prefers x), ``consistent`` (both
    orders name the same winner; a log-odds of exactly 0 names none) and ``score``, x's result:
    1 (x preferred in both orders), 0 (y in both) or 0.5 (the orders disagree)."""
    j = judgements.set_index(["prompt", "a", "b"])["logodds"]
    if not j.index.is_unique:
        raise ValueError("a (prompt, a, b) judgement occurs twice")
    rows = []
    for (p, a, b), v in j.items():
        if (p, b, a) not in j.index:
            raise ValueError(f"prompt {p}: ({a}, {b}) was judged in one order only")
        if a < b:
            first, second = float(v), -float(j[(p, b, a)])
            wins = np.sign(first) + np.sign(second)
            rows.append({"prompt": p, "x": a, "y": b, "x_first": first, "x_second": second,
                         "consistent": bool(np.sign(first) == np.sign(second) != 0),
                         "score": 1.0 if wins == 2 else 0.0 if wins == -2 else 0.5})
    return pd.DataFrame(rows)


def order_consistency(outcomes: pd.DataFrame) -> float:
    """Share of judged pairs whose two orders name the same winner."""
    return float(outcomes["consistent"].mean())


def position_bias(judgements: pd.DataFrame) -> dict:
    """How much the judge favours the first-shown text whatever it is: the share of judgements
    answering A (log-odds > 0) and the mean log-odds (0 and 0.5 for a judge without position bias)."""
    lo = judgements["logodds"].to_numpy(dtype=np.float64)
    return {"share_first": float((lo > 0).mean()), "mean_logodds": float(lo.mean())}


def debiased(judgements: pd.DataFrame) -> pd.DataFrame:
    """The judgements with the judge's mean log-odds (its position bias over the run) subtracted:
    what order consistency and the human preference would be for a judge calibrated on this run
    (evidence for a protocol choice; the registered outcome rule reads the log-odds as they are)."""
    return judgements.assign(logodds=judgements.logodds - judgements.logodds.mean())


def _oriented(outcomes: pd.DataFrame, item: str) -> pd.DataFrame:
    """The pairs holding ``item``, each as (prompt, other, score of ``item``)."""
    as_x = outcomes[outcomes.x == item][["prompt", "y", "score"]].rename(columns={"y": "other"})
    as_y = outcomes[outcomes.y == item][["prompt", "x", "score"]].rename(columns={"x": "other"})
    as_y = as_y.assign(score=1.0 - as_y.score)
    return pd.concat([as_x, as_y], ignore_index=True)


def human_preference(outcomes: pd.DataFrame) -> float:
    """The human continuation's mean score against the models' (1 win, 0.5 tie, 0 loss)."""
    h = _oriented(outcomes, HUMAN)
    if h.empty:
        raise ValueError("no pair holds the human continuation")
    return float(h.score.mean())


# ---------------------------------------------------------------------------------------------
# Bradley-Terry and Elo
# ---------------------------------------------------------------------------------------------
def win_matrix(outcomes: pd.DataFrame, models: list[str]) -> np.ndarray:
    """(K, K): [i, j] = i's summed score against j over the pairs of ``models`` (others ignored)."""
    idx = {m: k for k, m in enumerate(models)}
    w = np.zeros((len(models), len(models)))
    for x, y, s in outcomes[outcomes.x.isin(idx) & outcomes.y.isin(idx)][["x", "y", "score"]].itertuples(index=False):
        w[idx[x], idx[y]] += s
        w[idx[y], idx[x]] += 1.0 - s
    return w


def _loglik(theta: np.ndarray, w: np.ndarray) -> np.ndarray:
    d = theta[..., :, None] - theta[..., None, :]
    return (w * -np.logaddexp(0.0, -d)).sum((-2, -1))


def bradley_terry(wins: np.ndarray, prior_ties: float = 1.0, *, tol: float = 1e-12, max_iter: int = 200) -> np.ndarray:
    """Maximum-likelihood Bradley-Terry strengths (mean 0, natural log-odds) of ``wins`` ((K, K), or
    (B, K, K) for B fits at once; [i, j] = i's score against j), each pair of distinct players given
    ``prior_ties`` extra tied games (half a win each). Newton's method with step halving."""
    w = np.asarray(wins, dtype=np.float64)
    single = w.ndim == 2
    w = w[None] if single else w
    if w.ndim != 3 or w.shape[1] != w.shape[2] or w.shape[1] < 2:
        raise ValueError(f"wins must be (K, K) or (B, K, K) with K >= 2, got {np.shape(wins)}")
    if (w < 0).any() or prior_ties < 0:
        raise ValueError("scores and prior_ties must be non-negative")
    k = w.shape[1]
    w = w + (prior_ties / 2) * (1 - np.eye(k))
    n = w + np.swapaxes(w, 1, 2)                                     # games between i and j
    theta = np.zeros(w.shape[:2])
    for _ in range(max_iter):
        p = 1 / (1 + np.exp(-(theta[:, :, None] - theta[:, None, :])))   # (B, K, K) p(i beats j)
        grad = (w - n * p).sum(2)                                        # observed - expected wins
        hess = n * p * (1 - p)                                           # -Hessian off-diagonal: -h
        neg_h = np.where(np.eye(k, dtype=bool), hess.sum(2)[:, :, None], -hess)
        # theta_0 held at 0 (the fit is invariant to a shift); solve for the rest
        step = np.zeros_like(theta)
        step[:, 1:] = np.linalg.solve(neg_h[:, 1:, 1:], grad[:, 1:, None])[..., 0]
        t, ll0 = np.ones(len(theta)), _loglik(theta, w)
        for _ in range(60):
            worse = _loglik(theta + t[:, None] * step, w) < ll0 - 1e-12 * np.abs(ll0)
            if not worse.any():
                break
            t = np.where(worse, t / 2, t)
        theta = theta + t[:, None] * step
        if np.abs(t[:, None] * step).max() < tol:
            break
    theta = theta - theta.mean(1, keepdims=True)
    return theta[0] if single else theta


def elo(theta: np.ndarray) -> np.ndarray:
    """Bradley-Terry strengths on the 400-point Elo scale, mean 1000."""
    theta = np.asarray(theta, dtype=np.float64)
    return ELO_MEAN + ELO_PER_LOGIT * (theta - theta.mean(-1, keepdims=True))


def elo_gaps(outcomes: pd.DataFrame, models: list[str], *, prior_ties: float = 1.0, n_boot: int = 2000,
             seed: int = 0) -> pd.DataFrame:
    """One row per model: its Elo among ``models`` and, for every model but the first, the gap
    first - it with a 95% percentile-bootstrap interval over prompts (the same resampled prompts for
    every gap: :func:`compendium.stats.bootstrap_paired_ci` with one seed)."""
    from compendium import stats

    if len(models) < 2 or len(set(models)) != len(models):
        raise ValueError(f"need two or more distinct models, got {models}")
    sub = outcomes[outcomes.x.isin(models) & outcomes.y.isin(models)]
    pairs = [tuple(sorted(p)) for p in combinations(models, 2)]
    per_prompt = (sub.set_index(["prompt", "x", "y"])["score"].unstack(["x", "y"])
                  .reindex(sorted(outcomes.prompt.unique())))              # (prompts, pairs), NaN where not judged
    missing = [p for p in pairs if p not in per_prompt.columns]
    if missing or per_prompt.isna().any().any():
        raise ValueError(f"every prompt needs every pair of models judged; missing pairs: {missing}")
    idx = {m: k for k, m in enumerate(models)}
    cols = [per_prompt[p].to_numpy(dtype=np.float64) for p in pairs]

    def ratings(*resampled):                                         # each (B, n) -> (B, K)
        w = np.zeros((resampled[0].shape[0], len(models), len(models)))
        for (x, y), s in zip(pairs, resampled):
            w[:, idx[x], idx[y]] += s.sum(1)
            w[:, idx[y], idx[x]] += (1.0 - s).sum(1)
        return elo(bradley_terry(w, prior_ties))

    point = ratings(*(c[None] for c in cols))[0]
    rows = [{"model": models[0], "elo": float(point[0]), "gap": None, "gap_ci_low": None, "gap_ci_high": None}]
    for m in models[1:]:
        lo, hi = stats.bootstrap_paired_ci(lambda *r, k=idx[m]: (lambda e: e[:, 0] - e[:, k])(ratings(*r)),
                                           *cols, n_boot=n_boot, seed=seed)
        rows.append({"model": m, "elo": float(point[idx[m]]), "gap": float(point[0] - point[idx[m]]),
                     "gap_ci_low": lo, "gap_ci_high": hi})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# the claim's measurement
# ---------------------------------------------------------------------------------------------
def measure(outcomes: pd.DataFrame, architectures: dict[str, str], *, prior_ties: float = 1.0, n_boot: int = 2000,
            seed: int = 0, config: dict | None = None, tables: dict | None = None, evidence: dict | None = None):
    """``protot/generation-elo`` as a :class:`compendium.claims.Measurement`.

    ``architectures``: {model name: architecture} of the judged models (one model per architecture,
    a ProtoT among them). values: ``elo_gap_<arch>`` = Elo(ProtoT) - Elo(arch) with
    ``_ci_low``/``_ci_high`` for llama, deltanet and mamba (None for an architecture not compared),
    ``judge_order_consistency``, ``human_preference``, ``architectures_compared`` (how many of
    :data:`ARCHITECTURES` were judged) and ``n_prompts``."""
    from compendium import claims

    archs = list(architectures.values())
    unknown = sorted(set(archs) - set(ARCHITECTURES))
    if unknown or len(set(archs)) != len(archs) or "protot" not in archs:
        raise ValueError(f"one model per architecture of {ARCHITECTURES}, a ProtoT among them; got {architectures}")
    by_arch = {a: m for m, a in architectures.items()}
    models = [by_arch[a] for a in ARCHITECTURES if a in by_arch]
    table = elo_gaps(outcomes, models, prior_ties=prior_ties, n_boot=n_boot, seed=seed)
    table.insert(1, "architecture", [architectures[m] for m in table.model])
    values = {}
    for a in ARCHITECTURES[1:]:
        row = table[table.architecture == a]
        for suffix, col in (("", "gap"), ("_ci_low", "gap_ci_low"), ("_ci_high", "gap_ci_high")):
            values[f"elo_gap_{a}{suffix}"] = None if row.empty else float(row[col].iloc[0])
    values.update(judge_order_consistency=order_consistency(outcomes), human_preference=human_preference(outcomes),
                  architectures_compared=len(models), n_prompts=int(outcomes.prompt.nunique()))
    ev = {"elo": {r.model: round(float(r.elo), 2) for r in table.itertuples()},
          "elo_protot": float(table.elo.iloc[0]),
          "human_score_by_model": _oriented(outcomes, HUMAN).groupby("other").score.mean().round(4).to_dict(),
          "consistency_by_pair": {f"{x} vs {y}": round(float(v), 4)
                                  for (x, y), v in outcomes.groupby(["x", "y"]).consistent.mean().items()},
          **(evidence or {})}
    return claims.Measurement(claim="protot/generation-elo", values=values, evidence=ev,
                              tables=dict(tables or {}, generation_elo=table), config=dict(config or {}))
