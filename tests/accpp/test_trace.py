"""Whole-prompt tracing on tiny models: determinism, JSON round trip, seeds, errors."""
from __future__ import annotations

import pytest
import torch

from accpp.graph import load_circuit, same_graph, save_circuit, summary
from accpp.testing import float64_exact, random_prompt, tiny_model
from accpp.trace import TraceConfig, Tracer, seeds


@pytest.fixture(scope="module", params=["llama", "gemma3_text", "gpt2"])
def circuit_pair(request):
    with float64_exact():
        model = tiny_model(request.param, seed=3)
        tracer = Tracer(model, config=TraceConfig(expand_layer0=True))
        ids = random_prompt(12, seed=5)
        c1 = tracer.trace(ids, correct=7, wrong=11)
        c2 = tracer.trace(ids, correct=7, wrong=11)
    return request.param, c1, c2


def test_tracing_twice_gives_same_graph(circuit_pair):
    fam, c1, c2 = circuit_pair
    assert same_graph(c1.graph, c2.graph)


def test_circuit_is_well_formed(circuit_pair):
    fam, c1, _ = circuit_pair
    g = c1.graph
    s = summary(g)
    assert s["nodes"] == g.number_of_nodes() and s["edges"] == g.number_of_edges()
    if c1.n_firings:
        assert any(d["side"] in ("d", "s") for *_, d in g.edges(data=True))
    for u, v, d in g.edges(data=True):
        assert d["side"] in ("d", "s", "seed")
        if d["side"] != "seed":
            tgt = g.nodes[v]
            assert tgt["kind"] == "head" and tgt["traced"]
            assert g.nodes[u]["layer"] <= tgt["layer"]  # signals flow upward (offset: same layer)
            assert d["rank"] == len(d["sing"]) >= 1


def test_json_round_trip(circuit_pair, tmp_path):
    fam, c1, _ = circuit_pair
    path = save_circuit(c1, tmp_path / f"{fam}.json")
    c3 = load_circuit(path)
    assert same_graph(c1.graph, c3.graph)
    assert c3.tokens == c1.tokens and c3.logit_diff == pytest.approx(c1.logit_diff)


def test_seed_rule():
    proj = torch.tensor([5.0, -1.0, 3.0, 0.5, 0.2, -0.7])  # total 7.0
    # sorted 5, 3, 0.5, ...: cumsum 5, 8 > 7 at value 3 -> cutoff min(3, 3.5) = 3 -> seeds {0, 2}
    assert sorted(seeds(proj).tolist()) == [0, 2]
    # one dominant component: cutoff capped at total/2
    assert sorted(seeds(torch.tensor([10.0, 1.0, -4.0])).tolist()) == [0]
    assert seeds(torch.tensor([-1.0, 0.5])).numel() == 0


def test_unsupported_architecture_names_what_is_missing():
    import transformers as tf

    from accpp.arch import UnsupportedArchitecture, from_model

    cfg = tf.OPTConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, ffn_dim=32, num_attention_heads=2,
                       word_embed_proj_dim=16, max_position_embeddings=32)
    model = tf.OPTForCausalLM(cfg)
    with pytest.raises(UnsupportedArchitecture, match="'opt' is not supported.*W_Q"):
        from_model(model)


def test_non_eager_attention_is_refused():
    from accpp.arch import UnsupportedArchitecture, from_model

    model = tiny_model("llama")
    model.config._attn_implementation = "sdpa"
    with pytest.raises(UnsupportedArchitecture, match="eager"):
        from_model(model)


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_answer_sets_read_out_the_mean_logit_difference(family):
    from accpp.arch import from_model
    from accpp.decompose import Decomposition, collect
    from accpp.trace import answer_direction

    with float64_exact():
        model = tiny_model(family, seed=3)
        arch = from_model(model)
        dec = Decomposition(arch, collect(model, arch, random_prompt(12, seed=5)))
        pos, L = dec.T - 1, arch.n_layers
        vecs, _ = dec.components(L, pos)
        logits = dec.acts.logits
        direction, metric = answer_direction(arch, dec, [3, 7, 9], [11, 2], pos)
        assert metric == pytest.approx(float(logits[[3, 7, 9]].mean() - logits[[11, 2]].mean()), abs=1e-12)
        # the components' projections add up to the metric (no unembedding bias in these families)
        assert float((vecs @ direction).sum()) == pytest.approx(metric, abs=1e-9)
        # single tokens: the plain logit difference, and lists of one give the same direction
        d1, m1 = answer_direction(arch, dec, 7, 11, pos)
        d2, m2 = answer_direction(arch, dec, [7], [11], pos)
        assert m1 == pytest.approx(float(logits[7] - logits[11]), abs=1e-12) and torch.equal(d1, d2) and m1 == m2
        with pytest.raises(ValueError, match="both"):
            answer_direction(arch, dec, [3, 7], [7], pos)
        with pytest.raises(ValueError, match="empty"):
            answer_direction(arch, dec, [], [7], pos)
        c = Tracer(model).trace(random_prompt(12, seed=5), [3, 7, 9], [11, 2])
        assert c.meta["correct"] == [3, 7, 9] and c.logit_diff == pytest.approx(metric, abs=1e-12)
