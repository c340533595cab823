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

Sentences are right-padded in a batch; a causal model's states at real tokens do not depend on the
padding after them, and the head reads the last real token.
"""
from __future__ import annotations

import csv
import math

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from compendium import paths

__all__ = ["FILES", "load", "matthews", "mcc_interval", "majority_baseline", "bow_baseline", "encode",
           "finetune"]

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


def _features(model, x: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    out = model(input_ids=x, use_cache=False, output_hidden_states=True)
    h = out.hidden_states[-1]                                          # (B, T, d): the last block's output
    h = model.norm(h) if hasattr(model, "norm") else h                 # the final norm, as the LM head sees it
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
        order = rng.permutation(len(x))
        for s in range(0, len(order), batch_size):
            b = torch.from_numpy(order[s:s + batch_size])
            T = int(last[b].max()) + 1
            loss = F.cross_entropy(head(_features(model, x[b, :T], last[b])), y[b])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss))
            step += 1
            if max_steps is not None and step >= max_steps:
                break
        if max_steps is not None and step >= max_steps:
            break
    model.eval()
    xd, ld = encode(tokenizer, dev.sentence.tolist(), bos, max_len)
    preds = []
    with torch.no_grad():
        for s in range(0, len(xd), 128):
            T = int(ld[s:s + 128].max()) + 1
            preds.append(head(_features(model, xd[s:s + 128, :T], ld[s:s + 128])).argmax(-1))
    return {"pred": torch.cat(preds).numpy().astype(int), "steps": step,
            "train_loss": float(np.mean(losses[-20:])) if losses else float("nan"), "seed": seed}
