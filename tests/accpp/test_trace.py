"""Whole-prompt tracing on tiny models: determinism, JSON round trip, seeds, variants, the
position-0 rule, threads, input checks and the memory limit."""
from __future__ import annotations

import pytest
import torch

from accpp.graph import load_circuit, same_graph, save_circuit, summary
from accpp.testing import float64_exact, random_prompt, tiny_model
from accpp.trace import TraceConfig, Tracer, TraceTooLarge, estimate_trace_gb, seeds, torch_threads


@pytest.fixture(scope="module", params=[(f, v) for f in ("llama", "gemma3_text", "gpt2")
                                        for v in ("authors", "per-position")], ids=lambda p: "-".join(p))
def circuit_pair(request):
    family, variant = request.param
    with float64_exact():
        model = tiny_model(family, seed=3)
        tracer = Tracer(model, config=TraceConfig(variant=variant, expand_layer0=True))
        ids = random_prompt(12, seed=5)
        c1 = tracer.trace(ids, correct=7, wrong=11)
        c2 = tracer.trace(ids, correct=7, wrong=11)
    return family, c1, c2


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
        for key in ("attribution", "drop", "weight"):
            assert isinstance(d[key], float)
        if d["side"] == "seed":
            assert d["weight"] == d["attribution"]
    assert c1.meta["variant"] == c1.meta["config"]["variant"] and c1.meta["threads"] == 1


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
    from accpp.trace import TokenSet, answer_direction

    with float64_exact():
        model = tiny_model(family, seed=3)
        arch = from_model(model)
        dec = Decomposition(arch, collect(model, arch, random_prompt(12, seed=5)))
        pos, L = dec.T - 1, arch.n_layers
        vecs, _ = dec.components(L, pos)
        logits = dec.acts.logits
        direction, metric = answer_direction(arch, dec, TokenSet([3, 7, 9]), TokenSet([11, 2]), pos)
        assert metric == pytest.approx(float(logits[[3, 7, 9]].mean() - logits[[11, 2]].mean()), abs=1e-12)
        # the components' projections add up to the metric (no unembedding bias in these families)
        assert float((vecs @ direction).sum()) == pytest.approx(metric, abs=1e-9)
        # single tokens: the plain logit difference; a list of one id is that id
        d1, m1 = answer_direction(arch, dec, 7, 11, pos)
        d2, m2 = answer_direction(arch, dec, [7], torch.tensor([11]), pos)
        assert m1 == pytest.approx(float(logits[7] - logits[11]), abs=1e-12) and torch.equal(d1, d2) and m1 == m2
        with pytest.raises(ValueError, match="both"):
            answer_direction(arch, dec, TokenSet([3, 7]), 7, pos)
        with pytest.raises(ValueError, match="empty"):
            answer_direction(arch, dec, [], 7, pos)
        c = Tracer(model).trace(random_prompt(12, seed=5), TokenSet([3, 7, 9]), TokenSet([11, 2]))
        assert c.meta["correct"] == [3, 7, 9] and c.logit_diff == pytest.approx(metric, abs=1e-12)


def test_invalid_variant_is_refused():
    from accpp.signals import FiringSolver

    with pytest.raises(ValueError, match="unknown tracer variant 'author'.*'authors'.*'per-position'"):
        TraceConfig(variant="author")
    with pytest.raises(ValueError, match="unknown tracer variant"):
        FiringSolver(None, None, variant="per_position")
    assert TraceConfig().variant == "authors"  # the default reproduces the authors' tracer
    with pytest.raises(ValueError, match="threads"):
        TraceConfig(threads=0)
    with pytest.raises(ValueError, match="max_memory_gb"):
        TraceConfig(max_memory_gb=-1.0)


@pytest.fixture(scope="module")
def llama_tracer():
    with float64_exact():
        yield Tracer(tiny_model("llama", seed=3), config=TraceConfig(expand_layer0=True))


def test_position0_rule():
    """authors: firings whose source is token 0 are expanded (stop at layer 0 and destination 0
    only); per-position: they are not, unless expand_position0=True."""
    from accpp.decompose import visible

    ids = random_prompt(12, seed=1)
    with float64_exact():
        model = tiny_model("llama", seed=3)
        graphs = {}
        for name, cfg in (("authors", TraceConfig()), ("pp", TraceConfig(variant="per-position")),
                          ("pp0", TraceConfig(variant="per-position", expand_position0=True))):
            tracer = Tracer(model, config=cfg)
            graphs[name] = (tracer, tracer.trace(ids, 7, 11).graph)
    n_src0 = 0
    for name, (tracer, g) in graphs.items():
        attn = tracer.decompose(ids).acts.attn
        for _, d in g.nodes(data=True):
            if d["kind"] != "head":
                continue
            n = len(visible(len(ids), d["dest"], None))
            eligible = d["layer"] > 0 and d["dest"] > 0 and float(attn[d["layer"], d["head"], d["dest"], d["src"]]) >= 2.5 / n
            if d["src"] == 0 and name == "pp":
                assert not d["traced"]
            else:
                assert d["traced"] == eligible, (name, d)
            n_src0 += d["src"] == 0 and eligible and name == "authors"
    assert n_src0 > 0  # the rule was exercised


def test_threads_are_set_and_restored(llama_tracer):
    ids = random_prompt(12, seed=5)
    with torch_threads(2):
        c = llama_tracer.trace(ids, 7, 11)
        assert c.meta["threads"] == 1 and torch.get_num_threads() == 2
        with torch_threads(None):
            assert torch.get_num_threads() == 2
    two = Tracer(llama_tracer.model, config=TraceConfig(expand_layer0=True, threads=2)).trace(ids, 7, 11)
    assert two.meta["threads"] == 2 and same_graph(two.graph, c.graph)


def test_input_checks(llama_tracer):
    ids = random_prompt(12, seed=5)
    with float64_exact():
        one = llama_tracer.trace(ids[None], 7, 11)  # a batch of one is one prompt
        assert same_graph(one.graph, llama_tracer.trace(ids.tolist(), 7, 11).graph)
        with pytest.raises(ValueError, match="a batch of 2 prompts.*one prompt at a time"):
            llama_tracer.trace(torch.stack([ids, ids]), 7, 11)
        with pytest.raises(ValueError, match="empty prompt"):
            llama_tracer.trace(torch.tensor([], dtype=torch.long), 7, 11)
        with pytest.raises(ValueError, match="empty prompt"):
            llama_tracer.trace([], 7, 11)
        with pytest.raises(TypeError, match="tokenize it first"):
            llama_tracer.trace("When Mary and John", 7, 11)
        with pytest.raises(TypeError, match="integer token ids"):
            llama_tracer.trace(ids.double(), 7, 11)
        with pytest.raises(ValueError, match=r"0\.\.60"):
            llama_tracer.trace(torch.tensor([1, 2, 61]), 7, 11)
        with pytest.raises(ValueError, match="position 12 is outside a 12-token prompt"):
            llama_tracer.trace(ids, 7, 11, position=12)
        with pytest.raises(ValueError, match=r"shape \(1, 1, 12\)"):
            llama_tracer.trace(ids[None, None], 7, 11)


def test_memory_limit_refuses_what_would_not_fit(llama_tracer):
    ids = random_prompt(12, seed=5)
    tiny = Tracer(llama_tracer.model, config=TraceConfig(max_memory_gb=0.01))
    with pytest.raises(TraceTooLarge, match=r"12-token prompt needs about .* GB .* limit of 0\.0 GB"):
        tiny.trace(ids, 7, 11)
    # the estimate grows as T^2 for long prompts, and the key side of per-position costs more
    arch = llama_tracer.arch
    e = [estimate_trace_gb(arch, T) for T in (16384, 32768)]
    assert 3.8 < e[1] / e[0] < 4.05
    assert estimate_trace_gb(arch, 512, "per-position") > estimate_trace_gb(arch, 512, "authors")
    assert llama_tracer.check_fits(12) < llama_tracer.memory_limit_gb()
