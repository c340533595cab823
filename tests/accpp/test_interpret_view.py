"""accpp.interpret_view: descriptions go to the viewer with their judge score and their describer's
checks; a describer whose descriptions do not beat another signal's fails its check, and a
description that repeats one of its contexts fails the copy check."""
from __future__ import annotations

import pandas as pd
import pytest
import torch

from accpp import interpret as it
from accpp import interpret_view as iv
from accpp import viewer
from accpp.decompose import KIND_MLP
from compendium.stats import bootstrap_mean_ci


class Tok:
    """Ids <-> "w<id>" words."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(f" w{int(i)}" for i in ids)


def _signals(n):
    d = torch.ones(4, dtype=torch.float64) / 2
    return [it.Signal(KIND_MLP, 0, -1, 1 + i, 0, "d", (i,), d, 1.0, 1) for i in range(n)]


def _found(n):
    top = [[it.Context([10 * i + j, 10 * i + j + 1, 10 * i + j + 2], 3.0 - j) for j in range(4)] for i in range(n)]
    return it.TopContexts(top=top, random=[], token_counts={}, n_tokens=0, n_windows=0, n_heldout=1)


def _table(gaps):
    own = [0.5 + g / 2 for g in gaps]
    return pd.DataFrame({"ba_own": own, "ba_other": [o - g for o, g in zip(own, gaps)], "gap": gaps})


def test_the_describer_check_is_the_claim_s_interval_above_zero():
    good = iv.describer_check(_table([0.25, 0.5, 0.25, 0.25, 0.5, 0.25]), seed=0)
    assert good["passed"] and "above 0" in good["check"] and "6 signals" in good["check"]
    noisy = iv.describer_check(_table([0.25, -0.25, 0.0, 0.25, -0.25, 0.0]), seed=0)
    assert not noisy["passed"]
    lo, hi = bootstrap_mean_ci(pd.Series([0.25, -0.25, 0.0, 0.25, -0.25, 0.0]), n_boot=2000, seed=0)
    assert f"{lo:+.3f} to {hi:+.3f}" in noisy["check"]           # the same interval a notebook computes


@pytest.mark.parametrize("description, copies", [
    ("1. morphine, one of the first \"vegetable\"", True),      # the describer's first example, copied
    ("1. Tor[ika]", True),
    ("Data, Sampling, and Variation: Understanding", True),
    ("the words 'perform', 'behaviors'", False),                # the baseline's list of words
    ("words about chemistry", False),
    ("morphine", False),                                        # one word is not a copy
    ("", False),
])
def test_a_description_that_repeats_a_context_is_caught(description, copies):
    contexts = ["morphine, one of the first “vegetable[ alkali]", "Data, Sampling, and Variation[ in]", "Tor[ika]"]
    assert iv.copies_context(description, contexts) is copies


def test_viewer_descriptions_carry_scores_checks_contexts_and_the_other_describer():
    n = 3
    signals, found, tok = _signals(n), _found(n), Tok()
    shown0 = it.render_context(tok, found.describe(0)[0])
    lm = iv.Described("instruction model", [f"1. {shown0}", "numbers", "w21 w22 things"], _table([0.5, 0.0, -0.5]),
                      {"check": "lm check", "passed": True})
    base = iv.Described("token baseline", ["the word 'w1'"] * n, _table([0.0, 0.0, 0.0]),
                        {"check": "baseline check", "passed": False})
    descs = iv.viewer_descriptions(signals, [lm, base], found, tok, n_contexts=2)
    assert list(descs) == [s.key for s in signals]
    first = descs[signals[0].key]
    assert first["describer"] == "instruction model" and first["score"] == {"own": 0.75, "other": 0.25}
    assert first["checks"] == [{"check": "lm check", "passed": True}, {"check": iv.COPY_CHECK, "passed": False}]
    assert [c[0] for c in first["contexts"]] == [it.render_context(tok, c) for c in found.describe(0)[:2]]
    assert first["others"][0]["describer"] == "token baseline" and not first["others"][0]["checks"][0]["passed"]
    assert descs[signals[1].key]["checks"][1]["passed"]           # "numbers" copies nothing
    # the viewer takes them as they are
    g = viewer.page_data(_graph(), title="t", descriptions={signals[0].key: first})
    shown = [e["desc"] for e in g["edges"] if "desc" in e]
    assert shown and shown[0]["score"] == {"own": 0.75, "other": 0.25} and shown[0]["others"][0]["describer"]

    table = iv.description_table(signals, [lm, base], found, tok)
    assert len(table) == 2 * n and list(table["informative"]) == [False, False, True, False, True, False]
    assert table.loc[0, "failed"] == "repeats a context" and table.loc[1, "failed"] == "describer check"
    with pytest.raises(ValueError, match="for 3 signals"):
        iv.viewer_descriptions(signals, [iv.Described("x", ["a"], _table([0.0]), lm.check)], found, tok)


def _graph():
    import networkx as nx

    g = nx.MultiDiGraph()
    g.add_node("M0@2", kind="mlp", layer=0, dest=2)
    g.add_node("A1.0@2<1", kind="head", layer=1, head=0, dest=2, src=1)
    g.add_node("logits@2", kind="logits", layer=2, dest=2)
    g.add_edge("M0@2", "A1.0@2<1", side="d", token=2, weight=0.3, sing=[0])
    g.add_edge("A1.0@2<1", "logits@2", side="seed", token=2, weight=1.0)
    return g
