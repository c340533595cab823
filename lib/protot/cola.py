"""GLUE CoLA (the Corpus of Linguistic Acceptability) for the committed language models.

Data: data/cola/ (the public splits: 8,551 training sentences; 1,043 dev = 527 in-domain + 516
out-of-domain, GLUE's validation split; Warstadt, Singh and Bowman 2019, TACL). The metric is GLUE's:
Matthews correlation x 100 on dev, here with a bootstrap interval over the dev sentences.

    load(split)                      DataFrame(source, label, sentence) of "train" or "dev"
    matthews(y, p)                   Matthews correlation x 100 (0 when a side is constant)
    mcc_interval(y, p)               (mcc, low, high): percentile bootstrap over sentences
    majority_baseline(train, dev)    predicts the training split's majority class: MCC 0 by definition
    bow_baseline(train, dev)         bag-of-words logistic regression (scikit-learn)
    finetune(model, tokenizer, train, dev, ...)   the whole model plus a linear head on the final
                                     hidden state of the sentence's last token (a causal model has
                                     seen the whole sentence there), AdamW, cross-entropy; returns dev
                                     predictions and the training log
    holdout_split(train, frac, seed) the training split cut in two (fit, held out) for choosing a
                                     learning rate without looking at dev
    select_lr(make_model, ...)       the grid's learning rate with the best held-out MCC
    seed_mean_gap(y, preds_a, preds_b)   (gap, low, high) of the seed-mean MCC of two models, paired
                                     percentile bootstrap over the same sentences
    measure(...)                     ``protot/glue-cola`` as a compendium Measurement

Batches are drawn by length buckets (a seeded permutation cut into pools of ``POOL`` batches, each
pool sorted by length), so a batch pads to little more than its own longest sentence; the batch
order is shuffled again. Features come from the model without its LM head (the head is swapped for
the identity during the call), so no vocabulary-sized logits are computed.

Sentences are right-padded in a batch; a causal model's states at real tokens do not depend on the
padding after them, and the head reads the last real token.
"""
from __future__ import annotations

import contextlib
import csv
import math

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from compendium import paths

__all__ = ["FILES", "POOL", "load", "matthews", "mcc_interval", "majority_baseline", "bow_baseline", "encode",
           "batches", "finetune", "holdout_split", "select_lr", "seed_mean_gap", "measure"]

POOL = 50   # batches per length-sorted pool

FILES = {"train": ("in_domain_train.tsv",), "dev": ("in_domain_dev.tsv", "out_of_domain_dev.tsv")}


def load(split: str) -> pd.DataFrame:
    """The CoLA ``split`` ("train" or "dev") as DataFrame(source, label, sentence)."""
    if split not in FILES:
        raise ValueError(f"unknown CoLA split {split!r}; valid: {', '.join(FILES)}")
    rows = []
    for name in FILES[split]:
        path = paths.data_dir() / "cola" / name
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: CoLA ships in data/cola (see data/MANIFEST.md)")
        with open(path, encoding="utf-8", newline="") as fh:
            for i, r in enumerate(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
                if len(r) != 4 or r[1] not in ("0", "1"):
                    raise ValueError(f"{path}:{i}: expected 4 tab-separated columns with label 0 or 1, got {r!r}")
                rows.append({"source": r[0], "label": int(r[1]), "sentence": r[3]})
    return pd.DataFrame(rows)


def matthews(y, p) -> float:
    """Matthews correlation coefficient x 100 of binary labels y and predictions p (0 if undefined)."""
    y, p = np.asarray(y, dtype=int), np.asarray(p, dtype=int)
    tp = float(((y == 1) & (p == 1)).sum())
    tn = float(((y == 0) & (p == 0)).sum())
    fp = float(((y == 0) & (p == 1)).sum())
    fn = float(((y == 1) & (p == 0)).sum())
    den = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return 0.0 if den == 0 else 100.0 * (tp * tn - fp * fn) / den


def mcc_interval(y, p, *, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """(MCC x 100, low, high): a percentile bootstrap over sentences."""
    y, p = np.asarray(y, dtype=int), np.asarray(p, dtype=int)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(y), size=(n_boot, len(y)))
    boot = np.array([matthews(y[i], p[i]) for i in idx])
    a = (1 - level) / 2
    return matthews(y, p), float(np.quantile(boot, a)), float(np.quantile(boot, 1 - a))


def majority_baseline(train: pd.DataFrame, dev: pd.DataFrame) -> np.ndarray:
    """Dev predictions of the training split's majority class."""
    return np.full(len(dev), int(train.label.mean() >= 0.5))


def bow_baseline(train: pd.DataFrame, dev: pd.DataFrame, *, seed: int = 0) -> np.ndarray:
    """Dev predictions of a bag-of-words (unigrams and bigrams, lower-cased) logistic regression."""
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = CountVectorizer(ngram_range=(1, 2), lowercase=True, min_df=1)
    X = vec.fit_transform(train.sentence)
    clf = LogisticRegression(max_iter=2000, class_weight="balanced", random_state=seed).fit(X, train.label)
    return clf.predict(vec.transform(dev.sentence)).astype(int)


def encode(tokenizer, sentences, bos: int | None, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (N, T) and the index of each sentence's last token (N,); a sentence longer than
    ``max_len`` tokens is cut at the front (its end is kept)."""
    rows = []
    for s in sentences:
        ids = tokenizer.encode(s, add_special_tokens=False)
        ids = ([bos] if bos is not None else []) + list(ids)
        rows.append(ids[-max_len:])
    T = max(len(r) for r in rows)
    x = torch.zeros(len(rows), T, dtype=torch.long)
    last = torch.empty(len(rows), dtype=torch.long)
    for i, r in enumerate(rows):
        x[i, :len(r)] = torch.tensor(r)
        last[i] = len(r) - 1
    return x, last


def batches(lengths, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Indices of every item once, in batches of ``batch_size`` (the last may be smaller): a
    permutation by ``rng`` cut into pools of POOL batches, each pool sorted by length, then the
    batches shuffled."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    lengths = np.asarray(lengths)
    order = rng.permutation(len(lengths))
    out = []
    for s in range(0, len(order), batch_size * POOL):
        pool = order[s:s + batch_size * POOL]
        pool = pool[np.argsort(lengths[pool], kind="stable")]
        out += [pool[i:i + batch_size] for i in range(0, len(pool), batch_size)]
    return [out[i] for i in rng.permutation(len(out))]


@contextlib.contextmanager
def _headless(model):
    """The model's LM head swapped for the identity: its "logits" are the final normed states."""
    head = model.get_output_embeddings()
    model.set_output_embeddings(torch.nn.Identity())
    try:
        yield model
    finally:
        model.set_output_embeddings(head)


def _features(model, x: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    with _headless(model):
        h = model(input_ids=x, use_cache=False).logits                 # (B, T, d): after the final norm
    return h[torch.arange(len(x)), last]                               # (B, d)


def finetune(model, tokenizer, train: pd.DataFrame, dev: pd.DataFrame, *, seed: int = 0, epochs: int = 1,
             lr: float = 1e-4, batch_size: int = 32, max_len: int = 64, bos: int | None = None,
             max_steps: int | None = None) -> dict:
    """Fine-tune ``model`` (in place) with a linear head on CoLA ``train``; predict ``dev``.

    Returns {"pred": dev predictions (N,), "steps", "train_loss" (last 20 steps' mean), "seed"}."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    head = torch.nn.Linear(model.config.hidden_size, 2)
    params = [p for p in model.parameters() if p.requires_grad] + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    x, last = encode(tokenizer, train.sentence.tolist(), bos, max_len)
    y = torch.tensor(train.label.to_numpy(), dtype=torch.long)
    losses, step = [], 0
    model.train()
    for _ in range(epochs):
        for b in batches(last.numpy(), batch_size, rng):
            b = torch.from_numpy(b)
            T = int(last[b].max()) + 1
            loss = F.cross_entropy(head(_features(model, x[b, :T], last[b])), y[b])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
            if max_steps is not None and step >= max_steps:
                break
        if max_steps is not None and step >= max_steps:
            break
    model.eval()
    xd, ld = encode(tokenizer, dev.sentence.tolist(), bos, max_len)
    pred = np.empty(len(xd), dtype=int)
    with torch.no_grad():
        for b in batches(ld.numpy(), 128, np.random.default_rng(0)):
            b = torch.from_numpy(b)
            T = int(ld[b].max()) + 1
            pred[b.numpy()] = head(_features(model, xd[b, :T], ld[b])).argmax(-1).numpy()
    return {"pred": pred, "steps": step,
            "train_loss": float(np.mean(losses[-20:])) if losses else float("nan"), "seed": seed}


def holdout_split(train: pd.DataFrame, frac: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(fit, held out): a share ``frac`` of the rows, drawn by numpy default_rng(seed), held out."""
    if not 0 < frac < 1:
        raise ValueError(f"frac must lie strictly between 0 and 1, got {frac}")
    order = np.random.default_rng(seed).permutation(len(train))
    n_held = max(1, round(frac * len(train)))
    held, fit = np.sort(order[:n_held]), np.sort(order[n_held:])
    return train.iloc[fit].reset_index(drop=True), train.iloc[held].reset_index(drop=True)


def select_lr(make_model, tokenizer, train: pd.DataFrame, grid, *, frac: float, seed: int = 0,
              epochs: int = 1, **kw) -> tuple[float, dict]:
    """The learning rate of ``grid`` whose fine-tuning on the fit part of ``train`` scores the highest
    MCC on its held-out part (ties: the first in the grid); dev is never touched.

    ``make_model()`` returns a fresh copy of the pretrained model. Returns (lr, {lr: held-out MCC})."""
    if not grid:
        raise ValueError("the learning-rate grid is empty")
    fit, held = holdout_split(train, frac, seed)
    scores = {}
    for lr in grid:
        out = finetune(make_model(), tokenizer, fit, held, seed=seed, epochs=epochs, lr=lr, **kw)
        scores[float(lr)] = matthews(held.label, out["pred"])
    best = max(scores, key=lambda lr: (scores[lr], -list(scores).index(lr)))
    return best, scores


def seed_mean_gap(y, preds_a, preds_b, *, n_boot: int = 2000, seed: int = 0,
                  level: float = 0.95) -> tuple[float, float, float]:
    """(mean MCC of a - mean MCC of b, low, high): each model's MCC x 100 averaged over its seeds'
    predictions, with a percentile bootstrap over sentences, one resample shared by both models and
    all seeds (the comparison is paired)."""
    y = np.asarray(y, dtype=int)
    A = np.atleast_2d(np.asarray(preds_a, dtype=int))
    B = np.atleast_2d(np.asarray(preds_b, dtype=int))
    if A.shape[1] != len(y) or B.shape[1] != len(y):
        raise ValueError(f"every prediction vector needs {len(y)} entries, got {A.shape[1]} and {B.shape[1]}")

    def gap(i):
        return np.mean([matthews(y[i], a[i]) for a in A]) - np.mean([matthews(y[i], b[i]) for b in B])

    rng = np.random.default_rng(seed)
    boot = np.array([gap(rng.integers(0, len(y), len(y))) for _ in range(n_boot)])
    a = (1 - level) / 2
    return float(gap(np.arange(len(y)))), float(np.quantile(boot, a)), float(np.quantile(boot, 1 - a))


def measure(y, preds: dict, *, protot: str, llama: str, n_boot: int = 2000, seed: int = 0,
            baselines: dict | None = None, config: dict | None = None, evidence: dict | None = None):
    """``protot/glue-cola`` as a :class:`compendium.claims.Measurement`.

    ``preds``: {model name: list of dev prediction vectors, one per seed}; ``protot`` and ``llama``
    name the two compared models. values: ``cola_gap_to_llama`` (seed-mean MCC x 100, ProtoT minus
    LLaMA) and each model's seed-mean score (``protot_cola``, ``llama_cola``), each with its 95%
    bootstrap interval over dev sentences (``_ci_low``/``_ci_high``), and ``n_dev``."""
    from compendium import claims

    for name in (protot, llama):
        if name not in preds or not len(preds[name]):
            raise ValueError(f"no predictions for {name!r}; have {sorted(preds)}")
    y = np.asarray(y, dtype=int)
    none = [np.zeros(len(y), dtype=int)]          # a constant predictor: MCC 0, so the gap is the score
    gap = seed_mean_gap(y, preds[protot], preds[llama], n_boot=n_boot, seed=seed)
    p_score = seed_mean_gap(y, preds[protot], none, n_boot=n_boot, seed=seed)
    l_score = seed_mean_gap(y, preds[llama], none, n_boot=n_boot, seed=seed)
    values = {"n_dev": int(len(y))}
    for key, (v, lo, hi) in (("cola_gap_to_llama", gap), ("protot_cola", p_score), ("llama_cola", l_score)):
        values.update({key: v, f"{key}_ci_low": lo, f"{key}_ci_high": hi})
    rows = [{"model": name, "seed": i, "mcc": matthews(y, p)} for name, ps in preds.items() for i, p in enumerate(ps)]
    ev = {"per_seed": {name: [round(matthews(y, p), 3) for p in ps] for name, ps in preds.items()},
          "baselines": {k: round(matthews(y, p), 3) for k, p in (baselines or {}).items()}, **(evidence or {})}
    return claims.Measurement(claim="protot/glue-cola", values=values, evidence=ev,
                              tables={"cola_scores": pd.DataFrame(rows)}, config=dict(config or {}))
