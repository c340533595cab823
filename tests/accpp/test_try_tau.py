"""The "Try it" of notebooks/accpp/00_method at its smallest size: the firing the notebook follows on the
tiny float64 Llama, its greedy removal run again with the threshold tau(d) = min(1, TAU_FACTOR / n) at
other factors (``teaching.signals_at``), as the notebook's cell does.

What the notebook promises: a lower factor continues the same removal (the paper's list is its
beginning), so at least as many candidates and signals, and more exactly when A_ds had not yet
fallen below the new tau; it ends below the new tau. A higher factor stops the same list earlier, and
once tau passes A_ds nothing is removed (the tracer would not expand the firing)."""
from __future__ import annotations

import pytest
import torch

from accpp import teaching as tch
from accpp.testing import float64_exact, random_prompt, tiny_model

PAPER_FACTOR = 2.5


@pytest.fixture(scope="module")
def followed():
    """The firing the notebook follows: last layer, last token, the head and source of largest weight."""
    with float64_exact():
        model = tiny_model("llama", seed=0)
        fw = tch.run_forward(model, random_prompt(11, seed=1))
        d, L = fw.ids.numel() - 1, fw.n_layers - 1
        a, s = divmod(int(torch.argmax(fw.attn[L, :, d, : d + 1])), d + 1)
        yield tch.explain_firing(model, fw, L, a, d, s), d + 1


def _components(edges) -> set:
    return {(e["kind"], e["layer"], e["head"], e["src"]) for e in edges}


def test_the_paper_factor_gives_the_firing_as_explained(followed):
    firing, n = followed
    again = tch.signals_at(firing, min(1.0, PAPER_FACTOR / n))
    for side, got in again.items():
        assert got["removed"] == firing.sides[side]["removed"] and got["A_after"] == firing.sides[side]["A_after"]
    assert [e for side in "ds" for e in again[side]["edges"]] == firing.edges


@pytest.mark.parametrize("factor", [1.0, 1.5])
def test_a_lower_tau_continues_the_removal(followed, factor):
    firing, n = followed
    tau_low = min(1.0, factor / n)
    base, low = tch.signals_at(firing, min(1.0, PAPER_FACTOR / n)), tch.signals_at(firing, tau_low)
    grew = 0
    for side in "ds":
        b, lo = base[side], low[side]
        assert lo["removed"][: len(b["removed"])] == b["removed"]          # the same order, continued
        assert (len(lo["removed"]) > len(b["removed"])) == (b["A_after"][-1] >= tau_low)
        assert lo["A_after"][-1] < tau_low
        assert _components(b["edges"]) <= _components(lo["edges"])
        grew += len(lo["removed"]) - len(b["removed"])
    assert grew > 0, "the followed firing's removal stopped above the lower tau on some side"


@pytest.mark.parametrize("factor", [4.0, 6.0])
def test_a_higher_tau_stops_the_same_removal_earlier(followed, factor):
    firing, n = followed
    base, high = tch.signals_at(firing, min(1.0, PAPER_FACTOR / n)), tch.signals_at(firing, min(1.0, factor / n))
    assert firing.A >= min(1.0, factor / n), "the followed firing should still be expanded at this factor"
    for side in "ds":
        h = high[side]
        assert base[side]["removed"][: len(h["removed"])] == h["removed"] and h["A_after"][-1] < factor / n
        assert _components(h["edges"]) <= _components(base[side]["edges"])


def test_a_tau_above_the_weight_removes_nothing(followed):
    firing, _ = followed
    tau_high = 1.0  # a factor of n or more: tau at its cap, above any weight below 1
    assert firing.A < tau_high
    assert all(x["removed"] == [] and x["A_after"] == [] and x["edges"] == []
               for x in tch.signals_at(firing, tau_high).values())
