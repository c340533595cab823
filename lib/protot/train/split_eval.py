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
    compare_committed(names)          all of the above for committed models on the same blocks (a model
                                      not committed is kept in the list and skipped)
    score_committed(names, ids)       manifests and block NLLs of more committed models (e.g. other seeds)
    position_gaps(names, against, ids)  each model's loss minus another's per position bin, with intervals
    measure_ranking(nll, manifests)   claim protot/ppl-ranking: ProtoT's mean NLL gap to LLaMA, Mamba and
                                      DeltaNet over the same blocks, from final committed models at equal
                                      size and tokens, with intervals over blocks, or with seed_models over
                                      seed models and blocks (a gap to a model missing or not final: None)
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from compendium import stats
from protot.train import packing
from protot.train import tokenizer as tk

__all__ = ["SOURCE_GROUPS", "source_group", "block_sources", "stratified_blocks", "block_nll", "per_source",
           "gaps", "first_half_costs", "usage", "RANKED", "status_of", "Committed", "compare_committed",
           "score_committed", "position_gaps", "measure_ranking"]

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


# --- committed models on the same blocks, and the ranking of claim protot/ppl-ranking ---

#: the architectures the ranking compares, ProtoT first: each gap is ProtoT's NLL minus another's
RANKED = ("protot", "llama", "mamba", "deltanet")
NOT_COMMITTED = "not committed"


def status_of(manifest: dict | None) -> str:
    """A committed model's status as its MANIFEST says ("final", "in-progress"); "not committed"
    for None (no models/<name>)."""
    return NOT_COMMITTED if manifest is None else str(manifest.get("status", "unknown"))


@dataclass
class Committed:
    """Committed models evaluated on the same blocks (:func:`compare_committed`)."""
    manifests: dict[str, dict | None]    # every model asked for, in order; None: not committed
    ids: np.ndarray                       # the validation blocks evaluated (sorted block ids)
    groups: np.ndarray                    # the source group of each of them
    nll: dict[str, np.ndarray]            # per committed model: the mean NLL of each block of ``ids``
    tables: dict[str, pd.DataFrame]       # per_source, gaps, wikitext2, wikitext2_gaps, context_use, usage
    seconds_per_block: dict[str, float]   # per committed model: wall time of block_nll per block


def _seeded_ids(n_total: int, n: int | None, rng: np.random.Generator) -> np.ndarray:
    """Sorted ids of ``n`` of ``n_total`` blocks drawn without replacement (every block for None or n >= n_total)."""
    if n is None or n >= n_total:
        return np.arange(n_total)
    return np.sort(rng.choice(n_total, size=n, replace=False))


def compare_committed(names: list[str], *, context: int = 256, blocks: int | None = None, seed: int = 0,
                      n_boot: int = 2000, wiki_blocks: int | None = None, context_blocks: int = 256,
                      usage_blocks: int = 64, device: str | torch.device = "cpu") -> Committed:
    """Committed models (``models/<name>``) on the same blocks. A name with no committed model is kept
    (manifest None) and skipped. For each committed one: the NLL of every validation block of a
    stratified sample of ``blocks`` (None: every block), its perplexity per source group with
    intervals ("per_source"), its WikiText-2 (test) perplexity on ``wiki_blocks`` seeded blocks
    ("wikitext2"; None: every block), its first-half costs on ``context_blocks`` seeded validation
    blocks ("context_use") and, for a ProtoT, prototype usage per layer on ``usage_blocks`` ("usage");
    "gaps" and "wikitext2_gaps": the paired gap of the first name minus each later one (per source
    group, and on WikiText-2), whatever their status. Each row names the model, its architecture and
    status (a gap row: the model it is against and that one's status)."""
    from protot.train import pretrained

    have = set(pretrained.available())
    manifests = {n: pretrained.manifest(n) if n in have else None for n in names}
    stream = packing.token_stream("validation")
    groups = block_sources(context, stream=stream)
    ids = stratified_blocks(groups, len(groups) if blocks is None else blocks, seed=seed)
    wiki = packing.token_stream("wikitext2-test")
    rng = np.random.default_rng(seed)
    wiki_ids = _seeded_ids(packing.blocks(wiki, context), wiki_blocks, rng)
    ctx_ids = _seeded_ids(len(groups), context_blocks, rng)
    use_ids = _seeded_ids(len(groups), usage_blocks, rng)
    wiki_group = np.array(["wikitext2"] * len(wiki_ids))
    boot = {"n_boot": n_boot, "seed": seed}
    nll, wiki_nll, secs = {}, {}, {}
    tables = {k: [] for k in ("per_source", "gaps", "wikitext2", "wikitext2_gaps", "context_use", "usage")}
    for name, man in manifests.items():
        if man is None:
            continue
        label = {"model": name, "arch": man["arch"], "status": status_of(man)}
        m = pretrained.load(name, device=device).model
        start = time.perf_counter()
        nll[name] = block_nll(m, stream, ids, context)
        secs[name] = (time.perf_counter() - start) / len(ids)
        wiki_nll[name] = block_nll(m, wiki, wiki_ids, context)
        tables["per_source"].append(per_source(nll[name], groups[ids], **boot).assign(**label))
        tables["wikitext2"].append(per_source(wiki_nll[name], wiki_group, **boot).query("source == 'all'")
                                   .assign(source="wikitext2", **label))
        tables["context_use"].append(first_half_costs(m, packing.gather(stream, ctx_ids, context), **boot)
                                     .assign(**label))
        if getattr(m.config, "model_type", None) == "protot":
            tables["usage"].append(usage(m, packing.gather(stream, use_ids, context)).assign(**label))
    ref = names[0] if names else None
    for other in (n for n in nll if n != ref and ref in nll):
        pair = {"model": ref, "against": other, "against_status": status_of(manifests[other])}
        tables["gaps"].append(gaps(nll[ref], nll[other], groups[ids], **boot).assign(**pair))
        w = gaps(wiki_nll[ref], wiki_nll[other], wiki_group, **boot).query("source == 'all'")
        tables["wikitext2_gaps"].append(w.assign(source="wikitext2", **pair))
    out = {k: pd.concat(v, ignore_index=True) if v else pd.DataFrame() for k, v in tables.items()}
    return Committed(manifests, ids, groups[ids], nll, out, secs)


def score_committed(names: list[str], ids, *, context: int = 256, device: str | torch.device = "cpu",
                    skip: dict | None = None) -> tuple[dict[str, dict | None], dict[str, np.ndarray]]:
    """The manifests of ``names`` (None: not committed) and, for each committed one not in ``skip``
    (names already scored), the mean NLL of every validation block of ``ids`` (:func:`block_nll`)."""
    from protot.train import pretrained

    have = set(pretrained.available())
    manifests = {n: pretrained.manifest(n) if n in have else None for n in names}
    stream = packing.token_stream("validation")
    nll = {n: block_nll(pretrained.load(n, device=device).model, stream, ids, context)
           for n, m in manifests.items() if m is not None and n not in (skip or {})}
    return manifests, nll


#: positions (1-based, of the predicted token's context length) binned by powers of two: 1, 2-3, 4-7, ...
def _position_bins(n_pred: int) -> list[tuple[int, int]]:
    bins, lo = [], 1
    while lo <= n_pred:
        bins.append((lo, min(2 * lo - 1, n_pred)))
        lo *= 2
    return bins


@torch.no_grad()
def position_gaps(names: list[str], against: str, ids, *, context: int = 256, n_boot: int = 2000, seed: int = 0,
                  device: str | torch.device = "cpu", batch_size: int = 16) -> pd.DataFrame:
    """Per committed model of ``names``: its loss minus ``against``'s at each position bin (the predicted
    token's position 1, 2-3, 4-7, ..., context - 1), over the validation blocks ``ids``, with a paired
    bootstrap 95% interval over blocks. A model not committed is left out; ``against`` must be committed."""
    from protot.train import pretrained

    have = set(pretrained.available())
    if against not in have:
        raise ValueError(f"position_gaps: the reference model {against!r} is not committed")
    stream = packing.token_stream("validation")
    ids = np.asarray(ids)
    bins = _position_bins(context - 1)

    def binned(name):                                   # (blocks, bins) mean NLL of each block in each bin
        m = pretrained.load(name, device=device).model.eval()
        out = []
        for start in range(0, len(ids), batch_size):
            x = packing.gather(stream, ids[start:start + batch_size], context).to(device)
            logits = m(input_ids=x, use_cache=False).logits.float()
            nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                  reduction="none").view(x.shape[0], -1).double()
            out.append(torch.stack([nll[:, lo - 1:hi].mean(1) for lo, hi in bins], 1).cpu().numpy())
        return np.concatenate(out)

    ref = binned(against)
    rows = []
    for name in (n for n in names if n in have and n != against):
        mine = binned(name)
        for k, (lo, hi) in enumerate(bins):
            a, b = mine[:, k], ref[:, k]
            low, high = stats.paired_bootstrap_ci(a, b, n_boot=n_boot, seed=seed)
            rows.append({"model": name, "against": against, "first": lo, "last": hi, "blocks": len(ids),
                         "gap_nats": float((a - b).mean()), "gap_low": low, "gap_high": high})
    return pd.DataFrame(rows)


def _seed_members(manifests: dict[str, dict | None], seed_models: dict | None) -> dict[str, list[str]]:
    """{arch: [model names]} of the ranking: ``seed_models`` as registered, or, when None, every committed
    model under its architecture (one per architecture)."""
    if seed_models is None:
        committed = {n: m for n, m in manifests.items() if m is not None}
        arch = {n: m["arch"] for n, m in committed.items()}
        if len(set(arch.values())) < len(arch):
            raise ValueError(f"measure_ranking: one committed model per architecture, got {arch}")
        return {a: [n for n in committed if arch[n] == a] for a in RANKED}
    if unknown := sorted(set(seed_models) - set(RANKED)):
        raise ValueError(f"measure_ranking: seed_models names architectures {unknown}; known: {', '.join(RANKED)}")
    out = {a: list(seed_models.get(a) or []) for a in RANKED}
    for a, names in out.items():
        if len(set(names)) < len(names):
            raise ValueError(f"measure_ranking: seed_models[{a!r}] lists a model twice: {names}")
        if missing := [n for n in names if n not in manifests]:
            raise ValueError(f"measure_ranking: seed_models[{a!r}] names {missing}, which the manifests do not list")
        if wrong := [n for n in names if manifests[n] is not None and manifests[n]["arch"] != a]:
            raise ValueError(f"measure_ranking: seed_models[{a!r}] holds {wrong} of another architecture")
    return out


def _seed_pair_rows(nll, ref_names, names, groups, boot) -> list[dict]:
    """One row per (ProtoT model, other model): the gap over all blocks with its paired block interval."""
    rows = []
    for r in ref_names:
        for o in names:
            row = gaps(nll[r], nll[o], groups, **boot).query("source == 'all'").iloc[0]
            rows.append({"model": r, "against": o, "gap_nats": float(row.gap_nats), "gap_low": float(row.gap_low),
                         "gap_high": float(row.gap_high)})
    return rows


def measure_ranking(nll: dict[str, np.ndarray], manifests: dict[str, dict | None], groups, unigram: float, *,
                    seed_models: dict[str, list[str]] | None = None, n_boot: int = 2000, seed: int = 0,
                    tables: dict | None = None, evidence: dict | None = None, config: dict | None = None,
                    note: str = ""):
    """Claim protot/ppl-ranking from committed models' block losses over the same validation blocks.

    ``nll``: {name: (blocks,) mean NLL of each block}, every committed model measured; ``groups``: the
    blocks' source groups; ``manifests``: {name: MANIFEST, or None when not committed}, every model of
    the protocol; ``seed_models``: {arch: [names]}, each architecture's models that differ only in the
    training seed (None: every committed model is its architecture's only one; committed models of
    ``manifests`` outside ``seed_models`` are ablations, measured but not ranked). Values:

    - ``nll_gap_<a>`` (a = llama, mamba, deltanet): the mean over blocks of (the mean NLL of ProtoT's seed
      models) minus (that of a's), nats per token, with ``_ci_low`` / ``_ci_high`` its 95% interval from a
      two-level bootstrap over seed models and blocks (:func:`compendium.stats.two_level_gap_ci`; with one
      seed model each, exactly the paired bootstrap over blocks); None (not measured) when a seed model
      of either is missing or not final;
    - ``models_final``: every seed model of the four architectures is committed and final, and
      :func:`protot.train.evaluate.equal_budget` accepts them (the seed may differ);
    - ``worst_ppl_over_unigram``: the largest perplexity over the blocks, exp(mean NLL), of the
      measured seed models, over the unigram perplexity ``unigram``;
    - ``blocks``: the number of blocks; with ``seed_models``, ``seed_models_<arch>``: how many each has.
    Tables: ``ranking_gaps`` (per source, between the first seed models), ``seed_pair_gaps`` (every
    ProtoT seed model against every other seed model, with the block interval) and ``seed_spread`` (per
    architecture: the range and standard deviation of those per-pair gaps).
    """
    from compendium import stats as cstats
    from compendium.claims import Measurement
    from protot.train.evaluate import equal_budget

    groups = np.asarray(groups)
    committed = {n: m for n, m in manifests.items() if m is not None}
    if not nll:
        raise ValueError("measure_ranking: no committed model was measured")
    if unknown := [n for n in nll if n not in committed]:
        raise ValueError(f"measure_ranking: losses of {unknown}, which the manifests do not list as committed")
    if bad := {n: len(v) for n, v in nll.items() if len(v) != len(groups)}:
        raise ValueError(f"measure_ranking: block losses must cover the {len(groups)} blocks, got {bad}")
    if not unigram > 0:
        raise ValueError(f"measure_ranking: the unigram perplexity must be positive, got {unigram}")
    members = _seed_members(manifests, seed_models)
    why, complete = [], {}
    for a in RANKED:
        names = members[a]
        not_final = [f"{n} is {status_of(manifests[n])}" for n in names if status_of(manifests[n]) != "final"]
        if not names:
            why.append(f"{a}: no final model committed")
        elif not_final:
            why.append(f"{a}: no final model ({', '.join(not_final)})" if len(names) == 1
                       else f"{a}: not every seed model is final ({', '.join(not_final)})")
        else:
            if unmeasured := [n for n in names if n not in nll]:
                raise ValueError(f"measure_ranking: final model(s) {unmeasured} were not measured")
            complete[a] = names
    finals = [n for a in RANKED for n in complete.get(a, [])]
    if len(finals) >= 2:
        why += equal_budget({n: committed[n] for n in finals}, free=("seed",) if seed_models is not None else ())[1]
    values, gap_tables, ratio, pair_rows, spread = {}, [], {}, [], []
    boot = {"n_boot": n_boot, "seed": seed}
    ref = complete.get(RANKED[0])
    for a in RANKED[1:]:
        others = complete.get(a)
        keys = (f"nll_gap_{a}", f"nll_gap_{a}_ci_low", f"nll_gap_{a}_ci_high")
        if ref is None or others is None:
            values.update(dict.fromkeys(keys))
            continue
        P = np.stack([nll[n] for n in ref])
        A = np.stack([nll[n] for n in others])
        point = float((P.mean(0) - A.mean(0)).mean())
        values.update(zip(keys, (point, *cstats.two_level_gap_ci(P, A, **boot))))
        ratio[a] = math.exp(point)
        gap_tables.append(gaps(nll[ref[0]], nll[others[0]], groups, **boot).assign(model=ref[0], against=others[0]))
        rows = _seed_pair_rows(nll, ref, others, groups, boot)
        pair_rows += [dict(r, arch=a) for r in rows]
        g = np.array([r["gap_nats"] for r in rows])
        spread.append({"arch": a, "protot_seed_models": len(ref), "seed_models": len(others), "pairs": len(g),
                       "gap_min": float(g.min()), "gap_max": float(g.max()),
                       "gap_sd": float(g.std(ddof=1)) if len(g) > 1 else None})
    ranked = [n for a in RANKED for n in members[a] if n in nll]
    ppl = {n: math.exp(float(np.mean(v))) for n, v in nll.items()}
    worst = max(ppl[n] for n in ranked) if ranked else max(ppl.values())
    values.update(models_final=not why, worst_ppl_over_unigram=worst / unigram, blocks=len(groups))
    if seed_models is not None:
        values.update({f"seed_models_{a}": len(members[a]) for a in RANKED})
    shown = "; ".join(
        f"{a} {values[f'nll_gap_{a}']:+.4f} [{values[f'nll_gap_{a}_ci_low']:+.4f}, {values[f'nll_gap_{a}_ci_high']:+.4f}]"
        if values[f"nll_gap_{a}"] is not None else f"{a} not measured" for a in RANKED[1:])
    table = dict(tables or {})
    if gap_tables:
        table["ranking_gaps"] = pd.concat(gap_tables, ignore_index=True)
    if seed_models is not None:
        table["seed_pair_gaps"] = pd.DataFrame(pair_rows)
        table["seed_spread"] = pd.DataFrame(spread)
    over = ("paired bootstrap interval over" if seed_models is None
            else "interval from a two-level bootstrap over seed models (" +
                 ", ".join(f"{a} {len(members[a])}" for a in RANKED) + ") and")
    extra = {} if seed_models is None else {"seed models": members,
                                            "ablations (measured, not ranked)": sorted(set(nll) - set(ranked))}
    return Measurement(
        "protot/ppl-ranking", values=values,
        evidence={"models": {n: status_of(m) for n, m in manifests.items()},
                  "not final or not at equal budget": why, "ppl over the blocks": ppl, "unigram_ppl": unigram,
                  "ppl ratio ProtoT / other": ratio,
                  "blocks per source": {str(g): int(c) for g, c in zip(*np.unique(groups, return_counts=True))},
                  **extra, **(evidence or {})},
        tables=table, config=dict(config or {}),
        note=(f"mean NLL gap per token, ProtoT minus each model (nats; 95% {over} "
              f"{len(groups)} validation blocks): {shown}" + (f"; {note}" if note else "")))
