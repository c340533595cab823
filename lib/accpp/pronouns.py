"""Gendered pronouns for ACC++: prompts, the pronoun metric, tracing, and where the circuits read the name.

The task. After "So {name} is a really great friend, isn't" a model that resolves the tag question
predicts the pronoun of the name's gender: " he" for a male name, " she" for a female one. The metric
is the logit difference logit(correct pronoun) - logit(other pronoun) at the last position, and a
prompt counts as solved when it is positive.

Source. The ACC++ paper (Franco, Tassis, Rohr, Crovella, arXiv 2602.13483) takes the task from its
predecessor ACC (Franco & Crovella, "Pinpointing Attention-Causal Communication in Language Models",
NeurIPS 2025; papers/accpp/citation.bib), whose code builds it in ``gp_dataset.py`` of the authors'
repository github.com/gaabrielfranco/pinpointing-attention-causal-communication: five templates ("So {name} is
a really great friend, isn't", "... such a good cook ...", "... a very good athlete ...", "... a
really nice person ...", "... such a funny person ..."), ten male and ten female names, all 100
template x name prompts, answers " he" / " she". That file says it is modified from Mathwin and
Corlouer's "Identifying a Preliminary Circuit for Predicting Gendered Pronouns in GPT-2 Small"
(Apart Research mechanistic-interpretability hackathon, January 2023).

Where ours differ (all ours, written for this project):

* templates: five of our own in the same shape ("So {name} is <a description of a person>, isn't"),
  with other descriptions (:data:`TEMPLATES`); within one tokenizer they share one token layout, so
  the name and every other word sit at the same position in every prompt. The claims measure the task
  over several template families (:mod:`accpp.families`: the authors' five templates, these, and
  others of ours with the name inside a sentence or first in one);
* names: our own lists of 12 male and 12 female English first names (:data:`MALE_NAMES`,
  :data:`FEMALE_NAMES`), kept only where " name" is ONE token for the tokenizer in use (all 24 are,
  for SmolLM2-135M and Gemma-3-270M); a name given explicitly that is not one token is an error;
* the beginning-of-sequence token is the tokenizer's own choice (Gemma adds <bos>, SmolLM2 adds
  nothing), as everywhere in this project; the authors' code prepended BOS for Gemma only, too.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import networkx as nx
import numpy as np
import torch

from accpp.datasets import MultiTokenName, _token_span, check_filler, name_token
from accpp.trace import Circuit, Tracer

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["TEMPLATES", "MALE_NAMES", "FEMALE_NAMES", "PRONOUNS", "GENDERS", "PronounPrompt", "PronounMetrics",
           "pronoun_id", "usable_names", "make_prompt", "pronoun_prompts", "balanced_sample", "family_sample",
           "evaluate", "trace_pronoun", "head_seeds", "reached_sources", "circuit_name_paths", "name_path_table",
           "name_path_summary", "size_row", "measure_behaviour", "measure_size_ratio", "measure_name_paths"]

TEMPLATES: tuple[str, ...] = (
    "So {name} is a very kind neighbour, isn't",
    "So {name} is such a hard worker, isn't",
    "So {name} is a truly gifted singer, isn't",
    "So {name} is a really good teacher, isn't",
    "So {name} is such a patient listener, isn't",
)
MALE_NAMES: tuple[str, ...] = ("James", "Michael", "Robert", "William", "Thomas", "Peter", "Steve", "Brian",
                               "Kevin", "Daniel", "George", "Frank")
FEMALE_NAMES: tuple[str, ...] = ("Emma", "Jessica", "Laura", "Kate", "Rachel", "Linda", "Jennifer", "Emily",
                                 "Helen", "Jane", "Alice", "Nancy")
PRONOUNS = {"male": " he", "female": " she"}
GENDERS = tuple(PRONOUNS)


def pronoun_id(tokenizer, gender: str) -> int:
    """Token id of the gender's pronoun (" he" / " she"); it must be one token."""
    if gender not in PRONOUNS:
        raise ValueError(f"gender must be one of {GENDERS}, got {gender!r}")
    ids = tokenizer(PRONOUNS[gender], add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise MultiTokenName(f"the pronoun {PRONOUNS[gender]!r} is {len(ids)} tokens for this tokenizer; the "
                             "metric needs single-token pronouns")
    return int(ids[0])


def usable_names(tokenizer, names) -> list[str]:
    """The names that are one token with a leading space for ``tokenizer`` (order kept)."""
    out = []
    for n in names:
        try:
            name_token(tokenizer, n)
        except MultiTokenName:
            continue
        out.append(n)
    return out


@dataclass(frozen=True)
class PronounPrompt:
    text: str
    name: str
    gender: str  # "male" or "female"
    template: int  # index into the template list used
    correct_id: int  # the gender's pronoun
    wrong_id: int  # the other pronoun
    input_ids: tuple[int, ...]
    pos: dict = field(hash=False, compare=False)  # "name": the name's (last) token, "end": the last token
    family: str = "so"  # the template family (accpp.families)
    answer_in_prompt: bool = False  # the answer pronoun's token occurs verbatim in the prompt
    spans: dict = field(default_factory=dict, hash=False, compare=False)  # "name": [first, last + 1) tokens

    def ids(self) -> torch.Tensor:
        return torch.tensor(self.input_ids)


def make_prompt(tokenizer, template: int, name: str, gender: str, templates=TEMPLATES,
                family: str = "so") -> PronounPrompt:
    """One prompt: ``templates[template]`` with ``name``; the answer is ``gender``'s pronoun.

    The template holds "{name}" once, anywhere, and ends without a trailing space (the pronoun
    token brings its own). After a space the name must be ONE token (its " name" form); at the start
    of the prompt it is written without a space and may be several tokens: ``spans["name"]`` covers
    them and ``pos["name"]`` is the last. A name that merges with the text around it raises
    :class:`accpp.datasets.MultiTokenName`, naming the name, the template and the pieces.
    ``answer_in_prompt`` records whether the pronoun's token occurs in the prompt.
    """
    if not 0 <= template < len(templates):
        raise ValueError(f"template index {template} is outside 0..{len(templates) - 1}")
    t = templates[template]
    if t.count("{name}") != 1 or t.replace("{name}", "").count("{") or t.replace("{name}", "").count("}"):
        raise ValueError(f"template {t!r} must hold '{{name}}' exactly once and no other placeholder")
    if t != t.rstrip():
        raise ValueError(f"template {t!r} ends with whitespace; the pronoun token brings its own space")
    check_filler(name, "name")
    correct = pronoun_id(tokenizer, gender)
    wrong = pronoun_id(tokenizer, "female" if gender == "male" else "male")
    text = t.replace("{name}", name)
    start = t.index("{name}")
    try:
        enc = tokenizer(text, return_offsets_mapping=True)
    except (NotImplementedError, TypeError, ValueError) as err:
        raise TypeError(f"pronoun prompts need a fast tokenizer (character offsets); {type(tokenizer).__name__} "
                        f"gives none: {err}") from err
    ids, offsets = list(enc["input_ids"]), list(enc["offset_mapping"])
    end = start + len(name)
    span = _token_span(offsets, start, end, text)
    spaced = start > 0 and text[start - 1] == " "
    if spaced and span is not None and span[1] - span[0] != 1:
        name_token(tokenizer, name)  # raises, naming the pieces of " name"
    if span is None or (spaced and span[1] - span[0] != 1):
        pieces = [tokenizer.convert_ids_to_tokens(ids[i]) for i, (a, b) in enumerate(offsets) if a < end and b > start]
        raise MultiTokenName(f"name {name!r} in {text!r} (template {template} ({family}): {t!r}) is {len(pieces)} "
                             f"tokens there ({pieces}); after a space the name must be one token, and it must not "
                             "merge with the text around it")
    return PronounPrompt(text, name, gender, template, correct, wrong, tuple(ids),
                         {"name": span[1] - 1, "end": len(ids) - 1}, family, correct in ids, {"name": span})


def pronoun_prompts(tokenizer, templates=TEMPLATES, male=MALE_NAMES, female=FEMALE_NAMES,
                    min_names: int = 8) -> list[PronounPrompt]:
    """Every template x usable name, male names first (as the authors' set).

    Names that are not one token are dropped; fewer than ``min_names`` left for a gender raises.
    """
    out = []
    for gender, names in (("male", male), ("female", female)):
        ok = usable_names(tokenizer, names)
        if len(ok) < min_names:
            raise ValueError(f"only {len(ok)} {gender} names are single tokens for this tokenizer ({ok}); "
                             f"need at least {min_names}")
        out += [make_prompt(tokenizer, t, n, gender, templates) for n in ok for t in range(len(templates))]
    return out


def balanced_sample(prompts: list[PronounPrompt], n: int, seed: int) -> list[PronounPrompt]:
    """``n`` prompts (seeded), half male and half female (the extra one male), spread over the templates:
    each gender's prompts are shuffled, then taken round-robin over templates."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    out = []
    for gender, k in (("male", (n + 1) // 2), ("female", n // 2)):
        by_t: dict[int, list] = {}
        for p in prompts:
            if p.gender == gender:
                by_t.setdefault(p.template, []).append(p)
        if sum(map(len, by_t.values())) < k:
            raise ValueError(f"asked for {k} {gender} prompts, only {sum(map(len, by_t.values()))} exist")
        for v in by_t.values():
            rng.shuffle(v)
        order = sorted(by_t)
        taken = 0
        while taken < k:
            for t in order:
                if by_t[t] and taken < k:
                    out.append(by_t[t].pop())
                    taken += 1
    return out


def family_sample(prompts: list[PronounPrompt], families, n_per_family: int, seed: int) -> list[PronounPrompt]:
    """``n_per_family`` prompts of each family in ``families`` (seeded; :func:`balanced_sample` within the
    family: half male and half female names, round-robin over its templates), in an order that spreads
    every prefix over the families and genders: first one prompt of each family, then a second of each,
    and so on, each family's own alternating male and female. So the first k * len(families) prompts
    hold k of each family (about half of each gender)."""
    families = list(families)
    if not families or len(set(families)) != len(families):
        raise ValueError(f"family_sample needs distinct families, got {families}")
    per = []
    for i, fam in enumerate(families):
        own = [p for p in prompts if p.family == fam]
        if len(own) < n_per_family:
            raise ValueError(f"family {fam!r}: asked for {n_per_family} prompts, only {len(own)} given")
        picked = balanced_sample(own, n_per_family, seed=seed + 7919 * i)
        male = [p for p in picked if p.gender == "male"]
        female = [p for p in picked if p.gender == "female"]
        per.append([p for pair in zip(male, female) for p in pair] + male[len(female):] + female[len(male):])
    return [fam[k] for k in range(n_per_family) for fam in per]


@dataclass(frozen=True)
class PronounMetrics:
    logit_diff: torch.Tensor  # (n,) logit(correct pronoun) - logit(other) at the last position
    male: torch.Tensor  # (n,) bool
    family: tuple[str, ...] = ()  # the prompts' template families (empty: not recorded)

    @property
    def accuracy(self) -> float:
        return float((self.logit_diff > 0).double().mean())

    def summary(self) -> dict:
        ld, m = self.logit_diff, self.male
        return dict(logit_diff=float(ld.mean()), accuracy=self.accuracy, n=int(ld.numel()),
                    logit_diff_male=float(ld[m].mean()) if m.any() else float("nan"),
                    logit_diff_female=float(ld[~m].mean()) if (~m).any() else float("nan"))

    def by_family(self) -> dict[str, dict]:
        """{family: {n, logit_diff, accuracy}} in the order the families first occur."""
        if len(self.family) != self.logit_diff.numel():
            raise ValueError("these metrics record no family per prompt (evaluate() records them)")
        out = {}
        for fam in dict.fromkeys(self.family):
            ld = self.logit_diff[torch.tensor([f == fam for f in self.family])]
            out[fam] = dict(n=int(ld.numel()), logit_diff=float(ld.mean()), accuracy=float((ld > 0).double().mean()))
        return out


@torch.no_grad()
def evaluate(model, prompts: list[PronounPrompt]) -> PronounMetrics:
    """Logit difference at the last position; prompts of equal length run batched, the logits of the
    last position only (:func:`accpp.datasets.last_logits`)."""
    if not prompts:
        raise ValueError("evaluate: no prompts")
    from accpp.datasets import last_logits

    ld = torch.empty(len(prompts), dtype=torch.float64)
    for idx, logits in last_logits(model, [p.input_ids for p in prompts]):  # (b, vocab): the last position only
        r = torch.arange(len(idx))
        c = torch.tensor([prompts[i].correct_id for i in idx])
        w = torch.tensor([prompts[i].wrong_id for i in idx])
        ld[idx] = logits[r, c] - logits[r, w]
    return PronounMetrics(ld, torch.tensor([p.gender == "male" for p in prompts]), tuple(p.family for p in prompts))


def trace_pronoun(tracer: Tracer, p: PronounPrompt) -> Circuit:
    """ACC++ circuit of logit(correct pronoun) - logit(other) at the last position ("prob" seeding: the
    correct pronoun's log-probability); the prompt goes into meta."""
    c = tracer.trace(p.ids(), p.correct_id, None if tracer.config.seeding == "prob" else p.wrong_id)
    c.meta.update(text=p.text, name=p.name, gender=p.gender, template=p.template, family=p.family, pos=dict(p.pos),
                  spans={k: list(v) for k, v in p.spans.items()})
    return c


def trace_many(tracer: Tracer, prompts, cache=None) -> list[Circuit]:
    """:func:`trace_pronoun` of every prompt, in order; ``cache`` (an :class:`accpp.item_cache.ItemCache`):
    each circuit kept as it is traced and read back by a resumed run (as :func:`accpp.ioi.trace_many`)."""
    if cache is None:
        return [trace_pronoun(tracer, p) for p in prompts]
    from accpp import item_cache

    base = item_cache.base_key(tracer, __name__)
    return [Circuit.from_json(cache.get("pronoun-circuits", base | item_cache.prompt_key(p),
                                        lambda p=p: trace_pronoun(tracer, p).to_json())) for p in prompts]


# ---------------------------------------------------------------- where the circuit reads the name

def head_seeds(g: nx.MultiDiGraph) -> list[tuple[str, float]]:
    """(node, attribution) of every head seed: a head's output at the answer position, split per source
    token, kept as a seed (an edge of side "seed" into the logits node)."""
    return [(u, float(d["attribution"])) for u, _, d in g.edges(data=True)
            if d["side"] == "seed" and g.nodes[u]["kind"] == "head"]


def reached_sources(g: nx.MultiDiGraph, node: str) -> set[int]:
    """Source positions of the head firings among ``node`` and its ancestors in the circuit (every
    component whose signal flows, through traced firings, into ``node``)."""
    out = set()
    for u in nx.ancestors(g, node) | {node}:
        d = g.nodes[u]
        if d["kind"] == "head":
            out.add(int(d["src"]))
    return out


def circuit_name_paths(c: Circuit) -> dict | None:
    """How one circuit's head seeds' positive attribution reaches its name, or None when the circuit has
    no head seed of positive attribution.

    A head seed reaches position p when its own firing or one of its ancestors is a head firing whose
    source is p (:func:`reached_sources`); it reaches the name when it reaches any token of the name's
    span (``meta["spans"]["name"]``, else the single position ``meta["pos"]["name"]``). With A_p = the
    positive attribution of the head seeds that reach p and A = that of all head seeds of the circuit:

    * ``name_path_share`` = A_name / A (``name_reach`` = A_name, ``head_seed_total`` = A);
    * ``position_shares`` = {p: A_p / A} for the other positions: all except 0 (the attention sink),
      the name's tokens and the answer (last) position;
    * ``name_path_margin`` = name_path_share - max(position_shares) (the share itself if there are none),
      ``top_other`` the position of that maximum (-1 if none);
    * ``direct_name_share``: the same as name_path_share with the seed's own source only (heads at the
      answer position reading the name directly).

    A name that starts at position 0 (a prompt-initial name without a beginning-of-sequence token) shares
    that position with the attention sink, so reads of the sink count as reads of the name there.
    """
    meta = c.meta
    end = len(c.tokens) - 1
    span = meta.get("spans", {}).get("name")
    a, b = (span[0], span[1]) if span else (meta["pos"]["name"], meta["pos"]["name"] + 1)
    if not 0 <= a < b <= end:
        raise ValueError(f"name span [{a}, {b}) does not lie before the answer position {end}")
    name = set(range(a, b))
    seeds = [(u, w) for u, w in head_seeds(c.graph) if w > 0]
    if not seeds:
        return None
    total = direct = 0.0
    reach: dict[int, float] = {}
    to_name = 0.0
    for u, w in seeds:
        total += w
        direct += w if int(c.graph.nodes[u]["src"]) in name else 0.0
        got = reached_sources(c.graph, u)
        to_name += w if got & name else 0.0
        for p in got:
            reach[p] = reach.get(p, 0.0) + w
    others = {p: reach.get(p, 0.0) / total for p in range(1, end) if p not in name}
    share = to_name / total
    top = max(others, key=lambda p: (others[p], -p)) if others else -1
    return dict(name_path_share=share, name_path_margin=share - (others[top] if others else 0.0),
                direct_name_share=direct / total, position_shares=others, top_other=top, name_reach=to_name,
                head_seed_total=total, name_span=[a, b])


def name_path_table(circuits: list[Circuit]):
    """One row per circuit with a head seed of positive attribution (:func:`circuit_name_paths`): the
    prompt's text, family, template and gender, ``name_path_share``, ``name_path_margin``,
    ``direct_name_share``, ``name_reach``, ``head_seed_total`` and the most-reached other token
    (``top_other`` position, ``top_other_token``, ``top_other_share``); circuits without one are left out."""
    import pandas as pd

    rows = []
    for c in circuits:
        r = circuit_name_paths(c)
        if r is None:
            continue
        top = r["top_other"]
        rows.append(dict(text=c.meta.get("text", ""), family=c.meta.get("family", ""),
                         template=c.meta.get("template", -1), gender=c.meta.get("gender", ""),
                         name_path_share=r["name_path_share"], name_path_margin=r["name_path_margin"],
                         direct_name_share=r["direct_name_share"], name_reach=r["name_reach"],
                         head_seed_total=r["head_seed_total"], top_other=top,
                         top_other_token=c.tokens[top] if top >= 0 else "",
                         top_other_share=r["position_shares"].get(top, 0.0)))
    cols = ["text", "family", "template", "gender", "name_path_share", "name_path_margin", "direct_name_share",
            "name_reach", "head_seed_total", "top_other", "top_other_token", "top_other_share"]
    return pd.DataFrame(rows, columns=cols)


# ---------------------------------------------------------------- measurements for the claims

def size_row(p: PronounPrompt, accpp: Circuit, acc: Circuit) -> dict:
    """One row of the ACC vs ACC++ size table; ``accpp_status`` labels an ACC++ circuit that is empty or
    has no expanded firing (:data:`accpp.graph.STATUSES`), whose node count is then not a circuit size."""
    return dict(text=p.text, family=p.family, template=p.template, gender=p.gender, accpp_status=accpp.status,
                accpp_nodes=accpp.graph.number_of_nodes(), acc_nodes=acc.graph.number_of_nodes(),
                accpp_firings=accpp.n_firings, acc_firings=acc.n_firings, acc_truncated=bool(acc.meta["truncated"]),
                ratio=acc.graph.number_of_nodes() / accpp.graph.number_of_nodes(),
                accpp_seconds=accpp.seconds, acc_seconds=acc.seconds)


def size_rows(tracer: Tracer, prompts, circuits, acc=None, cache=None) -> list[dict]:
    """:func:`size_row` of each prompt with its ACC++ circuit and its ACC circuit (``acc``, default
    :func:`accpp.acc.acc_trace`, traced here); ``cache`` (an :class:`accpp.item_cache.ItemCache`): each
    row kept as it is computed and read back by a resumed run."""
    if acc is None:
        from accpp.acc import acc_trace as acc
    one = lambda p, c: size_row(p, c, acc(tracer, p.ids(), p.correct_id, p.wrong_id))  # noqa: E731
    if cache is None:
        return [one(p, c) for p, c in zip(prompts, circuits)]
    from accpp import item_cache

    base = item_cache.base_key(tracer, __name__) | dict(acc=f"{acc.__module__}.{acc.__qualname__}")
    key = lambda p, c: base | dict(prompt=item_cache.prompt_key(p), circuit=item_cache.circuit_digest(c))  # noqa: E731
    return [cache.get("pronoun-acc-rows", key(p, c), lambda p=p, c=c: one(p, c)) for p, c in zip(prompts, circuits)]


def _per_model(d: dict, what: str) -> None:
    if not d:
        raise ValueError(f"{what}: no models")


def _mean_ci(x, n_boot: int, seed: int) -> tuple[float, float]:
    from compendium.stats import bootstrap_mean_ci

    return bootstrap_mean_ci(x, n_boot=n_boot, seed=seed)


def measure_behaviour(metrics: dict[str, PronounMetrics], config: dict | None = None, n_boot: int = 2000,
                      seed: int = 0):
    """Claim accpp/pronoun-behaviour: the smallest model mean logit difference and the smallest model
    accuracy, each with its percentile bootstrap interval over that model's prompts; per model and per
    template family (:meth:`PronounMetrics.by_family`, when recorded) as evidence."""
    from compendium.claims import Measurement
    import pandas as pd

    _per_model(metrics, "measure_behaviour")
    per = {m: x.summary() for m, x in metrics.items()}
    worst_ld = min(per, key=lambda m: per[m]["logit_diff"])
    worst_acc = min(per, key=lambda m: per[m]["accuracy"])
    ld_lo, ld_hi = _mean_ci(metrics[worst_ld].logit_diff.numpy(), n_boot, seed)
    acc_lo, acc_hi = _mean_ci((metrics[worst_acc].logit_diff > 0).double().numpy(), n_boot, seed)
    fams = {m: x.by_family() for m, x in metrics.items() if len(x.family) == x.logit_diff.numel()}
    table = pd.DataFrame([dict(model=m, family="all", **v) for m, v in per.items()]
                         + [dict(model=m, family=f, **v) for m, by in fams.items() for f, v in by.items()])
    return Measurement(
        claim="accpp/pronoun-behaviour",
        values=dict(logit_diff=per[worst_ld]["logit_diff"], logit_diff_ci_low=ld_lo, logit_diff_ci_high=ld_hi,
                    accuracy=per[worst_acc]["accuracy"], accuracy_ci_low=acc_lo, accuracy_ci_high=acc_hi,
                    n_models=len(per)),
        evidence=dict(per_model=per, per_family=fams,
                      min_family_accuracy=min((v["accuracy"] for by in fams.values() for v in by.values()),
                                              default=float("nan"))),
        tables={"06_gendered_pronoun_behaviour": table}, config=dict(config or {}),
        note="; ".join(f"{m}: mean logit diff {v['logit_diff']:.2f} (male {v['logit_diff_male']:.2f}, female "
                       f"{v['logit_diff_female']:.2f}), accuracy {v['accuracy']:.2f} on {v['n']} prompts"
                       + ("" if m not in fams else " (by family: " + ", ".join(
                           f"{f} {b['accuracy']:.2f}" for f, b in fams[m].items()) + ")")
                       for m, v in per.items()))


def _gm(x, n_boot: int, seed: int) -> tuple[float, float, float]:
    from compendium.stats import geometric_mean, geometric_mean_ci

    lo, hi = geometric_mean_ci(x, n_boot=n_boot, seed=seed)
    return geometric_mean(x), lo, hi


def measure_size_ratio(tables: dict[str, "pd.DataFrame"], accuracy: float, config: dict | None = None,
                       n_boot: int = 2000, seed: int = 0):
    """Claim accpp/pronoun-smaller-than-acc from per-model tables of :func:`size_row` rows: the geometric
    mean over prompts of ACC / ACC++ nodes pooled over models, and each model's own, each with its
    percentile bootstrap interval over prompts (``compendium.stats.geometric_mean_ci``); the smallest and
    the largest model geometric means (with their intervals) for the check's per-model conditions;
    per family (when the tables have a ``family`` column) as evidence, and (with an ``accpp_status``
    column) how many ACC++ circuits expanded no firing (``n_accpp_not_traced``) and the geometric mean
    without them (``size_ratio_traced_only``)."""
    from compendium.claims import Measurement
    from compendium.stats import geometric_mean
    import pandas as pd

    _per_model(tables, "measure_size_ratio")
    if any(len(t) == 0 for t in tables.values()):
        raise ValueError("measure_size_ratio: a model has no compared prompts")
    for m, t in tables.items():
        r = t["ratio"].to_numpy(dtype=float)
        if not (np.isfinite(r) & (r > 0)).all():
            raise ValueError(f"measure_size_ratio: {m} has ratios that are not finite and positive: "
                             f"{r[~(np.isfinite(r) & (r > 0))][:3].tolist()} (an ACC++ circuit with no nodes?)")
    allrows = pd.concat([t.assign(model=m) for m, t in tables.items()], ignore_index=True)
    ratio, lo, hi = _gm(allrows["ratio"], n_boot, seed)
    per = {m: _gm(t["ratio"], n_boot, seed) for m, t in tables.items()}
    low_m, high_m = min(per, key=lambda m: per[m][0]), max(per, key=lambda m: per[m][0])
    per_family = ({f: dict(zip(("size_ratio", "ci_low", "ci_high"), _gm(g["ratio"], n_boot, seed)), n=len(g))
                   for f, g in allrows.groupby("family", sort=False)} if "family" in allrows else {})
    direction = "below" if hi < 2 else "above" if lo > 10 else "within" if 2 <= lo and hi <= 10 else "straddles"
    traced = allrows["accpp_status"] == "traced" if "accpp_status" in allrows else None
    not_traced = dict(n_accpp_not_traced=int((~traced).sum()),
                      size_ratio_traced_only=(geometric_mean(allrows.loc[traced, "ratio"]) if traced.any()
                                              else float("nan"))) if traced is not None else {}
    return Measurement(
        claim="accpp/pronoun-smaller-than-acc",
        values=dict(size_ratio=ratio, size_ratio_ci_low=lo, size_ratio_ci_high=hi,
                    size_ratio_min_model=per[low_m][0], size_ratio_min_model_ci_low=per[low_m][1],
                    size_ratio_min_model_ci_high=per[low_m][2],
                    size_ratio_max_model=per[high_m][0], size_ratio_max_model_ci_low=per[high_m][1],
                    size_ratio_max_model_ci_high=per[high_m][2],
                    n_compared_min_model=min(len(t) for t in tables.values()),
                    acc_truncated=bool(allrows["acc_truncated"].any()), accuracy=float(accuracy)),
        evidence=dict(per_model={m: dict(size_ratio=v[0], ci_low=v[1], ci_high=v[2], n=len(tables[m]))
                                 for m, v in per.items()},
                      per_family=per_family, ratios=allrows["ratio"].round(3).tolist(), **not_traced,
                      arithmetic_mean_ratio=float(allrows["ratio"].mean()), direction=direction,
                      accpp_nodes_mean=float(allrows["accpp_nodes"].mean()),
                      acc_nodes_mean=float(allrows["acc_nodes"].mean())),
        tables={"06_gendered_pronoun_acc": allrows}, config=dict(config or {}) | dict(acc="authors' ACC (ACCConfig())"),
        note="geometric mean ACC / ACC++ node ratio: " + "; ".join(
            f"{m} {v[0]:.1f} (95% interval {v[1]:.1f}-{v[2]:.1f}) over {len(tables[m])} prompts" for m, v in per.items())
        + ("" if not per_family else "; by family: " + ", ".join(f"{f} {v['size_ratio']:.1f}"
                                                                  for f, v in per_family.items())))


def name_path_summary(t) -> dict:
    """Aggregates of :func:`name_path_table` rows: ``n`` circuits, the mean ``name_path_share``,
    ``name_path_margin`` and ``direct_name_share``, the share pooled by attribution
    (``pooled_name_path_share`` = sum of name_reach / sum of head_seed_total) and the three other tokens
    most often the most-reached one (``top_other_tokens``, "'token' xcount, ...")."""
    if len(t) == 0:
        raise ValueError("name_path_summary: no circuits")
    top = t.loc[t["top_other"] >= 0, "top_other_token"].value_counts().head(3)
    return dict(n=len(t), name_path_share=float(t["name_path_share"].mean()),
                name_path_margin=float(t["name_path_margin"].mean()),
                direct_name_share=float(t["direct_name_share"].mean()),
                pooled_name_path_share=float(t["name_reach"].sum() / t["head_seed_total"].sum()),
                top_other_tokens=", ".join(f"{k!r} x{v}" for k, v in top.items()))


def measure_name_paths(tables: dict[str, "pd.DataFrame"], accuracy: float, config: dict | None = None,
                       n_boot: int = 2000, seed: int = 0):
    """Claim accpp/pronoun-name-paths from per-model :func:`name_path_table` tables (one row per circuit
    with a head seed of positive attribution): per model, the mean over circuits of the per-circuit
    ``name_path_share`` and ``name_path_margin``, each with its percentile bootstrap interval over the
    circuits; the check reads the smallest model mean of each. Evidence: per model and per family the
    means, the attribution-weighted (pooled) share and the direct share."""
    from compendium.claims import Measurement
    import pandas as pd

    _per_model(tables, "measure_name_paths")
    if any(len(t) == 0 for t in tables.values()):
        raise ValueError("measure_name_paths: a model has no circuit with a head seed of positive attribution")
    summary = name_path_summary
    per = {}
    for m, t in tables.items():
        per[m] = summary(t)
        per[m]["share_ci"] = _mean_ci(t["name_path_share"].to_numpy(), n_boot, seed)
        per[m]["margin_ci"] = _mean_ci(t["name_path_margin"].to_numpy(), n_boot, seed)
    ws = min(per, key=lambda m: per[m]["name_path_share"])
    wm = min(per, key=lambda m: per[m]["name_path_margin"])
    allrows = pd.concat([t.assign(model=m) for m, t in tables.items()], ignore_index=True)
    per_family = {m: {f: summary(g) for f, g in t.groupby("family", sort=False)} for m, t in tables.items()}
    return Measurement(
        claim="accpp/pronoun-name-paths",
        values=dict(name_path_share=per[ws]["name_path_share"], name_path_share_ci_low=per[ws]["share_ci"][0],
                    name_path_share_ci_high=per[ws]["share_ci"][1],
                    name_path_margin=per[wm]["name_path_margin"], name_path_margin_ci_low=per[wm]["margin_ci"][0],
                    name_path_margin_ci_high=per[wm]["margin_ci"][1],
                    n_circuits_min_model=min(len(t) for t in tables.values()), accuracy=float(accuracy)),
        evidence=dict(per_model={m: {k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items()}
                                 for m, r in per.items()},
                      per_family=per_family, direct_name_share=min(r["direct_name_share"] for r in per.values()),
                      pooled_name_path_share=min(r["pooled_name_path_share"] for r in per.values())),
        tables={"06_gendered_pronoun_name_paths": allrows}, config=dict(config or {}),
        note="; ".join(f"{m}: the name is reached by a mean {r['name_path_share']:.2f} (95% interval "
                       f"{r['share_ci'][0]:.2f}-{r['share_ci'][1]:.2f}) of a circuit's head-seed attribution, margin "
                       f"{r['name_path_margin']:+.2f} ({r['margin_ci'][0]:+.2f} to {r['margin_ci'][1]:+.2f}) over its "
                       f"most-reached other token, over {r['n']} circuits (pooled by attribution "
                       f"{r['pooled_name_path_share']:.2f}; read directly from the answer position "
                       f"{r['direct_name_share']:.2f}); by family: "
                       + ", ".join(f"{f} {v['name_path_share']:.2f}" for f, v in per_family[m].items())
                       for m, r in per.items()))
