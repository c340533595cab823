"""Continuations of fixed prompts, greedy or sampled, for any ``protot.models`` causal LM.

:func:`samples` decodes token by token with the model's cache (a recurrent state for ProtoT, a KV
cache for LLaMA), one prompt at a time, so a prompt's continuation does not depend on the other
prompts. Sampling draws from softmax(logits / temperature), optionally restricted to the ``top_k``
most likely tokens, with a ``torch.Generator`` seeded by ``seed + i`` for the i-th prompt: the same
arguments give the same continuations, on any thread count of the same machine.
"""
from __future__ import annotations

import pandas as pd
import torch


@torch.no_grad()
def continue_ids(model, prompt_ids: list[int], *, max_new_tokens: int, greedy: bool = True,
                 temperature: float = 1.0, top_k: int | None = None, generator: torch.Generator | None = None,
                 stop_id: int | None = None) -> list[int]:
    """The generated token ids after ``prompt_ids`` (at most ``max_new_tokens``; stops after ``stop_id``)."""
    dev = next(model.parameters()).device
    out = model(torch.tensor([prompt_ids], device=dev), use_cache=True, logits_to_keep=1)
    cache, new = out.cache, []
    for _ in range(max_new_tokens):
        logits = out.logits[0, -1].double().cpu()
        if greedy:
            nxt = int(logits.argmax())
        else:
            logits = logits / temperature
            if top_k is not None and top_k < logits.numel():
                kth = logits.topk(top_k).values[-1]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator))
        new.append(nxt)
        if stop_id is not None and nxt == stop_id:
            break
        out = model(torch.tensor([[nxt]], device=dev), cache=cache, use_cache=True)
        cache = out.cache
    return new


def samples(model, tokenizer, prompts: list[str], *, max_new_tokens: int = 40, greedy: bool = True,
            temperature: float = 1.0, top_k: int | None = None, seed: int = 0, stop_at_eos: bool = True,
            name: str = "") -> pd.DataFrame:
    """One row per prompt: model (``name``), prompt, mode ("greedy" or "sampled T=.., top-k=.."),
    continuation (decoded text), tokens (generated ids), n_tokens, seed (the generator's seed, None for greedy)."""
    if isinstance(prompts, str) or not prompts or not all(isinstance(p, str) and p for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty strings")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    if not greedy:
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {temperature}")
        if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k must be a positive integer or None, got {top_k!r}")
    eos = getattr(tokenizer, "eos_token_id", None) if stop_at_eos else None
    mode = "greedy" if greedy else f"sampled T={temperature:g}" + (f", top-k={top_k}" if top_k else "")
    was = model.training
    model.eval()
    rows = []
    try:
        for i, p in enumerate(prompts):
            ids = tokenizer.encode(p, add_special_tokens=False)
            if not ids:
                raise ValueError(f"prompt {p!r} encodes to no tokens")
            if max(ids) >= model.config.vocab_size:
                raise ValueError(f"prompt {p!r} holds token id {max(ids)} beyond the model's vocabulary")
            gen = None if greedy else torch.Generator().manual_seed(seed + i)
            new = continue_ids(model, ids, max_new_tokens=max_new_tokens, greedy=greedy, temperature=temperature,
                               top_k=top_k, generator=gen, stop_id=eos)
            rows.append({"model": name, "prompt": p, "mode": mode, "continuation": tokenizer.decode(new),
                         "tokens": new, "n_tokens": len(new), "seed": None if greedy else seed + i})
    finally:
        model.train(was)
    return pd.DataFrame(rows)
