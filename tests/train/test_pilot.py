"""The mixer-variant pilot's decision rule, records and rendering (the runs themselves are hours)."""
import json

import pandas as pd
import pytest

from protot.models import count_parameters
from protot.train import pilot


def test_choose_prefers_the_papers_variant_within_five_percent():
    assert pilot.choose({"default": 100.0, "shared-past": 104.9}) == ("shared-past", pytest.approx(1.049))
    assert pilot.choose({"default": 100.0, "shared-past": 90.0})[0] == "shared-past"
    assert pilot.choose({"default": 100.0, "shared-past": 105.0})[0] == "shared-past"   # "more than 5%" excludes 5%
    assert pilot.choose({"default": 100.0, "shared-past": 105.1})[0] == "default"


@pytest.mark.parametrize("ppl, msg", [({"default": 100.0}, "shared-past"),
                                      ({"default": float("nan"), "shared-past": 1.0}, "positive finite"),
                                      ({"default": 100.0, "shared-past": -3.0}, "positive finite")])
def test_choose_rejects_bad_input(ppl, msg):
    with pytest.raises(ValueError, match=msg):
        pilot.choose(ppl)


def test_variant_of_reads_the_config():
    assert pilot.variant_of({"shared_keys": False, "include_current": True}) == "default"
    assert pilot.variant_of({"shared_keys": True, "include_current": False, "intermediate_size": 792}) == "shared-past"
    with pytest.raises(ValueError, match="no pilot variant"):
        pilot.variant_of({"shared_keys": True, "include_current": True})


def test_shared_past_width_matches_the_default_parameter_count():
    """The override's intermediate_size is the matched width: the counts differ by at most half a width
    step (8 units of SwiGLU width: 3 x 8 x hidden parameters per layer)."""
    from protot.models import build_model

    ov = pilot.VARIANTS["shared-past"]
    shape = {"num_hidden_layers": 4}
    import torch
    with torch.device("meta"):
        a = count_parameters(build_model("protot", "small", 256, **shape, **pilot.VARIANTS["default"]))["non_embedding"]
        b = count_parameters(build_model("protot", "small", 256, **shape, **ov))["non_embedding"]
    assert abs(b - a) <= 3 * 8 * 256 * 4 / 2


def test_learning_curve_keeps_the_last_record_of_a_resumed_step(tmp_path):
    rows = [{"step": 1, "tokens": 10, "loss": 5.0}, {"step": 2, "tokens": 20, "loss": 4.0},
            {"step": 2, "tokens": 20, "loss": 3.9},   # re-logged after a resume
            {"step": 2, "split": "validation", "loss": 4.1, "ppl": 60.3}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    c = pilot.learning_curve(tmp_path)
    assert list(c.step) == [1, 2] and c.loss.tolist() == [5.0, 3.9]
    assert pd.isna(c.val_ppl[0]) and c.val_ppl[1] == 60.3


def _row(variant, ppl, cost):
    return {"variant": variant, "run": f"pilot-{variant}", "step": 1000, "tokens": 2048000,
            "non_embedding_params": 3_000_000, "val_ppl": ppl, "val_tokens": 65280, "bits_per_byte": 1.234,
            "loss_positions_128_255": 5.1, "replaced_prefix_cost_nats": cost, "replaced_prefix_ci_low": cost - 0.01,
            "replaced_prefix_ci_high": cost + 0.01, "context_effect_nats": 0.2, "context_effect_ci_low": 0.1,
            "context_effect_ci_high": 0.3, "context_effect_contexts": 67, "coherence_margin": 0.05,
            "null_entropy_gap": 0.004}


def test_render_formats_every_number_from_the_record():
    ppl = {"default": 211.37, "shared-past": 219.91}
    chosen, ratio = pilot.choose(ppl)
    rec = {"profile": "cpu-hour", "rule": pilot.RULE, "max_ppl_ratio": pilot.MAX_PPL_RATIO, "ppl_ratio": ratio,
           "chosen": chosen, "variants": [_row("default", 211.37, 0.051), _row("shared-past", 219.91, 0.077)],
           "commands": pilot.commands(), "provenance": {"git_revision": "0123456789abcdef+dirty"}}
    md = pilot.render(rec)
    assert "211.4" in md and "219.9" in md and "+0.051" in md and "+0.077" in md
    assert f"{ratio:.4f}" in md and "**Chosen: `shared-past`**" in md and "0123456789ab+dirty" in md
    assert all(f"--set {k}={v}" in md for k, v in pilot.VARIANTS["shared-past"].items())
