"""Multilingual IOI data (our templates), prompts, circuit sets and language distances.

GPT-2 tokenizer from data/ for the prompt tests (no model needed); the Gemma-3-270M tokenizer in
one test marked `models`.
"""
from __future__ import annotations

import re

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from accpp import multilingual as ml
from accpp.datasets import MultiTokenName, load_templates, name_token

SLOT = re.compile(r"\[[A-Z]+\]")


@pytest.fixture(scope="module")
def tok():
    from transformers import PreTrainedTokenizerFast

    from compendium import paths

    return PreTrainedTokenizerFast(tokenizer_file=str(paths.data_dir() / "tokenizers" / "gpt2_tokenizer.json"))


def test_data_is_ours_and_parallel():
    data = ml.load()
    assert "NOT the ACC++ authors'" in data["_source"]
    langs = data["languages"]
    assert tuple(langs) == ml.LANGUAGES
    n_t = {len(v["templates"]) for v in langs.values()}
    assert len(n_t) == 1 and 4 <= n_t.pop() <= 6
    assert len({len(v["places"]) for v in langs.values()}) == 1
    assert len({len(v["objects"]) for v in langs.values()}) == 1
    ioi = load_templates()["ioi_baba_templates"]
    assert langs["en"]["templates"] == [ioi[i] for i in data["en_template_indices"]]


@pytest.mark.parametrize("lang", ml.LANGUAGES)
def test_every_template_has_exactly_the_slots(lang):
    spec, en = ml.load()["languages"][lang], ml.load()["languages"]["en"]
    for t, t_en in zip(spec["templates"], en["templates"]):
        slots = SLOT.findall(t)
        assert set(slots) <= set(ml.load()["slots"]), t
        assert slots.count("[A]") == 2 and slots.count("[B]") == 2, t
        assert t.endswith(" [A]") and t.index("[B]") < t.index("[A]"), t  # BABA, IO last
        assert slots[:2] == ["[B]", "[A]"], t  # the name pair comes first
        for s in ("[PLACE]", "[OBJECT]"):  # the translation keeps the English slots
            assert slots.count(s) == SLOT.findall(t_en).count(s), (t, t_en)
        assert "  " not in t and t == t.strip()


@pytest.mark.parametrize("lang", ml.LANGUAGES)
def test_prompts_are_well_formed(tok, lang):
    prompts = ml.language_set(tok, lang, 24, seed=0)
    assert {p.order for p in prompts} == {"ABBA", "BABA"}
    for p in prompts:
        ids = p.input_ids
        assert ids[p.pos["IO"]] == p.io_id and ids[p.pos["S1"]] == p.s_id == ids[p.pos["S2"]]
        assert p.pos["S1"] < p.pos["S2"] < p.pos["END"] == len(ids) - 1
        assert (p.pos["IO"] < p.pos["S1"]) == (p.order == "ABBA")
        assert p.io != p.s and "[" not in p.text and not p.text.endswith(" ")
    assert ml.language_set(tok, lang, 3, seed=0) == prompts[:3]  # deterministic given the seed


def test_draws_are_shared_across_languages(tok):
    sets = {lang: ml.language_set(tok, lang, 10, seed=1) for lang in ml.LANGUAGES}
    for lang in ml.LANGUAGES[1:]:
        assert [(p.template, p.order) for p in sets[lang]] == [(p.template, p.order) for p in sets["en"]]


def test_parallel_prompts(tok):
    par = ml.parallel_sets(tok, 12, seed=0)
    en = par["en"]
    assert {p.template for p in en} == set(range(6)) and {p.order for p in en} == {"ABBA", "BABA"}
    for lang in ml.LANGUAGES:
        assert [(p.template, p.order, p.io, p.s) for p in par[lang]] == [(p.template, p.order, p.io, p.s) for p in en]
    es = ml.ml_prompt(tok, "es", 0, "BABA", "Laura", "David", 0, 0)
    assert es.text == "Luego, David y Laura fueron a la tienda. David le dio un libro a"
    abba = ml.ml_prompt(tok, "pt", 0, "ABBA", "Laura", "David", 0, 0)
    assert abba.text == "Então, Laura e David foram à loja. David deu um livro para"


@pytest.mark.parametrize("lang", ml.LANGUAGES)
def test_names_are_single_tokens(tok, lang):
    names = ml.language_names(tok, lang)
    assert len(names) >= 10 and len(set(names)) == len(names)
    for n in names:
        name_token(tok, n)  # raises MultiTokenName otherwise
    if lang == "es":
        assert not any(n.startswith(("I", "Hi")) for n in names)  # 'y' would become 'e'
    shared = ml.shared_names(tok)
    assert len(shared) >= 2 and all(len(tok(" " + n, add_special_tokens=False).input_ids) == 1 for n in shared)


def test_multi_token_name_is_an_error(tok):
    with pytest.raises(MultiTokenName, match="Zxqvbn"):
        ml.ml_prompt(tok, "fr", 0, "BABA", "Zxqvbn", "David", 0, 0)
    with pytest.raises(ValueError, match="unknown language"):
        ml.ml_prompt(tok, "de", 0, "BABA", "Laura", "David", 0, 0)


def _graph(heads, mlps, edges):
    g = nx.MultiDiGraph()
    for i, (l, h) in enumerate(heads):
        g.add_node(f"A{l}.{h}@{i}", kind="head", layer=l, head=h, dest=i, src=0)
    for l in mlps:
        g.add_node(f"M{l}@0", kind="mlp", layer=l, head=-1, dest=0, src=-1)
    for u, v, side, sing in edges:
        g.add_edge(u, v, side=side, token=0, sing=sing, rank=len(sing), attribution=1.0, drop=0.1)
    return g


def test_component_and_signal_sets():
    g = _graph([(3, 1), (3, 1), (5, 0)], [2], [("A3.1@0", "A5.0@2", "d", [0, 4]), ("M2@0", "A5.0@2", "s", [1]),
                                               ("A3.1@1", "A5.0@2", "d", [0])])
    assert ml.component_set(g) == {"A3.1", "A5.0", "M2"}  # positions dropped
    assert ml.edge_set(g) == {("A3.1", "A5.0", "d"), ("M2", "A5.0", "s")}
    assert ml.signal_set(g) == {("A3.1", "A5.0", "d", 0), ("A3.1", "A5.0", "d", 4), ("M2", "A5.0", "s", 1)}
    assert ml.jaccard({1, 2}, {2, 3}) == pytest.approx(1 / 3) and ml.jaccard(set(), set()) == 1.0


def test_distances_and_closest_pair():
    sets = {"en": [{1, 2, 3}, {1}], "es": [{1, 2}, {1, 2}], "pt": [{1, 2}, {1, 2}]}
    D = ml.language_distances(sets)
    assert D.loc["es", "pt"] == 0 and D.loc["en", "es"] == pytest.approx(((1 - 2 / 3) + 0.5) / 2)
    assert (D.to_numpy() == D.to_numpy().T).all() and (np.diag(D) == 0).all()
    a, b, d, margin = ml.closest_pair(D)
    assert (a, b, d) == ("es", "pt", 0.0) and margin > 0
    assert ml.closest_pair_stable(sets)
    assert ml.mean_offdiag(D) == pytest.approx(2 * D.loc["en", "es"] / 3)
    with pytest.raises(ValueError):
        ml.language_distances({"en": [{1}], "es": []})


def test_average_linkage_by_hand():
    # a-b at 1, c-d at 2, between the groups 4 and 6 -> UPGMA merges (a,b), (c,d), then at mean 5
    D = pd.DataFrame([[0, 1, 4, 6], [1, 0, 6, 4], [4, 6, 0, 2], [6, 4, 2, 0]], dtype=float)
    Z = ml.average_linkage(D.to_numpy())
    assert Z.tolist() == [[0, 1, 1, 2], [2, 3, 2, 2], [4, 5, 5, 4]]
    # unequal cluster sizes: average over all member pairs, not over cluster means
    D3 = np.array([[0, 1, 3], [1, 0, 5], [3, 5, 0]], dtype=float)
    assert ml.average_linkage(D3).tolist() == [[0, 1, 1, 2], [2, 3, 4, 3]]


@pytest.mark.models
def test_gemma3_tokenizer_names():
    from transformers import AutoTokenizer

    from accpp import models

    folder = models.cached_folder("gemma-3-270m")
    gtok = AutoTokenizer.from_pretrained(folder) if (folder / "tokenizer.json").exists() else \
        models.load_model("gemma-3-270m")[1]
    for lang in ml.LANGUAGES:
        names = ml.language_names(gtok, lang)
        assert len(names) >= 50, (lang, len(names))
        for p in ml.language_set(gtok, lang, 12, seed=0):
            assert p.input_ids[0] == gtok.bos_token_id and p.input_ids[p.pos["IO"]] == p.io_id
    assert len(ml.shared_names(gtok)) >= 10
    par = ml.parallel_sets(gtok, 6, seed=0)
    assert all(len(v) == 6 for v in par.values())


def test_parallel_sets_cover_every_cell_and_null_changes_only_names(tok):
    k = len(ml.load()["languages"]["en"]["templates"])
    par = ml.parallel_sets(tok, 2 * k, seed=0)
    cells = {(p.template, p.order) for p in par["en"]}
    assert len(cells) == 2 * k  # every (template, order) once
    assert ml.parallel_sets(tok, 3, seed=0)["es"] == par["es"][:3]  # prefixes agree
    null = ml.null_sets(tok, 2 * k, seed=0)
    for lang in ml.LANGUAGES:
        for p, q in zip(par[lang], null[lang]):
            assert (p.template, p.order) == (q.template, q.order)
            assert {p.io, p.s}.isdisjoint({q.io, q.s})
    big = ml.parallel_sets(tok, 36, seed=1)
    assert all(len(v) == 36 for v in big.values())


def test_chance_corrected_jaccard():
    assert ml.chance_jaccard(10, 10, 10) == 1.0  # both sets are the whole universe
    e = ml.chance_jaccard(4, 6, 20)  # E|a & b| = 1.2 -> 1.2 / 8.8
    assert e == pytest.approx(1.2 / 8.8)
    a, b = set(range(4)), set(range(2, 8))
    assert ml.adjusted_jaccard(a, b, 20) == pytest.approx((2 / 8 - e) / (1 - e))
    assert ml.adjusted_jaccard(a, a, 20) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="universe"):
        ml.chance_jaccard(5, 3, 4)


def _language_sets(rng, n, specific: bool):
    """Circuits of n prompts in two languages: a shared per-prompt core, plus language-specific items
    (``specific``) or per-circuit noise only; the null differs from the original by noise only."""
    sets, null = {"en": [], "es": []}, {"en": [], "es": []}
    for i in range(n):
        core = {f"c{i}_{j}" for j in range(8)}
        for lang in sets:
            extra = {f"{lang}{j}" for j in range(6)} if specific else set()
            noise = lambda: {f"n{rng.randrange(200)}" for _ in range(2)}  # noqa: E731
            sets[lang].append(core | extra | noise())
            null[lang].append(core | extra | noise())
    return sets, null


def test_reuse_vs_null_detects_language_specific_sets():
    import random

    shared, shared_null = _language_sets(random.Random(0), 30, specific=False)
    spec, spec_null = _language_sets(random.Random(0), 30, specific=True)
    r0 = ml.reuse_vs_null(shared, shared_null, n_boot=300, seed=0)
    r1 = ml.reuse_vs_null(spec, spec_null, n_boot=300, seed=0)
    assert r0["specificity_ci_low"] < 0 < r0["specificity_ci_high"] or abs(r0["specificity"]) < 0.05
    assert r1["specificity"] > 0.2 and r1["specificity_ci_low"] > 0
    assert r1 == ml.reuse_vs_null(spec, spec_null, n_boot=300, seed=0)  # seeded
    gap = ml.specificity_gap(shared, shared_null, spec, spec_null, n_boot=300, seed=0)
    assert gap["gap"] == pytest.approx(r1["specificity"] - r0["specificity"]) and gap["ci_low"] > 0
    adj = ml.reuse_vs_null(spec, spec_null, universe=400, n_boot=0)
    assert np.isnan(adj["specificity_ci_low"]) and adj["specificity"] > 0
    with pytest.raises(ValueError, match="same number"):
        ml.reuse_vs_null(spec, {"en": spec_null["en"][:3], "es": spec_null["es"]})


def test_closest_pair_bootstrap():
    import random

    rng = random.Random(0)
    sets = {lang: [] for lang in ("en", "es", "fr", "pt")}
    for i in range(20):
        base = {f"b{i}_{j}" for j in range(10)}
        sets["es"].append(base | {"x", "y"} | {f"n{rng.randrange(50)}"})
        sets["pt"].append(base | {"x", "y"} | {f"n{rng.randrange(50)}"})
        sets["en"].append(base | {"e1", "e2", "e3"} | {f"n{rng.randrange(50)}"})
        sets["fr"].append(base | {"f1", "f2", "f3", "f4"} | {f"n{rng.randrange(50)}"})
    out = ml.closest_pair_bootstrap(sets, n_boot=200, seed=1)
    assert out["frac_closest"] > 0.95 and out["margin"] < 0 and out["margin_ci_high"] < 0
    assert sum(out["fractions"].values()) == pytest.approx(1.0)
    assert ml.closest_pair_bootstrap(sets, pair=("en", "fr"), n_boot=200, seed=1)["frac_closest"] < 0.05
    with pytest.raises(ValueError, match="not among"):
        ml.closest_pair_bootstrap(sets, pair=("en", "de"))
