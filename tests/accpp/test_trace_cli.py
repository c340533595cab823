"""``compendium trace`` from the shell (subprocesses, on a tiny random model, and one on SmolLM2 marked
``models``), its option parsing and refusals in-process, and the prompt checks of ``Tracer.trace``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from accpp import trace_cli
from accpp.graph import load_circuit
from accpp.prompt_checks import PromptWarning, answer_space_problem, ends_in_whitespace, prompt_problems
from accpp.testing import tiny_model
from accpp.trace import TraceConfig, Tracer

ROOT = Path(__file__).resolve().parents[2]
TINY_PROMPT = "when mary and john went to the store john gave a drink to"


def _shell(*args, timeout=600):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "compendium", "trace", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)


@pytest.mark.slow
def test_trace_from_the_shell_on_a_tiny_model(tmp_path):
    out = tmp_path / "run"
    r = _shell(TINY_PROMPT, "--answer", "m", "--wrong", "j", "--model", "tiny:llama", "--set", "expand_layer0=true",
               "--set", "max_firings=5", "--out", str(out))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "tiny:llama: 57 tokens; answer 'm' (id 13) vs 'j' (id 10)"
    assert any(line.startswith("status: ") for line in lines)
    assert any(line.startswith("seeds: ") for line in lines)
    assert any(line.startswith("firings expanded: ") for line in lines)
    c = load_circuit(out / "circuit.json")
    assert c.meta["config"]["expand_layer0"] is True and c.meta["config"]["max_firings"] == 5
    assert c.n_firings <= 5 and c.meta["text"] == TINY_PROMPT and c.tokens[:4] == list("when")
    assert f"firings expanded: {c.n_firings}" in r.stdout
    assert f"seeds: {c.meta['n_seeds']} ({c.meta['n_head_seeds']} attention heads)" in r.stdout
    if c.status != "traced":
        assert f"status: {c.status} ({c.reason})" in r.stdout
    html = (out / "circuit.html").read_text(encoding="utf-8")
    assert "<html" in html.lower() and "A" in html

    # a refused answer of several tokens: exit 2, the pieces listed, the way to a set of tokens named
    r = _shell(TINY_PROMPT, "--answer", "ma", "--wrong", "j", "--model", "tiny:llama", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and r.stdout == ""
    assert "--answer 'ma' is 2 tokens for tiny:llama: ['m', 'a'] (ids [13, 1])" in r.stderr
    assert "TokenSet" in r.stderr
    assert not (tmp_path / "x").exists()  # nothing written


def _run(*argv):
    return trace_cli.main(list(argv))


@pytest.mark.parametrize("argv, message", [
    ([TINY_PROMPT + " ", "--answer", "m", "--wrong", "j"], "the prompt ends in whitespace"),
    ([TINY_PROMPT, "--answer", "m", "--wrong", "m"], "both the correct and the wrong answer"),
    ([TINY_PROMPT, "--answer", "m"], "give --wrong (or --seeding prob)"),
    ([TINY_PROMPT, "--answer", "m", "--wrong", "j", "--seeding", "prob"], "give no --wrong"),
    ([TINY_PROMPT, "--answer", "m", "--wrong", "j", "--set", "nope=1"], "TraceConfig has no field 'nope'"),
    ([TINY_PROMPT, "--answer", "m", "--wrong", "j", "--set", "max_firings=many"], "--set max_firings='many'"),
    ([TINY_PROMPT, "--answer", "m", "--wrong", "j", "--set", "expand_layer0"], "--set takes FIELD=VALUE"),
    ([TINY_PROMPT, "--answer", "m", "--wrong", "j", "--tau-factor", "-1"], "tau_factor must be a positive number"),
    ([TINY_PROMPT, "--answer", "", "--wrong", "j"], "is no token at all"),
    ([TINY_PROMPT, "--answer", "m", "--wrong", "j", "--bos"], "has no beginning-of-sequence token"),
    (["   ", "--answer", "m", "--wrong", "j"], "the prompt is empty"),
])
def test_refusals(argv, message, capsys, tmp_path):
    assert _run(*argv, "--model", "tiny:llama", "--out", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err
    assert err.startswith("compendium trace: ") and message in err
    assert not (tmp_path / "o").exists()


def test_out_may_not_be_a_source_folder(capsys):
    assert _run(TINY_PROMPT, "--answer", "m", "--wrong", "j", "--model", "tiny:llama", "--out", str(ROOT / "lib")) == 2
    assert "--out" in capsys.readouterr().err and not (ROOT / "lib" / "circuit.json").exists()


def test_trailing_space_allowed_on_request_and_options_reach_the_config(capsys, tmp_path):
    assert _run(TINY_PROMPT + " ", "--answer", "m", "--model", "tiny:gemma3_text", "--seeding", "prob",
                "--allow-trailing-space", "--tau-factor", "1.5", "--variant", "per-position", "--no-bos",
                "--set", "max_firings=none", "--set", "threads=1", "--out", str(tmp_path)) == 0
    c = load_circuit(tmp_path / "circuit.json")
    cfg = c.meta["config"]
    assert (cfg["seeding"], cfg["tau_factor"], cfg["variant"], cfg["max_firings"]) == ("prob", 1.5, "per-position", None)
    assert c.meta["wrong"] is None and len(c.tokens) == len(TINY_PROMPT) + 1
    assert json.loads((tmp_path / "circuit.json").read_text())["meta"]["answer"] == "m"


def test_parse_set_types():
    got = trace_cli.parse_set(["expand_layer0=yes", "max_firings=7", "prob_tau=0.5", "variant=per-position",
                               "expand_position0=none", "max_memory_gb=2"])
    assert got == dict(expand_layer0=True, max_firings=7, prob_tau=0.5, variant="per-position", expand_position0=None,
                       max_memory_gb=2.0)
    assert isinstance(got["max_memory_gb"], float) and isinstance(got["max_firings"], int)
    TraceConfig(**got)


def test_tau_factor_moves_the_threshold(exact):
    """tau(d) = min(1, factor / n), not the fixed 2.5 / n: at factor 1e-3 every traced firing's tau is below
    1e-3, and at least as many firings pass it as at 2.5."""
    from accpp.testing import random_prompt

    model = tiny_model("llama")
    ids = random_prompt(11)
    base = Tracer(model, config=TraceConfig(expand_layer0=True)).trace(ids, 11, 7)
    high = Tracer(model, config=TraceConfig(expand_layer0=True, tau_factor=1e-3)).trace(ids, 11, 7)
    taus = [d["tau"] for _, d in high.graph.nodes(data=True) if d.get("traced")]
    assert taus and all(t < 1e-3 for t in taus)
    assert high.n_firings >= base.n_firings


# ---------------------------------------------------------------- the prompt checks in Tracer.trace
class WordTokenizer:
    """Greedy longest-match over a few pieces (leading spaces inside the pieces, like BPE's): enough to
    make " mary" and "mary" two different single tokens."""

    pieces = ["<s>", " ", "when", " mary", "mary", " and", " john", "john", " to", " went", "x", "xy", "y"]
    bos_token_id = 0

    def __call__(self, text, add_special_tokens=True):
        ids, i = ([0] if add_special_tokens else []), 0
        while i < len(text):
            best = max((p for p in self.pieces[1:] if text.startswith(p, i)), key=len)
            ids.append(self.pieces.index(best))
            i += len(best)
        return {"input_ids": ids}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.pieces[int(i)] for i in ids if not (skip_special_tokens and int(i) == 0))


def test_prompt_checks_messages():
    tok = WordTokenizer()
    ids = tok("when mary and john went to")["input_ids"]
    assert ends_in_whitespace(tok, ids) is None
    assert ends_in_whitespace(tok, ids + [1]).startswith("the prompt ends in whitespace (")
    msg = answer_space_problem(tok, ids, 4)  # "mary" after "... to"
    assert msg == ("the correct answer 'mary' (token 4) has no leading space, but the prompt ends in 'o', so the next "
                   "word's token is the space-prefixed ' mary' (token 3): 'mary' would continue the prompt's last "
                   "word. Did you mean ' mary'?")
    assert answer_space_problem(tok, ids, 3) is None  # " mary": what the prompt implies
    assert answer_space_problem(tok, ids, 10) is None  # "x": " x" is two tokens, no single spaced form
    assert answer_space_problem(tok, ids + [1], 4) is None  # after a space the space-less form is right
    assert prompt_problems(None, ids, 4) == []
    assert len(prompt_problems(tok, ids + [1], 4, 7)) == 1
    assert len(prompt_problems(tok, ids, 4, 7)) == 2  # both answers lack the space


class BareTokenizer(WordTokenizer):
    """Without the keywords (``add_special_tokens``, ``skip_special_tokens``) some stand-ins lack."""

    def __call__(self, text):
        return super().__call__(text, add_special_tokens=False)

    def decode(self, ids):
        return super().decode(ids)


def test_prompt_checks_on_a_tokenizer_without_keywords():
    tok = BareTokenizer()
    ids = tok("when mary and john went to")["input_ids"]
    assert ends_in_whitespace(tok, ids) is None and ends_in_whitespace(tok, ids + [1]) is not None
    assert "Did you mean ' mary'?" in answer_space_problem(tok, ids, 4)


def test_tracer_warns_on_the_two_silent_mistakes(exact):
    tok = WordTokenizer()
    tracer = Tracer(tiny_model("llama"), tok)
    ids = tok("when mary and john went to")["input_ids"]
    with pytest.warns(PromptWarning, match="has no leading space"):
        tracer.trace(ids, 4, 6)
    with pytest.warns(PromptWarning, match="the prompt ends in whitespace"):
        tracer.trace(ids + [1], 4, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PromptWarning)
        tracer.trace(ids, 3, 6)  # " mary" vs " john": nothing to warn about
    from accpp.seeding import TokenSet

    with warnings.catch_warnings():  # a set of ids is not checked (Greater-Than's digits follow without a space)
        warnings.simplefilter("error", PromptWarning)
        tracer.trace(ids, TokenSet([4, 7]), TokenSet([6]))


# ---------------------------------------------------------------- the real model
@pytest.mark.models
def test_trace_the_readme_example_on_smollm2(tmp_path):
    prompt = "When Mary and John went to the store, John gave a drink to"
    r = _shell(prompt, "--answer", " Mary", "--wrong", " John", "--model", "smollm2-135m", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "status: traced" in r.stdout and "signal ranks: rank 1:" in r.stdout
    c = load_circuit(tmp_path / "circuit.json")
    assert c.status == "traced" and c.n_firings > 1 and c.logit_diff > 0
    assert f"firings expanded: {c.n_firings}" in r.stdout
    assert (tmp_path / "circuit.html").stat().st_size > 10_000
    # the two silent mistakes of before: refused / warned
    r = _shell(prompt + " ", "--answer", " Mary", "--wrong", " John", "--out", str(tmp_path / "a"))
    assert r.returncode == 2 and "the prompt ends in whitespace" in r.stderr
    r = _shell(prompt, "--answer", " Maryanne", "--wrong", " John", "--out", str(tmp_path / "b"))
    assert r.returncode == 2 and "['ĠMary', 'anne']" in r.stderr and "TokenSet" in r.stderr
    r = _shell(prompt, "--answer", "Mary", "--wrong", " John", "--out", str(tmp_path / "c"), "--set", "max_firings=1")
    assert r.returncode == 0 and "warning: the correct answer 'Mary'" in r.stderr and "Did you mean ' Mary'?" in r.stderr
