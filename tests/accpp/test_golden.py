"""Golden circuits: the authors-variant tracer on fixed IOI prompts of the offline models.

The files under ``tests/accpp/golden/`` hold our tracer's output (``TraceConfig()``, the default
``variant="authors"``) for two IOI prompts on each of SmolLM2-135M and Gemma-3-270M: the token ids,
every node (with whether it was expanded) and every edge (side, token, singular indices in greedy
order, weight). They are regenerated only on request:

    pytest tests/accpp/test_golden.py --regen-golden      # then review and commit the JSON diff

What must match, and why these tolerances:

- Topology (nodes, which firings were expanded, edges with side and token) and the singular
  indices, in order: exactly. They are discrete outcomes of the greedy removal; any change means
  the method (or the decomposition feeding it) changed.
- Edge weights (sums of drops in the attention weight A_ds, so in [0, 1]): within 5e-3 absolute.
  They are computed in float64 from the model's float32 activations; a different BLAS, CPU or
  torch version moves those activations by ~1e-7 relative, and the weights by ~1e-6. 5e-3 is far
  above that and below any real change of an edge (greedy steps that matter move A_ds by more).
  Seed edges carry the component's share of the logit difference (logit units), also within 5e-3.
- The token ids must match (a tokenizer change would make the comparison meaningless).

A near-tie in the greedy order could in principle flip on another platform; that would show up
as a singular-index or topology difference in one firing, and the message lists it.
"""
from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest
import torch

GOLDEN_DIR = Path(__file__).parent / "golden"
WEIGHT_TOL = 5e-3
# model -> prompts (template index, order, IO, S, place, object) of data/names/ioi_greaterthan_templates.json
CASES = {
    "smollm2-135m": [(0, "BABA", "Mary", "John", "store", "drink"),
                     (6, "ABBA", "Sarah", "Michael", "school", "ring")],
    "gemma-3-270m": [(0, "BABA", "Mary", "John", "store", "drink"),
                     (6, "ABBA", "Sarah", "Michael", "school", "ring")],
}


def golden_record(circuit, prompt) -> dict:
    """The part of a traced circuit the golden file keeps (small, stable, sorted)."""
    g = circuit.graph
    nodes = sorted([n, bool(d.get("traced", False))] for n, d in g.nodes(data=True))
    edges = sorted([u, v, d["side"], int(d["token"]), [int(k) for k in d["sing"]], round(float(d["weight"]), 7)]
                   for u, v, d in g.edges(data=True))
    return dict(text=prompt.text, input_ids=list(prompt.input_ids), logit_diff=round(circuit.logit_diff, 6),
                variant=circuit.meta["variant"], n_firings=circuit.n_firings, nodes=nodes, edges=edges)


def record_graph(rec: dict) -> nx.MultiDiGraph:
    g = nx.MultiDiGraph()
    for n, traced in rec["nodes"]:
        g.add_node(n, traced=traced)
    for u, v, side, token, sing, w in rec["edges"]:
        g.add_edge(u, v, side=side, token=token, sing=sing, weight=w)
    return g


def _trace(model_name: str):
    from accpp import datasets, ioi
    from accpp.models import load_model
    from accpp.trace import Tracer

    torch.set_num_threads(1)
    model, tok = load_model(model_name)
    tracer = Tracer(model, tok, name=model_name)  # TraceConfig(): variant="authors"
    out = []
    for spec in CASES[model_name]:
        p = datasets.make_prompt(tok, *spec)
        out.append(dict(prompt=list(spec), **golden_record(ioi.trace_ioi(tracer, p), p)))
    return out


@pytest.mark.models
@pytest.mark.parametrize("model_name", sorted(CASES))
def test_golden_circuits(model_name, request):
    from accpp.graph import graph_diff

    path = GOLDEN_DIR / f"{model_name}.json"
    got = _trace(model_name)
    if request.config.getoption("--regen-golden", default=False):
        from compendium.atomic import write_json

        write_json(path, dict(model=model_name, config="TraceConfig() (variant='authors')", cases=got))
        pytest.skip(f"regenerated {path.name}; review and commit it")
    assert path.exists(), f"no golden file {path}: run pytest {__file__} --regen-golden"
    expected = json.loads(path.read_text(encoding="utf-8"))["cases"]
    assert len(expected) == len(got)
    for exp, new in zip(expected, got):
        assert exp["input_ids"] == new["input_ids"], f"tokenisation changed for {exp['text']!r}"
        assert exp["variant"] == new["variant"] == "authors"
        diff = graph_diff(record_graph(exp), record_graph(new), WEIGHT_TOL)
        traced_exp = {n for n, t in exp["nodes"] if t}
        traced_new = {n for n, t in new["nodes"] if t}
        diff += [f"expansion changed: {n}" for n in sorted(traced_exp ^ traced_new)]
        assert not diff, f"{model_name}, {exp['text']!r}: {len(diff)} differences:\n" + "\n".join(diff[:40])
        assert new["logit_diff"] == pytest.approx(exp["logit_diff"], abs=1e-3)


def test_golden_comparison_catches_changes():
    """The comparison itself: a changed SV order, a missing edge and a weight beyond the tolerance
    are reported; a weight change within it is not."""
    from accpp.graph import graph_diff

    rec = dict(nodes=[["A1.0@5<2", True], ["M0@5", False], ["LOGITS@5", False]],
               edges=[["M0@5", "A1.0@5<2", "d", 5, [3, 1], 0.25], ["A1.0@5<2", "LOGITS@5", "seed", 5, [], 1.5]])
    g = record_graph(rec)
    assert graph_diff(g, record_graph(rec), WEIGHT_TOL) == []
    near = json.loads(json.dumps(rec))
    near["edges"][0][5] += 0.9 * WEIGHT_TOL
    assert graph_diff(g, record_graph(near), WEIGHT_TOL) == []
    for change in (lambda r: r["edges"][0].__setitem__(4, [1, 3]),  # same set, other greedy order
                   lambda r: r["edges"][0].__setitem__(5, 0.25 + 2 * WEIGHT_TOL),
                   lambda r: r["edges"].pop(1),
                   lambda r: r["edges"][0].__setitem__(2, "s")):
        bad = json.loads(json.dumps(rec))
        change(bad)
        assert graph_diff(g, record_graph(bad), WEIGHT_TOL), bad
