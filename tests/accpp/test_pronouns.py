"""Gendered pronouns: prompts (GPT-2 tokenizer from data/, and the offline models' tokenizers), the metric
on a stub model, tracing on a tiny model, and the name-path quantity on hand-built graphs."""
from __future__ import annotations


import networkx as nx
import pytest
import torch

from accpp import pronouns as pr
from accpp.datasets import MultiTokenName
from accpp.trace import Circuit


@pytest.fixture(scope="module")
def gpt2_tok():
    from transformers import PreTrainedTokenizerFast

    from compendium import paths

    return PreTrainedTokenizerFast(tokenizer_file=str(paths.data_dir() / "tokenizers" / "gpt2_tokenizer.json"))


def _offline_tokenizer(name: str):
    from transformers import AutoTokenizer

    from accpp import models

    folder = models.cached_folder(name)
    if not (folder / "config.json").exists():
        models.load_model(name)  # converts the offline model once
    return AutoTokenizer.from_pretrained(str(folder))


# ------------------------------------------------------------------ prompts

def test_prompt_text_positions_and_answers(gpt2_tok):
    p = pr.make_prompt(gpt2_tok, 1, "James", "male")
    assert p.text == "So James is such a hard worker, isn't"
    assert gpt2_tok.decode([p.input_ids[p.pos["name"]]]) == " James"
    assert p.pos["end"] == len(p.input_ids) - 1 and gpt2_tok.decode([p.input_ids[-1]]) == "'t"
    assert gpt2_tok.decode([p.correct_id]) == " he" and gpt2_tok.decode([p.wrong_id]) == " she"
    q = pr.make_prompt(gpt2_tok, 1, "Emma", "female")
    assert (q.correct_id, q.wrong_id) == (p.wrong_id, p.correct_id)


def test_full_grid_is_balanced_and_shares_one_layout(gpt2_tok):
    prompts = pr.pronoun_prompts(gpt2_tok)
    n_m = len(pr.usable_names(gpt2_tok, pr.MALE_NAMES))
    n_f = len(pr.usable_names(gpt2_tok, pr.FEMALE_NAMES))
    assert len(prompts) == len(pr.TEMPLATES) * (n_m + n_f)
    assert sum(p.gender == "male" for p in prompts) == len(pr.TEMPLATES) * n_m
    assert len({(len(p.input_ids), p.pos["name"]) for p in prompts}) == 1
    assert len({p.text for p in prompts}) == len(prompts)


def test_bad_inputs_are_refused_with_reasons(gpt2_tok):
    with pytest.raises(ValueError, match="gender"):
        pr.make_prompt(gpt2_tok, 0, "James", "boy")
    with pytest.raises(ValueError, match="outside"):
        pr.make_prompt(gpt2_tok, len(pr.TEMPLATES), "James", "male")
    with pytest.raises(ValueError, match="exactly once"):
        pr.make_prompt(gpt2_tok, 0, "James", "male", templates=("So {name} and {name}, isn't",))
    with pytest.raises(ValueError, match="whitespace"):
        pr.make_prompt(gpt2_tok, 0, "James", "male", templates=("So {name} is nice, isn't ",))
    with pytest.raises(MultiTokenName, match="Xzqwvbn"):
        pr.make_prompt(gpt2_tok, 0, "Xzqwvbn", "male")
    with pytest.raises(ValueError, match="single tokens"):
        pr.pronoun_prompts(gpt2_tok, male=("Xzqwvbn", "James"), min_names=2)


def test_balanced_sample_is_seeded_and_balanced(gpt2_tok):
    prompts = pr.pronoun_prompts(gpt2_tok)
    a, b = pr.balanced_sample(prompts, 7, seed=3), pr.balanced_sample(prompts, 7, seed=3)
    assert a == b and len(set(a)) == 7
    assert sum(p.gender == "male" for p in a) == 4
    assert len({p.template for p in a if p.gender == "male"}) == 4  # round-robin over templates
    assert pr.balanced_sample(prompts, 7, seed=4) != a
    with pytest.raises(ValueError, match="only"):
        pr.balanced_sample(prompts, 2 * len(prompts), seed=0)


@pytest.mark.models
@pytest.mark.parametrize("model_name", ["smollm2-135m", "gemma-3-270m"])
def test_offline_tokenizers_take_every_name_and_pronoun(model_name):
    tok = _offline_tokenizer(model_name)
    assert pr.usable_names(tok, pr.MALE_NAMES) == list(pr.MALE_NAMES)
    assert pr.usable_names(tok, pr.FEMALE_NAMES) == list(pr.FEMALE_NAMES)
    prompts = pr.pronoun_prompts(tok)
    assert len({(len(p.input_ids), p.pos["name"]) for p in prompts}) == 1  # one layout per tokenizer
    for p in prompts[:: len(pr.TEMPLATES) + 1]:
        assert tok.decode([p.input_ids[p.pos["name"]]]).strip() == p.name
        assert tok.decode(p.input_ids, skip_special_tokens=True) == p.text
    assert tok.decode([pr.pronoun_id(tok, "male")]) == " he" and tok.decode([pr.pronoun_id(tok, "female")]) == " she"


# ------------------------------------------------------------------ metric

class _StubLM(torch.nn.Module):
    """Last-position logits read from a table keyed by the prompt's name token."""

    def __init__(self, table: dict[int, dict[int, float]], vocab: int):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.table, self.vocab, self.name_pos = table, vocab, None

    def forward(self, ids):
        out = torch.zeros(ids.shape[0], ids.shape[1], self.vocab)
        for b in range(ids.shape[0]):
            for tok, v in self.table[int(ids[b, self.name_pos])].items():
                out[b, -1, tok] = v
        return type("Out", (), {"logits": out})()


def test_metric_signs_and_accuracy(gpt2_tok):
    ps = [pr.make_prompt(gpt2_tok, 0, "James", "male"), pr.make_prompt(gpt2_tok, 0, "Emma", "female"),
          pr.make_prompt(gpt2_tok, 2, "Kate", "female")]
    he, she = ps[0].correct_id, ps[0].wrong_id
    ids = {p.name: p.input_ids[p.pos["name"]] for p in ps}
    stub = _StubLM({ids["James"]: {he: 3.0, she: 1.0}, ids["Emma"]: {he: 0.5, she: 2.0},
                    ids["Kate"]: {he: 4.0, she: 1.0}}, vocab=len(gpt2_tok))
    stub.name_pos = ps[0].pos["name"]
    m = pr.evaluate(stub, ps)
    assert m.logit_diff.tolist() == [2.0, 1.5, -3.0]
    assert m.accuracy == pytest.approx(2 / 3)
    s = m.summary()
    assert s["logit_diff_male"] == 2.0 and s["logit_diff_female"] == pytest.approx(-0.75)


# ------------------------------------------------------------------ tracing on a tiny model

class _TinyTok:
    """Word-level tokenizer over the tiny models' 61-token vocabulary (ids by first appearance)."""

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def _id(self, piece):
        if piece not in self.vocab:
            assert len(self.vocab) < 61
            self.vocab[piece] = len(self.vocab)
        return self.vocab[piece]

    def __call__(self, text, add_special_tokens=True, return_offsets_mapping=False):
        import re

        pieces = [(m.group(), m.start(), m.end()) for m in re.finditer(r" ?[^ ]+", text)]
        from transformers import BatchEncoding

        out = {"input_ids": [self._id(p) for p, _, _ in pieces]}
        if return_offsets_mapping:
            out["offset_mapping"] = [(a, b) for _, a, b in pieces]
        return BatchEncoding(out)

    def convert_ids_to_tokens(self, i):
        return {v: k for k, v in self.vocab.items()}[i]

    def decode(self, ids):
        inv = {v: k for k, v in self.vocab.items()}
        return "".join(inv[int(i)] for i in ids)


def test_trace_on_a_tiny_model_records_the_prompt(exact):
    from accpp.testing import tiny_model
    from accpp.trace import Tracer

    tok = _TinyTok()
    model = tiny_model("llama")
    tracer = Tracer(model, tok)
    p = pr.make_prompt(tok, 0, "James", "male")
    ld = float(pr.evaluate(model, [p]).logit_diff[0])
    if ld < 0:  # the random model prefers " she": trace the prompt whose answer it prefers
        p = pr.make_prompt(tok, 0, "James", "female")
    c = pr.trace_pronoun(tracer, p)
    assert c.logit_diff == pytest.approx(abs(ld), rel=1e-9)
    assert c.meta["pos"] == p.pos and c.meta["name"] == "James" and c.meta["text"] == p.text
    assert c.meta["family"] == "so" and c.meta["spans"] == {"name": [1, 2]}
    seeds = pr.head_seeds(c.graph)
    assert seeds and sum(a for _, a in seeds if a > 0) > 0
    res = pr.circuit_name_paths(c)
    assert res["name_span"] == [1, 2] == [p.pos["name"], p.pos["name"] + 1]
    assert 0 <= res["direct_name_share"] <= res["name_path_share"] <= 1
    assert set(res["position_shares"]) == set(range(2, len(p.input_ids) - 1))
    assert len(pr.name_path_table([c])) == 1
    # the size table labels the ACC++ circuit's status; a circuit of the unpreferred pronoun is empty
    other = pr.make_prompt(tok, 0, "James", "female" if p.gender == "male" else "male")
    empty = pr.trace_pronoun(tracer, other)
    assert pr.size_row(p, c, c)["accpp_status"] == c.status == "tau_cut"  # head seeds, none above tau here
    assert pr.size_row(other, empty, c)["accpp_status"] == "negative_logit_diff" == empty.status


# ------------------------------------------------------------------ name paths on hand-built graphs

def _head(g, layer, head, dest, src):
    nid = f"A{layer}.{head}@{dest}<{src}"
    g.add_node(nid, kind="head", layer=layer, head=head, dest=dest, src=src)
    return nid


def _circuit(seeds, upstream, T=6, name=1, span=None, family="so", gender="male"):
    """seeds: [(layer, head, src, attribution)]; upstream: [((layer, head, dest, src), seed index)]."""
    g = nx.MultiDiGraph()
    g.add_node(f"LOGITS@{T - 1}", kind="logits", layer=9, head=-1, dest=T - 1, src=-1)
    ids = []
    for layer, head, src, a in seeds:
        u = _head(g, layer, head, T - 1, src)
        g.add_edge(u, f"LOGITS@{T - 1}", side="seed", attribution=a)
        ids.append(u)
    g.add_node(f"M3@{T - 1}", kind="mlp", layer=3, head=-1, dest=T - 1, src=-1)
    g.add_edge(f"M3@{T - 1}", f"LOGITS@{T - 1}", side="seed", attribution=5.0)  # not a head: ignored
    for (layer, head, dest, src), k in upstream:
        g.add_edge(_head(g, layer, head, dest, src), ids[k], side="s", attribution=0.1)
    meta = {"pos": {"name": name, "end": T - 1}, "family": family, "gender": gender, "text": f"{family} {T}"}
    if span is not None:
        meta["spans"] = {"name": list(span)}
    return Circuit(g, [f"t{i}" for i in range(T)], 1.0, 0.0, 0, meta)


def test_name_paths_by_hand():
    # seed 0 reads token 2, which an upstream head filled from the name (1): reaches 2 and 1
    # seed 1 reads the name directly; seed 2 reads token 3 only; seed 3 is negative (ignored)
    c = _circuit([(5, 0, 2, 2.0), (5, 1, 1, 1.0), (4, 0, 3, 1.0), (4, 1, 1, -3.0)], [((2, 0, 2, 1), 0)])
    r = pr.circuit_name_paths(c)
    assert r["name_path_share"] == pytest.approx(3 / 4)
    assert r["direct_name_share"] == pytest.approx(1 / 4)
    assert r["position_shares"] == pytest.approx({2: 2 / 4, 3: 1 / 4, 4: 0.0})
    assert r["name_path_margin"] == pytest.approx(3 / 4 - 2 / 4) and r["top_other"] == 2
    assert (r["name_reach"], r["head_seed_total"]) == (3.0, 4.0)
    assert pr.circuit_name_paths(_circuit([(5, 0, 1, -1.0)], [])) is None  # no positive head seed


def test_name_paths_count_a_name_of_several_tokens_once():
    """A name spanning tokens 1-2: a seed reading either reaches the name (once, not twice), and
    neither token is an 'other' position; position 0 never is."""
    c = _circuit([(5, 0, 2, 1.0), (5, 1, 1, 1.0), (4, 0, 3, 2.0), (4, 1, 0, 4.0)], [((2, 0, 3, 2), 2)], T=7, name=2,
                 span=(1, 3))
    r = pr.circuit_name_paths(c)
    assert r["name_path_share"] == pytest.approx(4 / 8)  # seeds 0, 1 and (through its ancestor) 2
    assert r["direct_name_share"] == pytest.approx(2 / 8)
    assert set(r["position_shares"]) == {3, 4, 5} and r["position_shares"][3] == pytest.approx(2 / 8)
    assert r["name_path_margin"] == pytest.approx(4 / 8 - 2 / 8)
    with pytest.raises(ValueError, match="answer position"):
        pr.circuit_name_paths(_circuit([(5, 0, 1, 1.0)], [], T=4, span=(1, 4)))


def test_name_path_table_and_summary():
    a = _circuit([(5, 0, 1, 3.0), (5, 1, 3, 1.0)], [], family="authors")  # share 3/4, margin 3/4 - 1/4
    b = _circuit([(5, 0, 3, 1.0)], [], family="other", gender="female")  # share 0, margin -1
    empty = _circuit([(5, 0, 1, -1.0)], [])
    t = pr.name_path_table([a, b, empty])
    assert t["family"].tolist() == ["authors", "other"] and t["gender"].tolist() == ["male", "female"]
    assert t["name_path_share"].tolist() == pytest.approx([0.75, 0.0])
    assert t["name_path_margin"].tolist() == pytest.approx([0.5, -1.0])
    assert t["top_other_token"].tolist() == ["t3", "t3"] and t["top_other_share"].tolist() == pytest.approx([0.25, 1.0])
    s = pr.name_path_summary(t)
    assert s["n"] == 2 and s["name_path_share"] == pytest.approx(0.375) and s["name_path_margin"] == pytest.approx(-0.25)
    assert s["pooled_name_path_share"] == pytest.approx(3 / 5)  # by attribution: 3 of 4 + 1
    assert s["top_other_tokens"] == "'t3' x2"
    assert list(pr.name_path_table([empty]).columns) == list(t.columns)
    with pytest.raises(ValueError, match="no circuits"):
        pr.name_path_summary(t.iloc[:0])


# ------------------------------------------------------------------ samples over families

def test_family_sample_spreads_over_families_and_genders(gpt2_tok):
    from accpp import families as fam

    prompts = fam.pronoun_families_set(gpt2_tok, ["authors", "so", "other"], min_names=4)
    got = pr.family_sample(prompts, ["authors", "so", "other"], 6, seed=1)
    assert got == pr.family_sample(prompts, ["authors", "so", "other"], 6, seed=1) and len(set(got)) == 18
    assert got != pr.family_sample(prompts, ["authors", "so", "other"], 6, seed=2)
    assert [p.family for p in got[:6]] == ["authors", "so", "other"] * 2  # every prefix spread over families
    for f in ("authors", "so", "other"):
        own = [p for p in got if p.family == f]
        assert [p.gender for p in own] == ["male", "female"] * 3  # alternating, so prefixes are balanced too
        assert len({p.template for p in own if p.gender == "male"}) == 3  # round-robin over templates
    with pytest.raises(ValueError, match="family 'sentence'.*only 0"):
        pr.family_sample(prompts, ["authors", "sentence"], 2, seed=0)
    with pytest.raises(ValueError, match="distinct families"):
        pr.family_sample(prompts, ["so", "so"], 2, seed=0)


def test_metrics_by_family(gpt2_tok):
    m = pr.PronounMetrics(torch.tensor([2.0, -1.0, 3.0, 1.0], dtype=torch.float64), torch.tensor([1, 0, 1, 0]).bool(),
                          ("a", "b", "a", "b"))
    assert m.by_family() == {"a": dict(n=2, logit_diff=2.5, accuracy=1.0), "b": dict(n=2, logit_diff=0.0, accuracy=0.5)}
    with pytest.raises(ValueError, match="no family"):
        pr.PronounMetrics(m.logit_diff, m.male).by_family()


# ------------------------------------------------------------------ measurements

def _sizes(ratios, family="so", trunc=False):
    import pandas as pd

    return pd.DataFrame([dict(ratio=r, accpp_nodes=10, acc_nodes=10 * r, acc_truncated=trunc, family=family)
                         for r in ratios])


def test_measure_behaviour_takes_the_worst_model_with_its_interval():
    from compendium.stats import bootstrap_mean_ci
    from tests.ledger_helpers import fits_ledger

    m1 = pr.PronounMetrics(torch.tensor([2.0, 1.0, -1.0, 3.0], dtype=torch.float64), torch.tensor([1, 1, 0, 0]).bool(),
                           ("x", "x", "y", "y"))
    m2 = pr.PronounMetrics(torch.tensor([1.0, 1.0], dtype=torch.float64), torch.tensor([1, 0]).bool(), ("x", "y"))
    b = pr.measure_behaviour({"a": m1, "b": m2}, n_boot=300, seed=4)
    assert b.values["logit_diff"] == pytest.approx(1.0) and b.values["accuracy"] == pytest.approx(0.75)
    assert (b.values["logit_diff_ci_low"], b.values["logit_diff_ci_high"]) == bootstrap_mean_ci([1.0, 1.0], 300, 4)
    assert (b.values["accuracy_ci_low"], b.values["accuracy_ci_high"]) == bootstrap_mean_ci([1, 1, 0, 1], 300, 4)
    assert b.evidence["per_family"]["a"]["y"] == dict(n=2, logit_diff=1.0, accuracy=0.5)
    assert b.evidence["min_family_accuracy"] == 0.5
    fits_ledger(b)


def test_measure_size_ratio_is_a_geometric_mean_with_intervals():
    from compendium.stats import geometric_mean_ci
    from tests.ledger_helpers import fits_ledger

    a = pd_concat([_sizes([3.0, 5.0], "so"), _sizes([15.0], "other")])
    b = _sizes([20.0, 20.0, 20.0], trunc=True)
    s = pr.measure_size_ratio({"a": a, "b": b}, accuracy=0.9, n_boot=300, seed=1)
    assert s.values["size_ratio"] == pytest.approx((3 * 5 * 15 * 20 ** 3) ** (1 / 6))
    assert (s.values["size_ratio_ci_low"], s.values["size_ratio_ci_high"]) == pytest.approx(
        geometric_mean_ci([3, 5, 15, 20, 20, 20], 300, 1))
    assert s.values["size_ratio_min_model"] == pytest.approx(225 ** (1 / 3))
    assert (s.values["size_ratio_min_model_ci_low"], s.values["size_ratio_min_model_ci_high"]) == pytest.approx(
        geometric_mean_ci([3, 5, 15], 300, 1))
    assert s.values["size_ratio_max_model"] == pytest.approx(20.0)
    assert s.values["size_ratio_max_model_ci_low"] == pytest.approx(20.0)
    assert s.values["n_compared_min_model"] == 3 and s.values["acc_truncated"] is True
    assert s.evidence["per_family"]["other"]["size_ratio"] == pytest.approx(15.0)
    assert s.evidence["per_family"]["so"]["n"] == 5  # model a's 2 and model b's 3
    assert s.evidence["arithmetic_mean_ratio"] == pytest.approx(83 / 6)
    assert s.evidence["direction"] in ("above", "straddles")
    assert "n_accpp_not_traced" not in s.evidence  # the tables carry no status
    st = pr.measure_size_ratio({"a": a.assign(accpp_status=["traced", "tau_cut", "traced"])}, accuracy=0.9)
    assert st.evidence["n_accpp_not_traced"] == 1
    assert st.evidence["size_ratio_traced_only"] == pytest.approx(45 ** 0.5)
    fits_ledger(s)
    with pytest.raises(ValueError, match="no compared"):
        pr.measure_size_ratio({"a": _sizes([])}, accuracy=1.0)
    with pytest.raises(ValueError, match="not finite and positive"):
        pr.measure_size_ratio({"a": _sizes([3.0, float("inf")])}, accuracy=1.0)


def test_measure_name_paths_means_over_circuits_with_intervals():
    from compendium.stats import bootstrap_mean_ci
    from tests.ledger_helpers import fits_ledger

    circ_a = [_circuit([(5, 0, 1, 3.0), (5, 1, 3, 1.0)], [], family="so"),  # share 0.75, margin 0.5
              _circuit([(5, 0, 1, 1.0)], [], family="other")]  # share 1, margin 1
    circ_b = [_circuit([(5, 0, 1, 1.0), (5, 1, 2, 3.0)], [], family="so"),  # share 0.25, margin -0.5
              _circuit([(5, 0, 3, 1.0)], [], family="so"),  # share 0, margin -1
              _circuit([(5, 0, 1, 1.0)], [], family="other")]  # share 1, margin 1
    n = pr.measure_name_paths({"a": pr.name_path_table(circ_a), "b": pr.name_path_table(circ_b)}, accuracy=1.0,
                              n_boot=300, seed=2)
    assert n.values["name_path_share"] == pytest.approx(1.25 / 3) and n.values["name_path_margin"] == pytest.approx(-0.5 / 3)
    assert (n.values["name_path_share_ci_low"], n.values["name_path_share_ci_high"]) == bootstrap_mean_ci(
        [0.25, 0.0, 1.0], 300, 2)
    assert (n.values["name_path_margin_ci_low"], n.values["name_path_margin_ci_high"]) == bootstrap_mean_ci(
        [-0.5, -1.0, 1.0], 300, 2)
    assert n.values["n_circuits_min_model"] == 2
    assert n.evidence["per_family"]["b"]["so"]["name_path_share"] == pytest.approx(0.125)
    assert n.evidence["per_model"]["a"]["pooled_name_path_share"] == pytest.approx(4 / 5)
    fits_ledger(n)
    with pytest.raises(ValueError, match="no circuit with a head seed"):
        pr.measure_name_paths({"a": pr.name_path_table([])}, accuracy=1.0)


def pd_concat(frames):
    import pandas as pd

    return pd.concat(frames, ignore_index=True)
