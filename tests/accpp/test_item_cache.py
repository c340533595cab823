"""accpp.item_cache on a tiny random float64 Llama: traced IOI circuits (accpp.ioi.trace_many) and per-prompt
intervention rows (accpp.intervention_summary.intervention_rows) read back from the cache equal the computed
ones exactly; any change of model, TraceConfig, code or prompt misses; damaged or edited files are
recomputed; a loop stopped after k items and run again computes only the others and gives the values of
an uninterrupted run."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from accpp import intervention_summary, ioi, item_cache
from accpp.datasets import IOIPrompt
from accpp.graph import signal_ranks
from accpp.item_cache import ItemCache, ItemCacheError
from accpp.testing import random_prompt, tiny_model
from accpp.trace import TraceConfig, Tracer

N = 4
EDGES, N_RANDOM, SEED, CONTROLS = 2, 2, 3, ("random", "random_score")


def _tracer(seed: int = 3, **config) -> Tracer:
    return Tracer(tiny_model("llama", seed=seed), config=TraceConfig(expand_layer0=True, **config))


def _prompts(model, n: int = N) -> list[IOIPrompt]:
    """Random 10-token prompts; the "IO" is the model's most likely next token, the "S" its least likely
    (so that the logit difference is positive and a circuit is traced)."""
    out = []
    for k in range(n):
        ids = random_prompt(10, seed=20 + k)
        with torch.no_grad():
            logits = model(ids[None]).logits[0, -1]
        io, s = int(logits.argmax()), int(logits.argmin())
        out.append(IOIPrompt(text=f"prompt {k}", io=f"t{io}", s=f"t{s}", order="ABBA" if k % 2 == 0 else "BABA",
                             template=k, io_id=io, s_id=s, input_ids=tuple(int(i) for i in ids),
                             pos={"IO": 1, "S1": 2, "S2": 6, "S1+1": 3, "END": 9}))
    return out


def _json(c) -> dict:
    """A circuit as its JSON object without the trace's wall time."""
    return {k: v for k, v in json.loads(json.dumps(c.to_json())).items() if k != "seconds"}


def _count_traces(monkeypatch, tracer, stop_after: int | None = None) -> list:
    """Count tracer.trace calls (raising KeyboardInterrupt once ``stop_after`` calls have been made)."""
    calls, real = [], tracer.trace

    def counted(*a, **kw):
        if stop_after is not None and len(calls) >= stop_after:
            raise KeyboardInterrupt("stopped")
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(tracer, "trace", counted)
    return calls


@pytest.fixture(scope="module")
def setup(exact):
    tracer = _tracer()
    prompts = _prompts(tracer.model)
    circuits = ioi.trace_many(tracer, prompts)  # no cache: as the notebooks traced before
    rows = intervention_summary.intervention_rows(tracer, prompts, circuits, EDGES, N_RANDOM, SEED, CONTROLS)
    return tracer, prompts, circuits, rows


def test_the_planted_prompts_give_traced_circuits_and_rows(setup):
    _, prompts, circuits, rows = setup
    assert [c.status for c in circuits] == ["traced"] * N and all(signal_ranks(c.graph) for c in circuits)
    assert {r["prompt"] for r in rows} == set(range(N)) and len(rows) == N * EDGES * (1 + len(CONTROLS) * N_RANDOM)


def test_cached_circuits_equal_computed_ones_exactly(setup, tmp_path, monkeypatch):
    tracer, prompts, circuits, _ = setup
    cache = ItemCache(tmp_path)
    first = ioi.trace_many(tracer, prompts, cache=cache)
    assert (cache.hits, cache.misses) == (0, N) and len(list((tmp_path / "ioi-circuits").glob("*.json"))) == N
    calls = _count_traces(monkeypatch, tracer)
    again = ioi.trace_many(tracer, prompts, cache=cache)
    assert calls == [] and (cache.hits, cache.misses) == (N, N)
    for c0, c1, c2 in zip(circuits, first, again):
        assert c1.to_json() == c2.to_json()  # seconds included: the stored circuit itself
        assert _json(c1) == _json(c0)
        for a, b in ((c0, c2), (c1, c2)):
            assert dict(a.graph.nodes(data=True)) == dict(b.graph.nodes(data=True))
            assert list(a.graph.edges(keys=True, data=True)) == list(b.graph.edges(keys=True, data=True))
            assert (a.tokens, a.logit_diff, a.n_firings, a.meta) == (b.tokens, b.logit_diff, b.n_firings, b.meta)


def test_cached_intervention_rows_equal_computed_ones_exactly(setup, tmp_path, monkeypatch):
    tracer, prompts, circuits, rows = setup
    cache = ItemCache(tmp_path)
    cached_circuits = ioi.trace_many(tracer, prompts, cache=cache)
    first = intervention_summary.intervention_rows(tracer, prompts, cached_circuits, EDGES, N_RANDOM, SEED, CONTROLS,
                                                   cache=cache)
    monkeypatch.setattr(intervention_summary, "Intervener", None)  # nothing may be recomputed
    again = intervention_summary.intervention_rows(tracer, prompts, cached_circuits, EDGES, N_RANDOM, SEED, CONTROLS,
                                                   cache=cache)
    assert first == again == rows
    assert json.dumps(again) == json.dumps(rows)  # the same values, keys in the same order, exactly
    assert (cache.hits, cache.misses) == (N, 2 * N)


def _misses(tracer, prompts, cache) -> int:
    before = cache.misses
    ioi.trace_many(tracer, prompts, cache=cache)
    return cache.misses - before


def test_a_changed_config_model_code_or_prompt_misses(setup, tmp_path, monkeypatch):
    tracer, prompts, *_ = setup
    cache = ItemCache(tmp_path)
    assert _misses(tracer, prompts, cache) == N and _misses(tracer, prompts, cache) == 0
    # any TraceConfig field, even one that does not change the circuit
    assert _misses(_tracer(tau_factor=2.0), prompts, cache) == N
    assert _misses(_tracer(threads=2), prompts, cache) == N
    # another model with the same architecture
    assert _misses(_tracer(seed=4), prompts[:1], cache) == 1
    # a prompt with one token changed, or another answer
    p = prompts[0]
    ids = list(p.input_ids)
    ids[3] = (ids[3] + 1) % 61
    moved = IOIPrompt(**{**p.__dict__, "input_ids": tuple(ids)})
    other = IOIPrompt(**{**p.__dict__, "s_id": (p.s_id + 1) % 61 if (p.s_id + 1) % 61 != p.io_id else p.s_id + 2})
    assert _misses(tracer, [moved, other, p], cache) == 2
    # another code fingerprint
    monkeypatch.setattr(item_cache, "code_fingerprint", lambda *mods: "0" * 64)
    assert _misses(tracer, prompts, cache) == N


def test_the_code_fingerprint_covers_the_modules_imported_transitively(monkeypatch):
    base = item_cache.code_fingerprint("accpp.ioi")
    assert base == item_cache.code_fingerprint("accpp.ioi") and base != item_cache.code_fingerprint("accpp.graph")
    real = Path.read_bytes

    def edited(self):  # signals.py, imported by trace.py, which ioi.py imports, with one more line
        return real(self) + (b"\n# edited\n" if self.name == "signals.py" and self.parent.name == "accpp" else b"")

    monkeypatch.setattr(Path, "read_bytes", edited)
    assert item_cache.code_fingerprint("accpp.ioi") != base
    assert item_cache.code_fingerprint("accpp.datasets") == item_cache.code_fingerprint("accpp.datasets")
    with pytest.raises(ValueError, match="'accpp.nothing' is not an accpp module"):
        item_cache.code_fingerprint("accpp.nothing")


def test_a_truncated_edited_or_foreign_file_is_recomputed(setup, tmp_path, monkeypatch, caplog):
    tracer, prompts, *_ = setup
    cache = ItemCache(tmp_path)
    good = [_json(c) for c in ioi.trace_many(tracer, prompts, cache=cache)]
    files = [cache.path("ioi-circuits", _key(tracer, p)) for p in prompts]
    assert all(f.exists() for f in files)
    files[0].write_text(files[0].read_text()[:-40])  # cut short
    record = json.loads(files[1].read_text())
    record["value"]["logit_diff"] += 1.0  # a value edited, the file still valid JSON
    files[1].write_text(json.dumps(record))
    files[2].write_text(files[3].read_text())  # another prompt's item under this key
    calls = _count_traces(monkeypatch, tracer)
    again = ioi.trace_many(tracer, prompts, cache=cache)
    assert len(calls) == 3 and [_json(c) for c in again] == good
    assert "not valid" in caplog.text or "unreadable" in caplog.text
    assert "checksum" in caplog.text and "another key" in caplog.text
    # the recomputed items were written back: a third pass reads all four
    assert len(calls) == 3 and [_json(c) for c in ioi.trace_many(tracer, prompts, cache=cache)] == good


def _key(tracer, p) -> dict:
    """The key trace_many uses (checked against its files by the test above)."""
    return item_cache.base_key(tracer, "accpp.ioi") | item_cache.prompt_key(p)


@pytest.mark.parametrize("k", [0, 1, 3])
def test_a_trace_loop_stopped_after_k_prompts_then_rerun_traces_only_the_rest(setup, tmp_path, monkeypatch, k):
    tracer, prompts, circuits, _ = setup
    cache = ItemCache(tmp_path)
    _count_traces(monkeypatch, tracer, stop_after=k)
    with pytest.raises(KeyboardInterrupt):
        ioi.trace_many(tracer, prompts, cache=cache)
    monkeypatch.undo()
    assert len(list((tmp_path / "ioi-circuits").glob("*.json"))) == k
    calls = _count_traces(monkeypatch, tracer)
    resumed = ioi.trace_many(tracer, prompts, cache=ItemCache(tmp_path))  # a new process's cache object
    assert len(calls) == N - k
    assert [_json(c) for c in resumed] == [_json(c) for c in circuits]


@pytest.mark.parametrize("k", [1, 2])
def test_an_intervention_loop_stopped_after_k_prompts_then_rerun_computes_only_the_rest(setup, tmp_path, monkeypatch,
                                                                                       k):
    tracer, prompts, circuits, rows = setup
    cached_circuits = ioi.trace_many(tracer, prompts, cache=ItemCache(tmp_path))
    real, made, stop = intervention_summary.Intervener, [], [k]

    def stopping(*a, **kw):  # one Intervener per prompt
        if stop and len(made) >= stop[0]:
            raise KeyboardInterrupt("stopped")
        made.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(intervention_summary, "Intervener", stopping)
    with pytest.raises(KeyboardInterrupt):
        intervention_summary.intervention_rows(tracer, prompts, cached_circuits, EDGES, N_RANDOM, SEED, CONTROLS,
                                               cache=ItemCache(tmp_path))
    assert len(made) == k and len(list((tmp_path / "intervention-rows").glob("*.json"))) == k
    made.clear()
    stop.clear()  # no stop this time
    resumed = intervention_summary.intervention_rows(tracer, prompts, cached_circuits, EDGES, N_RANDOM, SEED,
                                                     CONTROLS, cache=ItemCache(tmp_path))
    assert len(made) == N - k and resumed == rows


def test_for_run_outside_a_runner_is_none_unless_asked(tmp_path, monkeypatch):
    from compendium import runs

    monkeypatch.delenv(runs.NOTEBOOK_ENV, raising=False)
    monkeypatch.delenv(item_cache.ENV, raising=False)
    monkeypatch.setenv(runs.RUN_ENV, str(tmp_path / "run"))
    assert item_cache.for_run() is None
    assert item_cache.for_run(enabled=True).folder == (tmp_path / "run" / "items" / "interactive").resolve()
    monkeypatch.setenv(item_cache.ENV, "1")
    assert item_cache.for_run() is not None and item_cache.for_run(enabled=False) is None
    monkeypatch.delenv(item_cache.ENV)
    monkeypatch.setenv(runs.NOTEBOOK_ENV, "accpp/04_signal_interventions")
    assert item_cache.for_run().folder == (tmp_path / "run" / "items" / "accpp__04_signal_interventions").resolve()


def test_an_unwritable_folder_is_a_clear_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ItemCacheError, match="the item cache folder .*a-file/items cannot be written"):
        ItemCache(blocker / "items")


def test_pronoun_circuits_and_acc_rows_are_cached_and_resumed(setup, tmp_path, monkeypatch):
    from accpp import ioi_inputs, pronouns
    from accpp.acc import acc_trace

    tracer, prompts, circuits, _ = setup
    pp = [pronouns.PronounPrompt(text=p.text, name=p.io, gender="male", template=p.template, correct_id=p.io_id,
                                 wrong_id=p.s_id, input_ids=p.input_ids, pos={"name": 1, "end": 9}) for p in prompts]
    plain = pronouns.trace_many(tracer, pp)
    calls = _count_traces(monkeypatch, tracer, stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        pronouns.trace_many(tracer, pp, cache=ItemCache(tmp_path))
    calls.clear()
    calls_left = _count_traces(monkeypatch, tracer)
    resumed = pronouns.trace_many(tracer, pp, cache=ItemCache(tmp_path))
    assert len(calls_left) == N - 2 and [_json(c) for c in resumed] == [_json(c) for c in plain]
    monkeypatch.undo()

    # the ACC size rows (accpp/06): computed once, then read back without an ACC trace
    n_acc = []
    counted_acc = lambda *a, **kw: n_acc.append(1) or acc_trace(*a, **kw)  # noqa: E731
    sizes = pronouns.size_rows(tracer, pp[:2], plain[:2], acc=counted_acc)
    first = pronouns.size_rows(tracer, pp[:2], resumed[:2], acc=counted_acc, cache=ItemCache(tmp_path))
    again = pronouns.size_rows(tracer, pp[:2], resumed[:2], acc=counted_acc, cache=ItemCache(tmp_path))
    assert len(n_acc) == 4 and first == again
    timings = ("acc_seconds", "accpp_seconds")  # of the traces made in this test, not of the stored ones
    assert [{k: v for k, v in r.items() if k not in timings} for r in sizes] == \
        [{k: v for k, v in r.items() if k not in timings} for r in first]

    # ACC rows (accpp/01): stopped after one prompt, then resumed
    made, stop = [], []

    def acc(*a, **kw):
        if stop and len(made) >= 2 * stop[0]:  # two ACC traces (ACC, legacy) per prompt
            raise KeyboardInterrupt("stopped")
        made.append(1)
        return acc_trace(*a, **kw)

    expected = ioi_inputs.acc_comparison(tracer, prompts, circuits, 3, acc=acc)
    made.clear()
    stop.append(1)
    with pytest.raises(KeyboardInterrupt):
        ioi_inputs.acc_comparison(tracer, prompts, circuits, 3, acc=acc, cache=ItemCache(tmp_path))
    made.clear()
    stop.clear()
    got = ioi_inputs.acc_comparison(tracer, prompts, circuits, 3, acc=acc, cache=ItemCache(tmp_path))
    assert len(made) == 2 * 2  # prompts 2 and 3 only
    assert got.drop(columns="acc_seconds").equals(expected.drop(columns="acc_seconds"))
    assert list(got.columns) == list(expected.columns) and (got["acc_seconds"] > 0).all()
