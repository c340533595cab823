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
  the name and every other word sit at the same position in every prompt;
* names: our own lists of 12 male and 12 female English first names (:data:`MALE_NAMES`,
  :data:`FEMALE_NAMES`), kept only where " name" is ONE token for the tokenizer in use (all 24 are,
  for SmolLM2-135M and Gemma-3-270M); a name given explicitly that is not one token is an error;
* the beginning-of-sequence token is the tokenizer's own choice (Gemma adds <bos>, SmolLM2 adds
  nothing), as everywhere in this project; the authors' code prepended BOS for Gemma only, too.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import networkx as nx
import torch

from accpp.datasets import MultiTokenName, _token_span, check_filler, name_token
from accpp.trace import Circuit, Tracer

__all__ = ["TEMPLATES", "MALE_NAMES", "FEMALE_NAMES", "PRONOUNS", "GENDERS", "PronounPrompt", "PronounMetrics",
           "pronoun_id", "usable_names", "make_prompt", "pronoun_prompts", "balanced_sample", "evaluate",
           "trace_pronoun", "head_seeds", "reached_sources", "name_paths", "size_row", "measure_behaviour",
           "measure_size_ratio", "measure_name_paths"]

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


@dataclass(frozen=True)
class PronounMetrics:
    logit_diff: torch.Tensor  # (n,) logit(correct pronoun) - logit(other) at the last position
    male: torch.Tensor  # (n,) bool

    @property
    def accuracy(self) -> float:
        return float((self.logit_diff > 0).double().mean())

    def summary(self) -> dict:
        ld, m = self.logit_diff, self.male
        return dict(logit_diff=float(ld.mean()), accuracy=self.accuracy, n=int(ld.numel()),
                    logit_diff_male=float(ld[m].mean()) if m.any() else float("nan"),
                    logit_diff_female=float(ld[~m].mean()) if (~m).any() else float("nan"))


@torch.no_grad()
def evaluate(model, prompts: list[PronounPrompt]) -> PronounMetrics:
    """Logit difference at the last position; prompts of equal length run as one batch."""
    if not prompts:
        raise ValueError("evaluate: no prompts")
    device = next(model.parameters()).device
    ld = torch.empty(len(prompts), dtype=torch.float64)
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p.input_ids), []).append(i)
    for idx in by_len.values():
        ids = torch.tensor([prompts[i].input_ids for i in idx], device=device)
        logits = model(ids).logits[:, -1].double().cpu()  # (b, vocab)
        r = torch.arange(len(idx))
        c = torch.tensor([prompts[i].correct_id for i in idx])
        w = torch.tensor([prompts[i].wrong_id for i in idx])
        ld[idx] = logits[r, c] - logits[r, w]
    return PronounMetrics(ld, torch.tensor([p.gender == "male" for p in prompts]))


def trace_pronoun(tracer: Tracer, p: PronounPrompt) -> Circuit:
    """ACC++ circuit of logit(correct pronoun) - logit(other) at the last position ("prob" seeding: the
    correct pronoun's log-probability); the prompt goes into meta."""
    c = tracer.trace(p.ids(), p.correct_id, None if tracer.config.seeding == "prob" else p.wrong_id)
    c.meta.update(text=p.text, name=p.name, gender=p.gender, template=p.template, pos=dict(p.pos))
    return c


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


def name_paths(circuits: list[Circuit]) -> dict:
    """How the head seeds' positive attribution reaches the name token, pooled over ``circuits``.

    A head seed reaches position p when its own firing or one of its ancestors is a head firing whose
    source is p (:func:`reached_sources`). With A_p = the positive attribution of the head seeds that
    reach p and A = that of all head seeds, pooled over the circuits:

    * ``name_path_share`` = A_name / A;
    * ``position_shares`` = {p: A_p / A} for the other positions (all except 0, the name and the answer);
    * ``name_path_margin`` = name_path_share - max(position_shares) (the share itself if there are none);
    * ``direct_name_share``: the same with the seed's own source only (heads at the answer position
      reading the name directly).

    The circuits must share one token layout (same length, name at the same position); circuits with
    no head seed of positive attribution are skipped (``n_circuits`` counts the others).
    """
    layouts = {(len(c.tokens), c.meta["pos"]["name"]) for c in circuits}
    if len(layouts) > 1:
        raise ValueError(f"the circuits have different token layouts (length, name position): {sorted(layouts)}; "
                         "pool circuits of one layout")
    total = direct = 0.0
    reach: dict[int, float] = {}
    used = 0
    name = end = None
    for c in circuits:
        name, end = c.meta["pos"]["name"], len(c.tokens) - 1
        seeds = [(u, a) for u, a in head_seeds(c.graph) if a > 0]
        if not seeds:
            continue
        used += 1
        for u, a in seeds:
            total += a
            direct += a if int(c.graph.nodes[u]["src"]) == name else 0.0
            for p in reached_sources(c.graph, u):
                reach[p] = reach.get(p, 0.0) + a
    if used == 0:
        return dict(name_path_share=float("nan"), name_path_margin=float("nan"), direct_name_share=float("nan"),
                    position_shares={}, n_circuits=0, head_seed_total=0.0, name_position=name)
    others = {p: reach.get(p, 0.0) / total for p in range(1, end) if p != name}
    share = reach.get(name, 0.0) / total
    return dict(name_path_share=share, name_path_margin=share - max(others.values(), default=0.0),
                direct_name_share=direct / total, position_shares=others, n_circuits=used, head_seed_total=total,
                name_position=name)


# ---------------------------------------------------------------- measurements for the claims

def size_row(p: PronounPrompt, accpp: Circuit, acc: Circuit) -> dict:
    """One row of the ACC vs ACC++ size table; ``accpp_status`` labels an ACC++ circuit that is empty or
    has no expanded firing (:data:`accpp.graph.STATUSES`), whose node count is then not a circuit size."""
    return dict(text=p.text, gender=p.gender, accpp_status=accpp.status, accpp_nodes=accpp.graph.number_of_nodes(),
                acc_nodes=acc.graph.number_of_nodes(), accpp_firings=accpp.n_firings, acc_firings=acc.n_firings,
                acc_truncated=bool(acc.meta["truncated"]),
                ratio=acc.graph.number_of_nodes() / accpp.graph.number_of_nodes(),
                accpp_seconds=accpp.seconds, acc_seconds=acc.seconds)


def _per_model(d: dict, what: str) -> None:
    if not d:
        raise ValueError(f"{what}: no models")


def measure_behaviour(metrics: dict[str, PronounMetrics], config: dict | None = None):
    """Claim accpp/pronoun-behaviour: the smallest model mean logit difference and accuracy."""
    from compendium.claims import Measurement
    import pandas as pd

    _per_model(metrics, "measure_behaviour")
    per = {m: x.summary() for m, x in metrics.items()}
    lo_ld = min(v["logit_diff"] for v in per.values())
    lo_acc = min(v["accuracy"] for v in per.values())
    table = pd.DataFrame([dict(model=m, **v) for m, v in per.items()])
    return Measurement(
        claim="accpp/pronoun-behaviour", values=dict(logit_diff=lo_ld, accuracy=lo_acc, n_models=len(per)),
        evidence=dict(per_model=per), tables={"06_gendered_pronoun_behaviour": table}, config=dict(config or {}),
        note="; ".join(f"{m}: mean logit diff {v['logit_diff']:.2f} (male {v['logit_diff_male']:.2f}, female "
                       f"{v['logit_diff_female']:.2f}), accuracy {v['accuracy']:.2f} on {v['n']} prompts"
                       for m, v in per.items()))


def measure_size_ratio(tables: dict[str, "pd.DataFrame"], accuracy: float, config: dict | None = None):
    """Claim accpp/pronoun-smaller-than-acc from per-model tables of :func:`size_row` rows."""
    from compendium.claims import Measurement
    import pandas as pd

    _per_model(tables, "measure_size_ratio")
    if any(len(t) == 0 for t in tables.values()):
        raise ValueError("measure_size_ratio: a model has no compared prompts")
    allrows = pd.concat([t.assign(model=m) for m, t in tables.items()], ignore_index=True)
    per = {m: float(t["ratio"].mean()) for m, t in tables.items()}
    ratio = float(allrows["ratio"].mean())
    return Measurement(
        claim="accpp/pronoun-smaller-than-acc",
        values=dict(size_ratio=ratio, size_ratio_min_model=min(per.values()), size_ratio_max_model=max(per.values()),
                    n_compared_min_model=min(len(t) for t in tables.values()),
                    acc_truncated=bool(allrows["acc_truncated"].any()), accuracy=float(accuracy)),
        evidence=dict(per_model=per, ratios=allrows["ratio"].round(3).tolist(),
                      direction="below" if ratio < 2 else "above" if ratio > 10 else "within",
                      accpp_nodes_mean=float(allrows["accpp_nodes"].mean()), acc_nodes_mean=float(allrows["acc_nodes"].mean())),
        tables={"06_gendered_pronoun_acc": allrows}, config=dict(config or {}) | dict(acc="authors' ACC (ACCConfig())"),
        note="mean ACC / ACC++ node ratio: " + "; ".join(f"{m} {r:.1f} over {len(tables[m])} prompts"
                                                         for m, r in per.items()))


def measure_name_paths(paths: dict[str, dict], accuracy: float, tokens: dict[str, list[str]] | None = None,
                       config: dict | None = None):
    """Claim accpp/pronoun-name-paths from per-model :func:`name_paths` results (smallest over models)."""
    from compendium.claims import Measurement
    import pandas as pd

    _per_model(paths, "measure_name_paths")
    rows = []
    for m, r in paths.items():
        toks, name = (tokens or {}).get(m), r.get("name_position")
        rows.append(dict(model=m, position=name, token=toks[name] if toks and name is not None else "",
                         role="name", share=r["name_path_share"]))
        rows += [dict(model=m, position=p, token=toks[p] if toks else "", role="other", share=s)
                 for p, s in r["position_shares"].items()]
    return Measurement(
        claim="accpp/pronoun-name-paths",
        values=dict(name_path_share=min(r["name_path_share"] for r in paths.values()),
                    name_path_margin=min(r["name_path_margin"] for r in paths.values()),
                    n_circuits_min_model=min(r["n_circuits"] for r in paths.values()), accuracy=float(accuracy)),
        evidence=dict(per_model={m: dict(name_path_share=r["name_path_share"], name_path_margin=r["name_path_margin"],
                                         direct_name_share=r["direct_name_share"], n_circuits=r["n_circuits"])
                                 for m, r in paths.items()},
                      direct_name_share=min(r["direct_name_share"] for r in paths.values())),
        tables={"06_gendered_pronoun_name_paths": pd.DataFrame(rows)}, config=dict(config or {}),
        note="; ".join(f"{m}: name reached by {r['name_path_share']:.2f} of the head seeds' attribution (margin "
                       f"{r['name_path_margin']:+.2f} over the next token; read directly from the answer position: "
                       f"{r['direct_name_share']:.2f}) over {r['n_circuits']} circuits" for m, r in paths.items()))
