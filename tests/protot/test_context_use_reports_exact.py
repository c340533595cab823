"""protot.context_use, value by value, what is reported: a ContextUse's values, summary and
summary table, every element of the context-use figure, and the committed-model reports (the record
of a model, the whole Markdown text, the files written and kept, the refusals with their whole
messages, the command line), on made reports and stand-ins for the committed models."""
from __future__ import annotations

import json

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch

from protot import context_use as cu
from tests.protot.context_use_standins import STREAM3, _raises, _Table

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (imported once here, not inside the plot test)


# -- ContextUse: values, summary, summary_table -------------------------------------------------------------
def _made(model="m", target=" women", cost=-0.125, **kw) -> cu.ContextUse:
    base = dict(model=model, blocks=3, context=6, split=3, replaced_cost=np.float64(cost), replaced_ci=(-0.5, 0.25),
                loss_true=1.5, target=target, target_contexts=4, context_effect=0.75, context_effect_ci=(0.5, 1.0),
                logp_full=-1.0, logp_short=-1.75, short=2, target_context=5,
                by_position=pd.DataFrame(), by_bin=pd.DataFrame({"first": [1, 2], "last": [1, 3],
                                                                 "position": [1.0, 6 ** 0.5], "loss": [2.0, 1.5],
                                                                 "ci_lo": [1.5, 1.25], "ci_hi": [2.5, 2.0]}),
                per_block=pd.DataFrame())
    return cu.ContextUse(**{**base, **kw})


def test_values_names_every_number_with_its_prefix():
    r = _made(blocks=np.int64(3))
    want = {"replaced_prefix_cost_nats": -0.125, "replaced_prefix_ci_low": -0.5, "replaced_prefix_ci_high": 0.25,
            "context_effect_nats": 0.75, "context_effect_ci_low": 0.5, "context_effect_ci_high": 1.0,
            "context_effect_contexts": 4, "context_use_blocks": 3}
    v = r.values()
    assert v == want and list(v) == list(want)
    assert type(v["replaced_prefix_cost_nats"]) is float               # numpy floats become floats
    assert type(v["context_effect_contexts"]) is int
    assert cu.ContextUse(**{**r.__dict__}).values("x.") == {"x." + k: x for k, x in want.items()}
    assert r.per_target.empty and isinstance(r.per_target, pd.DataFrame)


def test_summary_whole_text():
    assert _made().summary() == (
        "m: replacing tokens 0-2 by another block's changes the loss on tokens 3-5 by -0.1250 nats "
        "(95% CI -0.5000..+0.2500, 3 blocks); log p(' women') with 5 vs the last 2 tokens: +0.7500 nats "
        "(95% CI +0.5000..+1.0000, 4 occurrences)")
    assert _made(target=None).summary() == (
        "m: replacing tokens 0-2 by another block's changes the loss on tokens 3-5 by -0.1250 nats "
        "(95% CI -0.5000..+0.2500, 3 blocks)")


def test_summary_table_one_row_per_report():
    t = cu.summary_table([_made("a"), _made("b", cost=0.5, loss_true=2.0, logp_full=-3.0)])
    assert list(t.columns) == ["model", "loss (tokens split..T-1)", "replaced_prefix_cost_nats",
                               "replaced_prefix_ci_low", "replaced_prefix_ci_high", "context_effect_nats",
                               "context_effect_ci_low", "context_effect_ci_high", "context_effect_contexts",
                               "context_use_blocks", "logp_full", "logp_short"]
    assert t.values.tolist() == [["a", 1.5, -0.125, -0.5, 0.25, 0.75, 0.5, 1.0, 4, 3, -1.0, -1.75],
                                 ["b", 2.0, 0.5, -0.5, 0.25, 0.75, 0.5, 1.0, 4, 3, -3.0, -1.75]]


# -- the plot -----------------------------------------------------------------------------------------------
def test_plot_draws_each_number():
    from matplotlib.colors import to_rgba

    a = _made("a", cost=0.0126)
    b = _made("b", cost=-0.5, context_effect=-0.25, context_effect_ci=(-0.5, 0.125),
              by_bin=pd.DataFrame({"first": [1], "last": [1], "position": [1.0], "loss": [3.0], "ci_lo": [2.0],
                                   "ci_hi": [3.5]}))
    with matplotlib.rc_context({"font.size": 7}):        # the sizes are the plot's own, not the style's
        fig = cu.plot_context_use([a, b])
    assert tuple(fig.get_size_inches()) == pytest.approx((11.0, 3.8), rel=1e-12)
    ax0, ax1 = fig.axes
    assert list(ax0.get_gridspec().get_width_ratios()) == [2, 1]
    # left: one errorbar per report, the doubling bins' losses with their intervals
    c0, c1 = ax0.containers
    line, caps, (bars,) = c0.lines
    assert line.get_xdata().tolist() == [1.0, 6 ** 0.5] and line.get_ydata().tolist() == [2.0, 1.5]
    assert to_rgba(line.get_color()) == to_rgba("C0") and to_rgba(c1.lines[0].get_color()) == to_rgba("C1")
    assert (line.get_linewidth(), line.get_marker(), line.get_markersize()) == (1.2, "o", 4)
    assert [s.tolist() for s in bars.get_segments()] == [[[1.0, 1.5], [1.0, 2.5]], [[6 ** 0.5, 1.25], [6 ** 0.5, 2.0]]]
    assert len(caps) == 2 and all(c.get_markersize() == 6 for c in caps)   # capsize 3: caps 2 * 3 points wide
    assert [t.get_text() for t in ax0.get_legend().get_texts()] == [
        "a: prefix replaced +0.013 nats [-0.500, +0.250]", "b: prefix replaced -0.500 nats [-0.500, +0.250]"]
    assert ax0.get_legend().get_texts()[0].get_fontsize() == 8
    vline = ax0.lines[-1]
    assert vline.get_xdata() == [3, 3] and to_rgba(vline.get_color()) == to_rgba("0.5")
    assert (vline.get_linestyle(), vline.get_linewidth()) == (":", 1)
    assert ax0.get_xscale() == "log"
    assert ax0.get_xlabel() == "position of the predicted token (doubling bins)"
    assert ax0.get_ylabel() == "next-token loss (nats)"
    assert ax0.get_title() == "Loss by position (3 blocks, 95% CI)" and ax0.title.get_fontsize() == 10
    # right: the context effects as bars with their intervals
    assert [p.get_height() for p in ax1.patches] == [0.75, -0.25]
    assert [to_rgba(p.get_facecolor()) for p in ax1.patches] == [to_rgba("C0"), to_rgba("C1")]
    (err,) = ax1.containers[1:]
    eline, ecaps, (ebars,) = err.lines
    assert eline is None                                                # intervals only, no line
    assert [s.tolist() for s in ebars.get_segments()] == [[[0.0, 0.5], [0.0, 1.0]], [[1.0, -0.5], [1.0, 0.125]]]
    assert to_rgba(ebars.get_colors()[0]) == to_rgba("k") and len(ecaps) == 2 and all(c.get_markersize() == 8 for c in ecaps)
    hline = ax1.lines[-1]
    assert hline.get_ydata() == [0, 0] and to_rgba(hline.get_color()) == to_rgba("0.5") and hline.get_linewidth() == 0.8
    assert [t.get_text() for t in ax1.get_xticklabels()] == ["a", "b"] and list(ax1.get_xticks()) == [0, 1]
    assert ax1.get_ylabel() == "log p(' women'): 5 - last 2 tokens (nats)"
    assert ax1.get_title() == "Context effect on the target word" and ax1.title.get_fontsize() == 10
    plt.close(fig)
    # given axes and colours: drawn there
    fig2, axes = plt.subplots(1, 2)
    assert cu.plot_context_use([a, b], axes=axes, colors=["red", "blue", "green"]) is fig2
    assert to_rgba(axes[0].containers[0].lines[0].get_color()) == to_rgba("red")
    assert [to_rgba(p.get_facecolor()) for p in axes[1].patches] == [to_rgba("red"), to_rgba("blue")]
    plt.close(fig2)


# -- committed-model reports --------------------------------------------------------------------------------
BIN = pd.DataFrame({"first": [1, 2], "last": [1, 3], "position": [1.0, 6 ** 0.5], "loss": [2.0, 1.2345678],
                    "ci_lo": [1.5, 1.25], "ci_hi": [2.5, 2.0]})


MAN = {"weights_sha256": "ab" * 32, "steps": 10, "planned_steps": 20, "tokens_seen": 500000, "status": "in-progress"}


def test_model_report_record(monkeypatch):
    from protot.train import pretrained

    got = {}
    model, tok = _Table(), object()
    monkeypatch.setattr(pretrained, "load", lambda n: pretrained.Pretrained(n, model, tok, dict(MAN)))

    def fake_context_use(m, stream, **kw):
        got.update(model=m, stream=stream, **kw)
        return _made(kw["name"], cost=-0.5, by_bin=BIN)

    monkeypatch.setattr(cu, "context_use", fake_context_use)
    r, rec = cu.model_report("b-m", STREAM3)
    assert got.pop("stream") is STREAM3
    assert got == {"model": model, "name": "b-m", "tokenizer": tok, "blocks": 64, "seed": 0}
    assert r.model == "b-m"
    assert rec == {"model": "b-m", "weights_sha256": "ab" * 32, "steps": 10, "planned_steps": 20,
                   "tokens_seen": 500000, "status": "in-progress", "split": "validation", "seed": 0, "context": 6,
                   "replaced_prefix": [0, 2], "short_context": 2, "target": " women",
                   "loss_positions_split_to_end": 1.5, "replaced_prefix_cost_nats": -0.5,
                   "replaced_prefix_ci_low": -0.5, "replaced_prefix_ci_high": 0.25, "context_effect_nats": 0.75,
                   "context_effect_ci_low": 0.5, "context_effect_ci_high": 1.0, "context_effect_contexts": 4,
                   "context_use_blocks": 3,
                   "loss_by_bin": [{"first": 1, "last": 1, "position": 1.0, "loss": 2.0, "ci_lo": 1.5, "ci_hi": 2.5},
                                   {"first": 2, "last": 3, "position": 2.44949, "loss": 1.23457, "ci_lo": 1.25,
                                    "ci_hi": 2.0}]}                # to 5 places: sqrt(6) = 2.449489..., 1.2345678
    # a bare manifest: the missing fields are None and the status is final
    monkeypatch.setattr(pretrained, "load", lambda n: pretrained.Pretrained(n, model, tok, {"weights_sha256": "0" * 64}))
    _, rec = cu.model_report("a-m", STREAM3, blocks=3, seed=4)
    assert got["blocks"] == 3 and got["seed"] == 4 and rec["seed"] == 4
    assert (rec["steps"], rec["planned_steps"], rec["tokens_seen"], rec["status"]) == (None, None, None, "final")


RECORDS = [
    {"model": "a-m", "status": "final", "steps": 100, "planned_steps": 100, "tokens_seen": 1235001,
     "loss_positions_split_to_end": 3.14159, "replaced_prefix_cost_nats": 0.0126, "replaced_prefix_ci_low": -0.0031,
     "replaced_prefix_ci_high": 0.0282, "context_effect_nats": -0.5, "context_effect_ci_low": -0.75,
     "context_effect_ci_high": -0.25, "context_effect_contexts": 12},
    {"model": "b-m", "status": "in-progress", "steps": 10, "planned_steps": 20, "tokens_seen": 500000,
     "loss_positions_split_to_end": 2.0, "replaced_prefix_cost_nats": -0.1, "replaced_prefix_ci_low": -0.2,
     "replaced_prefix_ci_high": 0.0, "context_effect_nats": 1.0, "context_effect_ci_low": 0.5,
     "context_effect_ci_high": 1.5, "context_effect_contexts": 3},
]


HEADER = (
    "# How much the committed models use their context\n"
    "\n"
    "Generated by `python -m protot.context_use` from each model's `CONTEXT_USE.json`; do not edit. "
    "Validation split; the replaced-half cost is the loss change on positions 128-255 when positions "
    "0-127 are another block's (paired over blocks); the context effect is log p(\" women\") with 128 "
    "tokens of context minus with the last 8 (paired over occurrences); 95% bootstrap intervals. "
    "These are the power preconditions of the concept, ablation and robustness claims.\n"
    "\n"
    "| model | status | tokens seen | loss, positions 128-255 | replaced-half cost (nats) | context effect on \" women\" (nats) |\n"
    "|---|---|---|---|---|---|\n")


def test_render_reports_whole_text():
    # 1235001 / 1e6 = 1.235001 -> 1.24 M; 0.0126 -> +0.013; 500000 / 1e6 = 0.50 M; an unfinished model shows its steps
    assert cu.render_reports(RECORDS) == HEADER + (
        "| `a-m` | final | 1.24 M | 3.142 | +0.013 [-0.003, +0.028] | -0.500 [-0.750, -0.250] (n=12) |\n"
        "| `b-m` | in-progress (step 10 of 20) | 0.50 M | 2.000 | -0.100 [-0.200, +0.000] | "
        "+1.000 [+0.500, +1.500] (n=3) |\n")
    assert cu.render_reports([]) == HEADER


def _committed(monkeypatch, tmp_path, names=("a-m", "b-m")):
    """Committed-model stand-ins: pretrained's folder, list and manifests, the validation stream and
    model_report (a made report and its record per name)."""
    from protot.train import packing, pretrained

    root = tmp_path / "models"
    for n in names:
        (root / n).mkdir(parents=True)
    man = {n: {"weights_sha256": f"{i:064x}"} for i, n in enumerate(names)}
    calls = []
    monkeypatch.setattr(pretrained, "models_dir", lambda: root)
    monkeypatch.setattr(pretrained, "available", lambda: list(names))
    monkeypatch.setattr(pretrained, "manifest", lambda n: man[n])
    monkeypatch.setattr(packing, "token_stream", lambda split: {"validation": STREAM3}[split])

    def fake_report(name, stream, *, blocks, seed):
        calls.append((name, stream is STREAM3, blocks, seed))
        rec = {**RECORDS[names.index(name) % 2], "model": name, "weights_sha256": man[name]["weights_sha256"]}
        return _made(name), rec

    monkeypatch.setattr(cu, "model_report", fake_report)
    return root, man, calls


def test_write_reports_writes_every_file(monkeypatch, tmp_path, capsys):
    from PIL import Image

    import matplotlib

    root, man, calls = _committed(monkeypatch, tmp_path)
    # the house style (compendium.plotting) crops saved figures to their contents, which depends on the fonts;
    # uncropped, the size is the figure's own (set here, whatever ran before in this process)
    monkeypatch.setitem(matplotlib.rcParams, "savefig.bbox", "standard")
    records = cu.write_reports()
    assert calls == [("a-m", True, 64, 0), ("b-m", True, 64, 0)]
    assert [r["model"] for r in records] == ["a-m", "b-m"]
    for rec in records:
        assert (root / rec["model"] / "CONTEXT_USE.json").read_text() == json.dumps(rec, indent=2) + "\n"
    assert (root / "CONTEXT_USE.md").read_text() == cu.render_reports(records)
    assert capsys.readouterr().out == _made("a-m").summary() + "\n" + _made("b-m").summary() + "\n"
    with Image.open(root / "context_use.png") as im:
        assert im.size == (1210, 418)                  # 11 x 3.8 inches at 110 dpi
    assert sorted(p.name for p in root.iterdir()) == ["CONTEXT_USE.md", "a-m", "b-m", "context_use.png"]


def test_write_reports_of_some_models_keeps_the_others_records(monkeypatch, tmp_path, capsys):
    root, man, calls = _committed(monkeypatch, tmp_path, ("a-m", "b-m", "c-m"))
    earlier = {**RECORDS[1], "model": "a-m", "weights_sha256": man["a-m"]["weights_sha256"]}
    (root / "a-m" / "CONTEXT_USE.json").write_text(json.dumps(earlier))            # a report from an earlier run
    cu.write_reports(["c-m"], blocks=5, seed=2)
    assert calls == [("c-m", True, 5, 2)]
    # the summary covers the models that have a report, in the committed order; b-m has none
    md = (root / "CONTEXT_USE.md").read_text()
    assert md.count("| `") == 2 and md.index("`a-m`") < md.index("`c-m`") and "`b-m`" not in md
    (root / "context_use.png").unlink()
    assert cu.write_reports([]) == [earlier, json.loads((root / "c-m" / "CONTEXT_USE.json").read_text())]
    assert calls == [("c-m", True, 5, 2)]                                  # no model run: no figure
    assert not (root / "context_use.png").exists()
    assert not (root / "b-m" / "CONTEXT_USE.json").exists()


def test_write_reports_refusals(monkeypatch, tmp_path):
    root, man, calls = _committed(monkeypatch, tmp_path)
    with _raises("no committed model named ['x', 'y'] (committed: ['a-m', 'b-m'])"):
        cu.write_reports(["a-m", "x", "y"])
    assert calls == []
    cu.write_reports(["a-m"])
    man["a-m"]["weights_sha256"] = "f" * 64
    path = root / "a-m" / "CONTEXT_USE.json"
    with _raises(f"{path} was made from other weights than models/a-m's: re-run `python -m protot.context_use a-m`"):
        cu.write_reports(["b-m"])


def test_main_reads_its_arguments(monkeypatch, capsys):
    got, threads = [], []
    monkeypatch.setattr(cu, "write_reports", lambda names, **kw: got.append((names, kw)))
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    assert cu.main([]) == 0
    assert cu.main(["a-m", "b-m", "--blocks", "5", "--seed", "2", "--threads", "3"]) == 0
    assert got == [(None, {"blocks": 64, "seed": 0}), (["a-m", "b-m"], {"blocks": 5, "seed": 2})]
    assert threads == [1, 3]
    with pytest.raises(SystemExit) as e:
        cu.main(["--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: python -m protot.context_use [-h] [--blocks BLOCKS] [--seed SEED] "
                          "[--threads THREADS] [names ...] Write the context-use report of committed models "
                          "(models/<name>/CONTEXT_USE.json, models/CONTEXT_USE.md, models/context_use.png). "
                          "positional arguments: names committed model names (default: all)")
