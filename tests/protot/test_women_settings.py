"""protot.women's settings: one WomenSettings for every step of measure_women (the whole measurement on
a planted model: test_concepts_labels.py::test_measure_women_on_a_planted_model)."""
import dataclasses

import pytest

from compendium import claims
from protot import women as W

# the keys every recorded women result's config has had
CONFIG_KEYS = ["model", "word", "pairs", "male_words", "coordinators", "human_groups", "gender_check_words",
               "label_blocks", "label_context", "word_windows", "word_context", "min_ratio", "min_top_share", "top",
               "min_count", "dead_floor", "select_windows", "select_context", "context", "max_contexts",
               "other_contexts", "coordination_contexts", "gender_contexts", "n_controls", "reinit_seeds", "ppl_blocks",
               "ppl_context", "effect_context", "short", "n_boot", "seed"]


def test_the_settings_record_the_config_the_results_have():
    s = W.WomenSettings(seed=4, model_name="m", reinit_seeds=(4, 5), floor=0.2)
    c = s.config()
    assert list(c) == CONFIG_KEYS
    assert (c["model"], c["seed"], c["reinit_seeds"], c["dead_floor"]) == ("m", 4, [4, 5], 0.2)
    assert c["pairs"] == [list(p) for p in s.pairs] and c["coordination_contexts"] == s.coordination_n


def test_every_protocol_setting_is_a_settings_field():
    fields = {f.name for f in dataclasses.fields(W.WomenSettings)}
    for profile in ("smoke", "cpu", "paper"):
        kw = W.women_settings(claims.protocol("protot/women-prototype-ablation", profile), seed=1)
        assert set(kw) <= fields
        s = W.WomenSettings(**kw)
        assert s.reinit_seeds == kw["reinit_seeds"] and s.n_controls == kw["n_controls"]


def test_an_unknown_setting_is_refused_before_anything_runs():
    with pytest.raises(TypeError, match="windows"):
        W.measure_women(None, None, None, None, windows=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        W.WomenSettings().seed = 1
