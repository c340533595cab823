"""The claims' measure_* functions of the ProtoT notebooks 01-04, on tiny hand-made inputs.

Each test recomputes the Measurement's values independently (by hand or another route), checks that
the ledger's check can read them (every quantity present, of the right type), and feeds bad input.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from compendium import claims
from tests.ledger_helpers import fits_ledger




# ----------------------------------------------------------------------------- 01_mixer_derivation
def test_forms_agree():
    from protot.mixer import measure_forms_agree

    agree = pd.DataFrame(dict(form=["quadratic", "chunk"], max_abs_diff=[2e-15, 5e-16], scale=[1.5, 0.7]))
    steps = {"step 1": {"a": 1e-16, "b": 3e-15}, "step 3": {"c": 0.0}}
    m = measure_forms_agree(agree, steps, config=dict(T=8))
    assert m.values == {"max_abs_diff": 3e-15, "output_scale": 0.7}
    assert m.evidence == {"step 1": steps["step 1"], "step 3": steps["step 3"], "full mixer, worst case": 2e-15}
    assert m.config == dict(T=8)
    fits_ledger(m)
    assert measure_forms_agree(agree, {}).values["max_abs_diff"] == 2e-15
    with pytest.raises(ValueError, match="not finite"):
        measure_forms_agree(agree, {"step": {"x": float("nan")}})
    with pytest.raises(ValueError, match="scale"):
        measure_forms_agree(agree.drop(columns=["scale"]), steps)


def _cost():
    rows = []
    for form, mem_exp, time_exp, Ts in (("chunk", 1.0, 1.1, [1, 2, 4, 8]), ("quadratic", 2.0, 1.9, [1, 2, 4]),
                                         ("recurrent", 1.0, 0.9, [2, 4])):
        rows += [dict(form=form, T=T * 1000, seconds=3e-4 * T ** time_exp, saved_bytes=100 * T ** mem_exp) for T in Ts]
    return pd.DataFrame(rows)


def test_linear_cost():
    from protot.perf import bench

    cost = _cost()
    # a wild chunk time below the fit's start is left out: the fit starts at T = 2000
    cost.loc[(cost.form == "chunk") & (cost["T"] == 1000), "seconds"] = 1.0
    m = bench.measure_linear_cost(cost, {"chunk": 2000, "quadratic": 0, "recurrent": 0}, config=dict(clock="thread"))
    assert m.values["chunk_memory_slope"] == pytest.approx(1.0, abs=1e-12)
    assert m.values["quadratic_memory_slope"] == pytest.approx(2.0, abs=1e-12)
    assert m.evidence["chunk_time_slope"] == pytest.approx(1.1, abs=1e-12)
    assert m.evidence["quadratic_time_slope"] == pytest.approx(1.9, abs=1e-12)
    assert m.evidence["recurrent_time_slope"] == pytest.approx(0.9, abs=1e-12)
    assert "fitted from T = 2000" in m.note and "memory slope 1.00" in m.note
    fits_ledger(m)
    with pytest.raises(ValueError, match="fewer than two lengths"):
        bench.cost_slopes(cost, {"chunk": 8000})
    with pytest.raises(ValueError, match="recurrent"):
        bench.measure_linear_cost(cost[cost.form != "recurrent"], {"chunk": 0})
    with pytest.raises(ValueError, match="saved_bytes"):
        bench.cost_slopes(cost.drop(columns=["saved_bytes"]), {})


def _decode_rounds():
    """Three timed rounds at three contexts; per round ProtoT's 8192 / 256 ratios are 1.2, 0.75, 1.0 and
    LLaMA's 8, 2, 4 (1024 lies between and never enters a ratio)."""
    rows = []
    for arch, short, mid, long in (("protot", [0.010, 0.020, 0.010], [0.5, 0.5, 0.5], [0.012, 0.015, 0.010]),
                                   ("llama", [0.010, 0.020, 0.010], [0.5, 0.5, 0.5], [0.080, 0.040, 0.040])):
        for ctx, times in ((256, short), (1024, mid), (8192, long)):
            rows += [dict(arch=arch, context=ctx, round=r + 1, sec_per_token=s) for r, s in enumerate(times)]
    return pd.DataFrame(rows)


def test_decode_constant_is_the_geometric_mean_of_per_round_ratios_by_hand():
    from protot.perf import bench

    decode = _decode_rounds()
    ratios = bench.round_ratios(decode.sample(frac=1, random_state=0))
    assert ratios["protot"].tolist() == pytest.approx([1.2, 0.75, 1.0], rel=1e-12)
    assert ratios["llama"].tolist() == pytest.approx([8.0, 2.0, 4.0], rel=1e-12)
    m = bench.measure_decode_constant(decode.sample(frac=1, random_state=1), config=dict(rounds=3), n_boot=400, seed=2)
    assert m.values["protot_time_ratio"] == pytest.approx(0.9 ** (1 / 3), rel=1e-12)   # (1.2 x 0.75 x 1.0)^(1/3)
    assert m.values["llama_time_ratio"] == pytest.approx(4.0, rel=1e-12)               # (8 x 2 x 4)^(1/3)
    assert m.values["n_rounds"] == 3
    # the interval: rounds resampled, the mean of the log ratios, exponentiated
    logs = np.log([1.2, 0.75, 1.0])
    means = logs[np.random.default_rng(2).integers(0, 3, size=(400, 3))].mean(1)
    want = np.exp(np.quantile(means, [0.025, 0.975]))
    assert (m.values["protot_time_ratio_ci_low"], m.values["protot_time_ratio_ci_high"]) == pytest.approx(tuple(want), rel=1e-12)
    assert m.values["protot_time_ratio_ci_low"] < m.values["protot_time_ratio"] < m.values["protot_time_ratio_ci_high"]
    # twelve rounds (with three, both ends are the extreme ratios for most seeds): the seed is the one given
    r = np.random.default_rng(9).uniform(0.8, 1.3, size=12)
    many = pd.DataFrame([dict(arch=a, context=c, round=i, sec_per_token=0.01 * (x if c == 8192 and a == "protot" else 1.0)
                              * (3.0 if c == 8192 and a == "llama" else 1.0))
                         for a in ("protot", "llama") for c in (256, 8192) for i, x in enumerate(r)])
    v = bench.measure_decode_constant(many, n_boot=500, seed=7).values
    want = np.exp(np.quantile(np.log(r)[np.random.default_rng(7).integers(0, 12, size=(500, 12))].mean(1), [0.025, 0.975]))
    assert (v["protot_time_ratio_ci_low"], v["protot_time_ratio_ci_high"]) == pytest.approx(tuple(want), rel=1e-12)
    assert v["n_rounds"] == 12 and v["llama_time_ratio"] == pytest.approx(3.0)
    assert m.evidence["median_ms_per_token"]["llama"][8192] == pytest.approx(40.0)
    assert m.config == dict(rounds=3, n_boot=400, seed=2)
    assert "8192 over 256" in m.note and "3 rounds" in m.note and "ProtoT 0.965x" in m.note and "LLaMA 4.000x" in m.note
    fits_ledger(m)
    claim = claims.get_claim("protot/decode-constant-time")
    assert claim.check.conditions[0].interval == ("protot_time_ratio_ci_low", "protot_time_ratio_ci_high")


def test_decode_constant_refuses_tables_it_cannot_pair():
    from protot.perf import bench

    decode = _decode_rounds()
    with pytest.raises(ValueError, match="protot must be timed at two or more contexts in every round"):
        bench.round_ratios(decode[(decode.context == 256) | (decode.arch == "llama")])
    with pytest.raises(ValueError, match="llama must be timed at two or more contexts in every round"):
        bench.round_ratios(decode.iloc[:-1])                   # llama's last round lacks 8192
    with pytest.raises(ValueError, match="more than one time"):
        bench.round_ratios(pd.concat([decode, decode.iloc[:1]]))
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['round'\]"):
        bench.round_ratios(decode.drop(columns=["round"]))
    with pytest.raises(ValueError, match="llama"):
        bench.measure_decode_constant(decode[decode.arch == "protot"])


def test_decode_times_per_round_and_the_best_round(monkeypatch):
    import torch

    from protot.perf import bench
    from protot.models import build_model

    torch.manual_seed(0)
    model = build_model("protot", "tiny", 64)
    got = bench.decode_round_times(model, [8, 16], 64, rounds=3, tokens_per_round=2)
    assert list(got) == [8, 16] and all(len(v) == 3 and min(v) > 0 for v in got.values())
    with pytest.raises(ValueError, match="at least one timed round"):
        bench.decode_round_times(model, [8], 64, rounds=0)
    monkeypatch.setattr(bench, "decode_round_times", lambda *a, **k: {8: [0.3, 0.1, 0.2], 16: [0.5, 0.6, 0.4]})
    assert bench.decode_times(model, [8, 16], 64, rounds=3) == {8: 0.1, 16: 0.4}


# ----------------------------------------------------------------------------- 02_training
def _ppl_table():
    return pd.DataFrame([
        {"model": a, "source": "trained here (cpu)", "val ppl": v, "val bits/byte": v / 100, "WikiText-2 ppl": 2 * v}
        for a, v in (("protot", 120.0), ("llama", 100.0), ("deltanet", 110.0), ("mamba", 105.0))
    ] + [{"model": "llama", "source": "models/llama-cpu", "val ppl": 40.0, "val bits/byte": 0.4, "WikiText-2 ppl": 80.0}])


def test_ppl():
    from protot.train import evaluate

    man = {"llama-cpu": {"arch": "llama", "eval": {"validation": {"ppl": 40.0}}, "tokens_seen": 123}}
    m = evaluate.measure_ppl("llama", _ppl_table(), pd.DataFrame(), 900.0, man, False, "tiny setting.")
    assert m.claim == "protot/ppl-llama-large"
    assert m.values == {"val_ppl": 100.0, "comparable_setup": False}  # the row trained here, not the committed one
    assert m.evidence == {"wikitext2_ppl": 200.0, "val_bits_per_byte": 1.0, "unigram_ppl": 900.0,
                          "models/llama-cpu val_ppl": 40.0, "models/llama-cpu tokens": 123}
    assert m.note == "validation perplexity 100.0; tiny setting."
    fits_ledger(m)
    p = evaluate.measure_ppl("protot", _ppl_table(), pd.DataFrame(), 900.0, man, False, "")
    assert p.values["val_ppl"] == 120.0 and "models/llama-cpu val_ppl" not in p.evidence
    snapshot = {"llama-cpu": {"arch": "llama", "eval": {}, "tokens_seen": 99}}          # no evaluation yet
    assert "models/llama-cpu val_ppl" not in evaluate.measure_ppl(
        "llama", _ppl_table(), pd.DataFrame(), 900.0, snapshot, False, "").evidence
    with pytest.raises(ValueError, match="no perplexity claim"):
        evaluate.measure_ppl("mamba", _ppl_table(), pd.DataFrame(), 900.0, {}, False, "")
    with pytest.raises(ValueError, match="no model 'deltanet'"):
        evaluate.measure_ppl("deltanet", _ppl_table().iloc[[0, 1]], pd.DataFrame(), 900.0, {}, False, "")
    with pytest.raises(ValueError, match="val ppl"):
        evaluate.measure_ppl("llama", _ppl_table().drop(columns=["val ppl"]), pd.DataFrame(), 900.0, {}, False, "")


def _manifest(arch, non_embedding=4_490_000, **changes):
    m = {"arch": arch, "steps": 2930, "planned_steps": 2930, "tokens_seen": 12_001_280,
         "eval": {"validation": {"ppl": {"protot": 90.0, "llama": 80.0}[arch]}},
         "data": {"data_key": "k"}, "tokenizer": {"sha256": "t"},
         "parameters": {"non_embedding": non_embedding},
         "train_config": {"arch": arch, "context": 256, "batch_size": 16, "lr": 2e-3, "seed": 0,
                          "model_overrides": [["shared_keys", True]] if arch == "protot" else [],
                          "eval_every": 250}}
    for k, v in changes.items():
        m[k] = v
    return m


def test_equal_budget_names_every_difference():
    from protot.train import evaluate

    pair = {"protot-authors-small": _manifest("protot"), "llama-authors-small": _manifest("llama", 4_488_448)}
    assert evaluate.equal_budget(pair) == (True, [])
    cases = {
        "not finished": dict(steps=600),
        "no evaluation": dict(eval={}),
        "tokens seen": dict(tokens_seen=1),
        "data keys": dict(data={"data_key": "other"}),
        "tokenizers": dict(tokenizer={"sha256": "other"}),
        "training configs": dict(train_config={**_manifest("llama")["train_config"], "lr": 1e-3}),
        "non-embedding": dict(parameters={"non_embedding": 5_000_000}),
    }
    for what, change in cases.items():
        ok, why = evaluate.equal_budget({**pair, "llama-authors-small": _manifest("llama", **change)})
        assert not ok and any(what in w for w in why), (what, why)
    # what may differ: the architecture, its overrides, evaluation and checkpoint cadence
    cadence = {**_manifest("llama")["train_config"], "eval_every": 100}
    assert evaluate.equal_budget({**pair, "llama-authors-small": _manifest("llama", train_config=cadence)})[0]
    with pytest.raises(ValueError, match="at least two"):
        evaluate.equal_budget({"a": _manifest("llama")})


def test_training_protocol_is_the_notebooks_earlier_settings():
    """protot/02's registered training protocol gives the recipe the notebook used before it was registered
    (cpu: the smoke training profile shrunk to 80 steps of 8 x 64 tokens; paper: the paper-large profile),
    for every claim of the notebook that trains here (ppl-ranking has its own protocol), and a smaller
    smoke recipe."""
    from protot.train import config, sweep

    keys = ["protot/ppl-protot-large", "protot/ppl-llama-large", "protot/ppl-deltanet-large"]
    for profile in ("cpu", "paper", "smoke"):
        assert len({str(claims.protocol(k, profile)) for k in keys}) == 1, profile       # one shared block
    cpu, paper, smoke = (claims.protocol(keys[0], p) for p in ("cpu", "paper", "smoke"))
    assert sweep.grid_config(cpu, seed=3) == config.profile(
        "smoke", size="tiny", context=64, batch_size=8, tokens=80 * 8 * 64, warmup_steps=10, eval_every=40,
        eval_blocks=32, ckpt_every=80, seed=3)
    assert sweep.grid_config(paper, seed=3) == config.profile("paper-large", seed=3)
    assert (cpu["eval_blocks"], paper["eval_blocks"], cpu["gen_tokens"], paper["gen_tokens"]) == (64, "all", 24, 60)
    assert cpu["archs"] == paper["archs"] == ["protot", "llama", "deltanet", "mamba"]
    assert cpu["models"] == paper["models"] == ["protot-authors-small", "llama-authors-small"]
    assert claims.protocol("protot/ppl-ranking", "cpu") != cpu                          # its own block
    small = sweep.grid_config(smoke, seed=0)
    assert small.tokens < sweep.grid_config(cpu, seed=0).tokens and small.context == 64 and smoke["eval_blocks"] < 64


# ----------------------------------------------------------------------------- 03_scaling
def test_scaling_trend():
    from protot.train import sweep

    x_p, x_t = np.array([1e3, 4e3, 1.6e4]), np.array([1e5, 2e5, 4e5])
    exps = {"protot": (-0.2, -0.3), "llama": (-0.25, -0.2), "mamba": (-0.15, -0.4)}
    fits = {a: {"params": sweep.fit_power_law(x_p, 50 * x_p ** ep), "tokens": sweep.fit_power_law(x_t, 80 * x_t ** et)}
            for a, (ep, et) in exps.items()}
    m = sweep.measure_scaling_trend(fits, pd.DataFrame(), pd.DataFrame(), ["llama", "mamba"], [1, 2, 400000],
                                    ["s1", "s2"], "cpu")
    assert m.values["params_exponent_ratio"] == pytest.approx(-0.2 / -0.2, abs=1e-9)
    assert m.values["tokens_exponent_ratio"] == pytest.approx(-0.3 / -0.3, abs=1e-9)
    assert m.values["protot_exponent_tokens"] == pytest.approx(-0.3, abs=1e-9)
    assert m.values["min_fit_r2"] == pytest.approx(1.0, abs=1e-9)
    assert m.values["max_baseline_exponent"] == pytest.approx(-0.15, abs=1e-9)
    assert m.values["min_fit_points"] == 3
    assert "at 400,000 tokens" in m.note and "2 sizes ['s1', 's2']" in m.note
    fits_ledger(m)
    # a power law through two points fits them exactly (r2 = 1): min_units asks for three
    two = fits | {"mamba": {"params": sweep.fit_power_law(x_p[:2], [5.0, 3.0]), "tokens": fits["mamba"]["tokens"]}}
    v = sweep.measure_scaling_trend(two, None, None, ["llama", "mamba"], [1], [], "paper").values
    assert v["min_fit_points"] == 2 and two["mamba"]["params"]["r2"] == pytest.approx(1.0)
    status, _, _, reason = claims.evaluate(claims.get_claim("protot/scaling-trend"), v, "paper")
    assert status == claims.INCONCLUSIVE and "min-units" in reason
    with pytest.raises(ValueError, match="mamba"):
        sweep.measure_scaling_trend({k: fits[k] for k in ("protot", "llama")}, None, None, ["llama", "mamba"],
                                    [1], [], "cpu")
    with pytest.raises(ValueError, match="'params' and 'tokens'"):
        sweep.measure_scaling_trend(fits | {"llama": {"params": fits["llama"]["params"]}}, None, None,
                                    ["llama", "mamba"], [1], [], "cpu")


# ----------------------------------------------------------------------------- 04_throughput
def _train():
    tps = {"protot": [100, 150, 200, 220], "llama": [200, 180, 150, 100], "deltanet": [300, 320, 330, None],
           "mamba": [50, 60, None, None]}
    ctx = [2048, 4096, 8192, 16384]
    return pd.DataFrame([dict(arch=a, context=c, tokens_per_s=v) for a, vs in tps.items()
                         for c, v in zip(ctx, vs) if v is not None])


def _decode():
    return pd.DataFrame(dict(arch=["protot", "protot", "llama", "llama"], context=[256, 4096] * 2,
                             seconds_per_token=[0.01, 0.012, 0.01, 0.05]))


def test_throughput_crossover():
    from protot.perf import throughput as tp

    m = tp.measure_throughput_crossover(_train(), _decode(), "here", config=dict(device="cpu"))
    assert m.values == {"protot_llama_ratio_longest": 2.2, "protot_llama_ratio_8k": 200 / 150,
                        "longest_context_both": 16384}
    # behind at 2048 (ratio 1/2) and 4096 (5/6), ahead at 8192 (4/3): log-linear interpolation between the last two
    d0, d1 = math.log(150 / 180), math.log(200 / 150)
    expect = math.exp(math.log(4096) + d0 / (d0 - d1) * math.log(2))
    assert m.evidence["crossover_context"] == round(expect)
    assert m.evidence["direction"] == "ahead already at 8k"
    assert m.evidence["longest context reached"] == {"deltanet": 8192, "llama": 16384, "mamba": 4096, "protot": 16384}
    assert m.evidence["decode_time_growth"] == {"llama": 5.0, "protot": 1.2}
    fits_ledger(m)
    with pytest.raises(ValueError, match="protot and llama"):
        tp.measure_throughput_crossover(_train()[_train().arch != "llama"], _decode(), "here")
    with pytest.raises(ValueError, match="at or below 8192"):
        tp.measure_throughput_crossover(_train().assign(context=_train().context * 8), _decode(), "here")
    with pytest.raises(ValueError, match="empty"):
        tp.measure_throughput_crossover(_train().iloc[:0], _decode(), "here")


def test_deltanet_fastest():
    from protot.perf import throughput as tp

    m = tp.measure_deltanet_fastest(_train(), _decode(), 4.0)
    assert m.values == {"deltanet_fastest": True, "longest_context_all": 4096}
    assert m.evidence["fastest_at_longest_reached"] == "protot at 16384"
    assert m.evidence["tokens_per_s_at_longest_reached"] == {"protot": 220.0, "llama": 100.0}
    assert "budget (4.0 s)" in m.note
    fits_ledger(m)
    slow = _train()
    slow.loc[slow.arch == "mamba", "context"] = [32768, 65536]  # never at a context the others reached
    assert tp.measure_deltanet_fastest(slow, _decode(), 4.0).values == {"deltanet_fastest": False,
                                                                         "longest_context_all": 0}
    with pytest.raises(ValueError, match="tokens_per_s"):
        tp.measure_deltanet_fastest(_train().drop(columns=["tokens_per_s"]), _decode(), 4.0)
