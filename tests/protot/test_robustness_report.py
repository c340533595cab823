"""protot.robustness.report: the rank table by hand, the figures' panels and titles, and the claim
note formatted from the Measurement's own numbers."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from compendium import claims
from protot.robustness import report
from protot.robustness.rules import CHANGING, PRESERVING

SLICES = PRESERVING + CHANGING


def test_rank_table_by_hand():
    ours = {"ProtoT": {"a": 0.1, "b": 0.3, "c": 0.2}}
    theirs = {"ProtoT": {"a": 5.0, "b": 1.0, "c": 3.0}}
    got = report.rank_table(ours, theirs, ["a", "b", "c"])
    assert got[("ProtoT", "ours_rank")].to_dict() == {"a": 3, "b": 1, "c": 2}
    assert got[("ProtoT", "theirs_rank")].to_dict() == {"a": 1, "b": 3, "c": 2}
    assert got[("ProtoT", "ours")].to_dict() == {"a": 0.1, "b": 0.3, "c": 0.2} and got.index.name == "slice"


def _summary(shift: float) -> pd.DataFrame:
    mean = pd.Series({s: 0.01 * (i + 1) + shift for i, s in enumerate(SLICES)})
    return pd.DataFrame({"mean": mean, "ci_lo": mean * 0.9, "ci_hi": mean * 1.1})


def test_order_figure_panels_and_titles():
    theirs = {m: {s: float(i) for i, s in enumerate(SLICES)} for m in ("ProtoT", "LLaMA")}
    orders = pd.DataFrame([{"model": "ProtoT", "rho": 1.0, "rho_ci_lo": 0.9, "rho_ci_hi": 1.0, "perm_p": 0.0002},
                           {"model": "LLaMA", "rho": 0.5, "rho_ci_lo": 0.1, "rho_ci_hi": 0.8, "perm_p": 0.13}])
    fig = report.order_figure({"ProtoT": _summary(0.0), "LLaMA": _summary(0.005)}, theirs, orders, title="T")
    a, b, last = fig.axes
    assert a.get_title() == "ProtoT: rho 1.00 (95% CI 0.90..1.00), p 0.000"
    assert b.get_title() == "LLaMA: rho 0.50 (95% CI 0.10..0.80), p 0.130"
    assert [t.get_text() for t in last.get_xticklabels()] == list(SLICES) and last.get_yscale() == "log"
    assert fig._suptitle.get_text() == "T"
    plt.close(fig)


def test_metrics_figure_one_panel_per_metric():
    summary = pd.concat([_summary(0.0).assign(model="ProtoT", metric=c) for c in ("js", "overlap", "spearman", "top1")]
                        ).rename_axis("slice").reset_index()
    authors = pd.DataFrame([(s, "ProtoT", c, 1.0, "preserved" if s in PRESERVING else "changed")
                            for s in SLICES for c in ("js", "overlap", "spearman")],
                           columns=["type", "model", "metric", "value", "meaning"])
    fig = report.metrics_figure(summary, authors)
    assert [ax.get_title() for ax in fig.axes] == ["js", "overlap", "spearman", "top1"]
    assert fig.axes[0].get_ylabel() == "ours: js (nats)"
    # js: seven filled points and three open ones; top1: the authors give none for ProtoT here
    assert [len(c.get_offsets()) for c in fig.axes[0].collections] == [7, 3]
    assert [len(c.get_offsets()) for c in fig.axes[3].collections] == [0, 0]
    plt.close(fig)


def test_benchmark_note_is_formatted_from_the_measurement():
    order = {"ProtoT": {"rho": 0.5, "rho_ci_lo": 0.25, "rho_ci_hi": 0.75, "perm_p": 0.125}}
    ev = {"records_per_slice": {s: 500 for s in SLICES},
          "distinct_pairs_per_slice": {s: 100 + i for i, s in enumerate(SLICES)},
          "order": order, "directions_undecided_or_tied": 2,
          "tag_flip_directions": [{"slice": "gender", "ours": "above", "theirs": "above"}],
          "rule_pairs": {"values": {"min_order_rho": 0.25, "min_order_rho_ci_low": 0.0, "min_order_rho_ci_high": 0.5,
                                    "direction_matches": 1, "direction_mismatches": 2},
                         "order": order, "control_separation": {"ProtoT": {"diff": 0.01, "ci_lo": -0.02, "ci_hi": 0.03}}}}
    values = {"min_pairs_per_type": 100, "min_order_rho": 0.5, "min_order_rho_ci_low": 0.25, "min_order_rho_ci_high": 0.75,
              "max_order_perm_p": 0.125, "direction_matches": 4, "direction_mismatches": 0}
    m = claims.Measurement(claim="protot/robustness-jsd", values=values, evidence=ev)
    note = report.benchmark_note(m, not_compared=["deltanet-fla-authors-small"], models={"ProtoT": "models/p"})
    assert note.startswith("Primary, the authors' inputs as released: 3500 meaning-preserving records (721 distinct; "
                           "fewest distinct in a slice 100) and 1500 tag flips;")
    for part in ("ProtoT rho 0.50 [0.25, 0.75] p 0.125", "smallest 0.50 [0.25, 0.75], largest p 0.125",
                 "4 slices on the authors' side, 0 opposite, 2 undecided or tied", "gender above (theirs above)",
                 "smallest 0.25 [0.00, 0.50]", "1 on the authors' side, 2 opposite", "ProtoT 0.0100 [-0.0200, 0.0300]",
                 "Not compared (not in the protocol, or not committed yet): deltanet-fla-authors-small.", "Models: models/p."):
        assert part in note, part
    with pytest.raises(KeyError):
        report.benchmark_note(claims.Measurement(claim="protot/robustness-jsd", values=values, evidence={}),
                              not_compared=[], models={})
