"""IOI prompts (Wang et al. 2022 templates, as used by the ACC++ authors) and task metrics.

Templates, places and objects: ``data/names/ioi_greaterthan_templates.json`` (15 BABA
templates; ABBA = BABA with the first [B]/[A] pair swapped). Names:
``data/names/first_names.json`` (the IOI paper's English list by default), filtered to names
that are ONE token (with the leading space) for the tokenizer in use. A name given explicitly
that is not one token raises :class:`MultiTokenName` (never a silently wrong answer token).

A prompt is the template up to (not including) the final [A]; the answer is " A" (the indirect
object, IO), the distractor " B" (the subject, S).
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass

import torch

__all__ = ["IOIPrompt", "MultiTokenName", "load_templates", "load_names", "single_token_names",
           "name_token", "make_prompt", "ioi_mixed", "ioi_balanced", "evaluate", "IOIMetrics"]


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


def name_token(tokenizer, name: str) -> int:
    """Token id of ' name'; raises MultiTokenName if it is not exactly one token."""
    ids = tokenizer(" " + name, add_special_tokens=False).input_ids
    if len(ids) != 1:
        pieces = tokenizer.convert_ids_to_tokens(ids)
        raise MultiTokenName(
            f"name {name!r} is {len(ids)} tokens for this tokenizer ({pieces}); IOI needs single-token names "
            "(use single_token_names() to filter a list)")
    return ids[0]


def single_token_names(tokenizer, names: list[str] | None = None) -> list[str]:
    out = []
    for n in names if names is not None else load_names():
        try:
            name_token(tokenizer, n)
            out.append(n)
        except MultiTokenName:
            pass
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
    pos: dict  # IO, S1, S2, S1+1, END token positions

    def ids(self) -> torch.Tensor:
        return torch.tensor(self.input_ids)


def _abba(baba: str) -> str:
    i, j = baba.index("[B]"), baba.index("[A]")
    assert i < j
    return baba[:i] + "[A]" + baba[i + 3:j] + "[B]" + baba[j + 3:]


def make_prompt(tokenizer, template: int, order: str, io: str, s: str, place: str, obj: str,
                templates: dict | None = None) -> IOIPrompt:
    templates = templates or load_templates()
    t = templates["ioi_baba_templates"][template]
    if order == "ABBA":
        t = _abba(t)
    elif order != "BABA":
        raise ValueError("order must be 'ABBA' or 'BABA'")
    if not t.endswith("[A]"):
        raise ValueError(f"template {template} does not end with the indirect object")
    text = t[: -len(" [A]")].replace("[A]", io).replace("[B]", s).replace("[PLACE]", place).replace("[OBJECT]", obj)
    io_id, s_id = name_token(tokenizer, io), name_token(tokenizer, s)
    ids = tokenizer(text).input_ids
    io_pos = [i for i, x in enumerate(ids) if x == io_id]
    s_pos = [i for i, x in enumerate(ids) if x == s_id]
    if len(io_pos) != 1 or len(s_pos) != 2:
        raise MultiTokenName(f"names not found as single tokens in the tokenised prompt {text!r}")
    pos = {"IO": io_pos[0], "S1": s_pos[0], "S2": s_pos[1], "S1+1": s_pos[0] + 1, "END": len(ids) - 1}
    return IOIPrompt(text, io, s, order, template, io_id, s_id, tuple(ids), pos)


def _sample(tokenizer, rng: random.Random, names, templates, template: int, order: str) -> IOIPrompt:
    io, s = rng.sample(names, 2)
    place, obj = rng.choice(templates["ioi_places"]), rng.choice(templates["ioi_objects"])
    return make_prompt(tokenizer, template, order, io, s, place, obj, templates)


def ioi_mixed(tokenizer, n: int = 256, seed: int = 0, names: list[str] | None = None) -> list[IOIPrompt]:
    """n prompts, random template, random ABBA/BABA order, distinct single-token names."""
    templates = load_templates()
    names = single_token_names(tokenizer, names)
    rng = random.Random(seed)
    k = len(templates["ioi_baba_templates"])
    return [_sample(tokenizer, rng, names, templates, rng.randrange(k), rng.choice(("ABBA", "BABA")))
            for _ in range(n)]


def ioi_balanced(tokenizer, per_order: int = 100, seed: int = 0, names: list[str] | None = None,
                 templates_idx: list[int] | None = None) -> list[IOIPrompt]:
    """15 templates x (per_order ABBA + per_order BABA) prompts (the clustering set)."""
    templates = load_templates()
    names = single_token_names(tokenizer, names)
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


@torch.no_grad()
def evaluate(model, prompts: list[IOIPrompt]) -> IOIMetrics:
    """Logit difference and P(IO) at the last position; prompts of equal length run batched."""
    ld = torch.empty(len(prompts), dtype=torch.float64)
    p = torch.empty(len(prompts), dtype=torch.float64)
    by_len: dict[int, list[int]] = {}
    for i, pr in enumerate(prompts):
        by_len.setdefault(len(pr.input_ids), []).append(i)
    for idx in by_len.values():
        ids = torch.tensor([prompts[i].input_ids for i in idx])
        logits = model(ids).logits[:, -1].double()
        lp = torch.log_softmax(logits, -1)
        io = torch.tensor([prompts[i].io_id for i in idx])
        s = torch.tensor([prompts[i].s_id for i in idx])
        r = torch.arange(len(idx))
        ld[idx] = logits[r, io] - logits[r, s]
        p[idx] = lp[r, io].exp()
    return IOIMetrics(ld, p)
