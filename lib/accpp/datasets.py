"""IOI prompts (Wang et al. 2022 templates, as used by the ACC++ authors) and task metrics.

Templates, places and objects: ``data/names/ioi_greaterthan_templates.json`` (15 BABA
templates; ABBA = BABA with the first [B]/[A] pair swapped). Names:
``data/names/first_names.json`` (the IOI paper's English list by default), filtered to names
that are ONE token (with the leading space) for the tokenizer in use. A name given explicitly
that is not one token raises :class:`MultiTokenName` (never a silently wrong answer token).

A prompt is the template up to (not including) the final [A]; the answer is " A" (the indirect
object, IO), the distractor " B" (the subject, S). Both must be ONE token with their leading space
(that is what the model predicts; the builder refuses otherwise, naming the name and the template).
Names may stand anywhere: a name at the start of the prompt has no leading space and is written in
its own form there, which may be several tokens ("Mary" vs " Mary"); its role then covers a span
of tokens (``IOIPrompt.spans``) and its position (``IOIPrompt.pos``) is the span's last token. Each
prompt records whether its answer token occurs verbatim earlier in the prompt
(``answer_in_prompt``: False, e.g., in the ABBA order of a template that begins with the IO, where
the IO is only written without its space). Names, places and objects must be non-empty, without
surrounding whitespace and without placeholder brackets. IO must differ from S.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

import torch

__all__ = ["IOIPrompt", "MultiTokenName", "check_filler", "load_templates", "load_names", "single_token_names",
           "name_token", "make_prompt", "ioi_mixed", "ioi_balanced", "evaluate", "last_logits", "IOIMetrics", "EVAL_BATCH"]


class MultiTokenName(ValueError):
    """A name is not a single token for this tokenizer."""


def _names_dir():
    from compendium import paths

    return paths.data_dir() / "names"


def load_templates() -> dict:
    return json.loads((_names_dir() / "ioi_greaterthan_templates.json").read_text(encoding="utf-8"))


def load_names(source: str = "en_ioi_paper") -> list[str]:
    data = json.loads((_names_dir() / "first_names.json").read_text(encoding="utf-8"))
    return list(data[source]["all"])


_PLACEHOLDER_CHARS = "[]{}"


def check_filler(value, what: str) -> str:
    """``value`` if it can fill a template slot (``what`` names the slot, e.g. "name", "place"): a
    non-empty string without surrounding whitespace and without placeholder brackets; else an error
    naming it."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, got {type(value).__name__} {value!r}")
    if not value.strip():
        raise ValueError(f"{what} {value!r} is empty or only whitespace")
    if value != value.strip():
        raise ValueError(f"{what} {value!r} has surrounding whitespace: give the bare word (templates add the spaces)")
    bad = [c for c in _PLACEHOLDER_CHARS if c in value]
    if bad:
        raise ValueError(f"{what} {value!r} contains the placeholder character(s) {bad}: it would be read as (or "
                         "mix with) a template slot such as [A], [PLACE] or {name}")
    return value


def name_token(tokenizer, name: str) -> int:
    """Token id of ' name'; raises MultiTokenName if it is not exactly one token."""
    check_filler(name, "name")
    ids = tokenizer(" " + name, add_special_tokens=False).input_ids
    if len(ids) != 1:
        pieces = tokenizer.convert_ids_to_tokens(ids)
        raise MultiTokenName(
            f"name {name!r} is {len(ids)} tokens for this tokenizer ({pieces}); IOI needs single-token names "
            "(use single_token_names() to filter a list)")
    return ids[0]


def single_token_names(tokenizer, names: list[str] | None = None, sentence_initial: bool = False) -> list[str]:
    """The names that are one token with a leading space (and, with ``sentence_initial``, also
    without one, as at the start of a prompt)."""
    out = []
    for n in names if names is not None else load_names():
        try:
            name_token(tokenizer, n)
        except MultiTokenName:
            continue
        if sentence_initial and len(tokenizer(n, add_special_tokens=False).input_ids) != 1:
            continue
        out.append(n)
    return out


@dataclass(frozen=True)
class IOIPrompt:
    text: str
    io: str
    s: str
    order: str  # "ABBA" or "BABA"
    template: int  # index of the BABA template
    io_id: int
    s_id: int
    input_ids: tuple[int, ...]
    pos: dict  # IO, S1, S2, S1+1, END token positions (a name's last token)
    family: str = "paper"  # the template family (accpp.families)
    answer_in_prompt: bool = True  # the answer token " IO" occurs verbatim in the prompt
    spans: dict = field(default_factory=dict, hash=False, compare=False)  # IO, S1, S2: [first, last + 1) tokens

    def ids(self) -> torch.Tensor:
        return torch.tensor(self.input_ids)


def _abba(baba: str) -> str:
    i, j = baba.index("[B]"), baba.index("[A]")
    assert i < j
    return baba[:i] + "[A]" + baba[i + 3:j] + "[B]" + baba[j + 3:]


def _name_spans(t: str, io: str, s: str) -> tuple[str, list[tuple[str, int, int]]]:
    """Fill [A]/[B] in ``t`` (other placeholders already filled); return the text and, in order of
    appearance, (role letter, start, end) character spans of the names."""
    text, spans, i = "", [], 0
    while True:
        hits = [(t.find(tag, i), tag) for tag in ("[A]", "[B]") if t.find(tag, i) >= 0]
        if not hits:
            return text + t[i:], spans
        j, tag = min(hits)
        text += t[i:j]
        name = io if tag == "[A]" else s
        spans.append((tag[1], len(text), len(text) + len(name)))
        text += name
        i = j + 3


def _token_span(offsets, start: int, end: int, text: str) -> tuple[int, int] | None:
    """Tokens [first, last + 1) whose characters are exactly the name at [start, end) (the first token
    may carry the whitespace before it); None if a token straddles the name's edges."""
    inside = [i for i, (a, b) in enumerate(offsets) if b > a and b > start and a < end]
    if not inside:
        return None
    a0, b1 = offsets[inside[0]][0], offsets[inside[-1]][1]
    if b1 != end or not (a0 == start or (a0 == start - 1 and text[a0].isspace())):
        return None
    return inside[0], inside[-1] + 1


def make_prompt(tokenizer, template: int, order: str, io: str, s: str, place: str, obj: str,
                templates: dict | None = None, family: str = "paper") -> IOIPrompt:
    """One IOI prompt: the template up to the final [A], with IO = ``io`` and S = ``s``.

    The answer " IO" and the distractor " S" must each be one token with the leading space (the
    metric's tokens); otherwise :class:`MultiTokenName` names the name and the template. Where a
    name follows a space it is that token; at the start of the prompt (no space before it) it is
    written in its own form, which may be several tokens: its role covers that span
    (``spans``) and ``pos`` points at the span's last token. ``answer_in_prompt`` records whether
    the token " IO" occurs in the prompt.
    """
    templates = templates or load_templates()
    t = templates["ioi_baba_templates"][template]
    check_filler(io, "name (IO)")
    check_filler(s, "name (S)")
    check_filler(place, "place")
    check_filler(obj, "object")
    if io == s:
        raise ValueError(f"IO and S are the same name ({io!r}): IOI needs two different names")
    if order == "ABBA":
        t = _abba(t)
    elif order != "BABA":
        raise ValueError("order must be 'ABBA' or 'BABA'")
    if not t.endswith(" [A]"):
        raise ValueError(f"template {template} does not end with ' [A]' (the indirect object as the answer)")
    if t.count("[A]") != 2 or t.count("[B]") != 2:
        raise ValueError(f"template {template} must name IO twice ([A]) and S twice ([B]), once of each before "
                         f"the other: {t!r}")
    body = t[: -len(" [A]")].replace("[PLACE]", place).replace("[OBJECT]", obj)
    text, spans = _name_spans(body, io, s)
    ids_of = {}
    for role, name in (("A", io), ("B", s)):  # the answer and the distractor: one token each, with the space
        try:
            ids_of[role] = name_token(tokenizer, name)
        except MultiTokenName as err:
            raise MultiTokenName(f"{err} [the {'answer (IO)' if role == 'A' else 'distractor (S)'} of template "
                                 f"{template} ({family}): {t!r}]") from None
    try:
        enc = tokenizer(text, return_offsets_mapping=True)
    except (NotImplementedError, TypeError, ValueError) as err:
        raise TypeError(f"IOI prompts need a fast tokenizer (character offsets); {type(tokenizer).__name__} "
                        f"gives none: {err}") from err
    ids, offsets = list(enc["input_ids"]), list(enc["offset_mapping"])
    where: dict[str, list[tuple[int, int]]] = {"A": [], "B": []}
    for role, a, b in spans:
        name = io if role == "A" else s
        span = _token_span(offsets, a, b, text)
        spaced = a > 0 and text[a - 1] == " "
        if span is None or (spaced and (span[1] - span[0] != 1 or ids[span[0]] != ids_of[role])):
            pieces = [tokenizer.convert_ids_to_tokens(ids[i]) for i, (x, y) in enumerate(offsets) if x < b and y > a]
            raise MultiTokenName(
                f"name {name!r} at character {a} of the prompt {text!r} (template {template} ({family}): {t!r}) "
                f"does not tokenize as the name there {pieces}: it merges with the text around it")
        where[role].append(span)
    pos = {"IO": where["A"][0][1] - 1, "S1": where["B"][0][1] - 1, "S2": where["B"][1][1] - 1,
           "S1+1": where["B"][0][1], "END": len(ids) - 1}
    span_of = {"IO": where["A"][0], "S1": where["B"][0], "S2": where["B"][1]}
    return IOIPrompt(text, io, s, order, template, ids_of["A"], ids_of["B"], tuple(ids), pos, family,
                     ids_of["A"] in ids, span_of)


def _name_first(templates: dict) -> bool:
    """Whether some template begins with a name (then names must be one token without a space too)."""
    return any(t.lstrip().startswith(("[A]", "[B]")) for t in templates["ioi_baba_templates"])


def _sample(tokenizer, rng: random.Random, names, templates, template: int, order: str) -> IOIPrompt:
    io, s = rng.sample(names, 2)
    place, obj = rng.choice(templates["ioi_places"]), rng.choice(templates["ioi_objects"])
    return make_prompt(tokenizer, template, order, io, s, place, obj, templates)


def ioi_mixed(tokenizer, n: int = 256, seed: int = 0, names: list[str] | None = None) -> list[IOIPrompt]:
    """n prompts, random template, random ABBA/BABA order, distinct single-token names."""
    templates = load_templates()
    names = single_token_names(tokenizer, names, sentence_initial=_name_first(templates))
    rng = random.Random(seed)
    k = len(templates["ioi_baba_templates"])
    return [_sample(tokenizer, rng, names, templates, rng.randrange(k), rng.choice(("ABBA", "BABA")))
            for _ in range(n)]


def ioi_balanced(tokenizer, per_order: int = 100, seed: int = 0, names: list[str] | None = None,
                 templates_idx: list[int] | None = None) -> list[IOIPrompt]:
    """15 templates x (per_order ABBA + per_order BABA) prompts (the clustering set)."""
    templates = load_templates()
    names = single_token_names(tokenizer, names, sentence_initial=_name_first(templates))
    rng = random.Random(seed)
    idx = templates_idx if templates_idx is not None else range(len(templates["ioi_baba_templates"]))
    return [_sample(tokenizer, rng, names, templates, t, order)
            for t in idx for order in ("ABBA", "BABA") for _ in range(per_order)]


@dataclass(frozen=True)
class IOIMetrics:
    logit_diff: torch.Tensor  # (n,) logit(IO) - logit(S) at the last position
    p_io: torch.Tensor  # (n,) probability of the IO token

    @property
    def accuracy(self) -> float:
        return float((self.logit_diff > 0).double().mean())

    def mean(self, mask=None) -> dict:
        ld, p = (self.logit_diff, self.p_io) if mask is None else (self.logit_diff[mask], self.p_io[mask])
        return dict(logit_diff=float(ld.mean()), accuracy=float((ld > 0).double().mean()), p_io=float(p.mean()),
                    n=int(ld.numel()))


EVAL_BATCH = 64  # prompts per forward pass in :func:`last_logits`


@torch.no_grad()
def last_logits(model, rows: list[list[int]], batch: int = EVAL_BATCH):
    """Yield (indices, float64 logits (b, V) at the last position) for token-id rows, those of one length
    together in batches of at most ``batch`` rows, the logits of the last position only
    (``logits_to_keep=1``): a batch holds b x V logits, never b x T x V (05's largest group, 1,200 prompts x
    16 tokens x 262,144 entries, would be about 20 GB)."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    import inspect

    param = next(iter(model.parameters()), None)
    device = param.device if param is not None else torch.device("cpu")
    sig = inspect.signature(model.forward).parameters
    keep = dict(logits_to_keep=1) if "logits_to_keep" in sig or any(
        v.kind is inspect.Parameter.VAR_KEYWORD for v in sig.values()) else {}  # a stand-in without it: all
    by_len: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        by_len.setdefault(len(r), []).append(i)
    for idx_all in by_len.values():
        for k in range(0, len(idx_all), batch):
            idx = idx_all[k: k + batch]
            ids = torch.tensor([rows[i] for i in idx], device=device)
            yield idx, model(ids, **keep).logits[:, -1].double().cpu()


@torch.no_grad()
def evaluate(model, prompts: list[IOIPrompt], batch: int = EVAL_BATCH) -> IOIMetrics:
    """Logit difference and P(IO) at the last position; prompts of equal length run batched (at most
    ``batch`` per forward pass, :func:`last_logits`)."""
    ld = torch.empty(len(prompts), dtype=torch.float64)
    p = torch.empty(len(prompts), dtype=torch.float64)
    for idx, logits in last_logits(model, [pr.input_ids for pr in prompts], batch):
        lp = torch.log_softmax(logits, -1)
        io = torch.tensor([prompts[i].io_id for i in idx])
        s = torch.tensor([prompts[i].s_id for i in idx])
        r = torch.arange(len(idx))
        ld[idx] = logits[r, io] - logits[r, s]
        p[idx] = lp[r, io].exp()
    return IOIMetrics(ld, p)
