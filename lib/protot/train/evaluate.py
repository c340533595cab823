"""Perplexity on the validation split and on WikiText-2 (test), per token and per byte.

Perplexity is exp(mean next-token negative log-likelihood) over non-overlapping blocks of
``context`` tokens (the first token of each block is context only, as in the training loss).
Per-token perplexity depends on the tokenizer: ours is a 12k BPE, the paper's is not, so the
values are not comparable with the paper's. Bits per byte (mean NLL / ln 2 x tokens / UTF-8 bytes
of the evaluated stream) does not depend on the tokenizer and is reported beside it.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from protot.train import packing


@torch.no_grad()
def stream_nll(model, stream: np.ndarray, context: int, *, batch_size: int = 16,
               max_blocks: int | None = None, device: str | torch.device = "cpu",
               autocast_dtype: torch.dtype | None = None) -> tuple[float, int]:
    """(sum of next-token NLL in nats, number of predicted tokens) over the first blocks of ``stream``."""
    n = packing.blocks(stream, context)
    if max_blocks is not None:
        n = min(n, max_blocks)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, n, batch_size):
        ids = np.arange(start, min(n, start + batch_size))
        x = packing.gather(stream, ids, context).to(device)  # (B, T)
        with torch.autocast(device_type=torch.device(device).type, dtype=autocast_dtype,
                            enabled=autocast_dtype is not None):
            logits = model(input_ids=x).logits  # (B, T, V)
        nll = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1),
                              reduction="sum")
        total += float(nll)
        count += x[:, 1:].numel()
    model.train(was_training)
    return total, count


def perplexity(model, split: str, context: int, *, batch_size: int = 16, max_blocks: int | None = None,
               device: str | torch.device = "cpu", lang: str = "en", autocast_dtype=None) -> dict:
    """Perplexity of ``model`` on ``split`` ("validation", "wikitext2-test" or "train").

    Returns {"split", "loss", "ppl", "bits_per_byte", "tokens"}.
    """
    stream = packing.token_stream(split, lang)
    info = packing.stream_info(split, lang)
    total, count = stream_nll(model, stream, context, batch_size=batch_size, max_blocks=max_blocks,
                              device=device, autocast_dtype=autocast_dtype)
    loss = total / count
    bytes_per_token = info["bytes"] / info["tokens"]
    return {"split": split, "loss": loss, "ppl": math.exp(loss),
            "bits_per_byte": loss / math.log(2) / bytes_per_token, "tokens": count}


def evaluate_all(model, context: int, **kw) -> dict:
    """Validation and WikiText-2 perplexity: {"validation": {...}, "wikitext2-test": {...}}."""
    return {s: perplexity(model, s, context, **kw) for s in ("validation", "wikitext2-test")}


def unigram_perplexity(split: str = "validation", lang: str = "en") -> float:
    """Perplexity of the training split's add-one unigram distribution on ``split``: the floor a
    model must beat to have learned anything beyond token frequencies."""
    train = np.asarray(packing.token_stream("train", lang))
    target = np.asarray(packing.token_stream(split, lang))
    vocab = int(max(train.max(), target.max())) + 1
    counts = np.bincount(train, minlength=vocab).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(math.exp(-logp[target].mean()))
