"""Greater-Than (Hanna et al. 2023, arXiv 2305.00586) for ACC++: prompts, the year metric, tracing, roles.

The task: "The {noun} lasted from the year {XX}{YY} to the year {XX}" -- a model that has learned
the task puts its probability on end years YY' > YY. Tokenizers write years in one of two ways:

* ``"pairs"`` (GPT-2, Pythia): " 17" then "32"; the next token after the prompt *is* the two-digit
  year, so the distribution over YY' is one softmax over the 100 tokens "00" ... "99";
* ``"digits"`` (LLaMA-family, SmolLM2, Gemma): " ", "1", "7", "3", "2"; the end year takes two
  steps, and its exact distribution is P(YY' = 10 a + b) = P(a | prompt) * P(b | prompt, a).

The metric is Hanna et al.'s probability difference: P(YY' > YY) - P(YY' <= YY), with raw
probabilities (mass the model puts on other tokens counts for neither side).

Tracing needs one answer position. Pairs: the last position, correct = the tokens of years above
YY, wrong = the others. Digits: the comparison is made where the units digit is predicted, with
the tens digit of the start year given ("... to the year 173" after "1732"), correct = units digits
above YY's, wrong = the others. :meth:`accpp.trace.Tracer.trace` then traces the mean logit of the
correct set minus that of the wrong set. Only prompts whose YY has a units digit of 0..8 have a
non-empty correct set at the units position; :func:`gt_prompts` draws those.

The claim's measurement from these pieces (seed shares, knock-out table, intervals) is in
:mod:`accpp.greater_than_claim`.
"""
from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass, field

import networkx as nx
import torch

from accpp.datasets import check_filler, load_templates
from accpp.seeding import TokenSet
from accpp.trace import Circuit, Tracer

__all__ = ["YearTokenization", "GTPrompt", "year_mode", "digit_ids", "pair_ids", "make_prompt", "gt_prompts",
           "year_distribution", "prob_diff", "mean_by_offset", "units_prob_diff", "trace_target", "trace_gt", "year_heads",
           "seed_shares", "attention_to_year", "heads_ablated_at_last_position",
           "units_prob_diff_ablated", "units_prob_diff_knockouts", "split_half", "head_dla", "top_heads",
           "parse_head", "knockout_comparison"]

CENTURIES = tuple(range(11, 18))  # 1100s ... 1700s, as in Hanna et al.
YY_RANGE = (2, 98)  # start years XX02 ... XX98


class YearTokenization(ValueError):
    """The tokenizer writes years in a way this module does not handle."""


def _pieces(tokenizer, text: str) -> list[str]:
    return [tokenizer.decode([i]) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]


def year_mode(tokenizer) -> str:
    """``"digits"`` or ``"pairs"``, read from how the tokenizer splits " 1732"; anything else raises."""
    pieces = [p for p in _pieces(tokenizer, " 1732") if p.strip()]
    if [p.strip() for p in pieces] == ["1", "7", "3", "2"]:
        return "digits"
    if [p.strip() for p in pieces] == ["17", "32"]:
        return "pairs"
    raise YearTokenization(f"the tokenizer splits ' 1732' into {pieces!r}; Greater-Than needs single digits "
                           "or two-digit pieces")


def _single(tokenizer, text: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise YearTokenization(f"{text!r} is {len(ids)} tokens for this tokenizer, not one")
    return int(ids[0])


def digit_ids(tokenizer) -> list[int]:
    """Token ids of "0" ... "9" (each must be one token)."""
    return [_single(tokenizer, str(d)) for d in range(10)]


def pair_ids(tokenizer) -> list[int]:
    """Token ids of "00" ... "99" (each must be one token)."""
    return [_single(tokenizer, f"{y:02d}") for y in range(100)]


@dataclass(frozen=True)
class GTPrompt:
    noun: str
    century: int  # XX
    yy: int  # YY of the start year
    text: str  # ends with "to the year XX"
    input_ids: tuple[int, ...]
    mode: str  # "digits" or "pairs"
    pos: dict = field(hash=False, compare=False)  # "yy": positions of the start year's YY tokens, "end"
    family: str = "paper"  # the template family (accpp.families.GT_FAMILIES)
    # whether a token of the correct answer set at the traced position (:func:`trace_target`) occurs
    # in the traced input: a head could then copy an answer from the prompt
    answer_in_prompt: bool = False

    def ids(self) -> torch.Tensor:
        return torch.tensor(self.input_ids)


def _ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text)["input_ids"])  # with the model's special tokens (Gemma's <bos>)


def make_prompt(tokenizer, noun: str, century: int, yy: int, mode: str | None = None, template: str | None = None,
                family: str = "paper") -> GTPrompt:
    """One prompt; checks that the prompt's tokens followed by YY's are the tokens of the full text.

    ``template`` (default: the paper's, "The {noun} lasted from the year {XX}{YY} to the year {XX}")
    holds {noun}, {XX}{YY} once and ends with "{XX}"; a template that begins with {noun} writes the
    noun capitalised there (the start of the sentence).
    """
    if not 0 <= yy <= 99 or not 10 <= century <= 99:
        raise ValueError(f"century {century} and yy {yy} must be two-digit numbers")
    check_filler(noun, "noun")
    mode = mode or year_mode(tokenizer)
    template = template or load_templates()["greater_than_template"]
    if template.count("{noun}") != 1 or template.count("{XX}{YY}") != 1 or not template.endswith(" {XX}"):
        raise ValueError(f"Greater-Than template {template!r} must hold {{noun}} and {{XX}}{{YY}} once and end "
                         "with ' {XX}' (the end year's century, after which the model writes YY)")
    if template.startswith("{noun}"):
        noun = noun[:1].upper() + noun[1:]
    text = template.format(noun=noun, XX=century, YY=f"{yy:02d}")
    ids = _ids(tokenizer, text)
    full = _ids(tokenizer, text + f"{yy:02d}")
    if mode == "digits":
        digits = digit_ids(tokenizer)
        nxt = [digits[yy // 10], digits[yy % 10]]
    else:
        nxt = [pair_ids(tokenizer)[yy]]
    if full != ids + nxt:
        raise YearTokenization(f"{text!r}: the end year does not continue the prompt's tokens "
                               f"({_pieces(tokenizer, text + f'{yy:02d}')[-4:]!r})")
    # the start year's YY tokens: the first occurrence of the year's pieces in the prompt
    start = _ids(tokenizer, template.split("{YY}")[0].format(noun=noun, XX=century) + f"{yy:02d}")
    n_yy = 2 if mode == "digits" else 1
    yy_pos = list(range(len(start) - n_yy, len(start)))
    if ids[: len(start)] != start:
        raise YearTokenization(f"{text!r}: the start year's tokens are not a prefix of the prompt's")
    if mode == "pairs":
        traced, correct = ids, pair_ids(tokenizer)[yy + 1:]
    else:
        digits = digit_ids(tokenizer)
        traced, correct = ids + [digits[yy // 10]], digits[yy % 10 + 1:]
    return GTPrompt(noun, century, yy, text, tuple(ids), mode, {"yy": yy_pos, "end": len(ids) - 1}, family,
                    answer_in_prompt=bool(set(correct) & set(traced)))


def gt_prompts(tokenizer, n: int = 256, seed: int = 0, nouns: list[str] | None = None, centuries=CENTURIES,
               templates: tuple[str, ...] | None = None, family: str = "paper") -> list[GTPrompt]:
    """``n`` seeded prompts; YY drawn from 02 ... 98 with a units digit of 0 ... 8 (see the module doc).
    ``templates``: a family's templates (one drawn per prompt after the other draws); None: the paper's
    (the same prompts as before families existed, for a given seed)."""
    mode = year_mode(tokenizer)
    nouns = nouns or load_templates()["greater_than_nouns"]
    years = [y for y in range(YY_RANGE[0], YY_RANGE[1] + 1) if y % 10 != 9]
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        noun, century, yy = rng.choice(nouns), rng.choice(list(centuries)), rng.choice(years)
        t = rng.choice(templates) if templates else None
        out.append(make_prompt(tokenizer, noun, century, yy, mode, template=t, family=family))
    return out


def _with_cache(model, ids: torch.Tensor):
    """Run ``ids`` (T,) once keeping the key/value cache: (output, the output's cache key) or (output, None).

    transformers >= 5 calls the cache ``cache``; 4.x called it ``past_key_values``; a model that returns
    neither gets None and the callers fall back to full forward passes.
    """
    out = model(ids[None], use_cache=True)
    key = next((k for k in ("cache", "past_key_values") if k in out.keys() and out[k] is not None), None)
    return out, key


@torch.no_grad()
def year_distribution(model, tokenizer, prompts: list[GTPrompt], progress: bool = False,
                      use_cache: bool = True) -> torch.Tensor:
    """(n, 100) probabilities of the end year's YY' = 0 ... 99 after each prompt (raw, not renormalised).

    Digit tokenizers: P(10a + b) = P(a | prompt) P(b | prompt, a). With ``use_cache`` the prompt is run
    once and its key/value cache is repeated for the ten tens digits (one token each); without it the
    ten continuations are run in full (the same numbers, ten times the work; also the fallback for models
    that return no cache).
    """
    from tqdm.auto import tqdm

    device = next(model.parameters()).device
    out = torch.zeros(len(prompts), 100, dtype=torch.float64)
    if not prompts:
        return out
    digits = torch.tensor(digit_ids(tokenizer)) if prompts[0].mode == "digits" else None
    pairs = torch.tensor(pair_ids(tokenizer)) if prompts[0].mode == "pairs" else None
    for i, p in enumerate(tqdm(prompts, desc="year distribution", disable=not progress)):
        ids = p.ids().to(device)
        if p.mode == "pairs":
            logits = model(ids[None])["logits"][0, -1].double()
            out[i] = torch.softmax(logits, -1)[pairs].cpu()
            continue
        first, key = _with_cache(model, ids) if use_cache else (None, None)
        if key is not None:
            p_tens = torch.softmax(first["logits"][0, -1].double(), -1)[digits].cpu()
            cache = first[key]
            cache.batch_repeat_interleave(10)
            last = model(digits[:, None].to(device), use_cache=True, **{key: cache})["logits"][:, -1]
        else:  # one batch: the prompt followed by each tens digit
            batch = torch.cat([ids[None].expand(10, -1), digits[:, None].to(device)], 1)
            logits = model(batch)["logits"]
            p_tens = torch.softmax(logits[0, -2].double(), -1)[digits].cpu()
            last = logits[:, -1]
        p_units = torch.softmax(last.double(), -1)[:, digits].cpu()  # (10 tens, 10 units)
        out[i] = (p_tens[:, None] * p_units).reshape(100)
    return out


def prob_diff(dist: torch.Tensor, yy) -> torch.Tensor:
    """P(YY' > YY) - P(YY' <= YY) per prompt; ``dist`` (n, 100), ``yy`` (n,)."""
    yy = torch.as_tensor(yy)
    above = torch.arange(100)[None, :] > yy[:, None]
    return (dist * above).sum(1) - (dist * ~above).sum(1)


def mean_by_offset(dist: torch.Tensor, yy) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The mean probability of each end year relative to the start year: for every offset
    o = YY' - YY from -99 to 99, the mean of P(YY' = YY + o) over the prompts for which YY + o is
    a year 00-99. Returns (offsets, means, counts), all of length 199; ``counts`` is how many
    prompts reach each offset, and an offset no prompt reaches has count 0 and mean NaN (there is
    nothing to average, and no empty mean is taken)."""
    dist = torch.as_tensor(dist, dtype=torch.float64)
    yy = torch.as_tensor(yy, dtype=torch.long)
    if dist.ndim != 2 or dist.shape[1] != 100 or yy.shape != (dist.shape[0],):
        raise ValueError(f"dist must be (n, 100) and yy (n,); got {tuple(dist.shape)} and {tuple(yy.shape)}")
    if len(yy) and (int(yy.min()) < 0 or int(yy.max()) > 99):
        raise ValueError(f"start years YY are 0..99; got {int(yy.min())}..{int(yy.max())}")
    offsets = torch.arange(-99, 100)
    end = yy[:, None] + offsets[None, :]                      # (n, 199): YY + o per prompt
    reached = (end >= 0) & (end < 100)
    probs = dist.gather(1, end.clamp(0, 99)) * reached        # P(YY' = YY + o) where it is a year, else 0
    counts = reached.sum(0)
    means = torch.full((len(offsets),), float("nan"), dtype=torch.float64)
    some = counts > 0
    means[some] = probs.sum(0)[some] / counts[some]
    return offsets, means, counts


@torch.no_grad()
def units_prob_diff(model, tokenizer, prompts: list[GTPrompt]) -> torch.Tensor:
    """At the traced position (digits: the start year's tens digit given), P(unit > YY's) - P(unit <= YY's)."""
    out = []
    device = next(model.parameters()).device
    for p in prompts:
        ids, correct, wrong = trace_target(tokenizer, p)
        probs = torch.softmax(model(ids[None].to(device))["logits"][0, -1].double(), -1).cpu()
        out.append(float(probs[correct].sum() - probs[wrong].sum()))
    return torch.tensor(out, dtype=torch.float64)


def trace_target(tokenizer, p: GTPrompt) -> tuple[torch.Tensor, list[int], list[int]]:
    """(input ids to trace, correct token ids, wrong token ids) at the answer position (see the module doc)."""
    if p.mode == "pairs":
        ids = pair_ids(tokenizer)
        return p.ids(), ids[p.yy + 1:], ids[: p.yy + 1]
    digits = digit_ids(tokenizer)
    units = p.yy % 10
    if units == 9:
        raise ValueError(f"YY={p.yy:02d}: no units digit is above 9, nothing to trace at the units position")
    return torch.cat([p.ids(), torch.tensor([digits[p.yy // 10]])]), digits[units + 1:], digits[: units + 1]


def trace_gt(tracer: Tracer, p: GTPrompt) -> Circuit:
    """ACC++ circuit of the year comparison; positions and the prompt go into ``meta``."""
    ids, correct, wrong = trace_target(tracer.tokenizer, p)
    if tracer.config.seeding == "prob":  # the support: the later years' tokens, no counterfactual
        c = tracer.trace(ids, TokenSet(correct))
    else:
        c = tracer.trace(ids, TokenSet(correct), TokenSet(wrong))
    c.meta.update(text=p.text, noun=p.noun, century=p.century, yy=p.yy, mode=p.mode,
                  pos={"yy": list(p.pos["yy"]), "end": len(ids) - 1})
    return c


def year_heads(g: nx.MultiDiGraph, pos: dict) -> list[str]:
    """Heads "A{layer}.{head}" with a firing in the circuit from the answer position to the start year's YY."""
    found = {f"A{d['layer']}.{d['head']}" for _, d in g.nodes(data=True)
             if d["kind"] == "head" and d["dest"] == pos["end"] and d["src"] in pos["yy"]}
    return sorted(found, key=lambda h: tuple(int(x) for x in h[1:].split(".")))


def seed_shares(c: Circuit, late_from: int) -> dict:
    """How the seeds (direct contributions to the metric) split between heads, MLPs and the rest.

    Shares are of the summed positive seed attribution; ``late_mlp_of_mlp`` is the part of the MLP
    seeds' attribution from layers >= ``late_from``.
    """
    g = c.graph
    rows = [(g.nodes[u]["kind"], g.nodes[u]["layer"], d["attribution"])
            for u, _, d in g.edges(data=True) if d["side"] == "seed"]
    pos_total = sum(a for _, _, a in rows if a > 0)
    share = {k: sum(a for kind, _, a in rows if kind == k and a > 0) / pos_total if pos_total > 0 else 0.0
             for k in ("head", "mlp", "emb")}
    mlp = [(layer, a) for kind, layer, a in rows if kind == "mlp" and a > 0]
    mlp_total = sum(a for _, a in mlp)
    late = sum(a for layer, a in mlp if layer >= late_from)
    return dict(head_share=share["head"], mlp_share=share["mlp"], emb_share=share["emb"], n_seeds=len(rows),
                mlp_layers=sorted({layer for layer, _ in mlp}),
                late_mlp_of_mlp=late / mlp_total if mlp_total > 0 else float("nan"))


@torch.no_grad()
def attention_to_year(model, tokenizer, prompts: list[GTPrompt]) -> torch.Tensor:
    """(layers, heads) mean attention from the answer position to the start year's YY tokens."""
    total = None
    device = next(model.parameters()).device
    for p in prompts:
        ids, _, _ = trace_target(tokenizer, p)
        att = model(ids[None].to(device), output_attentions=True).attentions
        a = torch.stack([x[0, :, -1, p.pos["yy"]].sum(-1).double().cpu() for x in att])
        total = a if total is None else total + a
    return total / len(prompts)


_OUT_PROJ = ("o_proj", "c_proj", "dense")  # LLaMA / Gemma, GPT-2, GPT-NeoX


def _out_proj(tracer: Tracer, layer: int):
    from accpp.arch import get_path

    attn = getattr(get_path(tracer.model, tracer.arch.layers_path)[layer], tracer.arch.attn_name)
    for name in _OUT_PROJ:
        if hasattr(attn, name):
            return getattr(attn, name)
    raise ValueError(f"layer {layer}'s attention module has none of {_OUT_PROJ}: cannot ablate its heads")


@contextmanager
def heads_ablated_at_last_position(tracer: Tracer, heads: list[tuple[int, int]]):
    """Within the block, the given (layer, head)s write nothing at the last position.

    Each head's slice of the attention output projection's input is set to zero at the last position
    only, so the head still writes at every other position (which later heads read from).
    """
    dh, by_layer = tracer.arch.d_head, {}
    for layer, head in heads:
        if not 0 <= int(head) < tracer.arch.n_heads:
            raise ValueError(f"head {head} of layer {layer}: the model has {tracer.arch.n_heads} heads per layer")
        by_layer.setdefault(int(layer), []).append(int(head))

    def make(hs):
        def pre(module, args):
            x = args[0].clone()
            for h in hs:
                x[:, -1, h * dh:(h + 1) * dh] = 0
            return (x,) + tuple(args[1:])
        return pre

    hooks = []
    try:
        for layer, hs in by_layer.items():
            hooks.append(_out_proj(tracer, layer).register_forward_pre_hook(make(hs)))
        yield
    finally:
        for h in hooks:
            h.remove()


@torch.no_grad()
def units_prob_diff_ablated(tracer: Tracer, prompts: list[GTPrompt], heads: list[tuple[int, int]]) -> torch.Tensor:
    """:func:`units_prob_diff` with the given heads' outputs zeroed at the answer position."""
    with heads_ablated_at_last_position(tracer, heads):
        return units_prob_diff(tracer.model, tracer.tokenizer, prompts)


@torch.no_grad()
def units_prob_diff_knockouts(tracer: Tracer, prompts: list[GTPrompt], head_sets: list[list[tuple[int, int]]],
                              progress: bool = False) -> torch.Tensor:
    """(len(head_sets), len(prompts)): :func:`units_prob_diff_ablated` for every head set at once.

    The knock-outs act at the last position only, so every row shares the prompt's earlier positions:
    they are run once, their key/value cache is repeated for the head sets, and the last token runs as a
    batch with one head set zeroed per row. Models without a cache take :func:`units_prob_diff_ablated`.
    """
    from tqdm.auto import tqdm

    arch, dh, n = tracer.arch, tracer.arch.d_head, len(head_sets)
    masks = {}  # layer -> (n, H * dh) multipliers
    for row, heads in enumerate(head_sets):
        for layer, head in heads:
            if not 0 <= int(head) < arch.n_heads:
                raise ValueError(f"head {head} of layer {layer}: the model has {arch.n_heads} heads per layer")
            m = masks.setdefault(int(layer), torch.ones(n, arch.n_heads * dh))
            m[row, int(head) * dh:(int(head) + 1) * dh] = 0
    out = torch.zeros(n, len(prompts), dtype=torch.float64)
    device = next(tracer.model.parameters()).device
    for j, p in enumerate(tqdm(prompts, desc="knock-outs", disable=not progress)):
        ids, correct, wrong = trace_target(tracer.tokenizer, p)
        first, key = _with_cache(tracer.model, ids[:-1].to(device))
        if key is None:
            for row, heads in enumerate(head_sets):
                out[row, j] = units_prob_diff_ablated(tracer, [p], heads)[0]
            continue
        cache = first[key]
        cache.batch_repeat_interleave(n)

        def make(mask):
            def pre(module, args):
                x = args[0] * mask.to(args[0].dtype).to(args[0].device)[:, None, :]
                return (x,) + tuple(args[1:])
            return pre

        hooks = [_out_proj(tracer, layer).register_forward_pre_hook(make(m)) for layer, m in masks.items()]
        try:
            logits = tracer.model(ids[-1:].to(device)[None].expand(n, 1), use_cache=True, **{key: cache})["logits"]
        finally:
            for h in hooks:
                h.remove()
        probs = torch.softmax(logits[:, -1].double(), -1).cpu()
        out[:, j] = probs[:, correct].sum(1) - probs[:, wrong].sum(1)
    return out


# ---------------------------------------------------------------- held-out head selection

def split_half(items: list, seed: int) -> tuple[list, list]:
    """A seeded random split into a selection half and a test half (the test half gets the extra item)."""
    if len(items) < 2:
        raise ValueError(f"need at least 2 items to split, got {len(items)}")
    idx = list(range(len(items)))
    random.Random(seed).shuffle(idx)
    k = len(items) // 2
    return [items[i] for i in sorted(idx[:k])], [items[i] for i in sorted(idx[k:])]


@torch.no_grad()
def head_dla(tracer: Tracer, prompts: list[GTPrompt]) -> torch.Tensor:
    """(layers, heads): each head's direct contribution to the traced metric (mean logit of the
    later units digits minus the others, :func:`trace_target`) at the answer position, through the
    final norm's scale at that position (direct logit attribution), mean over ``prompts``."""
    from accpp.decompose import KIND_HEAD
    from accpp.trace import answer_direction

    if not prompts:
        raise ValueError("head_dla: no prompts")
    arch = tracer.arch
    L, H = arch.n_layers, arch.n_heads
    total = torch.zeros(L, H, dtype=torch.float64)
    for p in prompts:
        ids, correct, wrong = trace_target(tracer.tokenizer, p)
        dec = tracer.decompose(ids)
        pos = dec.T - 1
        vecs, labels = dec.components(L, pos)
        direction, _ = answer_direction(arch, dec, TokenSet(correct), TokenSet(wrong), pos)
        proj = vecs @ direction
        head = labels[:, 0] == KIND_HEAD
        total.index_put_((labels[head, 1], labels[head, 2]), proj[head], accumulate=True)
    return total / len(prompts)


def top_heads(score: torch.Tensor, k: int, exclude=()) -> list[tuple[int, int]]:
    """The ``k`` (layer, head)s with the highest ``score`` (layers, heads), ties by (layer, head)."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    L, H = score.shape
    skip = {tuple(map(int, h)) for h in exclude}
    cand = sorted(((float(score[l, h]), l, h) for l in range(L) for h in range(H) if (l, h) not in skip),
                  key=lambda x: (-x[0], x[1], x[2]))
    return [(l, h) for _, l, h in cand[:k]]


def parse_head(h: str) -> tuple[int, int]:
    """"A{layer}.{head}" -> (layer, head)."""
    if not h.startswith("A") or h.count(".") != 1:
        raise ValueError(f"not a head label: {h!r}")
    layer, head = h[1:].split(".")
    return int(layer), int(head)


def knockout_comparison(tracer: Tracer, prompts: list[GTPrompt], named: dict[str, list[tuple[int, int]]],
                        n_random: int, seed: int, progress: bool = False) -> dict:
    """Knock out each named head set (and ``n_random`` random sets of each set's size, drawn from the
    heads outside it, seeded) at the answer position of ``prompts``; drop = mean over prompts of the
    units prob_diff before minus after.

    Returns {"base": mean prob_diff, "methods": {name: {k, drop, p, n_extreme, random_drops}}} with
    n_extreme = #{random drops >= drop} and p = (1 + n_extreme) / (n_random + 1)
    (:func:`compendium.stats.permutation_p`); a name with an empty head set gets drop 0, p 1, n_extreme 0.
    """
    from compendium.stats import permutation_p

    arch = tracer.arch
    every = [(l, h) for l in range(arch.n_layers) for h in range(arch.n_heads)]
    rng = random.Random(seed)
    sets, spans = [[]], {}
    for name, heads in named.items():
        heads = [tuple(map(int, h)) for h in heads]
        others = [h for h in every if h not in set(heads)]
        start = len(sets)
        sets.append(heads)
        sets += [rng.sample(others, len(heads)) for _ in range(n_random)] if heads else []
        spans[name] = (start, len(sets))
    knocked = units_prob_diff_knockouts(tracer, prompts, sets, progress=progress)
    base = knocked[0]
    out = {"base": float(base.mean()), "methods": {}}
    for name, (a, b) in spans.items():
        k = len(sets[a])
        if k == 0:
            out["methods"][name] = dict(k=0, drop=0.0, p=1.0, n_extreme=0, random_drops=[])
            continue
        drop = float((base - knocked[a]).mean())
        rand = (base[None] - knocked[a + 1:b]).mean(1)
        n_extreme = int((rand >= drop).sum())
        out["methods"][name] = dict(k=k, drop=drop, p=permutation_p(n_extreme, n_random), n_extreme=n_extreme,
                                    random_drops=rand.tolist())
    return out
