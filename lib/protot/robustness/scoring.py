"""Running a causal LM on both texts of every pair and comparing the next-token distributions after
the whole text (the final position: after the sentence's final punctuation mark, which both texts
share). The authors' released pairs are whole sentences and their tables one number per pair, so
we compare the one position both texts have in common without aligning tokens."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import torch

from protot.robustness.metrics import pair_metrics


def encode(tokenizer, texts: Sequence[str], bos: int | None) -> list[list[int]]:
    """Token ids of each text (no special tokens), with ``bos`` prepended when not None."""
    pre = [] if bos is None else [int(bos)]
    return [pre + list(tokenizer.encode(t, add_special_tokens=False)) for t in texts]


def _length_batches(seqs: Sequence[Sequence[int]], batch_size: int) -> list[list[int]]:
    by_len: dict[int, list[int]] = {}
    for i, s in enumerate(seqs):
        by_len.setdefault(len(s), []).append(i)
    return [idx[j:j + batch_size] for _, idx in sorted(by_len.items()) for j in range(0, len(idx), batch_size)]


@torch.no_grad()
def final_logits(model, seqs: Sequence[Sequence[int]], *, batch_size: int = 64, device="cpu") -> torch.Tensor:
    """(N, V) float32 logits at the last position of every token list (batched by equal length, no
    padding, so no mask can leak)."""
    if any(len(s) == 0 for s in seqs):
        raise ValueError("an empty token sequence cannot be scored")
    out: torch.Tensor | None = None
    for idx in _length_batches(seqs, batch_size):
        ids = torch.tensor([seqs[i] for i in idx], dtype=torch.long, device=device)
        logits = model(ids, use_cache=False, logits_to_keep=1).logits[:, -1].float().cpu()   # (B, V)
        if out is None:
            out = torch.full((len(seqs), logits.shape[-1]), float("nan"))
        out[idx] = logits
    if out is None or torch.isnan(out).any():
        raise RuntimeError("some sequences were not scored")
    return out


def _common_suffix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(reversed(a), reversed(b)):
        if x != y:
            break
        n += 1
    return n


def score_pairs(model, tokenizer, pairs: pd.DataFrame, *, k: int = 10, batch_size: int = 64, device="cpu",
                bos: int | None = None, chunk: int = 1024) -> pd.DataFrame:
    """The four metrics of :func:`protot.robustness.metrics.pair_metrics` for every row of ``pairs``
    (columns ``original``, ``edited``), at the final position; plus ``tokens_orig``, ``tokens_edit``
    and ``tokens_after`` (tokens the two texts share at the end: the edit's distance from it).
    Same index as ``pairs``."""
    for col in ("original", "edited"):
        if col not in pairs:
            raise ValueError(f"pairs need a column {col!r}; got {list(pairs.columns)}")
    model.eval()
    orig = encode(tokenizer, pairs["original"].tolist(), bos)
    edit = encode(tokenizer, pairs["edited"].tolist(), bos)
    cols: dict[str, list] = {c: [] for c in ("js", "overlap", "spearman", "top1")}
    for s in range(0, len(orig), chunk):
        o, e = orig[s:s + chunk], edit[s:s + chunk]
        m = pair_metrics(final_logits(model, o, batch_size=batch_size, device=device),
                         final_logits(model, e, batch_size=batch_size, device=device), k)
        for c in cols:
            cols[c] += m[c].tolist()
    out = pd.DataFrame(cols, index=pairs.index)
    out["tokens_orig"] = [len(x) for x in orig]
    out["tokens_edit"] = [len(x) for x in edit]
    out["tokens_after"] = [_common_suffix(a, b) for a, b in zip(orig, edit)]
    return out.astype({"tokens_orig": np.int64, "tokens_edit": np.int64, "tokens_after": np.int64})
