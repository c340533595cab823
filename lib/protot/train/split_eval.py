"""Evaluation that represents the validation split: every block, per source, gaps with intervals.

The first blocks of the validation stream are all textbook text (its documents come in file order),
so a perplexity over "the first 512 blocks" describes one source. Here:

    block_sources(context)            the source group of every validation block (by the document that
                                      holds most of its tokens): textbooks, wikipedia, brown, news and
                                      speeches (ABC rural news, State of the Union and inaugural addresses)
    stratified_blocks(groups, n, seed) a seeded sample of about n blocks, proportional per group
                                      (every block when n >= the split)
    block_nll(model, stream, ids, context)   mean next-token NLL of each block (nats)
    per_source(nll, groups)           perplexity per group and overall, with block-bootstrap intervals
    gaps(nll_a, nll_b, groups)        the NLL gap a - b per group with a paired bootstrap interval over
                                      blocks, and the perplexity ratio exp(gap)
    first_half_costs(model, blocks)   the loss change on positions T/2 .. T-1 when the first half is
                                      replaced (another block's), shuffled (its own tokens permuted) or
                                      removed (the second half alone), each with a paired interval
    usage(model, blocks)              per layer of a ProtoT: effective number of prototypes (exp of the
                                      entropy of the mean write gate), the largest share, prototypes
                                      below a mass share of ``dead_share`` (dead)
    compare_committed(names)          all of the above for committed models on the same blocks
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from compendium import stats
from protot.train import packing
from protot.train import tokenizer as tk

__all__ = ["SOURCE_GROUPS", "source_group", "block_sources", "stratified_blocks", "block_nll", "per_source",
           "gaps", "first_half_costs", "usage"]

#: source field of a corpus document -> the group evaluations report it under
SOURCE_GROUPS = {"openstax": "textbooks", "wikipedia-vital-l4-summary": "wikipedia", "brown": "brown",
                 "abc": "news and speeches", "state_union": "news and speeches", "inaugural": "news and speeches"}


def source_group(source: str) -> str:
    if source not in SOURCE_GROUPS:
        raise ValueError(f"no source group for corpus source {source!r}; known: {', '.join(sorted(SOURCE_GROUPS))}")
    return SOURCE_GROUPS[source]


def _doc_of_tokens(stream: np.ndarray, eos: int, n_docs: int) -> np.ndarray:
    """Document index of every token of a stream of documents each followed by ``eos``."""
    ends = np.flatnonzero(np.asarray(stream) == eos)
    if len(ends) != n_docs:
        raise ValueError(f"the stream holds {len(ends)} end-of-text tokens for {n_docs} documents: it was not "
                         "built from these documents")
    return np.searchsorted(ends, np.arange(len(stream)), side="left")


def block_sources(context: int, lang: str = "en", *, stream: np.ndarray | None = None, sources=None) -> np.ndarray:
    """(blocks,) source group of every whole block of ``context`` tokens of the validation stream: the
    group of the document holding most of the block's tokens. ``stream`` / ``sources`` (one per
    document, in stream order) default to the validation split's."""
    from compendium import data

    if stream is None:
        stream = packing.token_stream("validation", lang)
    if sources is None:
        sources = data.load_corpus("validation", lang)["source"]
    groups = np.array([source_group(s) for s in sources])
    doc = _doc_of_tokens(stream, tk.eos_id(), len(groups))
    n = packing.blocks(stream, context)
    out = []
    for b in range(n):
        d = doc[b * context:(b + 1) * context]
        d = np.minimum(d, len(groups) - 1)
        out.append(groups[np.bincount(d).argmax()])
    return np.array(out)


def stratified_blocks(groups: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """Sorted block ids: every block when ``n`` >= len(groups), else a seeded sample with each group's
    share of the split (at least one block of each group)."""
    groups = np.asarray(groups)
    if n >= len(groups):
        return np.arange(len(groups))
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    rng = np.random.default_rng(seed)
    picked = []
    for g in sorted(set(groups)):
        ids = np.flatnonzero(groups == g)
        k = max(1, round(n * len(ids) / len(groups)))
        picked.append(rng.choice(ids, size=min(k, len(ids)), replace=False))
    return np.sort(np.concatenate(picked))


@torch.no_grad()
def block_nll(model, stream: np.ndarray, ids, context: int, *, batch_size: int = 16) -> np.ndarray:
    """(len(ids),) mean next-token NLL (nats) of each block (its first token is context only)."""
    was = model.training
    model.eval()
    device = next(model.parameters()).device
    out = []
    ids = np.asarray(ids)
    for start in range(0, len(ids), batch_size):
        x = packing.gather(stream, ids[start:start + batch_size], context).to(device)
        logits = model(input_ids=x, use_cache=False).logits.float()
        nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                              reduction="none").view(x.shape[0], -1)
        out.append(nll.mean(1).cpu().numpy())
    model.train(was)
    return np.concatenate(out) if out else np.zeros(0)


def _groups_with_all(groups: np.ndarray):
    yield "all", np.ones(len(groups), dtype=bool)
    for g in sorted(set(groups)):
        yield g, groups == g


def per_source(nll: np.ndarray, groups: np.ndarray, *, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per group and overall: blocks, mean NLL, perplexity exp(mean NLL) and its 95% interval from a
    bootstrap over blocks."""
    nll, groups = np.asarray(nll, dtype=float), np.asarray(groups)
    if len(nll) != len(groups):
        raise ValueError(f"{len(nll)} block losses for {len(groups)} groups")
    rows = []
    for g, sel in _groups_with_all(groups):
        lo, hi = stats.bootstrap_mean_ci(nll[sel], n_boot=n_boot, seed=seed)
        m = float(nll[sel].mean())
        rows.append({"source": g, "blocks": int(sel.sum()), "nll": m, "ppl": math.exp(m),
                     "ppl_low": math.exp(lo), "ppl_high": math.exp(hi)})
    return pd.DataFrame(rows)


def gaps(nll_a: np.ndarray, nll_b: np.ndarray, groups: np.ndarray, *, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per group and overall: the mean NLL gap a - b (nats per token) over the same blocks with a
    paired bootstrap 95% interval, and the perplexity ratio exp(gap) with its interval."""
    a, b, groups = np.asarray(nll_a, dtype=float), np.asarray(nll_b, dtype=float), np.asarray(groups)
    if not (len(a) == len(b) == len(groups)):
        raise ValueError(f"paired block losses must have one length: {len(a)}, {len(b)}, {len(groups)} groups")
    rows = []
    for g, sel in _groups_with_all(groups):
        lo, hi = stats.paired_bootstrap_ci(a[sel], b[sel], n_boot=n_boot, seed=seed)
        d = float((a[sel] - b[sel]).mean())
        rows.append({"source": g, "blocks": int(sel.sum()), "gap_nats": d, "gap_low": lo, "gap_high": hi,
                     "ppl_ratio": math.exp(d), "ppl_ratio_low": math.exp(lo), "ppl_ratio_high": math.exp(hi)})
    return pd.DataFrame(rows)


@torch.no_grad()
def _second_half_nll(model, x: torch.Tensor, keep: int, batch_size: int) -> np.ndarray:
    """Mean NLL of the last ``keep`` predicted tokens of each row of x (B, T)."""
    device = next(model.parameters()).device
    out = []
    for s in range(0, len(x), batch_size):
        xb = x[s:s + batch_size].to(device)
        logits = model(input_ids=xb, use_cache=False).logits.float()
        nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), xb[:, 1:].reshape(-1),
                              reduction="none").view(xb.shape[0], -1)
        out.append(nll[:, -keep:].mean(1).cpu().numpy())
    return np.concatenate(out)


def first_half_costs(model, blocks: torch.Tensor, *, seed: int = 0, batch_size: int = 16,
                     n_boot: int = 2000) -> pd.DataFrame:
    """The loss change on the predictions of tokens h+1 .. T-1 (h = T // 2) when the first half is
    - "replaced": by the first half of the next block (block i takes block i+1's, cyclically),
    - "shuffled": by its own tokens in a seeded random order,
    - "removed": dropped (the second half is scored alone, its first token as context only).
    Each row: mean cost (nats) over blocks, paired bootstrap 95% interval, blocks."""
    if blocks.dim() != 2 or blocks.shape[0] < 2 or blocks.shape[1] < 4:
        raise ValueError(f"blocks must be (B >= 2, T >= 4) token ids, got {tuple(blocks.shape)}")
    was = model.training
    model.eval()
    B, T = blocks.shape
    h = T // 2
    keep = T - h - 1                                                   # predictions of tokens h+1 .. T-1
    true = _second_half_nll(model, blocks, keep, batch_size)
    g = torch.Generator().manual_seed(seed)
    replaced = torch.cat([blocks.roll(-1, dims=0)[:, :h], blocks[:, h:]], 1)
    shuffled = torch.cat([torch.stack([row[:h][torch.randperm(h, generator=g)] for row in blocks]), blocks[:, h:]], 1)
    variants = {"replaced": _second_half_nll(model, replaced, keep, batch_size),
                "shuffled": _second_half_nll(model, shuffled, keep, batch_size),
                "removed": _second_half_nll(model, blocks[:, h:], keep, batch_size)}
    model.train(was)
    rows = []
    for name, nll in variants.items():
        lo, hi = stats.paired_bootstrap_ci(nll, true, n_boot=n_boot, seed=seed)
        rows.append({"first_half": name, "cost_nats": float((nll - true).mean()), "cost_low": lo, "cost_high": hi,
                     "blocks": int(B), "loss_true": float(true.mean())})
    return pd.DataFrame(rows)


def usage(model, blocks: torch.Tensor, *, dead_share: float = 1e-3, batch_size: int = 8) -> pd.DataFrame:
    """Per layer of a ProtoT (either variant), from its write gates over ``blocks`` (B, T): R, the
    effective number of prototypes (exp of the entropy of the shares), the largest share, and how
    many prototypes hold less than ``dead_share`` of the layer's write mass (dead). The shares are
    ``protot.usage.prototype_usage``'s."""
    from protot.concepts import collect_gates
    from protot.usage import prototype_usage

    if getattr(model.config, "model_type", None) != "protot":
        raise ValueError(f"usage needs a ProtoT model, got {type(model).__name__}")
    R = model.config.num_prototypes
    if not 0 < dead_share * R < 1:
        raise ValueError(f"dead_share must lie in (0, 1/R) = (0, {1 / R:.4g}), got {dead_share}")
    table = prototype_usage(collect_gates(model, blocks, batch_size=batch_size), rare=dead_share * R)
    table = table[table.gate == "write"]
    return pd.DataFrame({"layer": table.layer.to_numpy(), "prototypes": table.prototypes.to_numpy(),
                         "effective": table.effective.to_numpy(), "max_share": table.top_share.to_numpy(),
                         "dead": table.rarely_used.to_numpy(), "dead_share_floor": dead_share})


def compare_committed(names: list[str], *, context: int = 256, blocks: int | None = None, seed: int = 0,
                      usage_blocks: int = 64, context_blocks: int = 256) -> dict[str, pd.DataFrame]:
    """Committed models (``models/<name>``) on the same blocks: per-source perplexity of each
    ("per_source"), the paired gap of every later model against the first ("gaps"), WikiText-2
    ("wikitext2"), first-half costs ("context_use") and, for ProtoTs, prototype usage ("usage").
    ``blocks``: a stratified sample of that many validation blocks (None: every block)."""
    from protot.train import pretrained

    stream = packing.token_stream("validation")
    groups = block_sources(context, stream=stream)
    ids = stratified_blocks(groups, blocks if blocks is not None else len(groups), seed=seed)
    wiki = packing.token_stream("wikitext2-test")
    wiki_ids = np.arange(packing.blocks(wiki, context))
    rng = np.random.default_rng(seed)
    ctx_ids = np.sort(rng.choice(len(groups), size=min(context_blocks, len(groups)), replace=False))
    use_ids = np.sort(rng.choice(len(groups), size=min(usage_blocks, len(groups)), replace=False))
    nll, wiki_nll, tables = {}, {}, {"per_source": [], "gaps": [], "wikitext2": [], "context_use": [], "usage": []}
    for name in names:
        m = pretrained.load(name).model
        nll[name] = block_nll(m, stream, ids, context)
        wiki_nll[name] = block_nll(m, wiki, wiki_ids, context)
        tables["per_source"].append(per_source(nll[name], groups[ids], seed=seed).assign(model=name))
        tables["wikitext2"].append(per_source(wiki_nll[name], np.array(["wikitext2"] * len(wiki_ids)), seed=seed)
                                   .query("source == 'all'").assign(source="wikitext2", model=name))
        tables["context_use"].append(first_half_costs(m, packing.gather(stream, ctx_ids, context), seed=seed)
                                     .assign(model=name))
        if getattr(m.config, "model_type", None) == "protot":
            tables["usage"].append(usage(m, packing.gather(stream, use_ids, context)).assign(model=name))
    ref = names[0]
    for name in names[1:]:
        tables["gaps"].append(gaps(nll[name], nll[ref], groups[ids], seed=seed).assign(model=name, against=ref))
        w = gaps(wiki_nll[name], wiki_nll[ref], np.array(["wikitext2"] * len(wiki_ids)), seed=seed)
        tables["gaps"].append(w.query("source == 'all'").assign(source="wikitext2", model=name, against=ref))
    return {k: pd.concat(v, ignore_index=True) if v else pd.DataFrame() for k, v in tables.items()}
